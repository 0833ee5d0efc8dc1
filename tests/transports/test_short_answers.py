"""A short step's answer in one buffer (``transports.http.bare_calls.step_answer``): the
reply frame of ``Prepared.values_frame`` after the room for the answer's head is the frame
``encode_values`` gives, byte for byte, for any room, with checksums or without, and None for
values of another signature; ``bare_io.write_one`` writes it whole or hands back exactly what
the kernel did not take."""
import os
import socket

import numpy as np
import pytest

from transports import checksum, wire
from transports.http import bare_io
from transports.messages import RunGraphReply, TensorEntry

LIMITS = wire.DEFAULT_LIMITS


def _reply(rng):
    return RunGraphReply([TensorEntry("mul:0", np.asarray(rng.standard_normal(), np.float32)),
                          TensorEntry("e:0", np.zeros((0, 2), np.int64)),
                          TensorEntry("m:0", rng.standard_normal((2, 3)))])


def _prepared(rng):
    """A reply signature prepared as the bare server prepares its replies' (learnt from the
    third frame on: the first two teach its templates)."""
    prepared = None
    for _ in range(3):
        _, prepared = wire.encode_prepared(prepared, _reply(rng), LIMITS, defer_checksums=True)
    assert prepared is not None
    return prepared


@pytest.mark.parametrize("checksums", [True, False])
def test_a_frame_after_room_is_encode_values_frame(checksums):
    rng = np.random.default_rng(7)
    saved = checksum.enabled()
    checksum.set_enabled(checksums)
    try:
        prepared = _prepared(rng)
        for room in (16, 0, 24, 16):  # (the room changing between calls)
            values = [entry.value for entry in _reply(rng).tensors]
            (plain,) = prepared.encode_values(values, checksums)
            frame = prepared.values_frame(values, checksums, room)
            assert type(frame) is bytearray
            assert bytes(frame[:room]) == bytes(room)
            assert bytes(frame[room:]) == bytes(plain)
            decoded = wire.decode(bytes(frame[room:]), LIMITS)
            for entry, value in zip(decoded.tensors, values):
                np.testing.assert_array_equal(entry.value, value)
            # Two frames of one signature share nothing (each a fresh buffer).
            assert prepared.values_frame(values, checksums, room) is not frame
    finally:
        checksum.set_enabled(saved)


def test_values_of_another_signature_give_no_frame():
    rng = np.random.default_rng(8)
    prepared = _prepared(rng)
    on = checksum.enabled()
    values = [entry.value for entry in _reply(rng).tensors]
    assert prepared.values_frame(values, on, 16) is not None
    for other in ([values[0].astype(np.float64), *values[1:]],  # another dtype
                  [np.zeros(2, np.float32), *values[1:]],  # another shape
                  [values[0], values[1], np.asfortranarray(np.ones((2, 3)))[:, ::-1]],
                  values[:2]):  # too few
        assert prepared.values_frame(other, on, 16) is None
        assert prepared.encode_values(other, on) is None
    assert prepared.values_frame(values, not on, 16) is None  # the other checksum setting


def test_write_one_writes_whole_or_hands_back_the_rest():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        small = bytearray(b"answer" * 40)
        assert bare_io.write_one(a, small) == b""
        assert os.read(b.fileno(), 1 << 16) == bytes(small)
        large = bytearray(os.urandom(4 << 20))  # more than a Unix socket's buffer takes
        rest = bare_io.write_one(a, large)
        assert type(rest) is bytes and 0 < len(rest) < len(large)
        got = bytearray()
        while True:
            try:
                got += os.read(b.fileno(), 1 << 20)
            except BlockingIOError:
                break
        assert bytes(got) + rest == bytes(large)
        full = bytearray(b"x" * 64)  # nothing taken: the whole of it handed back
        while True:
            try:
                os.write(a.fileno(), b"y" * 4096)
            except BlockingIOError:
                break
        assert bare_io.write_one(a, full) == bytes(full)
        a.close()
        with pytest.raises(OSError):
            bare_io.write_one(a, small)  # (closed: EBADF, as write_now raises)
    finally:
        a.close()
        b.close()


def test_write_one_to_a_peer_gone_raises_broken_pipe():
    """A peer gone before the answer: EPIPE (an ``OSError``: the bare server's ``_BROKEN``,
    the call counted 499 and its connection closed), as ``write_now``'s ``writev`` raises."""
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        b.close()
        with pytest.raises(BrokenPipeError):
            bare_io.write_one(a, bytearray(b"answer"))
        with pytest.raises(BrokenPipeError):
            bare_io.write_now(a, [b"head", b"answer"])
    finally:
        a.close()
