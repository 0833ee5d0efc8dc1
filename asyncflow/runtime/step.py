"""What one step shares between the partitions that run it in this process: ``Step``, the
context a waiting kernel receives, traced ``NodeStats``, and the located ``OpError``.
Nothing here schedules anything.
"""
from __future__ import annotations

import dataclasses
import time

import trio

from asyncflow import errors
from asyncflow.runtime import timeslice


def now_us():
    return time.perf_counter_ns() // 1000


async def offloaded(node, args):
    """Run ``node``'s kernel on a trio worker thread under its device's limiter."""
    return await trio.to_thread.run_sync(node.fn, node.ctx, *args,
                                         limiter=node.ctx.device.limiter)


class Step:
    """Per-step state shared by the partitions of one run in this process.

    Attributes:
        rendezvous: for Send/Recv (None: one partition); trace: a list of ``NodeStats``.
        park: a context manager entered only while the step waits, yielding a cancel scope
            its owner may cancel (a session closing); None: not tracked.
        offload, pause: from the awaiting event loop: ``async offload(node, args)`` runs a
            large kernel on a worker thread, ``async pause()`` ends a time slice.
        runnable, draining, current: ``core.drive``'s runnable list and state.
        extras: per-step services a waiting kernel may need, and statistics.
    """

    __slots__ = ("step_id", "rendezvous", "trace", "park", "offload", "pause", "runnable",
                 "draining", "current", "extras")

    def __init__(self, step_id, rendezvous=None, trace=None, park=None, offload=None,
                 pause=None):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.trace = trace
        self.park = park
        self.offload = offload or offloaded
        self.pause = pause or timeslice.checkpoint
        self.runnable = []
        self.draining = False
        self.current = None
        self.extras = {}


@dataclasses.dataclass(slots=True)
class NodeStats:
    """One executed node in a traced step (TF1's NodeExecStats); ``waited``: the kernel could
    not finish inline (it waited or was offloaded)."""

    node_name: str
    op_type: str
    device: str
    start_us: int
    end_us: int
    timeline_label: str = ""
    waited: bool = False


def recorder(trace, device_name):
    """``record(node, start, waited=False)``: append ``node``'s NodeStats, ending now."""
    def record(node, start, waited=False):
        op = node.op
        trace.append(NodeStats(op.name, op.type, device_name, start, now_us(), waited=waited))
    return record


class StepContext:
    """The context a waiting kernel receives: its node's context plus the running step."""

    __slots__ = ("node", "step", "name", "type", "attrs", "xp", "device", "output_dtypes",
                 "resources", "frame_iter")

    def __init__(self, node_ctx, step, frame_iter=None):
        self.node = node_ctx
        self.step = step
        self.name = node_ctx.name
        self.type = node_ctx.type
        self.attrs = node_ctx.attrs
        self.xp = node_ctx.xp
        self.device = node_ctx.device
        self.output_dtypes = node_ctx.output_dtypes
        self.resources = node_ctx.resources
        self.frame_iter = frame_iter  # "frame_id:iteration" inside a loop (rendezvous keys)

    def __getattr__(self, item):
        return getattr(self.node, item)


_ERROR_MAP = (
    (MemoryError, errors.ResourceExhaustedError),
    ((ValueError, IndexError, TypeError, ZeroDivisionError, FloatingPointError, KeyError),
     errors.InvalidArgumentError),
)


def wrap_error(exc, op, device_name):
    """One OpError naming ``op``, its type, device and creation site; keeps the cause.

    An error already located (by a nested path: a compiled loop, a static schedule) is
    returned as it is, whatever ``op`` says.
    """
    if getattr(exc, "_asyncflow_located", False):
        return exc
    if isinstance(exc, errors.OpError):
        cls, message = type(exc), exc.message
    else:
        cls = next((target for source, target in _ERROR_MAP if isinstance(exc, source)),
                   errors.UnknownError)
        message = f"{type(exc).__name__}: {exc}"
    if op is None:  # not a kernel's failure (the propagator's own work)
        err = cls(None, None, f"on {device_name}: {message}")
    else:
        err = cls(None, op, f"{op.type} '{op.name}' on {device_name}: {message}\n"
                            f"\t[created at {op.creation_site()}]")
    err._asyncflow_located = True
    err.__cause__ = exc
    return err


def closed_error(op=None):
    """The error of a step cancelled because its session was closed while it ran."""
    err = errors.CancelledError(None, op, "The session was closed while this step was "
                                "running (e.g. waiting on a queue)")
    err._asyncflow_located = True
    return err
