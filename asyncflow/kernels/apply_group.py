"""An optimizer's group of RMSProp applies in one kernel (``_FusedApplyRMSPropGroup``, made by
compile/group_applies.py; issue 37).

A training step ends with one ``ApplyRMSProp`` a variable; past the large ones, each small
apply (a bias's, a [256,10] layer's) is some ten microseconds of per-node and per-call Python
around a compiled loop of a few hundred elements, one after the other on one thread, holding
the GIL (no second thread helps them). Here the group's hyperparameters are converted once
and each member runs the same compiled RMSProp loop over its flattened arrays, updating them
in place, inside one node: the same bits as the separate applies (the same loop, the same
scalars, each element's update independent of the others). A member large enough to split
runs ``training.compiled_apply``, split as the separate apply would be. Where the compiled
loop is not usable (another dtype, a GPU, numba missing or off), each member runs the
``ApplyRMSProp`` kernel itself, one after the other. Every member's shapes are checked before
any array changes: a shape error leaves every variable and slot as it was. The group is one
update with respect to a Ctrl-C (``sigint_hold.whole``): every member is applied, then the
KeyboardInterrupt goes up.
"""
from __future__ import annotations

from asyncflow import errors
from asyncflow.kernels import intra_op, jit, sigint_hold, training
from asyncflow.kernels.registry import ANY, get_kernel, register_kernel, register_prepare


def _members(values):
    """``[(var, ms, mom, grad)]`` from the inputs after the four hyperparameters."""
    return [tuple(values[i:i + 4]) for i in range(0, len(values), 4)]


def _check(ctx, members):
    """Each member's variable and slots have its gradient's shape (before any array changes);
    returns the variables' dtypes."""
    dtypes = []
    for var, ms, mom, grad in members:
        value = var.read()
        if value.shape != grad.shape:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: variable {var.name} has shape "
                f"{list(value.shape)} but the gradient has shape {list(grad.shape)}")
        dtypes.append(value.dtype)
        del value  # (no reference held: the loop updates the stored arrays in place)
        training.check_slots(ctx, (ms, mom), grad.shape)
    return dtypes


@register_kernel("_FusedApplyRMSPropGroup")
@sigint_hold.whole
def _apply_rms_prop_group(ctx, lr, rho, momentum, epsilon, *values):
    members = _members(values)
    dtypes = _check(ctx, members)
    dtype = dtypes[0]
    if not (all(d == dtype for d in dtypes)
            and jit.usable(ctx, *[grad for *_, grad in members])
            and all(grad.dtype == dtype for *_, grad in members)):
        apply = get_kernel("ApplyRMSProp", ANY).fn  # each member's own kernel
        return tuple(apply(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad)[0]
                     for var, ms, mom, grad in members)
    one = dtype.type(1)
    rho, lr, momentum, epsilon = [training.scalar_of(s, dtype) for s in (rho, lr, momentum,
                                                                       epsilon)]
    scalars = (one - rho, lr, momentum, epsilon)
    loop = training.rms_prop_loop
    outputs = []
    for var, ms, mom, grad in members:
        size = grad.size
        if size * training.LOOP_WORK >= intra_op.MIN_SPLIT_WORK:  # split as the apply's own
            outputs.append(training.compiled_apply(ctx, var, (ms, mom), grad, dtype, loop,
                                                    scalars))
            continue
        x, m, v = (training.in_place(ctx, ref, grad.shape, dtype) for ref in (var, ms, mom))
        loop(x.reshape(-1), m.reshape(-1), v.reshape(-1), training.loop_gradient(grad, dtype),
             *scalars, 0, size)
        # (the slots' shapes are the gradient's: checked by ``_check``)
        ms.assign(m, validate_shape=False, fresh=True)
        mom.assign(v, validate_shape=False, fresh=True)
        outputs.append(var.assign(x, validate_shape=False, fresh=True))
    return tuple(outputs)


register_prepare("_FusedApplyRMSPropGroup")(
    lambda ctx: training.preload_loop(ctx, "ApplyRMSProp"))
