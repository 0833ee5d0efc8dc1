"""The sans-IO codec: every message whole, byte by byte, via recv_into, with trailing bytes; and
every way a header can be wrong."""

from __future__ import annotations

import struct
import tracemalloc

import ml_dtypes
import msgpack
import numpy as np
import pytest
from transport_fakes import sample_arrays

from transports import wire
from transports.wire import (
    CLOSED, MAGIC, NEED_DATA, Decoder, FrameTooLarge, Limits, LocalProtocolError,
    RemoteProtocolError, Status, TensorEntry, decode, encode,
)

ARRAYS = sample_arrays()


def entries() -> list[TensorEntry]:
    listed = [TensorEntry(f"{name}/0:0;step", value) for name, value in ARRAYS.items()]
    return listed + [TensorEntry("dead", None, is_dead=True),
                     TensorEntry("dead_with_value", np.float32(0), is_dead=True),
                     TensorEntry("failed", None, error=Status("ABORTED", "step 3 aborted"))]


MESSAGES = [
    wire.RegisterGraph({"nodes": [{"name": "a", "op": "Const", "attr": {"value": b"\x00" * 9}}],
                        "versions": {"producer": 1}}, "session-1",
                       wire.GraphOptions(["_feed_0:0"], ["y:0"], {"/job:w/task:1": "h:1"},
                                         {"t:0": 2}, wire.GraphConfig(False, "bfloat16"))),
    wire.RegisterGraph({}, "s", wire.GraphOptions(fetches=["y:0"])),
    wire.RegisterGraphReply("graph/1"),
    wire.DeregisterGraph("graph/1"),
    wire.RunGraph("graph/1", 2**63 - 1, entries(), ["a", "b"], timeout_ms=250, trace=True),
    wire.RunGraph("graph/1", -5, [], []),
    wire.RunGraphReply(entries(), wire.StepStats([
        wire.NodeExecStats("mm", "MatMul", "/job:w/task:0/device:CPU:0", 5, 17)])),
    wire.RunGraphReply([], wire.StepStats()),
    wire.RecvTensors(17, ["/job:a/task:0;send;0:0", "k2"]),
    wire.RecvTensorsReply(entries()),
    wire.AbortStep(17, "CANCELLED", "user pressed ^C"),
    wire.CleanupStep(17),
    wire.Health(),
    wire.HealthReply(123, "/job:ps/task:0", ["CPU:0", "GPU:0"], wire.WorkerStatistics(
        steps_run=4, bytes_sent=2**40, max_rss_mib=812.5, graph_lease_s=600.0)),
    wire.HealthReply(1, "/job:ps/task:0", []),
    wire.Reset(None),
    wire.Reset(["", "shared"]),
    wire.DevicesReply([]),
    wire.Ack(),
    wire.ErrorReply("UNAVAILABLE", "worker restarting"),
    wire.ErrorReply("INVALID_ARGUMENT", "inner dimensions 3 and 4 differ", op="dense/mm"),
    wire.ErrorReply("ABORTED", "step 3 was aborted on /job:w/task:1", derived=True),
]
IDS = [f"{i}-{type(m).__name__}" for i, m in enumerate(MESSAGES)]


def frame_bytes(message) -> bytes:
    return b"".join(encode(message))


def raw_frame(header: dict | bytes, body: bytes = b"") -> bytes:
    packed = header if isinstance(header, bytes) else msgpack.packb(header, use_bin_type=True)
    return MAGIC + struct.pack("<I", len(packed)) + packed + body


def run_graph_header(*descriptors: dict, **payload) -> dict:
    payload = {"graph_handle": "g", "step_id": 1, "fetch_keys": [], **payload}
    return {"version": 1, "kind": "run_graph", "payload": payload, "tensors": list(descriptors)}


def descriptor(**fields) -> dict:
    base = {"key": "t", "dtype": "float32", "shape": [2], "nbytes": 8, "dead": False,
            "error": None, "strings": None}
    return {**base, **fields}


