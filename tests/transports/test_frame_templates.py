"""A repeated frame decoded by offsets (``transports/frame_templates.py``): learnt from a frame
decoded whole from a validated header, it decodes the next frames of its signature (other ids,
other tensor bytes) to what the full decoder gives, and takes no frame that is damaged, of
another signature or under other limits (those go the way they went before)."""
import dataclasses

import numpy as np
import pytest

from bit_flips import one_bit_flips
from transports import checksum, frame_templates, wire
from transports.messages import PushTensors, RunGraph, RunGraphReply, StepStats, TensorEntry

LIMITS = wire.DEFAULT_LIMITS
_IDS = {0: [1, 127], 1: [128, 255], 2: [256, 2**16 - 1], 4: [2**16, 2**32 - 1],
        8: [2**32, 2**63, 2**64 - 1]}  # msgpack's width of an id -> ids of it


def _frame(message, checksums=True):
    buffers = wire.encode(message, LIMITS, checksums=checksums)
    for buffer in buffers:
        if isinstance(buffer, checksum.ChecksumTrailer) and buffer.pending:
            buffer.fill()
    return b"".join(bytes(b) for b in buffers)


def _feeds(rng):
    return [TensorEntry("x:0", np.asarray(rng.standard_normal(), np.float32)),
            TensorEntry("y:0", rng.standard_normal(3)),
            TensorEntry("e:0", np.zeros((0, 2), np.int64)),
            TensorEntry("i:0", rng.integers(-9, 9, (2, 2)).astype(np.int64))]


def _run_graph(step_id, request_id, rng, handle="sess/1/abcd"):
    return RunGraph(handle, step_id, _feeds(rng), ["a:0", "b:0"], request_id=request_id)


def _whole(frame, limits=LIMITS):
    return wire.decode_repeated(memoryview(frame), limits)


def _taken():
    return frame_templates.statistics()["decoded"]


def _learnt(frame, then=None):
    """Decode ``frame`` as a step's first frame is (in full: its header validated, its header
    template kept), then ``then`` (default: ``frame`` again) as the next (whole: its frame
    template kept; a RunGraph's from the next, of other ids)."""
    wire.decode(frame, LIMITS)
    assert _whole(frame if then is None else then) is not None
    assert frame_templates.known(len(frame))


def _same(got, want):
    assert type(got) is type(want)
    for field in dataclasses.fields(want):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if field.name in ("feeds", "tensors"):
            assert [(e.key, e.is_dead, e.error) for e in a] == [
                (e.key, e.is_dead, e.error) for e in b]
            for x, y in zip(a, b):
                assert x.value.dtype == y.value.dtype and x.value.shape == y.value.shape
                assert x.value.tobytes() == y.value.tobytes()
                assert x.value.flags.writeable and x.value.flags.owndata
        else:
            assert a == b, field.name


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("width", [0, 1, 2, 4, 8])
def test_repeated_run_graphs_decode_by_offsets_as_the_decoder_decodes_them(checksums, width):
    rng = np.random.default_rng(width)
    ids = _IDS[width]
    first = _frame(_run_graph(ids[0], ids[0], rng), checksums)
    _learnt(first, _frame(_run_graph(ids[-1], ids[0], rng), checksums))
    for step_id in ids:
        for request_id in ids:
            message = _run_graph(step_id, request_id, rng)
            frame = _frame(message, checksums)
            assert len(frame) == len(first)
            taken = _taken()
            got = _whole(frame)
            assert _taken() == taken + 1
            _same(got, wire.decode(frame, LIMITS))
            _same(got, message)
    got.fetch_keys.append("mutated:0")  # the message's own list: the next one is not changed
    assert _whole(frame).fetch_keys == ["a:0", "b:0"]


def test_a_repeated_reply_decodes_by_offsets():
    reply = RunGraphReply([TensorEntry("y:0", np.arange(5, dtype=np.int64)),
                           TensorEntry("z:0", np.float32(2.5))])
    frame = _frame(reply)
    _learnt(frame)
    later = RunGraphReply([TensorEntry("y:0", -np.arange(5, dtype=np.int64)),
                           TensorEntry("z:0", np.float32(-7.0))])
    taken = _taken()
    got = _whole(_frame(later))
    assert _taken() == taken + 1
    _same(got, later)


