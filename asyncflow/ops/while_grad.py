"""The gradient of a while loop: a loop unit for the gradients core and the gradient loop.

See ``control_flow_grad`` for the theory. Pieces:
- ``register_unit(ctx)`` (called when a loop is built) maps the loop's Enter and Exit ops to a
  ``LoopUnit`` through ``graph.extensions["gradient_unit"]``.
- ``_forward_counter(ctx)`` adds an iteration counter to the forward loop (once).
- ``GradWhileContext`` is the gradient loop's context: forward in-loop values become stack
  pops, forward loop invariants become their outer tensors.
- ``_while_grad(unit, *exit_grads)`` builds the gradient loop and returns one gradient per
  unit input (loop variables' initial values, then float loop invariants).

Nested loops (TF's GradLoopState with an ``outer_grad_state``): the gradients core meets an
inner loop's unit while the outer gradient body is being built (``af.gradients`` of one outer
body iteration runs inside the outer ``GradWhileContext``), so ``_gradient_parent`` builds the
inner gradient loop there: one inner gradient loop per outer gradient iteration. The inner
loop's stacks are created in its parent context, i.e. in the outer forward body, one stack
per outer iteration; their handles, the inner forward count (an Exit in the outer body) and
the outer-body tensors the inner loop reads as invariants are forward values of the outer
loop, so the inner ``GradWhileContext`` (whose outer context is the outer gradient context)
hands them to the outer one, which saves them on its own stacks and pops them. Each inner
gradient loop thus pops the stacks its own outer iteration pushed, with that iteration's
trip count; any depth recurses the same way.

A loop inside a cond inside a loop works the same way: its stacks, trip count and invariants
are values of the cond's branch, pushed by the outer loop only in the iterations that take
the branch and popped under the saved predicate; in the other gradient iterations the inner
gradient loop receives dead inputs and stays dead, as the branch did.

Limits: forward values read by the backward body must be live once per iteration: computed
in the loop body (after the Switch), or the result of a loop or cond nested in it. The
gradient of an inner loop asked for inside the outer loop's body from outside its gradient
(a tensor of the outer body differentiated after the loop) is a LookupError naming the loops.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph.gradients import gradients, input_on_path
from asyncflow.ops import control_flow as cf
from asyncflow.ops.array import identity
from asyncflow.ops.construct import make, make_op
from asyncflow.ops.math import add, greater, subtract
from asyncflow.ops.sources import constant, zeros_like
from asyncflow.ops.while_frame import build_loop


class _UnitDef:
    __slots__ = ("grad", "differentiable", "cost")

    def __init__(self, grad, differentiable):
        self.grad = grad
        self.differentiable = differentiable
        self.cost = None


class LoopUnit:
    """A while loop seen by the gradients core as one op (inputs enter, outputs exit)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.graph = ctx.graph
        self.name = ctx.frame_name
        self.type = "WhileLoop"
        self.seq = ctx.loop_exits[0].op.seq
        self.outputs = tuple(ctx.loop_exits)
        if isinstance(ctx, GradWhileContext):  # TF1 refuses rather than answer None
            self.op_def = _UnitDef(_second_order, True)
        else:
            self.op_def = _UnitDef(_while_grad if ctx.back_prop else None, ctx.back_prop)

    @property
    def inputs(self):
        loop_inits = [enter.op.inputs[0] for enter in self.ctx.loop_enters]
        return tuple(loop_inits + [enter.op.inputs[0] for enter in _float_invariants(self.ctx)])

    def __repr__(self):
        return f"<while_loop unit '{self.name}'>"


def _second_order(unit, *grads):
    raise TypeError(f"Second-order gradient for while loops not supported: "
                    f"'{unit.name}' is the gradient loop of while_loop "
                    f"'{unit.ctx.forward.frame_name}' (wrap the first gradient in "
                    "af.stop_gradient where it is used as a value)")


