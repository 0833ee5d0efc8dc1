"""The executor: runs one compiled partition for one step.

Theory of operation (the paper's ready-queue executor, on trio):
- Values live in a per-step list of slots (see ``plan``). A node is ready when its pending
  count (data plus control inputs) reaches zero.
- **Static path** (no control flow, at most one possibly-large kernel, at most one waiting
  kernel other than Send/Recv): run the precompiled topological schedule straight through,
  inline, freeing each slot after its last reader. A large offloadable kernel found at run
  time is awaited on a worker thread; the waiting kernel, scheduled after everything that
  does not depend on it, tries its nowait twin and is otherwise awaited in place inside
  ``Step.park`` (``_waiter``).
- **Ready-queue path**: a LIFO stack of ready nodes (depth first keeps the live set small);
  non-waiting kernels run inline in the loop; waiting kernels (``is_async``: Recv, Dequeue,
  GPU events) first try their nowait twin, then their subscribing form (a Recv hands the
  rendezvous a callback), and otherwise, like large offloadable kernels, start as tasks in
  the step's nursery and report back on the loop's channel. Subscriptions still pending when
  the run ends (failure, cancellation) are cancelled. Completing a node stores its outputs,
  drops input buffers whose readers are all done, and pushes consumers whose count reaches
  zero.
- **CPU partitions drain each other inline** (``drive.Driver``, one per step): when a Send run in
  some drain delivers to a Recv subscription of another CPU partition of the step, the Recv
  completes at once and that partition is drained right after, in the same task, as a
  trampoline (drains never nest, so a long ping-pong keeps a flat stack). Its own task is
  woken (a ``WAKE`` on its channel) only when it must act: start kernels as tasks, fail, or
  return. There a Recv subscribes before polling (a value already there is delivered at
  once). Deliveries from tasks, errors, and partitions on other devices (GPU streams) use
  the channel (opened on first use): one task switch per edge.
- **Starting inline**: ``start_plan`` runs a CPU partition's first drain (or its whole static
  schedule, when nothing in it may be offloaded) synchronously in the calling task and
  returns the run, finished or not; ``finish_plan`` awaits the rest. ``run_partitions``
  starts every partition of a local step this way, so a step whose partitions complete each
  other inline needs no task, no channel and no nursery at all.
- The first failure stops scheduling, cancels the nursery (waking every waiting kernel), and
  surfaces as one ``OpError`` naming the op, its type, its device and where it was created.
  Tasks never raise into the nursery: they report, so no ExceptionGroup reaches the caller.
- **Control flow** (Switch/Merge/Enter/Exit/NextIteration): the frame-aware loop of
  ``frames.py``, which keys values by (node output, frame, iteration) and propagates dead
  tensors. Partitions without control flow never pay for it.
- Tracing (``step.trace`` is a list) records per-node start and end times; it selects the
  ready-queue path, so the fast path carries no instrumentation checks.
- **Time slices** (``timeslice``): no path runs kernels for longer than ``TIME_SLICE_S`` without
  a checkpoint. The static schedule awaits ``step.pause`` (a trio checkpoint; asyncio's
  ``sleep(0)`` on the aio inline path) when its checks find the slice over; a drain counts
  kernels in the thread's budget and, when the slice is over, stops with nodes still
  ``ready``: its owner task checkpoints, then drains again (``_wait_for_the_rest``), and the
  ``Driver`` stops at the queue it was draining, waking the queues left runnable. A static
  partition started inline that runs out of its slice suspends (``_StaticRun``). Runs of
  ``start_plan`` that only ``paused`` so are resumed by the caller after a checkpoint
  (``resume``), so a long multi-partition step needs no task just to yield.
  Cancellation and deadlines (``RunOptions.timeout_in_ms``) therefore stop a step within a
  slice plus the running kernel.

The executor knows kernels only as callables; it never imports HTTP or transports.
"""
from __future__ import annotations

import contextlib
import math
import time
import types

import trio

