"""Running one compiled partition for one step: the plan's compiled form, else the core.

``generate_forms`` gives a plan its compiled forms once, when it is built; ``run_plan`` runs a
static plan's step function (awaited in place: no nursery, no task; traced through its
traced twin) and every other plan in the core over the flat or the frames propagator;
``start_plan`` starts a CPU partition of a multi-partition step in the calling task
(``docs/architecture.md``, "Plans and the executor").
"""
from __future__ import annotations


import trio

from asyncflow import errors
from asyncflow.kernels.registry import WOULD_BLOCK
from asyncflow.exec import core, lanes, thread_step, timeslice
from asyncflow.exec.context import StepContext
from asyncflow.exec.frames import Frames, tables
from asyncflow.exec.codegen import compile_schedule
from asyncflow.exec.step import closed, now_us, recorder, waiting


def generate_forms(plan, compile_loops=True):
    """Give ``plan`` its compiled forms (see the module docstring); returns it."""
    if plan.static and plan.static_fn is None:
        plan.static_fn = lanes.compile_lanes(plan)
        if plan.static_fn is None:
            plan.static_fn = compile_schedule(plan)
            plan.thread_form = thread_step.thread_form(plan)
        plan.traced_fn = TracedForm()
    if plan.control_flow and plan.frame_tables is None:
        plan.frame_tables = tables(plan, compile_loops)
    return plan


async def run_plan(plan, feed_values, step):
    """Run ``plan`` (its forms generated) once; returns the fetched values in ``plan.fetch_slots`` order.

    Raises:
        OpError: the first kernel failure, located (op, type, device, creation site).
    """
    timeslice.begin()
    if not plan.static:
        return await core.finish(start_plan(plan, feed_values, step))
    slots = _slots(plan, feed_values)
    step_fn, record = plan.static_fn, None
    if step.trace is not None:
        step_fn, record = plan.traced_fn.of(plan), recorder(step.trace, plan.device.name)
    if plan.thread_form is not None and record is None and step.trio_threads:
        await plan.thread_form.run(plan, slots, step)  # (exec/thread_step.py)
        return core.fetched_values(plan, slots)
    if plan.transfers:
        wait = Transfers(step, record, plan.device.name)
    else:
        wait = _waiter(step, record) if plan.waits else None
    await step_fn(slots, step.offload, wait, step.pause, record)
    return core.fetched_values(plan, slots)


class TracedForm:
    """A static plan's traced step function: set with the plan's compiled forms, compiled on
    its first traced run (most plans never run traced, and compiling costs as much again)."""

    __slots__ = ("_fn",)

    def __init__(self):
        self._fn = None

    @property
    def compiled(self):
        return self._fn is not None

    def of(self, plan):
        if self._fn is None:
            self._fn = compile_schedule(plan, traced=True)
        return self._fn


def start_plan(plan, feed_values, step):
    """Start ``plan`` (prepared) in the core in the calling task, awaiting nothing; returns
    the ``core.Run`` after its first drain, to be awaited with ``core.finish`` unless
    ``done``."""
    prop = (Frames(plan, feed_values, step) if plan.control_flow
            else core.Flat(plan, _slots(plan, feed_values)))
    return core.start(plan, prop, step)


def _slots(plan, feed_values):
    """A step's slots, feeds first; the extra last slot swallows unread outputs."""
    slots = [None] * (plan.num_slots + 1)
    slots[:len(feed_values)] = feed_values
    return slots


def _waiter(step, record):
    """``wait(node, args, start=0)`` for a static schedule's one waiting kernel.

    Its synchronous twin first (a dequeue from a non-empty queue completes at once); else the
    kernel is awaited right here, inside the step owner's close-cancellable scope
    (``Step.park``), with no nursery: nothing else of the step can run meanwhile.
    """
    async def wait(node, args, start=0):
        ctx = StepContext(node.ctx, step)
        if node.nowait is not None:
            result = node.nowait(ctx, *args)
            if result is not WOULD_BLOCK:
                if record is not None:
                    record(node, start)
                return result
        with waiting(step) as parked:
            result = await node.fn(ctx, *args)
        if closed(parked):
            raise errors.session_closed(node.op)
        timeslice.restart()  # it waited: the task gave the loop back
        if record is not None:
            record(node, start or now_us(), True)
        return result
    return wait