def test_no_damaged_frame_is_taken():
    rng = np.random.default_rng(1)
    frame = _frame(_run_graph(2**40, 300, rng))
    _learnt(_frame(_run_graph(2**41, 301, rng)), frame)
    taken = _taken()
    for bit, damaged in one_bit_flips(frame):
        assert _whole(damaged) is None, f"bit {bit} flipped was decoded"
        with pytest.raises(wire.RemoteProtocolError):
            wire.decode(damaged, LIMITS)
    assert _taken() == taken
    unchecked = _frame(_run_graph(2**40, 300, rng), checksums=False)
    _learnt(_frame(_run_graph(2**41, 301, rng), checksums=False), unchecked)
    id_at = unchecked.index(b"\xa7step_id\xcf") + len(b"\xa7step_id\xcf")
    moved = bytearray(unchecked)
    moved[id_at + 7] ^= 1  # unsummed: another step id, as the decoder reads it too
    assert _whole(bytes(moved)).step_id == 2**40 + 1 == wire.decode(bytes(moved), LIMITS).step_id


def test_frames_of_another_signature_or_limits_are_decoded_as_before():
    rng = np.random.default_rng(2)
    frame = _frame(_run_graph(5, 5, rng, handle="sess/1/abcd"))
    _learnt(_frame(_run_graph(4, 4, rng, handle="sess/1/abcd")), frame)
    other = _frame(_run_graph(6, 6, rng, handle="sess/2/abcd"))  # the same length
    assert len(other) == len(frame)
    wire.decode(_frame(_run_graph(3, 3, rng, handle="sess/2/abcd")), LIMITS)
    taken = _taken()
    got = _whole(other)
    assert got.graph_handle == "sess/2/abcd" and _taken() == taken  # (then learnt: the next is)
    assert _whole(_frame(_run_graph(8, 8, rng, handle="sess/2/abcd"))).step_id == 8
    assert _taken() == taken + 1
    small = dataclasses.replace(LIMITS, max_header_bytes=4096)
    later = _frame(_run_graph(9, 9, rng))
    assert _whole(later, small) is None and _taken() == taken + 1  # (its header never seen)


@pytest.mark.parametrize("reply", [
    RunGraphReply([TensorEntry("s:0", np.array([b"ab", b"c"], dtype=object))]),
    RunGraphReply([TensorEntry("d:0", None, is_dead=True)]),
    RunGraphReply([TensorEntry("y:0", np.float32(1.0))], StepStats([])),
    RunGraphReply([TensorEntry("big:0", np.zeros(70_000, np.float32))]),  # over MAX_FRAME
], ids=["strings", "dead", "record", "large"])
def test_frames_a_template_cannot_read_keep_none_and_decode_as_before(reply):
    frame = _frame(reply)
    wire.decode(frame, LIMITS)
    got = _whole(frame)
    assert not frame_templates.known(len(frame))
    if got is not None:
        assert [e.key for e in got.tensors] == [e.key for e in reply.tensors]


def _push(step_id, rng):
    """A PushTensors of the PS MLP step's four float32 parameters (~39 KB: over ``COPIED``)."""
    key = "/job:ps/replica:0/task:0/device:CPU:0;1f2e;/job:worker/replica:0/task:0/device:CPU:0;"
    return PushTensors(step_id, [TensorEntry(f"{key}{name}/read:0;0:0",
                                             rng.standard_normal(shape).astype(np.float32))
                                 for name, shape in (("w1", (64, 128)), ("b1", (128,)),
                                                     ("w2", (128, 10)), ("b2", (10,)))])


def test_a_push_over_16_kib_decodes_by_offsets_where_it_lies():
    rng = np.random.default_rng(3)
    _learnt(_frame(_push(2**33 + 1, rng)), _frame(_push(2**33 + 2, rng)))
    message = _push(2**33, rng)
    frame = _frame(message)
    assert frame_templates.COPIED < len(frame) <= frame_templates.MAX_FRAME
    buffer = bytearray(frame)  # (a server's read buffer, reused for its next read)
    taken = _taken()
    got = _whole(memoryview(buffer))
    assert _taken() == taken + 1
    _same(got, wire.decode(frame, LIMITS))
    _same(got, message)
    buffer[:] = bytes(len(buffer))  # the values are the message's own, not the buffer's
    _same(got, message)


def test_no_damaged_push_over_16_kib_is_taken():
    rng = np.random.default_rng(4)
    frame = _frame(_push(2**20, rng))
    _learnt(_frame(_push(2**21, rng)), frame)
    header_bits = (frame.index(b"/read:0;0:0", frame.rindex(b"b2")) + 16) * 8
    taken = _taken()
    for bit, damaged in one_bit_flips(frame):  # every bit of the prefix and header, then a
        if bit >= header_bits and bit % 1021:   # sample of the segments' and trailers' bits
            continue
        assert _whole(memoryview(bytearray(damaged))) is None, f"bit {bit} flipped was decoded"
        with pytest.raises(wire.RemoteProtocolError):
            wire.decode(damaged, LIMITS)
    assert _taken() == taken


