"""Every raw tensor segment is followed by the CRC32C of its bytes, summed by the decoder as
they land (whole, one byte at a time, or through ``get_buffer``): a flipped bit anywhere in
them or in the trailer is ``ChecksumMismatch`` naming the tensor; a writer that defers the
trailers fills them while it hands out the pieces; hostile checksum fields are protocol
errors; a server given a damaged request answers 400 and keeps serving."""

from __future__ import annotations

import google_crc32c
import msgpack
import numpy as np
import pytest
import trio
from transport_fakes import FakeWorker

from transports import checksum, wire
from transports.http.client import TrioHttpChannel
from transports.http.protocol import SEND_CHUNK_BYTES, send_pieces
from transports.http.server import open_http_server
from transports.wire import (
    CHECKSUM_KEY, ChecksumMismatch, Decoder, RemoteProtocolError, RunGraph, TensorEntry, decode,
    encode,
)

GENEROUS = 20


def _message():
    return RunGraph("g/1", 7, [
        TensorEntry("a:0", np.arange(1000, dtype=np.float32)),
        TensorEntry("s:0", np.array([b"x", b"yz"], dtype=object)),
        TensorEntry("e:0", np.zeros((0, 3), np.int64)),
        TensorEntry("b:0", np.linspace(0, 1, 77).astype(np.float64))], ["a:0"])


def _frame(message, checksums=None):
    return bytearray(b"".join(bytes(b) for b in encode(message, checksums=checksums)))


def _header(data):
    length = int.from_bytes(data[4:8], "little")
    start = 16 if bytes(data[:4]) == wire.CHECKED_MAGIC else 8
    return msgpack.unpackb(bytes(data[start:start + length])), start + length


def _segments(data):
    """``[(key, start, nbytes)]`` of the raw segments of a frame (a trailer after each)."""
    header, offset = _header(data)
    out = []
    for d in header["tensors"]:
        if d["nbytes"]:
            offset += -offset % wire.ALIGNMENT
            out.append((d["key"], offset, d["nbytes"]))
            offset += d["nbytes"] + (4 if d.get(CHECKSUM_KEY) else 0)
    return out


def _feed(data, how):
    decoder = Decoder()
    if how == "whole":
        decoder.receive_data(bytes(data))
    elif how == "bytewise":
        for i in range(len(data)):
            decoder.receive_data(data[i:i + 1])
    else:  # what the HTTP transports do: recv_into the lent buffer, in odd-sized pieces
        pos = 0
        while pos < len(data):
            try:
                view = decoder.get_buffer()
            except wire.LocalProtocolError:
                break  # the frame broke the protocol: next_event raises it
            n = min(len(view), 333, len(data) - pos)
            view[:n] = data[pos:pos + n]
            decoder.buffer_updated(n)
            pos += n
    if how != "lent" or pos == len(data):
        decoder.receive_data(b"")
    return decoder.next_event()


def test_raw_segments_carry_their_crc32c_and_others_none():
    data = _frame(_message())
    header, _ = _header(data)
    by_key = {d["key"]: d for d in header["tensors"]}
    assert by_key["a:0"][CHECKSUM_KEY] is True
    assert CHECKSUM_KEY not in by_key["s:0"] and CHECKSUM_KEY not in by_key["e:0"]
    _, start, nbytes = _segments(data)[0]
    assert bytes(data[start + nbytes:start + nbytes + 4]) == google_crc32c.value(
        np.arange(1000, dtype=np.float32).tobytes()).to_bytes(4, "little")
    got = decode(bytes(data))
    np.testing.assert_array_equal(got.feeds[3].value, _message().feeds[3].value)


