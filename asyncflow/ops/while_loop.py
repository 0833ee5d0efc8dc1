"""``while_loop``: TF1's loop builder over Enter/Merge/Switch/NextIteration/Exit.

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
"""
from __future__ import annotations

from asyncflow.graph.graph import Tensor
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops import control_flow as cf
from asyncflow.ops.construct import as_tensor, graph_of


def _shape_allows(invariant, shape):
    """Whether ``shape`` is at least as specific as the shape invariant."""
    if invariant.dims is None:
        return True
    if shape.dims is None or len(shape.dims) != len(invariant.dims):
        return False
    return all(i is None or i == d for i, d in zip(invariant.dims, shape.dims))


def _as_loop_var(value):
    if isinstance(value, Tensor):
        return value
    return as_tensor(value)


def _with_counter(cond, body, loop_vars, maximum_iterations, loop_name):
    """TF1's ``maximum_iterations``: a counter as an extra loop var, and'ed into ``cond``."""
    from asyncflow.ops import math as _math
    from asyncflow.ops.math import less, logical_and
    limit = as_tensor(maximum_iterations)
    if not limit.dtype.is_integer or limit.shape.ndims not in (None, 0):
        raise ValueError(f"while_loop '{loop_name}': maximum_iterations must be a scalar "
                         f"integer, got {limit.dtype.name} with shape {limit.shape}")
    from asyncflow.ops.math import cast
    from asyncflow import dtypes
    limit = cast(limit, dtypes.int32) if limit.dtype is not dtypes.int32 else limit

    def counted_cond(i, inner):
        return logical_and(less(i, limit), _call(cond, inner))

    def counted_body(i, inner):
        result = _call(body, inner)
        if isinstance(inner, (list, tuple)) and not cf._is_namedtuple(inner) \
                and len(inner) == 1 and not isinstance(result, (list, tuple)):
            result = type(inner)([result])
        return (_math.add(i, 1), result)
    return counted_cond, counted_body, (as_tensor(0), loop_vars)


