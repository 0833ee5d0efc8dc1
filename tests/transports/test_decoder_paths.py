"""The Decoder's three ways in agree on every input, valid or damaged.

A frame reaches :class:`transports.wire.Decoder` whole (one ``receive_data``: the fast paths
that take a prefix, a header or a whole tensor segment in one step), in arbitrary pieces (the
byte-gathering path) or through ``get_buffer``/``buffer_updated`` (straight into the arrays).
For RunGraph requests and RunGraphReply answers with tensors of several dtypes, checksums on
and off, each of those gives the same outcome: the same messages, then the same end (CLOSED)
or the same error type, which is always one of the codec's (RemoteProtocolError and its
subclasses). A checked frame never decodes to anything but its own message: one flipped bit
anywhere in it is a ChecksumMismatch.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports import wire
from transports.wire import CLOSED, NEED_DATA, ChecksumMismatch, Decoder, LocalProtocolError, \
    RemoteProtocolError, TensorEntry, encode

EXAMPLES = settings.default.max_examples
DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "string"]


@st.composite
def tensors(draw) -> np.ndarray | None:
    name = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    size = int(np.prod(shape))
    raw = draw(st.binary(min_size=size * 8, max_size=size * 8))
    if name == "string":
        items = np.empty(size, dtype=object)
        items[:] = [raw[i:i + draw(st.integers(0, 3))] for i in range(size)]
        return items.reshape(shape)
    dtype = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
    if name == "bool":
        return (np.frombuffer(raw, np.uint8)[:size] & 1).astype(bool).reshape(shape)
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(raw[:size * itemsize], dtype=dtype).reshape(shape).copy()


entries = st.builds(TensorEntry, key=st.text(max_size=5), value=st.none() | tensors(),
                    is_dead=st.booleans())
messages = st.one_of(
    st.builds(wire.RunGraph, graph_handle=st.text(max_size=6), step_id=st.integers(0, 2**40),
              feeds=st.lists(entries, max_size=3), fetch_keys=st.lists(st.text(max_size=4),
                                                                       max_size=2),
              timeout_ms=st.none() | st.integers(0, 10**6)),
    st.builds(wire.RunGraphReply, tensors=st.lists(entries, max_size=3)))


def _drain(decoder: Decoder) -> tuple[list, type | None]:
    """The messages the decoder completed, then None at CLOSED or the error's type."""
    out = []
    try:
        while (event := decoder.next_event()) is not CLOSED:
            assert event is not NEED_DATA, "the stream ended: the decoder must have decided"
            out.append(event)
    except RemoteProtocolError as exc:
        return out, type(exc)
    return out, None


def _whole(data: bytes) -> tuple[list, type | None]:
    decoder = Decoder()
    if data:  # (b"" is the end of the stream)
        decoder.receive_data(data)
    decoder.receive_data(b"")
    return _drain(decoder)


def _pieces(data: bytes, sizes: list[int]) -> tuple[list, type | None]:
    decoder, pos, i = Decoder(), 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        decoder.receive_data(memoryview(data)[pos:pos + n])
        pos, i = pos + n, i + 1
    decoder.receive_data(b"")
    return _drain(decoder)


def _lent(data: bytes, sizes: list[int]) -> tuple[list, type | None]:
    """As a socket reader feeds it: ``recv_into`` the lent buffer, at most ``sizes[i]`` bytes."""
    decoder, pos, i = Decoder(), 0, 0
    while pos < len(data):
        try:
            view = decoder.get_buffer()
        except LocalProtocolError:
            break  # the stream broke the protocol: next_event raises it
        n = min(len(view), sizes[i % len(sizes)], len(data) - pos)
        view[:n] = data[pos:pos + n]
        decoder.buffer_updated(n)
        pos, i = pos + n, i + 1
    if pos == len(data):
        decoder.receive_data(b"")
    return _drain(decoder)


