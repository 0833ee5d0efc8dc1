"""A repeated step's frames encoded from a kept template and decoded in one pass.

Why
---
A trivial remote step encodes two frames and decodes two (its RunGraph and its reply), each
a few microseconds of Python per side; the messages of one signature repeat from step to step
but for a RunGraph's ``step_id`` and ``request_id`` (a PushTensors' ``step_id``) and the
tensors' bytes. The decoder already skips parsing a header it validated before
(``schema.VALIDATED_HEADERS``, :mod:`transports.header_templates`); this module does the same
for the rest of the codec's work on such frames.

Encoding (:func:`encode`, tried first by ``wire.encode``)
-------------------------------------------------------
A message whose plain fields are plain values (str, int, bool, None, bytes, or lists of
them) and whose tensors are all C-contiguous ``np.ndarray`` values in their wire dtype, not
dead and without an error, and which may come again (not one of the kinds sent once for a
graph, ``_ONCE``), is described by a *key*: its class, the limits, the checksum
setting, each field but the volatile ids as ``(type, value)`` and each tensor's key, dtype and
shape. After a full encode of such a message the header is kept as chunks: its msgpack bytes
cut where each volatile id's value is written (msgpack concatenates, so the header of the same
key with other ids is the chunks joined around the ids' own encodings). The cut is proven when
kept: the chunks joined around the ids of the message just encoded must give the full encode's
bytes, else nothing is kept. A later message with the same key gets the header from the chunks,
each id checked as its int field's converter checks it (an ``int``, not a ``bool``), a
default-valued id (left out by a full encode), a negative one or one past 64 bits taking the
full path; the frame's prefix,
padding and checksum trailers are built as :func:`transports.wire.encode` builds them. Nothing
else is checked again: the key fixes every value those checks read. A message without volatile
ids (a RunGraph's reply) has the same header every time: its template keeps the frame's start,
prefix (its CRCs included) and header, built once, so such a reply costs the key, its tensors'
views and their trailers.

A caller that sends one signature again and again (a graph's RunGraph every step, its reply)
keeps it as a :class:`Prepared` (each template's, built once when it is kept: :func:`learn`
returns it, :func:`prepare` finds it): its :meth:`Prepared.encode` compares a message's fields
and tensors with the signature's directly, without building and hashing the key, and builds
the frame from the same template; any difference returns None and the caller encodes as
always (the key built once, :func:`frame` from the Prepared found, else the full encode).

Decoding (:func:`decode_whole`)
-------------------------------
A frame whose bytes are all in one buffer (a small call's usual case) and whose header the
decoder validated before is decoded without the incremental decoder's state machine: prefix
and header checksums, the validated header looked up, each segment's padding compared, its
bytes copied into a fresh array and summed against its trailer, the frame's length checked to
end exactly at the buffer's end. Anything else, or any check failing, returns None and the
caller decodes with :class:`transports.wire.Decoder`, which gives the error a damaged frame
deserves (so this path never decides a verdict). A small frame decoded so keeps a frame
template (:mod:`transports.frame_templates`), from which the next frame of its signature (a
step's next RunGraph or reply) is read by offsets before any of this is tried.

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgpack
import numpy as np

from transports import checksum as _checksum
from transports import frame_templates as _frames
from transports import header_templates as _templates
from transports import schema as _schema
from transports.messages import TensorEntry
from transports.schema import (
    ALIGNMENT, CACHED_HEADER_BYTES, CHECKED_MAGIC, CHECKED_PREFIX, CHECKSUM_KEY, FORMAT_VERSION,
    MAGIC, PREFIX, SCHEMA_BY_CLASS, validated,
)

__all__ = ["WHOLE_BYTES", "Prepared", "decode_whole", "encode", "forget", "forget_all",
           "forget_graph", "forget_kept", "frame", "learn", "prepare"]

_KEPT: Final = 256  # templates; all dropped when full (a few per registered graph in practice)
# (no float: 0.0 and -0.0 are one key but two encodings; messages of a step carry none)
_PLAIN: Final = frozenset((str, int, bool, bytes, type(None)))
# Kinds sent once for a graph and naming it: a template of one is never used again, and kept
# it would only fill the kept ones (one more per graph registered or deregistered) until all
# were cleared, those of the live graphs' steps too.
_ONCE: Final = frozenset(("register_graph_reply", "deregister_graph"))
_ZEROS: Final = bytes(ALIGNMENT)
_TRAILER: Final = 4
_UINT64: Final = 1 << 64
WHOLE_BYTES: Final = 16 * 1024  # ``Prepared.encode_whole``'s frames, at most (copied whole)

_templates_by_key: dict = {}  # key -> its template's Prepared (the template and the key's parts)
_layouts: dict = {}  # message class -> (static field names, volatile Fields) or None


class _Template:
    __slots__ = ("chunks", "volatile", "casts", "max_header", "head")

    def __init__(self, chunks: tuple, volatile: tuple, casts: tuple, max_header: int,
                 head: bytes | None) -> None:
        self.chunks = chunks      # header bytes between the volatile ids' encodings
        self.volatile = volatile  # the schema's Fields of those ids, in order
        self.casts = casts        # per tensor: viewed by memoryview.cast (else through numpy)
        self.max_header = max_header
        # A message without volatile ids (a RunGraph's reply): its whole frame start, prefix
        # (checksums included) and header, is the same every time: kept built (None: it has ids).
        self.head = head


def _layout(cls: type) -> tuple | None:
    layout = _layouts.get(cls, False)
    if layout is False:
        schema = SCHEMA_BY_CLASS.get(cls)
        layout = None
        if schema is not None and schema.kind not in _ONCE:
            names = _templates.VOLATILE.get(schema.kind, ())
            fields = {f.name: f for f in schema.plain}
            if all(name in fields for name in names):
                layout = (tuple(f.name for f in schema.plain if f.name not in names),
                          tuple(fields[name] for name in names), schema)
        _layouts[cls] = layout
    return layout


def _key(message: Any, limits: Any, checksums: bool, layout: tuple) -> tuple | None:
    """What fixes a message's frame but its volatile ids and its tensors' bytes; None when a
    value is not plain or a tensor is not sent from its own memory as it is."""
    static, _, schema = layout
    parts = [type(message), limits, checksums]
    for name in static:
        value = getattr(message, name)
        kind = type(value)
        if kind is list:
            for item in value:
                if type(item) not in _PLAIN:
                    return None
            parts.append((list, tuple(map(type, value)), tuple(value)))
        elif kind in _PLAIN:
            parts.append((kind, value))
        else:
            return None
    if schema.tensor_field:
        entries = getattr(message, schema.tensor_field)
        if type(entries) is not list:
            return None
        for entry in entries:
            if type(entry) is not TensorEntry:
                return None
            value = entry.value
            if type(entry.key) is not str or entry.is_dead is not False \
                    or entry.error is not None or type(value) is not np.ndarray \
                    or not value.flags.c_contiguous:
                return None
            parts.append((entry.key, value.dtype, value.shape))
    return tuple(parts)


def encode(message: Any, limits: Any, checksums: bool, defer: bool) -> list | None:
    """The buffers of ``message``'s frame from its kept template (as ``wire.encode`` returns
    them), or None when it has none (the caller encodes it in full and may :func:`learn`)."""
    prepared = prepare(message, limits, checksums)
    return None if prepared is None else _frame(prepared.template, message, prepared.schema,
                                                checksums, defer)


def _frame(template: _Template, message: Any, schema: Any, checksums: bool,
           defer: bool, ids: tuple | None = None, values: Any = None) -> list | None:
    """``message``'s buffers from ``template``, the template of its key; or, ``message``
    None, those of the message of that key whose volatile ids are ``ids`` (in the template's
    order) and whose tensors hold ``values`` (:meth:`Prepared.encode_step`)."""
    head = template.head
    if head is None:
        chunks = template.chunks
        pieces = [chunks[0]]
        for index, (field, chunk) in enumerate(zip(template.volatile, chunks[1:])):
            # an int field's check: an int, not a bool
            value = getattr(message, field.name) if ids is None else ids[index]
            if type(value) is not int or not 0 <= value < _UINT64 or value == field.default:
                return None  # (the full encode says what is wrong, or leaves a default out)
            pieces.append(_uint(value))
            pieces.append(chunk)
        packed = b"".join(pieces)
        if len(packed) > template.max_header:
            return None
    else:
        packed = template.chunks[0]  # (checked against the limit when kept)
    segments = []
    if schema.tensor_field:
        if values is None:
            values = [entry.value for entry in getattr(message, schema.tensor_field)]
        for value, cast in zip(values, template.casts):
            if value.nbytes:
                segments.append(memoryview(value).cast("B") if cast
                                else memoryview(value.reshape(-1).view(np.uint8)))
    return assemble(packed, segments, checksums, defer, head)


class Prepared:
    """The frames of one signature of a message class, its template found once: a caller
    that sends messages of one signature again and again (a RunGraph per step of a
    registered graph, its reply) keeps one and encodes each by :meth:`encode`, which
    compares the message's fields with the signature's directly instead of building and
    hashing its key. Made by :func:`learn` (one a template), found by :func:`prepare`."""

    __slots__ = ("template", "schema", "limits", "checksums", "static", "tensors", "key",
                 "image", "roomed")

    def __init__(self, template: _Template, schema: Any, limits: Any, checksums: bool,
                 static: tuple, tensors: tuple, key: tuple) -> None:
        self.template, self.schema, self.key = template, schema, key  # (its template's key)
        self.limits, self.checksums = limits, checksums
        self.static = static    # per static field: (name, type, value, item types of a list)
        self.tensors = tensors  # per tensor: (key, dtype, shape)
        self.image = None  # (frame bytes, spots) for ``encode_whole``; False: none (made once)
        self.roomed = (0, b"")  # (room, the image's bytes after that many zero bytes)

    def encode(self, message: Any, limits: Any, checksums: bool, defer: bool) -> list | None:
        """``message``'s buffers where it is of this signature (every field but the
        volatile ids equal, every tensor of the same key, dtype and shape, sent as it is),
        as :func:`encode` would give them; else None (the caller encodes it in full)."""
        if not self.matches(message, limits, checksums):
            return None
        return _frame(self.template, message, self.schema, checksums, defer)

    def encode_whole(self, message: Any, limits: Any, checksums: bool,
                     defer: bool) -> list | None:
        """:meth:`encode`'s buffers, for a signature without volatile ids whose frame is at
        most :data:`WHOLE_BYTES` (a RunGraph's reply) as one ``bytearray``: a copy of the
        frame's image kept with the signature (its prefix, header and padding, built once)
        with each tensor's bytes and checksum trailer written at their offsets, the same bytes
        as :meth:`encode`'s buffers joined with their trailers filled; a larger frame as
        :meth:`encode` gives it (``defer``: its trailers left to the writer, which sums a large
        segment in chunks); None where ``message`` is not of this signature (the caller
        encodes it in full)."""
        if not self.matches(message, limits, checksums):
            return None
        image = self.image
        if image is None:
            image = self.image = self._image()
        if image is False:
            return _frame(self.template, message, self.schema, checksums, defer)
        frame = bytearray(image[0])
        for entry, spot in zip(getattr(message, self.schema.tensor_field), image[1]):
            if spot is not None:
                start, stop = spot
                data = entry.value.tobytes()  # (C-contiguous: its bytes in memory order)
                frame[start:stop] = data
                if checksums:
                    frame[stop:stop + _TRAILER] = _checksum.extend(0, data).to_bytes(
                        _TRAILER, "little")
        return [frame]

    def encode_values(self, values: list, checksums: bool) -> list | None:
        """:meth:`encode_whole`'s frame of the message of this signature whose tensors hold
        ``values`` (arrays, in the signature's order) built without a message: the caller
        vouches for every other field (it made this signature's message itself, as a worker
        makes its RunGraph replies: ``transports/http/bare_calls.py``); each array checked
        as :meth:`encode` checks it; None where one is not of it, or where ``encode_whole``
        would not give one buffer (the caller encodes the message in full)."""
        frame = self.values_frame(values, checksums, 0)
        return None if frame is None else [frame]

    def values_frame(self, values: list, checksums: bool, room: int) -> bytearray | None:
        """:meth:`encode_values`'s frame after ``room`` zero bytes, in one ``bytearray`` (a
        caller's head goes there: the bare server's answer to a short step, written whole
        with one ``write``), or None where ``encode_values`` gives None."""
        image = self.image
        if image is None:
            image = self.image = self._image()
        if image is False or checksums != self.checksums or len(values) != len(self.tensors):
            return None
        if room:
            roomed = self.roomed
            if roomed[0] != room:
                roomed = self.roomed = (room, bytes(room) + image[0])
            frame = bytearray(roomed[1])
        else:
            frame = bytearray(image[0])
        for value, (_, dtype, shape), spot in zip(values, self.tensors, image[1]):
            if type(value) is not np.ndarray or value.dtype != dtype \
                    or value.shape != shape or not value.flags.c_contiguous:
                return None
            if spot is not None:
                start, stop = spot
                start, stop = start + room, stop + room
                data = value.tobytes()
                frame[start:stop] = data
                if checksums:
                    frame[stop:stop + _TRAILER] = _checksum.extend(0, data).to_bytes(
                        _TRAILER, "little")
        return frame

    def _image(self) -> tuple | bool:
        """(the frame's bytes, zeros where tensor bytes and trailers go; per tensor its
        bytes' (start, stop), None where it has none), laid out as :func:`assemble` lays
        them; False where the header has ids or the frame is over :data:`WHOLE_BYTES`."""
        head = self.template.head
        if head is None or not self.schema.tensor_field:
            return False
        spots, offset = [], len(head)
        for _, dtype, shape in self.tensors:
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if not nbytes:
                spots.append(None)
                continue
            offset += -offset % ALIGNMENT
            spots.append((offset, offset + nbytes))
            offset += nbytes + (_TRAILER if self.checksums else 0)
        if offset > WHOLE_BYTES:
            return False
        frame = bytearray(offset)
        frame[:len(head)] = head
        return bytes(frame), tuple(spots)

    def matches(self, message: Any, limits: Any, checksums: bool) -> bool:
        """Whether ``message`` is of this signature (see :meth:`encode`)."""
        if checksums != self.checksums or (limits is not self.limits
                                               and limits != self.limits):
            return False
        schema = self.schema
        if type(message) is not schema.cls:
            return False
        for name, kind, value, types in self.static:
            got = getattr(message, name)
            if got is value:  # (the same immutable object: a str, an int, None)
                continue
            if type(got) is not kind:
                return False
            if kind is list:
                if tuple(got) != value or tuple(map(type, got)) != types:
                    return False
            elif got != value:
                return False
        if schema.tensor_field:
            entries = getattr(message, schema.tensor_field)
            if type(entries) is not list or len(entries) != len(self.tensors):
                return False
            for entry, (key, dtype, shape) in zip(entries, self.tensors):
                if type(entry) is not TensorEntry:
                    return False
                value = entry.value
                if entry.key != key or type(entry.key) is not str \
                        or entry.is_dead is not False or entry.error is not None \
                        or type(value) is not np.ndarray or value.dtype != dtype \
                        or value.shape != shape or not value.flags.c_contiguous:
                    return False
        return True

    def volatile_names(self) -> tuple:
        """The volatile ids' field names, in the order :meth:`encode_step` takes them."""
        return tuple(field.name for field in self.template.volatile)

    def encode_step(self, ids: tuple, values: Any, checksums: bool,
                    defer: bool) -> list | None:
        """The buffers of the message of this signature whose volatile ids are ``ids`` (in
        :meth:`volatile_names`' order) and whose tensors hold ``values`` (arrays, in the
        signature's order), built without a message: the caller vouches for every other field
        (it made this signature's message itself, :class:`transports.run_graph_step`); each
        array is checked as :meth:`encode` checks it (an ndarray of the signature's dtype and
        shape, C-contiguous), each id as the full encode's converter would; else None (the
        caller builds the message and encodes it in full)."""
        if checksums != self.checksums or len(values) != len(self.tensors):
            return None
        for value, (_, dtype, shape) in zip(values, self.tensors):
            if type(value) is not np.ndarray or value.dtype != dtype \
                    or value.shape != shape or not value.flags.c_contiguous:
                return None
        return _frame(self.template, None, self.schema, checksums, defer, ids, values)


def prepare(message: Any, limits: Any, checksums: bool) -> Prepared | None:
    """The :class:`Prepared` of ``message``'s signature where a template of it is kept (it was
    encoded in full before), else None: its key built and looked up once (the kept one)."""
    layout = _layout(type(message))
    if layout is None or not _templates_by_key:
        return None
    key = _key(message, limits, checksums, layout)
    return None if key is None else _templates_by_key.get(key)


def forget(prepared: Prepared) -> None:
    """Drop the kept template that ``prepared`` was made of (its signature's messages will not
    come again: a deregistered graph's RunGraphs); a message of it is then encoded in full and
    learnt again. Found by its key, not by a scan of the kept templates: another thread's trio
    run may keep one meanwhile (each step here one dict operation, as ``learn``'s)."""
    if _templates_by_key.get(prepared.key) is prepared:
        _templates_by_key.pop(prepared.key, None)


def forget_all() -> None:
    """Drop every kept template, as when they fill (one dict operation, as ``forget``'s)."""
    _templates_by_key.clear()


def forget_kept() -> None:
    """Drop what the codec keeps of the frames it has seen, each cache cleared whole as when it
    fills its bound: the validated headers, the header and frame templates that decode repeated
    frames, the templates that encode them. The next frame of each signature is encoded and
    decoded in full and teaches them again; nothing else changes (a test that counts the
    repeated frames' path starts so, whatever the process's earlier frames filled)."""
    _schema.VALIDATED_HEADERS.clear()
    _templates.forget_all()
    _frames.forget_all()
    forget_all()


def forget_graph(handle: str) -> None:
    """Drop the header and frame templates that decode graph ``handle``'s frames (a worker's
    deregistered graph: its RunGraphs will not come again). Kept, each would be tried before a
    later graph's of the same length, in every one of its frames, until the templates filled
    and all were cleared (a service opening a session a request: ~9 us a step behind 54, a
    clear each 32 sessions of two signatures; bench/bench_codec_clear.py). The validated
    headers are left to their bound: one dict lookup finds a header however many are kept."""
    _templates.forget_where("graph_handle", handle)
    _frames.forget_where("graph_handle", handle)


def frame(prepared: Prepared, message: Any, defer: bool) -> list | None:
    """``message``'s buffers from ``prepared``, which :func:`prepare` gave for it (no fields
    compared again); None where its ids are not what the full encode writes."""
    return _frame(prepared.template, message, prepared.schema, prepared.checksums, defer)


def _prepared(template: _Template, key: tuple, layout: tuple) -> Prepared:
    static_names, _, schema = layout
    static = []
    for name, part in zip(static_names, key[3:]):
        if part[0] is list:
            static.append((name, list, part[2], part[1]))
        else:
            static.append((name, part[0], part[1], None))
    tensors = tuple(key[3 + len(static_names):])
    return Prepared(template, schema, key[1], key[2], tuple(static), tensors, key)


_FIXINTS: Final = tuple(bytes((value,)) for value in range(128))
_U8, _U16, _U32, _U64 = (struct.Struct(">B" + width).pack for width in "BHIQ")


def _uint(value: int) -> bytes:
    """msgpack's encoding of an int ``0 <= value < 2**64`` (its smallest form, as ``packb``'s);
    ValueError for anything else (a negative int, a bool: bytes msgpack would not write)."""
    if type(value) is int and value >= 0:
        if value < 128:
            return _FIXINTS[value]
        if value < 0x100:
            return _U8(0xCC, value)
        if value < 0x10000:
            return _U16(0xCD, value)
        if value < 0x1_0000_0000:
            return _U32(0xCE, value)
        if value < _UINT64:
            return _U64(0xCF, value)
    raise ValueError(f"id {value!r:.40} is not an int from 0 to 2**64 - 1 (a msgpack uint)")


def learn(message: Any, limits: Any, checksums: bool, payload: dict, descriptors: list,
          packed: bytes) -> Prepared | None:
    """Keep a template of ``message``, just encoded in full (its plain ``payload``, tensor
    ``descriptors`` and header bytes ``packed``), when it can be proven (module docstring);
    returns its :class:`Prepared` (None: none kept now)."""
    layout = _layout(type(message))
    if layout is None or len(packed) > CACHED_HEADER_BYTES:
        return None
    key = _key(message, limits, checksums, layout)
    if key is None or key in _templates_by_key:
        return None
    _, volatile, schema = layout
    if any(type(payload.get(f.name)) is not int for f in volatile):
        return None  # an id left out (its default) or not an int: no place to cut
    casts = []
    if schema.tensor_field:
        for entry, descriptor in zip(getattr(message, schema.tensor_field), descriptors):
            value = entry.value
            if descriptor["dtype"] is None or descriptor["strings"] is not None \
                    or value.dtype != _schema._WIRE[descriptor["dtype"]]:
                return None  # (converted on the way out: another byte order)
            try:
                cast = bool(value.nbytes) and memoryview(value).cast("B").nbytes == value.nbytes
            except (ValueError, TypeError):
                cast = False
            casts.append(cast)
    ids = {f.name for f in volatile}
    packer = msgpack.Packer(use_bin_type=True, datetime=False)
    chunks, current = [], [packer.pack_map_header(4), packer.pack("version"),
                           packer.pack(FORMAT_VERSION), packer.pack("kind"),
                           packer.pack(schema.kind), packer.pack("payload"),
                           packer.pack_map_header(len(payload))]
    for name, value in payload.items():
        current.append(packer.pack(name))
        if name in ids:
            chunks.append(b"".join(current))
            current = []
        else:
            current.append(packer.pack(value))
    current += [packer.pack("tensors"), packer.pack(descriptors)]
    chunks.append(b"".join(current))
    order = tuple(f for name in payload if name in ids for f in volatile if f.name == name)
    rebuilt = [chunks[0]]
    for field, chunk in zip(order, chunks[1:]):
        rebuilt += [msgpack.packb(payload[field.name]), chunk]
    if b"".join(rebuilt) != packed or len(order) != len(volatile):
        return None  # the cut is not the full encode's bytes: not kept
    if len(_templates_by_key) >= _KEPT:
        _templates_by_key.clear()
    head = None if order else _prefix(packed, checksums) + packed  # (no ids: all fixed)
    prepared = _templates_by_key[key] = _prepared(_Template(
        tuple(chunks), order, tuple(casts), limits.max_header_bytes, head), key, layout)
    return prepared


def _prefix(packed: bytes, checksums: bool) -> bytes:
    """The frame prefix of header bytes ``packed``: magic, length and, with ``checksums``, the
    header's and the prefix's own CRC32C."""
    if checksums:
        start = CHECKED_PREFIX.pack(CHECKED_MAGIC, len(packed), _checksum.extend(0, packed),
                                    0)[:12]
        return start + _checksum.extend(0, start).to_bytes(4, "little")
    return PREFIX.pack(MAGIC, len(packed))


def assemble(packed: bytes, segments: list, checksums: bool, defer: bool,
             head: bytes | None = None) -> list:
    """A frame's buffers from its header bytes and its tensors' raw segments (in order);
    ``head``: the prefix and ``packed`` joined, where they are kept built."""
    if head is None:
        prefix = _prefix(packed, checksums)
        head = prefix + packed if len(packed) < 64 * 1024 else None
        buffers: list = [head] if head is not None else [prefix, packed]
        offset = len(prefix) + len(packed)
    else:
        buffers, offset = [head], len(head)
    if segments:
        for segment in segments:
            pad = -offset % ALIGNMENT
            if pad:
                buffers.append(_ZEROS[:pad])
            buffers.append(segment)
            offset += pad + len(segment)
            if checksums:
                buffers.append(_checksum.ChecksumTrailer(segment, pending=defer))
                offset += _TRAILER
    return buffers


def decode_whole(view: memoryview, limits: Any, build: Any) -> Any:
    """The message of the one frame that fills ``view`` (a byte memoryview) when its header
    was validated before, else None (see the module docstring); ``build(schema, payload,
    plans, values)`` makes the message (the decoder's own)."""
    size = len(view)
    if _frames.known(size):  # a repeated frame: read by offsets (frame_templates.py)
        message = _frames.decode(bytes(view) if size <= _frames.COPIED else view, limits)
        if message is not None:
            return message
    if size < PREFIX.size:
        return None
    magic, header_len = PREFIX.unpack_from(view)
    if magic == CHECKED_MAGIC:
        if size < CHECKED_PREFIX.size:
            return None
        _, _, header_crc, prefix_crc = CHECKED_PREFIX.unpack_from(view)
        if _checksum.extend(0, view[:12]) != prefix_crc:
            return None
        start = CHECKED_PREFIX.size
    elif magic == MAGIC:
        header_crc, start = None, PREFIX.size
    else:
        return None
    end = start + header_len
    if not 0 < header_len <= CACHED_HEADER_BYTES or header_len > limits.max_header_bytes \
            or end > size:
        return None
    header = bytes(view[start:end])
    if header_crc is not None and _checksum.extend(0, header) != header_crc:
        return None
    parsed, spans = validated((limits, header)), ()
    if parsed is None:
        found = _templates.match(limits, header)
        if found is None:
            return None
        spans, parsed = found[0], found[1:]
    schema, payload, plans = parsed
    values, offset = [], end
    for descriptor, dtype, nbytes in plans:
        if not nbytes:
            if dtype is not None and dtype == object:
                return None  # strings: the decoder's own allocation
            values.append(None if dtype is None else np.empty(descriptor["shape"], dtype=dtype))
            continue
        pad = -offset % ALIGNMENT
        if pad and view[offset:offset + pad] != _ZEROS[:pad]:
            return None
        offset += pad
        stop = offset + nbytes
        summed = descriptor.get(CHECKSUM_KEY) is True
        if stop + (_TRAILER if summed else 0) > size:
            return None
        if summed:
            if _checksum.extend(0, view[offset:stop]) != int.from_bytes(
                    view[stop:stop + _TRAILER], "little"):
                return None
        # a fresh array of its own (writable, C order), as the decoder allocates
        values.append(np.frombuffer(view, dtype, nbytes // dtype.itemsize, offset).reshape(
            descriptor["shape"]).copy())
        offset = stop + (_TRAILER if summed else 0)
    if offset != size:
        return None
    message = build(schema, payload, plans, values)
    if size <= _frames.MAX_FRAME and (spans or schema.kind not in _templates.VOLATILE):
        _frames.learn(view, limits, start, end, spans, parsed)
    return message
