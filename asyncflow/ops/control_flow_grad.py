"""Gradients of the control-flow primitives (TF1's ``control_flow_grad.py``).

Through a cond the gradient follows the taken branch: the gradient of ``Switch`` is a
``Merge`` of the two branch gradients (the untaken one is dead at run time, so the Merge
forwards the live one), and the gradient of a cond's ``Merge`` is a ``Switch`` of the
incoming gradient on the cond's predicate, so each branch receives it only when taken.

A missing branch gradient is filled with ``zeros_like`` of that Switch output, which is
itself live exactly when that branch is taken.

Loops are differentiated as a whole: the gradients core maps a loop's Enter and Exit ops to
one ``LoopUnit`` (``graph.extensions["gradient_unit"]``), whose gradient function builds the
gradient loop (TF1's GradLoopState, simplified):
- a forward iteration counter is added to the loop, and every forward value the backward body
  reads is pushed on a per-step stack (StackV2/StackPushV2) in each forward iteration; each
  push gates the counter's increment and is gated by the counter's value, so pushes keep
  iteration order and the counter's exit (the gradient loop's trip count) waits for all;
- the gradient loop runs the forward count down to zero; its body is ``af.gradients`` of one
  forward body iteration (body outputs w.r.t. body inputs and loop invariants), built inside a
  ``GradWhileContext`` that turns every forward in-loop value into a StackPopV2 (latest first)
  and every loop invariant into the invariant's outer tensor; each pop gates the backward
  counter's decrement, so pops of iteration j+1 never overtake those of iteration j;
- the loop variables' gradients leave the gradient loop as the gradients of the initial
  values; the invariants' gradients are accumulated across iterations.
``back_prop=False`` makes the unit non-differentiable. A loop nested in another loop is
differentiated inside the outer gradient body: its stacks are created per outer iteration and
their handles, like its trip count, are saved and popped by the outer gradient loop (see
``while_grad``). Values computed inside a cond in a loop body are pushed only when their
branch is taken and popped under the same saved predicate.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_gradient
from asyncflow.ops import control_flow as cf
from asyncflow.ops.sources import zeros, zeros_like

not_differentiable("LoopCond", "StackV2", "StackPushV2", "StackPopV2", "CaseExclusive")


@register_gradient("Switch")
@register_gradient("RefSwitch")
def _switch_grad(op, grad_false, grad_true):
    if grad_false is None and grad_true is None:
        return [None, None]
    if grad_false is None:
        grad_false = _branch_zeros(op, 0)
    if grad_true is None:
        grad_true = _branch_zeros(op, 1)
    return [cf.merge([grad_false, grad_true], name="cond_grad")[0], None]


def _branch_zeros(op, branch):
    """Zeros shaped like the Switch's data, live exactly when ``branch`` is taken.

    Built from the Switch's input, not its output: inside a loop's gradient the output is a
    value of one branch only, while the input (and the predicate) are saved every iteration.
    """
    data, pred = op.inputs
    if data.shape.is_fully_defined():
        filler = zeros(data.shape.as_list(), dtype=data.dtype)
    else:
        filler = zeros_like(data)
    return cf.switch(filler, pred)[branch]


@register_gradient("Merge")
def _merge_grad(op, grad, _grad_index=None):
    pred = cf.cond_merges(op.graph).get(op)
    if pred is None:
        raise LookupError(f"Gradient of Merge '{op.name}': only Merges built by af.cond/af.case "
                          "can be differentiated outside a while_loop gradient")
    if grad is None:
        return [None] * len(op.inputs)
    grad_false, grad_true = cf.switch(grad, pred)
    return [grad_false, grad_true]


def _exit_grad(op, grad):
    raise LookupError(f"Gradient of Exit '{op.name}' reached outside its while_loop unit")


def _enter_grad(op, grad):
    """An Enter of a loop whose body is being built (``af.gradients`` called in the body):
    within one iteration the value passes through unchanged (TF1's ``_EnterGrad`` without
    a grad state)."""
    frame = op.get_attr("frame_name")
    ctx = cf.current_context(op.graph)
    while ctx is not None:
        if isinstance(ctx, cf.WhileContext) and ctx.frame_name == frame:
            return [grad]
        ctx = ctx.outer
    raise LookupError(f"Gradient of Enter '{op.name}' reached outside its while_loop unit")


for _type in ("Exit", "RefExit"):
    register_gradient(_type)(_exit_grad)
for _type in ("Enter", "RefEnter"):
    register_gradient(_type)(_enter_grad)
# The back edge ends a body: differentiating one iteration stops there (never loops round).
not_differentiable("NextIteration", "RefNextIteration")
