"""The master: compiles a run for a cluster and drives each step on the workers.

Theory of operation (paper §3.3; docs/distributed.md):
- **Open.** Health of every task in the cluster (in parallel, under the connect timeout): its
  incarnation, device names (the placer's candidates) and task name (the ClusterSpec's, or fails).
- **Compile** (once per signature and set of incarnations): prune, place over every device of
  the cluster, partition per device (crossing edges become Send/Recv; keys carry the sending
  worker's incarnation), then group the partitions by task. Each task gets one graph_def of
  its nodes, where client feeds become placeholders ``_feed_<i>``, plus the names to feed and
  fetch, every task's address (``peers``, for pulls) and the transfers whose pulls may share
  a request without risking a deadlock, with their levels (``compile/transfer_order.py``).
- **Register** lazily before the first step, per task and incarnation, and again when the
  graph sat idle for half the lease the worker grants (``stats.graph_lease_s`` of its
  Health): a worker drops graphs nobody uses, and the old handle expires there on its own.
  A cancelled step leaves its registration running; a late answer's graph is deregistered.
  Each RunGraph carries the next ``request_id`` of its registration (the replay check).
- **Step.** A fresh random step id; RunGraph on every involved task at once, sent in a fixed
  order (producers of early values first, ``batching.start_order``); client feeds ride in the
  RunGraph of the task that reads them; fetches come back in the replies. Control edges that
  order nothing are not carried (``control_edges.py``, at compile): waiting for every RunGraph
  covers them. A health watchdog (``step_watchdog.py``) starts once a step outlives
  ``health_check_interval_s``; a session closed as a step fails (the watchdog declares a task
  dead, a task's error): the first decides. On the first failure the master sends AbortStep
  everywhere, gives the other RunGraphs a moment to report, then cancels them, and raises the first
  root-cause error (errors the worker marked ``derived`` lose to it). A transport failure is
  ``UnavailableError`` naming the task. A caller's cancellation aborts the step everywhere.
- **Restarts** (TF1's semantics). Every task has an *incarnation*, a random number drawn when
  its process starts, reported by Health and by RegisterGraph. The master remembers per task
  the incarnation its session state belongs to (``acknowledged``: the one seen at open). A
  task found with another one (by Health before a step when the last contact is older than
  the health interval, by the watchdog during a step, by a registration reply, or after a
  RunGraph the worker refused because it does not know the graph handle) has lost this
  session's graphs and its variables: the step fails with ``AbortedError`` naming the task
  ("restarted"), the new incarnation becomes the acknowledged one, and the next run compiles
  (rendezvous keys carry incarnations) and registers again. So a restart is reported exactly
  once, as an error recovery loops catch (never NotFound or an uninitialized variable), and
  the recovery's own runs (a Saver restore, the initializers) go through. A task the session
  has already reported as ``UnavailableError`` (it died) comes back acknowledged silently:
  the caller has been told it failed.
- **Unknown handles.** A worker answers RunGraph for a graph handle it does not hold with
  ``NOT_FOUND`` (no op named); the master turns that into ``AbortedError`` (TF1's "graph handle
  not found"): a restart as above, or, with the incarnation unchanged (the registration expired
  or was removed), the task graph is registered again on the next run.

Knows transports' messages and the graph/runtime layers; never HTTP (``channels.connect``).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import random
import secrets
import sys

import trio

from asyncflow import errors
from asyncflow.cluster import channels as _channels
from asyncflow.cluster import remote_rendezvous as _rdv
from asyncflow.compile.transfer_order import pushed_transfers, start_order, transfer_levels
from asyncflow.cluster.spec import ClusterSpec, tasks_of_health
from asyncflow.compile.control_edges import carry_fewer_control_edges
from asyncflow.cluster import step_watchdog as _step_watchdog
from asyncflow.cluster.step_monitor import StepMonitor
from asyncflow.compile.task_graph import task_graph_def as _task_graph_def
from asyncflow.exec import compiled_run
from asyncflow.exec.options import NodeStats
from transports.messages import AbortStep, GraphConfig, GraphOptions, RegisterGraph, RemoteCallError
from transports.run_graph_step import RunGraphStep, StepCall
from transports.service import CallCancel, TransportDeadlineExceeded, TransportUnavailable
from transports.wire import ChecksumMismatch

_log = logging.getLogger("asyncflow.master")
ABORT_GRACE_S = 1.0
# Step ids: one generator a process (no syscall a step), seeded again in a forked child: a
# copied state repeats the parent's ids, which a worker holds as its finished steps.
_STEP_IDS = random.Random(secrets.randbits(128))
os.register_at_fork(after_in_child=lambda: _STEP_IDS.seed(secrets.randbits(128)))


@dataclasses.dataclass
class _Task:
    name: str            # /job:worker/replica:0/task:1
    address: str
    channel: object
    incarnation: int = 0    # the latest one seen
    acknowledged: int = 0   # the one this session's graphs and state on the task belong to
    down_reported: bool = False  # an UnavailableError naming the task reached the caller
    devices: list = dataclasses.field(default_factory=list)
    last_ok: float = float("-inf")
    graph_lease_s: float | None = None  # how long the worker keeps an idle graph


@dataclasses.dataclass
class TaskGraph:
    """One task's share of a compiled run."""

    task: str
    graph_def: dict
    options: GraphOptions
    feed_indices: list     # indices into the run's feed list, in ``options.feeds`` order
    handle: str | None = None
    registered_incarnation: int = 0
    request_ids: object = None  # itertools.count(1) per registration: RunGraph request ids
    last_used: float = 0.0      # trio time of the registration or the last RunGraph reply
    registering: object = dataclasses.field(default=None, repr=False, compare=False)
    step: object = dataclasses.field(default=None, repr=False, compare=False)  # RunGraphStep


