"""The worker service: the logic behind every transport (``transports.service`` handler protocol).

Theory of operation (paper §3.3; docs/distributed.md):
- **RegisterGraph.** The master sends one partition per worker as plain data:
  ``graph`` is a graph_def (``Graph.as_graph_def`` format) of already placed nodes, its
  Send/Recv pairs included; ``options`` names the feeds (placeholders standing for client
  feeds), fetches, the Recvs' batchable tensor names with their levels, the peers and the
  session's settings.
  The worker rebuilds it with ``import_graph_def`` in a fresh Graph, then compiles it with
  the local compiler, which re-partitions by local device. One log line per graph. Import
  and compile of a graph of more than ``INLINE_GRAPH_NODES`` nodes run in a worker thread (one
  registration at a time), so the trio loop keeps answering Health; a graph of more than
  ``max_graph_nodes`` nodes is refused before.
- **Graph leases.** A graph lives ``graph_lease_s`` seconds (default 600) past its last
  registration or RunGraph; then it is dropped (never while it runs), so the graphs of a
  client killed with -9 do not stay forever. ``expire_idle_graphs`` (a task the Server runs)
  checks every ``lease_check_period_s`` (a quarter of the lease, between 0.05 and 30 s), so a
  vanished client's graph is gone within its lease plus that margin even when no request
  arrives; Health and ``/metrics`` check too, and show the count falling. The master
  registers a graph again when it has been idle for half the lease (Health's
  ``stats.graph_lease_s`` says how long), so a live session never sees its graph expire.
- **Replay.** Every RunGraph carries a ``request_id`` > 0, unique per graph handle (the master
  counts from 1 per registration). The worker keeps an anti-replay window per handle (the
  highest id and the ids seen within ``REPLAY_WINDOW`` below it, as IPsec does): a repeated
  or too-old id is refused with ABORTED, so a recorded RunGraph cannot run twice.
- **RunGraph.** Validates feeds against their placeholders, finds or creates the step's
  state, binds the step's ``StepRendezvous`` to the graph (peers, Recv declarations) and runs
  the partitions with the compiled run's step runner under the request's deadline; a graph
  with Recvs from peers runs inside a nursery of the step where its pulls run, one task per
  request (the Recvs subscribe). A failure aborts the step's rendezvous (so pulls from peers
  see it), is logged once and answered with its canonical code; the reply's ``op`` names the
  op to blame (the master names the user's op from it), ``derived`` says the failure only
  follows from another one. A partition of one plan without Sends or Recvs runs its untraced
  steps *plain* (``worker_step._run_plain``): the same state, answers and counters, but no
  ``StepRendezvous`` unless a pull, a push or an abort of the step asks for one or it fails.
  Over the bare same-host protocol a plain graph's repeated RunGraph frame skips the message:
  ``prepare_run_graph`` checks once what its frame template fixes (graph, fetches, feeds) and
  its ``PlainStep`` admits and runs each step from its ids and feed arrays.
- **RecvTensors.** Receiver-initiated: waits in the step's local rendezvous until each key has
  been sent; a pull that arrives before the step's RunGraph creates the step's state.
- **PushTensors.** A peer's pushed Sends (``remote_rendezvous``), deposited in the step's
  rendezvous at once; a push that arrives before the step's RunGraph creates its state. Which
  keys a push may name and how much it may park: ``push_acceptance.py`` (the handler).
- **Step state is bounded.** A step is dropped when its RunGraph is done and every tensor it
  sent has been pulled, on AbortStep/CleanupStep, or after ``step_ttl`` seconds. Dropped
  steps leave a tombstone (a bounded LRU) so late RunGraphs and pulls fail fast with
  ABORTED instead of recreating state; at most ``max_steps`` steps live at once. An AbortStep
  for a step this worker never saw leaves its mark in a second LRU, so flooding AbortStep
  with made-up ids cannot evict the tombstones of steps that ran.
- **Reset** clears the resource containers, aborts every live step (its RunGraph answers
  ABORTED instead of finishing into dropped state) and drops every graph.
- **Files.** With a ``data_dir``, every file an op opens must resolve inside it
  (``exec/files.py``): Save, Restore and the readers fail with PERMISSION_DENIED otherwise.
- Resources (variables, queues) live in the worker's ResourceManager and outlive sessions
  until Reset. A stateful random op's generator is the master session's (RegisterGraph's
  ``session_handle``): one per op and session, shared by every graph the session registers
  here and dropped with its last graph (deregistered or reset; expired: a lease later, so a
  session idle past its lease goes on when it registers again), as TF1's worker keeps
  stateful kernels in the session's OpSegment. This module knows transports' messages
  and errors, never HTTP.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import secrets

import trio

from asyncflow import errors
from asyncflow.cluster import remote_rendezvous as _rdv
from asyncflow.cluster.remote_rendezvous import host_array as _host
from asyncflow.cluster import status as _status
from asyncflow.graph.graph import Graph
from asyncflow.graph.importer import import_graph_def
from asyncflow.exec import compiled_run
from asyncflow.exec import devices as _device
from asyncflow.exec.options import SessionConfig
from asyncflow.exec.runner import PlanRunner
from asyncflow.exec.files import DataDirectory
from asyncflow.exec.resources import ResourceManager
from asyncflow.exec.step import preload
from asyncflow.cluster.push_acceptance import ONE_WAY_RPCS, PushAcceptance, pushed_recv_keys
from asyncflow.cluster.worker_step import StepRunning, _fail, _feed_checks
from transports.messages import (
    HealthReply, RecvTensorsReply, RegisterGraphReply, TensorEntry, WorkerStatistics,
)
from transports.repeat_frames import forget_graph as _forget_frames

_log = logging.getLogger("asyncflow.worker")

REPLAY_WINDOW = 4096
# Graphs up to this size are imported on the loop (tens of ms); larger ones in a thread.
INLINE_GRAPH_NODES = 500
LEASE_CHECK_MIN_S, LEASE_CHECK_MAX_S = 0.05, 30.0  # expire_idle_graphs looks every quarter lease


class _ReplayWindow:
    """The request ids of one graph handle's RunGraphs, as an anti-replay window.

    Ids at or below ``highest - REPLAY_WINDOW`` are refused as too old; within the window each
    id is accepted once. Memory is bounded by the window, whatever a client sends.
    """

    __slots__ = ("highest", "seen")

    def __init__(self):
        self.highest = 0
        self.seen = set()

    def admit(self, request_id):
        """None if ``request_id`` is fresh (and now used), else why it is refused."""
        if request_id <= 0:
            return "a RunGraph needs a request_id > 0, unique per graph handle"
        if request_id <= self.highest - REPLAY_WINDOW:
            return (f"request_id {request_id} is older than the last {REPLAY_WINDOW} "
                    f"(highest {self.highest})")
        if request_id in self.seen:
            return f"request_id {request_id} was already used: a replayed RunGraph"
        self.seen.add(request_id)
        if request_id > self.highest:
            self.highest = request_id
            if len(self.seen) > 2 * REPLAY_WINDOW:
                floor = self.highest - REPLAY_WINDOW
                self.seen = {seen for seen in self.seen if seen > floor}
        return None


@dataclasses.dataclass
class _WorkerGraph:
    handle: str
    graph: Graph
    compiled: object
    feeds: list          # placeholder tensors, in the order of feed_names
    feed_names: list
    fetch_names: list
    binding: object      # the RemoteBinding every step of the graph shares (peers, Recvs)
    peers: dict          # task name -> address
    lease_expires: float = 0.0  # trio time after which an idle graph is dropped
    feed_checks: list = dataclasses.field(default_factory=list)  # per feed, see _feed_checks
    running: int = 0     # RunGraphs in progress
    runs: int = 0        # RunGraphs started
    op_count: int = 0    # ops of the partition as registered
    replay: _ReplayWindow = dataclasses.field(default_factory=lambda: _ReplayWindow())
    session: str | None = None  # the master session that registered it (its random ops')
    plain: bool = False  # one plan without Sends or Recvs: its steps may run plain (worker_step)


def _plain(graph, compiled):
    """Whether a registered partition's steps may run plain: one plan, no Send or Recv (no
    transfer, remote or between local devices, touches a step's rendezvous)."""
    return isinstance(compiled.runner, PlanRunner) and not any(
        op.type in ("_Send", "_Recv") for op in graph.get_operations())


