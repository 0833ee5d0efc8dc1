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
import math
import types

import trio

from asyncflow.kernels.control_flow import DEAD
from asyncflow.kernels.registry import WOULD_BLOCK
from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import OFFLOAD_COST, runtime_cost
from asyncflow.runtime.step import StepContext, closed_error, now_us, recorder, wrap_error

PAUSE = object()  # what an ``Own`` entry answers when the slice ran out there (a loop)
WAKE = (None, None, None, 0, None)  # on a report channel: "your run changed, look again"
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


def fetched_values(plan, slots):
    """The fetched values of a finished flat run, in ``plan.fetch_slots`` order."""
    return [slots[slot].read() if deref else slots[slot]
            for slot, deref in zip(plan.fetch_slots, plan.fetch_deref)]


class Run:
    """One partition's run for one step: its propagator, waits, failure and report channel."""

    __slots__ = ("step", "prop", "ready", "complete", "frame_iter", "waiting", "failure",
                 "outstanding", "record", "device_name", "shares", "report_send",
                 "report_receive", "cancels", "scheduled", "woken", "closed")

    def __init__(self, plan, prop, step):
        self.step = step
        self.prop = prop
        self.ready, self.complete, self.frame_iter = prop.ready, prop.complete, prop.frame_iter
        self.waiting = []       # (node, args, where) to start as tasks
        self.failure = None
        self.outstanding = 0    # kernels waiting, running as tasks or subscribed
        self.device_name = plan.device.name
        self.record = None if step.trace is None else recorder(step.trace, self.device_name)
        # The CPU runs of a step with a rendezvous drain each other (``drive``).
        self.shares = step.rendezvous is not None and plan.device.kind == "CPU"
        self.report_send = self.report_receive = None
        self.cancels = []       # cancel callables of subscriptions
        self.scheduled = False  # on ``step.runnable``
        self.woken = False      # a ``WAKE`` is on the channel, not yet received
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
                            self.wait(form, node, ctx, args, where, start)
                            continue
                    elif node.offload and runtime_cost(node, args) >= OFFLOAD_COST:
                        self.wait(None, node, None, args, where, start)
                        continue
                    else:
                        outputs = node.fn(node.ctx, *args)
                complete(node, where, outputs)
            except (trio.Cancelled, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.failure = wrap_error(exc, node.op, self.device_name)
                budget.left = left
                return
            if record is not None:
                record(node, start)
        budget.left = left

    def wait(self, form, node, ctx, args, where, start):
        """``node`` cannot complete inline: subscribe (not sharing; sharing, that was tried
        first), else queue it in ``waiting``, to start as a task."""
        if form is None or self.shares or not self.subscribe(form, node, ctx, args, where, start):
            self.outstanding += 1
            self.waiting.append((node, args, where))

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

    def open_report(self):
        """The channel of reports ``(node, outputs, exc, start, where)`` from tasks and
        subscriptions."""
        if self.report_send is None:
            self.report_send, self.report_receive = trio.open_memory_channel(math.inf)
        return self.report_send

    def report(self, item):
        if self.closed:
            return  # the run is over (failed or cancelled): nobody waits for this value
        try:
            self.open_report().send_nowait(item)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def wake(self, force=False):
        """Put a ``WAKE`` on the channel (once until received, unless ``force``). Without a
        channel no task waits on this run: whoever starts one looks at its state first."""
        if (self.woken and not force) or self.report_send is None or self.closed:
            return
        self.woken = True
        self.report(WAKE)

    def take_report(self, report):
        """Apply one report: a finished kernel, or a ``WAKE``; then drain."""
        node, outputs, exc, start, where = report
        if node is None:
            self.woken = False
        if self.failure is not None:
            return  # failed meanwhile, in a drain run by another partition's task
        if node is not None:
            self.outstanding -= 1
            if exc is not None:
                self.failure = wrap_error(exc, node.op, self.device_name)
                return
            self.complete(node, where, outputs)
            if self.record is not None:
                self.record(node, start, True)
        self.drain()

    def close(self):
        """Cancel pending subscriptions and close the channel (the run is over); idempotent."""
        self.closed = True
        if self.report_send is not None:
            self.report_send.close()
            self.report_receive.close()
        if self.outstanding:  # failed or cancelled: drop the subscriptions not delivered
            for cancel in self.cancels:
                cancel()
        self.cancels.clear()  # they refer back to this run: let it go without the GC


def drive(run):
    """Drain ``run``, then every run of its step made runnable meanwhile (the trampoline).

    Runs that must act afterwards are woken; ``run`` itself is not (its caller looks at it).
    When a slice runs out the drain stops and the runs still runnable are woken.
    """
    step = run.step
    runnable = step.runnable
    assert not step.draining, "a drain never starts another (a delivery schedules the run)"
    step.draining = True
    try:
        step.current = run
        run.drain_own()
        over = bool(run.ready) and run.failure is None
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
            other.wake(force=True)


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
            park = run.step.park
            with (park() if park is not None else contextlib.nullcontext()) as parked:
                await _wait(run)
            if parked is not None and parked.cancelled_caught:
                raise closed_error()
    finally:
        run.close()
    if run.failure is not None:
        raise run.failure
    return run.prop.values()


async def _wait(run):
    run.open_report()
    while run.failure is None and not run.done:
        if run.waiting:  # a kernel must run as a task: go on inside a nursery
            async with trio.open_nursery() as nursery:
                while run.failure is None and not run.done:
                    for node, args, where in run.waiting:
                        nursery.start_soon(_task, run, node, args, where)
                    run.waiting.clear()
                    await _next(run)
                nursery.cancel_scope.cancel()
            return
        await _next(run)


async def _next(run):
    """Drain again after a checkpoint (the slice ran out), else after the next report."""
    if run.ready:
        await timeslice.checkpoint()
        if run.failure is None:
            run.drain()
        return
    report = await run.report_receive.receive()
    timeslice.restart()  # receiving gave the event loop back
    run.take_report(report)


async def _task(run, node, args, where):
    """Run a waiting or offloaded kernel as a task; report, never raise into the nursery.

    A traced offloaded kernel's start is when its worker thread begins (after the device's
    limiter let it in), so a trace shows how the devices really overlap.
    """
    start = now_us() if run.record is not None else 0
    try:
        if node.is_async:
            frame_iter = run.frame_iter
            ctx = StepContext(node.ctx, run.step, None if frame_iter is None else frame_iter(where))
            outputs = await node.fn(ctx, *args)
        elif run.record is not None:
            start, outputs = await trio.to_thread.run_sync(_timed, node, args,
                                                           limiter=node.ctx.device.limiter)
        else:
            outputs = await run.step.offload(node, args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # noqa: BLE001 - reported
        run.report((node, None, exc, start, where))
        return
    run.report((node, outputs, None, start, where))


def _timed(node, args):
    return now_us(), node.fn(node.ctx, *args)