@dataclasses.dataclass
class RemoteRun:
    """A signature compiled for the cluster: per task its graph, and where fetches come from."""

    task_graphs: list
    fetch_routes: list     # per fetch: (task graph index, position in its fetches)
    incarnations: dict     # task -> incarnation the run was compiled against
    placement: dict
    signature: tuple = ()  # (feeds, fetches, targets)
    start_order: tuple = ()  # task graph indices in the order their RunGraphs go out
    master: object = dataclasses.field(default=None, repr=False)
    graph: object = dataclasses.field(default=None, repr=False)
    direct: object = dataclasses.field(default=None, repr=False)  # ``direct_step.DirectStep``
    # Its step runner (``exec/runner.py``'s interface), chosen once here.
    runner: object = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        self.runner = RemoteRunner(self)


class RemoteRunner:
    """A cluster step: a RunGraph on every task of the run, driven by the master. Never
    inline in the client; the step's ``timeout_ms`` rides in the RunGraphs."""

    __slots__ = ("remote",)
    _EXTRAS = ("call_scope", "registered")  # ClusterTarget's, for ``run_step``
    inline = loop_free = False

    def __init__(self, remote):
        self.remote = remote

    async def run(self, feed_values, step):
        remote = self.remote
        return await remote.master.run_step(remote.graph, remote, feed_values, step.timeout_ms,
                                            step.trace, *map(step.extras.get, self._EXTRAS))


def _to_register(tg, task, now):
    """Whether ``tg`` of ``task`` is to register (``Master._unregistered``)."""
    return tg.handle is None or tg.registered_incarnation != task.incarnation or (
        task.graph_lease_s is not None and now - tg.last_used > task.graph_lease_s / 2)


