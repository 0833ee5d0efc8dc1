"""A repeated step's frames from a kept template (``transports/repeat_frames.py``): encoded to
exactly the bytes a full encode gives, whatever changes between messages, and decoded in one
pass only where every check holds (anything else falls back to the full decoder)."""
import msgpack
import numpy as np
import pytest

from bit_flips import one_bit_flips
from frame_bytes import frame_bytes, full_frame
from transports import repeat_frames, wire
from transports.messages import (
    PushTensors, RunGraph, RunGraphReply, Status, StepStats, TensorEntry,
)

LIMITS = wire.DEFAULT_LIMITS


def _hits():
    return sum(template is not None for template in repeat_frames._templates_by_key.values())


def _run_graph(step_id, request_id, handle="sess/1/abcd", fetches=("mul:0",), value=1.0,
               dtype=np.float32, key="_feed_0:0", **kwargs):
    feeds = [TensorEntry(key, np.asarray(value, dtype))]
    return RunGraph(handle, step_id, feeds, list(fetches), request_id=request_id, **kwargs)


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("defer", [True, False])
def test_repeated_run_graphs_encode_to_the_full_encodes_bytes(checksums, defer):
    ids = [(1, 1), (3, 127), (5, 128), (2**62 + 1, 255), (9, 256), (11, 2**16), (13, 2**32),
           (2**64 - 1, 2**63 - 1), (2**16 - 1, 2**32 - 1), (2**8 - 1, 2**16 - 1), (7, 2)]
    for step_id, request_id in ids:
        message = _run_graph(step_id, request_id, value=float(step_id % 97))
        got = frame_bytes(wire.encode(message, LIMITS, checksums=checksums, defer_checksums=defer))
        assert got == full_frame(message, checksums=checksums)
        decoded = wire.decode(got, LIMITS)
        assert decoded.step_id == step_id and decoded.request_id == request_id
        assert decoded.feeds[0].value == np.float32(step_id % 97)
    assert _hits() == 1  # one template serves every encoding width of the ids


def test_a_template_is_used_and_any_other_field_tensor_or_setting_keys_another():
    first = _run_graph(5, 1)
    wire.encode(first, LIMITS)
    assert _hits() == 1
    calls = []
    assemble = repeat_frames.assemble
    repeat_frames.assemble = lambda *args: calls.append(args) or assemble(*args)
    try:
        wire.encode(_run_graph(7, 2), LIMITS)
    finally:
        repeat_frames.assemble = assemble
    assert calls, "the second RunGraph of the signature was not built from its template"
    others = [_run_graph(9, 3, handle="sess/1/abce"), _run_graph(9, 3, fetches=("add:0",)),
              _run_graph(9, 3, fetches=("mul:0", "add:0")), _run_graph(9, 3, timeout_ms=5),
              _run_graph(9, 3, trace=True), _run_graph(9, 3, value=[1.0, 2.0]),
              _run_graph(9, 3, value=[[1.0], [2.0]]), _run_graph(9, 3, dtype=np.float64),
              _run_graph(9, 3, dtype=np.int32), _run_graph(9, 3, key="_feed_1:0"),
              _run_graph(9, 3, dtype=np.dtype(">f4"))]
    for message in others:
        frame = frame_bytes(wire.encode(message, LIMITS))
        assert frame == full_frame(message)
        assert wire.decode(frame, LIMITS) is not None
    frame = frame_bytes(wire.encode(_run_graph(9, 3), LIMITS, checksums=False))
    assert frame == full_frame(_run_graph(9, 3), checksums=False)
    assert frame[:4] == wire.MAGIC


def test_tensors_not_sent_as_they_are_take_the_full_path():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = [base.T, base[:, 1], base.astype(">f4"), np.float32(3.0),
             np.array([b"a", b"bc"], dtype=object), np.zeros((0, 3), np.float32)]
    for value in cases:
        for step_id in (3, 5):  # the second would take a template if one were kept
            message = PushTensors(step_id, [TensorEntry("k:0", value)])
            frame = frame_bytes(wire.encode(message, LIMITS))
            assert frame == full_frame(message)
            got = wire.decode(frame, LIMITS).tensors[0].value
            assert np.array_equal(got, np.asarray(value))
    for entry in (TensorEntry("k:0", None, is_dead=True),
                  TensorEntry("k:0", None, error=Status("ABORTED", "gone"))):
        for step_id in (3, 5):
            message = PushTensors(step_id, [entry])
            assert frame_bytes(wire.encode(message, LIMITS)) == full_frame(message)


def test_ids_a_template_cannot_carry_are_encoded_or_refused_in_full():
    wire.encode(_run_graph(5, 1), LIMITS)
    assert _hits() == 1
    with pytest.raises(wire.LocalProtocolError, match="step_id"):
        wire.encode(_run_graph(True, 2), LIMITS)
    with pytest.raises(wire.LocalProtocolError):
        wire.encode(_run_graph(2**64, 2), LIMITS)
    for message in (_run_graph(5, 0), _run_graph(-3, 4)):  # a default id is left out
        frame = frame_bytes(wire.encode(message, LIMITS))
        assert frame == full_frame(message)
        assert wire.decode(frame, LIMITS).request_id == message.request_id


