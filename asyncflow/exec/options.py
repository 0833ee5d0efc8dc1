"""Plain configuration records: SessionConfig, RunOptions, RunMetadata and its NodeStats."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class SessionConfig:
    """How a session sets up devices and runs steps (TF1's ConfigProto, flattened).

    Attributes:
        device_count: logical devices per kind in this process, e.g. ``{"CPU": 2}``.
        allow_soft_placement: fall back to an available device when a request cannot be met
            (off by default, as in TF1: a mistyped device name is an error, not a silent move).
        log_device_placement: print each op's device when a run is compiled.
        inter_op_parallelism_threads: worker threads per device for large kernels (0: cores).
        intra_op_parallelism_threads: threads one large kernel (Conv2D and its gradients,
            pools, MatMul) splits its work over, per CPU device (0: the device's share of the
            cores; 1: no splitting). See ``exec/intra_op.py``.
        operation_timeout_in_ms: default deadline of every run (0: none).
        compress_transfers: send float32 across devices as bfloat16 (the paper's lossy
            transfer); ``"truncate"`` (the paper) or ``"round"`` (nearest even), or None.
        connect_timeout_s: deadline of each connection attempt to a worker.
        health_check_interval_s: how often the master checks each worker.
        worker_dead_after_s: a worker silent this long is declared dead.
        optimize_graph: run CSE and constant folding when a run is compiled.
        compile_loops: run each simple ``while_loop`` frame with its compiled straight-line
            loop (chosen when the run is compiled); off, every loop takes the general frame
            path (the same results; for debugging and differential tests).
    """

    device_count: dict = dataclasses.field(default_factory=dict)
    allow_soft_placement: bool = False
    log_device_placement: bool = False
    inter_op_parallelism_threads: int = 0
    intra_op_parallelism_threads: int = 0
    operation_timeout_in_ms: int = 0
    compress_transfers: str | None = None
    connect_timeout_s: float = 5.0
    health_check_interval_s: float = 2.0
    worker_dead_after_s: float = 10.0
    optimize_graph: bool = True
    compile_loops: bool = True


ConfigProto = SessionConfig


class RunOptions:
    """Per-run options: ``RunOptions(timeout_in_ms=..., trace_level=RunOptions.FULL_TRACE)``."""

    NO_TRACE = 0
    SOFTWARE_TRACE = 1
    HARDWARE_TRACE = 2
    FULL_TRACE = 3

    def __init__(self, timeout_in_ms=0, trace_level=NO_TRACE):
        self.timeout_in_ms = int(timeout_in_ms or 0)
        self.trace_level = trace_level

    def __repr__(self):
        return f"RunOptions(timeout_in_ms={self.timeout_in_ms}, trace_level={self.trace_level})"


@dataclasses.dataclass(slots=True)
class NodeStats:
    """One executed node in a traced step (TF1's NodeExecStats), a record of
    ``RunMetadata.step_stats``; ``waited``: the kernel could not finish inline (it waited or
    was offloaded)."""

    node_name: str
    op_type: str
    device: str
    start_us: int
    end_us: int
    timeline_label: str = ""
    waited: bool = False


class RunMetadata:
    """Receives ``step_stats`` (one ``NodeStats`` per executed node) when a run is traced."""

    def __init__(self):
        self.step_stats = []
        self.partition_graphs = []

    def clear(self):
        self.step_stats = []
        self.partition_graphs = []
