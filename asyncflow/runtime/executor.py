"""The executor: runs one compiled partition for one step.

Theory of operation (the paper's ready-queue executor, on trio):
- Values live in a per-step list of slots (see ``plan``). A node is ready when its pending
  count (data plus control inputs) reaches zero.
- **Static path** (no waiting kernels, no control flow, at most one possibly-large kernel):
  run the precompiled topological schedule straight through, inline, freeing each slot after
  its last reader. A large offloadable kernel found at run time is awaited on a worker thread.
- **Ready-queue path**: a LIFO stack of ready nodes (depth first keeps the live set small);
  non-waiting kernels run inline in the loop; waiting kernels (``is_async``: Recv, Dequeue,
  GPU events) first try their nowait twin, then their subscribing form (a Recv hands the
  rendezvous a callback), and otherwise, like large offloadable kernels, start as tasks in
  the step's nursery and report back on the loop's channel. Subscriptions still pending when
  the run ends (failure, cancellation) are cancelled. Completing a node stores its outputs,
  drops input buffers whose readers are all done, and pushes consumers whose count reaches
  zero.
- **CPU partitions drain each other inline** (``_Driver``, one per step): when a Send run in
  some drain delivers to a Recv subscription of another CPU partition of the step, the Recv
  completes at once and that partition is drained right after, in the same task, as a
  trampoline (drains never nest, so a long ping-pong keeps a flat stack). Its own task is
  woken (a ``_WAKE`` on its channel) only when it must act: start kernels as tasks, fail, or
  return. There a Recv subscribes before polling (a value already there is delivered at
  once). Deliveries from tasks, errors, and partitions on other devices (GPU streams) use
  the channel: one task switch per edge.
- The first failure stops scheduling, cancels the nursery (waking every waiting kernel), and
  surfaces as one ``OpError`` naming the op, its type, its device and where it was created.
  Tasks never raise into the nursery: they report, so no ExceptionGroup reaches the caller.
- **Control flow** (Switch/Merge/Enter/Exit/NextIteration): the frame-aware loop of
  ``frames.py``, which keys values by (node output, frame, iteration) and propagates dead
  tensors. Partitions without control flow never pay for it.
- Tracing (``step.trace`` is a list) records per-node start and end times; it selects the
  ready-queue path, so the fast path carries no instrumentation checks.

The executor knows kernels only as callables; it never imports HTTP or transports.
"""
from __future__ import annotations

import contextlib
import math
import time

import trio

from asyncflow import errors
from asyncflow.kernels.registry import WOULD_BLOCK, get_kernel
from asyncflow.runtime.plan import OFFLOAD_COST, runtime_cost
from asyncflow.runtime.schedule import compile_schedule
from asyncflow.runtime import frames as _frames


class Step:
    """Per-step state shared by the partitions of one run in this process.

    Attributes:
        step_id: the step's id (unique among running steps).
        rendezvous: the step's rendezvous for Send/Recv, or None.
        trace: a list receiving ``NodeStats`` when tracing, else None.
        resources: per-step services a waiting kernel may need (queues' cancellation, ...).
        offload: ``async offload(node, args) -> outputs`` running a large kernel on a worker
            thread; the default uses trio's threads under the device's limiter.
    """

    __slots__ = ("step_id", "rendezvous", "trace", "cancel_scope", "extras", "park", "offload")

    def __init__(self, step_id, rendezvous=None, trace=None, park=None, offload=None):
        self.step_id = step_id
        self.rendezvous = rendezvous
        self.trace = trace
        self.cancel_scope = None
        self.extras = {}
        # ``park()``: a context manager entered only while the step waits, yielding a cancel
        # scope its owner may cancel (a session closing); None: waits are not tracked.
        self.park = park
        self.offload = offload or _offloaded


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
    if plan.control_flow:
        return await _frames.run_frames(plan, feed_values, step, wrap_error, StepContext)
    slots = [None] * (plan.num_slots + 1)  # the extra slot swallows unread outputs
    slots[:len(feed_values)] = feed_values
    if plan.static and step.trace is None:
        await _run_static(plan, slots, step.offload)
    else:
        await _run_ready_queue(plan, slots, step)
    out = []
    for slot, deref in zip(plan.fetch_slots, plan.fetch_deref):
        value = slots[slot]
        out.append(value.read() if deref else value)
    return out


