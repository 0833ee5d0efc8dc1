"""``while_loop``: TF1's loop builder over Enter/Merge/Switch/NextIteration/Exit.

It checks and normalises the arguments (TensorArrays ride through as their flows,
``maximum_iterations`` becomes a counter, shape invariants), wires the loop with
``while_frame.build_loop`` (whose docstring draws the graph of one loop) and makes the loop a
unit the gradients core can differentiate (``while_grad.register_unit``).
"""
from __future__ import annotations

from asyncflow.graph.graph import Tensor
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow import dtypes
from asyncflow.ops import control_flow as cf
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.math import add, cast, less, logical_and
from asyncflow.ops.tensor_array import adapt_loop
from asyncflow.ops.while_frame import build_loop, call_unpacked, shape_allows
from asyncflow.ops.while_frame import loops  # noqa: F401  (a graph's loops, read by tests)
from asyncflow.ops.while_grad import register_unit


def _as_loop_var(value):
    if isinstance(value, Tensor):
        return value
    return as_tensor(value)


def _with_counter(cond, body, loop_vars, maximum_iterations, loop_name):
    """TF1's ``maximum_iterations``: a counter as an extra loop var, and'ed into ``cond``."""
    limit = as_tensor(maximum_iterations)
    if not limit.dtype.is_integer or limit.shape.ndims not in (None, 0):
        raise ValueError(f"while_loop '{loop_name}': maximum_iterations must be a scalar "
                         f"integer, got {limit.dtype.name} with shape {limit.shape}")
    limit = cast(limit, dtypes.int32) if limit.dtype is not dtypes.int32 else limit

    def counted_cond(i, inner):
        return logical_and(less(i, limit), call_unpacked(cond, inner))

    def counted_body(i, inner):
        result = call_unpacked(body, inner)
        if isinstance(inner, (list, tuple)) and not cf.is_namedtuple(inner) \
                and len(inner) == 1 and not isinstance(result, (list, tuple)):
            result = type(inner)([result])
        return (add(i, 1), result)
    return counted_cond, counted_body, (as_tensor(0), loop_vars)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, maximum_iterations=None, name=None, swap_memory=False,
               return_same_structure=False):
    """Repeat ``body`` while ``cond`` is true (TF1 ``tf.while_loop``).

    Args:
        cond: callable taking the loop variables (unpacked when ``loop_vars`` is a list or
            tuple), returning a scalar bool tensor.
        body: callable taking the same arguments, returning the next loop variables in the
            same structure and dtypes.
        loop_vars: a tensor or a nested structure (lists, tuples, namedtuples, dicts).
        shape_invariants: shapes (same structure) that the loop variables keep; a dimension
            of None may change across iterations. Defaults to each variable's shape.
        parallel_iterations: how many iterations may run at once.
        back_prop: when False, gradients do not flow through the loop.
        maximum_iterations: optional bound on the number of iterations.
        name: name scope (and frame name) of the loop.
        swap_memory: accepted for TF1 compatibility (nothing is swapped to host memory).
        return_same_structure: keep a one-element list or tuple as such (TF1).

    Returns:
        The final loop variables, in ``loop_vars``' structure; a one-element list or tuple
        returns the tensor itself unless ``return_same_structure`` (TF1).

    Raises:
        TypeError: for non-callables, or a body changing a dtype (naming the loop).
        ValueError: for a body returning another structure or a shape the invariant does
            not allow (naming the loop and the variable).
    """
    if not callable(cond) or not callable(body):
        raise TypeError("while_loop: cond and body must be callables")
    if isinstance(loop_vars, (type(None), bool, int, float, list, tuple, dict)) and not loop_vars:
        raise ValueError(f"while_loop: 'loop_vars' must be provided (a list or tuple of tensors), "
                         f"got {loop_vars!r}")  # TF1 refuses a falsy loop_vars, as 0 or []
    adapter = adapt_loop(cond, body, loop_vars)
    if adapter is not None:  # TensorArrays ride through the loop as their flows
        return adapter.restore(while_loop(
            adapter.cond, adapter.body, adapter.loop_vars, shape_invariants, parallel_iterations,
            back_prop, maximum_iterations, name, return_same_structure=return_same_structure))
    if parallel_iterations < 1:
        raise ValueError(f"while_loop: parallel_iterations must be positive, got "
                         f"{parallel_iterations}")
    graph = graph_of(cf.flatten(loop_vars))
    with graph.name_scope(name or "while") as scope:
        loop_name = scope.rstrip("/")
        if maximum_iterations is not None:
            cond, body, loop_vars = _with_counter(cond, body, loop_vars, maximum_iterations,
                                                  loop_name)
            if shape_invariants is not None:
                shape_invariants = (TensorShape([]), shape_invariants)
        flat = [_as_loop_var(v) for v in cf.flatten(loop_vars)]
        if not flat:
            raise ValueError(f"while_loop '{loop_name}': loop_vars must not be empty")
        invariants = _invariants(flat, loop_vars, shape_invariants, loop_name)
        outer = cf.current_context(graph)
        ctx = cf.WhileContext(graph, outer, loop_name, parallel_iterations, back_prop)
        exits = build_loop(ctx, cond, body, loop_vars, flat, invariants, loop_name)
        register_unit(ctx)
    packed = cf.pack_as(loop_vars, exits)
    structure = loop_vars
    if maximum_iterations is not None:
        packed, structure = packed[1], loop_vars[1]
    if not return_same_structure and isinstance(structure, (list, tuple)) \
            and not cf.is_namedtuple(structure) and len(structure) == 1 \
            and len(cf.flatten(packed)) == 1:
        return cf.flatten(packed)[0]
    return packed


