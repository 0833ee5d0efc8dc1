"""A graph's RunGraph as a caller sends it step after step: everything fixed but the ids and
the feeds' bytes.

A master sends one registered graph the same RunGraph every step but for its ``step_id``, its
``request_id`` and its feeds' values. :class:`RunGraphStep` holds the fixed fields once (the
handle, the feed keys, the fetch keys, the run's timeout and trace flag); a channel that keeps
prepared frames (``transports.http.client``) builds a step's frame from the
:class:`transports.repeat_frames.Prepared` it learnt from this signature's last full encode,
filling in only the ids and the feeds' bytes (:meth:`Prepared.encode_step`): no RunGraph nor
TensorEntry is made and no field is compared again. A feed of another dtype or shape (or not a
C-contiguous array) is never sent in that frame: the step's RunGraph is built and encoded in
full, and its own signature kept for the next steps. A channel without prepared frames sends
:meth:`RunGraphStep.message`'s RunGraph (``Channel.run_graph_step``).

A small step's frame (at most :data:`WHOLE_BYTES`: a trivial step's RunGraph) is built
faster still from a :class:`StepImage`: the frame's bytes kept whole, where its ids' values,
its header and its feeds' bytes and trailers lie found once, proven by building a second
frame of other ids and comparing it with the prepared encode's; a step's frame is a copy of
them with the ids, the feeds' bytes and the checksums written in place (one buffer: one
piece for the writer). An id of another msgpack width, or a feed not of the signature, is
built by the prepared encode (a new width learnt anew).

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgpack
import numpy as np

from transports import checksum as _checksum
from transports.messages import RunGraph, TensorEntry
from transports.schema import ALIGNMENT, CHECKED_MAGIC, CHECKED_PREFIX, MAGIC, PREFIX

__all__ = ["WHOLE_BYTES", "RunGraphStep", "StepCall", "StepImage"]

WHOLE_BYTES: Final = 4096  # step frames up to this are built from a StepImage
_UINT64: Final = 1 << 64
_CRC: Final = struct.Struct("<I")


class RunGraphStep:
    """The fixed fields of a graph's RunGraphs (one per handle, feed and fetch keys, timeout
    and trace flag); ``prepared``: the channel's prepared frame of them (None until the
    first full encode; the channel keeps it)."""

    __slots__ = ("graph_handle", "feed_keys", "fetch_keys", "timeout_ms", "trace", "prepared")

    def __init__(self, graph_handle: str, feed_keys: tuple, fetch_keys: tuple,
                 timeout_ms: int | None = None, trace: bool = False) -> None:
        self.graph_handle = graph_handle
        self.feed_keys = tuple(feed_keys)
        self.fetch_keys = tuple(fetch_keys)
        self.timeout_ms = timeout_ms
        self.trace = trace
        self.prepared: Any = None

    def fits(self, graph_handle: str, timeout_ms: int | None, trace: bool) -> bool:
        """Whether this is the signature of a RunGraph of ``graph_handle`` (the same object:
        a handle registered again makes a new one) with that timeout and trace flag."""
        return (graph_handle is self.graph_handle and timeout_ms == self.timeout_ms
                and trace is self.trace)

    def message(self, step_id: int, request_id: int, values: list) -> RunGraph:
        """The step's RunGraph, as a full encode takes it."""
        return RunGraph(self.graph_handle, step_id,
                        [TensorEntry(key, value) for key, value in zip(self.feed_keys, values)],
                        list(self.fetch_keys), timeout_ms=self.timeout_ms, trace=self.trace,
                        request_id=request_id)


class StepCall:
    """One step's RunGraph call: a :class:`RunGraphStep`, the step's ids and feed values."""

    __slots__ = ("step", "step_id", "request_id", "values")

    def __init__(self, step: RunGraphStep, step_id: int, request_id: int, values: list) -> None:
        self.step, self.step_id, self.request_id, self.values = step, step_id, request_id, values

    def message(self) -> RunGraph:
        return self.step.message(self.step_id, self.request_id, self.values)


# msgpack's uint forms by width (its smallest, as ``packb`` writes it): (width, low, high, the
# type byte or None for a positive fixint, the value's packer)
_FORMS: Final = ((1, 0, 0x80, None, struct.Struct(">B")),
                 (2, 0x80, 0x100, 0xCC, struct.Struct(">B")),
                 (3, 0x100, 0x10000, 0xCD, struct.Struct(">H")),
                 (5, 0x10000, 0x1_0000_0000, 0xCE, struct.Struct(">I")),
                 (9, 0x1_0000_0000, _UINT64, 0xCF, struct.Struct(">Q")))


def _form(value: int) -> tuple:
    """The msgpack uint form of ``0 <= value < 2**64`` (a row of ``_FORMS``)."""
    return next(form for form in _FORMS if value < form[2])


