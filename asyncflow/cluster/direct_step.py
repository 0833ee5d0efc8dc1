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

The hand-over
-------------
A Ctrl-C is raised by trio between any two lines of code that is not KI-protected: one landing
after the call's failure and before the driver's ``run`` reached its ``try`` (keeping the
failure, the unwatch, the driver made) would end the step without the driver's AbortStep,
and the worker keep the step (its rendezvous, a partial run) until its own timeout. So
``DirectStep.run`` is KI-protected (trio's ``enable_ki_protection``: a Ctrl-C waits for the
main task's next checkpoint there), and the step itself its ``_step``, not protected (a Ctrl-C
in the call, the hand-over or the driver is raised at once, as in the driver's own steps);
whatever exception leaves ``_step`` once the RunGraph is on its way and unanswered, ``run``'s
handler sends the AbortStep through the step's driver (``_Call.settle``: the driver's
``_abort``, shielded, within its grace, sent once: not again where the driver sent it). Only a
second Ctrl-C during that AbortStep may cut it short (trio delivers it to the main task where
it waits, shield or not); that KeyboardInterrupt is raised alone, not in the abort's nursery
group (``channels.each_shielded``).

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

    @trio.lowlevel.enable_ki_protection
    async def run(self, feed_values, cancel):
        """One step; returns the fetched values in order (see the module docstring).
        ``cancel``: the session's ``CallCancel`` for it, lent to the RunGraph call.

        This frame is KI-protected (a Ctrl-C meets none of its own lines, only ``_step``'s,
        which are not: see "The hand-over" above): whatever ends ``_step`` by an exception
        before the worker answered and before the driver sent its AbortStep sends it here.

        Raises:
            OpError: as the driver raises it.
        """
        call = _Call(self, self.master._step_bits(62) | 1, cancel)
        try:
            return await self._step(call, feed_values)
        except BaseException:
            await call.settle()
            raise

    @trio.lowlevel.disable_ki_protection
    async def _step(self, call, feed_values):
        """``run``'s step (its frames unprotected: a Ctrl-C in the call is raised in it, as
        for the driver's own call)."""
        master, tg = self.master, self.tg
        task = master.tasks[tg.task]
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
                call.answered = False
                reply = await task.channel.run_graph_step(request, scope=call.cancel,
                                                          entered=True, values=True)
                call.answered = True
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

    __slots__ = ("direct", "step_id", "cancel", "driver", "ended", "answered")

    def __init__(self, direct, step_id, cancel):
        self.direct, self.step_id, self.cancel, self.driver = direct, step_id, cancel, None
        self.ended = None  # the call's failure (an outcome.Error), until the driver takes it
        self.answered = None  # False once the RunGraph is on its way, True once answered

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
            driver.ended = None  # (the driver kept: ``settle`` asks whether it aborted)

    async def settle(self):
        """``DirectStep.run``'s, as an exception leaves the step (KI-protected there): the
        step's AbortStep, the driver's own (``_abort``: shielded, within its grace; sent once,
        so never again where the driver sent it), unless the worker answered the call or
        never got it. A KeyboardInterrupt between the call's end and the driver's ``run``
        (the hand-over) would otherwise leave the step on the worker until its own timeout;
        one in an unwatch, the call or its driver noted with the monitor, a watchdog started
        (both ended here)."""
        self.ended = None  # (a failure the driver never took: its traceback holds this call)
        monitor = self.direct.master.monitor  # (neither left noted: see ``_step``'s finally)
        monitor.unwatch(self)
        if self.driver is not None:  # (its watchdog, if started, ended: the call has)
            monitor.unwatch(self.driver)
            if self.driver.watchdog_scope is not None:
                self.driver.watchdog_scope.cancel()
        if self.answered is False:
            driver = self._driver()
            if not driver.aborted:
                await driver._abort("CANCELLED", f"step {self.step_id} was cancelled by the "
                                    "client")
        self.driver = None


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