def _invariants(flat, loop_vars, shape_invariants, loop_name):
    if shape_invariants is None:
        return [t.shape for t in flat]
    if any(cf.composite_invariants(v) is not None for v in _nodes(loop_vars)):
        shapes = _composite_leaves(loop_vars, _shape_leaves(shape_invariants), loop_name)
    else:
        shapes = [as_shape(s) for s in cf.flatten(_shape_leaves(shape_invariants))]
    if len(shapes) != len(flat):
        raise ValueError(f"while_loop '{loop_name}': shape_invariants must have the structure "
                         f"of loop_vars ({len(flat)} tensors), got {len(shapes)} shapes")
    for tensor, shape in zip(flat, shapes):
        if not shape_allows(shape, tensor.shape):
            raise ValueError(f"while_loop '{loop_name}': the shape invariant {shape} is not "
                             f"compatible with the initial shape {tensor.shape} of loop "
                             f"variable {tensor.name}")
    return shapes


def _nodes(structure):
    """Every node of a nested structure of loop variables (containers and leaves)."""
    yield structure
    if isinstance(structure, dict):
        for value in structure.values():
            yield from _nodes(value)
    elif isinstance(structure, (list, tuple)):
        for value in structure:
            yield from _nodes(value)


def _composite_leaves(loop_vars, invariants, loop_name):
    """The invariants of the loop's tensors when some loop variables are composites: each
    composite's invariant becomes its parts' (TF1's rules, see ``register_composite``)."""
    expand = cf.composite_invariants(loop_vars)
    if expand is not None:
        return expand(loop_vars, as_shape(invariants))
    if isinstance(loop_vars, dict) and isinstance(invariants, dict) and \
            sorted(loop_vars) == sorted(invariants):
        return [shape for key in sorted(loop_vars)
                for shape in _composite_leaves(loop_vars[key], invariants[key], loop_name)]
    if isinstance(loop_vars, (list, tuple)):
        if not isinstance(invariants, (list, tuple)) or len(invariants) != len(loop_vars):
            raise ValueError(f"while_loop '{loop_name}': shape_invariants must have the "
                             f"structure of loop_vars, got {invariants!r}")
        return [shape for var, inv in zip(loop_vars, invariants)
                for shape in _composite_leaves(var, inv, loop_name)]
    return [as_shape(invariants)]


def _shape_leaves(structure):
    """Shape invariants given as lists of dims are leaves, not nested lists."""
    if isinstance(structure, TensorShape) or structure is None:
        return structure
    if isinstance(structure, dict):
        return {k: _shape_leaves(v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)) and not cf.is_namedtuple(structure) and all(
            d is None or isinstance(d, int) for d in structure):
        return TensorShape(list(structure))
    if isinstance(structure, (list, tuple)):
        return type(structure)(_shape_leaves(s) for s in structure) \
            if not cf.is_namedtuple(structure) else type(structure)(*map(_shape_leaves, structure))
    return structure