def _outcomes(data: bytes, sizes: list[int]) -> tuple[list, type | None]:
    """The one outcome of every path (asserted equal), never an exception of another kind."""
    results = [_whole(data), _pieces(data, sizes), _pieces(data, [1]), _lent(data, sizes)]
    first = results[0]
    for name, other in zip(("pieces", "bytewise", "lent"), results[1:]):
        assert other == first, f"the {name} path gave {other}, the whole buffer {first}"
    return first


sizes_ = st.lists(st.integers(1, 200), min_size=1, max_size=6)


@settings(max_examples=3 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.booleans(), sizes_)
def test_valid_frames_decode_to_themselves_on_every_path(message, checksums, sizes):
    data = b"".join(encode(message, checksums=checksums))
    assert data[:4] == (wire.CHECKED_MAGIC if checksums else wire.MAGIC)
    assert _outcomes(data, sizes) == ([message], None)
    assert _outcomes(data + data, sizes) == ([message, message], None)


@settings(max_examples=5 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, sizes_, st.data())
def test_one_flipped_bit_of_a_checked_frame_is_a_checksum_mismatch(message, sizes, data):
    frame = bytearray(b"".join(encode(message, checksums=True)))
    at = data.draw(st.integers(0, len(frame) - 1), label="byte")
    frame[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    assert _outcomes(bytes(frame), sizes) == ([], ChecksumMismatch)


@settings(max_examples=5 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.booleans(), sizes_, st.data())
def test_damaged_frames_give_one_outcome_on_every_path(message, checksums, sizes, data):
    frame = b"".join(encode(message, checksums=checksums))
    damaged = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4), label="damages")):
        if not damaged:
            break
        at = data.draw(st.integers(0, len(damaged) - 1), label="at")
        action = data.draw(st.sampled_from(["set", "xor", "insert", "delete", "cut"]))
        if action == "set":
            damaged[at] = data.draw(st.integers(0, 255))
        elif action == "xor":
            damaged[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "insert":
            damaged[at:at] = data.draw(st.binary(min_size=1, max_size=70))
        elif action == "delete":
            del damaged[at:at + data.draw(st.integers(1, 70))]
        else:
            del damaged[at:]
    decoded, error = _outcomes(bytes(damaged), sizes)
    if bytes(damaged) == frame:
        assert (decoded, error) == ([message], None)
    elif not damaged:  # a stream that ends before any frame
        assert (decoded, error) == ([], None)
    elif checksums:  # a checked frame is its own message or nothing: never another, silently
        assert error is not None and decoded in ([], [message])
    assert error is None or issubclass(error, RemoteProtocolError)


@settings(max_examples=3 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.booleans(), sizes_, st.data())
def test_truncated_frames_are_refused_on_every_path(message, checksums, sizes, data):
    frame = b"".join(encode(message, checksums=checksums))
    cut = data.draw(st.integers(1, len(frame) - 1))
    decoded, error = _outcomes(frame[:cut], sizes)
    assert decoded == [] and error is not None and issubclass(error, RemoteProtocolError)
    # A frame followed by a cut one: the first arrives, then the error.
    assert _outcomes(frame + frame[:cut], sizes) == ([message], error)


def test_a_damaged_magic_gets_one_verdict_however_it_arrives():
    # Found by the tests above: fed byte by byte, b"\x01" (one bit from b"A") was judged a
    # ChecksumMismatch before the rest of the magic b"FWF" (three bits from b"AFWC") arrived.
    frame = b"".join(encode(wire.RunGraphReply([]), checksums=False))
    for damaged, error in ((b"\x01" + frame[1:], RemoteProtocolError),
                           (b"\x01" + b"".join(encode(wire.RunGraphReply([]), checksums=True))[1:],
                            ChecksumMismatch)):
        assert _outcomes(damaged, [1]) == ([], error)
        assert _outcomes(damaged[:2], [1]) == ([], RemoteProtocolError)  # cut: never judged
