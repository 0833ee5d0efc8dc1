"""Kept (validated) headers whose payload holds lists and maps (``transports.schema``'s
``remember_header`` and ``validated``), against the full decoder as the oracle.

A header the decoder validated once is kept under its exact bytes; a later frame with those
bytes skips msgpack and the payload's checks, on both decode paths (the incremental
``Decoder`` and the one-pass ``decode_repeated``). Here every decode with the header kept must
give what a decoder that keeps nothing gives: the same message, value for value and type for
type (1, 1.0 and True are equal in Python, not on the wire), the same error for a damaged
frame; every message owns its lists and maps; and what is kept stays small.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import random
import struct
import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports import header_templates, schema, wire
from transports.messages import HealthReply, RunGraphReply, TensorEntry

EXAMPLES = settings.default.max_examples
_PLAIN = (st.none() | st.booleans() | st.sampled_from(
    [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63, 2**64 - 1, -1, -32, -33,
     -2**63]) | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=True)
    | st.sampled_from([0.0, -0.0, 1.0, math.inf, -math.inf, math.nan])
    | st.text(max_size=4) | st.binary(max_size=4))
# a cluster's value: lists and str-keyed maps of plain values, a few levels deep
VALUES = st.recursive(_PLAIN, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=12)


def _forget() -> None:
    schema.VALIDATED_HEADERS.clear()
    header_templates.forget_all()


def _frame(message, checksums: bool = True, limits: wire.Limits = wire.DEFAULT_LIMITS) -> bytes:
    return b"".join(bytes(b) for b in wire.encode(message, limits, checksums=checksums))


def _same(a, b) -> bool:
    """Equal value for value and type for type (NaN equal to NaN, -0.0 apart from 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def _verdict(decode, frame: bytes, limits: wire.Limits):
    try:
        return decode(frame, limits)
    except wire.RemoteProtocolError as exc:
        return type(exc)


def _incremental(frame: bytes, limits: wire.Limits):
    return wire.decode(frame, limits)


def _one_pass(frame: bytes, limits: wire.Limits):
    return wire.decode_repeated(memoryview(frame), limits) or wire.decode(frame, limits)


def _oracle(frame: bytes, limits: wire.Limits = wire.DEFAULT_LIMITS):
    """The full decoder's verdict, nothing kept before or after."""
    _forget()
    try:
        return _verdict(_incremental, frame, limits)
    finally:
        _forget()


def _agrees(got, expected) -> bool:
    if isinstance(expected, type):
        return got is expected
    return not isinstance(got, type) and _same(got, expected)


def _mutate_everything(value) -> None:
    """Append to every list and add a key to every map reachable from ``value``."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _mutate_everything(getattr(value, f.name))
    elif isinstance(value, list):
        for item in list(value):
            _mutate_everything(item)
        value.append("mutated")
    elif isinstance(value, dict):
        for item in list(value.values()):
            _mutate_everything(item)
        value["mutated"] = True


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(devices=st.lists(st.text(max_size=6), max_size=4),
       cluster=st.none() | st.dictionaries(st.text(max_size=3), VALUES, max_size=4),
       checksums=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_kept_headers_decode_as_the_full_decoder_and_damage_is_found_alike(
        devices, cluster, checksums, seed):
    reply = HealthReply(5, "/job:w/task:0", devices, wire.WorkerStatistics(steps_run=2),
                        cluster)
    frame = _frame(reply, checksums)
    expected = _oracle(frame)
    assert _same(expected, reply)
    for decode in (_incremental, _one_pass):  # kept after the first decode, on both paths
        first, second = (_verdict(decode, frame, wire.DEFAULT_LIMITS) for _ in range(2))
        assert _agrees(first, expected) and _agrees(second, expected)
        _mutate_everything(first)  # a caller's changes never reach the next message
        assert _agrees(_verdict(decode, frame, wire.DEFAULT_LIMITS), expected)
    rng = random.Random(seed)
    for _ in range(8):  # damaged copies: the kept header (still there) changes no verdict
        damaged = bytearray(frame)
        how = rng.randrange(3)
        if how == 0:
            bit = rng.randrange(8 * len(frame))
            damaged[bit // 8] ^= 1 << bit % 8
        elif how == 1:
            damaged[rng.randrange(len(frame))] = rng.randrange(256)
        else:
            del damaged[rng.randrange(1, len(frame)):]
        damaged = bytes(damaged)
        expected_damaged = _oracle(damaged)
        for decode in (_incremental, _one_pass):
            wire.decode(frame)  # the undamaged header kept
            assert _agrees(_verdict(decode, damaged, wire.DEFAULT_LIMITS), expected_damaged)


def _raw_health(cluster_msgpack: bytes) -> bytes:
    """An unchecked frame of a HealthReply whose cluster is the given msgpack bytes as they
    are (duplicate keys and any key order included)."""
    payload = (b"\x84" + msgpack.packb("incarnation") + msgpack.packb(1) + msgpack.packb("task")
               + msgpack.packb("t") + msgpack.packb("devices") + msgpack.packb(["d"])
               + msgpack.packb("cluster") + cluster_msgpack)
    header = (b"\x84" + msgpack.packb("version") + msgpack.packb(wire.FORMAT_VERSION)
              + msgpack.packb("kind") + msgpack.packb("health_reply") + msgpack.packb("payload")
              + payload + msgpack.packb("tensors") + msgpack.packb([]))
    return wire.PREFIX.pack(wire.MAGIC, len(header)) + header


_PACK = msgpack.packb
CLUSTERS = {  # headers that differ only in what a careless key would miss
    "int": _PACK({"a": [1]}), "float": _PACK({"a": [1.0]}), "bool": _PACK({"a": [True]}),
    "float32": b"\x81" + _PACK("a") + b"\x91\xca" + struct.pack(">f", 1.0),
    "uint8": b"\x81" + _PACK("a") + b"\x91\xcc\x01",
    "str": _PACK({"a": ["x"]}), "bin": _PACK({"a": [b"x"]}, use_bin_type=True),
    "nested": _PACK({"a": [[1]]}), "nested_map": _PACK({"a": [{"b": 1}]}),
    "order": _PACK({"b": 2, "a": 1}), "order_swapped": _PACK({"a": 1, "b": 2}),
    "duplicate": b"\x82" + _PACK("a") + _PACK(1) + _PACK("a") + _PACK(2.0),
    "duplicate_nested": _PACK({"a": None})[:-1] + b"\x82" + _PACK("b") + _PACK([1])
    + _PACK("b") + _PACK({}),
    "nan": _PACK({"a": [math.nan]}), "minus_zero": _PACK({"a": [-0.0]}),
    "zero": _PACK({"a": [0.0]}),
    "bin_key": b"\x81" + _PACK(b"a", use_bin_type=True) + _PACK(1),
    "int_key": b"\x81" + _PACK(1) + _PACK(1),
    "list_cluster": _PACK([1]),
}


def test_headers_that_differ_only_in_types_nesting_order_or_duplicates_are_told_apart():
    """Each variant decoded after all the others are kept gets the full decoder's verdict
    (the same types, order and values, or the same refusal)."""
    frames = {name: _raw_health(cluster) for name, cluster in CLUSTERS.items()}
    expected = {name: _oracle(frame) for name, frame in frames.items()}
    assert expected["int_key"] is wire.RemoteProtocolError  # (msgpack: str map keys only)
    assert expected["list_cluster"] is wire.RemoteProtocolError
    for _ in range(2):
        for name, frame in frames.items():
            assert _agrees(_verdict(_incremental, frame, wire.DEFAULT_LIMITS), expected[name])
            assert _agrees(_verdict(_one_pass, frame, wire.DEFAULT_LIMITS), expected[name])
    assert [type(expected[name].cluster["a"][0]) for name in ("int", "float", "bool")] == [
        int, float, bool]
    assert list(expected["order"].cluster) == ["b", "a"]


def test_a_deeply_nested_payload_decodes_as_the_full_decoder_decodes_it():
    """Limits that allow deep nesting: a small header nesting 600 lists deep is decoded (and
    decoded again) like any other, not a RecursionError where the header would be kept."""
    limits = wire.Limits(max_depth=2000)
    deep = "x"
    for _ in range(600):
        deep = [deep]
    reply = HealthReply(1, "t", [], cluster={"a": deep})
    frame = _frame(reply, limits=limits)
    assert len(frame) - wire.CHECKED_PREFIX.size <= schema.CACHED_HEADER_BYTES
    assert _oracle(frame, limits) == reply  # (``==``: _same's recursion is deeper)
    for _ in range(2):
        assert wire.decode(frame, limits) == reply
        assert _one_pass(frame, limits) == reply


def test_what_kept_headers_hold_stays_small_whatever_the_peer_sends():
    """Many distinct headers, each a small frame whose lists and maps hold many values (a
    varied or hostile peer): the kept headers hold a few MiB at most, not a copy of each
    payload's thousands of maps."""
    _forget()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for incarnation in range(2 * schema._CACHED_HEADERS):
            reply = HealthReply(incarnation, "t", [],
                                cluster={"a": [{} for _ in range(1900)]})
            frame = _frame(reply)
            assert len(frame) - wire.CHECKED_PREFIX.size <= schema.CACHED_HEADER_BYTES
            assert wire.decode(frame) == reply
        del reply, frame
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        _forget()
    assert kept < 4 << 20, f"kept headers hold {kept / 2**20:.1f} MiB"


def test_a_small_health_reply_is_still_kept():
    """What the bound leaves kept: a worker's usual Health answer (a few devices, a cluster
    of a few jobs) and a reply whose payload is scalars only."""
    _forget()
    cluster = {job: {str(task): f"127.0.0.1:{2000 + task}" for task in range(8)}
               for job in ("ps", "worker")}
    health = _frame(HealthReply(3, "/job:worker/task:0", ["/cpu:0", "/gpu:0"], cluster=cluster))
    run = _frame(RunGraphReply([TensorEntry("y:0", np.ones(3))]))
    for frame in (health, run):
        wire.decode(frame)
        assert any(key[1] in frame for key in schema.VALIDATED_HEADERS)
    _forget()
