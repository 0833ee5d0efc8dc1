"""A compiled signature's one step runner, chosen once when it is compiled (``choose``).

Theory of operation (``docs/architecture.md``, "Plans and the executor"). Every way a step
runs locally or on a worker goes through one interface, ``await runner.run(feed_values,
step)`` returning the fetched values in fetch order (host arrays), with the failure of any
partition raised as one located ``OpError`` naming the user's op:
- ``PlanRunner``: one plan (static function, core over ``Flat`` or ``Frames``: the plan's
  own compiled form, ``dispatch.run_plan``). ``inline`` when it is a CPU plan without control
  flow (a Session may run it in the caller's task, under any loop when ``loop_free``: static
  and never waiting).
- ``PartitionsRunner``: several plans around one rendezvous (a local ``LocalRendezvous``,
  or the worker's ``StepRendezvous``, which the worker puts on the ``Step``; a worker adds
  only what crosses the wire).

``PartitionsRunner`` first *starts* every CPU partition inline in the calling task
(``dispatch.start_plan``), one after the other: a partition's Recv whose Send has not run
yet subscribes, and a later partition's Send completes it there, the running drain draining
the partition it fed (``core.drive``). Partitions that finish this way need no task; a
step whose partitions all finish (the common small step) opens no nursery at all. Runs
that stopped only because the time slice ran out (``Run.paused``) go on in the same
task after a checkpoint, one slice at a time, for as long as nothing else stops them. Runs
that only wait for deliveries (Recvs subscribed to values from a pull, another device) are
finished in the same task too, parked on one lot they all wake. The partitions left
(kernels that must run as tasks, GPU devices) each get a task in one nursery and finish
there. The first failure aborts the rendezvous (waking every Recv) and cancels the other
partitions, and is the error raised: the root cause, never a derived cancellation and never
an ExceptionGroup. Fetched values leave their device through ``device.to_host`` (an awaited
stream event on a GPU).
"""
from __future__ import annotations


import trio

from asyncflow import errors
from asyncflow.exec import core, dispatch
from asyncflow.exec import timeslice
from asyncflow.exec.rendezvous import LocalRendezvous
from asyncflow.exec.step import closed, waiting


def choose(graph, compiled):
    """The runner of ``compiled`` (a CompiledRun of ``graph``), decided once."""
    if len(compiled.plans) == 1:
        return PlanRunner(graph, compiled.plans[0], compiled.fetch_routes,
                          compiled.feed_routes[0])
    return PartitionsRunner(graph, compiled)


class PlanRunner:
    """A step of one plan (see the module docstring)."""

    __slots__ = ("graph", "plan", "feed_routes", "positions", "inline", "loop_free", "on_host")

    def __init__(self, graph, plan, fetch_routes, feed_routes):
        self.graph = graph
        self.plan = plan
        # The plan of a rewritten signature (constants folded) may read fewer feeds than the
        # run has: it reads ``feed_values[i] for i in feed_routes`` (sorted, unique).
        self.feed_routes = feed_routes
        # CSE may have merged fetches: the routes map each requested fetch to its value.
        self.positions = [position for _, position in fetch_routes]
        self.on_host = plan.device.kind == "CPU"  # feeds and fetches need no copy
        self.inline = self.on_host and not plan.control_flow
        self.loop_free = self.inline and plan.static and not plan.waits

    async def run(self, feed_values, step):
        plan = self.plan
        if len(self.feed_routes) != len(feed_values):  # else the routes are 0..n-1
            feed_values = [feed_values[i] for i in self.feed_routes]
        if not self.on_host:
            feed_values = [plan.device.put(v) for v in feed_values]
        values = await dispatch.run_plan(plan, feed_values, step)
        if not self.on_host:
            values = await _fetch_to_host(plan, values)
        return [values[position] for position in self.positions]


class PartitionsRunner:
    """A step of several plans around one rendezvous (see the module docstring)."""

    __slots__ = ("graph", "compiled")
    inline = loop_free = False

    def __init__(self, graph, compiled):
        self.graph = graph
        self.compiled = compiled

    async def run(self, feed_values, step):
        return await run_partitions(self.graph, self.compiled, feed_values, step)


async def _fetch_to_host(plan, values):
    to_host = plan.device.to_host
    return [await to_host(v) for v in values]


async def run_partitions(graph, compiled, feed_values, step):
    """Run every plan of ``compiled`` for ``step``; returns the fetched values in order.

    Raises:
        OpError: the first failure of any partition (its root cause).
    """
    plans = compiled.plans
    timeslice.begin()
    local = step.rendezvous is None
    if local:
        step.rendezvous = LocalRendezvous()
    results = [None] * len(plans)
    runs = [None] * len(plans)  # runs started inline; None: runs whole as a task
    try:
        failure = _start_inline(compiled, feed_values, step, runs)
        if failure is None:
            failure = await _go_on_inline(step, runs)
        if failure is None:
            failure = await _finish_in_this_task(step, runs)
        if failure is None:
            left = []
            for index, run in enumerate(runs):
                if run is None or not run.done:
                    left.append(index)
                else:  # finished inline: a CPU device's ``to_host`` does not suspend
                    run.close()
                    results[index] = await _fetch_to_host(plans[index], run.prop.values())
            if left:
                failure = await _finish_in_tasks(compiled, feed_values, step, runs, left,
                                                 results)
    finally:
        for run in runs:
            if run is not None:
                run.close()  # idempotent; drops the subscriptions of a cancelled step
    if failure is not None:
        # The failure's tracebacks hold this step's frames, which hold its runs and
        # rendezvous: neither may hold the failure, or the step waits for the cyclic GC.
        for run in runs:
            if run is not None:
                run.failure = None
        if local:
            step.rendezvous.release()
        try:
            raise failure
        finally:
            del failure
    return [results[plan_index][position] for plan_index, position in compiled.fetch_routes]