from asyncflow import errors
from asyncflow.kernels.registry import WOULD_BLOCK
from asyncflow.runtime import timeslice
from asyncflow.runtime.drive import WAKE, Delivery, driver_for
from asyncflow.runtime.plan import OFFLOAD_COST, runtime_cost
from asyncflow.runtime.schedule import compile_schedule
from asyncflow.runtime import frames as _frames

_BUDGET = timeslice.BUDGET
_due = timeslice.due


class Step:
    """Per-step state shared by the partitions of one run in this process.

    Attributes:
        step_id: the step's id (unique among running steps).
        rendezvous: the step's rendezvous for Send/Recv, or None.
        trace: a list receiving ``NodeStats`` when tracing, else None.
        resources: per-step services a waiting kernel may need (queues' cancellation, ...).
        offload: ``async offload(node, args) -> outputs`` running a large kernel on a worker
            thread; the default uses trio's threads under the device's limiter.
        pause: ``async pause()``, awaited when a time slice is over: a checkpoint of the
            event loop awaiting the step that ends the slice (default: trio's).
    """

    __slots__ = ("step_id", "rendezvous", "trace", "cancel_scope", "extras", "park", "offload",
                 "pause")

    def __init__(self, step_id, rendezvous=None, trace=None, park=None, offload=None,
                 pause=None):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.trace = trace
        self.cancel_scope = None
        self.extras = {}
        # ``park()``: a context manager entered only while the step waits, yielding a cancel
        # scope its owner may cancel (a session closing); None: waits are not tracked.
        self.park = park
        self.offload = offload or _offloaded
        self.pause = pause or timeslice.checkpoint


class NodeStats:
    """One executed node in a traced step (TF1's NodeExecStats)."""

    __slots__ = ("node_name", "op_type", "device", "start_us", "end_us", "timeline_label",
                 "waited")

    def __init__(self, node_name, op_type, device, start_us, end_us, timeline_label="",
                 waited=False):
        self.node_name = node_name
        self.op_type = op_type
        self.device = device
        self.start_us = start_us
        self.end_us = end_us
        self.timeline_label = timeline_label
        self.waited = waited  # the kernel could not finish inline: it waited or was offloaded

    def __repr__(self):
        return (f"NodeStats({self.node_name!r}, {self.op_type!r}, {self.device!r}, "
                f"{self.start_us}, {self.end_us})")


class StepContext:
    """The context a waiting kernel receives: its node's context plus the running step."""

    __slots__ = ("node", "step", "name", "type", "attrs", "xp", "device", "output_dtypes",
                 "resources", "frame_iter")

    def __init__(self, node_ctx, step):
        self.node = node_ctx
        self.step = step
        self.name = node_ctx.name
        self.type = node_ctx.type
        self.attrs = node_ctx.attrs
        self.xp = node_ctx.xp
        self.device = node_ctx.device
        self.output_dtypes = node_ctx.output_dtypes
        self.resources = node_ctx.resources
        self.frame_iter = None  # "frame_id:iteration" inside a loop (rendezvous keys)

    def __getattr__(self, item):
        return getattr(self.node, item)


_ERROR_MAP = (
    (MemoryError, errors.ResourceExhaustedError),
    ((ValueError, IndexError, TypeError, ZeroDivisionError, FloatingPointError, KeyError),
     errors.InvalidArgumentError),
)


def wrap_error(exc, op, device_name):
    """One OpError naming ``op``, its type, device and creation site; keeps the cause."""
    if isinstance(exc, errors.OpError):
        if getattr(exc, "_asyncflow_located", False):
            return exc
        cls, message = type(exc), exc.message
    else:
        cls = next((target for source, target in _ERROR_MAP if isinstance(exc, source)),
                   errors.UnknownError)
        message = f"{type(exc).__name__}: {exc}"
    err = cls(None, op, f"{op.type} '{op.name}' on {device_name}: {message}\n"
                        f"\t[created at {op.creation_site()}]")
    err._asyncflow_located = True
    err.__cause__ = exc
    return err


def _now_us():
    return time.perf_counter_ns() // 1000