async def _run_static(plan, slots, offload):
    """Run the plan's straight-line step function (generated once, see ``schedule``).

    It awaits nothing but ``offload``, so under any event loop a step without a large kernel
    finishes without suspending. Cancellation of either loop (not an ``Exception``) passes
    through unwrapped.
    """
    step_fn = plan.static_fn
    if step_fn is None:
        step_fn = plan.static_fn = compile_schedule(plan)
    try:
        await step_fn(slots, offload)
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


_WAKE = (None, None, None, 0)  # on a report channel: "your queue changed, look again"
_DRIVER = "ready_queue_driver"  # ``step.extras`` key of the step's ``_Driver``


class _Driver:
    """Drains the CPU ready queues of one step's partitions inline, one after the other.

    A Send run inside some queue's drain that delivers to another CPU queue's Recv
    subscription does not wake that queue's task: the Recv completes at once and the queue
    joins ``runnable``; the drain that is running (the *driver*, in whichever partition's
    task) drains it when its own stack is empty. Drains never nest (a trampoline: a
    ping-pong of any length stays one drain deep) and a queue's task is woken only when it
    must act itself: kernels to start as tasks, a failure, or its last node done.
    """

    __slots__ = ("active", "runnable")

    def __init__(self):
        self.active = False   # a drain of this step is running (on the step's loop thread)
        self.runnable = []    # queues with ready nodes delivered by the running drain

    def run(self, queue):
        """Drain ``queue`` (whose task is running), then every queue made runnable meanwhile."""
        if self.active:  # not reached from task code; kept safe: the running loop takes it
            queue.schedule(self)
            return
        self.active = True
        runnable = self.runnable
        try:
            queue.drain_own()
            while runnable:
                other = runnable.pop()
                other.scheduled = False
                if other.failure is None:
                    other.drain_own()
                if other is not queue and (other.failure is not None or not other.remaining
                                           or other.waiting):
                    other.wake()  # its task must act: start tasks, fail, or return
        finally:
            self.active = False
            while runnable:  # only after an exception escaped a kernel: let their tasks drain
                other = runnable.pop()
                other.scheduled = False
                other.wake(force=True)


_SUBSCRIBE_FORMS = {}  # id(plan node) -> (node, its kernel's subscribing form or None)


def _subscribe_form(node):
    """The subscribing form of ``node``'s kernel, or None.

    Looked up in the registry once per plan node (forms are attached when kernels register);
    the table holds the nodes of recently run plans and is emptied when it grows large.
    """
    entry = _SUBSCRIBE_FORMS.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    ctx = node.ctx
    kernel = get_kernel(ctx.type, ctx.device.kind)
    form = kernel.subscribe if kernel is not None and kernel.fn is node.fn else None
    if len(_SUBSCRIBE_FORMS) >= 8192:
        _SUBSCRIBE_FORMS.clear()
    _SUBSCRIBE_FORMS[id(node)] = (node, form)
    return form


class _Delivery:
    """``deliver(result, exc=None)`` of one subscribed node, called once by its producer.

    Called synchronously. From inside a drain of this step (a Send run inline by a driver),
    a CPU queue completes the node at once and joins the driver's ``runnable``; otherwise
    (a task, an abort, a GPU queue, an error) the report goes on the queue's channel.
    """

    __slots__ = ("queue", "node", "start")

    def __init__(self, queue, node, start):
        self.queue = queue
        self.node = node
        self.start = start

    def __call__(self, result, exc=None):
        queue = self.queue
        driver = queue.driver
        if exc is None and driver is not None and driver.active and queue.failure is None:
            queue.complete(self.node, result, self.start, waited=True)
            if not queue.scheduled:
                queue.scheduled = True
                driver.runnable.append(queue)
            return
        try:
            queue.report_send.send_nowait((self.node, result, exc, self.start))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the run is over (failed or cancelled): nobody waits for this value