@pytest.mark.parametrize("width", [0, 1, 2, 4, 8])
def test_an_id_is_written_as_msgpack_writes_it_in_every_width(width):
    """``_uint`` (a template's ids without a Packer): msgpack's own bytes at each width's
    bounds, one past them and at seeded values between; anything else refused by name."""
    low, high = {0: (0, 127), 1: (128, 255), 2: (256, 2**16 - 1), 4: (2**16, 2**32 - 1),
                 8: (2**32, 2**64 - 1)}[width]
    rng = np.random.default_rng(width)
    values = [low, low + 1, high - 1, high, *(int(low + (high - low) * f)
                                              for f in rng.random(64))]
    for value in values:
        assert repeat_frames._uint(value) == msgpack.packb(value), value
        assert len(repeat_frames._uint(value)) == 1 + width
    for wrong in (-1, -128, -2**63, 2**64, 2**70, True, False, 1.0, 128.0):
        with pytest.raises(ValueError, match=r"not an int from 0 to 2\*\*64 - 1"):
            repeat_frames._uint(wrong)


def test_messages_with_records_or_floats_keep_no_template():
    reply = RunGraphReply([TensorEntry("y:0", np.ones(3, np.float32))], StepStats([]))
    wire.encode(reply, LIMITS)
    assert _hits() == 0
    plain = RunGraphReply([TensorEntry("y:0", np.ones(3, np.float32))])
    first = frame_bytes(wire.encode(plain, LIMITS))
    assert _hits() == 1 and frame_bytes(wire.encode(plain, LIMITS)) == first


@pytest.mark.parametrize("checksums", [True, False])
def test_a_reply_without_ids_keeps_its_frame_start_built_and_encodes_the_full_bytes(checksums):
    """A RunGraph reply has no volatile ids: its template keeps prefix and header joined, and
    every later reply of the signature (other values, several dtypes and shapes) is the full
    encode's bytes and decodes to its values; another shape keys another template."""
    shapes = {np.float32: (), np.int64: (3,), np.float64: (2, 3)}  # (headers of a few only)
    rng = np.random.default_rng(3)

    def reply(seed):
        return RunGraphReply([TensorEntry(f"y{i}:0", np.asarray(rng.random(shape) * 100 + seed).astype(
            dtype)) for i, (dtype, shape) in enumerate(shapes.items())])

    first = reply(0)
    wire.encode(first, LIMITS, checksums=checksums)
    (template,) = (p.template for p in repeat_frames._templates_by_key.values())
    assert template.head is not None and not template.volatile
    for seed in range(1, 6):
        message = reply(seed)
        got = frame_bytes(wire.encode(message, LIMITS, checksums=checksums, defer_checksums=True))
        assert got == full_frame(message, checksums=checksums)
        for want, back in zip(message.tensors, wire.decode(got, LIMITS).tensors):
            assert back.value.dtype == want.value.dtype and np.array_equal(back.value,
                                                                           want.value)
    assert _hits() == 1
    for dtype, shape in ((np.uint8, (5,)), (np.bool_, (4,)), (np.int32, (0, 2))):
        for seed in range(3):
            message = RunGraphReply([TensorEntry("y0:0", np.full(shape, seed, dtype))])
            got = frame_bytes(wire.encode(message, LIMITS, checksums=checksums))
            assert got == full_frame(message, checksums=checksums)
            assert np.array_equal(wire.decode(got, LIMITS).tensors[0].value,
                                  message.tensors[0].value)
    assert _hits() == 4
    run_graph = _run_graph(5, 1)  # one with ids: built per message, no head kept
    wire.encode(run_graph, LIMITS, checksums=checksums)
    assert [p.template.head is None for p in repeat_frames._templates_by_key.values()] == [
        False] * 4 + [True]


def _decoded_whole(frame):
    return wire.decode_repeated(memoryview(frame), LIMITS)


def test_a_known_header_decodes_in_one_pass_as_the_decoder_decodes_it():
    reply = RunGraphReply([TensorEntry("y:0", np.arange(5, dtype=np.int64)),
                           TensorEntry("z:0", np.float32(2.5)),
                           TensorEntry("e:0", np.zeros((0, 2), np.float32)),
                           TensorEntry("d:0", None, is_dead=True)])
    frame = frame_bytes(wire.encode(reply, LIMITS))
    assert _decoded_whole(frame) is None  # a header never validated: the decoder's work
    want = wire.decode(frame, LIMITS)
    got = _decoded_whole(frame)
    assert got is not None and [e.key for e in got.tensors] == [e.key for e in want.tensors]
    for a, b in zip(got.tensors, want.tensors):
        assert a.is_dead == b.is_dead and (a.value is None) == (b.value is None)
        if a.value is not None:
            assert a.value.dtype == b.value.dtype and np.array_equal(a.value, b.value)
            assert a.value.flags.writeable and a.value.flags.owndata
    step = _run_graph(2**40 + 1, 3)
    wire.decode(frame_bytes(wire.encode(step, LIMITS)), LIMITS)  # its header's template is kept
    later = _run_graph(2**41 + 7, 4, value=7.0)  # (ids of the same encoding widths)
    got = _decoded_whole(frame_bytes(wire.encode(later, LIMITS)))
    assert (got.step_id, got.request_id, float(got.feeds[0].value)) == (2**41 + 7, 4, 7.0)


