"""CRC32C of tensor bytes on the wire, computed from memory views without copying them.

:func:`extend` carries a running checksum across the chunks of a tensor as they arrive, summing
each chunk where it landed. It uses ``crc32c_rs`` where installed: it folds 64 bytes at a time
with carry-less multiplies (AVX-512 VPCLMULQDQ where the CPU has them), about 70 GB/s on
cached data on the project's machine against 24 GB/s for the CPU's CRC instruction that
``google_crc32c`` uses (``bench/bench_wire_checksum.py`` prints both): the sums of a 64 MiB
pull took 3-9% of its time (by the load) with the former, 10-26% with the latter. Otherwise ``google_crc32c`` (C, with the
CPU's CRC instruction) does it: its Python functions take only ``bytes``-like objects whose
buffer needs no release, so :func:`extend` calls the C function it wraps through ctypes with
the view's address instead. Both release the GIL while they sum.

Checksums are on by default; ``ASYNCFLOW_WIRE_CHECKSUMS=0`` in a process's environment (or
``set_enabled(False)``) makes its encoder send frames without them (a receiver checks
whatever checksums a frame carries). See docs/protocol.md for what that saves and costs.

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

import collections
import ctypes
import os
import queue
from collections.abc import Callable
from typing import Final

import google_crc32c
import numpy as np

__all__ = ["ENV", "SUM_STEP_BYTES", "TRAILER_BYTES", "ChecksumTrailer", "TrailingSums", "WAKE_BYTES",
           "enabled", "extend", "implementation", "set_enabled"]

ENV: Final = "ASYNCFLOW_WIRE_CHECKSUMS"
TRAILER_BYTES: Final = 4  # a CRC32C after a tensor's raw bytes in a frame
SUM_STEP_BYTES: Final = 1 << 20  # the most a TrailingSums thread sums between two looks
WAKE_BYTES: Final = 1 << 20  # written past the summed bytes before a sleeping thread is woken
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


class TrailingSums:
    """Fills pending trailers on another thread, summing each segment behind its writer.

    A writer that hands a large segment to the kernel chunk by chunk says where it got to
    (:meth:`begin` a segment, :meth:`advance` after each chunk the kernel took); the thread
    running :meth:`run` sums the bytes written so far (at most :data:`SUM_STEP_BYTES` per call,
    the GIL released while it sums), sets the trailer once the whole segment is summed, and
    calls ``on_done`` (from that thread). So the sums leave the writer's own path: the writer
    pays an int store per chunk and a wake-up when the thread sleeps, and the bytes are summed
    just after the kernel's copy read them, while they are still in the CPU's caches.

    :meth:`stop` ends :meth:`run` within one step's sum (a cancelled send); a trailer not
    summed by then stays pending (zeros) and must not be sent.
    """

    __slots__ = ("_jobs", "_wake", "_sleeping", "_stopped", "_summed", "on_done")

    def __init__(self) -> None:
        self._jobs: collections.deque = collections.deque()  # [trailer, view, written]
        self._wake: queue.SimpleQueue = queue.SimpleQueue()
        self._sleeping = False
        self._stopped = False
        self._summed = 0  # of the first job's segment, by the thread
        self.on_done: Callable[[], None] | None = None

    # -- the writer's side --------------------------------------------------------------------

    def begin(self, trailer: ChecksumTrailer) -> list:
        """Start summing ``trailer``'s segment; returns the job to :meth:`advance`."""
        job = [trailer, memoryview(trailer.segment).cast("B"), 0]
        self._jobs.append(job)
        return job

    def advance(self, job: list, written: int) -> None:
        """The first ``written`` bytes of ``job``'s segment were handed to the kernel."""
        job[2] = written
        # Read after the store: the thread sets its flag before it looks at the jobs again.
        # Woken per WAKE_BYTES (each wake-up is a system call here), and at the segment's end.
        if self._sleeping and (written - self._summed >= WAKE_BYTES or written == len(job[1])):
            self._wake.put(None)

    def pending(self) -> bool:
        """Whether a trailer begun here is not yet set."""
        return bool(self._jobs)

    def stop(self) -> None:
        """Make :meth:`run` return after at most one more step's sum."""
        self._stopped = True
        self._wake.put(None)

    # -- the thread's side --------------------------------------------------------------------

    def run(self) -> None:
        """Sum the jobs' written bytes as they come, until :meth:`stop`."""
        crc, summed, jobs = 0, 0, self._jobs
        self._summed = 0
        while not self._stopped:
            job = jobs[0] if jobs else None
            if job is None or summed >= job[2]:
                self._sleeping = True  # then look again: an advance before it sent no wake-up
                job = jobs[0] if jobs else None
                if not self._stopped and (job is None or summed >= job[2]):
                    self._wake.get()
                self._sleeping = False
                continue
            end = min(job[2], summed + SUM_STEP_BYTES)
            crc, summed = extend(crc, job[1][summed:end]), end
            self._summed = summed
            if summed == len(job[1]):
                job[0].set(crc)
                job[1].release()
                jobs.popleft()
                crc, summed, self._summed = 0, 0, 0
                if (callback := self.on_done) is not None:
                    callback()