class _ReadyQueue:
    """The bookkeeping of one ready-queue run (see the module docstring)."""

    __slots__ = ("nodes", "slots", "step", "pending", "readers", "fetched", "ready",
                 "remaining", "trace", "device_name", "waiting", "failure", "report_send",
                 "report_receive", "cancels", "driver", "scheduled", "woken")

    def __init__(self, plan, slots, step):
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
        self.report_send = self.report_receive = None  # opened by the first waiting kernel
        self.cancels = []      # cancel callables of subscriptions (see ``subscribe``)
        # Partitions of a multi-device step on CPU drain each other inline (``_Driver``);
        # a GPU partition (stream events, transfers awaited) keeps to its own task.
        self.driver = None
        if step.rendezvous is not None and plan.device.kind == "CPU":
            self.driver = step.extras.get(_DRIVER)
            if self.driver is None:
                self.driver = step.extras[_DRIVER] = _Driver()
        self.scheduled = False  # in ``driver.runnable``
        self.woken = False      # a ``_WAKE`` is on the report channel, not yet received

    def open_report(self):
        """The channel on which tasks and subscriptions report ``(node, result, exc, start)``."""
        if self.report_send is None:
            self.report_send, self.report_receive = trio.open_memory_channel(math.inf)
        return self.report_send

    def subscribe(self, form, node, ctx, args, start):
        """Try ``node``'s subscribing ``form``; True if it will deliver (inline or reported)."""
        if self.report_send is None:
            self.open_report()
        cancel = form(ctx, *args, _Delivery(self, node, start))
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
        """Put a ``_WAKE`` on the report channel (once until received, unless ``force``)."""
        if (self.woken and not force) or self.report_send is None:
            return
        self.woken = True
        try:
            self.report_send.send_nowait(_WAKE)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the run is already over

    def close(self):
        """Cancel pending subscriptions and close the channel (the run is over)."""
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
        """Run this queue's ready nodes that need not wait; queue the others in ``waiting``."""
        nodes, slots, readers, fetched, ready = (self.nodes, self.slots, self.readers,
                                                 self.fetched, self.ready)
        step, trace, driver = self.step, self.trace, self.driver
        while ready:
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
                    form = _subscribe_form(node)
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
                return
            self.complete(node, result, start)


async def _run_ready_queue(plan, slots, step):
    queue = _ReadyQueue(plan, slots, step)
    try:
        queue.drain()
        if queue.failure is None and queue.remaining:
            # Only now, with a kernel that must wait, does the step need a channel (and,
            # for kernels running as tasks, a nursery), and its owner a way to cancel it.
            with (step.park() if step.park is not None else contextlib.nullcontext()) as parked:
                await _wait_for_the_rest(queue)
            if parked is not None and parked.cancelled_caught:
                raise errors.CancelledError(None, None, "The session was closed while this "
                                            "step was waiting (e.g. on a queue)")
    finally:
        queue.close()
    if queue.failure is not None:
        raise queue.failure


async def _wait_for_the_rest(queue):
    """The part of ``_run_ready_queue`` after some kernel had to wait."""
    report_send = queue.open_report()
    receive = queue.report_receive.receive
    while queue.failure is None and queue.remaining:
        if queue.waiting:  # a kernel must run as a task: go on inside a nursery
            async with trio.open_nursery() as nursery:
                await _run_with_tasks(queue, nursery, report_send, receive)
                nursery.cancel_scope.cancel()
            return
        _take_report(queue, await receive())


async def _run_with_tasks(queue, nursery, report_send, receive):
    """The loop of ``_run_ready_queue`` once some kernel has to run as a task."""
    step = queue.step
    while queue.failure is None and queue.remaining:
        for node, args in queue.waiting:
            nursery.start_soon(_run_waiting, node, args, step, report_send)
        queue.waiting.clear()
        _take_report(queue, await receive())


def _take_report(queue, report):
    """Apply one report from the channel: a finished kernel, or a ``_WAKE``."""
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
