"""Frames as bytes, for the tests of frames encoded from kept templates (repeated frames,
prepared frames, a step's RunGraph): ``no_templates``, an autouse fixture for a module that
imports it, starts and ends each test with no template kept; ``frame_bytes`` joins an
encode's buffers (filling a pending checksum trailer); ``full_frame`` is the frame a full
encode gives, no template consulted and none kept."""
import pytest

from transports import checksum, frame_templates, header_templates, repeat_frames, wire

LIMITS = wire.DEFAULT_LIMITS


@pytest.fixture(autouse=True)
def no_templates():
    _forget_templates()
    yield
    _forget_templates()


def _forget_templates():
    repeat_frames._templates_by_key.clear()
    header_templates._templates.clear()
    frame_templates.forget_all()


def frame_bytes(buffers):
    for buffer in buffers:
        if isinstance(buffer, checksum.ChecksumTrailer) and buffer.pending:
            buffer.fill()
    return b"".join(bytes(b) for b in buffers)


def full_frame(message, **kwargs):
    """The frame a full encode gives (no template consulted, none kept)."""
    kept = dict(repeat_frames._templates_by_key)
    repeat_frames._templates_by_key.clear()
    try:
        return frame_bytes(wire.encode(message, LIMITS, **kwargs))
    finally:
        repeat_frames._templates_by_key.clear()
        repeat_frames._templates_by_key.update(kept)