def _start_inline(compiled, feed_values, step, runs):
    """Start the CPU partitions in the calling task (``runs[i]``); returns the first failure.

    On a failure the started runs are closed (their subscriptions dropped) and the rendezvous
    is aborted, waking anything else waiting on it (nothing runs as a task yet).
    """
    started = []
    for index, plan in enumerate(compiled.plans):
        if plan.device.kind != "CPU":
            continue  # another device's partition runs whole through run_plan, in a task
        try:
            run = dispatch.start_plan(
                plan, [plan.device.put(feed_values[i]) for i in compiled.feed_routes[index]],
                step)
        except Exception as exc:  # noqa: BLE001 - becomes the step's error, as in a task
            failure = exc
        else:
            runs[index] = run
            started.append(run)
            # This drain may have run (and failed) partitions started before.
            failure = next((r.failure for r in started if r.failure is not None), None)
        if failure is not None:
            try:
                return _abandon_inline(step, started, failure)
            finally:
                del failure  # (see run_partitions: a frame of the failure's traceback)
    return None


def _abandon_inline(step, runs, failure):
    """Close the inline ``runs`` (dropping their subscriptions) and abort the step's rendezvous
    with ``failure``, waking anything waiting on it; returns ``failure``."""
    for run in runs:
        run.close()
    step.rendezvous.abort(failure)
    return failure


async def _go_on_inline(step, runs):
    """While every unfinished run only paused at the end of a time slice (none needs a task),
    checkpoint and resume them in this task, inside ``Step.park`` (a long loop can be closed);
    returns the first failure (see ``_start_inline``).
    """
    if not any(run is not None and run.paused for run in runs):
        return None
    with waiting(step) as parked:
        while all(run is not None and not run.waiting for run in runs):
            paused = [run for run in runs if run.paused]
            if not paused:
                break
            await timeslice.checkpoint()
            for run in paused:
                if run.paused:  # (another's drain may have drained it meanwhile)
                    run.drain()
            failure = next((run.failure for run in runs if run.failure is not None), None)
            if failure is not None:
                try:
                    return _abandon_inline(step, runs, failure)
                finally:
                    del failure  # (see run_partitions)
    if closed(parked):
        started = [run for run in runs if run is not None]
        return _abandon_inline(step, started, errors.session_closed())
    return None


async def _finish_in_this_task(step, runs):
    """While every unfinished run is a started one that waits only for deliveries (Recvs
    subscribed to values from elsewhere: a pull, another device), park this task on one lot
    they all wake and apply what they report, draining inline; returns the first failure.

    A run that needs a task of its own (``waiting``: a kernel to await) or a partition not
    started inline stops this and leaves the rest to ``_finish_in_tasks``.
    """
    pending = [run for run in runs if run is None or not run.done]
    if not pending or any(run is None for run in pending):
        return None
    lot = trio.lowlevel.ParkingLot()
    for run in pending:
        run.lot = lot
    with waiting(step) as parked:
        while True:
            pending = [run for run in pending if not run.done]
            failure = next((run.failure for run in runs if run.failure is not None), None)
            if failure is not None:
                try:
                    return _abandon_inline(step, [run for run in runs if run is not None],
                                           failure)
                finally:
                    del failure  # (see run_partitions)
            if not pending or any(run.waiting for run in pending):
                break
            reporting = [run for run in pending if run.reports]
            if reporting:
                for run in reporting:
                    if run.failure is None:
                        run.take_reports()
                continue
            paused = [run for run in pending if run.ready]
            if paused:
                await timeslice.checkpoint()
                for run in paused:
                    if run.ready and run.failure is None:
                        run.drain()
                continue
            await lot.park()
            timeslice.restart()  # parking gave the event loop back
    for run in runs:
        if run is not None:
            run.lot = None  # a task of ``core.finish`` parks on its own
    if closed(parked):
        started = [run for run in runs if run is not None]
        return _abandon_inline(step, started, errors.session_closed())
    return None


async def _finish_in_tasks(compiled, feed_values, step, runs, left, results):
    """Finish the partitions ``left`` (started or not), one task each; the first failure."""
    plans, rendezvous = compiled.plans, step.rendezvous
    failures = []

    async def finish_one(index, nursery):
        plan, run = plans[index], runs[index]
        try:
            if run is None:
                feeds = [plan.device.put(feed_values[i]) for i in compiled.feed_routes[index]]
                values = await dispatch.run_plan(plan, feeds, step)
            else:
                values = await core.finish(run)
            results[index] = await _fetch_to_host(plan, values)
        except Exception as exc:  # reported once; the rest of the step is torn down
            if not failures:
                failures.append(exc)
                rendezvous.abort(exc)
                nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for index in left:
            nursery.start_soon(finish_one, index, nursery)
    try:
        return failures[0] if failures else None
    finally:
        failures.clear()  # (see run_partitions: finish_one's frames hold this list)
