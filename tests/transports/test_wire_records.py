"""The typed fields of the protocol, sans-IO: records (GraphOptions, StepStats, WorkerStatistics)
and ErrorReply's op and derived fields go in as objects and come out as objects; plain maps that
do not fit a record are refused naming the field; defaults stay off the wire."""

from __future__ import annotations

import pickle
import struct

import msgpack
import pytest

from transports import messages, wire
from transports.service import error_reply_for
from transports.wire import (
    MAGIC, Decoder, ErrorReply, GraphConfig, GraphOptions, HealthReply, LocalProtocolError,
    NodeExecStats, RegisterGraph, RemoteCallError, RemoteProtocolError, RunGraphReply, StepStats,
    WorkerStatistics, decode, encode,
)


def frame_of(message) -> bytes:
    return b"".join(bytes(b) for b in encode(message))


def header_of(data: bytes) -> dict:
    (length,) = struct.unpack_from("<I", data, 4)
    start = 16 if data[:4] == wire.CHECKED_MAGIC else 8  # the checked prefix holds two CRC32Cs
    return msgpack.unpackb(data[start:start + length], raw=False)


def raw_frame(kind: str, payload: dict) -> bytes:
    packed = msgpack.packb({"version": 1, "kind": kind, "payload": payload, "tensors": []},
                           use_bin_type=True)
    return MAGIC + struct.pack("<I", len(packed)) + packed


OPTIONS = GraphOptions(feeds=["_feed_0:0", "_feed_2:0"], fetches=["loss:0"],
                       peers={"/job:ps/replica:0/task:0": "127.0.0.1:2222"},
                       batchable={"w/read:0": 0, "b/read:0": 1},
                       config=GraphConfig(allow_soft_placement=False,
                                          compress_transfers="bfloat16"))
RECORDED = [
    RegisterGraph({"node": []}, "s", OPTIONS),
    RunGraphReply([], StepStats([NodeExecStats("a", "Const", "/job:w/task:0/device:CPU:0", 1, 2),
                                 NodeExecStats("b", "_Recv", "/job:w/task:0/device:CPU:0", 2, 9)])),
    HealthReply(5, "/job:w/task:0", ["cpu"], WorkerStatistics(
        steps_run=3, steps_failed=1, graphs=2, bytes_sent=10, max_rss_mib=None,
        graph_lease_s=1.5)),
    ErrorReply("INVALID_ARGUMENT", "inner dimensions differ", op="dense/mm", derived=False),
    ErrorReply("CANCELLED", "step 9 was cancelled", derived=True),
]


@pytest.mark.parametrize("message", RECORDED, ids=lambda m: type(m).__name__)
def test_records_round_trip_whole_and_byte_by_byte(message):
    data = frame_of(message)
    assert decode(data) == message
    decoder = Decoder()
    for i in range(len(data)):
        decoder.receive_data(data[i:i + 1])
    assert decoder.next_event() == message
    decoder.receive_data(b"junk")
    with pytest.raises(RemoteProtocolError):
        decoder.next_event()


def test_decoded_records_are_the_record_types():
    message = decode(frame_of(RECORDED[0]))
    assert type(message.options) is GraphOptions and type(message.options.config) is GraphConfig
    stats = decode(frame_of(RECORDED[1])).step_stats
    assert type(stats) is StepStats and all(type(n) is NodeExecStats for n in stats.nodes)
    health = decode(frame_of(RECORDED[2])).stats
    assert type(health) is WorkerStatistics and health.as_dict()["steps_run"] == 3


def test_fields_at_their_defaults_stay_off_the_wire():
    payload = header_of(frame_of(RegisterGraph({}, "s", GraphOptions(fetches=["y:0"]))))["payload"]
    assert payload == {"graph": {}, "session_handle": "s", "options": {"fetches": ["y:0"]}}
    payload = header_of(frame_of(ErrorReply("NOT_FOUND", "no graph")))["payload"]
    assert payload == {"code": "NOT_FOUND", "message": "no graph"}
    payload = header_of(frame_of(HealthReply(1, "t", [])))["payload"]
    assert payload == {"incarnation": 1, "task": "t", "devices": []}


def test_the_maps_of_the_first_protocol_version_still_decode():
    """What a peer from before the records sent (plain maps, an int lease, no op field)."""
    old_options = {"feeds": ["_feed_0:0"], "fetches": ["y:0"], "peers": {"/job:w/task:1": "h:1"},
                   "batchable": {"t:0": 0},
                   "config": {"allow_soft_placement": True, "compress_transfers": ""}}
    message = decode(raw_frame("register_graph",
                               {"graph": {}, "session_handle": "s", "options": old_options}))
    assert message.options == GraphOptions(["_feed_0:0"], ["y:0"], {"/job:w/task:1": "h:1"},
                                           {"t:0": 0})
    health = decode(raw_frame("health_reply", {"incarnation": 1, "task": "t", "devices": [],
                                               "stats": {"graphs": 1, "graph_lease_s": 600}}))
    assert health.stats.graph_lease_s == 600.0 and type(health.stats.graph_lease_s) is float
    stats = {"nodes": [{"node_name": "a", "op_type": "Add", "device": "d", "start_us": 1,
                        "end_us": 4}]}
    reply = decode(raw_frame("run_graph_reply", {"step_stats": stats}))
    assert reply.step_stats == StepStats([NodeExecStats("a", "Add", "d", 1, 4)])
    assert decode(raw_frame("error_reply", {"code": "ABORTED", "message": "x"})) == ErrorReply(
        "ABORTED", "x", op="", derived=False)


