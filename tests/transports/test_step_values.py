"""A step's reply read into its fetches' values by its frame template
(``transports.frame_templates.tensor_values``, the client's direct step): the values the full
decoder gives, and None (the caller decodes) for any frame that is not such a reply: no
template yet, another class, a reply with step stats, another length, under other limits, or
damaged anywhere."""
import dataclasses

import numpy as np
import pytest

from bit_flips import one_bit_flips
from transports import checksum, frame_templates, wire
from transports.messages import ErrorReply, NodeExecStats, RunGraphReply, StepStats, TensorEntry

LIMITS = wire.DEFAULT_LIMITS


def _frame(message, checksums=True):
    buffers = wire.encode(message, LIMITS, checksums=checksums)
    for buffer in buffers:
        if isinstance(buffer, checksum.ChecksumTrailer) and buffer.pending:
            buffer.fill()
    return b"".join(bytes(b) for b in buffers)


def _reply(rng, step_stats=None):
    return RunGraphReply([TensorEntry("mul:0", np.asarray(rng.standard_normal(), np.float32)),
                          TensorEntry("e:0", np.zeros((0, 2), np.int64)),
                          TensorEntry("m:0", rng.standard_normal((2, 3)))], step_stats)


def _learnt(frame):
    """Decode ``frame`` as a client does step after step, until a template of it is kept."""
    decoder = wire.Decoder(LIMITS)
    decoder.receive_data(frame)
    decoder.next_event()  # (its header validated)
    for _ in range(2):
        assert wire.decode_repeated(memoryview(frame), LIMITS) is not None
    assert frame_templates.known(len(frame))


@pytest.mark.parametrize("checksums", [True, False])
def test_a_replys_values_are_the_decoders(checksums):
    rng = np.random.default_rng(0)
    first = _frame(_reply(rng), checksums)
    assert frame_templates.tensor_values(first, LIMITS, RunGraphReply) is None  # none kept
    _learnt(first)
    for _ in range(5):
        message = _reply(rng)
        values = frame_templates.tensor_values(_frame(message, checksums), LIMITS,
                                               RunGraphReply)
        assert len(values) == 3
        for value, entry in zip(values, message.tensors):
            assert value.dtype == entry.value.dtype and value.shape == entry.value.shape
            assert np.array_equal(value, entry.value) and value.flags.writeable


def test_no_values_for_another_class_step_stats_or_limits():
    rng = np.random.default_rng(1)
    frame = _frame(_reply(rng))
    _learnt(frame)
    assert frame_templates.tensor_values(frame, LIMITS, ErrorReply) is None
    other = dataclasses.replace(LIMITS, max_tensors=LIMITS.max_tensors - 1)
    assert frame_templates.tensor_values(frame, other, RunGraphReply) is None
    traced = _frame(_reply(rng, StepStats([NodeExecStats("mul", "Mul", "/cpu:0", 1, 2)])))
    for _ in range(3):  # (a record in its header: no template of it is ever kept)
        decoder = wire.Decoder(LIMITS)
        decoder.receive_data(traced)
        assert decoder.next_event().step_stats is not None
        assert wire.decode_repeated(memoryview(traced), LIMITS) is None
    assert frame_templates.tensor_values(traced, LIMITS, RunGraphReply) is None
    assert frame_templates.tensor_values(frame + b"\0", LIMITS, RunGraphReply) is None


def test_a_damaged_reply_gives_no_values():
    rng = np.random.default_rng(2)
    frame = _frame(_reply(rng))
    _learnt(frame)
    assert frame_templates.tensor_values(frame, LIMITS, RunGraphReply) is not None
    for _, damaged in one_bit_flips(frame):
        assert frame_templates.tensor_values(damaged, LIMITS, RunGraphReply) is None
