"""Kernels of control-flow primitives (see ops/control_flow.py) and of per-step stacks.

Dead tensors: a kernel output equal to ``DEAD`` is a dead tensor (TF's "no value"). Only
Switch produces one on purpose (its untaken port). The executor never runs an ordinary
kernel on dead inputs; kernels registered with ``runs_on_dead=True`` (Send/Recv) receive
``DEAD`` as an input value and must forward the bit (``rendezvous.send(key, value, is_dead)``),
and a Recv that receives a dead tensor returns ``(DEAD,)``.

Merge receives all its data inputs, ``DEAD`` in every position except the first live one
(or ``DEAD`` everywhere when the executor runs it dead, which it never does: a dead Merge
does not run). Enter, Exit and NextIteration are identities: moving the value between
frames and iterations is the executor's job, not the kernel's.

Stacks (``StackV2``/``StackPushV2``/``StackPopV2``) hold forward values of a while loop for
its gradient loop. A stack lives for one step: ``StackV2`` runs once per step (outside the
loop) and returns a fresh stack object that flows as a value to the pushes and pops, so
concurrent steps never share one and nothing outlives the step.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import host_memory, register_kernel


class _Dead:
    """The dead-tensor marker (a singleton)."""

    __slots__ = ()

    def __repr__(self):
        return "DEAD"

    def __reduce__(self):
        return (_dead, ())


def _dead():
    return DEAD


DEAD = _Dead()


@register_kernel("Switch")
@register_kernel("RefSwitch")
def _switch(ctx, data, pred):
    if pred.shape != ():
        raise errors.InvalidArgumentError(
            None, ctx.name, f"The second input of Switch must be a scalar bool, got shape "
                            f"{list(pred.shape)}")
    return (DEAD, data) if bool(pred) else (data, DEAD)


_INDICES = tuple(np.int32(i) for i in range(8))  # (immutable scalars: shared)


@register_kernel("Merge")
def _merge(ctx, *inputs):
    for index, value in enumerate(inputs):
        if value is not DEAD:
            return (value, _INDICES[index] if index < 8 else np.int32(index))
    return (DEAD, DEAD)


def _identity(ctx, value):
    return (value,)


for _type in ("Enter", "RefEnter", "Exit", "RefExit", "NextIteration", "RefNextIteration"):
    register_kernel(_type)(_identity)


@register_kernel("LoopCond")
def _loop_cond(ctx, pred):
    if pred.shape != ():
        raise errors.InvalidArgumentError(
            None, ctx.name, f"the loop condition must be a scalar bool, got shape "
                            f"{list(pred.shape)}")
    return (pred,)


class _Stack:
    __slots__ = ("name", "items", "max_size")

    def __init__(self, name, max_size):
        self.name = name
        self.items = []
        self.max_size = max_size


@register_kernel("StackV2")
def _stack(ctx, max_size):
    size = int(max_size)
    return (_Stack(ctx.attrs.get("stack_name") or ctx.name, size if size >= 0 else None),)


@register_kernel("StackPushV2")
def _stack_push(ctx, handle, value):
    if handle.max_size is not None and len(handle.items) >= handle.max_size:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Stack {handle.name} is full (max_size {handle.max_size})")
    handle.items.append(value)
    return (value,)


@register_kernel("StackPopV2")
def _stack_pop(ctx, handle):
    if not handle.items:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Stack {handle.name} is empty: popped more often than pushed")
    return (handle.items.pop(),)


@register_kernel("CaseExclusive")
def _case_exclusive(ctx, *preds):
    true = [i for i, p in enumerate(preds) if bool(p)]
    if len(true) > 1:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Input error: exclusive=True: more than 1 conditions "
                            f"(predicates {true}) evaluated as True")
    return ()


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Switch", inputs=(1,))
host_memory("LoopCond", inputs=(0,), outputs=(0,))
host_memory("CaseExclusive", inputs="all")
host_memory("StackV2", inputs=(0,), outputs=(0,))
host_memory("StackPushV2", inputs=(0,))
host_memory("StackPopV2", inputs=(0,))
