"""A one-task step's direct path: ``ClusterTarget.run`` to the channel, no step driver.

Why
---
A trivial remote step (one RunGraph to one worker) spent ~42 us of the client's Python a
step, of which ~6 us in the master's layers (``run_step``, a ``StepDriver`` built, its
``run``, ``_run_one``, ``_run_graph``, ``_call``) and ~5 in ``ClusterTarget.run``'s own (an
``exec.step.Step`` and its extras, ``RemoteRunner.run``): bench/RESULTS.md, c43py. Such a step
needs nothing of the driver on its usual course: no nursery, no second call to order, no
abort to send (its one call answered). The driver is there for the step's failures.

How
---
``DirectStep.of(run)`` decides once per compiled run (``ClusterTarget.prepare``, and again
when a restart recompiles it) whether its steps may go direct: one task graph (so one
RunGraph, every fetch from its reply, no pushes nor pulls between tasks for the master to
coordinate). ``ClusterTarget.run`` takes it for a step that is ready (``Master.ready``:
nothing to refresh or register), without a timeout and untraced, under the session's
``CallCancel`` (the call's cancel without a trio scope, ``transports.service``); any other
step takes the driver (``master.run_step``).

A direct step is what the driver does for a one-task step on its usual course, inline: a
fresh step id from the master's generator, the RunGraph's next ``request_id``, the fixed
fields kept on the task graph (``tg.step``, the driver's own), the call noted with the
master's ``StepMonitor`` (a step that outlives the health interval gets its watchdog: then,
and only then, a ``StepDriver`` is made for it, with the call's cancel as its one call scope,
as the driver's own step would have at that point), and on the reply the task's ``last_ok``
and the graph's ``last_used``. The channel is asked for the fetches' values (``values=True``:
the HTTP client's same-host call reads them from the reply's frame template, no message).
Whatever ends the call otherwise (a worker's error, a dead or restarted worker, garbage, a
damaged reply, the caller's cancel, a KeyboardInterrupt, the session's close through the
``CallCancel``), and any reply once a watchdog has started, is handed to a ``StepDriver``
replaying the step from there (``_Ended``: its one call gives that outcome instead of calling
again), so the step's error, its AbortStep, the restart check and the watchdog's verdict are
the driver's, word for word. ``DirectStep.steps`` counts the steps that went direct (tests).

Knows the master and the channels' ``run_graph_step``; never HTTP.
"""
from __future__ import annotations

import outcome
import trio

from asyncflow.cluster import master as _master
from transports.messages import RunGraphReply, TensorEntry


class DirectStep:
    """The direct path of a compiled ``RemoteRun`` of one task graph (``of``)."""

    __slots__ = ("master", "remote", "tg", "routes", "steps")

    def __init__(self, run):
        self.master, self.remote = run.master, run
        self.tg = run.task_graphs[0]
        self.routes = [position for _, position in run.fetch_routes]
        self.steps = 0  # steps that went direct

    @classmethod
    def of(cls, run):
        """A DirectStep of ``run`` (a ``RemoteRun``) where its steps are one RunGraph, else
        None (the driver runs every step)."""
        if len(run.task_graphs) != 1 or run.master is None or run.task_graphs[0].options.pushed:
            return None
        return cls(run)

    async def run(self, feed_values, cancel):
        """One step; returns the fetched values in order (see the module docstring).
        ``cancel``: the session's ``CallCancel`` for it, lent to the RunGraph call.

        Raises:
            OpError: as the driver raises it.
        """
        master, tg = self.master, self.tg
        task = master.tasks[tg.task]
        call = _Call(self, master._step_bits(62) | 1, cancel)
        fixed = tg.step  # (the driver's: made once per handle, no timeout nor trace here)
        if fixed is None or not fixed.fits(tg.handle, None, False):
            fixed = tg.step = _master.RunGraphStep(tg.handle, tg.options.feeds,
                                                   tg.options.fetches, None, False)
        request = _master.StepCall(fixed, call.step_id, next(tg.request_ids),
                                   [feed_values[i] for i in tg.feed_indices])
        monitor, reply = master.monitor, None
        self.steps += 1
        monitor.watch(call)
        try:  # (unwatched whatever comes: a KeyboardInterrupt anywhere here leaves no call
            #    noted, whose watchdog would ask the task's Health for ever)
            try:
                reply = await task.channel.run_graph_step(request, scope=cancel, entered=True,
                                                          values=True)
            except BaseException as exc:  # noqa: BLE001 - the driver's to judge and raise
                call.ended = outcome.Error(exc)  # (raised by the driver, out of this block:
                #                                  the error is not the context of its own)
        finally:
            monitor.unwatch(call)
        if call.ended is not None or call.driver is not None:  # (a watchdog's verdict)
            return await call.driven(reply)
        task.last_ok = tg.last_used = trio.current_time()
        # (the fetches' values as the channel read them, or its reply's)
        values = reply if type(reply) is list else [entry.value for entry in reply.tensors]
        return [values[p] for p in self.routes]


class _Call:
    """One direct step, as its ``StepMonitor`` notes it (a step may run twice at once)."""

    __slots__ = ("direct", "step_id", "cancel", "driver", "ended")

    def __init__(self, direct, step_id, cancel):
        self.direct, self.step_id, self.cancel, self.driver = direct, step_id, cancel, None
        self.ended = None  # the call's failure (an outcome.Error), until the driver takes it

    def _driver(self):
        """The step's ``_Ended`` driver, made once, as the driver's own step stands while
        its one call is under way."""
        if self.driver is None:
            direct = self.direct
            driver = self.driver = _Ended(direct.master, direct.remote.graph, direct.remote,
                                          self.step_id, (), 0, None)
            driver.entered = self.cancel
            driver.calls_left = 1
            driver.call_scopes[direct.tg.task] = self.cancel
        return self.driver

    def start_watchdog(self, nursery):
        """The monitor's call: the step outlived the health interval."""
        self._driver().start_watchdog(nursery)

    async def driven(self, reply):
        """The step's outcome as the driver makes it of its call's end: ``ended`` (its
        failure), else ``reply``. No frame here holds the failure (its traceback holds them:
        a cycle for the GC), only the driver, which lets it go as it raises it."""
        driver = self._driver()
        driver.ended, self.ended = self.ended or outcome.Value(reply), None
        try:
            return await driver.run()
        finally:
            driver.ended = self.driver = None


class _Ended(_master.StepDriver):
    """A direct step's driver: its one RunGraph has been sent already (``ended``: the call's
    outcome, which ``_send`` gives instead of calling again)."""

    ended = None

    def _request(self, tg):
        return None  # (sent: its request id taken)

    async def _send(self, task, request, timeout, scope):
        ended, self.ended = self.ended, None
        try:
            reply = ended.unwrap()
        finally:
            del ended  # (this frame is in the failure's traceback: kept, a cycle for the GC)
        if type(reply) is list:  # the fetches' values (``values=True``): as the reply held them
            reply = RunGraphReply([TensorEntry(key, value) for key, value in zip(
                self.run_.task_graphs[0].options.fetches, reply)])
        return reply
