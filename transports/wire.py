"""Sans-IO codec for the worker protocol: one framing for every message, no sockets.

Theory of operation
-------------------
Every message, in every direction and over every transport, is one *frame*::

    offset 0        b"AFWC" (b"AFWF")           magic: a checked frame (one without checksums)
    offset 4        u32 little-endian H         header length
    offset 8        u32 CRC32C of the header    (AFWC only)
    offset 12       u32 CRC32C of bytes 0-11    (AFWC only)
    offset 16 (8)   H bytes                     msgpack header map
    then, per tensor that has raw bytes:
                    zero padding up to the next multiple of 64 (counted from the frame start)
                    nbytes raw little-endian element bytes, C order

The header is ``{"version": 1, "kind": str, "payload": map, "tensors": [descriptor, ...]}``.
``payload`` holds a message's plain fields (msgpack-native values only); ``tensors`` describes the
entries of its one ``list[TensorEntry]`` field, in order. A descriptor is ``{"key", "dtype",
"shape", "nbytes", "dead", "error", "strings"}``: ``dtype`` is a name from :data:`WIRE_DTYPES` or
``None`` for an entry without a value; string tensors carry their items in ``strings`` (a list of
bin) and have no raw segment; empty tensors have none either. Offsets are implied by the order, so a
receiver knows where each array starts as soon as it has the header.

Checksums: a descriptor with ``"crc32c": true`` says its raw segment is followed by a 4-byte
little-endian trailer, the CRC32C of the segment's bytes (before the next segment's padding,
which still counts from the frame start). The encoder adds them unless
:func:`transports.checksum.set_enabled` turned them off (``ASYNCFLOW_WIRE_CHECKSUMS=0``).
Because the sum comes *after* the bytes, a sender can compute it while it writes them:
``encode(..., defer_checksums=True)`` leaves each :class:`ChecksumTrailer` to be filled by
the writer (:func:`transports.http.protocol.send_pieces` sums each chunk as it hands it to
``send``), so the sum hides in the time the sender waits for the socket. The decoder sums each
segment's bytes as they land in the destination array (no second pass over a large tensor) and
raises :class:`ChecksumMismatch` (a RemoteProtocolError) naming the tensor when the trailer
differs. A descriptor without the key has no trailer and is not checked (a sender with
checksums off). The prefix and the header (descriptors, fields and the items of string
tensors, which travel in it) are checked before they are used, and non-zero padding or a
magic one bit from ``AFWC`` is damage too: one flipped bit anywhere in a checked frame is a
:class:`ChecksumMismatch` whose ``part`` says where.

Zero copies: :func:`encode` returns the header and *views* of the arrays (only non-contiguous or
big-endian arrays are converted). :class:`Decoder` validates the whole header -- schema, dtype
allowlist, shapes, byte counts and size :class:`Limits` -- before it allocates anything, then
``np.empty``-allocates every array and copies incoming bytes straight into them. A header
byte-identical to one validated before under the same limits (a reply of a repeated step) is
not parsed again: its validated fields and descriptors are reused. A socket reader
can even skip that copy: :meth:`Decoder.get_buffer` lends it the destination array's memory to
``recv_into`` (the ``asyncio.BufferedProtocol`` shape).

The decoder follows h11: :meth:`Decoder.receive_data` takes bytes (``b""`` = end of stream) and
:meth:`Decoder.next_event` returns a message, :data:`NEED_DATA` or :data:`CLOSED`. It consumes
input eagerly (so callers may reuse their buffers) and queues results; a protocol violation is
raised by ``next_event`` once the messages completed before it were handed out, and every later
call raises it again. Bytes after a frame start the next frame, so trailing junk surfaces as a
:class:`RemoteProtocolError` after the good message.

Messages are frozen dataclasses. :data:`MESSAGE_TYPES` maps each header ``kind`` to its class; the
payload schema (field names, types, required fields, the tensor field) is derived from the class
annotations, so adding a message means adding a dataclass and a table row. Payload values are
type-checked in both directions; the codec never uses ``ext_hook``, ``object_hook`` or pickle.

This module must not know about asyncflow, trio or HTTP.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

import msgpack
import numpy as np

from transports import checksum as _checksum
from transports.checksum import TRAILER_BYTES, ChecksumTrailer
from transports.counted_unpack import unpack_counted
from transports import header_templates as _templates
from transports import repeat_frames as _repeat
from transports.messages import *  # noqa: F403 -- the message classes are part of this API
from transports.messages import Message, Status, TensorEntry
from transports.messages import __all__ as _message_names
from transports import schema as _schema
from transports.schema import (
    ALIGNMENT, CACHED_HEADER_BYTES, CHECKED_MAGIC, CHECKED_PREFIX, CHECKSUM_KEY, DEFAULT_LIMITS,
    FORMAT_VERSION, HEADER_KEYS, MAGIC, PREFIX, SCHEMA_BY_CLASS, SCHEMAS, STRING_DTYPE,
    VALIDATED_HEADERS, WIRE_NAMES, ChecksumMismatch, FrameTooLarge, Limits,
    LocalProtocolError, RemoteProtocolError, Schema, SchemaMismatch, WireError, check_depth,
    check_descriptor, describe_entry, record_from_wire, record_to_wire, refuse_magic,
    remember_header, validated,
)

__all__ = [
    "ALIGNMENT", "CHECKED_MAGIC", "CHECKSUM_KEY", "CLOSED", "DEFAULT_LIMITS", "FORMAT_VERSION",
    "MAGIC", "NEED_DATA", "SMALL_HEADER_BYTES", "STRING_DTYPE", "WIRE_DTYPES", "ChecksumMismatch",
    "ChecksumTrailer", "Decoder", "FrameTooLarge", "Limits", "LocalProtocolError",
    "RemoteProtocolError", "WireError", "decode", "decode_repeated", "encode", "encode_prepared",
    "frame_size", *_message_names,
]


def __getattr__(name):  # WIRE_DTYPES loads ml_dtypes (bfloat16): built on first access
    if name == "WIRE_DTYPES":
        return _schema.WIRE_DTYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_ZEROS = bytes(ALIGNMENT)
_TRUSTED: Final = object()  # in place of a segment's running CRC32C: received unsummed
_SCRATCH_BYTES = 64 * 1024
SMALL_HEADER_BYTES: Final = 64 * 1024  # larger headers are unpacked value by value (counted)


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA: Final = _Sentinel("NEED_DATA")
"""``next_event`` result: no complete frame yet; feed more bytes."""
CLOSED: Final = _Sentinel("CLOSED")
"""``next_event`` result: the stream ended cleanly at a frame boundary."""


# ----------------------------------------------------------------------------- encoding


def encode(message: Message, limits: Limits = DEFAULT_LIMITS, checksums: bool | None = None,
           defer_checksums: bool = False) -> list[bytes | memoryview]:
    """Turn a message into the buffers of one frame, to be written in order.

    Tensor bytes are not copied: the result holds views of the arrays, which the caller must not
    modify until the buffers are written. Non-contiguous arrays are made contiguous and big-endian
    ones converted to little-endian first (those two cases copy).

    Args:
        message: an instance of a class in :data:`MESSAGE_TYPES`.
        limits: the receiver's limits; a frame that would exceed them is refused here.
        checksums: follow each raw segment with its CRC32C (None: this process's setting,
            :func:`transports.checksum.enabled`).
        defer_checksums: leave the trailers ``pending`` for the writer to fill as it sends
            (see :class:`ChecksumTrailer`); only for writers that do.

    Returns:
        Buffers (``bytes`` or byte-format ``memoryview``) whose concatenation is the frame.

    Raises:
        LocalProtocolError: unknown message type, a field of the wrong type, a payload value that
            is not msgpack-native, a dtype outside :data:`WIRE_DTYPES`, or a frame over ``limits``.
    """
    if checksums is None:
        checksums = _checksum.enabled()
    return _encode(None, message, limits, checksums, defer_checksums)[0]


def encode_prepared(prepared: _repeat.Prepared | None, message: Message,
                    limits: Limits = DEFAULT_LIMITS, defer_checksums: bool = False,
                    ) -> tuple[list[bytes | memoryview], _repeat.Prepared | None]:
    """:func:`encode`'s buffers of ``message`` (this process's checksum setting) and the
    prepared signature (:class:`transports.repeat_frames.Prepared`) to pass with the next
    message of a caller that sends one signature again and again: ``prepared`` where the
    message is of it (built without its template looked up), else the message's own (None
    when it has none yet), which costs what :func:`encode` costs."""
    return _encode(prepared, message, limits, _checksum.enabled(), defer_checksums)


def _encode(prepared, message, limits, checksums, defer_checksums) -> tuple:
    if prepared is not None:
        buffers = prepared.encode(message, limits, checksums, defer_checksums)
        if buffers is not None:
            return buffers, prepared
    schema = SCHEMA_BY_CLASS.get(type(message))
    if schema is None:
        raise LocalProtocolError(f"{type(message).__name__} is not a wire message type")
    prepared = _repeat.prepare(message, limits, checksums)
    if prepared is not None:  # a repeated message: its header from a kept template
        buffers = _repeat.frame(prepared, message, defer_checksums)
        if buffers is not None:
            return buffers, prepared
    try:
        payload = record_to_wire(schema.plain, message)
    except SchemaMismatch as exc:
        raise LocalProtocolError(exc.describe(schema.cls.__name__)) from None
    entries = getattr(message, schema.tensor_field) if schema.tensor_field else []
    if not isinstance(entries, list) or not all(isinstance(e, TensorEntry) for e in entries):
        raise LocalProtocolError(
            f"{schema.cls.__name__}.{schema.tensor_field} must be a list of TensorEntry")
    if len(entries) > limits.max_tensors:
        raise LocalProtocolError(f"{len(entries)} tensors exceed the limit of {limits.max_tensors}")
    descriptors, segments = [], []
    for entry in entries:
        descriptor, segment = describe_entry(entry, limits)
        descriptors.append(descriptor)
        if segment is not None:
            segments.append(segment)
            if checksums:
                descriptor[CHECKSUM_KEY] = True
    if sum(len(s) for s in segments) > limits.max_body_bytes:
        raise LocalProtocolError(f"{schema.kind} carries more than {limits.max_body_bytes} "
                                 "tensor bytes")
    header = {"version": FORMAT_VERSION, "kind": schema.kind, "payload": payload,
              "tensors": descriptors}
    try:
        packed = msgpack.packb(header, use_bin_type=True, datetime=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"{schema.kind} payload is not plain msgpack data "
                                 f"(dict/list/str/int/float/bool/None/bytes): {exc}") from exc
    if len(packed) > limits.max_header_bytes:
        raise LocalProtocolError(f"{schema.kind} header is {len(packed)} bytes, over the limit "
                                 f"of {limits.max_header_bytes}")
    prepared = _repeat.learn(message, limits, checksums, payload, descriptors, packed)
    return _repeat.assemble(packed, segments, checksums, defer_checksums), prepared


def frame_size(buffers: list[bytes | memoryview]) -> int:
    """Total byte length of the buffers returned by :func:`encode`."""
    return sum(map(len, buffers))


# ----------------------------------------------------------------------------- decoding


def decode(buffer: bytes | bytearray | memoryview, limits: Limits = DEFAULT_LIMITS) -> Message:
    """Decode a buffer that holds exactly one frame.

    Args:
        buffer: the whole frame.
        limits: bounds checked before anything is allocated.

    Returns:
        The message, with freshly allocated arrays (the buffer is not referenced).

    Raises:
        RemoteProtocolError: the bytes are not exactly one valid frame (FrameTooLarge for limits).
    """
    if not memoryview(buffer).nbytes:
        raise RemoteProtocolError("empty buffer: expected one frame")
    decoder = Decoder(limits)
    decoder.receive_data(buffer)
    decoder.receive_data(b"")
    message = decoder.next_event()
    try:
        rest = decoder.next_event()
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"bytes after the frame: {exc}") from exc
    if rest is not CLOSED:
        raise RemoteProtocolError("buffer holds more than one frame")
    return message


@dataclass(slots=True)
class _PendingFrame:
    """A frame whose header is parsed; its arrays are allocated as their bytes start to arrive.

    A segment is ``[padding still to skip, destination view or None, bytes filled, index,
    running CRC32C or None without a trailer, trailer bytes received (a bytearray)]``:
    the destination is allocated when the segment's first raw byte arrives, so a frame that
    declares gigabytes but never sends them costs nothing (not even address space).
    """

    schema: Schema
    payload: dict
    plans: list  # (descriptor, dtype, nbytes) per tensor entry
    values: list  # per entry: the array, or None until its segment starts
    segments: deque  # of [padding to skip, destination or None, filled, index, crc, trailer]
    checked: bool  # the prefix and header were checksummed: damaged padding is damage too

    def destination(self, segment: list) -> memoryview:
        """The segment's array memory, allocating the array on first use."""
        if segment[1] is None:
            descriptor, dtype, nbytes = self.plans[segment[3]]
            try:
                value = np.empty(descriptor["shape"], dtype=dtype)
            except MemoryError:
                raise FrameTooLarge(f"tensor {descriptor['key']!r:.80} of {nbytes} bytes cannot "
                                    "be allocated on this side") from None
            self.values[segment[3]] = value
            segment[1] = memoryview(value.reshape(-1).view(np.uint8))
        return segment[1]

    def build(self) -> Message:
        fields = dict(self.payload)
        if self.schema.tensor_field:
            entries = []
            for (descriptor, _, _), value in zip(self.plans, self.values):
                error = descriptor["error"]
                entries.append(TensorEntry(
                    descriptor["key"], value, descriptor["dead"],
                    None if error is None else Status(error["code"], error["message"])))
            fields[self.schema.tensor_field] = entries
        try:
            return self.schema.cls(**fields)
        except (TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"invalid {self.schema.kind} message: {exc}") from exc


