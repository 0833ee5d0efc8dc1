"""What may travel on the wire: layout constants, the dtype allowlist, size limits, protocol errors
and the payload schemas compiled from the message dataclasses.

:mod:`transports.wire` (the codec) builds on these and re-exports the public names; import them
from there. A schema is derived from a message class's annotations once, at import: its payload
fields with a compiled type predicate each, its required fields, and its one tensor field.

This module must not know about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Union

import numpy as np

from transports.messages import CANONICAL_CODES, MESSAGE_TYPES, RECORD_TYPES, Status, TensorEntry

MAGIC: Final = b"AFWF"  # a frame whose prefix and header carry no checksum
CHECKED_MAGIC: Final = b"AFWC"  # a frame whose prefix and header are checksummed (two bits away)
FORMAT_VERSION: Final = 1
ALIGNMENT: Final = 64
# Wire dtypes: explicitly little-endian, so a big-endian host still speaks the same bytes.
# ``WIRE_DTYPES`` (name -> numpy dtype) is built on first access (``__getattr__`` below): its
# bfloat16 comes from ml_dtypes, whose import costs about 0.6 s of CPU (bench/RESULTS.md,
# 2026-12-05). The codec looks names up in ``_WIRE``, which gains bfloat16 (``_load_late``)
# when a descriptor names it or an array of it is sent (ml_dtypes is loaded then anyway).
_WIRE: Final[dict[str, np.dtype]] = {
    "bool": np.dtype("|b1"),
    "int8": np.dtype("|i1"), "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"), "int64": np.dtype("<i8"),
    "uint8": np.dtype("|u1"), "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
}
_LATE_WIRE: Final = ("bfloat16",)  # from ml_dtypes
_WIRE_ORDER: Final = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                      "uint64", "float16", "bfloat16", "float32", "float64")
STRING_DTYPE: Final = "string"  # numpy object arrays whose items are all bytes
_ALLOWED: Final = ", ".join([*_WIRE_ORDER, STRING_DTYPE])  # for error messages
DESCRIPTOR_KEYS = frozenset({"key", "dtype", "shape", "nbytes", "dead", "error", "strings"})
CHECKSUM_KEY: Final = "crc32c"  # optional descriptor key: CRC32C of the raw segment
CHECKED_DESCRIPTOR_KEYS = DESCRIPTOR_KEYS | {CHECKSUM_KEY}
HEADER_KEYS = frozenset({"version", "kind", "payload", "tensors"})
# The product of a shape's non-zero dimensions stays below this, so numpy (intp byte counts,
# itemsize <= 8) can make the shape even when a zero dimension empties it.
MAX_SHAPE_PRODUCT: Final = 1 << 59
PREFIX: Final = struct.Struct("<4sI")  # magic, header length
# magic, header length, CRC32C of the header, CRC32C of the 12 bytes before it
CHECKED_PREFIX: Final = struct.Struct("<4sIII")


class WireError(Exception):
    """Base of the codec's protocol errors."""


class LocalProtocolError(WireError):
    """We tried to send something the protocol cannot carry (a bug on this side)."""


class RemoteProtocolError(WireError):
    """The peer sent bytes that are not a valid frame."""


class FrameTooLarge(RemoteProtocolError):
    """The peer's frame is well formed but exceeds this side's :class:`Limits`."""


