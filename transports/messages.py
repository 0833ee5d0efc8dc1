"""The worker service's messages: frozen dataclasses with explicit, typed fields.

Each class is one message ``kind`` on the wire (see :data:`MESSAGE_TYPES`); :mod:`transports.wire`
derives the payload schema from the annotations here, so a field's annotation *is* its wire
contract. Plain fields may hold only msgpack-native values (dict/list/str/int/float/bool/None/
bytes); tensors travel in the one ``list[TensorEntry]`` field a message may have. asyncflow
converts its graph partitions and step state into these plain structures and back; nothing here
knows about asyncflow.

Request/reply pairs (the handler method in :mod:`transports.service` is named after the request):

====================  ======================  ===========================================
request               reply                   meaning
====================  ======================  ===========================================
RegisterGraph         RegisterGraphReply      install a graph partition, get its handle
DeregisterGraph       Ack                     forget a partition
RunGraph              RunGraphReply           run a partition for one step
RecvTensors           RecvTensorsReply        receiver-initiated rendezvous fetch
PushTensors           Ack                     sender-initiated: a step's tensors, deposited
AbortStep             Ack                     fail a step everywhere, wake its waiters
CleanupStep           Ack                     drop a finished step's state
Health                HealthReply             liveness, incarnation, devices, stats
Reset                 Ack                     clear resource containers
Shutdown              Ack                     end the worker process (the job is done)
(devices)             DevicesReply            device names of the worker
====================  ======================  ===========================================

Any request may instead be answered by :class:`ErrorReply`, which the client raises as
:class:`RemoteCallError`. What a caller acts on travels as fields, never inside a message text:
the op to blame (``op``) and whether the failure only echoes another one (``derived``).

Besides messages, a few *records* (frozen dataclasses that are not in :data:`MESSAGE_TYPES`)
type the structured fields: :class:`GraphOptions` (RegisterGraph), :class:`StepStats` of
:class:`NodeExecStats` (RunGraphReply) and :class:`WorkerStatistics` (HealthReply). On the wire
a record is a map of its fields, checked against its annotations as a message's payload is.

Ownership: arrays in a message belong to the message until it has been sent; a sender must not
modify them meanwhile. Decoded messages always hold freshly allocated arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

__all__ = [
    "CANONICAL_CODES", "MESSAGE_TYPES", "Ack", "AbortStep", "CleanupStep", "DeregisterGraph",
    "DevicesReply", "ErrorReply", "GraphConfig", "GraphOptions", "Health", "HealthReply",
    "Message", "NodeExecStats", "PushTensors", "RECORD_TYPES", "RecvTensors", "RecvTensorsReply",
    "RegisterGraph",
    "RegisterGraphReply", "RemoteCallError", "Reset", "RunGraph", "RunGraphReply", "Shutdown",
    "Status", "StepStats", "TensorEntry", "WorkerStatistics",
]

# TensorFlow's canonical status codes (without OK), by name.
CANONICAL_CODES: Final = frozenset({
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
})


def _check_code(owner: str, code: str) -> None:
    if code not in CANONICAL_CODES:
        raise ValueError(f"{owner}: {code!r} is not a canonical status code name "
                         f"({', '.join(sorted(CANONICAL_CODES))})")


class RemoteCallError(Exception):
    """A call failed on the remote side with a canonical status code.

    Handlers raise it to answer with a specific code; clients receive it for every ErrorReply
    (:meth:`ErrorReply.error`), with the reply's fields.

    Args:
        code: a name from :data:`CANONICAL_CODES`, e.g. ``"NOT_FOUND"``.
        message: what went wrong, for people.
        op: the name of the op to blame ("" when no op is).
        derived: the failure only follows from another one (e.g. a peer's abort), so the
            caller should prefer any error that is not derived as the root cause.

    Raises:
        ValueError: ``code`` is not a canonical code name.
    """

    def __init__(self, code: str, message: str, *, op: str = "", derived: bool = False) -> None:
        _check_code("RemoteCallError", code)
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.op = op
        self.derived = derived

    def reply(self) -> ErrorReply:
        """The ErrorReply that carries this error, every field kept."""
        return ErrorReply(self.code, self.message, self.op, self.derived)

    def __reduce__(self) -> tuple:  # the fields, not the formatted text (pickle, copy)
        return (type(self), (self.code, self.message), {"op": self.op, "derived": self.derived})


@dataclass(frozen=True, slots=True)
class Status:
    """An error attached to one tensor (e.g. its rendezvous was aborted)."""

    code: str
    message: str

    def __post_init__(self) -> None:
        _check_code("Status", self.code)


@dataclass(frozen=True, slots=True, eq=False)
class TensorEntry:
    """A named tensor: a rendezvous key or a feed/fetch name with its value.

    ``value`` is a numpy array (an object array of bytes for strings) or None when there is no
    value (e.g. a dead tensor, or an entry that only reports ``error``). Equality is by key, flags,
    dtype (byte order aside), shape and *bitwise* contents (a NaN equals itself), as round trips need.
    """

    key: str
    value: np.ndarray | None
    is_dead: bool = False
    error: Status | None = None

    __hash__ = None  # arrays are mutable

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorEntry):
            return NotImplemented
        return ((self.key, self.is_dead, self.error) == (other.key, other.is_dead, other.error)
                and _same_array(self.value, other.value))


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    a, b = _native(a), _native(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return a.tolist() == b.tolist()
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _native(a: np.ndarray) -> np.ndarray:
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


@dataclass(frozen=True, slots=True)
class GraphConfig:
    """Session settings a worker compiles a partition with.

    ``compress_transfers``: the lossy wire format of float32 transfers ("" for none).
    """

    allow_soft_placement: bool = True
    compress_transfers: str = ""


@dataclass(frozen=True, slots=True)
class GraphOptions:
    """How a worker runs a partition: RegisterGraph's ``options``.

    Attributes:
        feeds: the tensor names a RunGraph feeds, in the order of its ``feeds``.
        fetches: the tensor names a RunGraph fetches, in the order of its ``fetch_keys``.
        peers: task name -> ``host:port`` of every task the partition pulls from.
        batchable: tensor name -> level (>= 0) of the transfers whose pulls may share a request.
        pushed: the tensor names of this partition's transfers that the producer pushes
            (PushTensors) instead of the consumer pulling them (named to both of their tasks).
        config: the session's settings.

    Raises:
        ValueError: a name is given twice, or a level is negative.
    """

    feeds: list[str] = field(default_factory=list)
    fetches: list[str] = field(default_factory=list)
    peers: dict[str, str] = field(default_factory=dict)
    batchable: dict[str, int] = field(default_factory=dict)
    config: GraphConfig = field(default_factory=GraphConfig)
    pushed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.feeds)) != len(self.feeds):
            raise ValueError(f"GraphOptions.feeds names a tensor twice: {self.feeds!r:.200}")
        negative = [name for name, level in self.batchable.items()
                    if isinstance(level, int) and level < 0]
        if negative:
            raise ValueError(f"GraphOptions.batchable levels must be >= 0; "
                             f"{negative[0]!r:.80} has {self.batchable[negative[0]]}")


@dataclass(frozen=True, slots=True)
class RegisterGraph:
    """Install a graph partition on a worker.

    ``graph`` is asyncflow's plain encoding of the partition; ``options`` says how to run it.
    """

    graph: dict[str, Any]
    session_handle: str
    options: GraphOptions = field(default_factory=GraphOptions)


@dataclass(frozen=True, slots=True)
class RegisterGraphReply:
    """``incarnation``: the registering process's (0: not reported)."""

    graph_handle: str
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class DeregisterGraph:
    graph_handle: str


@dataclass(frozen=True, slots=True)
class RunGraph:
    """Run a registered partition for one step.

    ``timeout_ms`` is the run's own deadline (None: TF1 semantics, no deadline of its own);
    ``trace`` asks for per-node timings in ``RunGraphReply.step_stats``. ``request_id`` (> 0,
    unique per graph handle) lets the worker reject a replayed request.
    """

    graph_handle: str
    step_id: int
    feeds: list[TensorEntry]
    fetch_keys: list[str]
    timeout_ms: int | None = None
    trace: bool = False
    request_id: int = 0


@dataclass(frozen=True, slots=True)
class NodeExecStats:
    """When one node of a traced step ran, in microseconds of the worker's clock."""

    node_name: str
    op_type: str
    device: str
    start_us: int
    end_us: int


@dataclass(frozen=True, slots=True)
class StepStats:
    """The per-node timings of one traced RunGraph, in the order the nodes ran."""

    nodes: list[NodeExecStats] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunGraphReply:
    """The fetched tensors; ``step_stats`` when the RunGraph asked for a trace."""

    tensors: list[TensorEntry]
    step_stats: StepStats | None = None


@dataclass(frozen=True, slots=True)
class RecvTensors:
    """Fetch rendezvous keys of a step; the worker answers once every key has been sent."""

    step_id: int
    keys: list[str]


@dataclass(frozen=True, slots=True)
class RecvTensorsReply:
    """The tensors of a RecvTensors request, in the order of its keys."""

    tensors: list[TensorEntry]


@dataclass(frozen=True, slots=True)
class PushTensors:
    """A producer's rendezvous keys of a step, sent to the consumer's task as soon as they
    exist (the edges ``GraphOptions.pushed`` names); the worker deposits them and answers Ack."""

    step_id: int
    tensors: list[TensorEntry]


@dataclass(frozen=True, slots=True)
class AbortStep:
    step_id: int
    code: str
    message: str

    def __post_init__(self) -> None:
        _check_code("AbortStep", self.code)


@dataclass(frozen=True, slots=True)
class CleanupStep:
    step_id: int


@dataclass(frozen=True, slots=True)
class Health:
    pass


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """A worker's counters (HealthReply's ``stats``), as trio's ``statistics()`` records.

    Attributes:
        steps_run, steps_failed: RunGraphs finished and failed since the process started.
        steps_in_flight: RunGraphs running now; steps_held: steps whose state is kept.
        graphs: partitions registered now.
        bytes_sent, bytes_received: tensor bytes of fetches, feeds and pulls.
        pull_requests, tensors_pulled: RecvTensors sent to peers and the tensors they fetched.
        push_requests, tensors_pushed: PushTensors sent to peers and the tensors they carried.
        max_rss_mib: the process's peak resident memory (None where unknown).
        graph_lease_s: seconds a graph lives past its last use (None: not reported); a master
            registers a graph again once it sat idle for half of it.
    """

    steps_run: int = 0
    steps_failed: int = 0
    steps_in_flight: int = 0
    steps_held: int = 0
    graphs: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    pull_requests: int = 0
    tensors_pulled: int = 0
    max_rss_mib: float | None = None
    graph_lease_s: float | None = None
    push_requests: int = 0
    tensors_pushed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for logs and JSON)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class HealthReply:
    """``incarnation`` changes whenever the worker process restarts; ``cluster`` (when the
    worker knows it) maps each job to ``{task index as text: address}``, so a client given
    one worker's address can be the master of the whole cluster (as a TF1 server target)."""

    incarnation: int
    task: str
    devices: list[str]
    stats: WorkerStatistics = field(default_factory=WorkerStatistics)
    cluster: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Reset:
    """Clear the named resource containers (None: all of them)."""

    containers: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop serving: the job is done. ``task`` (when not empty) must be the worker's own
    task name, so a stale or mistaken address cannot end another task."""

    task: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DevicesReply:
    devices: list[str]


@dataclass(frozen=True, slots=True)
class Ack:
    """The reply to a request whose handler returns nothing."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A failed call: a canonical code name, a message for people, and the fields a caller
    acts on: ``op``, the name of the op to blame ("" for none), and ``derived``, true when the
    failure only follows from another one (a peer's abort), which the caller should prefer."""

    code: str
    message: str
    op: str = ""
    derived: bool = False

    def __post_init__(self) -> None:
        _check_code("ErrorReply", self.code)

    def error(self) -> RemoteCallError:
        """The RemoteCallError a client raises for this reply, every field kept."""
        return RemoteCallError(self.code, self.message, op=self.op, derived=self.derived)


Message = (RegisterGraph | RegisterGraphReply | DeregisterGraph | RunGraph | RunGraphReply
           | RecvTensors | RecvTensorsReply | PushTensors | AbortStep | CleanupStep | Health
           | HealthReply | Reset | Shutdown | DevicesReply | Ack | ErrorReply)

# The records that type structured fields (not messages: they travel inside one).
RECORD_TYPES: Final[tuple[type, ...]] = (
    GraphConfig, GraphOptions, NodeExecStats, StepStats, WorkerStatistics)

# The header's "kind" names: the one table from kind to class (and back) used by the codec.
MESSAGE_TYPES: Final[dict[str, type]] = {
    "register_graph": RegisterGraph,
    "register_graph_reply": RegisterGraphReply,
    "deregister_graph": DeregisterGraph,
    "run_graph": RunGraph,
    "run_graph_reply": RunGraphReply,
    "recv_tensors": RecvTensors,
    "recv_tensors_reply": RecvTensorsReply,
    "push_tensors": PushTensors,
    "abort_step": AbortStep,
    "cleanup_step": CleanupStep,
    "health": Health,
    "health_reply": HealthReply,
    "reset": Reset,
    "shutdown": Shutdown,
    "devices_reply": DevicesReply,
    "ack": Ack,
    "error_reply": ErrorReply,
}
