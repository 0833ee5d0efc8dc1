"""A small fake worker service and sample arrays shared by the transport tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import trio

from transports import wire
from transports.wire import (
    Ack, HealthReply, NodeExecStats, RecvTensorsReply, RegisterGraphReply, RemoteCallError,
    RunGraphReply, Status, StepStats, TensorEntry, WorkerStatistics,
)


class _Step:
    def __init__(self) -> None:
        self.tensors: dict[str, TensorEntry] = {}
        self.changed = trio.Event()
        self.aborted: Status | None = None


class FakeWorker:
    """Just enough of a worker: graphs by handle, a per-step rendezvous, and call records.

    ``run_graph`` publishes its feeds into the step's rendezvous (it plays the producer) and
    returns the feeds named in ``fetch_keys``; a graph ``{"fail": msg}`` raises ValueError(msg);
    ``recv_tensors`` waits until every key was published or the step is aborted.
    """

    def __init__(self) -> None:
        self.graphs: dict[str, dict] = {}
        self.steps: dict[int, _Step] = {}
        self.calls: list[str] = []
        self.resets: list[list[str] | None] = []
        self.waiting = 0  # recv_tensors calls currently waiting
        self.waiter_arrived = trio.Event()
        self.recv_cancelled = trio.Event()
        self.received: list[np.ndarray] = []  # every feed array the handler was given

    def _step(self, step_id: int) -> _Step:
        return self.steps.setdefault(step_id, _Step())

    async def register_graph(self, request: wire.RegisterGraph) -> RegisterGraphReply:
        self.calls.append("register_graph")
        if "nodes" not in request.graph and "fail" not in request.graph:
            raise RemoteCallError("INVALID_ARGUMENT", "graph has no 'nodes'")
        handle = f"graph/{len(self.graphs)}"
        self.graphs[handle] = request.graph
        return RegisterGraphReply(handle)

    async def deregister_graph(self, request: wire.DeregisterGraph) -> None:
        self.calls.append("deregister_graph")
        if self.graphs.pop(request.graph_handle, None) is None:
            raise RemoteCallError("NOT_FOUND", f"no graph {request.graph_handle!r}")

    async def run_graph(self, request: wire.RunGraph) -> RunGraphReply:
        self.calls.append("run_graph")
        graph = self.graphs.get(request.graph_handle)
        if graph is None:
            raise RemoteCallError("NOT_FOUND", f"no graph {request.graph_handle!r}")
        if "fail" in graph:
            raise ValueError(graph["fail"])
        step = self._step(request.step_id)
        for entry in request.feeds:
            if entry.value is not None:
                self.received.append(entry.value)
            step.tensors[entry.key] = entry
        step.changed.set()
        step.changed = trio.Event()
        feeds = {entry.key: entry for entry in request.feeds}
        timings = [NodeExecStats(f"node{i}", "Fake", "cpu", i, i + 1)
                   for i in range(len(graph.get("nodes", [])))]
        return RunGraphReply([feeds[key] for key in request.fetch_keys], StepStats(timings))

    async def recv_tensors(self, request: wire.RecvTensors) -> RecvTensorsReply:
        self.calls.append("recv_tensors")
        step = self._step(request.step_id)
        self.waiting += 1
        self.waiter_arrived.set()
        try:
            while not all(key in step.tensors for key in request.keys):
                if step.aborted is not None:
                    raise RemoteCallError(step.aborted.code, step.aborted.message)
                await step.changed.wait()
        except trio.Cancelled:
            self.recv_cancelled.set()
            raise
        finally:
            self.waiting -= 1
        return RecvTensorsReply([step.tensors[key] for key in request.keys])

    async def abort_step(self, request: wire.AbortStep) -> None:
        self.calls.append("abort_step")
        step = self._step(request.step_id)
        step.aborted = Status(request.code, request.message)
        step.changed.set()

    async def cleanup_step(self, request: wire.CleanupStep) -> None:
        self.calls.append("cleanup_step")
        self.steps.pop(request.step_id, None)

    async def health(self, request: wire.Health) -> HealthReply:
        self.calls.append("health")
        return HealthReply(incarnation=7, task="/job:worker/task:0", devices=await self.devices(),
                           stats=WorkerStatistics(graphs=len(self.graphs),
                                                  steps_held=len(self.steps)))

    async def reset(self, request: wire.Reset) -> None:
        self.calls.append("reset")
        self.resets.append(request.containers)

    async def devices(self) -> list[str]:
        return ["/job:worker/task:0/device:CPU:0"]

    async def metrics_text(self) -> str:
        return "# TYPE fake_calls_total counter\nfake_calls_total %d\n" % len(self.calls)

    async def status_json(self) -> str:
        return '{"calls": %d, "text": "\u00e9t\u00e9"}' % len(self.calls)


class WrongReplyWorker(FakeWorker):
    """Returns Ack where a HealthReply is due (a handler bug the transport must report)."""

    async def health(self, request: wire.Health) -> Ack:  # type: ignore[override]
        return Ack()


def sample_arrays() -> dict[str, np.ndarray]:
    """One array per wire dtype and layout case, keyed by a readable name."""
    rng = np.random.default_rng(0)
    arrays = {name: (rng.standard_normal((3, 5)) * 100).astype(dtype)
              for name, dtype in wire.WIRE_DTYPES.items() if name != "bool"}
    arrays["bool"] = rng.standard_normal((4, 2)) > 0
    arrays["bfloat16"] = np.array([[1.5, -2.25], [3e38, np.nan]], dtype=ml_dtypes.bfloat16)
    arrays["string"] = np.array([[b"a", b""], [b"\x00\xff", b"rendezvous;key"]], dtype=object)
    arrays["scalar"] = np.array(2.5, dtype=np.float64)
    arrays["scalar_string"] = np.array(b"only", dtype=object)
    arrays["empty"] = np.zeros((0, 4), dtype=np.int32)
    arrays["non_contiguous"] = np.arange(48, dtype=np.float32).reshape(6, 8)[::2, 1::3]
    arrays["big_endian"] = np.arange(6, dtype=">i8").reshape(2, 3)
    arrays["large"] = rng.standard_normal(70_000).astype(np.float32)  # > one 256 KiB slice
    return arrays
