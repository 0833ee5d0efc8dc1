"""Frames as bytes, for the tests of frames encoded from kept templates (repeated frames,
prepared frames, a step's RunGraph; each test starts with none kept: ``tests/conftest.py``'s
``nothing_kept``): ``frame_bytes`` joins an encode's buffers (filling a pending checksum
trailer); ``full_frame`` is the frame a full encode gives, no template consulted and none
kept."""
from transports import checksum, repeat_frames, wire

LIMITS = wire.DEFAULT_LIMITS


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