@pytest.mark.parametrize("message", MESSAGES, ids=IDS)
def test_every_message_round_trips_whole(message):
    assert decode(frame_bytes(message)) == message


@pytest.mark.parametrize("message", MESSAGES, ids=IDS)
def test_every_message_round_trips_byte_by_byte(message):
    data = frame_bytes(message)
    decoder = Decoder()
    events = []
    for i in range(len(data)):
        decoder.receive_data(data[i:i + 1])
        if (event := decoder.next_event()) is not NEED_DATA:
            events.append((i, event))
    assert events == [(len(data) - 1, message)]
    decoder.receive_data(b"")
    assert decoder.next_event() is CLOSED


@pytest.mark.parametrize("message", MESSAGES, ids=IDS)
def test_every_message_round_trips_through_recv_into(message):
    data = memoryview(frame_bytes(message))
    decoder, pos, sizes = Decoder(), 0, [1, 7, 64, 4096, 100_000]
    while pos < len(data):
        buffer = decoder.get_buffer()
        n = min(len(buffer), len(data) - pos, sizes[pos % len(sizes)])
        buffer[:n] = data[pos:pos + n]
        decoder.buffer_updated(n)
        pos += n
    assert decoder.next_event() == message


@pytest.mark.parametrize("message", MESSAGES, ids=IDS)
def test_trailing_bytes_are_reported_after_the_message(message):
    decoder = Decoder()
    decoder.receive_data(frame_bytes(message) + b"\x00junk")
    assert decoder.next_event() == message
    with pytest.raises(RemoteProtocolError, match="bad magic"):
        decoder.next_event()
    with pytest.raises(RemoteProtocolError, match="bad magic"):  # sticky
        decoder.next_event()
    with pytest.raises(RemoteProtocolError, match="bytes after the frame"):
        decode(frame_bytes(message) + b"\x00junk")


def test_a_stream_of_frames_yields_each_message_in_order():
    data = b"".join(frame_bytes(m) for m in MESSAGES)
    decoder = Decoder()
    for start in range(0, len(data), 1000):
        decoder.receive_data(data[start:start + 1000])
    decoder.receive_data(b"")
    got = []
    while (event := decoder.next_event()) is not CLOSED:
        got.append(event)
    assert got == MESSAGES
    with pytest.raises(RemoteProtocolError, match="more than one frame"):
        decode(data)


def test_trailing_magic_prefix_is_a_truncated_frame():
    decoder = Decoder()
    decoder.receive_data(frame_bytes(wire.Ack()) + MAGIC[:2])
    assert decoder.next_event() == wire.Ack()
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="ended 2 bytes into a frame"):
        decoder.next_event()


def test_every_truncation_is_rejected():
    data = frame_bytes(wire.RunGraph("g", 1, entries()[:4], []))
    for cut in range(len(data)):
        with pytest.raises(RemoteProtocolError):
            decode(data[:cut])


def test_receive_after_end_of_stream_is_a_local_error():
    decoder = Decoder()
    decoder.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"x")


def test_tensors_start_64_byte_aligned_and_are_not_copied_by_encode():
    arrays = [np.arange(n, dtype=np.float64) for n in (3, 1, 100)]
    buffers = encode(wire.RecvTensorsReply([TensorEntry(str(i), a) for i, a in enumerate(arrays)]))
    offsets, offset = {}, 0
    for buffer in buffers:
        for a in arrays:
            if isinstance(buffer, memoryview) and np.shares_memory(np.asarray(buffer), a):
                offsets[id(a)] = offset
        offset += len(buffer)
    assert len(offsets) == 3 and all(o % wire.ALIGNMENT == 0 for o in offsets.values())


