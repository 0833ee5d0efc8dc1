"""CRC32C of tensor bytes on the wire, computed from memory views without copying them.

:func:`extend` carries a running checksum across the chunks of a tensor as they arrive, summing
each chunk where it landed. It uses ``crc32c_rs`` where installed: it folds 64 bytes at a time
with carry-less multiplies (AVX-512 VPCLMULQDQ where the CPU has them), about 70 GB/s on
cached data on the project's machine against 24 GB/s for the CPU's CRC instruction that
``google_crc32c`` uses (``bench/bench_wire_checksum.py`` prints both): both ends of a 64 MiB
pull sum for about 2.5 ms of CPU with the former, about 10 ms with the latter (what that
costs a pull's time, by path: docs/protocol.md). Otherwise ``google_crc32c`` (C, with the
CPU's CRC instruction) does it: its Python functions take only ``bytes``-like objects whose
buffer needs no release, so :func:`extend` calls the C function it wraps through ctypes with
the view's address instead. Both release the GIL while they sum.

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

__all__ = ["ENV", "TRAILER_BYTES", "ChecksumTrailer", "enabled", "extend", "implementation",
           "set_enabled"]

ENV: Final = "ASYNCFLOW_WIRE_CHECKSUMS"
TRAILER_BYTES: Final = 4  # a CRC32C after a tensor's raw bytes in a frame
_enabled = os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def enabled() -> bool:
    """Whether this process's encoder puts a CRC32C in every tensor descriptor."""
    return _enabled


def set_enabled(value: bool) -> None:
    """Turn the checksums of frames this process encodes on or off (trusted networks only)."""
    global _enabled
    _enabled = bool(value)


def _direct_extend():
    """``crc32c_extend(crc, address, length)`` of the C library ``google_crc32c`` wraps, through
    ctypes: no copy, no per-size ctypes type, the GIL released while it sums; None where that
    library cannot be found (then views are copied to ``bytes`` to be summed)."""
    try:
        from google_crc32c import _crc32c
        function = ctypes.CDLL(_crc32c.__file__).crc32c_extend
    except (ImportError, OSError, AttributeError):
        return None
    function.restype = ctypes.c_uint32
    function.argtypes = (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
    return function


_EXTEND = _direct_extend()


def _folding_crc32c():
    """``crc32c_rs.crc32c(buffer, crc)`` (any C-contiguous buffer), or None where crc32c-rs is
    not installed (then google_crc32c sums)."""
    try:
        import crc32c_rs
    except ImportError:
        return None
    return crc32c_rs.crc32c


_FOLDING = _folding_crc32c()


def implementation() -> str:
    """Which CRC32C sums this process's wire bytes: ``crc32c_rs``, ``google_crc32c`` (through
    ctypes) or ``google_crc32c (copies)``."""
    if _FOLDING is not None:
        return "crc32c_rs"
    return "google_crc32c" if _EXTEND is not None else "google_crc32c (copies)"


def extend(crc: int, data: bytes | bytearray | memoryview) -> int:
    """The CRC32C of the bytes summed into ``crc`` followed by ``data`` (no copy)."""
    if _FOLDING is not None:
        try:
            return _FOLDING(data, crc)
        except BufferError:  # a non-contiguous view: summed from a copy below
            pass
    if isinstance(data, bytes):
        return google_crc32c.extend(crc, data)
    view = memoryview(data)
    if not view.nbytes:
        return crc
    if _EXTEND is None or not view.c_contiguous:
        return google_crc32c.extend(crc, view.tobytes())
    address = np.frombuffer(view.cast("B") if view.format != "B" else view, np.uint8).ctypes.data
    return _EXTEND(crc, address, view.nbytes)


class ChecksumTrailer(bytearray):
    """The 4 bytes after a raw segment: the CRC32C of ``segment``, little-endian.

    ``encode`` fills it, unless asked to defer: then ``pending`` is true and the writer must
    :meth:`fill` it (or :meth:`set` the sum it computed while writing) before sending it.
    """

    __slots__ = ("segment", "pending")

    def __init__(self, segment: memoryview, pending: bool) -> None:
        super().__init__(4)
        self.segment, self.pending = segment, pending
        if not pending:
            self.fill()

    def set(self, crc: int) -> None:
        self[:] = crc.to_bytes(4, "little")

    def fill(self) -> None:
        """Sum the whole segment now (for segments too small to be written in chunks)."""
        self.set(extend(0, self.segment))
