"""A task's live status, and the cluster view gathered from every task's.

Theory of operation
-------------------
A :class:`StatusRecorder` sits in each ``WorkerService`` and is fed by it: every finished or
failed RunGraph (wall-clock end, duration), the bytes pulled from each peer, and the last
errors with the op they blame. It keeps only bounded state, so it can stay on in production:

* **Rates.** Steps fall into buckets of :data:`BUCKET_S` seconds; a bucket holds a count, a
  failure count and a histogram of latencies over log-spaced bins (:data:`BINS_PER_DECADE` per
  decade from 10 us), so p50/p99 of a bucket or of a minute come from summed histograms, never
  from a list of every step. :data:`WINDOW_BUCKETS` buckets (five minutes) are kept.
* **Timelines.** While someone looks (a status request within :data:`VIEW_TTL_S`), a step is
  traced when a hash of its id is a multiple of ``trace_every`` (:func:`sampled`; the master's
  ids are random and odd, local ones may count up: the hash mixes the bits of both). Step ids
  are the master's, so every task of the cluster traces the same steps, and the cluster view can draw one step across tasks with its
  Send->Recv edges. Nobody looking: nothing is traced. The last :data:`KEPT_TRACES` traces are
  kept, each cut at :data:`MAX_TRACE_NODES` nodes, with times converted from the executor's
  ``perf_counter`` microseconds to wall-clock microseconds (comparable across processes as far
  as their clocks agree).
* **Errors.** The last :data:`KEPT_ERRORS` step failures: time, step, canonical code, the op
  to blame, the first line of the message, and whether it only followed from another failure.
* **Peers.** Bytes and requests per peer task that sent this task tensors (its pulls' replies
  and the pushes it accepted). Only tasks of the cluster reach it: a pull goes to a peer the
  master named, and a push is accepted only from a task of the cluster
  (``push_acceptance.py``). Still, the table holds rows for at most :data:`MAX_PEERS` tasks;
  any further task is counted in one ``OTHER_PEERS`` row, so no sender can grow it.

:func:`gather_cluster` asks every task of a ClusterSpec for its status (``Channel.status_json``,
which is ``GET /v1/status`` over HTTP), concurrently and each within a deadline, and returns
one JSON-ready dict: the tasks (up or down, last heard from), and the most recent step traced
on the most tasks, merged into one timeline. A :class:`ClusterWatcher` remembers when each
task last answered (the "last heartbeat" of the page) and caches a view for a moment, so many
viewers cost one gather.

This module knows the worker service's public state and transports' channels, never HTTP.
"""
from __future__ import annotations

import collections
import json
import os
import math
import time

import trio

from asyncflow.cluster.spec import ClusterSpec, task_name
from transports.messages import RemoteCallError
from transports.service import TransportError
from transports.wire import RemoteProtocolError

BUCKET_S = 5.0
WINDOW_BUCKETS = 60  # five minutes of buckets
BINS_PER_DECADE = 10
_FIRST_BIN_S = 1e-5  # the lowest latency bin starts at 10 us
_BINS = 8 * BINS_PER_DECADE  # up to 1000 s
VIEW_TTL_S = 5.0  # the page polls every 2 s
KEPT_TRACES = 3
MAX_TRACE_NODES = 2000
KEPT_ERRORS = 20
MAX_PEERS = 1024  # rows of the peer table; further tasks share the OTHER_PEERS row
OTHER_PEERS = "(other tasks)"
DEFAULT_TRACE_EVERY = 8
_SEND_SUFFIX, _RECV_SUFFIX = "/_Send", "/_Recv"


