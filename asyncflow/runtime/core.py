"""The executor's one core: a synchronous drain over a propagator, and one async ``finish``.

Theory of operation (the paper's ready-queue executor; TF's ``ExecutorState`` over its
two propagators):
- A ``Run`` is one partition's run for one step. Its *propagator* knows where values live
  and who becomes ready: ``Flat`` (here: slots and pending counts, for partitions without
  control flow) or ``frames.Frames`` (values keyed by frame and iteration, dead tensors).
  Both answer ``ready`` (a LIFO stack of entries: depth first keeps the live set small),
  ``take(entry) -> (node, args)`` (``node`` None: the propagator handled the entry itself,
  e.g. a dead node; ``args`` is then ``PAUSE`` when the slice ran out there),
  ``complete(entry, node, outputs)``, ``frame_iter`` (None, or ``frame_iter(entry)``: the
  "frame:iteration" a waiting kernel's rendezvous keys name) and ``values()``.
- ``Run.drain`` (synchronous, trio's ``*_nowait`` style) runs every ready node that need
  not wait: plain kernels inline; a waiting kernel (``is_async``: Recv, queue ops, async
  ``py_func``) first tries its synchronous twin (``nowait``), else its subscribing form (a
  Recv hands the rendezvous a ``Delivery``), else it joins ``waiting``; so does a kernel
  whose actual inputs are large (``offload``). A drain stops, nodes left ready, when the
  time slice is over (``timeslice``), or on the first failure.
- ``finish(run)`` awaits the rest: it starts ``waiting`` kernels as tasks in a nursery
  opened only then, receives their reports (and subscriptions' from elsewhere) on a channel
  opened only then, checkpoints and drains again when a slice ran out, and enters
  ``Step.park`` (the owner's close-cancellable scope) only then. A run that drains to its
  end never awaits anything.
- **CPU partitions of one step drain each other inline** (``drive``): a Send run in some
  drain that delivers to another CPU run's Recv subscription completes the Recv at once and
  puts that run on ``Step.runnable``; the drain that is running drains it when its own
  stack is empty (a trampoline: drains never nest, so a ping-pong of any length stays one
  drain deep). A run's task is woken (``WAKE`` on its channel) only when it must act:
  start tasks, fail, finish, or go on after a slice. A GPU run keeps to its own task.
- The first failure stops scheduling and is one located ``OpError``; tasks report errors
  instead of raising into the nursery, so no ExceptionGroup reaches the caller. Closing a
  run cancels the subscriptions it still holds.
- Tracing is a hook: ``record(node, start, waited)`` when ``Step.trace`` is a list; the
  path is the same as untraced.
"""
from __future__ import annotations

import contextlib
import math

import trio

from asyncflow.kernels.control_flow import DEAD
from asyncflow.kernels.registry import WOULD_BLOCK
from asyncflow.runtime import timeslice
from asyncflow.runtime.plan import OFFLOAD_COST, runtime_cost
from asyncflow.runtime.step import StepContext, closed_error, now_us, recorder, wrap_error

PAUSE = object()  # ``take``'s args when the propagator ran out of its slice (a loop)
WAKE = (None, None, None, 0, None)  # on a report channel: "your run changed, look again"
_BUDGET = timeslice.BUDGET
_due = timeslice.due


class Flat:
    """Slots and pending counts: the propagator of a partition without control flow."""

    __slots__ = ("ready", "take", "complete", "values")
    frame_iter = None  # every entry is in the root frame

    def __init__(self, plan, slots):
        nodes, fetched = plan.nodes, plan.fetched
        pending = [n.pending for n in nodes]
        readers = list(plan.slot_readers)
        ready = self.ready = list(plan.roots)

        def take(index):
            node = nodes[index]
            inputs = node.inputs
            if not inputs:
                return node, []
            if len(inputs) == 1:  # (the common case, without the loops)
                slot = inputs[0]
                value = slots[slot]
                readers[slot] -= 1
                if readers[slot] == 0 and slot not in fetched:
                    slots[slot] = None
                return node, [value]
            args = [slots[i] for i in inputs]
            for slot in inputs:
                readers[slot] -= 1
                if readers[slot] == 0 and slot not in fetched:
                    slots[slot] = None  # its last reader has it: free the buffer
            return node, args

        def complete(index, node, outputs):
            for slot, value in zip(node.outputs, outputs):
                slots[slot] = value
            for consumer in node.consumers:
                pending[consumer] -= 1
                if pending[consumer] == 0:
                    ready.append(consumer)

        self.take, self.complete = take, complete
        self.values = lambda: fetched_values(plan, slots)


def fetched_values(plan, slots):
    """The fetched values of a finished flat run, in ``plan.fetch_slots`` order."""
    return [slots[slot].read() if deref else slots[slot]
            for slot, deref in zip(plan.fetch_slots, plan.fetch_deref)]


