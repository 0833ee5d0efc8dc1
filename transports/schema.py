"""What may travel on the wire: layout constants, the dtype allowlist, size limits, protocol errors
and the payload schemas compiled from the message dataclasses.

:mod:`transports.wire` (the codec) builds on these and re-exports the public names; import them
from there. A schema is derived from a message class's annotations once, at import: its payload
fields with a compiled type predicate each, its required fields, and its one tensor field.

This module must not know about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Union

import ml_dtypes
import numpy as np

from transports.messages import MESSAGE_TYPES, RECORD_TYPES, TensorEntry

MAGIC: Final = b"AFWF"
FORMAT_VERSION: Final = 1
ALIGNMENT: Final = 64
# Wire dtypes: explicitly little-endian, so a big-endian host still speaks the same bytes.
WIRE_DTYPES: Final[dict[str, np.dtype]] = {
    "bool": np.dtype("|b1"),
    "int8": np.dtype("|i1"), "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"), "int64": np.dtype("<i8"),
    "uint8": np.dtype("|u1"), "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"), "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
}
STRING_DTYPE: Final = "string"  # numpy object arrays whose items are all bytes
DESCRIPTOR_KEYS = frozenset({"key", "dtype", "shape", "nbytes", "dead", "error", "strings"})
CHECKSUM_KEY: Final = "crc32c"  # optional descriptor key: CRC32C of the raw segment
HEADER_KEYS = frozenset({"version", "kind", "payload", "tensors"})
# The product of a shape's non-zero dimensions stays below this, so numpy (intp byte counts,
# itemsize <= 8) can make the shape even when a zero dimension empties it.
MAX_SHAPE_PRODUCT: Final = 1 << 59
PREFIX: Final = struct.Struct("<4sI")  # magic, header length


class WireError(Exception):
    """Base of the codec's protocol errors."""


class LocalProtocolError(WireError):
    """We tried to send something the protocol cannot carry (a bug on this side)."""


class RemoteProtocolError(WireError):
    """The peer sent bytes that are not a valid frame."""


class FrameTooLarge(RemoteProtocolError):
    """The peer's frame is well formed but exceeds this side's :class:`Limits`."""


class ChecksumMismatch(RemoteProtocolError):
    """A tensor's bytes do not match the CRC32C its sender put in the descriptor: they were
    damaged on the way (a flipped bit that TCP's 16-bit checksum let through).

    Attributes:
        key: the tensor entry's key (a fetch name or a rendezvous key).
        stored: the sender's checksum; ``computed``: the checksum of the bytes received.
    """

    def __init__(self, key: str, nbytes: int, stored: int, computed: int) -> None:
        super().__init__(f"tensor {key!r:.200}: Checksum does not match: the sender's CRC32C "
                         f"of its {nbytes} bytes is {stored:08x}, the bytes received give "
                         f"{computed:08x} (damaged in transit)")
        self.key, self.stored, self.computed = key, stored, computed


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


def record_to_wire(fields: tuple[Field, ...], obj: Any) -> dict[str, Any]:
    """The plain map of a message's or record's fields, defaults left out."""
    plain = {}
    for f in fields:
        try:
            value = f.to_wire(getattr(obj, f.name))
        except SchemaMismatch as exc:
            exc.where.insert(0, f.name)
            raise
        if not f.omit(value):
            plain[f.name] = value
    return plain


def record_from_wire(fields: tuple[Field, ...], plain: dict) -> dict[str, Any]:
    """The keyword arguments of a message or record from its plain map (checked whole)."""
    names = {f.name for f in fields}
    unknown = set(plain) - names
    missing = {f.name for f in fields if f.default is dataclasses.MISSING} - set(plain)
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
        alternatives = [checker(arg) for arg in args]
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
        return lambda value: isinstance(value, hint) and not isinstance(value, bool)
    assert hint in (str, bytes, bool), f"no wire check for annotation {hint!r}"
    return lambda value: isinstance(value, hint)


SCHEMAS: Final = {kind: build_schema(kind, cls) for kind, cls in MESSAGE_TYPES.items()}
SCHEMA_BY_CLASS: Final = {schema.cls: schema for schema in SCHEMAS.values()}
# dtype -> wire name, big-endian twins included (encode converts them)
WIRE_NAMES: Final = {**{d.newbyteorder(">"): n for n, d in WIRE_DTYPES.items()},
                      **{d: n for n, d in WIRE_DTYPES.items()}}


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