def _float_invariants(ctx):
    return [enter for enter in ctx._values.values()
            if enter.op.type in ("Enter", "RefEnter") and enter.dtype.is_floating]


def register_unit(ctx):
    """Make the gradients core treat the loop of ``ctx`` as one unit."""
    extensions = ctx.graph.extensions
    units = extensions.setdefault("loop_units", {})
    unit = LoopUnit(ctx)
    for tensor in list(ctx.loop_enters) + list(ctx.loop_exits) + list(ctx.imported_values()):
        units[tensor.op] = unit
    extensions["gradient_unit"] = lambda op: units.get(op, op)


def _enclosing_loop(ctx):
    while ctx is not None and not isinstance(ctx, cf.WhileContext):
        ctx = ctx.outer
    return ctx


def _forward_counter(ctx):
    """``(count exit, increment op, current op)``: the forward iteration count, added once."""
    if ctx.grad_state is not None:
        return ctx.grad_state
    graph = ctx.graph
    # The counter lives with the loop's predicate (like a loop variable's Enter, Merge,
    # Switch, NextIteration and Exit, it must not straddle devices).
    with graph.push_scopes(control_flow_context=ctx.outer), graph.control_dependencies(None), \
            graph.name_scope(ctx.frame_name + "/"), graph.colocate_with(ctx.pivot.op):
        enter = cf.enter_frame(constant(0, name="f_count_init"), ctx.frame_name, False,
                          ctx.parallel_iterations, name="f_count_enter")
    with ctx.entered(), graph.control_dependencies(None), \
            graph.name_scope(ctx.frame_name + "/"), graph.colocate_with(ctx.pivot.op):
        merge = cf.merge([enter, enter], name="f_count")[0]
        switch_false, switch_true = cf.switch(merge, ctx.pivot, name="f_count_switch")
        current = identity(switch_true, name="f_count_body")
        increment = add(current, 1, name="f_count_add")
        merge.op.update_input(1, cf.next_iteration(increment))
        count = cf.exit_frame(switch_false, name="f_count_exit")
    ctx.grad_state = (count, increment.op, current.op)
    return ctx.grad_state