class Run:
    """One partition's run for one step: its propagator, waits, failure and report channel."""

    __slots__ = ("step", "prop", "ready", "take", "complete", "frame_iter", "waiting",
                 "failure", "outstanding", "record", "device_name", "shares", "report_send",
                 "report_receive", "cancels", "scheduled", "woken", "closed")

    def __init__(self, plan, prop, step):
        self.step = step
        self.prop = prop
        self.ready, self.take, self.complete = prop.ready, prop.take, prop.complete
        self.frame_iter = prop.frame_iter
        self.waiting = []       # (node, args, entry) to start as tasks
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

    def values(self):
        return self.prop.values()

    def drain(self):
        """Run what is runnable (and, sharing, what this run's Sends feed); awaits nothing."""
        if self.shares:
            drive(self)
        else:
            self.drain_own()

    def drain_own(self):
        ready, take, complete, record = self.ready, self.take, self.complete, self.record
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
            entry = ready.pop()
            try:
                node, args = take(entry)
                if node is None:
                    if args is PAUSE:
                        budget.left = 0
                        return
                    continue
                if record is not None:
                    start = now_us()
                if node.plain:
                    outputs = node.fn(node.ctx, *args)
                else:
                    for position in node.deref:
                        if args[position] is not DEAD:
                            args[position] = args[position].read()
                    if node.is_async:
                        ctx = StepContext(node.ctx, self.step, None if self.frame_iter is None
                                          else self.frame_iter(entry))
                        form = node.subscribe
                        # Sharing, a value already there is delivered inline at once:
                        # subscribing first saves the poll that usually finds nothing.
                        if form is not None and self.shares \
                                and self.subscribe(form, node, ctx, args, entry, start):
                            continue
                        outputs = WOULD_BLOCK if node.nowait is None else node.nowait(ctx, *args)
                        if outputs is WOULD_BLOCK:
                            self.wait(form, node, ctx, args, entry, start)
                            continue
                    elif node.offload and runtime_cost(node, args) >= OFFLOAD_COST:
                        self.wait(None, node, None, args, entry, start)
                        continue
                    else:
                        outputs = node.fn(node.ctx, *args)
                complete(entry, node, outputs)
            except (trio.Cancelled, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.failure = wrap_error(exc, node.op if node is not None else None,
                                          self.device_name)
                budget.left = left
                return
            if record is not None:
                record(node, start)
        budget.left = left

    def wait(self, form, node, ctx, args, entry, start):
        """``node`` cannot complete inline: subscribe (not sharing; sharing, that was tried
        first), else queue it in ``waiting``, to start as a task."""
        if form is None or self.shares or not self.subscribe(form, node, ctx, args, entry, start):
            self.outstanding += 1
            self.waiting.append((node, args, entry))

    def subscribe(self, form, node, ctx, args, entry, start):
        """Try ``node``'s subscribing ``form``; True if it will deliver (inline or reported)."""
        self.outstanding += 1
        cancel = form(ctx, *args, Delivery(self, node, entry, start))
        if cancel is WOULD_BLOCK:
            self.outstanding -= 1
            return False
        self.cancels.append(cancel)
        return True

    def open_report(self):
        """The channel on which tasks and subscriptions report ``(node, outputs, exc, start,
        entry)``."""
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
        node, outputs, exc, start, entry = report
        if node is None:
            self.woken = False
        if self.failure is not None:
            return  # failed meanwhile, in a drain run by another partition's task
        if node is not None:
            self.outstanding -= 1
            if exc is not None:
                self.failure = wrap_error(exc, node.op, self.device_name)
                return
            self.complete(entry, node, outputs)
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


class Delivery:
    """``deliver(outputs, exc=None)`` of one subscribed node, called once by its producer.

    From inside a drain of this step (a Send run inline), a sharing run completes the node
    at once and joins ``step.runnable``; otherwise (a task, an abort, a GPU run, an error)
    the report goes on the run's channel.
    """

    __slots__ = ("run", "node", "entry", "start")

    def __init__(self, run, node, entry, start):
        self.run, self.node, self.entry, self.start = run, node, entry, start

    def __call__(self, outputs, exc=None):
        run = self.run
        step = run.step
        if exc is None and run.shares and step.draining and run.failure is None:
            run.outstanding -= 1
            run.complete(self.entry, self.node, outputs)
            if run.record is not None:
                run.record(self.node, self.start, True)
            if not run.scheduled and run is not step.current:
                run.scheduled = True
                step.runnable.append(run)
            return
        run.report((self.node, outputs, exc, self.start, self.entry))


def drive(run):
    """Drain ``run``, then every run of its step made runnable meanwhile (the trampoline).

    Runs that must act afterwards are woken; ``run`` itself is not (its caller looks at it).
    When a slice runs out the drain stops and the runs still runnable are woken.
    """
    step = run.step
    runnable = step.runnable
    if step.draining:  # not reached from task code; kept safe: the running drain takes it
        if not run.scheduled:
            run.scheduled = True
            runnable.append(run)
        return
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
    return run.values()


async def _wait(run):
    run.open_report()
    while run.failure is None and not run.done:
        if run.waiting:  # a kernel must run as a task: go on inside a nursery
            async with trio.open_nursery() as nursery:
                while run.failure is None and not run.done:
                    for node, args, entry in run.waiting:
                        nursery.start_soon(_task, run, node, args, entry)
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


async def _task(run, node, args, entry):
    """Run a waiting or offloaded kernel as a task; report, never raise into the nursery.

    A traced offloaded kernel's start is when its worker thread begins (after the device's
    limiter let it in), so a trace shows how the devices really overlap.
    """
    start = now_us() if run.record is not None else 0
    try:
        if node.is_async:
            frame_iter = run.frame_iter
            ctx = StepContext(node.ctx, run.step, None if frame_iter is None else frame_iter(entry))
            outputs = await node.fn(ctx, *args)
        elif run.record is not None:
            start, outputs = await trio.to_thread.run_sync(_timed, node, args,
                                                           limiter=node.ctx.device.limiter)
        else:
            outputs = await run.step.offload(node, args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # noqa: BLE001 - reported
        run.report((node, None, exc, start, entry))
        return
    run.report((node, outputs, None, start, entry))


def _timed(node, args):
    return now_us(), node.fn(node.ctx, *args)
