"""Running one compiled partition for one step: the plan's compiled form, else the core.

``generate_forms`` gives a plan its compiled forms once, when it is built; ``run_plan`` runs a
static plan's step function (awaited in place: no nursery, no task; traced through its
traced twin) and every other plan in the core over the flat or the frames propagator;
``start_plan`` starts a CPU partition of a multi-partition step in the calling task
(``docs/architecture.md``, "Plans and the executor").
"""
from __future__ import annotations


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
