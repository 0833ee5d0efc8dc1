"""Unpacking a large msgpack header while counting what it builds (used by :mod:`transports.wire`).

A header of empty arrays inflates about 56x when ``msgpack.unpackb`` builds it, in one call that
holds the GIL throughout. :func:`unpack_counted` walks the containers itself, so a hostile header
fails at ``Limits.max_header_values`` values or ``Limits.max_depth`` levels before it has built
more, and other threads (the one answering Health) run between values.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

from transports.schema import FrameTooLarge, Limits, RemoteProtocolError

__all__ = ["unpack_counted"]


# First bytes of msgpack arrays and maps: fixarray/fixmap carry their length, the others a
# length field that read_array_header/read_map_header parse.
_ARRAY_BYTES: Final = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAP_BYTES: Final = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


def unpack_counted(data: memoryview, limits: Limits) -> Any:
    """Unpack a large header value by value, counting values and nesting before building more.

    msgpack's one-call ``unpackb`` cannot bound how many objects it creates (every byte may
    become an empty list, 56 bytes and more) and holds the GIL for the whole call. This walks
    containers in Python and lets msgpack unpack only scalars, so the work stops at
    ``limits.max_header_values`` values or ``limits.max_depth`` levels, and other threads get
    the GIL between values. About twice as slow as ``unpackb``: used only for large headers.
    """
    size = len(data)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=size,
                                max_str_len=size, max_bin_len=size, max_array_len=size,
                                max_map_len=size, max_ext_len=0)
    unpacker.feed(data)
    budget, max_depth = limits.max_header_values, limits.max_depth
    root: list = []
    # [container, values left, pending map key, is a map, key read]
    stack: list[list] = [[root, 1, None, False, False]]
    values = 0
    while len(stack) > 1 or stack[0][1]:
        top = stack[-1]
        if not top[1]:
            stack.pop()
            continue
        values += 1
        if values > budget:
            raise FrameTooLarge(f"header holds more than {budget} msgpack values")
        if top[3] and not top[4]:
            top[2], top[4] = unpacker.unpack(), True
            if not isinstance(top[2], str):  # strict_map_key applies to unpackb, not here
                raise RemoteProtocolError("header map keys must be strings")
            continue
        position = unpacker.tell()
        if position >= size:
            raise RemoteProtocolError("header ends inside a map or list")
        first = data[position]
        child = None
        if first in _ARRAY_BYTES:
            value: Any = []
            child = [value, unpacker.read_array_header(), None, False, False]
        elif first in _MAP_BYTES:
            value = {}
            child = [value, unpacker.read_map_header(), None, True, False]
        else:
            value = unpacker.unpack()
        if top[3]:
            top[0][top[2]] = value
            top[4] = False
        else:
            top[0].append(value)
        top[1] -= 1
        if child is not None and child[1]:
            if len(stack) > max_depth + 1:  # the header map is one level above the payload
                raise RemoteProtocolError(f"header nests maps/lists deeper than {max_depth} "
                                          "levels")
            stack.append(child)
    if unpacker.tell() != size:
        raise RemoteProtocolError(f"{size - unpacker.tell()} bytes after the header's value")
    return root[0]