async def _offloaded(node, args):
    return await trio.to_thread.run_sync(node.fn, node.ctx, *args,
                                         limiter=node.ctx.device.limiter)


async def run_plan(plan, feed_values, step):
    """Run ``plan`` once; returns the fetched values in ``plan.fetch_slots`` order.

    Raises:
        OpError: the first kernel failure, located (op, type, device, creation site).
    """
    timeslice.begin()
    if plan.control_flow:
        return await _frames.run_frames(plan, feed_values, step, wrap_error, StepContext)
    slots = [None] * (plan.num_slots + 1)  # the extra slot swallows unread outputs
    slots[:len(feed_values)] = feed_values
    if plan.static and step.trace is None:
        await _run_static(plan, slots, step.offload, _waiter(step) if plan.waits else None,
                          step.pause)
        return _fetched(plan, slots)
    return await finish_plan(_start_ready_queue(plan, slots, step))


def start_plan(plan, feed_values, step):
    """Start one partition of a multi-partition step in the calling task, awaiting nothing.

    A static plan none of whose kernels can be offloaded runs its whole schedule; any other
    runs the first drain of a ready queue (with the step's driver, which also drains the
    partitions started before it that its Sends feed; a kernel found large is left to a
    task, as in the ready-queue path).

    Returns:
        The run (``failure``, ``remaining``, ``values()``, ``close()``), to be awaited with
        ``finish_plan`` while ``remaining`` (else closed by the caller); or None when the
        plan must run whole as a task through ``run_plan``: control flow, or a device other
        than a CPU.
    """
    if plan.control_flow or plan.device.kind != "CPU":
        return None
    slots = [None] * (plan.num_slots + 1)
    slots[:len(feed_values)] = feed_values
    if plan.static and step.trace is None and not plan.waits and not plan.may_offload:
        return _StaticRun(plan, slots)
    return _start_ready_queue(plan, slots, step)  # a large kernel found there starts a task


def paused(run):
    """Whether ``run`` (of ``start_plan``) stopped only because its time slice ran out."""
    if run.failure is not None or not run.remaining:
        return False
    if type(run) is _StaticRun:
        return True
    return bool(run.ready) and not run.waiting


def resume(run):
    """Go on with a ``paused`` run in the calling task (after a checkpoint), for a slice."""
    if type(run) is _StaticRun:
        run.step()
    else:
        run.drain()


async def finish_plan(run):
    """Wait for the rest of a run of ``start_plan`` (or the ready-queue path); close it.

    Returns:
        The fetched values in ``plan.fetch_slots`` order.

    Raises:
        OpError: the run's failure, located.
        CancelledError: the step's owner closed it while it waited.
    """
    try:
        if run.failure is None and run.remaining:
            if type(run) is _StaticRun:
                await run.resume()
            else:
                await _wait_parked(run)
    finally:
        run.close()
    if run.failure is not None:
        raise run.failure
    return run.values()


def _fetched(plan, slots):
    return [slots[slot].read() if deref else slots[slot]
            for slot, deref in zip(plan.fetch_slots, plan.fetch_deref)]


_PAUSED = object()  # what ``_StaticRun``'s schedule yields when its time slice is over


@types.coroutine
def _hand_pause():
    yield _PAUSED


class _StaticRun:
    """A static plan run inline by ``start_plan``, stepped by hand.

    Its schedule awaits nothing but ``pause`` (no offload, no waiting kernel): it runs to its
    end at once, or, once its time slice is over, suspends there (``remaining`` is then 1) and
    ``resume`` finishes it after a checkpoint, from the step's task for this partition.
    """

    __slots__ = ("plan", "slots", "failure", "remaining", "coro")
    waiting = ()  # (as a ready queue's: no kernel waits for a task)

    def __init__(self, plan, slots):
        self.plan = plan
        self.slots = slots
        self.failure = None
        self.remaining = 1
        self.coro = _run_static(plan, slots, None, None, _hand_pause)
        self.step()

    def step(self):
        try:
            paused = self.coro.send(None)
        except StopIteration:
            self.remaining = 0
            return
        except Exception as exc:  # noqa: BLE001 - the partition's failure, reported by the caller
            self.failure = exc
            self.remaining = 0
            return
        if paused is not _PAUSED:
            self.close()
            raise RuntimeError(f"the static schedule of {self.plan.device.name} awaited "
                               f"{paused!r}")

    async def resume(self):
        """Finish the schedule, one time slice after each checkpoint."""
        while self.remaining and self.failure is None:
            await timeslice.checkpoint()
            self.step()

    def values(self):
        return _fetched(self.plan, self.slots)

    def close(self):
        """Drop a schedule left suspended (the step failed or was cancelled); idempotent."""
        if self.remaining:
            self.remaining = 0
            self.coro.close()