class Master:
    """The master side of a cluster session.

    Args:
        cluster: a ClusterSpec.
        config: the SessionConfig (timeouts, soft placement, compression).
        session_handle: this session's name on the workers (default: 64 random bits).
    """

    def __init__(self, cluster, config, session_handle=None):
        self.cluster, self.config = cluster, config
        self.session_handle = session_handle or f"session-{secrets.token_hex(8)}"
        self.tasks = {}
        for job, index, address in (cluster.tasks() if cluster is not None else ()):
            name = f"/job:{job}/replica:0/task:{index}"
            self.tasks[name] = _Task(name, address, _channels.for_session(address, config))
        self._target, self._pinned, self._runs, self.opened = None, {}, [], False
        self._forgotten = []   # (task, handle, incarnation): registered on a process that
        #                        restarted after the run was compiled; never used
        self._register_lock = trio.Lock()
        self._registering = set()  # Events of RegisterGraph calls in flight (close waits)
        self.monitor = StepMonitor(config.health_check_interval_s)  # times the steps' watchdogs
        self.closing = False  # close() began: a watchdog no longer decides a step's outcome
        self._step_bits = _STEP_IDS.getrandbits  # (one generator a process)

    @classmethod
    def for_cluster_or_target(cls, cluster, target, config):
        """A master for ``cluster`` (a ClusterSpec or dict), or for one worker ``target``
        (``"host:port"``, ``"http://host:port"`` or ``"grpc://host:port"``), whose job and
        task are read from its Health when the session opens."""
        if cluster is not None:
            return cls(ClusterSpec(cluster), config)
        master = cls(None, config)
        master._target = target_address(target)
        return master

    # -- cluster state ----------------------------------------------------------------
    async def open(self):
        """Ask every task for its health; raises UnavailableError naming unreachable tasks."""
        if self._target is not None and not self.tasks:
            channel = _channels.for_session(self._target, self.config)
            probe = _Task("", self._target, channel)
            try:
                reply = await channel.health(timeout=self.config.worker_dead_after_s)
            except _channels.CALL_FAILURES as exc:
                raise _channels.call_error("Health", probe, exc) from None
            probe.name = reply.task
            self.tasks[reply.task] = probe
            for name, address in tasks_of_health(reply.cluster):  # the target's whole cluster
                if name != reply.task:
                    self.tasks[name] = _Task(name, address,
                                             _channels.for_session(address, self.config))
        await _channels.all_at_once(self._health, self.tasks.values())
        self.opened = True

    async def _health(self, task):
        """Refresh ``task``'s incarnation and devices; returns True if it restarted."""
        try:
            reply = await task.channel.health(timeout=self.config.worker_dead_after_s)
        except _channels.CALL_FAILURES as exc:
            raise _channels.call_error(f"Health of {task.name}", task, exc) from None
        if reply.task != task.name:
            raise errors.InvalidArgumentError(
                None, None, f"the worker at {task.address} is {reply.task}, but the cluster "
                f"spec says {task.name}")
        restarted = task.incarnation not in (0, reply.incarnation)
        if restarted:
            _log.warning("worker %s restarted (incarnation %x -> %x); its graphs will be "
                         "registered again", task.name, task.incarnation, reply.incarnation)
        self._seen(task, reply.incarnation)
        task.devices = list(reply.devices)
        lease = reply.stats.graph_lease_s
        task.graph_lease_s = lease if lease is not None and lease > 0 else None
        task.last_ok = trio.current_time()
        return restarted

    @staticmethod
    def _seen(task, incarnation):
        """Record a reply's incarnation (see "Restarts" in the module docstring)."""
        if task.acknowledged == 0 or (task.down_reported and incarnation != task.acknowledged):
            task.acknowledged = incarnation  # first contact, or a death already reported
        task.incarnation = incarnation
        task.down_reported = False

    def restart_error(self, tasks, step_id=None):
        """The AbortedError reporting ``tasks``' restarts; their new incarnations become the
        acknowledged ones, so each restart is reported once."""
        names = []
        for task in {task.name: task for task in tasks}.values():
            names.append(f"{task.name} at {task.address} (incarnation {task.acknowledged:x} "
                         f"-> {task.incarnation:x})")
            task.acknowledged = task.incarnation
        during = f"during step {step_id}" if step_id is not None else "since its last step"
        return errors.AbortedError(
            None, None, f"worker {', '.join(names)} restarted {during}: its graphs, variables "
            "and queues are gone. The next run registers the graphs again; restore a "
            "checkpoint or run the initializers first (MonitoredTrainingSession does both)")

    def restarted(self, task_names):
        """The tasks among ``task_names`` whose incarnation is not the acknowledged one."""
        return [self.tasks[name] for name in dict.fromkeys(task_names)
                if self.tasks[name].incarnation != self.tasks[name].acknowledged]

    def device_names(self):
        return [d for task in self.tasks.values() for d in task.devices]

    def incarnations(self):
        return {name: task.incarnation for name, task in self.tasks.items()}

    # -- compile ----------------------------------------------------------------------
    def compile(self, graph, feeds, fetches, targets):
        """Compile ``(feeds, fetches, targets)`` with the shared pipeline
        (``compiled_run.partition_run`` over the cluster's devices), then split it by task.

        Raises:
            InvalidArgumentError: bad device requests or a graph that cannot be shipped.
        """
        device_incarnations = {d: task.incarnation for task in self.tasks.values()
                               for d in task.devices}
        state = compiled_run.DeviceState(self.device_names(), device_incarnations, self._pinned)
        # The workers optimize their shares: they hold the kernels constant folding runs.
        placed = compiled_run.partition_run(graph, feeds, fetches, targets, state, self.config,
                                            optimize_graph=False,
                                            rewrite=carry_fewer_control_edges)
        parts = placed.partitioned()
        by_task = {}
        for index, part in enumerate(parts.partitions):
            by_task.setdefault(_rdv.task_of_device(part.device), []).append(index)
        batchable = dict(sorted(transfer_levels(parts.partitions).items()))
        pushed = set(pushed_transfers(parts.partitions, batchable))
        peers = {name: task.address for name, task in self.tasks.items()}
        task_graphs, fetch_routes = [], [None] * len(parts.fetches)
        for task_name, indices in by_task.items():
            nodes = [n for i in indices for n in parts.partitions[i].nodes]
            feed_indices = sorted({f for i in indices for f in parts.partitions[i].feeds})
            fetch_positions = [k for k, (i, _) in enumerate(parts.fetches) if i in indices]
            graph_def, fetch_names = _task_graph_def(nodes, feeds, feed_indices,
                                                     [parts.fetches[k][1] for k in fetch_positions])
            for k, name in zip(fetch_positions, fetch_names):
                fetch_routes[k] = (len(task_graphs), list(dict.fromkeys(fetch_names)).index(name))
            options = GraphOptions(
                feeds=[f"_feed_{i}:0" for i in feed_indices],
                fetches=list(dict.fromkeys(fetch_names)), peers=peers, batchable=batchable,
                config=GraphConfig(self.config.allow_soft_placement,
                                   self.config.compress_transfers or ""),
                pushed=sorted(pushed.intersection(n.attrs.get("tensor_name") for n in nodes)))
            task_graphs.append(TaskGraph(task_name, graph_def, options, feed_indices))
        return RemoteRun(task_graphs, fetch_routes, self.incarnations(), placed.placement,
                         (tuple(feeds), tuple(fetches), tuple(targets)),
                         start_order([tg.task for tg in task_graphs], parts.partitions, batchable),
                         master=self, graph=graph)

    # -- steps ------------------------------------------------------------------------
    async def refresh(self, run):
        """Health of tasks not heard from lately; returns False when the run must recompile.

        Raises:
            AbortedError: a task of the run restarted since the session last used it.
            UnavailableError: a task of the run cannot be reached.
        """
        now = trio.current_time()
        stale = [self.tasks[tg.task] for tg in run.task_graphs
                 if now - self.tasks[tg.task].last_ok > self.config.health_check_interval_s]
        if stale:
            await _channels.all_at_once(self._health, stale)
        restarted = self.restarted(tg.task for tg in run.task_graphs)
        if restarted:
            raise self.restart_error(restarted)
        return all(run.incarnations[name] == task.incarnation
                   for name, task in self.tasks.items() if name in run.incarnations)

    def ready(self, run):
        """True when ``refresh(run)`` and the registration would do nothing (the usual step):
        every task of the run heard from within the health interval, none restarted, the
        cluster's incarnations those the run was compiled against, its graphs registered."""
        tasks, now, interval = self.tasks, trio.current_time(), self.config.health_check_interval_s
        for tg in run.task_graphs:  # (loops, not generators: every step asks)
            task = tasks[tg.task]
            if now - task.last_ok > interval or task.incarnation != task.acknowledged \
                    or _to_register(tg, task, now):
                return False
        for name, incarnation in run.incarnations.items():
            if name in tasks and tasks[name].incarnation != incarnation:
                return False
        return True

    async def _register(self, run):
        if not self._unregistered(run, trio.current_time()):
            return

        async def register(tg):
            task = self.tasks[tg.task]
            # Detached (its own timeout; a caller's cancel ends only its wait): the graph the
            # worker registered reaches tg.handle or, answered late, is deregistered; a step
            # retried meanwhile waits for the same call (a slow worker registers it once).
            if tg.registering is None or tg.registering.answered:
                tg.registering = await _channels.detached_call(functools.partial(
                    task.channel.register_graph,
                    RegisterGraph(tg.graph_def, self.session_handle, tg.options),
                    timeout=self.config.worker_dead_after_s), lambda late: _channels.deregister(
                        task.channel, late.graph_handle), self._registering,
                    f"RegisterGraph on {task.name}")
            try:
                reply = await tg.registering.result()
            except _channels.CALL_FAILURES as exc:
                raise _channels.call_error(f"RegisterGraph on {task.name}", task, exc) from None
            if reply.incarnation and reply.incarnation != task.incarnation:
                # Restarted since the run was compiled: its keys name the old incarnation.
                self._forgotten.append((task, reply.graph_handle, reply.incarnation))
                self._seen(task, reply.incarnation)
                raise self.restart_error([task])
            tg.handle, tg.registered_incarnation = reply.graph_handle, task.incarnation
            tg.request_ids, tg.last_used = itertools.count(1), trio.current_time()

        def pending():
            return self._unregistered(run, trio.current_time())

        # Concurrent first steps of one run would each register it (and leak all handles
        # but the last, never deregistered): the first registers, the others wait for it.
        async with self._register_lock:
            if run not in self._runs:  # before registering: close() must see partial ones
                self._runs.append(run)
            if pending():
                await _channels.all_at_once(register, pending())

    def _unregistered(self, run, now):
        """The task graphs of ``run`` to register: never, on an older incarnation, or with
        their lease half run out."""
        return [tg for tg in run.task_graphs if _to_register(tg, self.tasks[tg.task], now)]

    async def run_step(self, graph, run, feed_values, timeout_ms=0, trace=None, scope=None,
                       registered=None):
        """Run one step of ``run``; returns the fetched numpy values in order. ``scope``: an
        entered cancel scope of the caller's (or a ``CallCancel``), the RunGraph's of a one-task
        step without a timeout (no scope of its own: the driver tells its own cancels apart); a
        ``CallCancel`` for a step of several tasks is split, one a RunGraph (no scope either).

        Raises:
            OpError: the root cause of the step's failure.
        """
        if not registered:  # (``ready(run)`` true, no checkpoint since: nothing to register)
            await self._register(run)
        step = StepDriver(self, graph, run, self._step_bits(62) | 1, feed_values,
                           timeout_ms, trace)
        if scope is not None and not timeout_ms and (
                len(run.task_graphs) == 1 or type(scope) is CallCancel):
            step.entered = scope
        return await step.run()

    @staticmethod
    def forget_registration(tg):
        """Register ``tg`` again on its next run (its worker did not know the handle)."""
        tg.registered_incarnation = 0

    async def close(self):
        """Forget this session's graphs on the workers (best effort), close its channels and
        end its step monitor, shielded and bounded (``_channels.CLOSE_S`` a part): a cancel or
        a KeyboardInterrupt meeting it is raised after, no dead peer waited for past it."""
        self.closing = True  # (the session cancelled its steps' scopes just before: no await)
        self.opened = False  # (a run prepared before the close refuses: ClusterTarget.run)
        try:
            await _channels.deregister_all(lambda: [
                (self.tasks[tg.task].channel, tg.handle) for run in self._runs
                for tg in run.task_graphs if tg.handle is not None
                and tg.registered_incarnation == self.tasks[tg.task].incarnation] + [
                (task.channel, handle) for task, handle, incarnation in self._forgotten
                if task.incarnation == incarnation], self._registering)
        finally:
            await _channels.close_all([task.channel for task in self.tasks.values()],
                                      self.monitor.close())


