"""CRC32C of tensor bytes on the wire, computed from memory views without copying them.

``google_crc32c`` (C, with the CPU's CRC instruction: several GB/s) takes only objects whose
buffer needs no release, such as ``bytes``; a ctypes array laid over a view's memory is one,
so a received chunk is summed where it landed. :func:`extend` carries a running checksum
across the chunks of a tensor as they arrive.

Checksums are on by default; ``ASYNCFLOW_WIRE_CHECKSUMS=0`` in a process's environment (or
``set_enabled(False)``) makes its encoder send frames without them (a receiver checks
whatever checksums a frame carries). See docs/protocol.md for what that saves and costs.

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import ctypes
import os
from typing import Final

import google_crc32c
import numpy as np

__all__ = ["ENV", "enabled", "extend", "set_enabled"]

ENV: Final = "ASYNCFLOW_WIRE_CHECKSUMS"
_enabled = os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def enabled() -> bool:
    """Whether this process's encoder puts a CRC32C in every tensor descriptor."""
    return _enabled


def set_enabled(value: bool) -> None:
    """Turn the checksums of frames this process encodes on or off (trusted networks only)."""
    global _enabled
    _enabled = bool(value)


def extend(crc: int, data: bytes | bytearray | memoryview) -> int:
    """The CRC32C of the bytes summed into ``crc`` followed by ``data`` (no copy)."""
    if isinstance(data, bytes):
        return google_crc32c.extend(crc, data)
    view = memoryview(data)
    if not view.nbytes:
        return crc
    if not view.c_contiguous:
        return google_crc32c.extend(crc, view.tobytes())
    address = np.frombuffer(view.cast("B") if view.format != "B" else view, np.uint8).ctypes.data
    return google_crc32c.extend(crc, (ctypes.c_char * view.nbytes).from_address(address))