@pytest.mark.parametrize("checksums", [True, False])
def test_a_frame_split_anywhere_in_two_reads_decodes_the_same(checksums):
    """A segment whole in one read (padding, bytes and trailer in one step) and one spread
    over two reads give the same message; damaged padding is refused either way."""
    message = wire.RecvTensorsReply([TensorEntry("a", np.arange(3, dtype=np.float32)),
                                     TensorEntry("b", np.float64(2.5)),
                                     TensorEntry("c", np.ones((2, 2), ml_dtypes.bfloat16))])
    data = b"".join(bytes(b) for b in encode(message, checksums=checksums))
    header_end = (16 if checksums else 8) + struct.unpack_from("<I", data, 4)[0]
    assert header_end % wire.ALIGNMENT  # there is padding before the first tensor
    damaged = bytearray(data)
    damaged[header_end] = 1
    for cut in range(1, len(data)):
        decoder = Decoder()
        decoder.receive_data(data[:cut])
        decoder.receive_data(data[cut:])
        assert decoder.next_event() == message
        decoder = Decoder()
        decoder.receive_data(damaged[:cut])
        decoder.receive_data(damaged[cut:])
        with pytest.raises(RemoteProtocolError, match="padding"):
            decoder.next_event()


def test_contiguous_tensors_of_every_kind_are_sent_from_their_own_memory():
    arrays = [np.asarray(np.float32(1.5)), np.ones((2, 3), ml_dtypes.bfloat16),
              np.arange(4, dtype=np.int64), np.zeros(3, dtype=bool)]
    buffers = encode(wire.RecvTensorsReply([TensorEntry(str(i), a) for i, a in enumerate(arrays)]))
    views = [np.asarray(b) for b in buffers if isinstance(b, memoryview)]
    assert all(any(np.shares_memory(v, a) for v in views) for a in arrays)


def test_decoded_arrays_are_fresh_writable_and_little_endian():
    data = bytearray(frame_bytes(wire.RecvTensorsReply(
        [TensorEntry("x", np.arange(4, dtype=">f4"))])))
    (entry,) = decode(data).tensors
    data[:] = bytes(len(data))  # the decoded array must not alias the input
    assert entry.value.dtype == np.dtype("<f4") and entry.value.flags.writeable
    np.testing.assert_array_equal(entry.value, [0, 1, 2, 3])


def test_tensor_entry_equality_is_bitwise():
    nan = np.array([np.nan, -0.0])
    assert TensorEntry("k", nan) == TensorEntry("k", nan.copy())
    assert TensorEntry("k", nan) != TensorEntry("k", np.array([np.nan, 0.0]))
    assert TensorEntry("k", np.zeros(2, np.float32)) != TensorEntry("k", np.zeros(2))


@pytest.mark.parametrize("message, match", [
    (wire.RunGraph("g", True, [], []), r"RunGraph.step_id must be int"),
    (wire.RecvTensors(1, ("a", "b")), r"RecvTensors.keys must be list\[str\]"),
    (wire.RunGraph("g", 1, [], [], timeout_ms=1.5), r"timeout_ms must be int \| None"),
    (wire.RegisterGraph({"x": np.float32(1)}, "s"), "not plain msgpack"),
    (wire.RegisterGraph({"x": 1 << 70}, "s"), "not plain msgpack"),
    (wire.RunGraph("g", 1, [TensorEntry("c", np.zeros(2, np.complex64))], []),
     "dtype complex64, which the wire does not carry"),
    (wire.RunGraph("g", 1, [TensorEntry("u", np.array(["text"]))], []), "dtype <U4"),
    (wire.RunGraph("g", 1, [TensorEntry("s", np.array([b"ok", "str"], dtype=object))], []),
     "holds a str; only bytes"),
    (wire.RunGraph("g", 1, [TensorEntry("l", [1, 2])], []), "must be a numpy array"),
    (wire.RunGraph("g", 1, ["not an entry"], []), "must be a list of TensorEntry"),
])
def test_encode_refuses_what_the_wire_cannot_carry(message, match):
    with pytest.raises(LocalProtocolError, match=match):
        encode(message)


