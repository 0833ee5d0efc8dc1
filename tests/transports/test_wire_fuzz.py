"""Property tests of the codec: arbitrary arrays round-trip; arbitrary damage is rejected cleanly
(RemoteProtocolError and nothing else, and no allocation beyond the limits)."""

from __future__ import annotations

import dataclasses
import math
import struct
import tracemalloc

import ml_dtypes
import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from transports import wire
from transports.wire import (
    MAGIC, MESSAGE_TYPES, NEED_DATA, WIRE_DTYPES, Decoder, Limits, RemoteProtocolError,
    TensorEntry, decode, encode,
)

# Scaled from the active hypothesis profile (tests/conftest.py): damage needs more draws than
# round trips to reach every branch of the validator.
EXAMPLES = settings.default.max_examples

SMALL = Limits(max_header_bytes=4096, max_tensor_bytes=1 << 16, max_body_bytes=1 << 17,
               max_tensors=64, max_rank=8, max_depth=16)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)


@st.composite
def arrays(draw) -> np.ndarray:
    """Any wire dtype, any small shape (0-d and empty included), in any memory layout."""
    name = draw(st.sampled_from([*WIRE_DTYPES, "string"]))
    shape = draw(SHAPES)
    if name == "string":
        items = draw(st.lists(st.binary(max_size=6), min_size=math.prod(shape),
                              max_size=math.prod(shape)))
        array = np.empty(len(items), dtype=object)
        array[:] = items
        array = array.reshape(shape)
    elif name == "bfloat16":
        array = draw(hnp.arrays(np.float32, shape)).astype(ml_dtypes.bfloat16)
    else:
        array = draw(hnp.arrays(WIRE_DTYPES[name], shape))
    layout = draw(st.sampled_from(["c", "fortran", "strided", "big_endian"]))
    if layout == "fortran":
        array = np.asfortranarray(array)
    elif layout == "strided":  # same values, every other element of a bigger buffer
        array = np.stack([array, array], axis=-1)[..., 0]
    elif layout == "big_endian" and array.dtype.kind in "iuf" and array.dtype.itemsize > 1:
        array = array.astype(array.dtype.newbyteorder(">"))
    return array


entries = st.builds(TensorEntry, key=st.text(max_size=12), value=st.none() | arrays(),
                    is_dead=st.booleans(),
                    error=st.none() | st.builds(wire.Status, st.sampled_from(
                        sorted(wire.CANONICAL_CODES)), st.text(max_size=10)))


@settings(max_examples=5 * EXAMPLES, deadline=None)
@given(st.lists(entries, max_size=4), st.lists(st.integers(1, 97), min_size=1, max_size=8))
def test_arbitrary_tensors_round_trip_whole_and_in_chunks(tensors, chunk_sizes):
    message = wire.RecvTensorsReply(tensors)
    data = b"".join(encode(message))
    assert decode(data) == message
    decoder, pos, i = Decoder(), 0, 0
    while pos < len(data):
        n = chunk_sizes[i % len(chunk_sizes)]
        decoder.receive_data(data[pos:pos + n])
        pos, i = pos + n, i + 1
    assert decoder.next_event() == message
    assert decoder.next_event() is NEED_DATA


def _sample_frames() -> list[bytes]:
    feeds = [TensorEntry("a", np.arange(6, dtype=np.float32).reshape(2, 3)),
             TensorEntry("s", np.array([b"x", b"yz"], dtype=object)),
             TensorEntry("d", None, is_dead=True), TensorEntry("b", np.ones(3, bool))]
    messages = [wire.RunGraph("g", 3, feeds, ["a"], timeout_ms=9),
                wire.HealthReply(1, "t", ["cpu"], wire.WorkerStatistics(graphs=2, max_rss_mib=9.5)),
                wire.RegisterGraph({"nodes": [{"op": "Const"}], "k": [1, 2.5, None, b"b"]}, "s"),
                wire.RegisterGraph({}, "s", wire.GraphOptions(
                    ["x:0"], ["y:0"], {"/job:w/task:1": "h:1"}, {"e:0": 2},
                    wire.GraphConfig(False, "bfloat16"))),
                wire.RunGraphReply([], wire.StepStats([wire.NodeExecStats("n", "Add", "d", 1, 2)])),
                wire.ErrorReply("INVALID_ARGUMENT", "bad", op="dense/mm", derived=True),
                wire.Ack()]
    return [b"".join(encode(m)) for m in messages]


FRAMES = _sample_frames()
MESSAGE_CLASSES = tuple(MESSAGE_TYPES.values())


def _decode_within_budget(data: bytes) -> None:
    """Decode damaged bytes: a message or RemoteProtocolError, never more than ~1 MiB allocated.

    tracemalloc counts every thread's allocations, and threads that earlier tests left running
    (the aiohttp bridge's event loop, trio's thread cache) may allocate while this one decodes.
    Decoding is deterministic, so a decoder that overspends does it on every try: the budget
    holds when one of three tries stays within it.
    """
    peaks = []
    for _ in range(3):
        tracemalloc.start()
        try:
            result = decode(data, SMALL)
        except RemoteProtocolError:
            pass
        else:
            assert isinstance(result, MESSAGE_CLASSES)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        if peaks[-1] < 1 << 20:
            return
    raise AssertionError(f"decoding {len(data)} damaged bytes allocated {min(peaks)} bytes")


