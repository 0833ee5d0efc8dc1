"""A heavy static plan's step run whole on one worker thread: one hand-off a step instead of
one per large kernel (issue 37).

A static plan's schedule (``exec/codegen.py``) runs on the event loop's thread and hands each
kernel whose actual inputs are large to a worker thread (``Step.offload``): the loop's thread
wakes a worker, sleeps, and is woken again when the kernel returns. On this 2-core VM each
such round trip left both cores idle for 0.15-0.4 ms (``bench/bench_model_timeline.py``: the
convnet's training step offloads ten kernels and spent 3.6 ms of its ~70 with no thread
computing, most of it in those gaps). Here a plan whose last step offloaded two kernels or
more runs its next step as one call on a worker thread: the same schedule, generated as a
plain function (``compile_schedule(plan, on_thread=True)``) that calls each large kernel
where the loop's form would await its hand-off, and the small kernels between them on that
thread too. The event loop is free for the whole step, as it is while one offloaded kernel
runs.

What stays as in the loop's form:
- the bits: the same kernels in the same order on the same inputs; a large kernel splits
  over the intra-op pool from its calling thread as an offloaded one does, a pair of
  GEMMs (``exec/pairs.py``) pairs the same way;
- errors: a kernel's failure raises its located OpError in the awaiting task;
- cancellation: cancelling the awaiting task sets a flag that the thread reads at each of
  the schedule's time-slice points (after every large kernel, and every few small ones);
  the thread stops there and the task raises ``Cancelled``: no kernel of the step runs after
  the step returned;
- the device's limiter: the step's thread holds one of its tokens, as one offloaded kernel
  does.

What differs: a variable's update (an optimizer's apply) runs on the thread, while other
tasks of the session run on the loop. An update that writes the stored array in place
(``VariableResource.reusable``: nobody else held it when it looked) marks itself the
variable's writer until its assign, and a step or fetch another task runs meanwhile reads a
copy: values possibly part old and part new (TF1's ``use_locking=False``), never an array that
changes after the read returned (``tests/exec/test_variable_writer.py``).

Where it applies (``thread_form``): a CPU plan (its kernels may offload) with at least two
offloadable kernels, no waiting kernel, no stateful op but variables and their updates
(random draws, queues and readers, whose handles are refs too, and every ``py_func``, the
user's code, keep the loop's thread), a plan not split into lanes
(``exec/lanes.py``), untraced steps awaited by trio with the default offload
(``step.offloaded``). Each step counts the kernels that were (or, on the thread, would have
been) offloaded; with fewer than ``MIN_OFFLOADS`` the next step runs on the loop's thread
again (a smaller batch), with as many or more the next runs on a thread.
``ASYNCFLOW_STEP_THREAD=0`` in the environment (or ``ENABLED = False`` before a plan is
built) keeps every step on the loop's thread.
"""
from __future__ import annotations

import contextvars
import os

import trio

from asyncflow.exec import lanes
from asyncflow.exec.codegen import compile_schedule
from asyncflow.exec.step import offloaded, reraised, returning

ENABLED = os.environ.get("ASYNCFLOW_STEP_THREAD", "1") != "0"
# Offloaded kernels a step must have (counted on the previous step) to run on a thread: one
# round trip for the whole step then replaces that many.
MIN_OFFLOADS = 2


class _Stopped(Exception):
    """The awaiting task was cancelled: the thread stopped at a time-slice point."""


class ThreadForm:
    """A plan's on-thread step function and the choice made for its next step."""

    __slots__ = ("fn", "heavy", "thread_steps")

    def __init__(self, fn):
        self.fn = fn
        self.heavy = False     # the next step runs on a thread
        self.thread_steps = 0  # steps run on a thread so far (statistics, tests)

    async def run(self, plan, slots, step):
        """Run one step of ``plan`` over ``slots``, on a thread or on the loop's."""
        if not self.heavy:
            count = [0]

            async def counting(node, args):
                count[0] += 1
                return await offloaded(node, args)
            await plan.static_fn(slots, counting, None, step.pause)
            self.heavy = count[0] >= MIN_OFFLOADS
            return
        count = [0]

        def offload(node, args):
            count[0] += 1
            return node.fn(node.ctx, *args)
        await run_stoppable(self.fn, slots, offload, plan.device.limiter)
        self.thread_steps += 1
        self.heavy = count[0] >= MIN_OFFLOADS


def thread_form(plan):
    """A ``ThreadForm`` for ``plan`` (its loop form compiled, not in lanes), or None where the
    thread form does not apply (module docstring)."""
    if (not ENABLED or not plan.static or plan.waits or not plan.may_offload
            or getattr(plan.device, "intra_op", None) is None):  # (a GPU's plan: no pool)
        return None
    if sum(1 for node in plan.schedule if node.offload) < MIN_OFFLOADS:
        return None
    if any(node.is_async or node.blocking_io or node.op.type in _USER_CODE
           for node in plan.schedule):  # (a blocking read there could not be abandoned)
        return None
    if not _only_variables(plan):
        return None
    return ThreadForm(compile_schedule(plan, on_thread=True))


# Kernels that call the user's Python code: it may expect the event loop's thread (a
# ``py_func`` with ``stateful=False`` is stateless only to the graph's optimizers).
_USER_CODE = frozenset({"PyFunc", "PyFuncStateless"})
# The ops whose refs are variables. A queue's or a reader's handle is a ref too, but its
# state (waiting trio tasks it reschedules) belongs to the event loop's thread.
_VARIABLES = frozenset({"VariableV2"})


def _only_variables(plan):
    """No stateful op but variables and what reads or updates them (through refs)."""
    touching, other = lanes.touched_resources(plan)
    if other:
        return False
    nodes = plan.nodes
    return all(nodes[key].op.type in _VARIABLES
               for keys in touching.values() for key in keys)


def _pause():
    raise _Stopped()


async def run_stoppable(fn, slots, offload, limiter):
    """``fn(slots, offload, stop, pause)`` on a worker thread holding a token of ``limiter``;
    a cancellation of the awaiting task sets ``stop[0]`` and is raised once the thread
    stopped (``fn`` calls ``pause`` at its next check)."""
    stop = [False]
    await limiter.acquire()
    try:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def deliver(result):
            def resume():
                trio.lowlevel.reschedule(task, result)
            try:
                token.run_sync_soon(resume)
            except trio.RunFinishedError:  # (the run ended: nobody waits any more)
                pass

        def abort(raise_cancel):
            stop[0] = True
            return trio.lowlevel.Abort.FAILED  # rescheduled by ``deliver``, stopped or done
        context = contextvars.copy_context()  # (as trio.to_thread gives a kernel's thread)
        trio.lowlevel.start_thread_soon(  # (a failure comes back as a value: step.Raised)
            lambda: context.run(returning, fn, slots, offload, stop, _pause), deliver,
            name="asyncflow step")
        try:
            reraised(await trio.lowlevel.wait_task_rescheduled(abort))
        except _Stopped:
            await trio.lowlevel.checkpoint()  # raises the cancellation that stopped it
            raise
    finally:
        limiter.release()