class GradWhileContext(cf.WhileContext):
    """The gradient loop of ``forward``: its forward values arrive through stacks."""

    reads_forward_values = True

    def __init__(self, graph, forward, frame_name, outer):
        super().__init__(graph, outer, frame_name, forward.parallel_iterations, False)
        self.forward = forward
        self.pops = []
        self._popped = {}
        self._pivots = {}  # forward CondContext -> (taken, other) pivots of this loop

    def add_value(self, tensor):
        if self.is_internal(tensor) or not self.forward.is_internal(tensor):
            return super().add_value(tensor)
        if self.forward.is_invariant(tensor):
            return super().add_value(tensor.op.inputs[0])
        found = self._popped.get(tensor)
        if found is None:
            variable = _variable_read(tensor, self.forward)
            if variable is not None:
                # A read of a variable in the forward body is read again here, like TF1's
                # aliased Enter of the snapshot: no stack holding a copy per iteration.
                with self.entered(), self.graph.control_dependencies(None), \
                        self.graph.colocate_with(variable.op):
                    found = identity(variable, name="read")
            else:
                found = self._stack_value(tensor)
            self._popped[tensor] = found
        return found

    def _stack_value(self, tensor):
        """Push ``tensor`` in each forward iteration; pop it here, latest first.

        The stack is created in the forward loop's parent context: once per step for a
        top-level loop, once per outer iteration for a nested one (its handle is then a
        forward value of the outer loop, which the outer gradient loop saves and pops in
        turn, so each inner gradient loop pops the stack its own outer iteration filled).
        """
        graph, forward = self.graph, self.forward
        home, reason = _saved_home(tensor, forward)
        if reason is not None:
            raise LookupError(f"Gradient of while_loop '{forward.frame_name}': the backward "
                              f"body reads {tensor.name}, {reason}")
        branches = _branches(home, forward)  # conds around the value, innermost first
        with graph.push_scopes(control_flow_context=forward.outer), \
                graph.control_dependencies(None):
            handle = make("StackV2", (constant(-1, name="stack_size"),),
                          {"elem_type": tensor.dtype,
                           "stack_name": f"{tensor.op.name}_{tensor.value_index}"},
                          None, "stack")
        with graph.push_scopes(control_flow_context=home), graph.control_dependencies(None):
            push = make_op("StackPushV2", (handle, tensor), None, None, "stack_push")
        # Pushes keep iteration order: push i gates the count's increment, which gates the
        # count of iteration i+1, which gates push i+1 (iterations may otherwise overlap).
        # A push inside a cond runs only when its branch is taken: the count waits for a
        # Merge that is live after the push, or at once when the branch is not taken.
        forward.grad_state[1].add_control_input(_forward_barrier(push, branches))
        push.add_control_input(forward.grad_state[2])
        with self.entered(), graph.control_dependencies(None):
            popped = make("StackPopV2", (handle,), {"elem_type": tensor.dtype}, None, "stack_pop")
        popped.set_shape(tensor.shape)
        gate = popped.op
        if branches:
            # Pop only in the gradient iterations whose forward iteration took the branch
            # (the saved predicates replay the forward choices), so pops match pushes.
            popped.op.add_control_input(self._branch_pivots(branches[0])[0].op)
            for branch in branches:
                taken, other = self._branch_pivots(branch)
                with self.entered(), graph.control_dependencies([gate]):
                    token = identity(taken, name="pop_done")
                with self.entered(), graph.control_dependencies(None):
                    gate = cf.merge([other, token], name="pop_barrier")[0].op
        self.pops.append(gate)
        return popped

    def _branch_pivots(self, branch):
        """``(taken, other)``: bool tensors of the gradient loop, live when the forward
        iteration took ``branch`` (a CondContext of the forward body), resp. its sibling."""
        found = self._pivots.get(branch)
        if found is None:
            pred = self.add_value(branch.pred)  # the forward choice, saved like any value
            with self.entered(), self.graph.control_dependencies(None):
                outputs = cf.switch(pred, pred, name="branch_switch")
                found = (identity(outputs[branch.branch], name="branch_taken"),
                         identity(outputs[1 - branch.branch], name="branch_other"))
            self._pivots[branch] = found
        return found


def _variable_read(tensor, forward):
    """The variable reference outside ``forward`` that ``tensor`` reads, when ``tensor`` is
    a read made in the loop body (an Identity of a reference that entered the loop through
    RefEnter, and a cond's RefSwitch maybe), or the outer read when it is an Identity of
    a loop invariant (a read settled at loop entry); else None."""
    op = tensor.op
    if op.type == "Identity" and forward.is_invariant(op.inputs[0]):
        return op.inputs[0].op.inputs[0]  # a read settled at loop entry
    if op.type != "Identity" or not op.inputs[0].is_ref:
        return None
    ref = op.inputs[0]
    while ref.op.type in ("RefEnter", "RefSwitch") and forward.is_internal(ref):
        ref = ref.op.inputs[0]
    return None if forward.is_internal(ref) else ref


def _saved_home(tensor, forward):
    """``(context, reason)``: where ``tensor`` is pushed for ``forward``'s gradient, or why
    it cannot be saved.

    A saved value must be live at most once in each iteration of the body: body ops
    qualify, and so do the results of a loop or cond nested in the body (an inner loop's
    Exit, a cond's Merge). The forward loop's own Merge, Switch, Enter and Exit do not.
    Values computed inside a cond in the body (or brought into its branch by a Switch) are
    pushed in that branch, so only when it is taken; the gradient loop pops them under the
    same, saved, predicate.
    """
    op = tensor.op
    home = op.control_flow_context
    if op.type in ("Exit", "RefExit") and home is not forward:
        home = home.outer  # a nested loop's result lives in the loop's parent context
    elif op in cf.cond_imports(op.graph):
        home = cf.cond_imports(op.graph)[op]
    elif op.type in cf.STRUCTURE_TYPES or op.type in ("Switch", "RefSwitch"):
        if not (op.type == "Merge" and op in cf.cond_merges(op.graph)):
            return home, "which is not computed in the loop body; only body values can be saved"
    return home, None