@settings(max_examples=10 * EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FRAMES), st.data())
def test_mutated_frames_are_rejected_cleanly(frame, data):
    damaged = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        action = data.draw(st.sampled_from(["set", "xor", "insert", "delete"]))
        if action == "set":
            damaged[at] = data.draw(st.integers(0, 255))
        elif action == "xor":
            damaged[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "insert":
            damaged[at:at] = data.draw(st.binary(min_size=1, max_size=9))
        else:
            del damaged[at:at + data.draw(st.integers(1, 9))]
    _decode_within_budget(bytes(damaged))


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(st.sampled_from(FRAMES), st.data())
def test_truncated_frames_are_always_rejected(frame, data):
    cut = data.draw(st.integers(0, len(frame) - 1))
    try:
        decode(frame[:cut], SMALL)
    except RemoteProtocolError:
        return
    raise AssertionError(f"a frame cut to {cut} of {len(frame)} bytes was accepted")


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)


def _maybe(valid: st.SearchStrategy) -> st.SearchStrategy:
    return valid | plain


descriptors = st.fixed_dictionaries({
    "key": _maybe(st.text(max_size=4)),
    "dtype": _maybe(st.sampled_from([None, "string", "object", *WIRE_DTYPES])),
    "shape": _maybe(st.lists(st.integers(-2, 2**40), max_size=4)),
    "nbytes": _maybe(st.integers(-1, 2**42)),
    "dead": _maybe(st.booleans()),
    "error": _maybe(st.fixed_dictionaries({"code": st.sampled_from(["ABORTED", "NOPE"]),
                                           "message": st.text(max_size=4)})),
    "strings": _maybe(st.lists(st.binary(max_size=3), max_size=4)),
})


RECORD_FIELDS = sorted({f.name for record in wire.RECORD_TYPES
                        for f in dataclasses.fields(record)} | {"x"})
# A map shaped like a record: its field names, any plain values (or anything plain at all).
record_maps = _maybe(st.dictionaries(st.sampled_from(RECORD_FIELDS), _maybe(
    st.dictionaries(st.sampled_from(RECORD_FIELDS), plain, max_size=3)
    | st.lists(st.dictionaries(st.sampled_from(RECORD_FIELDS), plain, max_size=5), max_size=2)),
    max_size=6))


@settings(max_examples=5 * EXAMPLES, deadline=None)
@given(kind=_maybe(st.sampled_from(sorted(MESSAGE_TYPES))),
       payload=_maybe(st.dictionaries(
           st.sampled_from(["graph_handle", "step_id", "feeds", "fetch_keys", "keys", "code",
                            "message", "devices", "stats", "options", "step_stats", "op",
                            "derived", "x"]), _maybe(record_maps), max_size=5)),
       tensors=_maybe(st.lists(descriptors, max_size=3)),
       version=_maybe(st.just(1)), body=st.binary(max_size=200))
def test_arbitrary_headers_are_validated(kind, payload, tensors, version, body):
    header = msgpack.packb({"version": version, "kind": kind, "payload": payload,
                            "tensors": tensors}, use_bin_type=True)
    _decode_within_budget(MAGIC + struct.pack("<I", len(header)) + header + body)


names = st.text(max_size=6)
levels = st.integers(0, 2**63 - 1)
graph_options = st.builds(
    wire.GraphOptions, feeds=st.lists(names, max_size=3, unique=True),
    fetches=st.lists(names, max_size=3), peers=st.dictionaries(names, names, max_size=3),
    batchable=st.dictionaries(names, levels, max_size=3),
    config=st.builds(wire.GraphConfig, st.booleans(), st.sampled_from(["", "bfloat16"])))
counts = st.integers(0, 2**63 - 1)
worker_statistics = st.builds(
    wire.WorkerStatistics, steps_run=counts, graphs=counts, bytes_sent=counts,
    max_rss_mib=st.none() | st.floats(allow_nan=False),
    graph_lease_s=st.none() | st.floats(allow_nan=False))
step_stats = st.builds(wire.StepStats, st.lists(st.builds(
    wire.NodeExecStats, names, names, names, st.integers(-2**63, 2**63 - 1),
    st.integers(-2**63, 2**63 - 1)), max_size=4))
typed_messages = st.one_of(
    st.builds(wire.RegisterGraph, st.just({}), names, graph_options),
    st.builds(wire.HealthReply, counts, names, st.lists(names, max_size=2), worker_statistics),
    st.builds(wire.RunGraphReply, st.just([]), st.none() | step_stats),
    st.builds(wire.ErrorReply, st.sampled_from(sorted(wire.CANONICAL_CODES)), names, names,
              st.booleans()))


@settings(max_examples=3 * EXAMPLES, deadline=None)
@given(typed_messages)
def test_arbitrary_records_round_trip_as_records(message):
    decoded = decode(b"".join(encode(message)))
    assert decoded == message
    for f in dataclasses.fields(message):
        assert type(getattr(decoded, f.name)) is type(getattr(message, f.name)), f.name