class StepDriver:
    """One step across the cluster (see the module docstring)."""

    def __init__(self, master, graph, run, step_id, feed_values, timeout_ms, trace):
        self.master, self.graph, self.run_, self.step_id = master, graph, run, step_id
        self.feed_values, self.timeout_ms, self.trace = feed_values, timeout_ms, trace
        self.results = [None] * len(run.task_graphs)
        self.failures = []      # (derived?, OpError) in arrival order
        self.aborted, self.outer = False, None
        self.call_scopes = {}   # task -> the cancel scope of its RunGraph call
        self.dead = set()       # tasks declared dead: not waited for, not sent AbortStep
        self.calls_left = 0     # RunGraph calls not yet returned
        self.watchdog_scope = None  # made when the watchdog starts (most steps never need it)
        self.entered = None     # the caller's entered scope, a one-task step's call scope
        self.cancels = None     # per task graph: its RunGraph's CallCancel (``entered`` split)
        self.closed_calls = False  # a call ended by ``entered``'s cancel (the session closed)
        self.cancelled_own = False  # this driver cancelled a call (its failure recorded)
        self.failed_before_close = False  # a failure recorded before the master's close began

    async def run(self):
        """Each RunGraph but the last of the start order from a task of its own, the last
        from this task (a one-task step needs no nursery), started in that order; trio runs
        a scheduler batch in either order, so the last is written first in half the steps
        (forcing the order gained nothing: bench/RESULTS.md, r38ps; writing the first from
        this task, the others after it, was worse: its woken receiver took the client's core
        ~0.3 ms). ``StepMonitor`` starts the watchdog if the step outlives the interval."""
        order = self.run_.start_order or range(len(self.run_.task_graphs))
        self.calls_left, done = len(order), False
        if self.watchdog_scope is None:  # (a direct step's driver may have started it)
            self.master.monitor.watch(self)
        if len(order) > 1 and type(self.entered) is CallCancel:  # (a CallCancel, no scope)
            self.cancels = self.entered.split(len(self.run_.task_graphs))
        try:
            if len(order) == 1:
                await self._run_one(order[0])
            else:
                async with trio.open_nursery() as self.outer:
                    for index in order[:-1]:
                        self.outer.start_soon(self._run_one, index)
                        await trio.lowlevel.checkpoint()
                    await self._run_one(order[-1])
            if self.closed_calls:  # as the session's close would cancel its scope
                raise TransportUnavailable(f"step {self.step_id} was cancelled")
            done = not self.failures
        finally:
            self.master.monitor.unwatch(self)
            if not done:
                with trio.CancelScope(shield=True):
                    await self._abort("CANCELLED", f"step {self.step_id} was cancelled by the "
                                      "client" if not self.failures else self._root().message)
                if (self.failed_before_close and self.master.closing
                        and (self.closed_calls or _channels.only_cancelled(sys.exc_info()[1]))):
                    raise self._root(take=True)  # the failure came before the close's cancel
        if self.failures:
            raise self._root(take=True)
        return [self.results[i][p] for i, p in self.run_.fetch_routes]

    def start_watchdog(self, nursery):
        """The monitor's call: the step outlived the health interval."""
        if self.calls_left:
            self.watchdog_scope = trio.CancelScope()  # here: _run_one cancels what exists
            nursery.start_soon(_step_watchdog.guarded, self)

    def _root(self, take=False):
        """The first failure not derived, else the first; ``take``: forgotten here (this
        driver is in its frames when it is raised: kept, a cycle for the GC)."""
        root = next((e for derived, e in self.failures if not derived), self.failures[0][1])
        if take:
            self.failures = []
        return root

    async def _run_one(self, index):
        try:
            await self._run_graph(index)
        finally:
            self.calls_left -= 1
            if not self.calls_left and self.watchdog_scope is not None:
                self.watchdog_scope.cancel()

    async def _run_graph(self, index):
        tg = self.run_.task_graphs[index]
        task = self.master.tasks[tg.task]
        request = self._request(tg)
        timeout = self.timeout_ms / 1000 + 1.0 if self.timeout_ms else None
        # The call's scope is the channel's own (one per call): cancelling it ends the call.
        scope = self.call_scopes[tg.task] = (self.entered if self.cancels is None else
                                             self.cancels[index]) or trio.CancelScope()
        reply = await self._call(task, tg, request, timeout, scope)
        if reply is None:
            return
        task.last_ok = tg.last_used = trio.current_time()
        self.results[index] = [entry.value for entry in reply.tensors]
        if self.trace is not None and reply.step_stats:
            self.trace.extend(NodeStats(s.node_name, s.op_type, s.device, s.start_us, s.end_us)
                              for s in reply.step_stats.nodes)

    def _request(self, tg):
        """The step's RunGraph on ``tg``'s task, its fixed fields made once per handle, timeout
        and trace flag (``transports.run_graph_step``)."""
        fixed, timeout_ms, trace = tg.step, self.timeout_ms or None, self.trace is not None
        if fixed is None or not fixed.fits(tg.handle, timeout_ms, trace):
            fixed = tg.step = RunGraphStep(tg.handle, tg.options.feeds, tg.options.fetches,
                                           timeout_ms, trace)
        return StepCall(fixed, self.step_id, next(tg.request_ids),
                        [self.feed_values[i] for i in tg.feed_indices])

    async def _send(self, task, request, timeout, scope):
        if scope is self.entered or type(scope) is CallCancel:
            return await task.channel.run_graph_step(request, scope=scope, entered=True)
        return await task.channel.run_graph_step(request, timeout=timeout, scope=scope)

    async def _call(self, task, tg, request, timeout, scope):
        """RunGraph on ``task`` in ``scope``; returns its reply, or None after reporting the
        failure (or when ``scope`` was cancelled)."""
        try:
            return await self._send(task, request, timeout, scope)
        except _channels.CALL_FAILURES as exc:
            if type(scope) is CallCancel and scope.cancel_called:  # ended as a scope's cancel
                if self.cancelled_own or self._closed_call():  # (no Cancelled: see below)
                    return None
                raise
            failure = exc
        except trio.Cancelled:  # in the caller's scope: returns None as a lent one would
            if scope is self.entered and self.cancelled_own:  # when this driver cancelled
                return None
            raise
        # Reported in a scope of its own, which the call's cancel reaches (a restart check waits).
        with trio.CancelScope() as self.call_scopes[tg.task]:
            if scope.cancel_called:
                self.call_scopes[tg.task].cancel()
            elif type(scope) is CallCancel:
                scope.lend(self.call_scopes[tg.task])
            await self._report(task, tg, failure)
        del failure  # (this frame is in its traceback: kept, a cycle for the GC)
        if type(scope) is CallCancel and scope.cancel_called and not self.cancelled_own \
                and not self._closed_call():
            raise TransportUnavailable(f"RunGraph on {task.name} was cancelled")  # (a close)

    def _closed_call(self):
        """A call of a split ``entered`` ended by its cancel: ``run`` raises as the one-task
        step's call does, once all have ended (a nursery's child raises nothing)."""
        self.closed_calls |= self.cancels is not None and self.entered.cancel_called
        return self.closed_calls

    async def _report(self, task, tg, exc):
        if isinstance(exc, RemoteCallError):
            error = self._remote_error(exc, task)
            if exc.code in ("NOT_FOUND", "ABORTED") and not exc.op and not exc.derived:
                # Not an op's error nor a peer's abort: the worker lost the graph handle
                # (NOT_FOUND) or the step. Restarted? Then say so, as TF1 does.
                await self._check_restart(task)
                if self.master.restarted([task.name]):
                    error = self.master.restart_error([task])
                elif exc.code == "NOT_FOUND":
                    self.master.forget_registration(tg)
                    error = errors.AbortedError(None, None, f"{error.message} (graph "
                                                "registered again on the next run)")
            await self._failed(error)
        elif isinstance(exc, ChecksumMismatch):  # never retried here: see damaged_step_reply
            await self._failed(_channels.damaged_step_reply(
                task, getattr(task.channel, "address", "?"), exc))
        elif isinstance(exc, TransportDeadlineExceeded):
            await self._failed(errors.DeadlineExceededError(None, None, f"RunGraph on "
                               f"{task.name}: {exc}"))
        else:  # TransportError, or an answer that is no valid reply (garbage)
            await self._failed(_channels.unavailable(task, exc), dead_task=task.name)

    async def _check_restart(self, task):
        try:
            await self.master._health(task)
        except errors.OpError:
            pass

    def _remote_error(self, exc, task):
        op = (self.graph.find_operation(exc.op) or exc.op) if exc.op else None
        error = _rdv.from_remote(exc, op=op)
        error._asyncflow_located = True
        return error

    async def _failed(self, error, dead_task=None):
        self.failures.append((_rdv.is_derived(error), error))
        self.failed_before_close |= not self.master.closing  # (the first decides)
        if dead_task is not None:  # nothing to wait for there, nobody to tell
            self.dead.add(dead_task)
            scope = self.call_scopes.get(dead_task)
            if scope is not None:
                self.cancel_call(scope)
        if len(self.failures) == 1 and self.outer is not None:  # (one task: run() aborts)
            # Others now fail fast (aborted rendezvous); give their root causes a moment.
            scope = self.outer.cancel_scope
            scope.deadline = min(scope.deadline, trio.current_time() + 2 * ABORT_GRACE_S + 1)
            self.outer.start_soon(self._abort, errors.error_code_name(error), error.message)

    async def _abort(self, code, message):
        if self.aborted:
            return
        self.aborted = True

        async def abort_one(tg):
            task = self.master.tasks[tg.task]
            try:
                await task.channel.abort_step(AbortStep(self.step_id, code, message[:4000]),
                                              timeout=ABORT_GRACE_S)
            except _channels.CALL_FAILURES:
                pass

        await _channels.each_shielded(abort_one, [tg for tg in self.run_.task_graphs
                                                  if tg.task not in self.dead],
                                      ABORT_GRACE_S + 0.5)

    def cancel_call(self, scope):
        """Cancel a RunGraph's ``scope`` as this driver's own doing (a task declared dead, a
        broken watchdog), unless the master's close began first: then the close's cancel
        decides, as for any step in flight when its session closes (``step_watchdog``)."""
        if not self.master.closing:
            self.cancelled_own = True
            scope.cancel()


target_address = _channels.target_address  # (where it lived before)