def _branches(ctx, loop):
    """The cond branch contexts between ``ctx`` and the loop context ``loop``, innermost
    first."""
    found = []
    while ctx is not None and ctx is not loop:
        if isinstance(ctx, cf.CondContext):
            found.append(ctx)
        ctx = ctx.outer
    return found


def _forward_barrier(op, branches):
    """An op of the loop body that runs after ``op`` when ``op``'s branches are taken, and
    regardless of ``op`` otherwise (a Merge of the branch pivots per level)."""
    graph = op.graph
    for branch in branches:
        with graph.push_scopes(control_flow_context=branch.outer), \
                graph.control_dependencies([op]):
            taken = identity(branch.pivot, name="push_done")
        with graph.push_scopes(control_flow_context=branch.outer), \
                graph.control_dependencies(None):
            op = cf.merge([branch.sibling.pivot, taken], name="push_barrier")[0].op
    return op


def _gradient_parent(ctx):
    """The context the gradient loop of ``ctx`` is built in.

    A top-level loop's gradient loop sits where the loop does. A loop nested in another loop
    is differentiated while the outer loop's gradient body is being built: its gradient
    loop goes inside that body (one inner gradient loop per outer gradient iteration), and
    the values it reads from the outer forward loop (its trip count, its stacks' handles,
    its invariants computed in the outer body) are saved and popped by the outer gradient
    loop. Anything else (af.gradients called inside a loop body) is a LookupError.
    """
    enclosing = _enclosing_loop(ctx.outer)
    if enclosing is None:
        return ctx.outer
    current = cf.current_context(ctx.graph)
    grad = current
    while grad is not None and not isinstance(grad, GradWhileContext):
        grad = grad.outer
    if grad is None and cf.inside(current, enclosing):
        # af.gradients called inside the outer loop's body: the gradient loop is an ordinary
        # nested loop of that body, next to the forward one (stacks per outer iteration).
        return ctx.outer
    if grad is None or grad.forward is not enclosing:
        raise LookupError(f"Gradient of while_loop '{ctx.frame_name}': a loop nested in "
                          f"while_loop '{enclosing.frame_name}' is differentiable only as part "
                          f"of the gradient of '{enclosing.frame_name}' (differentiate a "
                          "tensor computed after the outer loop, not inside its body)")
    return current


def _shaped(grad, shape):
    """``grad`` with the static shape the gradient loop keeps for it.

    A gradient has its value's shape, which the forward loop's shape invariant bounds; shape
    inference through the backward body may know less (a concat of partly known shapes), and
    the gradient loop must keep the forward loop's invariants (TF1 does not enforce them on
    its back edges at all)."""
    if grad.shape.is_compatible_with(shape):
        grad.set_shape(grad.shape.merge_with(shape))
    return grad


def _vars_on_path(ctx, floats, body_vars, body_outputs, invariants):
    """Per float loop variable, whether it may depend on the outer walk's ``xs``: its initial
    value is on the outer path, or its body output reads (through the body's ops) a variable
    or an invariant that does, to a fixed point. The others are not differentiated (their
    gradient is not asked for), as the invariants off the path."""
    stops = set(body_vars) | set(invariants)
    own_enters = {tensor.op for tensor in list(ctx.loop_enters) + list(ctx._values.values())
                  if tensor.op.type in ("Enter", "RefEnter")}
    reads = []
    for out in body_outputs:
        found, seen, stack = set(), set(), [out]
        while stack:
            tensor = stack.pop()
            if tensor in stops:
                found.add(tensor)
            elif tensor.op not in seen and tensor.op not in own_enters:
                seen.add(tensor.op)
                stack.extend(tensor.op.inputs)
        reads.append(found)
    wanted = [input_on_path(ctx.loop_enters[k].op.inputs[0]) for k in floats]
    changed = True
    while changed:
        live = {var for var, on in zip(body_vars, wanted) if on} | set(invariants)
        changed = False
        for i, found in enumerate(reads):
            if not wanted[i] and found & live:
                wanted[i] = changed = True
    return wanted


