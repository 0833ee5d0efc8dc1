"""Same-host tensors copied once, straight from the sender's memory (Linux ``process_vm_readv``).

Why
---
Over a socket a tensor is copied twice: from the sender's array into the kernel's socket
buffers, and from there into the receiver's array, each copy on one side's core, the two sides
taking turns at the socket's pace. On the project's machine a 64 MiB pull over the same-host
Unix socket ran at about half a raw socket's rate and barely past TF1's gRPC
(``bench/RESULTS.md``). ``process_vm_readv`` copies from another process's address space into
ours in one pass, the way MPI libraries move large messages between ranks on one node (Linux's
"cross memory attach"): one copy, no socket buffers, no wake-ups per MiB.

How
---
A client connected through the same-host Unix socket (:mod:`transports.http.same_host`) asks for it
with the request header ``X-Asyncflow-Lend: 1``. A server that answers with a frame holding a
raw segment of :data:`LEND_BYTES` or more then sends, instead of the frame, a *lent body*
(content type :data:`CONTENT_TYPE`)::

    u32 the server's pid, u32 count, u32 flags (1: lent segments are summed), then count
    records of (u64 address, u64 length): the frame's buffers in order;
    address 0: the buffer's bytes follow in this body (header, padding, checksum trailers);
    then those in-body bytes, in order.

The client walks the records with a :class:`~transports.wire.Decoder`, reading in-body bytes
from the socket and copying lent ones from the server process (its pid from the socket's
``SO_PEERCRED``, set by the kernel; a body naming another pid is refused: the socket was made
by another process) into the buffers the decoder lends. A lent segment of :data:`THREAD_BYTES` or
more is copied off the event loop, in :func:`copy_threads` parts at once, each one
``process_vm_readv`` on a trio worker thread (ctypes releases the GIL): one core copies a
64 MiB segment at about 4,300 MiB/s on the project's machine, two at about 7,300, the kernel's copy
being per-core bound there, not memory bound (``bench/RESULTS.md``, r34pull). Smaller lent
segments, and every segment of a summed body, are copied on the loop 1 MiB per call, a
checkpoint every 8 (the decoder sums each MiB while it is cached).

Checksums: the frame's prefix, header and every in-body byte are checked as on any path. Lent
segments cross no wire: they are one kernel copy between two processes' memory on one host,
as a tensor moves between two devices of one process, which no one sums (nor does TF's local
copy); summing them was measured to cost more than the copy itself (the server reads 64 MiB
from memory, the client sums 64 MiB more: a pull at 0.55-0.65x the speed of an unsummed one,
``bench/RESULTS.md``). So a lent segment's trailer is sent as zeros and not checked
(:meth:`~transports.wire.Decoder.trust_segment`). ``ASYNCFLOW_CROSS_MEMORY=checked`` on the
server sums them anyway: the server sums each lent segment after the records left, while the
client copies, and the client's decoder sums its copy and checks the trailer
(``ChecksumMismatch``, e.g. if the lent memory changed during the copy).

The server keeps the frame's arrays until the client's *verdict*, one byte it sends when the
body is read: :data:`COPIED`, or :data:`RESEND` when a copy failed (``EPERM``: the server is
not readable by us, e.g. not dumpable or under Yama's ptrace scope; ``ESRCH``; ``EFAULT``); the
server then sends the plain frame (no new head) and the client decodes it from the socket and
stops asking on that channel. So a refused copy costs one step a resend, never a failure.

``ASYNCFLOW_CROSS_MEMORY=0`` in either process's environment turns the path off there (pulls
take the Unix socket, checked as over TCP).

Nothing here knows about asyncflow or HTTP heads; trio only for checkpoints and worker
threads.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import numpy as np
import trio

from transports import checksum as _checksum
from transports.checksum import ChecksumTrailer
from transports.schema import LocalProtocolError

__all__ = ["CONTENT_TYPE", "COPIED", "ENV", "LEND_BYTES", "REQUEST_HEADER", "RESEND",
           "THREAD_BYTES", "available", "copy_threads", "lendable", "peer_pid", "read_remote",
           "read_remote_parts", "receive_lent", "send_lent", "sum_lent", "wanted"]

ENV: Final = "ASYNCFLOW_CROSS_MEMORY"
CONTENT_TYPE: Final = "application/x-asyncflow-lent-frame"
REQUEST_HEADER: Final = "x-asyncflow-lend"  # lower case, as heads are parsed
LEND_BYTES: Final = 1 << 20  # raw segments this large are lent, smaller ones sent in the body
COPY_CHUNK: Final = 1 << 20  # bytes per process_vm_readv: summed by the decoder while cached
SUM_CHUNK: Final = 4 << 20  # the server sums a lent segment this much per checkpoint
COPIES_PER_CHECKPOINT: Final = 8
THREAD_BYTES: Final = 8 << 20  # lent segments this large are copied on worker threads
MAX_COPY_THREADS: Final = 2  # two cores copy at ~1.7x one; more were not measured
COPIED: Final = b"K"
RESEND: Final = b"R"
_START = struct.Struct("<III")  # pid, count, flags
_SUMMED = 1  # flag: lent segments are summed (their trailers are checked)
_RECORD = struct.Struct("<QQ")


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _readv_function():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_ssize_t
    function.argtypes = (ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                         ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong)
    return function


_READV = _readv_function()


def sum_lent() -> bool:
    """Whether this server sums the segments it lends (``ASYNCFLOW_CROSS_MEMORY=checked``)."""
    return os.environ.get(ENV, "1") == "checked"


def available() -> bool:
    """Whether this process may use the path: Linux with ``process_vm_readv`` in its C
    library, and not turned off by ``ASYNCFLOW_CROSS_MEMORY=0``."""
    return _READV is not None and os.environ.get(ENV, "1") != "0"


def peer_pid(sock: socket.socket | trio.socket.SocketType) -> int | None:
    """The pid of the process at the other end of a Unix socket, when it runs as this user
    (``SO_PEERCRED``, set by the kernel); None for other sockets or where it cannot be read."""
    if not available() or getattr(sock, "family", None) != socket.AF_UNIX:
        return None
    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (OSError, AttributeError):
        return None
    return pid if pid > 0 and uid == os.getuid() else None


def read_remote(pid: int, view: memoryview, address: int) -> int:
    """Copy ``len(view)`` bytes at ``address`` of process ``pid`` into ``view``; returns the
    count copied (it may be short).

    Raises:
        OSError: the copy was refused (EPERM, ESRCH, EFAULT, ENOSYS...).
    """
    local = _IoVec(np.frombuffer(view, np.uint8).ctypes.data, len(view))
    remote = _IoVec(address, len(view))
    n = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if n <= 0:
        code = ctypes.get_errno() if n < 0 else 0
        raise OSError(code or 0, f"process_vm_readv from pid {pid}: "
                      f"{os.strerror(code) if code else 'nothing copied'}")
    return n


def copy_threads() -> int:
    """How many threads copy one large lent segment: the CPUs this process may run on, at
    most :data:`MAX_COPY_THREADS` (one where it may run on one: the copy still leaves the
    loop)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_COPY_THREADS, cpus))


