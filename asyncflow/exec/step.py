"""What one step shares between the partitions that run it in this process (``Step``) and
how it records a traced kernel. Nothing here schedules anything.
"""
from __future__ import annotations

import contextlib
import time

import trio

from asyncflow import errors
from asyncflow.exec import timeslice
from asyncflow.exec.io_threads import IO_THREADS
from asyncflow.exec.options import NodeStats


def now_us():
    return time.perf_counter_ns() // 1000


async def offloaded(node, args):
    """Run ``node``'s kernel on a trio worker thread under its device's limiter; a blocking
    IO kernel on the process's IO threads instead (``exec/io_threads.py``), a read
    (``abandon``: kernels/registry.py) abandoned when the step is cancelled."""
    if node.blocking_io:
        return reraised(await IO_THREADS.run(node.op, returning, node.fn, node.ctx, *args,
                                             abandon=node.abandon))
    return reraised(await trio.to_thread.run_sync(returning, node.fn, node.ctx, *args,
                                                  limiter=node.ctx.device.limiter))


class Raised:
    """A kernel's exception, returned from its worker thread as a value (``returning``).

    Raised across ``trio.to_thread``, it would stay in reference cycles with trio's frames
    (each holds the outcome that holds it, and its traceback holds them), and with it the
    failed step's frames and values, until the cyclic GC ran."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


def returning(fn, *args):
    """``fn(*args)`` on a worker thread; its exception as a ``Raised``."""
    try:
        return fn(*args)
    except BaseException as exc:  # noqa: BLE001 - raised again on the loop by ``reraised``
        return Raised(exc)


def reraised(result):
    """``result`` of ``returning``, its exception raised here (and let go by the Raised)."""
    if type(result) is not Raised:
        return result
    exc, result.exc = result.exc, None
    try:
        raise exc
    finally:
        del exc


class _Preloading:
    """What an ``offload`` runs for a node's ``Preload``: its ``load`` on the node's device's
    worker threads, as the node's kernel would run there. A load that brings a BLAS (scipy's
    OpenBLAS) extends the BLAS hold itself, on that thread (``nn_conv_fft._load_fft``): a
    limit takes effect from any thread (``intra_op``), so none is set on the awaiting loop's."""

    __slots__ = ("ctx",)
    abandon = blocking_io = False

    def __init__(self, node):
        self.ctx = node.ctx

    @staticmethod
    def fn(ctx):
        ctx.prepared.load(ctx)
        return ()


async def preload(compiled, offload=None):
    """Run the ``Preload``s of ``compiled``'s plans (``ExecutionPlan.preloads``: one-time work
    such as an import that would block the event loop) through ``offload`` (default: trio's
    worker threads), then empty them and clear ``compiled.preloading``: called before a
    compiled run's first step. A load's exception fails the step as the node's kernel's
    would, an OpError naming the node (``errors.located``); that plan's Preloads and the flag
    stay pending, so the next step tries them again (loads are idempotent). A cancel waits
    for a load on trio's worker thread (which then counts); one that abandons its thread
    (asyncio's offload) leaves the Preloads pending."""
    for plan in compiled.plans:
        for node in plan.preloads:
            try:
                await (offload or offloaded)(_Preloading(node), ())
            except Exception as exc:  # noqa: BLE001 - (Cancelled and asyncio's are not)
                raise errors.located(exc, node.op, plan.device.name) from exc
        plan.preloads = ()
    compiled.preloading = False


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
        timeout_ms: the step's deadline for runners that pass it on (a cluster's workers);
            0: none. Local runners leave deadlines to their caller's cancel scope.
    """

    __slots__ = ("step_id", "rendezvous", "trace", "park", "offload", "pause", "runnable",
                 "draining", "current", "extras", "timeout_ms", "trio_threads")

    def __init__(self, step_id, rendezvous=None, trace=None, park=None, offload=None,
                 pause=None, timeout_ms=0):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.trace = trace
        self.park = park
        self.trio_threads = offload is None  # (offload: trio's worker threads)
        self.offload = offload or offloaded
        if park is not None:  # a blocking read waits where a closing session cancels it
            self.offload = close_cancellable(self.offload, park)
        self.pause = pause or timeslice.checkpoint
        self.runnable = []
        self.draining = False
        self.current = None
        self.extras = {}
        self.timeout_ms = timeout_ms


def close_cancellable(offload, park):
    """``offload`` whose blocking reads (``node.abandon``: kernels/registry.py) wait inside
    ``park``, so a closing session cancels them (their threads abandoned) as it cancels any
    other wait of the step; other kernels are offloaded as they were."""
    async def offload_io(node, args):
        if not node.abandon:
            return await offload(node, args)
        with park() as parked:
            outputs = await offload(node, args)
        if closed(parked):
            raise errors.session_closed(node.op)
        return outputs
    return offload_io


def waiting(step):
    """The one close-cancellable idiom: ``with waiting(step) as parked:`` around a wait
    enters ``step.park`` (the owner's scope, which a closing session cancels), or nothing
    when the step is not tracked; ``closed(parked)`` says afterwards whether it was closed."""
    park = step.park
    return park() if park is not None else contextlib.nullcontext()


def closed(parked):
    """True if the wait of ``with waiting(step) as parked`` ended because the owner closed."""
    return parked is not None and parked.cancelled_caught


def recorder(trace, device_name):
    """``record(node, start, waited=False)``: append ``node``'s NodeStats, ending now."""
    def record(node, start, waited=False):
        op = node.op
        trace.append(NodeStats(op.name, op.type, device_name, start, now_us(), waited=waited))
    return record