class Transfers:
    """A static plan's Sends and Recvs for one step (``plan.transfers``; the generated
    function's ``_wait``, ``codegen.compile_schedule``): the core's Send and Recv without its
    drain. ``send`` deposits through the Send's synchronous twin (a CPU plan's never waits);
    ``subscribe`` subscribes a Recv in the step's rendezvous (a pull starts now, with the
    step's others), delivered into a ``Received``; ``take`` awaits one not there yet, inside
    the step owner's close-cancellable scope (``waiting``); ``close`` (the function's
    ``finally``) drops the subscriptions nothing took: a failed or cancelled step. Only the
    subscriptions not yet delivered are kept here (``pending``): a delivered value lives in
    its ``Received`` alone, which the generated code drops after the take, so the value dies
    after its last reader as the core's slot would, not at the step's end."""

    __slots__ = ("step", "record", "device_name", "pending")

    def __init__(self, step, record, device_name):
        self.step, self.record, self.device_name = step, record, device_name
        self.pending = set()  # Received subscribed and not delivered yet

    def send(self, node, value):
        if node.nowait(StepContext(node.ctx, self.step), value) is WOULD_BLOCK:
            raise errors.InternalError(None, node.op, f"{node.op.name}: a Send of a static "
                                       "plan would wait (plans with transfers are CPU only)")

    def subscribe(self, node):
        received = Received(node, StepContext(node.ctx, self.step))
        if self.record is not None:
            received.start = now_us()
        cancel = node.subscribe(received.ctx, received.deliver)
        if cancel is WOULD_BLOCK:  # awaited through its kernel by ``take``
            received.subscribed = False
        elif received.outputs is None and received.error is None:  # (else: delivered)
            received.cancel, received.pending = cancel, self.pending
            self.pending.add(received)
        return received

    async def take(self, received):
        """``received``'s outputs, awaited if they are not there; raises its located error."""
        node = received.node
        waited = received.outputs is None and received.error is None
        if waited:
            with waiting(self.step) as parked:
                if not received.subscribed:  # no subscription: the kernel waits itself
                    try:
                        received.outputs = await node.fn(received.ctx)
                    except Exception as exc:  # noqa: BLE001 - located below
                        received.error = exc
                else:
                    while received.outputs is None and received.error is None:
                        received.lot = trio.lowlevel.ParkingLot()
                        await received.lot.park()
            if closed(parked):
                raise errors.session_closed(node.op)
            timeslice.restart()  # it waited: the task gave the loop back
        if received.error is not None:
            error, received.error = received.error, None
            try:
                raise errors.located(error, node.op, self.device_name)
            finally:
                del error  # (this frame is in its traceback: no cycle)
        if self.record is not None:
            self.record(node, received.start, waited)
        return received.outputs

    def close(self):
        pending, self.pending = self.pending, set()
        for received in pending:
            received.cancel()
            received.cancel = received.lot = received.pending = None


class Received:
    """One Recv's subscription for ``Transfers``: its outputs or error once delivered."""

    __slots__ = ("node", "ctx", "outputs", "error", "cancel", "lot", "start", "pending",
                 "subscribed")

    def __init__(self, node, ctx):
        self.node, self.ctx = node, ctx
        self.outputs = self.error = self.cancel = self.lot = self.pending = None
        self.start = 0
        self.subscribed = True  # False: the rendezvous cannot subscribe (``take`` awaits)

    def deliver(self, outputs, exc=None):  # (the rendezvous' callback: never raises)
        if exc is None:
            self.outputs = outputs
        else:
            self.error = exc
        if self.pending is not None:  # (delivered: nothing to drop, nothing to keep; the
            self.pending.discard(self)  # subscription, which holds this, let go: no cycle)
            self.pending = self.cancel = None
        if self.lot is not None:
            self.lot.unpark_all()