def _bytes_push(step_id, size, fill, checksums=True, dtype=np.uint8, key="k:0"):
    """A PushTensors of one tensor whose frame is ``size`` bytes long."""
    def push(n):
        value = np.full(n // np.dtype(dtype).itemsize, fill, dtype)
        return PushTensors(step_id, [TensorEntry(key, value)])
    n = size - 256
    for _ in range(8):
        got = len(_frame(push(n), checksums))
        if got == size:
            return push(n)
        n += size - got
    raise AssertionError(f"no frame of {size} bytes")


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("size", [frame_templates.COPIED - 1, frame_templates.COPIED,
                                  frame_templates.COPIED + 1, frame_templates.MAX_FRAME - 1,
                                  frame_templates.MAX_FRAME, frame_templates.MAX_FRAME + 1])
def test_frames_either_side_of_the_limits_decode_and_keep_no_hold_on_the_buffer(size,
                                                                                checksums):
    wire.decode(_frame(_bytes_push(2**33, size, 1, checksums), checksums), LIMITS)
    assert _whole(_frame(_bytes_push(2**33 + 1, size, 2, checksums), checksums)) is not None
    assert frame_templates.known(size) == (size <= frame_templates.MAX_FRAME)
    message = _bytes_push(2**33 + 2, size, 3, checksums)
    buffer = bytearray(_frame(message, checksums))
    assert len(buffer) == size
    taken = _taken()
    got = _whole(memoryview(buffer))
    assert _taken() == taken + (size <= frame_templates.MAX_FRAME)
    _same(got, message)
    buffer.extend(b"\0")  # a BufferError if anything kept a view of the buffer
    buffer[:] = bytes(len(buffer))
    _same(got, message)


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("case, other", [(0, dict(dtype=np.int16)), (1, dict(dtype=np.float16)),
                                         (2, dict(shape=(100, 400))), (3, dict(key="j:0"))],
                         ids=["int16", "float16", "shape", "key"])
def test_a_frame_of_a_template_s_length_but_another_tensor_is_not_taken(checksums, case, other):
    def push(step_id, dtype=np.uint16, shape=(200, 200), key="k:0"):
        value = np.arange(40_000).astype(dtype).reshape(shape)
        return PushTensors(step_id, [TensorEntry(key, value)])
    base = 2**34 + 8 * case + 4 * checksums  # (headers no other case validated: learnt anew)
    _learnt(_frame(push(base), checksums), _frame(push(base + 1), checksums))
    message = push(base + 2, **other)
    frame = _frame(message, checksums)
    assert frame_templates.known(len(frame))
    taken = _taken()
    got = _whole(memoryview(bytearray(frame)))
    assert _taken() == taken
    _same(got if got is not None else wire.decode(frame, LIMITS), message)


def test_forget_graph_drops_that_graph_s_header_and_frame_templates_only():
    # Two graphs' RunGraphs of one length share a list of templates: the deregistered one's go
    # (``repeat_frames.forget_graph``), the other's still read its frames; the dropped
    # graph's next frames decode in full, then teach their templates again.
    from transports import header_templates, repeat_frames
    rng = np.random.default_rng(4)
    mine, other = "sess/1/abcd", "sess/2/abcd"
    for handle in (mine, other):
        _learnt(_frame(_run_graph(9, 1, rng, handle)), _frame(_run_graph(10, 2, rng, handle)))
    kept = frame_templates.statistics()["kept"]
    assert len(frame_templates._by_size[len(_frame(_run_graph(9, 1, rng)))]) == 2

    def handles():
        return ({f.fields["graph_handle"] for fs in frame_templates._by_size.values()
                 for f in fs},
                {t.payload["graph_handle"] for ts in header_templates._templates.values()
                 for t in ts})

    assert handles() == ({mine, other}, {mine, other})
    repeat_frames.forget_graph(mine)
    assert handles() == ({other}, {other})
    assert frame_templates.statistics()["kept"] == kept - 1
    taken = _taken()
    message = _run_graph(11, 3, rng, other)
    _same(_whole(_frame(message)), message)
    assert _taken() == taken + 1
    message = _run_graph(12, 3, rng, mine)
    assert _whole(_frame(message)) is None
    _same(wire.decode(_frame(message), LIMITS), message)
    message = _run_graph(13, 4, rng, mine)
    _same(_whole(_frame(message)), message)
    assert handles() == ({mine, other}, {mine, other})
    repeat_frames.forget_graph("sess/9/none")  # (no graph's: nothing changes)
    assert handles() == ({mine, other}, {mine, other})