def test_encode_refuses_unknown_types_and_frames_over_the_limits():
    with pytest.raises(LocalProtocolError, match="not a wire message type"):
        encode(object())
    small = Limits(max_header_bytes=100, max_tensor_bytes=64, max_body_bytes=100)
    with pytest.raises(LocalProtocolError, match="header is .* over the limit of 100"):
        encode(wire.RegisterGraph({"nodes": ["x" * 200]}, "s"), small)
    with pytest.raises(LocalProtocolError, match="over the limit of 64"):
        encode(wire.RunGraphReply([TensorEntry("t", np.zeros(17, np.float32))]), small)
    with pytest.raises(LocalProtocolError, match="more than 100 tensor bytes"):
        encode(wire.RunGraphReply([TensorEntry(str(i), np.zeros(8, np.float32))
                                   for i in range(4)]), small)


def test_status_codes_must_be_canonical():
    with pytest.raises(ValueError, match="'NOPE' is not a canonical status code"):
        wire.ErrorReply("NOPE", "x")
    with pytest.raises(ValueError, match="canonical"):
        wire.RemoteCallError("OK", "x")


@pytest.mark.parametrize("frame, match", [
    (b"GET / HTTP/1.1\r\n", "bad magic"),
    (MAGIC + struct.pack("<I", 0), "empty header"),
    (MAGIC + struct.pack("<I", 2**32 - 1), "header of 4294967295 bytes exceeds"),
    (raw_frame(b"\xc1"), "not valid msgpack"),
    (raw_frame(b"\x91" * 100_000 + b"\xc0"), "deeper than 64 levels"),  # a large header: counted
    (raw_frame({"version": 1, "kind": "ack", "payload": {"x": [[[[[[[[1]]]]]]]]},
                "tensors": []}), "unknown fields"),
    (raw_frame(msgpack.packb({1: 2})), "not valid msgpack"),  # int map key: strict_map_key
    (raw_frame(msgpack.packb(msgpack.ExtType(1, b"pickle"))), "not valid msgpack"),
    (raw_frame([1, 2]), "header must be a map"),
    (raw_frame({"version": 2, "kind": "ack", "payload": {}, "tensors": []}),
     "unsupported wire format version 2"),
    (raw_frame({"version": 1, "kind": "pickle", "payload": {}, "tensors": []}),
     "unknown message kind 'pickle'"),
    (raw_frame({"version": 1, "kind": "ack", "payload": {}, "tensors": [], "x": 1}),
     "header must be a map with keys"),
    (raw_frame({"version": 1, "kind": "ack", "payload": [], "tensors": []}), "payload must be"),
    (raw_frame({"version": 1, "kind": "cleanup_step", "payload": {}, "tensors": []}),
     r"missing fields \['step_id'\]"),
    (raw_frame({"version": 1, "kind": "cleanup_step", "payload": {"step_id": "7"},
                "tensors": []}), "cleanup_step.step_id must be int"),
    (raw_frame({"version": 1, "kind": "abort_step", "payload": {
        "step_id": 1, "code": "BOGUS", "message": ""}, "tensors": []}), "invalid abort_step"),
    (raw_frame({"version": 1, "kind": "ack", "payload": {}, "tensors": [descriptor()]}),
     "ack carries no tensors"),
    (raw_frame(run_graph_header(descriptor(dtype="object"))), "dtype 'object' is not allowed"),
    (raw_frame(run_graph_header(descriptor(dtype="O"))), "dtype 'O' is not allowed"),
    (raw_frame(run_graph_header(descriptor(dtype="<f4"))), "dtype '<f4' is not allowed"),
    (raw_frame(run_graph_header(descriptor(dtype=["float32"]))), "is not allowed"),
    (raw_frame(run_graph_header(descriptor(shape=[-2], nbytes=-8))), "nbytes must be"),
    (raw_frame(run_graph_header(descriptor(shape=[-2]))), "shape must be a list"),
    (raw_frame(run_graph_header(descriptor(shape=[True, 2]))), "shape must be a list"),
    (raw_frame(run_graph_header(descriptor(shape=[1] * 33, nbytes=4))), "at most 32"),
    (raw_frame(run_graph_header(descriptor(shape=[3]))), "needs 12 bytes, header says 8"),
    (raw_frame(run_graph_header(descriptor(shape=[2**40], nbytes=2**42))),
     "is 4398046511104 bytes, over the limit"),
    (raw_frame(run_graph_header(*[descriptor(shape=[2**28], nbytes=2**30)] * 5)),
     "tensors total 5368709120 bytes, over the limit"),
    (raw_frame(run_graph_header(descriptor(shape=[0, 2**61, 2**61], nbytes=0))),
     "more than 576460752303423488 elements"),
    (raw_frame(run_graph_header(descriptor(dtype=None))), "an entry without dtype"),
    (raw_frame(run_graph_header(descriptor(dtype="string", nbytes=0, strings=[b"a"]))),
     "needs 2 bin items"),
    (raw_frame(run_graph_header(descriptor(dtype="string", nbytes=0, strings=["a", "b"]))),
     "needs 2 bin items"),
    (raw_frame(run_graph_header(descriptor(error={"code": "NOPE", "message": ""}))),
     "error must be"),
    (raw_frame(run_graph_header({"key": "t"})), "descriptor must be a map with keys"),
    (raw_frame(run_graph_header(descriptor(key=7))), "key must be str"),
])
def test_decode_rejects_bad_headers_before_allocating(frame, match):
    with pytest.raises(RemoteProtocolError, match=match):
        decode(frame)


