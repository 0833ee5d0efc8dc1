"""Large received tensors in memory that was used before, not in fresh pages (glibc ``mallopt``).

Why
---
A tensor received from a peer lands in a new array. glibc serves an allocation of 32 MiB or
more (``M_MMAP_THRESHOLD``'s ceiling for its dynamic threshold) with a fresh ``mmap`` and gives
it back with ``munmap`` when the array is freed, so every pull of a 64 MiB tensor writes into
pages the kernel must first find and zero: on the project's machine filling a fresh 64 MiB
array cost 16 ms against 10 ms for a copy into touched memory, and a same-host copy
(:mod:`transports.http.cross_memory`) into fresh pages ran at 5.9-6.1 GB/s against 9.4-10.1 into
reused ones (``bench/RESULTS.md``). TF's BFC allocator keeps freed regions for the next
tensor; :func:`keep_freed_memory` gets the same from glibc: allocations up to
``max_bytes`` come from the heap, and freed heap memory is kept (not trimmed) up to
``max_bytes``, so the next step's tensor of that size reuses the pages.

The cost is memory: a process keeps up to ``max_bytes`` of freed memory resident. It is a
process-wide setting, made by a process's entry point (``asyncflow worker`` makes it), never
on import. ``ASYNCFLOW_KEEP_FREED_MIB=0`` turns it off; another number sets ``max_bytes``.

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Final

__all__ = ["DEFAULT_BYTES", "ENV", "keep_freed_memory"]

ENV: Final = "ASYNCFLOW_KEEP_FREED_MIB"
DEFAULT_BYTES: Final = 256 << 20
_M_TRIM_THRESHOLD: Final = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD: Final = -3


def _mallopt():
    """glibc's ``mallopt``, or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    return function


def keep_freed_memory(max_bytes: int | None = None) -> int:
    """Serve allocations up to ``max_bytes`` from the heap and keep that much freed memory.

    Args:
        max_bytes: None: ``$ASYNCFLOW_KEEP_FREED_MIB`` MiB, else :data:`DEFAULT_BYTES`;
            0 changes nothing.

    Returns:
        The bytes set, or 0 where nothing was set (turned off, no glibc ``mallopt``, or glibc
        refused the value): then allocation stays as it was, nothing else changes.

    Raises:
        ValueError: a negative size, or an environment value that is not a whole number.
    """
    if max_bytes is None:
        text = os.environ.get(ENV, "").strip()
        if text and not text.isdigit():
            raise ValueError(f"{ENV} must be a whole number of MiB, got {text!r}")
        max_bytes = int(text) << 20 if text else DEFAULT_BYTES
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    mallopt = _mallopt()
    if not max_bytes or mallopt is None:
        return 0
    value = min(max_bytes, 2**31 - 1)
    # The trim threshold first: if the second call is refused, the first alone is harmless.
    if not mallopt(_M_TRIM_THRESHOLD, value) or not mallopt(_M_MMAP_THRESHOLD, value):
        return 0
    return value
