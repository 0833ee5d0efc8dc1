"""Gradients of the control-flow primitives (TF1's ``control_flow_grad.py``).

Through a cond the gradient follows the taken branch: the gradient of ``Switch`` is a
``Merge`` of the two branch gradients (the untaken one is dead at run time, so the Merge
forwards the live one), and the gradient of a cond's ``Merge`` is a ``Switch`` of the
incoming gradient on the cond's predicate, so each branch receives it only when taken.

A missing branch gradient is filled with ``zeros_like`` of that Switch output, which is
itself live exactly when that branch is taken.

Loops: ``back_prop=False`` makes a loop non-differentiable (its Exits pass no gradient).
Gradients through a differentiable ``while_loop`` need the gradient loop (forward values
saved on stacks, a backward loop running the forward count); until the gradients core
offers the hook for it, asking for one fails loudly naming the loop rather than returning
a silently wrong None.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_gradient
from asyncflow.ops import control_flow as cf

not_differentiable("LoopCond", "StackV2", "StackPushV2", "StackPopV2", "CaseExclusive")


@register_gradient("Switch")
@register_gradient("RefSwitch")
def _switch_grad(op, grad_false, grad_true):
    from asyncflow.ops.sources import zeros_like
    if grad_false is None and grad_true is None:
        return [None, None]
    if grad_false is None:
        grad_false = zeros_like(op._outputs[0])
    if grad_true is None:
        grad_true = zeros_like(op._outputs[1])
    return [cf.merge([grad_false, grad_true], name="cond_grad")[0], None]


@register_gradient("Merge")
def _merge_grad(op, grad, _grad_index=None):
    pred = cf._cond_merges(op.graph).get(op)
    if pred is None:
        raise LookupError(f"Gradient of Merge '{op.name}': only Merges built by af.cond/af.case "
                          "can be differentiated outside a while_loop gradient")
    if grad is None:
        return [None] * len(op._inputs)
    grad_false, grad_true = cf.switch(grad, pred)
    return [grad_false, grad_true]


def _loop_of(op):
    ctx = op._control_flow_context
    while ctx is not None and not isinstance(ctx, cf.WhileContext):
        ctx = ctx.outer
    return ctx


@register_gradient("Exit")
@register_gradient("RefExit")
def _exit_grad(op, grad):
    ctx = _loop_of(op)
    if ctx is None or not ctx.back_prop or grad is None:
        return [None]
    raise LookupError(f"Gradient through while_loop '{ctx.frame_name}' (Exit '{op.name}') is "
                      "not supported yet; build the loop with back_prop=False to treat its "
                      "results as constants")


for _type in ("Enter", "RefEnter", "NextIteration", "RefNextIteration"):
    register_gradient(_type)(lambda op, grad: [None])