def _uint(value: int) -> bytes:
    """msgpack's encoding of a uint id (its smallest form, as ``packb`` writes it)."""
    _, _, _, kind, packer = _form(value)
    return packer.pack(value) if kind is None else bytes((kind,)) + packer.pack(value)


def _joined(buffers: list) -> bytes:
    return b"".join(bytes(b) for b in buffers)


class StepImage:
    """A small step frame kept whole, with the places of its ids and feeds (see the module
    docstring); :meth:`learn` makes one, :meth:`frame` builds a step's frame from it."""

    __slots__ = ("image", "spots", "header", "segments", "checksums", "shapes")

    def __init__(self, image: bytes, spots: tuple, header: tuple, segments: tuple,
                 checksums: bool, shapes: tuple) -> None:
        self.image = image        # the frame's bytes
        self.spots = spots        # per id (in the prepared order): (offset of its value's
        #                           bytes, the values of its width from low to high, packer)
        self.header = header      # (start, stop) of the header (checksummed frames)
        self.segments = segments  # per feed: (start, stop) of its bytes, None if it has none
        self.checksums = checksums
        self.shapes = shapes      # per feed: (dtype, shape)

    @classmethod
    def learn(cls, encode: Any, names: tuple, ids: tuple, values: list,
              checksums: bool) -> StepImage | None:
        """The image of the frame ``encode(ids, values, checksums, False)`` builds (a
        prepared signature's ``encode_step``; ``names``: its ids' field names), or None where
        that frame is larger than :data:`WHOLE_BYTES`, its places are not found each once or
        the frame of other ids of the same widths built from them differs from the encode's."""
        buffers = encode(ids, values, checksums, False)
        if buffers is None:
            return None
        frame = _joined(buffers)
        prefix = CHECKED_PREFIX if checksums else PREFIX
        if len(frame) > WHOLE_BYTES or len(frame) < prefix.size or \
                frame[:4] != (CHECKED_MAGIC if checksums else MAGIC):
            return None
        start = prefix.size
        stop = start + PREFIX.unpack_from(frame)[1]
        header, spots = frame[start:stop], []
        for name, value in zip(names, ids):
            if type(value) is not int or not 0 < value < _UINT64:
                return None
            key, encoded = msgpack.packb(name), _uint(value)
            at = header.find(key + encoded)
            if at < 0 or header.find(key + encoded, at + 1) >= 0:
                return None
            _, low, high, kind, packer = _form(value)  # (its value's bytes after its kind)
            spots.append((start + at + len(key) + (kind is not None), max(low, 1), high,
                          packer.pack_into))
        segments, offset = [], stop
        for value in values:
            if not value.nbytes:
                segments.append(None)
                continue
            offset += -offset % ALIGNMENT
            segments.append((offset, offset + value.nbytes))
            offset += value.nbytes + (4 if checksums else 0)
        if offset != len(frame):
            return None
        image = cls(frame, tuple(spots), (start, stop), tuple(segments), checksums,
                    tuple((value.dtype, value.shape) for value in values))
        other = tuple((1 if value != 1 else 2) if value < 128 else value ^ 1 for value in ids)
        built, want = image.frame(other, values, checksums), encode(other, values, checksums,
                                                                     False)
        if built is None or want is None or bytes(built[0]) != _joined(want):
            return None  # (not proven: the prepared encode builds every step)
        return image

    def frame(self, ids: tuple, values: list, checksums: bool) -> list | None:
        """The step's frame (one ``bytearray`` in a list) for ``ids`` and feed ``values``
        (checked as ``encode_step`` checks them), or None: an id of another width or not a
        uint, a feed of another dtype, shape or layout, another checksum setting."""
        if checksums is not self.checksums or len(values) != len(self.shapes):
            return None
        for value, (dtype, shape) in zip(values, self.shapes):
            if type(value) is not np.ndarray or value.dtype != dtype \
                    or value.shape != shape or not value.flags.c_contiguous:
                return None
        frame = bytearray(self.image)
        for value, (offset, low, high, pack) in zip(ids, self.spots):
            if type(value) is not int or not low <= value < high:
                return None  # (not a uint of the image's width: the prepared encode's)
            pack(frame, offset, value)
        extend = _checksum.extend
        for value, segment in zip(values, self.segments):
            if segment is not None:
                start, stop = segment
                data = value.tobytes()  # (C-contiguous: its bytes in memory order)
                frame[start:stop] = data
                if checksums:
                    _CRC.pack_into(frame, stop, extend(0, data))
        if checksums:
            start, stop = self.header
            _CRC.pack_into(frame, 8, extend(0, frame[start:stop]))
            _CRC.pack_into(frame, 12, extend(0, frame[:12]))
        return [frame]