def decode_repeated(view: memoryview, limits: Limits = DEFAULT_LIMITS) -> Message | None:
    """The message of the one frame filling ``view`` when its header was validated before,
    decoded in one pass (:func:`transports.repeat_frames.decode_whole`); else None: decode it
    with a :class:`Decoder`, which also gives a damaged frame its error."""
    return _repeat.decode_whole(view, limits, _build)


def _build(schema: Schema, payload: dict, plans: list, values: list) -> Message:
    return _PendingFrame(schema, payload, plans, values, deque(), True).build()


class Decoder:
    """Incremental decoder for a stream of frames (see the module docstring).

    Args:
        limits: bounds checked against every header before allocating.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._events: deque[Message] = deque()
        self._error: RemoteProtocolError | None = None
        self._eof = False
        self._head = bytearray()  # prefix, then header bytes of the current frame
        self._header_len: int | None = None
        self._prefix_size = PREFIX.size  # CHECKED_PREFIX.size once its magic says so
        self._frame: _PendingFrame | None = None
        self._frame_bytes = 0  # bytes of the current frame seen so far
        self._scratch: memoryview | None = None  # allocated by the first get_buffer
        self._lent: memoryview | None = None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the peer; ``b""`` means the stream ended.

        The bytes are consumed before this returns (tensor bytes land in their arrays), so the
        caller may reuse ``data``.

        Raises:
            LocalProtocolError: data after end of stream.
        """
        if self._eof:
            raise LocalProtocolError("receive_data called after end of stream")
        if self._error is not None:
            return
        view = memoryview(data).cast("B")
        if not view:
            self._eof = True
            if self._frame_bytes:
                self._error = RemoteProtocolError(
                    f"stream ended {self._frame_bytes} bytes into a frame{self._expected()}")
            return
        try:
            self._consume(view)
        except RemoteProtocolError as exc:
            self._error = exc

    @property
    def header_bytes_pending(self) -> int:
        """The announced length of a header still being received (0 when none is).

        A transport may feed the bytes of a large header from a worker thread, since the
        :meth:`receive_data` call that completes it decodes it.
        """
        return self._header_len or 0

    def trust_segment(self) -> None:
        """Receive the current tensor segment unsummed, its trailer read but not checked (bytes
        the caller copies from the sender's memory: ``transports.http.cross_memory``)."""
        if self._frame is not None and self._frame.segments and \
                self._frame.segments[0][4] is not None:
            self._frame.segments[0][4] = _TRUSTED

    def next_event(self) -> Message | _Sentinel:
        """Return the next complete message, :data:`NEED_DATA` or :data:`CLOSED`.

        Raises:
            RemoteProtocolError: the stream broke the protocol (after earlier messages were
                returned); raised again on every later call.
        """
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        return CLOSED if self._eof else NEED_DATA

    def get_buffer(self) -> memoryview:
        """Lend a writable buffer to ``recv_into``; report the count with :meth:`buffer_updated`.

        While an array is being received this is the array's own memory (no copy at all).
        """
        if self._eof or self._error is not None:
            raise LocalProtocolError("get_buffer called after end of stream or a protocol error")
        segment = self._frame.segments[0] if self._frame and self._frame.segments else None
        if segment is not None and segment[0] == 0 and segment[2] < self._frame.plans[
                segment[3]][2]:
            try:
                self._lent = self._frame.destination(segment)[segment[2]:]
            except RemoteProtocolError as exc:
                self._error = exc
                raise
        else:
            if self._scratch is None:
                self._scratch = memoryview(bytearray(_SCRATCH_BYTES))
            self._lent = self._scratch
        return self._lent

    def buffer_updated(self, nbytes: int) -> None:
        """Account for ``nbytes`` written into the buffer from :meth:`get_buffer`.

        Raises:
            LocalProtocolError: no buffer is lent, or ``nbytes`` exceeds it.
        """
        lent, self._lent = self._lent, None
        if lent is None or not 0 <= nbytes <= len(lent):
            raise LocalProtocolError("buffer_updated without a matching get_buffer")
        if not nbytes:  # end of stream is receive_data(b""), never an empty read
            return
        if lent is self._scratch:
            self.receive_data(lent[:nbytes])
        else:
            segment = self._frame.segments[0]
            segment[2] += nbytes
            if segment[4] is not None and segment[4] is not _TRUSTED:  # summed where it landed
                segment[4] = _checksum.extend(segment[4], lent[:nbytes])
            self._frame_bytes += nbytes
            try:
                self._advance_segments()
            except RemoteProtocolError as exc:
                self._error = exc

    # -- state machine -------------------------------------------------------------------------

    def _expected(self) -> str:
        if self._frame is None:
            return ""
        remaining = sum(s[0] + self._frame.plans[s[3]][2] - s[2]
                        + (0 if s[4] is None else TRAILER_BYTES - len(s[5]))
                        for s in self._frame.segments)
        return f" ({remaining} more bytes were announced)"

    def _consume(self, view: memoryview) -> None:
        pos = 0
        while pos < len(view):
            if self._frame is None:
                pos = self._take_head(view, pos)
                continue
            segment = self._frame.segments[0]
            padding, filled = segment[0], segment[2]
            if not filled and not segment[5]:  # a whole segment in `view` (a small frame's
                crc, nbytes = segment[4], self._frame.plans[segment[3]][2]  # usual case): its
                end = pos + padding + nbytes  # padding, bytes and trailer in one step
                if len(view) - end >= (0 if crc is None else TRAILER_BYTES):
                    if padding and view[pos:pos + padding] != _ZEROS[:padding]:
                        self._refuse_padding(segment)
                    segment[0] = 0
                    self._frame.destination(segment)[:] = view[end - nbytes:end]
                    segment[2] = nbytes
                    if crc is not None:
                        if crc is not _TRUSTED:
                            segment[4] = _checksum.extend(crc, view[end - nbytes:end])
                        segment[5] += view[end:end + TRAILER_BYTES]
                        end += TRAILER_BYTES
                    self._frame_bytes += end - pos
                    pos = end
                    self._advance_segments()
                    continue
            if padding:
                take = min(padding, len(view) - pos)
                if view[pos:pos + take] != _ZEROS[:take]:
                    self._refuse_padding(segment)
                self._frame.segments[0][0] -= take
            elif filled == self._frame.plans[segment[3]][2]:  # the checksum trailer
                take = min(TRAILER_BYTES - len(segment[5]), len(view) - pos)
                segment[5] += view[pos:pos + take]
            else:
                dest = self._frame.destination(segment)
                take = min(len(dest) - filled, len(view) - pos)
                dest[filled:filled + take] = view[pos:pos + take]
                segment[2] += take
                if segment[4] is not None and segment[4] is not _TRUSTED:
                    segment[4] = _checksum.extend(segment[4], view[pos:pos + take])
            pos += take
            self._frame_bytes += take
            self._advance_segments()

    def _refuse_padding(self, segment: list) -> None:
        if self._frame.checked:  # every bit of a checked frame is covered
            key = self._frame.plans[segment[3]][0]["key"]
            raise ChecksumMismatch(None, 0, None, None, f"padding before tensor "
                                   f"{key!r:.200} (must be zero bytes)", self._frame.payload)
        raise RemoteProtocolError("non-zero alignment padding before a tensor")

    def _advance_segments(self) -> None:
        segments = self._frame.segments
        while segments and segments[0][0] == 0 and segments[0][2] == self._frame.plans[
                segments[0][3]][2] and (segments[0][4] is None
                                        or len(segments[0][5]) == TRAILER_BYTES):
            done = segments.popleft()
            if done[4] is not None and done[4] is not _TRUSTED:
                (descriptor, _, nbytes), frame = self._frame.plans[done[3]], self._frame
                if done[4] != (stored := int.from_bytes(done[5], "little")):
                    raise ChecksumMismatch(descriptor["key"], nbytes, stored, done[4], None,
                                           frame.payload if frame.checked else None)
        if not segments:
            frame, self._frame, self._frame_bytes = self._frame, None, 0
            self._events.append(frame.build())

    def _take_head(self, view: memoryview, pos: int) -> int:
        if not self._head and len(view) - pos >= PREFIX.size:
            # Fast path: the prefix (and usually the whole header) is in this buffer, so it is
            # read in place instead of being gathered in _head first. Same checks.
            magic, header_len = PREFIX.unpack_from(view, pos)
            size = CHECKED_PREFIX.size if magic == CHECKED_MAGIC else PREFIX.size
            if (magic == MAGIC or size != PREFIX.size) and len(view) - pos >= size:
                stored = self._check_prefix(view[pos:pos + size]) if size != PREFIX.size else None
                if 0 < header_len <= self._limits.max_header_bytes \
                        and len(view) - pos >= size + header_len:
                    end = pos + size + header_len
                    self._frame_bytes += end - pos
                    self._start_frame(view[pos + size:end], stored, size)
                    return end
        want = self._prefix_size + (self._header_len or 0)
        take = min(want - len(self._head), len(view) - pos)
        self._head += view[pos:pos + take]
        self._frame_bytes += take
        if self._header_len is None:
            magic = bytes(self._head[:len(MAGIC)])
            if not (MAGIC.startswith(magic) or CHECKED_MAGIC.startswith(magic)):
                refuse_magic(magic)
            if magic == CHECKED_MAGIC:
                self._prefix_size = CHECKED_PREFIX.size
            if len(self._head) == self._prefix_size:
                if self._prefix_size != PREFIX.size:
                    self._check_prefix(bytes(self._head))
                _, self._header_len = PREFIX.unpack_from(self._head)
                if self._header_len > self._limits.max_header_bytes:
                    raise FrameTooLarge(f"header of {self._header_len} bytes exceeds the limit "
                                        f"of {self._limits.max_header_bytes}")
                if self._header_len == 0:
                    raise RemoteProtocolError("empty header")
        elif len(self._head) == want:
            head = memoryview(self._head)
            stored = (None if self._prefix_size == PREFIX.size
                      else CHECKED_PREFIX.unpack_from(head)[2])
            self._start_frame(head[self._prefix_size:], stored, self._prefix_size)
            self._head, self._header_len, self._prefix_size = bytearray(), None, PREFIX.size
        return pos + take

    @staticmethod
    def _check_prefix(prefix: bytes | memoryview) -> int:
        """The header's CRC32C from a checked frame's ``prefix``, once the prefix's own CRC32C
        says its header length and header checksum arrived intact."""
        _, _, header_crc, stored = CHECKED_PREFIX.unpack_from(prefix)
        computed = _checksum.extend(0, prefix[:12])
        if computed != stored:
            raise ChecksumMismatch(None, 12, stored, computed, "frame prefix (header length "
                                   "and checksum)")
        return header_crc

    def _start_frame(self, header_bytes: memoryview, stored: int | None,
                     prefix_size: int) -> None:
        if stored is not None:  # the header holds the descriptors and the string tensors
            computed = _checksum.extend(0, header_bytes)
            if computed != stored:
                raise ChecksumMismatch(None, len(header_bytes), stored, computed,
                                       "frame header (descriptors, fields, string tensors)")
        key = (self._limits, bytes(header_bytes)) \
            if len(header_bytes) <= CACHED_HEADER_BYTES else None
        parsed = None if key is None else (validated(key)
                                           or _templates.lookup(self._limits, key[1]))
        if parsed is None:
            parsed = self._parse_header(header_bytes)
            if key is not None:
                remember_header(key, parsed)
                _templates.remember(self._limits, key[1], parsed, self._unpack_header)
        schema, payload, plans = parsed
        # Everything is validated. Arrays with raw bytes are allocated when those bytes arrive.
        values, segments, offset = [], deque(), prefix_size + len(header_bytes)
        for index, (descriptor, dtype, nbytes) in enumerate(plans):
            values.append(None if nbytes else _allocate(descriptor, dtype))
            if nbytes:
                pad = -offset % ALIGNMENT
                checked = descriptor.get(CHECKSUM_KEY) is True
                segments.append([pad, None, 0, index, 0 if checked else None, bytearray()])
                offset += pad + nbytes + (TRAILER_BYTES if checked else 0)
        self._frame = _PendingFrame(schema, payload, plans, values, segments, stored is not None)
        self._advance_segments()

    def _parse_header(self, header_bytes: memoryview) -> tuple[Schema, dict, list]:
        """(schema, payload, plans) of a header, every field and descriptor validated."""
        header = self._unpack_header(header_bytes)
        schema = SCHEMAS[header["kind"]]
        payload = self._check_payload(schema, header["payload"], self._limits.max_depth)
        descriptors = header["tensors"]
        if descriptors and schema.tensor_field is None:
            raise RemoteProtocolError(f"{schema.kind} carries no tensors, got {len(descriptors)}")
        if len(descriptors) > self._limits.max_tensors:
            raise FrameTooLarge(f"{len(descriptors)} tensors exceed the limit of "
                                f"{self._limits.max_tensors}")
        plans = [check_descriptor(i, d, self._limits) for i, d in enumerate(descriptors)]
        total = sum(nbytes for _, _, nbytes in plans)
        if total > self._limits.max_body_bytes:
            raise FrameTooLarge(f"tensors total {total} bytes, over the limit of "
                                f"{self._limits.max_body_bytes}")
        return schema, payload, plans

    def _unpack_header(self, header_bytes: memoryview) -> dict:
        size = len(header_bytes)
        try:
            if size <= SMALL_HEADER_BYTES:  # at most `size` values: cheap in C
                header = msgpack.unpackb(
                    header_bytes, raw=False, strict_map_key=True, use_list=True,
                    max_str_len=size, max_bin_len=size, max_array_len=size, max_map_len=size,
                    max_ext_len=0)
            else:
                header = unpack_counted(header_bytes, self._limits)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise RemoteProtocolError(f"header is not valid msgpack: {exc}") from exc
        if not isinstance(header, dict) or header.keys() != HEADER_KEYS:
            keys = sorted(map(str, header)) if isinstance(header, dict) else type(header).__name__
            raise RemoteProtocolError(f"header must be a map with keys {sorted(HEADER_KEYS)}, "
                                      f"got {keys}")
        if header["version"] != FORMAT_VERSION:
            raise RemoteProtocolError(f"unsupported wire format version {header['version']!r} "
                                      f"(this side speaks {FORMAT_VERSION})")
        if not isinstance(header["kind"], str) or header["kind"] not in SCHEMAS:
            raise RemoteProtocolError(f"unknown message kind {header['kind']!r:.80}")
        if not isinstance(header["payload"], dict) or not isinstance(header["tensors"], list):
            raise RemoteProtocolError("header payload must be a map and tensors a list")
        return header

    @staticmethod
    def _check_payload(schema: Schema, payload: dict, max_depth: int) -> dict:
        for f in schema.plain:
            if f.nests and f.name in payload:  # typed fields cannot nest past their type
                check_depth(payload[f.name], max_depth, start=2)
        try:
            return record_from_wire(schema.plain, payload)
        except SchemaMismatch as exc:
            raise RemoteProtocolError(exc.describe(schema.kind)) from None


def _allocate(descriptor: dict, dtype: np.dtype | None) -> np.ndarray | None:
    """The array of a validated descriptor without raw bytes (none, empty or strings)."""
    if dtype is None:
        return None
    if dtype == object:
        value = np.empty(len(descriptor["strings"]), dtype=object)
        value[:] = descriptor["strings"]
        return value.reshape(descriptor["shape"])
    return np.empty(descriptor["shape"], dtype=dtype)
