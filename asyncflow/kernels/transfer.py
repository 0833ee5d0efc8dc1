"""Kernels of ``_Send`` and ``_Recv`` (see ops/transfer.py), plus lossy float32 transfer.

Both kernels wait (``is_async``): Send may have to wait for the producing GPU stream before
its value leaves the device, and Recv waits in the step's rendezvous. They reach the
rendezvous only through ``ctx.step.rendezvous`` and the device only through ``ctx.device``,
so they import no trio scheduling.

A Recv tries its nowait twin (the value is already there) and its subscribing form
(``subscribe``, the one contract of the local and the worker's rendezvous: the Send's
``rendezvous.send``, or the worker's pull of a remote key, calls the executor back directly,
no task per Recv; the executor tries it first on CPU partitions), and only where
``subscribe`` answers False (a remote key outside a worker step) runs the async kernel.
The subscription is one ``_Subscription`` object (the rendezvous callback), not closures.

Lossy transfer (the paper's §5.5): float32 values cross as the high 16 bits (bfloat16).
- ``"truncate"``: the paper's method, ``(x.view(uint32) >> 16).astype(uint16)``; the receiver
  zero-fills: ``(bits.astype(uint32) << 16).view(float32)``. Rounds toward zero.
- ``"round"``: round to nearest, ties to even (what ``ml_dtypes``' bfloat16 cast does), NaN
  kept quiet NaN. Written with integer arithmetic on ``xp`` so it runs on numpy and CuPy alike.
Non-float32 values cross unchanged.
"""
from __future__ import annotations

import functools

import numpy as np

from asyncflow.device_names import device_type_of
from asyncflow.kernels.control_flow import DEAD
from asyncflow.kernels.registry import (WOULD_BLOCK, register_kernel, register_nowait,
                                       register_prepare, register_subscribe)
from asyncflow.rendezvous_keys import ROOT_FRAME_ITER, make_key


def rendezvous_key(attrs, frame_iter=ROOT_FRAME_ITER):
    """The key of a Send/Recv with these attrs in the frame iteration ``frame_iter``."""
    return _key(attrs["send_device"], attrs["send_device_incarnation"], attrs["recv_device"],
                attrs["tensor_name"], frame_iter)


# Inside a loop a key is built per iteration (Send, Recv's poll and subscribe): memoized by
# value. Root-frame keys are built once per plan node by ``_prepare_key``.
_key = functools.lru_cache(maxsize=8192)(make_key)


def _prepare_key(ctx):
    """Once per plan node (the kernels' prepare hook): the root-frame key (attrs never change
    once the op exists)."""
    return rendezvous_key(ctx.attrs)


def _key_of(ctx):
    """The rendezvous key of ``ctx``'s Send/Recv in its frame iteration.

    ``ctx`` is the step context of a waiting kernel: ``ctx.node`` is the plan node's context,
    whose ``prepared`` holds the root-frame key.
    """
    frame_iter = ctx.frame_iter
    if frame_iter and frame_iter != ROOT_FRAME_ITER:
        return rendezvous_key(ctx.attrs, frame_iter)
    return ctx.node.prepared


