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

from transports.messages import MESSAGE_TYPES, TensorEntry

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


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    hint: Any  # the annotation, for error messages
    check: Callable[[Any], bool]  # compiled from the annotation once
    nests: bool  # holds Any somewhere: free nesting, so the decoder bounds its depth


@dataclass(frozen=True, slots=True)
class Schema:
    kind: str
    cls: type
    plain: tuple[Field, ...]  # payload fields
    required: frozenset[str]
    tensor_field: str | None


def build_schema(kind: str, cls: type) -> Schema:
    hints = typing.get_type_hints(cls)
    plain, required, tensor_field = [], set(), None
    for f in dataclasses.fields(cls):
        if hints[f.name] == list[TensorEntry]:
            assert tensor_field is None, f"{cls.__name__} has two tensor fields"
            tensor_field = f.name
            continue
        hint = hints[f.name]
        plain.append(Field(f.name, hint, checker(hint), _mentions_any(hint)))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.add(f.name)
    return Schema(kind, cls, tuple(plain), frozenset(required), tensor_field)


def _mentions_any(hint: Any) -> bool:
    return hint is Any or any(_mentions_any(arg) for arg in typing.get_args(hint))


def checker(hint: Any) -> Callable[[Any], bool]:
    """Compile a payload annotation (int, str, list[str], dict[str, Any], X | None, ...) into a
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
    return str(hint).replace("typing.", "")


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