def _while_grad(unit, *exit_grads):
    """Gradients of the loop's inputs (loop variable inits, then float invariants)."""
    ctx = unit.ctx
    graph = ctx.graph
    grad_outer = _gradient_parent(ctx)
    count = _forward_counter(ctx)[0]
    exits = ctx.loop_exits
    floats = [k for k, tensor in enumerate(exits) if tensor.dtype.is_floating]
    # Only the invariants on the outer walk's path: one off it (a constant read in the body)
    # gets None without being differentiated, so an op whose gradient with respect to it is
    # not provided (registry.GradientNotProvided) does not refuse the loop.
    all_invariants = _float_invariants(ctx)
    invariants = [enter for enter in all_invariants if input_on_path(enter.op.inputs[0])]
    grads_in = [exit_grads[k] if exit_grads[k] is not None else zeros_like(exits[k])
                for k in floats]
    accumulators = [zeros_like(enter.op.inputs[0]) for enter in invariants]
    body_vars = [ctx.body_vars[k] for k in floats]
    body_outputs = [ctx.loop_merges[k].op.inputs[1].op.inputs[0] for k in floats]
    n_vars = len(floats)
    wanted = _vars_on_path(ctx, floats, body_vars, body_outputs, invariants)

    def grad_cond(step, *_):
        return greater(step, 0)

    def grad_body(step, *state):
        next_step = subtract(step, 1)
        grads, accs = list(state[:n_vars]), list(state[n_vars:])
        xs = [var for var, on in zip(body_vars, wanted) if on] + invariants
        found = iter(gradients(body_outputs, xs, grad_ys=grads, name="body")
                     if floats and xs else [None] * len(xs))
        found = [next(found) if on else None for on in wanted] + list(found)
        new_grads = [_shaped(g, shape) if g is not None else zeros_like(old)
                     for g, old, shape in zip(found[:n_vars], grads, shapes[1:])]
        new_accs = [acc if g is None else _shaped(add(acc, g), shape)
                    for g, acc, shape in zip(found[n_vars:], accs, shapes[1 + n_vars:])]
        connected[:] = [g is not None for g in found[n_vars:]]
        for pop in grad_ctx.pops:
            next_step.op.add_control_input(pop)
        return [next_step] + new_grads + new_accs

    connected = []  # per float invariant: whether the body passes it any gradient
    loop_vars = [count] + grads_in + accumulators
    shapes = [count.shape] + [ctx.loop_merges[k].shape for k in floats] + \
        [enter.shape for enter in invariants]
    with graph.control_dependencies(None), graph.push_scopes(control_flow_context=grad_outer), \
            graph.name_scope("grad_loop") as scope:
        grad_ctx = GradWhileContext(graph, ctx, scope.rstrip("/"), grad_outer)
        results = build_loop(grad_ctx, grad_cond, grad_body, loop_vars, loop_vars, shapes,
                             grad_ctx.frame_name)
        register_unit(grad_ctx)
    var_grads = dict(zip(floats, results[1:1 + n_vars]))
    out = [var_grads.get(k) for k in range(len(exits))]
    # An invariant the body never differentiates (read only through an integer cast, say)
    # gets None, as in TF1, not the accumulator's zeros.
    differentiated = {enter: acc if used else None for enter, acc, used
                      in zip(invariants, results[1 + n_vars:], connected)}
    out += [differentiated.get(enter) for enter in all_invariants]
    return out


__all__ = ["LoopUnit", "register_unit", "GradWhileContext", "dtypes"]