def compress_bfloat16(xp, x, mode):
    """float32 ``x`` as uint16 bfloat16 bits (``mode`` "truncate" or "round")."""
    bits = xp.ascontiguousarray(x).view(xp.uint32)
    if mode == "truncate":
        return (bits >> 16).astype(xp.uint16)
    # Round to nearest even: add 0x7FFF plus the lowest kept bit, then drop the low half.
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(xp.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded = xp.where(nan, ((bits >> 16) | 0x0040).astype(xp.uint16), rounded)
    return rounded


def decompress_bfloat16(xp, bits):
    """uint16 bfloat16 bits back to float32 (the low 16 bits zero)."""
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


@register_kernel("_Send", is_async=True, runs_on_dead=True)
async def _send(ctx, value):
    if value is DEAD:  # deadness crosses devices: the Recv side turns dead too
        _deposit(ctx, None, is_dead=True)
        return ()
    attrs = ctx.attrs
    device = ctx.device
    if device.kind != "CPU":
        # The value leaves this device's stream: wait for it by an event, never by polling.
        recv_kind = device_type_of(attrs["recv_device"])
        if recv_kind == "CPU":
            value = await device.to_host(value)
        else:
            await device.synchronize()
    _deposit(ctx, value)
    return ()


def _deposit(ctx, value, is_dead=False):
    mode = ctx.attrs.get("compress") or ""
    if mode and getattr(value, "dtype", None) == np.float32:
        xp = np if isinstance(value, np.ndarray) else ctx.xp
        value = compress_bfloat16(xp, value, mode)
    ctx.step.rendezvous.send(_key_of(ctx), value, is_dead)


@register_kernel("_Recv", is_async=True, runs_on_dead=True)
async def _recv(ctx):
    value, is_dead = await ctx.step.rendezvous.recv(_key_of(ctx))
    return _received(ctx, value, is_dead)


def _received(ctx, value, is_dead=False):
    if is_dead:
        return (DEAD,)
    if ctx.attrs.get("compress") and ctx.output_dtypes[0] == np.float32 \
            and getattr(value, "dtype", None) == np.uint16:
        xp = np if isinstance(value, np.ndarray) else ctx.xp
        value = decompress_bfloat16(xp, value)
    if ctx.device.kind != "CPU":
        value = ctx.to_device(value)
    return (value,)


@register_nowait("_Recv")
def _recv_nowait(ctx):
    poll = getattr(ctx.step.rendezvous, "poll", None)
    item = poll(_key_of(ctx)) if poll is not None else None
    return WOULD_BLOCK if item is None else _received(ctx, item[0], item[1])


@register_subscribe("_Recv")
def _recv_subscribe(ctx, deliver):
    rendezvous = ctx.step.rendezvous
    subscribe = getattr(rendezvous, "subscribe", None)
    if subscribe is None:
        return WOULD_BLOCK
    subscription = _Subscription(ctx, deliver, rendezvous, _key_of(ctx))
    if subscribe(subscription.key, subscription) is False:
        return WOULD_BLOCK  # a remote key this rendezvous cannot pull without a task
    return subscription.cancel


class _Subscription:
    """A Recv waiting in a rendezvous: called by the Send (or abort), it delivers outputs."""

    __slots__ = ("ctx", "deliver", "rendezvous", "key")

    def __init__(self, ctx, deliver, rendezvous, key):
        self.ctx = ctx
        self.deliver = deliver
        self.rendezvous = rendezvous
        self.key = key

    def __call__(self, item, error):  # called synchronously by send/abort: never raises
        if error is not None:
            self.deliver(None, error)
            return
        ctx = self.ctx
        if not item[1] and ctx.device.kind == "CPU" and not ctx.attrs.get("compress"):
            self.deliver((item[0],))  # what ``_received`` returns here, without the call
            return
        try:
            outputs = _received(self.ctx, item[0], item[1])
        except Exception as exc:  # noqa: BLE001 - becomes this Recv's error
            self.deliver(None, exc)
            return
        self.deliver(outputs)

    def cancel(self):
        self.rendezvous.unsubscribe(self.key, self)


@register_nowait("_Send")
def _send_nowait(ctx, value):
    if value is DEAD:
        _deposit(ctx, None, is_dead=True)
        return ()
    if ctx.device.kind != "CPU":
        return WOULD_BLOCK  # the value must first leave the device's stream (awaited)
    if ctx.attrs.get("compress"):
        _deposit(ctx, value)
    else:  # ``_deposit`` without the call: the common case of every local edge
        ctx.step.rendezvous.send(_key_of(ctx), value, False)
    return ()


register_prepare("_Send")(_prepare_key)
register_prepare("_Recv")(_prepare_key)
