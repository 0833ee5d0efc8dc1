"""A repeated frame decoded by offsets: the frame of a step's RunGraph or of its reply.

Why
---
A trivial remote step decodes two small frames a step, its RunGraph on the worker and the
reply on the client, each a whole frame in one buffer: :func:`transports.repeat_frames.
decode_whole` reads them without the incremental decoder, but still unpacks the prefix,
copies and sums the header, looks it up (a RunGraph's through its header template, masking
its ids) and builds the message through the decoder's pending frame: about 11 us for a
RunGraph with one scalar feed and 6 for its reply, in one process. Such frames repeat from
step to step byte for byte but for the RunGraph's ids, the checksums that cover them and the
tensors' bytes.

How
---
After ``decode_whole`` decoded a frame from a validated header (the decoder's full checks
passed on that header before, :mod:`transports.header_templates` proved where its ids are),
:func:`learn` keeps a *frame template* of it, under its length: the stretches of the frame
that must be the same in the next one (its prefix's magic and header length, the header but
its ids' value bytes, the padding before each segment), where each id's value bytes and each
segment and checksum trailer are, and how to build the message (the header's other fields,
their lists copied for each message, and each tensor's key, dtype and shape). :func:`decode`
then takes a frame of that length when every fixed stretch is there (``bytes.startswith`` at
its offset); with checksums (``AFWC``) it sums the prefix and the header where the header
has ids (a header without ids is the template's bytes, which were summed when it was
learnt) and every segment, each against its stored CRC32C; it reads each id as the header
template does (a positive fixint where the template has one, else the big-endian bytes of
the template's msgpack width) and checks it with its field's converter. Anything else
returns None and the caller decodes as before: a frame that is damaged (a flipped bit in a
fixed stretch differs from it; anywhere else a sum differs) or of another signature is
never taken here, and the decoder gives it its error, so this path decides no verdict.

Frames up to :data:`MAX_FRAME` keep one: the PS step's pushes (~39 KB) and its worker's
RunGraph (~67 KB) too, where the header template's match and the pending frame's build took
~1.5-2 us more a frame warm (``bench/bench_push_decode.py``, bench/RESULTS.md, c43ps); a frame
over :data:`COPIED` is read where it lies rather than copied to ``bytes`` first (its tensors
are copied out as ever; a fixed stretch over ``_COMPARED`` bytes is compared from a copy of
it, as a view's ``==`` goes byte by byte: ~1 us of the push's 704-byte stretch, r43ps).
Templates are few (one a signature in use; :data:`KEPT` at most, all dropped when full; a
deregistered graph's dropped then, :func:`forget_where`: a frame of a length is matched
against its length's templates in the order they were learnt, so a closed session's would be
tried first by every later session's frames of that length, ~0.17 us each a frame, until
all are dropped: bench/RESULTS.md, c48dup).
:func:`decode_step` reads a frame of a template without building its message (its ids and
its tensors' arrays, the same checks): a worker's short path for a step's RunGraph, which
keeps what it made of the template's fixed fields on it (``bound``;
:mod:`transports.http.bare_calls`). Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from transports import checksum as _checksum
from transports import header_templates as _headers
from transports.messages import TensorEntry
from transports.schema import ALIGNMENT, CHECKED_MAGIC, CHECKED_PREFIX, CHECKSUM_KEY, \
    SchemaMismatch

__all__ = ["COPIED", "KEPT", "MAX_FRAME", "decode", "decode_step", "describe", "forget_all",
           "forget_where", "known", "learn", "read_step", "statistics", "step_template",
           "tensor_values"]

KEPT: Final = 64  # frame templates; all dropped when full
MAX_FRAME: Final = 256 * 1024  # larger frames keep none (a bare server reads no larger whole)
COPIED: Final = 16 * 1024  # frames up to this are copied to ``bytes`` to be read, larger not
_PLAIN: Final = frozenset((str, int, float, bool, bytes, type(None)))
_TRAILER: Final = 4
_COMPARED: Final = 32  # a fixed stretch longer than this is compared from a copy, not a view

_by_size: dict = {}  # frame length -> list of _Frame
_kept = 0
_decoded = 0  # frames decoded here (``statistics``)
_steps = 0  # of them, decoded by ``decode_step`` (no message built)


class _Frame:
    __slots__ = ("limits", "fixed", "summed", "header_end", "ids", "tensors", "cls",
                 "fields", "lists", "tensor_field", "bound")

    def __init__(self, limits: Any, fixed: tuple, summed: bool, header_end: int, ids: tuple,
                 tensors: tuple, cls: type, fields: dict, lists: tuple,
                 tensor_field: str | None) -> None:
        self.limits = limits
        self.fixed = fixed            # (offset, bytes): stretches every frame of it holds
        self.summed = summed          # AFWC: the prefix and header sums are checked
        self.header_end = header_end  # the header's end; 0: the header has no ids (all fixed)
        self.ids = ids                # (field, offset, width, fixint) per volatile id
        self.tensors = tensors        # (key, dtype, shape, offset, nbytes, summed) per entry
        self.cls = cls
        self.fields = fields          # the message's other plain fields
        self.lists = lists            # those of them holding a list (copied per message)
        self.tensor_field = tensor_field
        self.bound = None  # what a reader made of this template's fixed fields (decode_step)


def known(size: int) -> bool:
    """Whether a frame template of a frame of ``size`` bytes is kept."""
    return size in _by_size


def decode(data: bytes | memoryview, limits: Any) -> Any:
    """The message of the whole frame ``data`` (bytes, or a byte memoryview: a frame over
    :data:`COPIED` bytes is read where it lies) from a frame template of its length, or None
    (see the module docstring)."""
    global _decoded
    whole = type(data) is bytes
    for frame in _by_size.get(len(data), ()):
        if frame.limits is not limits and frame.limits != limits:
            continue
        for offset, stretch in frame.fixed:
            if whole:
                if not data.startswith(stretch, offset):
                    break
            elif len(stretch) > _COMPARED:  # (a view's ``==`` goes byte by byte: a copy's not)
                if bytes(data[offset:offset + len(stretch)]) != stretch:
                    break
            elif data[offset:offset + len(stretch)] != stretch:
                break
        else:
            message = _read(frame, data)
            if message is not None:
                _decoded += 1
            return message  # (the fixed stretches match: no other template would)
    return None


def tensor_values(data: bytes, limits: Any, cls: type) -> list | None:
    """The tensors' values, in order, of the whole frame ``data`` (bytes) where a frame
    template of it is kept whose message is a ``cls`` of its tensors alone (no other field, no
    ids: a RunGraph's reply without step stats): :func:`decode`'s checks and arrays without the
    message (the client's direct step, ``transports.http.client``); else None (decode it)."""
    global _decoded
    frame = _matching(data, limits)
    if frame is None or frame.cls is not cls or frame.fields or frame.ids \
            or frame.tensor_field is None:
        return None
    extend, view, values = _checksum.extend, memoryview(data), []
    for _, dtype, shape, offset, nbytes, summed in frame.tensors:
        stop = offset + nbytes
        if summed and extend(0, view[offset:stop]) != int.from_bytes(
                data[stop:stop + _TRAILER], "little"):
            return None
        values.append(np.frombuffer(data, dtype, nbytes // dtype.itemsize, offset)
                      .reshape(shape).copy() if nbytes else np.empty(shape, dtype))
    _decoded += 1
    return values


def _matching(data: bytes, limits: Any) -> _Frame | None:
    """The kept template of ``limits`` whose fixed stretches the whole frame ``data`` (bytes)
    matches, or None (no other template would match where one does)."""
    for frame in _by_size.get(len(data), ()):
        if frame.limits is not limits and frame.limits != limits:
            continue
        for offset, stretch in frame.fixed:
            if not data.startswith(stretch, offset):
                break
        else:
            return frame
    return None


def _header_summed(frame: _Frame, data: bytes | memoryview, view: memoryview) -> bool:
    """Whether a checked frame's prefix and header sums (bytes 12-16 and 8-12) hold."""
    extend = _checksum.extend
    return extend(0, view[:12]) == int.from_bytes(data[12:16], "little") and extend(
        0, view[CHECKED_PREFIX.size:frame.header_end]) == int.from_bytes(data[8:12], "little")


def _read(frame: _Frame, data: bytes | memoryview) -> Any:
    extend = _checksum.extend
    view = memoryview(data)
    if frame.summed and frame.header_end and not _header_summed(frame, data, view):
        return None
    fields = dict(frame.fields)
    for name in frame.lists:
        fields[name] = list(fields[name])
    for field, offset, width, fixint in frame.ids:
        if fixint:
            value = data[offset]
            if value >= 0x80:
                return None  # not a positive fixint where the template has one
        else:
            value = int.from_bytes(data[offset:offset + width], "big")
        try:
            fields[field.name] = field.from_wire(value)
        except SchemaMismatch:
            return None
    if frame.tensor_field is not None:
        entries = []
        for key, dtype, shape, offset, nbytes, summed in frame.tensors:
            if not nbytes:
                entries.append(TensorEntry(key, np.empty(shape, dtype)))
                continue
            stop = offset + nbytes
            if summed and extend(0, view[offset:stop]) != int.from_bytes(
                    data[stop:stop + _TRAILER], "little"):
                return None
            # a fresh array of its own (writable, C order), as the decoder allocates
            entries.append(TensorEntry(key, np.frombuffer(
                data, dtype, nbytes // dtype.itemsize, offset).reshape(shape).copy()))
        fields[frame.tensor_field] = entries
    try:
        return frame.cls(**fields)
    except (TypeError, ValueError):
        return None


def learn(data: memoryview, limits: Any, header_start: int, header_end: int, spans: tuple,
          parsed: tuple) -> None:
    """Keep a frame template of ``data`` (a byte view of a whole frame just decoded from its
    validated header ``data[header_start:header_end]``, parsed into ``parsed``: ``(schema,
    payload, plans)``), whose volatile ids are at ``spans`` (header offsets, as the header
    template keeps them; empty: a header without ids). A frame with strings, values left out,
    errors or records keeps none (the decoder's own)."""
    global _kept
    schema, payload, plans = parsed
    if spans and not header_end:
        return
    if len(data) > MAX_FRAME:
        return
    fields, lists = {}, []
    for name, value in payload.items():
        if type(value) is list:
            if not all(type(item) in _PLAIN for item in value):
                return
            value = list(value)  # (the message just decoded owns its lists)
            lists.append(name)
        elif type(value) not in _PLAIN:
            return  # (a record, a map: the decoder's own)
        fields[name] = value
    summed = bytes(data[:4]) == CHECKED_MAGIC
    ids = tuple((field, header_start + start, width, fixint)
                for field, start, width, fixint in spans)
    fixed = []
    if ids:
        cuts = [(offset, offset + (1 if fixint else width)) for _, offset, width, fixint in ids]
        # the magic and the header's length; the sums after them cover the ids
        fixed.append([0, 8])
        at = header_start
        for start, stop in sorted(cuts):
            if start > at:
                fixed.append([at, start])
            at = stop
        fixed.append([at, header_end])
    else:
        fixed.append([0, header_end])
    tensors, offset = [], header_end
    for descriptor, dtype, nbytes in plans:
        if dtype is None or dtype == object or descriptor["dead"] or \
                descriptor["error"] is not None:
            return
        if not nbytes:
            tensors.append((descriptor["key"], dtype, tuple(descriptor["shape"]), 0, 0, False))
            continue
        pad = -offset % ALIGNMENT
        if pad:
            if fixed[-1][1] == offset:
                fixed[-1][1] = offset + pad  # (the padding's zeros, with what comes before)
            else:
                fixed.append([offset, offset + pad])
            offset += pad
        sum_it = descriptor.get(CHECKSUM_KEY) is True
        tensors.append((descriptor["key"], dtype, tuple(descriptor["shape"]), offset, nbytes,
                        sum_it))
        offset += nbytes + (_TRAILER if sum_it else 0)
    if offset != len(data):
        return
    merged = []
    for start, stop in fixed:
        if merged and merged[-1][1] == start:
            merged[-1][1] = stop
        elif stop > start:
            merged.append([start, stop])
    names = {field.name for field, _, _, _ in ids}
    frame = _Frame(limits, tuple((start, bytes(data[start:stop])) for start, stop in merged),
                   summed, header_end if ids else 0, ids, tuple(tensors), schema.cls,
                   {name: value for name, value in fields.items() if name not in names},
                   tuple(name for name in lists if name not in names), schema.tensor_field)
    if _kept >= KEPT:
        forget_all()
    _by_size.setdefault(len(data), []).append(frame)
    _kept += 1


def forget_where(name: str, value: Any) -> None:
    """Drop every frame template whose message's fixed field ``name`` is ``value`` (a
    deregistered graph's: ``graph_handle``). A template that another thread's trio run
    learns meanwhile may be dropped with them (it is learnt again from a later frame)."""
    global _kept
    _kept = max(_kept - _headers.drop_from(_by_size, lambda frame: frame.fields, name, value), 0)


def forget_all() -> None:
    """Drop every frame template."""
    global _kept
    _by_size.clear()
    _kept = 0


def statistics() -> dict:
    """``{"kept": templates, "decoded": frames decoded from one, "steps": of them, by
    :func:`decode_step`}`` (tests count them)."""
    return {"kept": _kept, "decoded": _decoded, "steps": _steps}


def decode_step(data: bytes, limits: Any) -> tuple | None:
    """A frame (``bytes``, at most :data:`COPIED`) of a kept template's signature read
    without its message: ``(template, ids, arrays)`` (:func:`step_template`, then
    :func:`read_step`), None where no template is of it or a check fails."""
    template = step_template(data, limits)
    if template is None:
        return None
    found = read_step(template, data)
    return None if found is None else (template, *found)


def step_template(data: bytes, limits: Any) -> _Frame | None:
    """The kept template whose fixed stretches ``data`` (``bytes``, at most :data:`COPIED`)
    matches, of a message with tensors, or None: nothing else of ``data`` is checked yet
    (:func:`read_step`). Why apart: a reader that keeps nothing for a template
    (``template.bound``) leaves its frames to :func:`decode` unread, not read twice."""
    if type(data) is not bytes:
        return None
    frame = _matching(data, limits)
    return None if frame is None or frame.tensor_field is None else frame


def read_step(frame: _Frame, data: bytes) -> tuple | None:
    """``(ids, arrays)`` of the frame ``data`` of :func:`step_template`'s ``frame``: ``ids``
    its volatile ids' values in :func:`describe`'s order, ``arrays`` its tensors' values (each
    a fresh array, as :func:`decode` gives them); the same checks as :func:`decode` (the
    sums, each id by its converter), None where any fails (the caller decodes it as before:
    this path decides no verdict). Why: a worker that knows what a template's fixed fields
    mean for it (``template.bound``, which the caller keeps, made from :func:`describe` once)
    needs no ``RunGraph`` nor ``TensorEntry`` for a step's RunGraph."""
    global _decoded, _steps
    extend = _checksum.extend
    view = memoryview(data)
    if frame.summed and frame.header_end and not _header_summed(frame, data, view):
        return None
    ids = []
    for field, offset, width, fixint in frame.ids:
        if fixint:
            value = data[offset]
            if value >= 0x80:
                return None
        else:
            value = int.from_bytes(data[offset:offset + width], "big")
        try:
            ids.append(field.from_wire(value))
        except SchemaMismatch:
            return None
    arrays = []
    for _, dtype, shape, offset, nbytes, summed in frame.tensors:
        if not nbytes:
            arrays.append(np.empty(shape, dtype))
            continue
        stop = offset + nbytes
        if summed and extend(0, view[offset:stop]) != int.from_bytes(
                data[stop:stop + _TRAILER], "little"):
            return None
        arrays.append(np.frombuffer(data, dtype, nbytes // dtype.itemsize,
                                    offset).reshape(shape).copy())
    _decoded += 1
    _steps += 1
    return ids, arrays


def describe(template: _Frame) -> tuple:
    """``(message class, fields, ids, tensors)`` of a template that :func:`decode_step`
    returned: ``fields`` its fixed plain fields (a copy), ``ids`` the names of its volatile
    ids (``decode_step``'s order), ``tensors`` per tensor ``(key, numpy dtype, shape)``."""
    fields = dict(template.fields)
    for name in template.lists:
        fields[name] = list(fields[name])
    return (template.cls, fields, tuple(field.name for field, _, _, _ in template.ids),
            tuple((key, dtype, shape) for key, dtype, shape, _, _, _ in template.tensors))