def test_a_damaged_or_misframed_known_frame_is_left_to_the_decoder():
    reply = RunGraphReply([TensorEntry("y:0", np.arange(6, dtype=np.float32))])
    frame = frame_bytes(wire.encode(reply, LIMITS))
    wire.decode(frame, LIMITS)
    assert _decoded_whole(frame) is not None
    for bit, damaged in one_bit_flips(frame):
        assert _decoded_whole(damaged) is None, f"bit {bit} flipped was decoded"
        with pytest.raises(wire.RemoteProtocolError):
            wire.decode(damaged, LIMITS)
    for misframed in (frame + b"\0", frame[:-1], frame[:20], b"", frame + frame):
        assert _decoded_whole(misframed) is None
    unchecked = frame_bytes(wire.encode(reply, LIMITS, checksums=False))
    wire.decode(unchecked, LIMITS)
    got = _decoded_whole(unchecked)
    assert got is not None and np.array_equal(got.tensors[0].value, np.arange(6))
    assert _decoded_whole(unchecked[:-4] + b"\1\0\0\0") is not None  # (no sums: bytes as sent)
    padded = bytearray(unchecked)
    padded[len(unchecked) - 24 - 1] = 1  # a padding byte before the tensor
    assert _decoded_whole(bytes(padded)) is None


_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8, np.int8,
           np.float16]
_IDS = [1, 5, 127, 128, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
        2**64 - 1]


def _random_message(rng):
    entries = []
    for i in range(int(rng.integers(0, 3))):
        shape = tuple(int(n) for n in rng.integers(0, 4, size=int(rng.integers(0, 3))))
        dtype = _DTYPES[int(rng.integers(len(_DTYPES)))]
        entries.append(TensorEntry(f"k{i}:0", (np.arange(int(np.prod(shape))) % 3).astype(
            dtype).reshape(shape)))
    step_id, request_id = (_IDS[int(rng.integers(len(_IDS)))] for _ in range(2))
    kind = int(rng.integers(3))
    if kind == 0:
        return RunGraph(f"g{int(rng.integers(2))}", step_id, entries, ["a:0"],
                        request_id=request_id)
    return PushTensors(step_id, entries) if kind == 1 else RunGraphReply(entries)


def _damaged(rng, frame):
    damaged, at = bytearray(frame), int(rng.integers(len(frame)))
    how = int(rng.integers(5))
    if how == 0:
        damaged[at] ^= 1 << int(rng.integers(8))
    elif how == 1:
        damaged += bytes(int(rng.integers(1, 70)))  # trailing bytes (zeros: padding-like)
    elif how == 2:
        del damaged[at:]  # truncated
    elif how == 3:
        damaged[at:at] = bytes(int(rng.integers(1, 70)))  # a body of another size
    else:
        del damaged[at:at + int(rng.integers(1, 70))]
    return bytes(damaged)


def _same(got, want):
    entries = [(e.key, e.is_dead, None if e.value is None else (
        e.value.dtype, e.value.shape, e.value.tobytes())) for e in getattr(
            got, "tensors", None) or getattr(got, "feeds", [])]
    return type(got) is type(want) and entries == [
        (e.key, e.is_dead, None if e.value is None else (e.value.dtype, e.value.shape,
                                                          e.value.tobytes()))
        for e in getattr(want, "tensors", None) or getattr(want, "feeds", [])] and all(
            getattr(got, name) == getattr(want, name) for name in ("step_id", "request_id",
                                                                   "graph_handle")
            if hasattr(want, name))


def test_templates_and_the_one_pass_decode_agree_with_the_full_codec_on_random_frames():
    """Random messages (kinds, dtypes, shapes, ids of every msgpack width, checksums on and
    off): the templated encode gives the full encode's bytes, and the one-pass decode of a
    known header, intact or damaged, either declines or gives what the Decoder gives; it
    never accepts a frame the Decoder refuses."""
    rng = np.random.default_rng(34)
    for _ in range(300):
        message = _random_message(rng)
        checksums = bool(rng.integers(4))
        frame = frame_bytes(wire.encode(message, LIMITS, checksums=checksums))
        assert frame == full_frame(message, checksums=checksums)
        wire.decode(frame, LIMITS)  # (its header validated)
        assert _same(_decoded_whole(frame), wire.decode(frame, LIMITS))
        for _ in range(4):
            damaged = _damaged(rng, frame)
            got = _decoded_whole(damaged)
            try:
                want = wire.decode(damaged, LIMITS)
            except wire.RemoteProtocolError:
                assert got is None, "the one-pass decode accepted a frame the Decoder refuses"
            else:
                assert got is None or _same(got, want)