GARBAGE = [
    ("register_graph", {"graph": {}, "session_handle": "s", "options": ["feeds"]},
     r"register_graph.options must be a map of GraphOptions fields"),
    ("register_graph", {"graph": {}, "session_handle": "s", "options": {"peers": {"t": 1}}},
     r"register_graph.options.peers must be dict\[str, str\], got \{'t': 1\}"),
    ("register_graph", {"graph": {}, "session_handle": "s", "options": {"feed": []}},
     r"register_graph.options: unknown fields \['feed'\]"),
    ("register_graph", {"graph": {}, "session_handle": "s",
                        "options": {"batchable": {"t:0": True}}},
     r"register_graph.options.batchable must be dict\[str, int\]"),
    ("register_graph", {"graph": {}, "session_handle": "s",
                        "options": {"batchable": {"t:0": -1}}},
     r"register_graph.options: .*levels must be >= 0; 't:0' has -1"),
    ("register_graph", {"graph": {}, "session_handle": "s", "options": {"feeds": ["a", "a"]}},
     r"register_graph.options: .*feeds names a tensor twice"),
    ("register_graph", {"graph": {}, "session_handle": "s",
                        "options": {"config": {"allow_soft_placement": 1}}},
     r"register_graph.options.config.allow_soft_placement must be bool, got 1"),
    ("run_graph_reply", {"step_stats": {"nodes": [{"node_name": "a"}]}},
     r"run_graph_reply.step_stats.nodes.0: unknown fields \[\], missing fields \['device', "
     r"'end_us', 'op_type', 'start_us'\]"),
    ("run_graph_reply", {"step_stats": {"nodes": {"a": 1}}},
     r"run_graph_reply.step_stats.nodes must be list\[NodeExecStats\]"),
    ("health_reply", {"incarnation": 1, "task": "t", "devices": [], "stats": {"graphs": "2"}},
     r"health_reply.stats.graphs must be int, got '2'"),
    ("health_reply", {"incarnation": 1, "task": "t", "devices": [],
                      "stats": {"max_rss_mib": True}},
     r"health_reply.stats.max_rss_mib must be float \| None, got True"),
    ("error_reply", {"code": "ABORTED", "message": "x", "op": 7},
     r"error_reply.op must be str, got 7"),
    ("error_reply", {"code": "ABORTED", "message": "x", "derived": "yes"},
     r"error_reply.derived must be bool, got 'yes'"),
]


@pytest.mark.parametrize("kind, payload, match", GARBAGE)
def test_garbage_in_a_typed_field_is_refused_naming_the_field(kind, payload, match):
    with pytest.raises(RemoteProtocolError, match=match):
        decode(raw_frame(kind, payload))


@pytest.mark.parametrize("message, match", [
    (RegisterGraph({}, "s", {"feeds": []}), r"RegisterGraph.options must be GraphOptions"),
    (RegisterGraph({}, "s", GraphOptions(peers={"t": None})),
     r"RegisterGraph.options.peers must be dict\[str, str\]"),
    (RunGraphReply([], {"nodes": []}), r"RunGraphReply.step_stats must be StepStats, got"),
    (RunGraphReply([], StepStats([NodeExecStats("a", "Add", "d", 1.5, 2)])),
     r"RunGraphReply.step_stats.nodes.0.start_us must be int, got 1.5"),
    (HealthReply(1, "t", [], {"graphs": 1}), r"HealthReply.stats must be WorkerStatistics"),
    (ErrorReply("ABORTED", "x", op=None), r"ErrorReply.op must be str, got None"),
])
def test_encode_refuses_a_typed_field_of_the_wrong_type(message, match):
    with pytest.raises(LocalProtocolError, match=match):
        encode(message)


def test_records_check_their_own_invariants():
    with pytest.raises(ValueError, match="levels must be >= 0; 'x' has -2"):
        GraphOptions(batchable={"x": -2})
    with pytest.raises(ValueError, match="feeds names a tensor twice"):
        GraphOptions(feeds=["a:0", "a:0"])


def test_remote_call_errors_and_error_replies_keep_op_and_derived():
    error = RemoteCallError("INVALID_ARGUMENT", "bad shape", op="dense/mm")
    reply = error_reply_for(error)
    assert reply == ErrorReply("INVALID_ARGUMENT", "bad shape", op="dense/mm", derived=False)
    back = decode(frame_of(reply)).error()
    assert (back.code, back.message, back.op, back.derived) == (
        "INVALID_ARGUMENT", "bad shape", "dense/mm", False)
    group = BaseExceptionGroup("one", [RemoteCallError("ABORTED", "peer", derived=True)])
    assert error_reply_for(group) == ErrorReply("ABORTED", "peer", derived=True)
    assert str(back) == "INVALID_ARGUMENT: bad shape"  # the text names no op: that is a field
    copy = pickle.loads(pickle.dumps(RemoteCallError("ABORTED", "peer", op="r", derived=True)))
    assert (copy.code, copy.message, copy.op, copy.derived) == ("ABORTED", "peer", "r", True)


def test_wire_module_exports_the_records():
    for record in messages.RECORD_TYPES:
        assert record.__name__ in wire.__all__ and getattr(wire, record.__name__) is record
        assert record not in messages.MESSAGE_TYPES.values()  # records travel inside messages