@pytest.mark.parametrize("how", ["whole", "bytewise", "lent"])
def test_a_flipped_bit_in_any_raw_segment_is_a_checksum_mismatch(how):
    clean = _frame(_message())
    for key, start, nbytes in _segments(clean):
        offsets = [start, start + nbytes // 2, start + nbytes - 1, start + nbytes + 3]
        if how == "bytewise":
            offsets = offsets[1:2]  # a byte at a time is slow: one offset per tensor
        for offset in offsets:
            damaged = bytearray(clean)
            damaged[offset] ^= 1 << (offset % 8)
            with pytest.raises(ChecksumMismatch) as info:
                _feed(damaged, how)
            assert info.value.key == key and f"tensor {key!r}" in str(info.value)
            assert isinstance(info.value, RemoteProtocolError)
        assert _feed(clean, how).feeds[0].key == "a:0"


def test_checksums_off_sends_the_old_descriptors_and_nothing_is_checked(monkeypatch):
    data = _frame(_message(), checksums=False)
    header, _ = _header(data)
    assert all(CHECKSUM_KEY not in d for d in header["tensors"])
    monkeypatch.setattr(checksum, "_enabled", False)
    assert _frame(_message()) == data
    key, start, _ = _segments(data)[0]
    data[start] ^= 1
    assert decode(bytes(data)).feeds[0].value[0] != 0  # damaged, and nobody can tell


def _header_only(header):
    """Feed a frame's prefix and (edited) header: the decoder judges it before any byte."""
    packed = msgpack.packb(header, use_bin_type=True)
    decoder = Decoder()
    decoder.receive_data(wire.MAGIC + len(packed).to_bytes(4, "little") + packed)
    return decoder.next_event()


@pytest.mark.parametrize("bad", [-1, 1 << 32, False, 1, "0", 1.5, None])
def test_hostile_checksum_fields_are_protocol_errors(bad):
    data = _frame(_message())
    header, _ = _header(data)
    header["tensors"][0][CHECKSUM_KEY] = bad
    with pytest.raises(RemoteProtocolError, match="crc32c must be true"):
        _header_only(header)


def test_a_checksum_on_a_tensor_without_raw_bytes_is_refused():
    data = _frame(_message())
    header, _ = _header(data)
    header["tensors"][1][CHECKSUM_KEY] = True  # the string tensor
    with pytest.raises(RemoteProtocolError, match="only describes raw bytes"):
        _header_only(header)


def test_deferred_trailers_are_filled_while_the_pieces_are_handed_out():
    big = np.random.default_rng(1).random(3 * SEND_CHUNK_BYTES // 8 + 5)  # chunks and a tail
    message = RunGraph("g/1", 7, [TensorEntry("big:0", big),
                                  TensorEntry("small:0", np.arange(9, dtype=np.int16))], [])
    buffers = encode(message, defer_checksums=True)
    trailers = [b for b in buffers if isinstance(b, wire.ChecksumTrailer)]
    assert len(trailers) == 2 and all(t.pending and t == bytes(4) for t in trailers)
    pieces = [bytes(p) for p in send_pieces(b"HEAD", buffers)]
    assert pieces[0].startswith(b"HEAD")
    assert max(len(p) for p in pieces) == SEND_CHUNK_BYTES  # the big tensor went in chunks
    assert b"".join(pieces)[4:] == bytes(_frame(message))  # the same bytes as summed eagerly
    got = decode(b"".join(pieces)[4:])
    np.testing.assert_array_equal(got.feeds[0].value, big)


def test_extend_sums_views_of_any_layout_like_bytes():
    array = np.arange(4096, dtype=np.float64)
    whole = google_crc32c.value(array.tobytes())
    view = memoryview(array.view(np.uint8))
    assert checksum.extend(0, view) == whole
    assert checksum.extend(checksum.extend(0, view[:1000]), view[1000:]) == whole
    assert checksum.extend(0, memoryview(array)) == whole  # a typed view
    assert checksum.extend(0, bytearray(array.tobytes())) == whole
    assert checksum.extend(0, b"") == 0 and checksum.extend(9, memoryview(b"")) == 9


def test_without_the_c_function_views_are_summed_from_a_copy(monkeypatch):
    array = np.arange(999, dtype=np.int32)
    monkeypatch.setattr(checksum, "_FOLDING", None)
    monkeypatch.setattr(checksum, "_EXTEND", None)
    assert checksum.implementation() == "google_crc32c (copies)"
    assert checksum.extend(0, memoryview(array)) == google_crc32c.value(array.tobytes())


@pytest.mark.parametrize("folding", [True, False])
def test_every_implementation_gives_google_crc32c_s_sums(monkeypatch, folding):
    """crc32c_rs (when installed) and google_crc32c through ctypes agree at every size and
    alignment, chained or whole, typed or strided views."""
    if folding and checksum._FOLDING is None:
        pytest.skip("crc32c_rs is not installed (google_crc32c sums the wire)")
    if not folding:
        monkeypatch.setattr(checksum, "_FOLDING", None)
    data = np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8)
    view = memoryview(data)
    for start, stop in ((0, 0), (0, 1), (3, 68), (1, 4097), (7, 5000), (0, 5000)):
        whole = google_crc32c.value(data[start:stop].tobytes())
        assert checksum.extend(0, view[start:stop]) == whole
        middle = (start + stop) // 2
        assert checksum.extend(checksum.extend(0, view[start:middle]), view[middle:stop]) == whole
    floats = np.arange(600, dtype=np.float32)
    assert checksum.extend(0, memoryview(floats)[::3]) == google_crc32c.value(
        floats[::3].tobytes())
    assert checksum.implementation() == ("crc32c_rs" if folding else "google_crc32c")


@pytest.mark.parametrize("region", ["tensor", "header", "prefix"])
async def test_a_damaged_request_is_a_400_and_the_server_keeps_serving(region):
    async with open_http_server(FakeWorker()) as server:
        body = _frame(RunGraph("g/1", 1, [TensorEntry("x:0", np.ones(4096, np.float32))], []))
        _, start, _ = _segments(body)[0]
        body[{"tensor": start + 100, "header": 30, "prefix": 6}[region]] ^= 0x20
        with trio.fail_after(GENEROUS):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with stream:
                await stream.send_all(b"POST /v1/steps/1/run HTTP/1.1\r\nContent-Length: %d\r\n"
                                      b"\r\n" % len(body) + bytes(body))
                answer = b""
                while b"\r\n\r\n" not in answer or b"Checksum" not in answer:
                    data = await stream.receive_some()
                    if not data:
                        break
                    answer += data
            assert answer.startswith(b"HTTP/1.1 400") and b"Checksum does not match" in answer
            # damaged in transit, not malformed: the answer names DATA_LOSS for the client
            assert b"\r\nX-Asyncflow-Code: DATA_LOSS\r\n" in answer.partition(b"\r\n\r\n")[0]
            async with TrioHttpChannel(server.address) as channel:
                assert (await channel.health()).task


def test_the_environment_turns_a_process_checksums_off():
    import os
    import subprocess
    import sys
    code = ("import numpy as np; from transports import wire; "
            "b = wire.encode(wire.RunGraph('g', 1, [wire.TensorEntry('x', np.ones(3))], [])); "
            "print(any(isinstance(x, wire.ChecksumTrailer) for x in b))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for value, expected in (("0", "False"), ("1", "True")):
        env = dict(os.environ, ASYNCFLOW_WIRE_CHECKSUMS=value, PYTHONPATH=root)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout
        assert out.strip() == expected


def test_a_frame_cut_in_its_trailer_is_truncated_and_counts_the_trailer():
    data = bytes(_frame(RunGraph("g", 1, [TensorEntry("x", np.ones(100, np.float32))], [])))
    for missing in (1, 4, 5):
        with pytest.raises(RemoteProtocolError, match=f"{missing} more bytes were announced"):
            decode(data[:-missing])


# -- every byte of a checked frame is covered: prefix, header (strings in it), padding, tensors


def _regions(data):
    """``{offset: region}`` of every byte of a checked frame (see docs/protocol.md)."""
    header, end = _header(data)
    regions = {i: "prefix" for i in range(16)}
    regions.update({i: "header" for i in range(16, end)})
    strings = [s for d in header["tensors"] if d["strings"] for s in d["strings"]]
    for item in strings:  # where the string items lie inside the header
        at = bytes(data).find(item, 16)
        regions.update({i: "string" for i in range(at, at + len(item))})
    offset = end
    for d in header["tensors"]:
        if d["nbytes"]:
            pad = -offset % wire.ALIGNMENT
            regions.update({i: "padding" for i in range(offset, offset + pad)})
            offset += pad
            regions.update({i: "tensor" for i in range(offset, offset + d["nbytes"])})
            offset += d["nbytes"]
            regions.update({i: "trailer" for i in range(offset, offset + 4)})
            offset += 4
    assert offset == len(data) == len(regions)
    return regions


def _small_message():
    return RunGraph("g/1", 7, [
        TensorEntry("s:0", np.array([b"first string", b"\x00\xff" * 20], dtype=object)),
        TensorEntry("a:0", np.arange(5, dtype=np.float32))], ["a:0", "s:0"])


@pytest.mark.parametrize("how", ["whole", "bytewise", "lent"])
def test_a_flipped_bit_at_any_offset_of_a_checked_frame_is_caught(how):
    """Prefix, header, a string tensor's items, padding, numeric bytes, trailer: one flipped
    bit anywhere is ChecksumMismatch (never a value, never another error) naming what was hit."""
    clean = _frame(_small_message())
    assert bytes(clean[:4]) == wire.CHECKED_MAGIC
    regions = _regions(clean)
    assert set(regions.values()) == {"prefix", "header", "string", "padding", "tensor",
                                     "trailer"}
    expected = {"prefix": ("frame magic", "frame prefix"), "header": ("frame header",),
                "string": ("frame header",), "padding": ("padding before tensor 'a:0'",),
                "tensor": ("tensor 'a:0'",), "trailer": ("tensor 'a:0'",)}
    offsets = range(len(clean)) if how != "bytewise" else range(0, len(clean), 3)
    for offset in offsets:
        for bit in ((offset % 8,) if how != "whole" else range(8)):
            damaged = bytearray(clean)
            damaged[offset] ^= 1 << bit
            with pytest.raises(ChecksumMismatch) as info:
                _feed(damaged, how)
            assert info.value.part.startswith(expected[regions[offset]]), (offset, info.value)
            assert (info.value.key == "a:0") == (regions[offset] in ("tensor", "trailer"))
    got = _feed(clean, how)
    assert got.feeds[0].value.tolist() == [b"first string", b"\x00\xff" * 20]


def test_a_checked_frame_cut_anywhere_is_truncated_never_a_value():
    clean = bytes(_frame(_small_message()))
    for end in range(1, len(clean)):
        with pytest.raises(RemoteProtocolError):
            decode(clean[:end])


def test_checksums_off_sends_the_unchecked_prefix_and_both_kinds_decode():
    message = _small_message()
    plain, checked = _frame(message, checksums=False), _frame(message)
    assert bytes(plain[:4]) == wire.MAGIC and bytes(checked[:4]) == wire.CHECKED_MAGIC
    assert len(checked) > len(plain)
    decoder = Decoder()
    decoder.receive_data(bytes(plain + checked + plain))  # one stream, mixed frames
    for _ in range(3):
        assert decoder.next_event().feeds[0].value[1] == b"\x00\xff" * 20
    assert decoder.next_event() is wire.NEED_DATA


def test_junk_that_is_not_one_bit_from_the_magic_is_still_a_protocol_error():
    for junk in (b"GET / HTTP/1.1\r\n\r\n", b"AFWX" + bytes(20), b"\x00" * 32):
        with pytest.raises(RemoteProtocolError, match="bad magic") as info:
            decode(junk)
        assert not isinstance(info.value, ChecksumMismatch)
