"""The executor's one core: a synchronous drain over a propagator, and one async ``finish``.

Theory of operation (``docs/architecture.md``, "Plans and the executor"): a ``Run`` drains
its propagator's ``ready`` stack of entries ``(node, args, where)`` in the calling task,
awaiting nothing (trio's ``*_nowait`` style); what cannot complete inline joins ``waiting``
or subscribes, and ``finish`` awaits it. CPU runs of one step drain each other (``drive``),
so a Send/Recv ping-pong stays one drain deep. The first failure stops scheduling and is one
located ``OpError``. This module knows nothing of frames, wires or event loops but trio's.
"""
from __future__ import annotations

import contextlib
import types

import trio

from asyncflow import errors
from asyncflow.kernels.control_flow import DEAD
from asyncflow.kernels.registry import WOULD_BLOCK
from asyncflow.exec import timeslice
from asyncflow.exec.context import StepContext
from asyncflow.exec.io_threads import IO_THREADS
from asyncflow.exec.plan import runtime_cost
from asyncflow.exec.step import (
    closed, now_us, recorder, reraised, returning, waiting)

PAUSE = object()  # what an ``Own`` entry answers when the slice ran out there (a loop)
_BUDGET = timeslice.BUDGET
_due = timeslice.due


class Own:
    """Heads a propagator's own entry ``(Own(fn), payload, where)``: run as ``fn(payload,
    where)`` (a dead node, a loop's step)."""

    __slots__ = ("fn",)
    plain = False
    op = None

    def __init__(self, fn):
        self.fn = fn


class Flat:
    """Slots and pending counts: the propagator of a partition without control flow."""

    __slots__ = ("ready", "complete", "values")
    frame_iter = None  # every entry is in the root frame

    def __init__(self, plan, slots):
        nodes, fetched = plan.nodes, plan.fetched
        pending = [n.pending for n in nodes]
        readers = list(plan.slot_readers)
        ready = self.ready = []

        def complete(node, _, outputs):
            for slot, value in zip(node.outputs, outputs):
                slots[slot] = value
            for index in node.consumers:
                pending[index] -= 1
                if pending[index] == 0:  # ready: its entry, its arguments gathered
                    consumer = nodes[index]
                    inputs = consumer.inputs
                    if len(inputs) == 1:
                        args = [slots[inputs[0]]]
                    else:
                        args = [*consumer.gather(slots)] if inputs else []
                    for slot in inputs:
                        readers[slot] -= 1
                        if readers[slot] == 0 and slot not in fetched:
                            slots[slot] = None  # its last reader has it: free the buffer
                    ready.append((consumer, args, None))

        self.complete = complete
        self.values = lambda: fetched_values(plan, slots)
        for index in plan.roots:  # the roots: as if a node before them all completed
            pending[index] = 1
        complete(types.SimpleNamespace(outputs=(), consumers=plan.roots), None, ())

    def release(self):
        """The run is over (``values`` still answers): nothing here refers back to itself."""


def fetched_values(plan, slots):
    """The fetched values of a finished flat run, in ``plan.fetch_slots`` order."""
    return [slots[slot].read() if deref else slots[slot]
            for slot, deref in zip(plan.fetch_slots, plan.fetch_deref)]