def test_size_violations_are_frame_too_large():
    with pytest.raises(FrameTooLarge):
        decode(raw_frame(run_graph_header(descriptor(shape=[2**40], nbytes=2**42))))
    with pytest.raises(FrameTooLarge):
        decode(raw_frame(run_graph_header(*[descriptor()] * 3)), Limits(max_tensors=2))


@pytest.mark.parametrize("last, match", [
    (descriptor(dtype="object"), "'object' is not allowed"),
    (descriptor(shape=[2**28], nbytes=2**30), "tensors total 4294967296 bytes, over the limit"),
])
def test_nothing_is_allocated_before_the_whole_header_is_valid(last, match):
    big = descriptor(shape=[2**28], nbytes=2**30)  # 1 GiB each, within the per-tensor limit
    data = raw_frame(run_graph_header(big, big, big, last))
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match=match):
            decode(data, Limits(max_body_bytes=(2**30) * 3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_nesting_deeper_than_the_limit_is_rejected():
    stats: dict = {}
    inner = stats
    for _ in range(70):
        inner["x"] = {}
        inner = inner["x"]
    frame = frame_bytes(wire.RegisterGraph(stats, "s"))
    with pytest.raises(RemoteProtocolError, match="deeper than 64 levels"):
        decode(frame)
    assert decode(frame, Limits(max_depth=80)).graph == stats


def test_non_zero_padding_is_rejected():
    """(In a frame without checksums: in a checked one it is damage, test_wire_checksum.)"""
    for key in ("t", "tt"):  # one of two header lengths leaves padding to corrupt
        data = bytearray(b"".join(encode(wire.RunGraphReply([TensorEntry(key, np.ones(2))]),
                                         checksums=False)))
        header_end = 8 + struct.unpack_from("<I", data, 4)[0]
        if header_end % 64:
            break
    data[header_end] = 1
    with pytest.raises(RemoteProtocolError, match="non-zero alignment padding"):
        decode(data)


def test_a_repeated_header_decodes_to_equal_messages_with_fresh_arrays():
    """Reply headers repeat step after step; the decoder validates one once (per limits) and
    the messages decoded from it still own their arrays."""
    reply = wire.RunGraphReply([TensorEntry("y:0", np.arange(6, dtype=np.float32)),
                                TensorEntry("dead", None, is_dead=True),
                                TensorEntry("failed", None, error=Status("ABORTED", "x"))])
    frame = b"".join(bytes(b) for b in encode(reply))
    first, second = decode(frame), decode(frame)
    assert first == second == reply
    assert first.tensors[0].value is not second.tensors[0].value
    first.tensors[0].value[:] = -1
    assert second.tensors[0].value.tolist() == list(range(6))
    assert any(key[1] in frame for key in wire.VALIDATED_HEADERS)
    # A header is checked against the limits it arrives under, whatever was seen before.
    with pytest.raises(FrameTooLarge):
        decode(frame, Limits(max_tensor_bytes=8))


def test_headers_with_lists_or_maps_are_not_shared_between_messages():
    request = wire.RunGraph("graph/1", 7, [], ["a:0", "b:0"])
    frame = b"".join(bytes(b) for b in encode(request))
    first, second = decode(frame), decode(frame)
    first.fetch_keys.append("c:0")
    assert second.fetch_keys == ["a:0", "b:0"]


def test_a_repeated_health_reply_is_kept_and_each_message_owns_its_lists_and_maps():
    """A HealthReply's header (devices, stats, cluster) repeats while a worker is idle: it is
    kept once validated, and every message decoded from it (by the decoder or in one pass)
    gets lists and maps of its own; the frozen stats record is shared."""
    stats = wire.WorkerStatistics(steps_run=3, max_rss_mib=12.5, graph_lease_s=600.0)
    reply = wire.HealthReply(7, "/job:w/replica:0/task:0", ["/job:w/replica:0/task:0/cpu:0"],
                             stats, {"w": {"0": "127.0.0.1:1"}, "ps": {"0": "127.0.0.1:2"}})
    frame = b"".join(bytes(b) for b in encode(reply))
    first = decode(frame)
    assert any(key[1] in frame for key in wire.VALIDATED_HEADERS)  # kept after one parse
    second = decode(frame)
    third = wire.decode_repeated(memoryview(frame))  # the bare protocol's one-pass decode
    assert first == second == third == reply
    first.devices.append("/job:w/replica:0/task:0/gpu:0")
    first.cluster["w"]["1"] = "127.0.0.1:3"
    second.cluster.pop("ps")
    assert decode(frame) == wire.decode_repeated(memoryview(frame)) == third == reply
    assert third.devices is not second.devices and third.cluster["w"] is not reply.cluster["w"]
    # Damage in a kept header is still found: the checksums are checked before the lookup.
    damaged = bytearray(frame)
    damaged[20] ^= 1
    with pytest.raises(wire.ChecksumMismatch):
        decode(bytes(damaged))
    assert wire.decode_repeated(memoryview(bytes(damaged))) is None


def test_a_header_with_a_record_holding_a_list_is_not_kept():
    """A record is shared between messages only when nothing in it can change: step stats
    (a list of nodes) are parsed again every time."""
    stats = wire.StepStats([wire.NodeExecStats("n", "Const", "/cpu:0", 1, 2)])
    reply = wire.RunGraphReply([TensorEntry("y:0", np.ones(2))], step_stats=stats)
    frame = b"".join(bytes(b) for b in encode(reply))
    first, second = decode(frame), decode(frame)
    assert first == second == reply
    assert not any(key[1] in frame for key in wire.VALIDATED_HEADERS)
    first.step_stats.nodes.clear()
    assert decode(frame).step_stats.nodes == stats.nodes


def test_a_bad_header_is_refused_every_time():
    good = b"".join(bytes(b) for b in encode(wire.RunGraphReply([TensorEntry("y:0", None)])))
    header = msgpack.packb({"version": 1, "kind": "run_graph_reply", "payload": {},
                            "tensors": [{"key": 5}]})
    frame = struct.pack("<4sI", MAGIC, len(header)) + header
    for _ in range(2):
        with pytest.raises(RemoteProtocolError, match="descriptor"):
            decode(frame)
    assert decode(good).tensors[0].key == "y:0"
