"""Grouping and ordering: NoOp, group, tuple, control_dependencies."""
from __future__ import annotations

import builtins

from asyncflow.graph import register_op
from asyncflow.graph.graph import Operation, Tensor, get_default_graph
from asyncflow.ops.array import identity
from asyncflow.ops.construct import make_op

register_op("NoOp", infer=lambda op: [])


def no_op(name=None):
    """An op that does nothing; useful as a target with control inputs."""
    return make_op("NoOp", (), None, name, "NoOp")


def _as_op(item):
    if hasattr(item, "_as_graph_element"):
        item = item._as_graph_element()
    if isinstance(item, Tensor):
        return item.op
    if isinstance(item, Operation):
        return item
    raise TypeError(f"Expected an Operation or Tensor, got {item!r}")


def group(*inputs, name=None):
    """An op that runs after all ``inputs`` (ops or tensors, or nested lists of them, as TF1
    takes: BERT's and GPT-2's ``tf.group([ops, [more]])``) have run."""
    ops = [_as_op(item) for item in _flatten(inputs)]
    graph = ops[0].graph if ops else get_default_graph()
    with graph.control_dependencies(None):
        return graph.create_op("NoOp", (), None, name=name or "group_deps",
                               control_inputs=ops)


def _flatten(items):
    for item in items:
        if isinstance(item, (list, builtins.tuple)) and not hasattr(item, "op"):
            yield from _flatten(item)
        elif item is not None:
            yield item


def tuple(tensors, name=None, control_inputs=None):  # noqa: A001 - TF1 spelling
    """Tensors with the same values, each available only once all of them are computed."""
    tensors = list(tensors)
    real = [t for t in tensors if t is not None]
    deps = [t.op for t in real] + [_as_op(c) for c in (control_inputs or [])]
    if not real:
        return tensors
    graph = real[0].graph
    with graph.name_scope(name or "tuple"):
        gate = group(*deps)
        out = []
        for tensor in tensors:
            if tensor is None:
                out.append(None)
                continue
            with graph.control_dependencies([gate]):
                out.append(identity(tensor))
    return out


def control_dependencies(control_inputs):
    """Context manager: ops created inside run after ``control_inputs`` (None clears)."""
    if control_inputs is not None:
        control_inputs = list(control_inputs)
        graph = next((_as_op(c).graph for c in control_inputs), get_default_graph())
    else:
        graph = get_default_graph()
    return graph.control_dependencies(control_inputs)
