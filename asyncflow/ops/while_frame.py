"""The graph of one while loop: Enter/Merge/Switch/NextIteration/Exit around cond and body.

The graph of one loop variable ``x``::

    x -> Enter -> Merge <--------------- NextIteration <- body(...)
                    |                                        ^
                    +-> cond(...) -> LoopCond (pivot)          |
                    |                    |                     |
                    +---------------> Switch --(true)--> Identity
                                         +----(false)--> Exit -> result

Every Switch of the loop uses the one LoopCond, so when it turns false the body side is dead
in that iteration (the NextIteration is dead, which ends the loop) and the Exits are live.
External tensors read by ``cond``/``body`` become constant Enters (loop invariants) through
the ``WhileContext``; body ops with no in-loop input get a control edge from the pivot.

``while_loop`` (the public builder) and the gradient loop of ``while_grad`` both wire their
loops here; this module knows nothing of either, so neither imports the other back.
"""
from __future__ import annotations

from asyncflow.graph.graph import Tensor
from asyncflow.ops import control_flow as cf
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor


def shape_allows(invariant, shape):
    """Whether ``shape`` is at least as specific as the shape invariant."""
    if invariant.dims is None:
        return True
    if shape.dims is None or len(shape.dims) != len(invariant.dims):
        return False
    return all(i is None or i == d for i, d in zip(invariant.dims, shape.dims))


def call_unpacked(fn, structure):
    """``fn(*structure)`` for a list or tuple of loop variables, else ``fn(structure)`` (TF1)."""
    if isinstance(structure, (list, tuple)) and not cf.is_namedtuple(structure):
        return fn(*structure)
    return fn(structure)


def build_loop(ctx, cond, body, loop_vars, flat, invariants, loop_name):
    """Wire one loop of ``ctx`` around ``cond`` and ``body``; returns the Exit tensors.

    The caller makes the loop a gradient unit (``while_grad.register_unit``) if it wants one.
    """
    graph = ctx.graph
    outer = ctx.outer
    real = [outer.add_value(t) if outer is not None else t for t in flat]
    with graph.push_scopes(control_flow_context=outer):
        enters = [cf.enter_frame(t, ctx.frame_name, False, ctx.parallel_iterations)
                  for t in real]
    for enter, shape in zip(enters, invariants):
        enter.relax_shape(shape)
    ctx.loop_enters = enters
    with ctx.entered(), graph.control_dependencies(None):
        # Each loop variable's Enter, Merge, Switch, NextIteration and Exit share a device:
        # the back edge never crosses devices (iteration i sends, iteration i+1 receives).
        merges = []
        for e in enters:
            with graph.colocate_with(e.op):
                merges.append(cf.merge([e, e])[0])
        for merge, shape in zip(merges, invariants):
            merge.relax_shape(shape)
        ctx.pivot_for_pred = merges[0].op
        pred = call_unpacked(cond, cf.pack_as(loop_vars, merges))
        pred = _check_loop_pred(pred, loop_name)
        pivot = cf.loop_cond(pred)
        ctx.pivot = pivot
        switches = []
        for m in merges:
            with graph.colocate_with(m.op):
                switches.append(cf.switch(m, pivot))
        body_vars = [identity(s[1]) for s in switches]
        ctx.pivot_for_body = body_vars[0].op
        ctx.loop_merges, ctx.body_vars = merges, body_vars
        result = call_unpacked(body, cf.pack_as(loop_vars, body_vars))
        if isinstance(loop_vars, (list, tuple)) and not cf.is_namedtuple(loop_vars) \
                and len(loop_vars) == 1 and not isinstance(result, (list, tuple)):
            result = [result]
        if not cf.same_structure(loop_vars, result) or len(cf.flatten(result)) != len(flat):
            count = len(cf.flatten(result))
            why = (f"don't have the same number of elements ({len(flat)} and {count})"
                   if count != len(flat) else "don't have the same nested structure")
            raise ValueError(f"while_loop '{loop_name}': body must return the structure of "
                             f"loop_vars: the two structures {why}. loop_vars: "
                             f"{loop_vars!r}, body returned: {result!r}")
        outputs = []
        for index, (value, var, shape) in enumerate(zip(cf.flatten(result), flat, invariants)):
            value = _body_output(ctx, value, var, shape, loop_name, index)
            outputs.append(value)
        exits = []
        for merge, value, switch_pair in zip(merges, outputs, switches):
            with graph.colocate_with(merge.op):
                merge.op.update_input(1, cf.next_iteration(value))
                exits.append(cf.exit_frame(switch_pair[0]))
        for exit_tensor, shape in zip(exits, invariants):
            exit_tensor.relax_shape(shape)
    ctx.loop_exits = exits
    ctx.settle_variable_reads()
    loops(graph)[pivot.op] = ctx
    return exits


def _check_loop_pred(pred, loop_name):
    pred = as_tensor(pred)
    if not pred.dtype.is_bool or pred.shape.ndims not in (None, 0):
        raise TypeError(f"while_loop '{loop_name}': cond must return a scalar bool tensor, got "
                        f"{pred.dtype.name} with shape {pred.shape}")
    return pred


def _body_output(ctx, value, var, shape, loop_name, index):
    value = value if isinstance(value, Tensor) else as_tensor(value, dtype=var.dtype)
    if value.dtype is not var.dtype:
        raise TypeError(f"while_loop '{loop_name}': loop variable {index} ({var.name}) enters "
                        f"the loop as {var.dtype.name} but the body returns "
                        f"{value.dtype.name}")
    if not shape_allows(shape, value.shape):
        raise ValueError(f"while_loop '{loop_name}': input tensor '{var.name}' enters the loop "
                         f"with shape {shape}, but has shape {value.shape} after one "
                         "iteration. To allow the shape to vary across iterations, use the "
                         "`shape_invariants` argument of while_loop to specify a less-specific "
                         "shape.")
    value = ctx.add_value(value)
    if ctx.is_invariant(value) or value.op.type in cf.STRUCTURE_TYPES - {"Merge"}:
        value = identity(value)
    return value


def loops(graph):
    """``{LoopCond op: WhileContext}`` of every loop in ``graph`` (for gradients)."""
    return graph.extensions.setdefault("while_loops", {})