class ChecksumMismatch(RemoteProtocolError):
    """Bytes of a frame do not match the CRC32C its sender put beside them: they were damaged
    on the way (a flipped bit that TCP's 16-bit checksum let through).

    Attributes:
        key: the tensor entry's key (a fetch name or a rendezvous key) whose raw bytes or
            trailer were damaged; None when the damage is in the frame's prefix or header (its
            descriptors and string tensors), which belong to no single tensor.
        part: what was damaged, in words (``"tensor 'x:0'"``, ``"frame header"``...);
            ``detail``: the rest of the message (the two checksums).
        stored: the sender's checksum; ``computed``: the checksum of the bytes received (None
            where the damage is found otherwise: a magic one bit off, non-zero padding).
        fields: the frame's payload, where its header was checked intact (else None).
    """

    def __init__(self, key: str | None, nbytes: int, stored: int | None, computed: int | None,
                 part: str | None = None, fields: dict | None = None) -> None:
        self.key, self.stored, self.computed, self.fields = key, stored, computed, fields
        self.part = f"tensor {key!r:.200}" if part is None else part
        if stored is None or computed is None:
            self.detail = "damaged in transit (Checksum does not match)"
        else:
            self.detail = (f"Checksum does not match: the sender's CRC32C of its {nbytes} "
                           f"bytes is {stored:08x}, the bytes received give {computed:08x} "
                           "(damaged in transit)")
        super().__init__(f"{self.part}: {self.detail}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Size bounds that the decoder checks before allocating (and the encoder before sending).

    Attributes:
        max_header_bytes: largest msgpack header (graphs travel in the header of RegisterGraph).
        max_tensor_bytes: largest raw segment of one tensor.
        max_body_bytes: largest sum of raw segments in one frame.
        max_tensors: most tensor descriptors in one frame.
        max_rank: most dimensions of one tensor.
        max_depth: deepest nesting of maps and lists in the payload (the payload map is 1).
        max_header_values: most msgpack values (keys, items, containers) in one header. A
            byte of msgpack can become a 56-byte Python list, so this, not the byte count,
            bounds the memory a header costs once decoded (about 72 bytes per value).
    """

    max_header_bytes: int = 32 << 20
    max_tensor_bytes: int = 2 << 30
    max_body_bytes: int = 4 << 30
    max_tensors: int = 65_536
    max_rank: int = 32
    max_depth: int = 64
    max_header_values: int = 4_000_000

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame these limits admit, padding included."""
        padding = (ALIGNMENT - 1) * self.max_tensors
        return PREFIX.size + self.max_header_bytes + self.max_body_bytes + padding


DEFAULT_LIMITS: Final = Limits()


class SchemaMismatch(Exception):
    """A value that does not fit its annotation (or its record refuses it).

    ``where`` names the field from the outside in (``["options", "peers"]``); the codec adds the
    message's name and raises the protocol error of its side.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.where: list[str] = []

    def describe(self, owner: str) -> str:
        return f"{'.'.join([owner, *self.where])}{self.problem}"


def _mismatch(hint: Any, value: Any) -> SchemaMismatch:
    return SchemaMismatch(f" must be {describe_hint(hint)}, got {value!r:.80}")


@dataclass(frozen=True, slots=True)
class Field:
    """One payload or record field, with its conversions compiled from the annotation once.

    ``to_wire`` turns a Python value into plain msgpack data and ``from_wire`` plain data into
    the Python value (records become their dataclasses); both raise :class:`SchemaMismatch`.
    """

    name: str
    hint: Any  # the annotation, for error messages
    to_wire: Callable[[Any], Any]
    from_wire: Callable[[Any], Any]
    default: Any  # the wire form of the default; dataclasses.MISSING for a required field
    nests: bool  # holds Any somewhere: free nesting, so the decoder bounds its depth

    def omit(self, plain: Any) -> bool:
        """True when ``plain`` is the default, which a sender leaves out."""
        return self.default is not dataclasses.MISSING and type(plain) is type(self.default) \
            and plain == self.default


@dataclass(frozen=True, slots=True)
class Schema:
    kind: str
    cls: type
    plain: tuple[Field, ...]  # payload fields
    required: frozenset[str]
    tensor_field: str | None


def build_schema(kind: str, cls: type) -> Schema:
    fields, tensor_field = _fields(cls, allow_tensors=True)
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING)
    return Schema(kind, cls, fields, required, tensor_field)


def _fields(cls: type, allow_tensors: bool = False) -> tuple[tuple[Field, ...], str | None]:
    hints = typing.get_type_hints(cls)
    plain, tensor_field = [], None
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if hint == list[TensorEntry]:
            assert allow_tensors and tensor_field is None, f"{cls.__name__}: misplaced tensors"
            tensor_field = f.name
            continue
        to_wire, from_wire = converters(hint)
        default = (f.default if f.default_factory is dataclasses.MISSING
                   else f.default_factory())
        if default is not dataclasses.MISSING:
            default = to_wire(default)
        plain.append(Field(f.name, hint, to_wire, from_wire, default, _mentions_any(hint)))
    return tuple(plain), tensor_field


_MISSING: Final = dataclasses.MISSING
_FIELD_NAMES: dict = {}  # id(fields) -> (fields, names, required): the schemas' tuples live on


def record_to_wire(fields: tuple[Field, ...], obj: Any) -> dict[str, Any]:
    """The plain map of a message's or record's fields, defaults left out."""
    plain = {}
    for f in fields:
        try:
            value = f.to_wire(getattr(obj, f.name))
        except SchemaMismatch as exc:
            exc.where.insert(0, f.name)
            raise
        default = f.default  # Field.omit, inlined: this runs for every field of every frame
        if default is _MISSING or type(value) is not type(default) or value != default:
            plain[f.name] = value
    return plain


def record_from_wire(fields: tuple[Field, ...], plain: dict) -> dict[str, Any]:
    """The keyword arguments of a message or record from its plain map (checked whole)."""
    known = _FIELD_NAMES.get(id(fields))
    if known is None or known[0] is not fields:  # (names, required) once per fields tuple
        known = _FIELD_NAMES[id(fields)] = (fields, frozenset(f.name for f in fields), frozenset(
            f.name for f in fields if f.default is dataclasses.MISSING))
    names, required = known[1], known[2]
    keys = plain.keys()
    unknown, missing = keys - names, required - keys
    if unknown or missing:
        raise SchemaMismatch(f": unknown fields {sorted(map(str, unknown))}, "
                             f"missing fields {sorted(missing)}")
    values = {}
    for f in fields:
        if f.name in plain:
            try:
                values[f.name] = f.from_wire(plain[f.name])
            except SchemaMismatch as exc:
                exc.where.insert(0, f.name)
                raise
    return values


def _mentions_any(hint: Any) -> bool:
    if hint in RECORD_TYPES:
        return any(f.nests for f in _fields(hint)[0])
    return hint is Any or any(_mentions_any(arg) for arg in typing.get_args(hint))


def _mentions_record(hint: Any) -> bool:
    return hint in RECORD_TYPES or any(_mentions_record(a) for a in typing.get_args(hint))


def _same(check: Callable[[Any], bool], hint: Any) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if not check(value):
            raise _mismatch(hint, value)
        return value
    return convert


def converters(hint: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``(to_wire, from_wire)`` for an annotation: identity after a check for plain types; records
    (:data:`RECORD_TYPES`) become maps, also inside ``list[...]``, ``dict[str, ...]`` and
    ``... | None``."""
    if not _mentions_record(hint):
        if hint is float:  # msgpack keeps 2.0 apart from 2; a float field reads both as float
            def float_from_wire(value: Any) -> float:
                if isinstance(value, int) and not isinstance(value, bool):
                    return float(value)
                if not isinstance(value, float):
                    raise _mismatch(hint, value)
                return value
            return _same(checker(float), hint), float_from_wire
        if typing.get_origin(hint) in (types.UnionType, Union) and float in typing.get_args(hint):
            check = checker(hint)
            def optional_float_from_wire(value: Any) -> Any:
                if isinstance(value, int) and not isinstance(value, bool):
                    return float(value)
                if not check(value):
                    raise _mismatch(hint, value)
                return value
            return _same(check, hint), optional_float_from_wire
        same = _same(checker(hint), hint)
        return same, same
    if hint in RECORD_TYPES:
        return _record_converters(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, Union):
        assert len(args) == 2 and type(None) in args, f"no wire form for {hint!r}"
        inner_to, inner_from = converters(next(a for a in args if a is not type(None)))
        return ((lambda value: None if value is None else inner_to(value)),
                (lambda value: None if value is None else inner_from(value)))
    assert origin is list, f"no wire form for {hint!r}"
    item_to, item_from = converters(args[0])

    def each(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def convert_list(value: Any) -> list:
            if not isinstance(value, list):
                raise _mismatch(hint, value)
            items = []
            for index, item in enumerate(value):
                try:
                    items.append(convert(item))
                except SchemaMismatch as exc:
                    exc.where.insert(0, str(index))
                    raise
            return items
        return convert_list
    return each(item_to), each(item_from)


def _record_converters(cls: type) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    fields = _fields(cls)[0]

    def to_wire(value: Any) -> dict:
        if type(value) is not cls:
            raise _mismatch(cls, value)
        return record_to_wire(fields, value)

    def from_wire(value: Any) -> Any:
        if not isinstance(value, dict):
            raise SchemaMismatch(f" must be a map of {cls.__name__} fields, got {value!r:.80}")
        try:
            return cls(**record_from_wire(fields, value))
        except (TypeError, ValueError) as exc:
            raise SchemaMismatch(f": {exc}") from exc
    return to_wire, from_wire


def checker(hint: Any) -> Callable[[Any], bool]:
    """Compile a plain annotation (int, str, list[str], dict[str, Any], X | None, ...) into a
    predicate on plain values."""
    if hint is Any:
        return lambda value: True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, Union):
        alternatives = [checker(arg) for arg in args if arg is not type(None)]
        if len(alternatives) == 1 and len(args) == 2:  # X | None, without a generator
            only = alternatives[0]
            return lambda value: value is None or only(value)
        if len(alternatives) < len(args):
            alternatives.insert(0, checker(type(None)))
        return lambda value: any(check(value) for check in alternatives)
    if origin is list:
        item = checker(args[0])
        return lambda value: isinstance(value, list) and all(map(item, value))
    if origin is dict:
        key, item = checker(args[0]), checker(args[1])
        return lambda value: isinstance(value, dict) and all(
            key(k) and item(v) for k, v in value.items())
    if hint is type(None):
        return lambda value: value is None
    if hint in (int, float):  # bool is an int to Python, never to the protocol
        return lambda value: type(value) is hint or (
            isinstance(value, hint) and not isinstance(value, bool))
    assert hint in (str, bytes, bool), f"no wire check for annotation {hint!r}"
    return lambda value: type(value) is hint or isinstance(value, hint)


SCHEMAS: Final = {kind: build_schema(kind, cls) for kind, cls in MESSAGE_TYPES.items()}
SCHEMA_BY_CLASS: Final = {schema.cls: schema for schema in SCHEMAS.values()}
# dtype -> wire name, big-endian twins included (encode converts them)
WIRE_NAMES: Final = {**{d.newbyteorder(">"): n for n, d in _WIRE.items()},
                      **{d: n for n, d in _WIRE.items()}}


def _load_late() -> None:
    """Add bfloat16 to ``_WIRE`` and ``WIRE_NAMES`` (idempotent; the import lock serializes
    ml_dtypes' import, and every thread stores the same values)."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16)
    WIRE_NAMES[dtype.newbyteorder(">")] = "bfloat16"
    WIRE_NAMES[dtype] = "bfloat16"
    _WIRE["bfloat16"] = dtype


def __getattr__(name: str) -> Any:
    if name == "WIRE_DTYPES":  # the whole table, in the wire's order (bfloat16 after float16)
        _load_late()
        return {n: _WIRE[n] for n in _WIRE_ORDER}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def describe_hint(hint: Any) -> str:
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    return str(hint).replace("typing.", "").replace("transports.messages.", "")


def check_depth(obj: Any, max_depth: int, start: int) -> None:
    """Bound the nesting of plain values handed to the application (graphs, stats).

    ``start`` is the level of ``obj`` itself (the payload map is level 1).
    """
    stack = [(obj, start)] if isinstance(obj, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise RemoteProtocolError(f"payload nests maps/lists deeper than {max_depth} levels")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def check_descriptor(index: int, d: Any, limits: Limits) -> tuple[dict, np.dtype | None, int]:
    """Validate one descriptor of a frame's header against ``limits``; return it with the dtype
    to allocate and its raw byte count.

    Raises:
        RemoteProtocolError: a descriptor that breaks the format (FrameTooLarge: limits).
    """
    where = f"tensor #{index}"
    if not isinstance(d, dict) or d.keys() not in (DESCRIPTOR_KEYS, CHECKED_DESCRIPTOR_KEYS):
        raise RemoteProtocolError(f"{where}: descriptor must be a map with keys "
                                  f"{sorted(DESCRIPTOR_KEYS)} and optionally "
                                  f"{CHECKSUM_KEY!r}")
    if CHECKSUM_KEY in d and (d[CHECKSUM_KEY] is not True or not d["nbytes"]):
        raise RemoteProtocolError(f"{where}: {CHECKSUM_KEY} must be true (a CRC32C trailer "
                                  f"follows the raw bytes) and only describes raw bytes, "
                                  f"got {d[CHECKSUM_KEY]!r:.40}")
    key, dtype, shape, nbytes, strings = (d["key"], d["dtype"], d["shape"], d["nbytes"],
                                          d["strings"])
    if not isinstance(key, str) or not isinstance(d["dead"], bool):
        raise RemoteProtocolError(f"{where}: key must be str and dead bool")
    where = f"tensor {key!r:.80}"
    error = d["error"]
    if error is not None and not (
            isinstance(error, dict) and set(error) == {"code", "message"}
            and isinstance(error["code"], str) and error["code"] in CANONICAL_CODES
            and isinstance(error["message"], str)):
        raise RemoteProtocolError(f"{where}: error must be {{code: canonical code name, "
                                  f"message: str}}, got {error!r:.80}")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise RemoteProtocolError(f"{where}: nbytes must be a non-negative int")
    if dtype is None:
        if shape is not None or nbytes or strings is not None:
            raise RemoteProtocolError(f"{where}: an entry without dtype has no shape or data")
        return d, None, 0
    _check_shape(where, shape, limits)
    count = math.prod(shape)
    if dtype == STRING_DTYPE:
        if nbytes or not isinstance(strings, list) or len(strings) != count or not all(
                isinstance(s, bytes) for s in strings):
            raise RemoteProtocolError(f"{where}: a string tensor of shape {shape} needs "
                                      f"{count} bin items in 'strings' and nbytes 0")
        return d, np.dtype(object), 0
    wire = _WIRE.get(dtype) if isinstance(dtype, str) else None
    if wire is None and dtype in _LATE_WIRE:
        _load_late()
        wire = _WIRE[dtype]
    if wire is None:
        raise RemoteProtocolError(f"{where}: dtype {dtype!r:.40} is not allowed; allowed: "
                                  f"{_ALLOWED}")
    if strings is not None or count * wire.itemsize != nbytes:
        raise RemoteProtocolError(f"{where}: shape {shape} of {dtype} needs "
                                  f"{count * wire.itemsize} bytes, header says {nbytes}")
    if nbytes > limits.max_tensor_bytes:
        raise FrameTooLarge(f"{where} is {nbytes} bytes, over the limit of "
                            f"{limits.max_tensor_bytes}")
    return d, wire, nbytes


def _check_shape(where: str, shape: Any, limits: Limits) -> None:
    if not isinstance(shape, list) or len(shape) > limits.max_rank or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise RemoteProtocolError(f"{where}: shape must be a list of at most "
                                  f"{limits.max_rank} non-negative ints, got {shape!r:.80}")
    # numpy must be able to make the shape even when a zero dimension empties it.
    if math.prod(n for n in shape if n) > MAX_SHAPE_PRODUCT:
        raise RemoteProtocolError(f"{where}: shape {shape} has more than "
                                  f"{MAX_SHAPE_PRODUCT} elements per non-empty slice")


def describe_entry(entry: TensorEntry, limits: Limits) -> tuple[dict, memoryview | None]:
    """The descriptor of an entry to send and the view of its raw bytes (None without any),
    every field checked (LocalProtocolError: what this side must not send)."""
    if not isinstance(entry.key, str) or not isinstance(entry.is_dead, bool):
        raise LocalProtocolError(f"TensorEntry key must be str and is_dead bool: {entry!r:.120}")
    if entry.error is not None and not isinstance(entry.error, Status):
        raise LocalProtocolError(f"TensorEntry {entry.key!r}: error must be a Status")
    descriptor = {"key": entry.key, "dtype": None, "shape": None, "nbytes": 0,
                  "dead": entry.is_dead, "strings": None,
                  "error": None if entry.error is None else
                  {"code": entry.error.code, "message": entry.error.message}}
    value = entry.value
    if value is None:
        return descriptor, None
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise LocalProtocolError(f"tensor {entry.key!r}: value must be a numpy array or None, "
                                 f"got {type(value).__name__}")
    if value.ndim > limits.max_rank:
        raise LocalProtocolError(f"tensor {entry.key!r} has rank {value.ndim}, over the limit "
                                 f"of {limits.max_rank}")
    descriptor["shape"] = list(value.shape)
    if value.dtype == object:
        strings = value.ravel().tolist()
        for item in strings:
            if not isinstance(item, bytes):
                raise LocalProtocolError(f"string tensor {entry.key!r} holds a "
                                         f"{type(item).__name__}; only bytes items can be sent")
        descriptor.update(dtype=STRING_DTYPE, strings=[bytes(s) for s in strings])
        return descriptor, None
    name = WIRE_NAMES.get(value.dtype)
    if name is None and "ml_dtypes" in sys.modules:  # a bfloat16 array may exist now
        _load_late()
        name = WIRE_NAMES.get(value.dtype)
    if name is None:
        raise LocalProtocolError(
            f"tensor {entry.key!r} has dtype {value.dtype}, which the wire does not carry; "
            f"allowed: {_ALLOWED}")
    if value.nbytes > limits.max_tensor_bytes:
        raise LocalProtocolError(f"tensor {entry.key!r} is {value.nbytes} bytes, over the limit "
                                 f"of {limits.max_tensor_bytes}")
    descriptor["dtype"] = name
    if value.flags.c_contiguous and value.dtype == _WIRE[name]:  # as it goes: no copy
        descriptor["nbytes"] = value.nbytes
        if value.nbytes == 0:
            return descriptor, None
        try:  # a plain buffer view is the cheapest; a dtype without a buffer code (bfloat16)
            return descriptor, memoryview(value).cast("B")  # is viewed through numpy instead
        except (ValueError, TypeError):
            return descriptor, memoryview(value.reshape(-1).view(np.uint8))
    value = np.ascontiguousarray(value, dtype=_WIRE[name])
    descriptor["nbytes"] = value.nbytes
    if value.nbytes == 0:
        return descriptor, None
    return descriptor, memoryview(value.reshape(-1).view(np.uint8))


# Headers seen before, validated: (limits, header bytes) -> (schema, payload, plans). A step
# repeated with the same signature gets byte-identical reply headers (the same keys, dtypes,
# shapes and fields; only the tensors' bytes differ), and validation is a function of the
# header bytes and the limits alone, so a repeat skips msgpack, the payload's schema and the
# descriptors' checks (about half of a small reply's decoding). The decoded messages share the
# payload's immutable values (scalars, frozen records of scalars) and the descriptors, which
# nothing writes to; a payload that also holds lists or maps of such values (a HealthReply's
# devices and cluster) is kept with the names of those fields, and every message decoded from
# it gets its own copies of them (:func:`validated`), when those lists and maps hold at most
# :data:`_COPIED_VALUES` items and entries in all: a byte of msgpack can be a 64-byte map, so
# without that bound 256 kept headers of 2 KiB could hold ~34 MiB (and a nesting as deep as
# the limits allow would overflow the copy's recursion). Any other payload is not kept.
VALIDATED_HEADERS: dict = {}
_CACHED_HEADERS: Final = 256  # cleared when full: a bound, not an LRU
CACHED_HEADER_BYTES: Final = 2048
_COPIED_VALUES: Final = 64  # a Health reply's devices and a cluster of a few dozen tasks
_SCALARS: Final = (str, int, float, bytes)
_FROZEN_RECORDS: Final = frozenset(t for t in RECORD_TYPES
                                   if t.__dataclass_params__.frozen)  # type: ignore[attr-defined]


def _immutable(value: Any) -> bool:
    """None, a scalar, or a frozen record whose fields are all immutable."""
    if value is None or isinstance(value, _SCALARS):
        return True
    if type(value) in _FROZEN_RECORDS:
        return all(_immutable(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def _copyable(values: list) -> bool:
    """Each of ``values`` immutable, or a list or a str-keyed map of such values, holding
    :data:`_COPIED_VALUES` items and entries at most in all (so also nesting no deeper)."""
    stack, left = list(values), _COPIED_VALUES
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is list or kind is dict:
            left -= len(value)
            if left < 0:
                return False
            if kind is dict:
                if not all(type(k) is str for k in value):
                    return False
                value = value.values()
            stack.extend(value)
        elif not _immutable(value):
            return False
    return True


def _fresh(value: Any) -> Any:
    """A copyable value with lists and maps of its own (the immutable values shared)."""
    kind = type(value)
    if kind is list:
        return [_fresh(item) for item in value]
    if kind is dict:
        return {k: _fresh(v) for k, v in value.items()}
    return value


def remember_header(key: tuple, parsed: tuple) -> None:
    """Keep a validated header's ``(schema, payload, plans)`` under ``(limits, header bytes)``
    (the decoder's) when its payload's values are immutable or copyable (see above)."""
    schema, payload, plans = parsed
    copied = tuple(name for name, value in payload.items() if not _immutable(value))
    if copied:
        if not _copyable([payload[name] for name in copied]):
            return
        payload = dict(payload)  # (the message just decoded owns the parsed lists and maps)
        for name in copied:
            payload[name] = _fresh(payload[name])
        parsed = (schema, payload, plans, copied)
    if len(VALIDATED_HEADERS) >= _CACHED_HEADERS:
        VALIDATED_HEADERS.clear()
    VALIDATED_HEADERS[key] = parsed


def validated(key: tuple) -> tuple | None:
    """The kept ``(schema, payload, plans)`` of ``(limits, header bytes)``, else None; a
    payload kept with lists or maps comes with copies of its own."""
    parsed = VALIDATED_HEADERS.get(key)
    if parsed is not None and len(parsed) == 4:
        schema, payload, plans, copied = parsed
        payload = dict(payload)
        for name in copied:
            payload[name] = _fresh(payload[name])
        return schema, payload, plans
    return parsed


def refuse_magic(magic: bytes) -> None:
    """Raise for a frame start that is neither magic: damage when one bit from the checked
    magic (a checked frame's first bytes, damaged), else not an asyncflow frame at all.

    A start shorter than the magic that is one bit from the checked magic's start so far is not
    judged yet (this returns): its last bytes decide, so a frame fed byte by byte gets the
    verdict of the same frame fed whole."""
    flipped = sum(bin(a ^ b).count("1") for a, b in zip(magic, CHECKED_MAGIC))
    if flipped == 1 and len(magic) < len(CHECKED_MAGIC):
        return
    if flipped == 1:
        raise ChecksumMismatch(None, len(magic), None, None, f"frame magic {magic!r} (one bit "
                               f"from {CHECKED_MAGIC!r})")
    raise RemoteProtocolError(f"bad magic {magic!r}: not an asyncflow frame (expected "
                              f"{MAGIC!r} or {CHECKED_MAGIC!r})")