class Run:
    """One partition's run for one step: its propagator, waits, failure and reports."""

    __slots__ = ("step", "prop", "ready", "complete", "frame_iter", "waiting", "failure",
                 "outstanding", "record", "device_name", "shares", "reports", "lot", "cancels",
                 "scheduled", "closed")

    def __init__(self, plan, prop, step):
        self.step = step
        self.prop = prop
        self.ready, self.complete, self.frame_iter = prop.ready, prop.complete, prop.frame_iter
        self.waiting = []       # (node, its StepContext or None, args, where): to be tasks
        self.failure = None
        self.outstanding = 0    # kernels waiting, running as tasks or subscribed
        self.device_name = plan.device.name
        self.record = None if step.trace is None else recorder(step.trace, self.device_name)
        # The CPU runs of a step with a rendezvous drain each other (``drive``).
        self.shares = step.rendezvous is not None and plan.device.kind == "CPU"
        self.reports = []       # (node, outputs, exc, start, where) from tasks and subscriptions
        self.lot = None         # where ``finish`` parks its task between reports
        self.cancels = []       # cancel callables of subscriptions
        self.scheduled = False  # on ``step.runnable``
        self.closed = False

    @property
    def done(self):
        return not self.ready and not self.outstanding

    @property
    def paused(self):
        """Stopped only because the slice ran out: a checkpoint, then ``drain`` again."""
        return self.failure is None and bool(self.ready) and not self.waiting

    def drain(self):
        """Run what is runnable (and, sharing, what this run's Sends feed); awaits nothing."""
        if self.shares:
            drive(self)
        else:
            self.drain_own()

    def drain_own(self):
        ready, complete, record = self.ready, self.complete, self.record
        budget = _BUDGET
        left = budget.left
        start = 0
        node = None
        while ready:
            left -= 1
            if left <= 0:
                if _due():  # over: stop here; the owner checkpoints and drains again
                    budget.left = 0
                    return
                left = timeslice.CHECK_EVERY
            node, args, where = ready.pop()
            try:
                if record is not None:
                    start = now_us()
                if node.plain:
                    outputs = node.fn(node.ctx, *args)
                elif node.__class__ is Own:
                    if node.fn(args, where) is PAUSE:
                        budget.left = 0
                        return
                    continue
                else:
                    for position in node.deref:
                        if args[position] is not DEAD:
                            args[position] = args[position].read()
                    if node.is_async:
                        ctx = StepContext(node.ctx, self.step, None if self.frame_iter is None
                                          else self.frame_iter(where))
                        form = node.subscribe
                        # Sharing, a value already there is delivered inline at once:
                        # subscribing first saves the poll that usually finds nothing.
                        if form is not None and self.shares \
                                and self.subscribe(form, node, ctx, args, where, start):
                            continue
                        outputs = WOULD_BLOCK if node.nowait is None else node.nowait(ctx, *args)
                        if outputs is WOULD_BLOCK:
                            # Not sharing, subscribe now (sharing, that was tried first); else
                            # it runs as a task.
                            if form is None or self.shares \
                                    or not self.subscribe(form, node, ctx, args, where, start):
                                self.outstanding += 1
                                self.waiting.append((node, ctx, args, where))
                            continue
                    elif node.offload and runtime_cost(node, args) >= node.offload_cost:
                        self.outstanding += 1
                        self.waiting.append((node, None, args, where))
                        continue
                    else:
                        outputs = node.fn(node.ctx, *args)
                complete(node, where, outputs)
            except (trio.Cancelled, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.failure = errors.located(exc, node.op, self.device_name)
                budget.left = left
                return
            if record is not None:
                record(node, start)
        budget.left = left

    def subscribe(self, form, node, ctx, args, where, start):
        """Try ``node``'s subscribing ``form``; True if it will deliver, once: inside a drain
        of this step (a Send run inline) a sharing run completes it at once and joins
        ``step.runnable``; otherwise (a task, an abort, an error) it reports."""
        step = self.step

        def deliver(outputs, exc=None):
            if exc is None and self.shares and step.draining and self.failure is None:
                self.outstanding -= 1
                self.complete(node, where, outputs)
                if self.record is not None:
                    self.record(node, start, True)
                if not self.scheduled and self is not step.current:
                    self.scheduled = True
                    step.runnable.append(self)
                return
            self.report((node, outputs, exc, start, where))

        self.outstanding += 1
        cancel = form(ctx, *args, deliver)
        if cancel is WOULD_BLOCK:
            self.outstanding -= 1
            return False
        self.cancels.append(cancel)
        return True

    def report(self, item):
        if not self.closed:  # (over, failed or cancelled: nobody waits for this value)
            self.reports.append(item)
            self.wake()

    def wake(self):
        """Wake the task parked on this run ("it changed, look again"), if one is. Without a
        lot no task waits on this run: whoever starts one looks at its state first."""
        if self.lot is not None:
            self.lot.unpark_all()

    def take_reports(self):
        """Apply the reports (finished kernels) in order, stopping at a failure; drain."""
        reports, self.reports = self.reports, []
        for node, outputs, exc, start, where in reports:
            if self.failure is not None:
                return  # (also: failed meanwhile, in a drain run by another partition's task)
            self.outstanding -= 1
            if exc is not None:
                self.failure = errors.located(exc, node.op, self.device_name)
                return
            self.complete(node, where, outputs)
            if self.record is not None:
                self.record(node, start, True)
        if self.failure is None:
            self.drain()

    def close(self):
        """The run is over: drop its reports and pending subscriptions; idempotent."""
        self.closed = True
        self.reports.clear()
        if self.outstanding:  # failed or cancelled: drop the subscriptions not delivered
            for cancel in self.cancels:
                cancel()
        self.cancels.clear()  # they refer back to this run: let it go without the GC
        self.prop.release()


def drive(run):
    """Drain ``run``, then every run of its step made runnable meanwhile (the trampoline).

    Runs that must act afterwards are woken; ``run`` itself is not (its caller looks at it).
    When a slice runs out the drain stops and the runs still runnable are woken.
    """
    step = run.step
    runnable = step.runnable
    assert not step.draining, "a drain never starts another (a delivery schedules the run)"
    step.draining = True
    runnable.append(run)  # (popped first)
    over = False  # the slice ran out in a drain: stop, wake what is left
    try:
        while runnable and not over:
            other = runnable.pop()
            other.scheduled = False
            if other.failure is None:
                step.current = other
                other.drain_own()
                over = bool(other.ready) and other.failure is None
            if other is not run and (other.failure is not None or other.waiting or over
                                     or not (other.ready or other.outstanding)):
                other.wake()
    finally:
        step.draining = False
        step.current = None
        while runnable:  # the slice ran out, or an exception escaped: their tasks go on
            other = runnable.pop()
            other.scheduled = False
            other.wake()


def start(plan, prop, step):
    """A run of ``plan`` over ``prop`` after its first drain (finished, failed or waiting)."""
    run = Run(plan, prop, step)
    try:
        run.drain()
    except BaseException:
        run.close()
        raise
    return run


async def finish(run):
    """Await the rest of ``run``; close it.

    Returns:
        The fetched values in ``plan.fetch_slots`` order.

    Raises:
        OpError: the run's failure, located.
        CancelledError: the step's owner closed it while it waited.
    """
    try:
        if run.failure is None and not run.done:
            with waiting(run.step) as parked:
                await _wait(run)
            if closed(parked):
                raise errors.session_closed()
    finally:
        run.close()
    failure = run.failure
    if failure is not None:
        run.failure = None  # (the run, in the failure's traceback's frames: not a cycle)
        try:
            raise failure
        finally:
            del failure
    return run.prop.values()


async def _wait(run):
    run.lot = trio.lowlevel.ParkingLot()
    while run.failure is None and not run.done:
        if run.waiting:  # a kernel must run as a task: go on inside a nursery
            async with trio.open_nursery() as nursery:
                while run.failure is None and not run.done:
                    for entry in run.waiting:
                        nursery.start_soon(_task, run, *entry)
                    run.waiting.clear()
                    await _next(run)
                nursery.cancel_scope.cancel()
            return
        await _next(run)


async def _next(run):
    """Drain again after a checkpoint (the slice ran out), else after a report or a wake."""
    if run.ready:
        await timeslice.checkpoint()
    elif not run.reports:
        await run.lot.park()
        timeslice.restart()  # parking gave the event loop back
    run.take_reports()


async def _task(run, node, ctx, args, where):
    """Run a waiting (``ctx``) or offloaded kernel as a task; report, never raise into the
    nursery. A traced offloaded kernel's start is when its worker thread begins (after the
    device's limiter let it in), so a trace shows how the devices really overlap.
    """
    start = now_us() if run.record is not None else 0
    try:
        if ctx is not None:
            outputs = await node.fn(ctx, *args)
        elif run.record is not None:
            with waiting(run.step) if node.abandon else _NOT_PARKED as parked:
                if node.blocking_io:  # (exec/io_threads.py)
                    start, outputs = reraised(await IO_THREADS.run(
                        node.op, returning, _timed, node, args, abandon=node.abandon))
                else:
                    start, outputs = reraised(await trio.to_thread.run_sync(
                        returning, _timed, node, args, limiter=node.ctx.device.limiter))
            if closed(parked):
                raise errors.session_closed(node.op)
        else:
            outputs = await run.step.offload(node, args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # noqa: BLE001 - reported
        run.report((node, None, exc, start, where))
        return
    run.report((node, outputs, None, start, where))


_NOT_PARKED = contextlib.nullcontext()  # (a traced kernel that is not a blocking read)


def _timed(node, args):
    return now_us(), node.fn(node.ctx, *args)