def _copy_range(pid: int, view: memoryview, address: int, start: int, end: int) -> int | None:
    """Copy ``view[start:end]`` from ``address + start`` of ``pid``, short copies resumed.
    Runs on a worker thread; returns None, or the errno of a refused copy."""
    while start < end:
        try:
            start += read_remote(pid, view[start:end], address + start)
        except OSError as exc:
            return exc.errno or 0
    return None


async def read_remote_parts(pid: int, view: memoryview, address: int,
                            parts: int | None = None) -> int | None:
    """Copy ``len(view)`` bytes at ``address`` of ``pid`` into ``view`` off the event loop,
    split in ``parts`` (default :func:`copy_threads`) ranges copied at once, each by one
    ``process_vm_readv`` on a trio worker thread. Returns None when all was copied, else the
    errno of a refused part (the view's bytes are then partly written). Not abandoned when
    cancelled: a cancel waits for the copies (milliseconds), so no thread writes into an
    array after its owner moved on; one that lands before a part's thread started raises
    ``trio.Cancelled`` (a copy that finished returns, the cancel met at the next checkpoint)."""
    parts = parts or copy_threads()
    bounds = [len(view) * i // parts for i in range(parts + 1)]
    errors: list[int | None] = [None] * parts

    async def part(i: int) -> None:
        errors[i] = await trio.to_thread.run_sync(_copy_range, pid, view, address,
                                                  bounds[i], bounds[i + 1])

    try:
        async with trio.open_nursery() as nursery:
            for i in range(parts):
                nursery.start_soon(part, i)
    except BaseExceptionGroup as group:
        # Cancelled before a part's thread started (a deadline, the step aborted, a part
        # waiting for a thread): trio's own Cancelled, as from any checkpoint, not a group that
        # ``except trio.Cancelled`` misses (the executor reports such a group as the op's error).
        cancelled, rest = group.split(trio.Cancelled)
        if rest is not None or cancelled is None:
            raise
        while isinstance(cancelled, BaseExceptionGroup):
            cancelled = cancelled.exceptions[0]
        raise cancelled from None
    return next((e for e in errors if e is not None), None)


def _address(buffer: bytes | memoryview) -> int:
    return np.frombuffer(buffer, np.uint8).ctypes.data


# ----------------------------------------------------------------------------- the server's half


def wanted(headers: dict[str, str], sock: trio.socket.SocketType) -> bool:
    """Whether a request's answer may be lent: asked for, over a Unix socket, path on here."""
    return headers.get(REQUEST_HEADER) == "1" and sock.family == socket.AF_UNIX and available()


def lendable(buffers: list) -> bool:
    """Whether a frame (``encode``'s buffers) holds a segment worth lending."""
    return any(len(b) >= LEND_BYTES for b in buffers)


async def send_lent(buffers: list, head: Callable[[int], bytes],
                    send_all: Callable[[bytes], Awaitable[None]],
                    receive_some: Callable[[], Awaitable[bytes]],
                    leftover: Callable[[bytes], None]) -> bool:
    """Send a frame's lent body (after ``head(body length)``) and wait for the verdict.

    A lent segment's pending trailer is sent as zeros, or, where this server sums lent
    segments (:func:`sum_lent`), summed after the records left, while the peer copies.
    ``receive_some`` reads the connection (the caller bounds it with a deadline);
    bytes after the verdict (the next request) go to ``leftover``. Returns True when the peer
    copied everything; False when it asked for the frame again: the caller sends it plainly
    with ``send_pieces``, which sums the trailers still pending as it writes.

    Raises:
        trio.BrokenResourceError: the peer closed the connection or sent another verdict.
    """
    records, in_body = [], 0
    for buffer in buffers:
        lent = len(buffer) >= LEND_BYTES
        records.append(_RECORD.pack(_address(buffer) if lent else 0, len(buffer)))
        in_body += 0 if lent else len(buffer)
    summed = sum_lent()
    size = _START.size + _RECORD.size * len(records) + in_body
    pending = [head(size), _START.pack(os.getpid(), len(records), _SUMMED if summed else 0),
               *records]
    for buffer in buffers:
        if len(buffer) >= LEND_BYTES:
            continue
        if isinstance(buffer, ChecksumTrailer) and buffer.pending:
            if len(buffer.segment) < LEND_BYTES:
                buffer.fill()
            elif summed:
                await send_all(b"".join(pending))  # the peer copies while this sums
                pending = []
                await _sum_into(buffer)
            else:  # not checked by the peer (a resend sums it: send_pieces)
                buffer = bytes(4)
        pending.append(buffer)
    await send_all(b"".join(pending))
    data = await receive_some()
    if not data or data[:1] not in (COPIED, RESEND):
        raise trio.BrokenResourceError(f"no verdict after a lent frame: {data[:16]!r}")
    if len(data) > 1:
        leftover(data[1:])
    return data[:1] == COPIED


async def _sum_into(trailer: ChecksumTrailer) -> None:
    view, crc = trailer.segment, 0
    for start in range(0, len(view), SUM_CHUNK):
        crc = _checksum.extend(crc, view[start:start + SUM_CHUNK])
        await trio.lowlevel.checkpoint()
    trailer.set(crc)


# ----------------------------------------------------------------------------- the client's half


async def _read_exactly(read_into: Callable[[memoryview], Awaitable[int]], n: int) -> bytearray:
    data = bytearray(n)
    view, got = memoryview(data), 0
    while got < n:
        count = await read_into(view[got:])
        if not count:
            raise EOFError(f"lent body ended {n - got} bytes early")
        got += count
    return data


async def receive_lent(read_into: Callable[[memoryview], Awaitable[int]], pid: int,
                       decoder, max_records: int, max_bytes: int) -> tuple[bool | None, int]:
    """Feed ``decoder`` the frame a lent body describes (see the module docstring).

    ``read_into`` reads the body (0 at its end); ``pid`` is the peer's, from
    :func:`peer_pid`. Returns (every lent copy succeeded, the frame's length). When a copy is
    refused, the rest of the body is read and dropped and the first item is False: the caller
    sends :data:`RESEND` and decodes the frame, of that length, from the socket with a fresh
    decoder. A protocol error (a checksum mismatch too) stops feeding, the first item None:
    ``decoder.next_event`` raises it, and the connection must be closed.

    Raises:
        EOFError: the body ended before its records did.
        ValueError: more records than ``max_records``, or more bytes than ``max_bytes``
            (checked before anything is copied).
    """
    sender, count, flags = _START.unpack(await _read_exactly(read_into, _START.size))
    summed = bool(flags & _SUMMED)
    if count > max_records:
        raise ValueError(f"lent body lists {count} buffers, over the limit of {max_records}")
    table = await _read_exactly(read_into, _RECORD.size * count)
    records = [_RECORD.unpack_from(table, i * _RECORD.size) for i in range(count)]
    total = sum(length for _, length in records)
    if total > max_bytes:
        raise ValueError(f"lent body lists {total} bytes, more than a frame within the limits "
                         f"({max_bytes})")
    copied, copies, drop = sender == pid, 0, memoryview(bytearray(64 * 1024))
    for address, length in records:
        if address and not copied:
            continue  # lent bytes after a refused copy: the frame is sent again
        done = 0
        while done < length:
            if copied:
                try:
                    view = decoder.get_buffer()[:length - done]
                except LocalProtocolError:
                    return None, total  # the frame broke the protocol: next_event raises
            else:
                view = drop[:length - done]  # in-body bytes after a refused copy: dropped
            if address:
                if not done and not summed:
                    decoder.trust_segment()
                    if length >= THREAD_BYTES and len(view) == length:  # the whole segment
                        if await read_remote_parts(pid, view, address) is not None:
                            copied = False
                            break
                        decoder.buffer_updated(length)
                        done = length
                        continue
                try:
                    n = read_remote(pid, view[:COPY_CHUNK], address + done)
                except OSError:
                    copied = False
                    break
                copies += 1
                if copies % COPIES_PER_CHECKPOINT == 0:
                    await trio.lowlevel.checkpoint()
            else:
                n = await read_into(view)
                if not n:
                    raise EOFError("lent body ended before its in-body bytes")
            if copied:
                decoder.buffer_updated(n)
            done += n
    return copied, total

