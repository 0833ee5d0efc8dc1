"""``ClusterTarget``: a Session's target when it runs on a cluster (``cluster=`` or a worker
address), the counterpart of ``exec.local_target.LocalTarget`` behind the same interface.

It owns the session's ``Master`` (``master.py``): ``prepare`` compiles through the master
(the shared ``compiled_run.partition_run`` over the cluster's devices, then one graph per task),
``run`` checks the tasks' incarnations first (a restarted worker makes the run compile and
register again) and drives the step on the workers. No cluster run is ``inline``: every
step crosses the wire, so the whole step sits in the session's close-cancellable scope, which
is also the RunGraph call's scope of a one-task step without a timeout (one scope a step);
the usual step, ready to go and without a timeout, enters no trio scope of the session's nor
of its calls: a ``CallCancel`` in the session's run scopes ends its RunGraph (closing the
connection its answer is awaited on), or, split one a call, the RunGraphs of a step on
several tasks (the PS step: its driver's nursery is the one scope left).
A step whose calls all went over channels that wait on a socket (``calls_yield``) gave the
event loop back: it closes the time slice (``exec/timeslice.py``), so the session's yield
between runs is not spent on a needless scheduler pass after it.
A compiled run of one task graph keeps a ``direct_step.DirectStep`` (decided in ``prepare``):
its usual step (ready, no timeout, untraced) goes from here to the channel without the
master's step driver, which takes over only where the step's one call ends otherwise.
"""
from __future__ import annotations

import trio

from asyncflow import errors
from asyncflow.cluster import master as _master
from asyncflow.cluster.direct_step import DirectStep
from asyncflow.exec import timeslice
from asyncflow.exec.step import Step
from transports.service import CallCancel, TransportUnavailable


class ClusterTarget:
    """The workers of ``cluster`` (a ClusterSpec or dict), or of the one worker ``address``.

    Args:
        graph: the session's Graph.
        cluster: a ClusterSpec or dict, or None with ``address``.
        address: ``"host:port"`` (``grpc://``/``http://`` prefixes accepted) of one worker,
            used as a one-task cluster whose job and task come from its Health.
        config: the SessionConfig (timeouts, soft placement, compression).
    """

    def __init__(self, graph, cluster, address, config):
        self.graph = graph
        self.master = _master.Master.for_cluster_or_target(cluster, address, config)
        self.cache = {}
        self.closed = False
        where = address or ", ".join(a for _, _, a in self.master.cluster.tasks())
        self.name = f"{self.master.session_handle} on {where}"  # (in its errors)

    async def open(self):
        await self.master.open()

    async def close(self):
        self.closed = True
        self.cache.clear()
        await self.master.close()

    def device_names(self):
        return self.master.device_names()

    def prepare(self, feeds, fetches, targets):
        """The RemoteRun of ``(feeds, fetches, targets)`` (tuples), compiled once per set of
        incarnations (``run`` compiles again after a restart)."""
        key = (feeds, fetches, targets)
        compiled = self.cache.get(key)
        if compiled is None:
            compiled = self.cache[key] = self._compile(key)
        return compiled

    def _compile(self, signature):
        compiled = self.master.compile(self.graph, *signature)
        compiled.direct = DirectStep.of(compiled)  # (its steps' direct path, or None)
        return compiled

    async def run(self, compiled, feed_values, trace, timeout_ms, parked):
        """One step on the workers; returns the fetched values in order.

        Raises:
            AbortedError: a task of the run restarted since the session last used it.
            UnavailableError: a task cannot be reached.
            OpError: the root cause of the step's failure.
        """
        failure = None
        master = self.master
        ready = master.opened and master.ready(compiled)
        # The usual step (nothing to refresh or register, no timeout): its waits are its
        # RunGraphs' answers, which a CallCancel ends without a trio scope (close()'s).
        cancel = CallCancel() if ready and not timeout_ms else None
        direct = compiled.direct if cancel is not None and trace is None else None
        with parked(cancel) as scope:
            if not ready:  # else nothing to refresh, nor to register (no checkpoint between)
                if not master.opened:
                    if self.closed:  # a run prepared before the close, awaited after it
                        raise errors.closed_session(self.name)
                    await master.open()
                if not await master.refresh(compiled):  # a worker restarted: recompile
                    compiled = self.cache[compiled.signature] = self._compile(
                        compiled.signature)
            try:
                if direct is not None:  # the usual one-task step: no Step, no driver
                    values = await direct.run(feed_values, cancel)
                    if master.tasks[direct.tg.task].channel.calls_yield:
                        timeslice.restart()
                    return values
                step = Step(0, trace=trace, timeout_ms=timeout_ms)
                step.extras["call_scope"] = scope  # one scope a step: the RunGraph's, if one
                step.extras["registered"] = ready
                values = await compiled.runner.run(feed_values, step)
                tasks = master.tasks
                for tg in compiled.task_graphs:  # (one or two: no generator)
                    if not tasks[tg.task].channel.calls_yield:
                        break
                else:  # every call waited on a socket: the task gave the loop back
                    timeslice.restart()
                return values
            except errors.OpError as exc:
                if not scope.cancel_called:
                    raise
                failure = exc  # the driver cancelled this scope (a task it declared dead)
            except TransportUnavailable:  # the call a CallCancel ended (as a scope's cancel)
                if scope is not cancel or not cancel.cancel_called:
                    raise
        if failure is None:
            raise errors.session_closed()
        try:  # a caller's cancel that came at once with the driver's wins, as it did when
            await trio.lowlevel.checkpoint_if_cancelled()  # the call had a scope of its own
            raise failure
        finally:
            del failure  # (this frame is in its traceback: kept, a cycle for the GC)