class _Counters:
    steps_run: int = 0
    steps_failed: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    graphs_registered: int = 0
    pull_requests: int = 0
    tensors_pulled: int = 0
    push_requests: int = 0
    tensors_pushed: int = 0


class WorkerService(StepRunning, PushAcceptance):
    """One worker task's service state (implements ``WorkerServiceProtocol``).

    Args:
        job_name: this task's job.
        task_index: this task's index.
        connect: ``connect(address) -> Channel`` for pulls from peers (e.g. a TrioHttpChannel).
        config: a SessionConfig for the local devices (``device_count``) and compiler.
        step_ttl: seconds a step's state may live without finishing.
        max_steps: steps alive at once before pulls for new steps are refused.
        data_dir: the directory the worker's file ops are confined to (None: unconfined).
        graph_lease_s: seconds a graph lives past its last registration or run.
        max_graph_nodes: the most nodes a RegisterGraph may carry.
        status_trace_every: while someone watches the status, trace 1 step in this many,
            chosen by a hash of the step id (0: never; ``status.py``).
    """

    def __init__(self, job_name, task_index, connect, config=None, step_ttl=120.0,
                 max_steps=4096, data_dir=None, graph_lease_s=600.0, max_graph_nodes=100_000,
                 status_trace_every=_status.DEFAULT_TRACE_EVERY):
        self.job_name = job_name
        self.task_index = int(task_index)
        self.task = f"/job:{job_name}/replica:0/task:{self.task_index}"
        self.incarnation = secrets.randbits(63) | 1
        self.config = config or SessionConfig()
        self.local_devices = _device.make_local_devices(
            self.config.device_count, job=job_name, task=self.task_index,
            intra_op_threads=self.config.intra_op_parallelism_threads)
        self.device_names = [d.name for d in self.local_devices]
        self._device_set = frozenset(self.device_names)  # every step's rendezvous shares it
        self._state = compiled_run.DeviceState.local(self.local_devices, self.incarnation)
        self.data_directory = None if data_dir is None else DataDirectory(data_dir)
        self.resources = ResourceManager(local=False, data_directory=self.data_directory)
        self._graph_lease_s = float(graph_lease_s)
        self._max_graph_nodes = int(max_graph_nodes)
        self._registrations = trio.CapacityLimiter(1)
        self._abort_marks = collections.OrderedDict()  # AbortStep for steps never seen
        self._connect = connect
        self._channels = {}
        self._graphs = {}
        # session -> when its random generators go: its last graph here expired (an idle
        # session registers again and goes on with them; a vanished client's go a lease later)
        self._idle_sessions = {}
        self._steps = {}
        self.plain_steps = 0  # RunGraphs that ran plain (``worker_step._run_plain``)
        self._tombstones = collections.OrderedDict()
        self._handles = itertools.count(1)
        self.on_shutdown = None  # set by a Server with a token: Shutdown ends its join()
        self._step_ttl = step_ttl
        self._max_steps = max_steps
        self.counters = _Counters()
        self.status = _status.StatusRecorder(status_trace_every)
        self.transport_statistics = None  # set by a Server: () -> its transport's statistics
        self.cluster = None  # set by a Server: its ClusterSpec's jobs, sent in Health

    # -- graphs -----------------------------------------------------------------------
    async def register_graph(self, request):
        options = request.options
        nodes = request.graph.get("node") if isinstance(request.graph, dict) else None
        if isinstance(nodes, list) and len(nodes) > self._max_graph_nodes:
            _fail("RESOURCE_EXHAUSTED", f"RegisterGraph: {len(nodes)} nodes exceed this "
                  f"worker's limit of {self._max_graph_nodes}")
        self._sweep_graphs()
        session = request.session_handle or None
        try:
            if isinstance(nodes, list) and len(nodes) <= INLINE_GRAPH_NODES:
                graph, feeds, fetches, ops, compiled = self._build(request.graph, options, session)
            else:
                graph, feeds, fetches, ops, compiled = await trio.to_thread.run_sync(
                    self._build, request.graph, options, session, limiter=self._registrations)
            await preload(compiled)  # (scipy.fft for an FFT convolution: off the loop)
        except errors.OpError as exc:  # (also a Preload's, naming its node)
            raise _rdv.remote_call_error(exc, f"RegisterGraph: {exc.message}") from None
        except (ValueError, TypeError, KeyError) as exc:
            _fail("INVALID_ARGUMENT",
                  f"RegisterGraph: malformed graph: {type(exc).__name__}: {exc}")
        handle = f"{request.session_handle or 'graph'}/{next(self._handles)}/{secrets.token_hex(4)}"
        peers = dict(options.peers)
        declarations, batchable = self._declarations(graph, options)
        binding = _rdv.RemoteBinding(functools.partial(self._channel, peers=peers), declarations,
                                     batchable, self._count_received, frozenset(options.pushed),
                                     pushed_keys=pushed_recv_keys(graph, set(options.pushed),
                                                                  self._device_set))
        self._graphs[handle] = _WorkerGraph(
            handle, graph, compiled, feeds, list(options.feeds),
            [t.name for t in fetches], binding, peers,
            lease_expires=trio.current_time() + self._graph_lease_s,
            feed_checks=_feed_checks(list(options.feeds), feeds), op_count=len(ops),
            session=session, plain=_plain(graph, compiled))
        if session is not None:
            self.resources.open_session(session)
            self._idle_sessions.pop(session, None)
        self.counters.graphs_registered += 1
        _log.info("%s registered graph %s: %d ops on %s", self.task, handle, len(ops),
                  ", ".join(sorted({op.device for op in ops})) or "no devices")
        return RegisterGraphReply(handle, self.incarnation)

    def _build(self, graph_def, options, session):
        """Import and compile a graph (in a worker thread)."""
        graph, feeds, fetches, targets = self._import(graph_def, options)
        # Every shipped node is a target: a Send's consumer lives on another worker.
        compiled = compiled_run.compile_run(graph, feeds, fetches, targets, self._state,
                                         self._compile_config(options), self.resources,
                                         session)
        return graph, feeds, fetches, targets, compiled

    @property
    def lease_check_period_s(self):
        """How often ``expire_idle_graphs`` looks: the margin past a lease before a drop."""
        return min(max(self._graph_lease_s / 4, LEASE_CHECK_MIN_S), LEASE_CHECK_MAX_S)

    async def expire_idle_graphs(self):
        """Drop graphs whose lease ran out, every ``lease_check_period_s``, until cancelled."""
        while True:
            await trio.sleep(self.lease_check_period_s)
            self._sweep_graphs()

    def _sweep_graphs(self):
        now = trio.current_time()
        for handle, wg in list(self._graphs.items()):
            if not wg.running and now > wg.lease_expires:
                self._drop_graph(handle, keep_until=now + self._graph_lease_s)
                _log.info("%s dropped graph %s: its lease of %g s expired", self.task, handle,
                          self._graph_lease_s)
        for session, until in list(self._idle_sessions.items()):
            if now > until:
                del self._idle_sessions[session]
                self.resources.forget_session(session)

    def _import(self, graph_def, options):
        graph = Graph()
        with graph.as_default():
            import_graph_def(graph_def, name="")
        feeds = [graph.get_tensor_by_name(name) for name in options.feeds]
        fetches = [graph.get_tensor_by_name(name) for name in options.fetches]
        fed_ops = {t.op for t in feeds}
        targets = [op for op in graph.get_operations() if op not in fed_ops]
        for op in targets:
            if op.device and _rdv.task_of_device(op.device) != self.task:
                raise ValueError(f"op {op.name!r} is placed on {op.device}, not on {self.task}")
        return graph, feeds, fetches, targets

    def _compile_config(self, options):
        settings = options.config
        return dataclasses.replace(
            self.config, allow_soft_placement=settings.allow_soft_placement,
            compress_transfers=settings.compress_transfers or None)

    def _declarations(self, graph, options):
        declarations = {}
        for op in graph.get_operations():
            if op.type == "_Recv" and op.get_attr("send_device") not in self.device_names:
                declarations[op.get_attr("tensor_name")] = _rdv.RecvDeclaration(
                    op.name, op.get_attr("dtype"), op.get_attr("shape"),
                    op.attrs.get("compress") or "")
        return declarations, dict(options.batchable)

    async def deregister_graph(self, request):
        if self._drop_graph(request.graph_handle) is None:
            _fail("NOT_FOUND", f"no graph with handle {request.graph_handle!r} on {self.task}")

    def _drop_graph(self, handle, keep_until=None):
        """Forget the graph ``handle`` names (None if none): its session's random generators
        go with the session's last graph here, as TF1's worker drops a session's kernels;
        where that graph's lease expired (``keep_until``), only at that time, so that a session
        idle past its lease goes on with its sequence when its master registers again.
        The codec's templates of its frames go too (``repeat_frames.forget_graph``)."""
        wg = self._graphs.pop(handle, None)
        if wg is not None:
            _forget_frames(handle)
        if wg is not None and wg.session is not None:
            kept = self.resources.release_session(wg.session, keep=keep_until is not None)
            if kept and not self.resources.session_graphs(wg.session):
                self._idle_sessions[wg.session] = keep_until
        return wg

    # -- steps ------------------------------------------------------------------------
    def _channel(self, task, peers):
        address = peers.get(task)
        if address is None:
            raise errors.UnavailableError(None, None, f"{self.task} has no address for {task}")
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._connect(address)
            if hasattr(channel, "one_way"):  # pushes one-way (push_acceptance.py)
                channel.one_way = ONE_WAY_RPCS
        return channel

    def _count_received(self, nbytes, peer=None):
        self.counters.bytes_received += nbytes
        if peer is not None:
            self.status.pulled(peer, nbytes)

    async def recv_tensors(self, request):
        keys = list(request.keys)
        if not keys:
            _fail("INVALID_ARGUMENT", "RecvTensors asks for no keys")
        for key in keys:
            try:
                src, incarnation, _, _, _ = _rdv.parse_key(key)
            except ValueError as exc:
                _fail("INVALID_ARGUMENT", str(exc))
            if src not in self.device_names:
                _fail("INVALID_ARGUMENT", f"rendezvous key {key!r} names source device {src}, "
                      f"which is not on {self.task}")
            if incarnation != self.incarnation:
                _fail("ABORTED", f"RecvTensors for {key!r} expects a different device "
                      f"incarnation ({incarnation:x}) than {self.task}'s ({self.incarnation:x}): "
                      "the worker restarted")
        state = self._find_or_create(request.step_id)
        if len(set(keys)) != len(keys):
            _fail("INVALID_ARGUMENT", "RecvTensors names a rendezvous key twice")
        entries = []
        try:
            for key in keys:
                value, is_dead = await state.rendezvous.local.recv(key)
                value = None if is_dead else _host(value)
                entries.append(TensorEntry(key, value, is_dead=is_dead))
        except RuntimeError as exc:  # another RecvTensors already waits on the key
            _fail("ALREADY_EXISTS", f"step {request.step_id} on {self.task}: {exc}")
        except errors.OpError as exc:  # the step failed here: the pulling peer's is derived
            raise _rdv.remote_call_error(exc, derived=True) from None
        self.counters.bytes_sent += sum(e.value.nbytes for e in entries if e.value is not None)
        self._maybe_done(state)
        return RecvTensorsReply(entries)

    async def abort_step(self, request):
        state = self._steps.get(request.step_id)
        error = _rdv.derived(errors.from_code(request.code, request.message))
        if state is None:
            if request.step_id not in self._tombstones:
                self._abort_marks[request.step_id] = "aborted"
                self._abort_marks.move_to_end(request.step_id)
                while len(self._abort_marks) > 4 * self._max_steps:
                    self._abort_marks.popitem(last=False)
            return
        state.rendezvous.abort(error)
        if state.scope is not None:
            state.scope.cancel()
        self._drop(request.step_id, "aborted")

    async def cleanup_step(self, request):
        if request.step_id not in self._steps and request.step_id not in self._tombstones:
            _fail("NOT_FOUND", f"no step {request.step_id} on {self.task}")
        if request.step_id in self._steps:
            self._drop(request.step_id, "cleaned up")

    # -- status -----------------------------------------------------------------------
    async def health(self, request):
        self._sweep_graphs()
        return HealthReply(self.incarnation, self.task, list(self.device_names),
                           self.statistics(), self.cluster)

    async def devices(self):
        return list(self.device_names)

    async def shutdown(self, request):
        """Stop serving once this reply is sent: the job is done (``Server.join`` returns).

        Only a worker that requires a token honours it (``on_shutdown`` is set by the Server
        then): on a token-less worker anyone who can connect could end the task.
        """
        if request.task and request.task != self.task:
            _fail("INVALID_ARGUMENT", f"Shutdown for {request.task} reached {self.task}")
        if self.on_shutdown is None:
            _fail("FAILED_PRECONDITION", f"{self.task} serves without a token, so it refuses "
                  "Shutdown; start it with ASYNCFLOW_TOKEN set")
        _log.info("%s shutting down: %s", self.task, request.reason or "Shutdown requested")
        self.on_shutdown()

    async def reset(self, request):
        containers = request.containers
        for step_id, state in list(self._steps.items()):
            state.rendezvous.abort(errors.AbortedError(
                None, None, f"step {step_id} was aborted by a Reset of {self.task}"))
            if state.scope is not None:
                state.scope.cancel()
            self._drop(step_id, "aborted by a reset")
        dropped, self._graphs = len(self._graphs), {}
        self.resources.release_all_sessions()
        self._idle_sessions.clear()
        self.resources.reset(containers)
        _log.info("%s reset containers %s and dropped %d graphs", self.task,
                  "all" if containers is None else containers, dropped)

    def statistics(self):
        """A WorkerStatistics snapshot (Health's ``stats``)."""
        return WorkerStatistics(
            steps_run=self.counters.steps_run, steps_failed=self.counters.steps_failed,
            steps_in_flight=sum(s.running for s in self._steps.values()),
            steps_held=len(self._steps), graphs=len(self._graphs),
            bytes_sent=self.counters.bytes_sent, bytes_received=self.counters.bytes_received,
            pull_requests=self.counters.pull_requests,
            tensors_pulled=self.counters.tensors_pulled, max_rss_mib=_status.max_rss_mib(),
            graph_lease_s=float(self._graph_lease_s), push_requests=self.counters.push_requests,
            tensors_pushed=self.counters.tensors_pushed)

    async def status_json(self):
        """This task's live status as JSON (``GET /v1/status``; ``status.py`` says what)."""
        self.status.viewed()
        self._sweep_graphs()
        return _status.task_status_json(self, self._graphs.values())

    async def metrics_text(self):
        self._sweep_graphs()
        stats = self.statistics()
        rows = [("asyncflow_worker_steps_total", "counter", "Steps run to completion",
                 stats.steps_run),
                ("asyncflow_worker_steps_failed_total", "counter", "Steps that failed",
                 stats.steps_failed),
                ("asyncflow_worker_steps_in_flight", "gauge", "Steps running now",
                 stats.steps_in_flight),
                ("asyncflow_worker_registered_graphs", "gauge", "Registered graphs",
                 stats.graphs),
                ("asyncflow_worker_tensor_bytes_sent_total", "counter",
                 "Tensor bytes sent (fetches and pulls)", stats.bytes_sent),
                ("asyncflow_worker_tensor_bytes_received_total", "counter",
                 "Tensor bytes received (feeds and pulls)", stats.bytes_received)]
        lines = []
        for name, kind, text, value in rows:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}",
                      f'{name}{{task="{self.task}"}} {value}']
        return "\n".join(lines) + "\n"

    async def aclose(self):
        """Close the channels to peers."""
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.aclose()