def sampled(step_id, every):
    """Whether step ``step_id`` is one of the 1-in-``every`` steps traced (Fibonacci hashing:
    one multiply, so every bit of the id counts)."""
    return (((step_id * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 40) % every == 0


def _bin(seconds):
    if seconds <= _FIRST_BIN_S:
        return 0
    return min(_BINS - 1, int(math.log10(seconds / _FIRST_BIN_S) * BINS_PER_DECADE))


def _bin_upper_s(index):
    return _FIRST_BIN_S * 10 ** ((index + 1) / BINS_PER_DECADE)


def percentile(histogram, fraction):
    """The upper edge (seconds) of the bin holding the ``fraction`` quantile; None if empty."""
    total = sum(histogram)
    if total == 0:
        return None
    rank = fraction * total
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return _bin_upper_s(index)
    return _bin_upper_s(len(histogram) - 1)


class _Bucket:
    __slots__ = ("start", "steps", "failed", "histogram")

    def __init__(self, start):
        self.start = start
        self.steps = 0
        self.failed = 0
        self.histogram = [0] * _BINS


class StepRates:
    """Steps per bucket of :data:`BUCKET_S` seconds with latency histograms (bounded)."""

    def __init__(self):
        self._buckets = collections.deque(maxlen=WINDOW_BUCKETS)

    def record(self, end_wall, duration_s, failed=False):
        """Count a step that ended at ``end_wall`` (time.time()) after ``duration_s``."""
        start = math.floor(end_wall / BUCKET_S) * BUCKET_S
        if not self._buckets or self._buckets[-1].start < start:
            self._buckets.append(_Bucket(start))
        bucket = self._buckets[-1]
        if failed:
            bucket.failed += 1
            return
        bucket.steps += 1
        bucket.histogram[_bin(duration_s)] += 1

    def series(self, now):
        """Per bucket of the last five minutes: its start, steps/s, failures, p50 and p99 (s)."""
        floor = now - WINDOW_BUCKETS * BUCKET_S
        return [{"t": b.start, "steps_per_s": b.steps / BUCKET_S, "failed": b.failed,
                 "p50_s": percentile(b.histogram, 0.5), "p99_s": percentile(b.histogram, 0.99)}
                for b in self._buckets if b.start >= floor]

    def summary(self, now, window_s=60.0):
        """Steps/s, p50 and p99 over the last ``window_s`` seconds (whole buckets)."""
        histogram, steps, failed = [0] * _BINS, 0, 0
        floor = now - window_s
        for bucket in self._buckets:
            if bucket.start + BUCKET_S > floor:
                steps += bucket.steps
                failed += bucket.failed
                histogram = [a + b for a, b in zip(histogram, bucket.histogram)]
        return {"window_s": window_s, "steps": steps, "failed": failed,
                "steps_per_s": steps / window_s, "p50_s": percentile(histogram, 0.5),
                "p99_s": percentile(histogram, 0.99)}


class StatusRecorder:
    """What one worker records for its status (see the module docstring).

    Args:
        trace_every: while someone looks, trace 1 step in this many (:func:`sampled`; 0:
            never).
    """

    def __init__(self, trace_every=DEFAULT_TRACE_EVERY):
        self.trace_every = int(trace_every)
        self.started = time.time()
        self.rates = StepRates()
        self.traces = collections.deque(maxlen=KEPT_TRACES)
        self.errors = collections.deque(maxlen=KEPT_ERRORS)
        self.peers = {}  # task -> [bytes pulled, pull requests]
        self._viewed_until = -math.inf

    def viewed(self):
        """Someone looked: sample step timelines for the next :data:`VIEW_TTL_S` seconds."""
        self._viewed_until = time.monotonic() + VIEW_TTL_S

    def wants_trace(self, step_id):
        """Whether to trace step ``step_id`` (a few comparisons: called for every RunGraph)."""
        return (self.trace_every > 0 and time.monotonic() < self._viewed_until
                and sampled(step_id, self.trace_every))

    def step_done(self, step_id, duration_s, trace=None, failed=False):
        """Count a RunGraph that just ended; keep its trace (executor NodeStats) if any."""
        self.rates.record(time.time(), duration_s, failed)
        if trace:
            offset_us = time.time_ns() // 1000 - time.perf_counter_ns() // 1000
            nodes = [[s.node_name, s.op_type, s.device, int(s.start_us) + offset_us,
                      int(s.end_us) + offset_us] for s in trace[:MAX_TRACE_NODES]]
            self.traces.append({"step_id": step_id, "nodes": nodes,
                                "truncated": len(trace) > MAX_TRACE_NODES})

    def pulled(self, task, nbytes):
        """Count one RecvTensors answer (or PushTensors) of ``nbytes`` tensor bytes from peer
        ``task`` (past :data:`MAX_PEERS` tasks, in the ``OTHER_PEERS`` row)."""
        entry = self.peers.get(task)
        if entry is None:
            if len(self.peers) >= MAX_PEERS:
                task = OTHER_PEERS
            entry = self.peers.setdefault(task, [0, 0])
        entry[0] += nbytes
        entry[1] += 1

    def error(self, step_id, code, op, message, derived):
        """Remember a failed step (its op, canonical code and first message line)."""
        self.errors.append({"time": time.time(), "step_id": str(step_id), "code": code, "op": op,
                            "message": message.splitlines()[0] if message else "",
                            "derived": bool(derived)})

    def snapshot(self):
        """The recorder's part of a task's status, as plain data."""
        now = time.time()
        return {"time": now, "started": self.started, "uptime_s": now - self.started,
                "trace_every": self.trace_every,
                "rates": {"bucket_s": BUCKET_S, "series": self.rates.series(now),
                          "last_minute": self.rates.summary(now)},
                "peers": {task: {"bytes_pulled": n, "pull_requests": k}
                          for task, (n, k) in sorted(self.peers.items())},
                "errors": list(self.errors), "traces": list(self.traces)}


def current_rss_mib():
    """This process's resident memory now (MiB), from /proc; None where there is none."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import resource
    return pages * resource.getpagesize() / (1 << 20)


def max_rss_mib():
    """This process's peak resident memory (MiB); None where ``resource`` is missing."""
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def task_status_json(service, graphs):
    """``service``'s live status as JSON: its recorder's rates and errors, its devices and
    counters, memory and connections, ``graphs`` (its registered graphs) and its queues."""
    now = trio.current_time()
    transport = service.transport_statistics() if service.transport_statistics else None
    status = service.status.snapshot()
    status.update(
        task=service.task, job=service.job_name, index=service.task_index, pid=os.getpid(),
        incarnation=f"{service.incarnation:x}", devices=list(service.device_names),
        stats=service.statistics().as_dict(), rss_mib=current_rss_mib(),
        connections=None if transport is None else transport.connections,
        requests=None if transport is None else transport.requests,
        graphs=[{"handle": wg.handle, "ops": wg.op_count, "runs": wg.runs,
                 "running": wg.running, "lease_left_s": max(0.0, wg.lease_expires - now),
                 "peers": sorted(wg.peers)} for wg in graphs],
        queues=[{"container": container, "name": name, **_queue_row(resource)}
                for container, name, resource in service.resources.items()
                if hasattr(resource, "capacity") and hasattr(resource, "size")])
    return json.dumps(status, default=str)


def _queue_row(queue):
    """A queue's size, capacity and state for the status page."""
    return {"kind": getattr(queue, "kind", type(queue).__name__), "size": queue.size(),
            "capacity": queue.capacity, "closed": bool(getattr(queue, "closed", False))}


# -- the cluster view -------------------------------------------------------------------------

def merge_timeline(statuses):
    """One step's timeline across tasks: the latest step traced on the most tasks.

    Args:
        statuses: task statuses (``task_status`` dicts) of the tasks that answered.

    Returns:
        ``{"step_id", "tasks", "start_us", "devices", "ops", "edges"}`` or None when no task
        has a trace. ``ops`` are ``[device index, name, op type, start, end]`` with times in
        microseconds from ``start_us``; ``edges`` are ``[send op index, recv op index]``.
    """
    seen = collections.defaultdict(list)  # step id -> [(time order, trace)]
    for status in statuses:
        for order, trace in enumerate(status.get("traces") or ()):
            seen[trace["step_id"]].append((order, trace))
    if not seen:
        return None
    step_id = max(seen, key=lambda s: (len(seen[s]), max(o for o, _ in seen[s]),
                                       max(t["nodes"][-1][4] if t["nodes"] else 0
                                           for _, t in seen[s])))
    nodes = [node for _, trace in seen[step_id] for node in trace["nodes"]]
    if not nodes:
        return None
    origin = min(node[3] for node in nodes)
    devices = sorted({node[2] for node in nodes})
    index = {device: i for i, device in enumerate(devices)}
    nodes.sort(key=lambda n: (index[n[2]], n[3], n[0]))
    ops = [[index[d], name, op, start - origin, max(end, start) - origin]
           for name, op, d, start, end in nodes]
    sends = {op[1][:-len(_SEND_SUFFIX)]: i for i, op in enumerate(ops)
             if op[1].endswith(_SEND_SUFFIX)}
    edges = [[sends[op[1][:-len(_RECV_SUFFIX)]], i] for i, op in enumerate(ops)
             if op[1].endswith(_RECV_SUFFIX) and op[1][:-len(_RECV_SUFFIX)] in sends]
    return {"step_id": str(step_id), "tasks": len(seen[step_id]), "start_us": origin,
            "devices": devices, "ops": ops, "edges": edges}


async def _task_view(job, index, address, fetch, timeout):
    name = task_name(job, index)
    row = {"task": name, "job": job, "index": index, "address": address, "up": False}
    try:
        with trio.fail_after(timeout):
            status = json.loads(await fetch())
    except trio.TooSlowError:
        row["error"] = f"no answer within {timeout:g} s"
    except (TransportError, RemoteCallError, RemoteProtocolError) as exc:
        row["error"] = str(exc)
    except ValueError as exc:
        row["error"] = f"a status that is not JSON: {exc}"
    else:
        row.update(up=True, status=status, incarnation=status.get("incarnation"))
    return row


async def gather_cluster(cluster, connect, local=None, timeout=3.0, channels=None):
    """Every task's status, asked concurrently; one JSON-ready dict.

    Args:
        cluster: a ClusterSpec or dict.
        connect: ``connect(address) -> Channel``.
        local: ``(task name, async fn -> JSON str)`` of the calling worker itself, asked
            directly rather than through a channel.
        timeout: seconds each task has to answer.
        channels: a dict ``address -> Channel`` to reuse and fill (the caller closes them);
            None: channels are opened and closed here.

    Returns:
        ``{"time", "tasks": [row per task], "timeline"}``; a row has ``task, job, index,
        address, up`` and either ``status`` (what the task reported) or ``error``.
    """
    spec = ClusterSpec(cluster)
    owned = channels is None
    channels = {} if owned else channels
    rows = [None] * len(list(spec.tasks()))

    async def one(position, job, index, address):
        name = task_name(job, index)
        if local is not None and local[0] == name:
            fetch = local[1]
        else:
            channel = channels.get(address)
            if channel is None:
                channel = channels[address] = connect(address)

            async def fetch():
                return await channel.status_json(timeout=timeout)
        rows[position] = await _task_view(job, index, address, fetch, timeout)

    try:
        async with trio.open_nursery() as nursery:
            for position, (job, index, address) in enumerate(spec.tasks()):
                nursery.start_soon(one, position, job, index, address)
    finally:
        if owned:
            for channel in channels.values():
                with trio.CancelScope(shield=True):
                    await channel.aclose()
    timeline = merge_timeline([row["status"] for row in rows if row["up"]])
    for row in rows:
        if row["up"]:
            row["status"].pop("traces", None)  # merged above; the view does not repeat them
    return {"time": time.time(), "tasks": rows, "timeline": timeline}


class ClusterWatcher:
    """Gathers a cluster's view for pages and commands: caches it ``cache_s`` seconds (one
    gather however many viewers poll), keeps channels open between gathers and remembers
    when each task last answered.

    Args:
        cluster: a ClusterSpec or dict.
        connect: ``connect(address) -> Channel``.
        local: see :func:`gather_cluster`.
        timeout: seconds each task has to answer.
        cache_s: how long a gathered view is served again.
    """

    def __init__(self, cluster, connect, local=None, timeout=3.0, cache_s=1.0):
        self.cluster = ClusterSpec(cluster)
        self._connect, self._local = connect, local
        self._timeout, self._cache_s = timeout, cache_s
        self._channels = {}
        self._last_heard = {}
        self._lock = trio.Lock()
        self._view, self._view_at = None, -math.inf

    async def view(self):
        """The cluster view (a fresh gather at most every ``cache_s`` seconds)."""
        async with self._lock:
            if trio.current_time() - self._view_at < self._cache_s:
                return self._view
            view = await gather_cluster(self.cluster, self._connect, self._local,
                                        self._timeout, self._channels)
            for row in view["tasks"]:
                if row["up"]:
                    self._last_heard[row["task"]] = view["time"]
                row["last_heartbeat"] = self._last_heard.get(row["task"])
            self._view, self._view_at = view, trio.current_time()
            return view

    async def aclose(self):
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.aclose()