def _waiter(step):
    """``wait(node, args)`` for a static schedule's one waiting kernel, in the caller's task.

    Its synchronous twin first (a dequeue from a non-empty queue completes at once); else the
    kernel is awaited right here, inside the step owner's close-cancellable scope
    (``Step.park``), with no nursery: nothing else of the step can run meanwhile.
    """
    async def wait(node, args):
        ctx = StepContext(node.ctx, step)
        if node.nowait is not None:
            result = node.nowait(ctx, *args)
            if result is not WOULD_BLOCK:
                return result
        if step.park is None:
            result = await node.fn(ctx, *args)
            timeslice.restart()  # it waited: the task gave the loop back
            return result
        with step.park() as parked:
            result = await node.fn(ctx, *args)
            timeslice.restart()
            return result
        closed = errors.CancelledError(None, node.op, "The session was closed while this step "
                                       "was waiting (e.g. on a queue)")
        closed._asyncflow_located = True
        raise closed
    return wait


async def _run_static(plan, slots, offload, wait, pause):
    """Run the plan's straight-line step function (generated once, see ``schedule``).

    It awaits nothing but ``offload``, ``wait`` (a plan's one waiting kernel) and ``pause``
    (once per time slice), so under any event loop a short step without a large or waiting
    kernel finishes without suspending. Cancellation of either loop (not an ``Exception``)
    passes through unwrapped.
    """
    step_fn = plan.static_fn
    if step_fn is None:
        step_fn = plan.static_fn = compile_schedule(plan)
    try:
        await step_fn(slots, offload, wait, pause)
    except Exception as exc:
        node = getattr(exc, "_asyncflow_node", None)
        if node is None:
            raise
        raise wrap_error(exc, node.op, plan.device.name) from exc


def _timed(node, args):
    return _now_us(), node.fn(node.ctx, *args)


async def _run_waiting(node, args, step, report):
    """Run a waiting or offloaded kernel; report ``(node, result, error, start)``.

    A traced offloaded kernel's start is when its worker thread begins (after the device's
    limiter let it in), so a trace shows how the devices really overlap.
    """
    start = _now_us() if step.trace is not None else 0
    try:
        if node.is_async:
            result = await node.fn(StepContext(node.ctx, step), *args)
        elif step.trace is not None:
            start, result = await trio.to_thread.run_sync(_timed, node, args,
                                                          limiter=node.ctx.device.limiter)
        else:
            result = await _offloaded(node, args)
    except trio.Cancelled:
        raise
    except BaseException as exc:  # reported, never raised into the nursery
        report.send_nowait((node, None, exc, start))
        return
    report.send_nowait((node, result, None, start))