def _call(fn, structure):
    if isinstance(structure, (list, tuple)) and not cf._is_namedtuple(structure):
        return fn(*structure)
    return fn(structure)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, maximum_iterations=None, name=None):
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

    Returns:
        The final loop variables, in ``loop_vars``' structure; a one-element list or tuple
        returns the tensor itself (TF1).

    Raises:
        TypeError: for non-callables, or a body changing a dtype (naming the loop).
        ValueError: for a body returning another structure or a shape the invariant does
            not allow (naming the loop and the variable).
    """
    if not callable(cond) or not callable(body):
        raise TypeError("while_loop: cond and body must be callables")
    from asyncflow.ops.tensor_array import adapt_loop
    adapter = adapt_loop(cond, body, loop_vars)
    if adapter is not None:  # TensorArrays ride through the loop as their flows
        return adapter.restore(while_loop(
            adapter.cond, adapter.body, adapter.loop_vars, shape_invariants, parallel_iterations,
            back_prop, maximum_iterations, name))
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
        outer = cf._current_context(graph)
        ctx = cf.WhileContext(graph, outer, loop_name, parallel_iterations, back_prop)
        exits = _build_loop(ctx, cond, body, loop_vars, flat, invariants, loop_name)
    packed = cf.pack_as(loop_vars, exits)
    structure = loop_vars
    if maximum_iterations is not None:
        packed, structure = packed[1], loop_vars[1]
    if isinstance(structure, (list, tuple)) and not cf._is_namedtuple(structure) \
            and len(structure) == 1 and len(cf.flatten(packed)) == 1:
        return cf.flatten(packed)[0]
    return packed


def _invariants(flat, loop_vars, shape_invariants, loop_name):
    if shape_invariants is None:
        return [t.shape for t in flat]
    shapes = [as_shape(s) for s in cf.flatten(_shape_leaves(shape_invariants))]
    if len(shapes) != len(flat):
        raise ValueError(f"while_loop '{loop_name}': shape_invariants must have the structure "
                         f"of loop_vars ({len(flat)} tensors), got {len(shapes)} shapes")
    for tensor, shape in zip(flat, shapes):
        if not _shape_allows(shape, tensor.shape):
            raise ValueError(f"while_loop '{loop_name}': the shape invariant {shape} is not "
                             f"compatible with the initial shape {tensor.shape} of loop "
                             f"variable {tensor.name}")
    return shapes


def _shape_leaves(structure):
    """Shape invariants given as lists of dims are leaves, not nested lists."""
    if isinstance(structure, TensorShape) or structure is None:
        return structure
    if isinstance(structure, dict):
        return {k: _shape_leaves(v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)) and all(
            d is None or isinstance(d, int) for d in structure) and not cf._is_namedtuple(structure):
        return TensorShape(list(structure))
    if isinstance(structure, (list, tuple)):
        return type(structure)(_shape_leaves(s) for s in structure) \
            if not cf._is_namedtuple(structure) else type(structure)(*map(_shape_leaves, structure))
    return structure


def _build_loop(ctx, cond, body, loop_vars, flat, invariants, loop_name):
    from asyncflow.ops.array import identity
    graph = ctx.graph
    outer = ctx.outer
    real = [outer.add_value(t) if outer is not None else t for t in flat]
    with graph._push(control_flow_context=outer):
        enters = [cf._enter(t, ctx.frame_name, False, ctx.parallel_iterations)
                  for t in real]
    for enter, shape in zip(enters, invariants):
        enter._shape = shape
    ctx.loop_enters = enters
    with ctx.entered(), graph.control_dependencies(None):
        # Each loop variable's Enter, Merge, Switch, NextIteration and Exit share a device:
        # the back edge never crosses devices (iteration i sends, iteration i+1 receives).
        merges = []
        for e in enters:
            with graph.colocate_with(e.op):
                merges.append(cf.merge([e, e])[0])
        for merge, shape in zip(merges, invariants):
            merge._shape = shape
        ctx.pivot_for_pred = merges[0].op
        pred = _call(cond, cf.pack_as(loop_vars, merges))
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
        result = _call(body, cf.pack_as(loop_vars, body_vars))
        if isinstance(loop_vars, (list, tuple)) and not cf._is_namedtuple(loop_vars) \
                and len(loop_vars) == 1 and not isinstance(result, (list, tuple)):
            result = [result]
        if not cf._same_structure(loop_vars, result) or len(cf.flatten(result)) != len(flat):
            raise ValueError(f"while_loop '{loop_name}': body must return the structure of "
                             f"loop_vars {loop_vars!r}, got {result!r}")
        outputs = []
        for index, (value, var, shape) in enumerate(zip(cf.flatten(result), flat, invariants)):
            value = _body_output(ctx, value, var, shape, loop_name, index)
            outputs.append(value)
        exits = []
        for merge, value, switch_pair in zip(merges, outputs, switches):
            with graph.colocate_with(merge.op):
                merge.op._update_input(1, cf._next_iteration(value))
                exits.append(cf._exit(switch_pair[0]))
        for exit_tensor, shape in zip(exits, invariants):
            exit_tensor._shape = shape
    ctx.loop_exits = exits
    ctx.settle_variable_reads()
    _loops(graph)[pivot.op] = ctx
    from asyncflow.ops import while_grad
    while_grad.register_unit(ctx)
    return exits


def _check_loop_pred(pred, loop_name):
    pred = as_tensor(pred)
    if not pred.dtype.is_bool or pred.shape.ndims not in (None, 0):
        raise TypeError(f"while_loop '{loop_name}': cond must return a scalar bool tensor, got "
                        f"{pred.dtype.name} with shape {pred.shape}")
    return pred


def _body_output(ctx, value, var, shape, loop_name, index):
    from asyncflow.ops.array import identity
    value = value if isinstance(value, Tensor) else as_tensor(value, dtype=var.dtype)
    if value.dtype is not var.dtype:
        raise TypeError(f"while_loop '{loop_name}': loop variable {index} ({var.name}) enters "
                        f"the loop as {var.dtype.name} but the body returns "
                        f"{value.dtype.name}")
    if not _shape_allows(shape, value.shape):
        raise ValueError(f"while_loop '{loop_name}': input tensor '{var.name}' enters the loop "
                         f"with shape {shape}, but has shape {value.shape} after one "
                         "iteration. To allow the shape to vary across iterations, use the "
                         "`shape_invariants` argument of while_loop to specify a less-specific "
                         "shape.")
    value = ctx.add_value(value)
    if ctx._is_invariant(value) or value.op.type in cf.STRUCTURE_TYPES - {"Merge"}:
        value = identity(value)
    return value


def _loops(graph):
    """``{LoopCond op: WhileContext}`` of every loop in ``graph`` (for gradients)."""
    return graph._extensions.setdefault("while_loops", {})