class _ReadyQueue:
    """The bookkeeping of one ready-queue run (see the module docstring)."""

    __slots__ = ("plan", "nodes", "slots", "step", "pending", "readers", "fetched", "ready",
                 "remaining", "trace", "device_name", "waiting", "failure", "report_send",
                 "report_receive", "cancels", "driver", "scheduled", "woken", "closed")

    def __init__(self, plan, slots, step):
        self.plan = plan
        self.nodes = plan.nodes
        self.slots = slots
        self.step = step
        self.pending = [n.pending for n in plan.nodes]
        self.readers = list(plan.slot_readers)
        self.fetched = plan.fetched
        self.ready = list(plan.roots)
        self.remaining = len(plan.nodes)
        self.trace = step.trace
        self.device_name = plan.device.name
        self.waiting = []      # (node, args) that need a task
        self.failure = None
        self.report_send = self.report_receive = None  # opened by the first report or wait
        self.cancels = []      # cancel callables of subscriptions (see ``subscribe``)
        # Partitions of a multi-device step on CPU drain each other inline (``drive``);
        # a GPU partition (stream events, transfers awaited) keeps to its own task.
        self.driver = driver_for(step, plan.device)
        self.scheduled = False  # in ``driver.runnable``
        self.woken = False      # a ``WAKE`` is on the report channel, not yet received
        self.closed = False     # the run is over: reports are dropped

    def open_report(self):
        """The channel on which tasks and subscriptions report ``(node, result, exc, start)``."""
        if self.report_send is None:
            self.report_send, self.report_receive = trio.open_memory_channel(math.inf)
        return self.report_send

    def report(self, item):
        """Put ``(node, result, exc, start)`` on the report channel (dropped once closed)."""
        if self.closed:
            return
        try:
            self.open_report().send_nowait(item)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the run is over (failed or cancelled): nobody waits for this value

    def subscribe(self, form, node, ctx, args, start):
        """Try ``node``'s subscribing ``form``; True if it will deliver (inline or reported)."""
        cancel = form(ctx, *args, Delivery(self, node, start))
        if cancel is WOULD_BLOCK:
            return False
        self.cancels.append(cancel)
        return True

    def schedule(self, driver):
        """Have ``driver`` drain this queue once its current drain is done."""
        if not self.scheduled:
            self.scheduled = True
            driver.runnable.append(self)

    def wake(self, force=False):
        """Put a ``WAKE`` on the report channel (once until received, unless ``force``).

        Without a channel no task waits on this queue: whoever starts one looks at the
        queue's state first, so the wake is not needed.
        """
        if (self.woken and not force) or self.report_send is None or self.closed:
            return
        self.woken = True
        try:
            self.report_send.send_nowait(WAKE)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the run is already over

    def values(self):
        """The fetched values of a finished run, in ``plan.fetch_slots`` order."""
        return _fetched(self.plan, self.slots)

    def close(self):
        """Cancel pending subscriptions and close the channel (the run is over); idempotent."""
        self.closed = True
        if self.report_send is not None:
            self.report_send.close()
            self.report_receive.close()
        if self.remaining:  # failed or cancelled: drop the subscriptions not delivered
            for cancel in self.cancels:
                cancel()
        self.cancels.clear()  # they refer back to this queue: let it go without the GC

    def complete(self, node, result, start, waited=False):
        slots, pending, ready = self.slots, self.pending, self.ready
        self.remaining -= 1
        for slot, value in zip(node.outputs, result):
            slots[slot] = value
        for index in node.consumers:
            pending[index] -= 1
            if pending[index] == 0:
                ready.append(index)
        if self.trace is not None:
            self.trace.append(NodeStats(node.op.name, node.op.type, self.device_name, start,
                                        _now_us(), waited=waited))

    def drain(self):
        """Run every ready node that need not wait (and, on CPU, what its Sends feed)."""
        if self.driver is None:
            self.drain_own()
        else:
            self.driver.run(self)

    def drain_own(self):
        """Run this queue's ready nodes that need not wait; queue the others in ``waiting``.

        Returns early, with nodes still ``ready``, on a failure or when the time slice is over
        (counted in the thread's budget, so short drains of many partitions add up).
        """
        nodes, slots, readers, fetched, ready = (self.nodes, self.slots, self.readers,
                                                 self.fetched, self.ready)
        step, trace, driver = self.step, self.trace, self.driver
        budget = _BUDGET
        left = budget.left
        while ready:
            left -= 1
            if left <= 0:
                if _due():  # over: stop here; the owner checkpoints and drains again
                    budget.left = 0
                    return
                left = timeslice.CHECK_EVERY
            node = nodes[ready.pop()]
            inputs = node.inputs
            if inputs:
                args = [slots[inputs[0]]] if len(inputs) == 1 else [slots[i] for i in inputs]
                for slot in inputs:
                    readers[slot] -= 1
                    if readers[slot] == 0 and slot not in fetched:
                        slots[slot] = None
            else:
                args = []
            try:
                for position in node.deref:
                    args[position] = args[position].read()
                start = _now_us() if trace is not None else 0
                if node.is_async:
                    ctx = StepContext(node.ctx, step)
                    form = node.subscribe
                    # With a driver, a value already there is delivered inline at once:
                    # subscribing first saves the poll that usually finds nothing.
                    if form is not None and driver is not None \
                            and self.subscribe(form, node, ctx, args, start):
                        continue
                    result = WOULD_BLOCK if node.nowait is None else node.nowait(ctx, *args)
                    if result is WOULD_BLOCK:
                        if form is None or driver is not None \
                                or not self.subscribe(form, node, ctx, args, start):
                            self.waiting.append((node, args))
                        continue
                elif node.offload and runtime_cost(node, args) >= OFFLOAD_COST:
                    self.waiting.append((node, args))
                    continue
                else:
                    result = node.fn(node.ctx, *args)
            except (trio.Cancelled, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.failure = wrap_error(exc, node.op, self.device_name)
                budget.left = left
                return
            self.complete(node, result, start)
        budget.left = left


def _start_ready_queue(plan, slots, step):
    """A ready queue for ``plan`` after its first drain (finished, failed, or waiting)."""
    queue = _ReadyQueue(plan, slots, step)
    try:
        queue.drain()
    except BaseException:
        queue.close()
        raise
    return queue


async def _wait_parked(queue):
    # Only now, with a kernel that must wait, does the step need a channel (and, for kernels
    # running as tasks, a nursery), and its owner a way to cancel it.
    step = queue.step
    with (step.park() if step.park is not None else contextlib.nullcontext()) as parked:
        await _wait_for_the_rest(queue)
    if parked is not None and parked.cancelled_caught:
        raise errors.CancelledError(None, None, "The session was closed while this "
                                    "step was waiting (e.g. on a queue)")


async def _wait_for_the_rest(queue):
    """The part of a ready-queue run after some kernel had to wait (or its slice ran out)."""
    report_send = queue.open_report()
    receive = queue.report_receive.receive
    while queue.failure is None and queue.remaining:
        if queue.waiting:  # a kernel must run as a task: go on inside a nursery
            async with trio.open_nursery() as nursery:
                await _run_with_tasks(queue, nursery, report_send, receive)
                nursery.cancel_scope.cancel()
            return
        await _next_drain(queue, receive)


async def _run_with_tasks(queue, nursery, report_send, receive):
    """The loop of ``_wait_for_the_rest`` once some kernel has to run as a task."""
    step = queue.step
    while queue.failure is None and queue.remaining:
        for node, args in queue.waiting:
            nursery.start_soon(_run_waiting, node, args, step, report_send)
        queue.waiting.clear()
        await _next_drain(queue, receive)


async def _next_drain(queue, receive):
    """Drain ``queue`` again after a checkpoint: the rest of a drain whose time slice ran out
    (or that a kernel raised through), else after the next report."""
    if queue.ready:
        await timeslice.checkpoint()
        if queue.failure is None:
            queue.drain()
        return
    report = await receive()
    timeslice.restart()  # receiving gave the event loop back
    _take_report(queue, report)


def _take_report(queue, report):
    """Apply one report from the channel: a finished kernel, or a ``WAKE``."""
    node, result, exc, start = report
    if node is None:  # another partition's task drained this queue: look at it again
        queue.woken = False
    if queue.failure is not None:
        return  # failed meanwhile (in a drain run by another partition's task)
    if node is not None:
        if exc is not None:
            queue.failure = wrap_error(exc, node.op, queue.device_name)
            return
        queue.complete(node, result, start, waited=True)
    queue.drain()
