"""The bare same-host protocol's socket I/O (:mod:`transports.http.bare`): a read after one
wait (spinning first where an answer is due soon), a small message in one ``writev``, and the
server side's connection (reads against a deadline, the bytes received past a request) and
request body.

Spin, then park
---------------
Where a side has sent a message and its peer's next one is due within microseconds (the client
after sending a call, the worker after answering one, waiting for the next call on that
connection), :func:`read_once` first tries non-blocking reads for a bounded window
(:func:`spin_window_s`, ``ASYNCFLOW_BARE_SPIN_US``: 200 us by default, 0 turns it off) before it
parks in ``trio.lowlevel.wait_readable``. A trio checkpoint comes before the first try and then
every ``tries`` tries (every :data:`ANSWER_TRIES`, the client's wait for its answer; every
:data:`NEXT_CALL_TRIES`, the worker's for the next call): other tasks run and trio's I/O is
polled there, cancellation and deadlines act at the checkpoint as they do on the wait. A
message taken during the spin costs no blocked-process wake-up (a halted vCPU woken by the
hypervisor, 25-45 us on the project's machine) and finds the caches warmer.

A spin sits out a step that involves more than one peer (:class:`Calls`): a process counts its
bare calls, both sides, begun and in flight, and a wait spins only while its connection is the
process's only one at work: its own last call began with no other in flight, and the client's
wait for an answer with no other call in flight, the server's wait for the next call when no
other call began since this connection's last one and none is in flight. A parameter-server step
(a client with RunGraphs to the worker and the ps at once, a worker serving a RunGraph while it
pulls from the ps, a ps serving both) parks at once everywhere; a trivial step (one client, one
worker) spins. A call that begins in the process while a wait spins ends the spin (it parks).

The spin is adaptive per connection (as glibc's adaptive mutexes and the JVM's adaptive locks
are): each wait's duration, from its start to its data, spun or parked, is folded into the
connection's ``waited`` (:func:`learn_wait`), and a wait spins only while that estimate is
within twice the window. A connection whose answers take longer (a large pull, a worker waiting
for the next call of a slower loop) parks at once and burns nothing; a parked wait whose data
came within the window brings the spin back. A connection's first :data:`WARM_WAITS` waits (its
client's warm-up: graphs registered, first steps prepared) and the waits of shared steps are not
learned.

A spin also needs a core to spare (:func:`machine_busy`): a process that may run on one CPU only
(its affinity, or a CPU quota under two CPUs on its cgroup or one above it) never spins (its
peer would wait for the spinner's time slice), and a wait parks at once while the machine's
runnable threads, the waiter included, outnumber the CPUs it may run on (a third runnable
process beside a spinning pair: measured, a trivial step then took 0.30 ms spinning or parked,
so the spin only burns CPU that the third or the peer needs). The look (``/proc/loadavg``,
machine-wide) is taken once per :data:`LOAD_EVERY_S` per process; a busy verdict needs
:data:`BUSY_LOOKS` looks in a row over the CPUs, the second :data:`RECHECK_S` after the first (a
daemon's short wake, seen once, keeps the spin; a hog or a busy peer, seen again, parks it), and
a busy machine stays busy while each look sees it so. ``COUNTS`` holds the waits
that parked, the messages the spin took, and the waits that parked at once by the connection's
rule, for want of a core, or for a step shared with another call.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
import os
import socket
import time
from typing import Any, Final

import trio

from transports.checksum import enabled as checksum_enabled
from transports.http.body import BodyTimeout, PeerGone
from transports.http.bulk_io import CALLS_PER_CHECKPOINT, send_all
from transports.http.guard import GuardedConnection
from transports.http.protocol import JOIN_BYTES, send_pieces
from transports.messages import RemoteCallError
from transports.schema import PREFIX
from transports.wire import SMALL_HEADER_BYTES, ChecksumTrailer, encode_prepared

__all__ = ["ANSWER_TRIES", "BUSY_LOOKS", "CALLS", "COUNTS", "Calls", "LOAD_EVERY_S",
           "NEXT_CALL_TRIES", "RECHECK_S", "RECV", "RequestBody", "SPIN_ENV", "ServerConnection",
           "WARM_WAITS", "WHOLE_FRAME_BYTES",
           "decide", "learn_wait", "late_call", "machine_busy", "one_way_failed",
           "prepared_reply", "quota_cpus", "read_once", "read_whole", "reads_whole",
           "set_spin_window", "shut_reading", "small_pieces", "spin_window_s", "write_now",
           "write_one", "write_request"]

RECV: Final = 64 * 1024
# A request frame up to this size, its header short, is read whole, then decoded in one pass
# (a repeated frame by its template: ``read_whole``); a larger one streams into its arrays.
WHOLE_FRAME_BYTES: Final = 256 * 1024
SPIN_ENV: Final = "ASYNCFLOW_BARE_SPIN_US"
DEFAULT_SPIN_US: Final = 200.0  # on: the trivial step 2-2.4x faster, the PS step parks (RESULTS)
MAX_SPIN_US: Final = 1000.0  # the project's time slice: a longer spin would starve the machine
COUNTS = {"parks": 0, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}  # waits that parked;
# messages a spin took; waits that parked at once where a spin was asked for, their
# connection's answers having come late ("skipped"), the machine having no core to spare
# ("busy"), or another call being at work in the process ("shared"; also a spin ended so) (tests)
WARM_WAITS: Final = 16  # a connection's first waits, not learned (its client's warm-up)
LOAD_EVERY_S: Final = 0.005  # how often a spinning process looks at the machine's run queue
# Looks in a row that must see more runnable threads than CPUs before a wait parks "busy" (1:
# the first; the rule before c49busy, a daemon's 40 us wake parked 5 ms of steps), and how soon
# after a look that saw them the next one is taken (a passing thread has gone by then).
BUSY_LOOKS = 2
RECHECK_S = 0.0005
_clock = time.perf_counter  # (a test may set its own)
# A client's spin for its call's answer checkpoints once every this many tries, not before each
# (``read_once``'s ``tries``): a checkpoint is a scheduler pass (~3.8 us hot, a try without it
# ~1.8), and a trivial step's answer (~30 us after its request) met one or more of them; 16
# tries are ~30 us between passes, the longest a cancel, a deadline or another task then waits
# in the spin (the window bounds it whatever the tries cost). Whatever ends a spin from outside
# acts at a checkpoint: another task (a CallCancel's close of the socket, a call that begins
# and so ends the spin) runs only there, and a cancel from another thread (``run_sync_soon``:
# the sync session's Ctrl-C) runs in the scheduler pass after one, so it is seen within two
# checkpoints' tries. The trivial remote step 0.95x against a checkpoint a try (bench/RESULTS.md,
# c47cli).
ANSWER_TRIES = 16
# The same for the worker's spin for the next call on a connection (``bare.BareService``'s
# wait; its idle sweep's close, a server's shutdown, acted on at the next checkpoint as above):
# the trivial remote step ~0.97-0.98x against a checkpoint a try (bench/RESULTS.md, r47cli,
# r47nct).
NEXT_CALL_TRIES = 16
_spin: list = []  # [the window in seconds], read from the environment on first use


def spin_window_s() -> float:
    """The spin's window in seconds: ``ASYNCFLOW_BARE_SPIN_US`` (microseconds, 0 to
    :data:`MAX_SPIN_US`; default :data:`DEFAULT_SPIN_US`), read once per process.

    Raises:
        ValueError: the variable is not a number in that range.
    """
    if not _spin:
        text = os.environ.get(SPIN_ENV, "").strip()
        try:
            us = float(text) if text else DEFAULT_SPIN_US
        except ValueError:
            us = math.nan
        if not 0 <= us <= MAX_SPIN_US:
            raise ValueError(f"{SPIN_ENV}={text!r}: microseconds from 0 to {MAX_SPIN_US:g} "
                             "are due (0 turns the spin off)")
        _spin.append(us / 1e6)
    return _spin[0]


def set_spin_window(us: float | None) -> None:
    """Set the spin's window (microseconds; None: read the environment again on next use)."""
    _spin.clear()
    if us is not None:
        if not 0 <= us <= MAX_SPIN_US:
            raise ValueError(f"spin window {us} us: 0 to {MAX_SPIN_US:g} are due")
        _spin.append(us / 1e6)


def _cpus() -> int:
    """The CPUs this process may run on at once: its affinity's, fewer where its cgroup's CPU
    quota (read once per process) allows fewer; at least 1 (a quota under one CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        cpus = os.cpu_count() or 1
    if not _quota:
        _quota.append(_read_quota())
    return cpus if _quota[0] is None else max(1, min(cpus, _quota[0]))


_quota: list = []  # [whole CPUs the cgroup's quota allows, or None: no quota]


def quota_cpus(quota: str, period: str) -> int | None:
    """Whole CPUs a CFS quota allows (``cpu.max``'s two fields, or cgroup v1's
    ``cfs_quota_us`` and ``cfs_period_us``): quota // period, None where there is no quota
    ("max", -1) or the text is not of that form. 1.5 CPUs is 1: a spinning pair would be
    throttled."""
    try:
        q, t = int(quota), int(period)
    except ValueError:
        return None
    return None if q < 0 or t <= 0 else q // t


_CGROUP_ROOT = "/sys/fs/cgroup"  # the cgroup mount (v1's cpu controller under "cpu")
_SELF_CGROUP = "/proc/self/cgroup"  # this process's cgroups (a test may set its own)


def _own_cgroups() -> tuple[list, list]:
    """This process's cgroup paths, as parts: cgroup v2's and cgroup v1's cpu controller's
    (``/proc/self/cgroup``); none (the mount's root) where it does not say, or says a cgroup
    outside the mount's view (``..``)."""
    v2: list = []
    v1: list = []
    try:
        with open(_SELF_CGROUP, "rb") as handle:
            lines = handle.read().decode("ascii", "replace").splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        parts = [part for part in path.split("/") if part and part != "."]
        if ".." in parts:
            parts = []
        if hierarchy == "0" and not controllers:
            v2 = parts
        elif "cpu" in controllers.split(","):
            v1 = parts
    return v2, v1


def _read_quota() -> int | None:
    """The least whole CPUs that a CFS quota allows this process's cgroup or one above it
    (cgroup v2's ``cpu.max``, else v1's ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``);
    None where none is set or readable. The cgroup is the one ``/proc/self/cgroup`` names:
    without a cgroup namespace (a systemd unit's ``CPUQuota=``, a container sharing the
    host's) the quota is there, not at the mount's root; one the mount does not show (a
    container's view of a host path) is passed over, up to the root (read last)."""
    v2, v1 = _own_cgroups()
    for mount, parts, names in (
            (_CGROUP_ROOT, v2, ("cpu.max",)),
            (os.path.join(_CGROUP_ROOT, "cpu"), v1, ("cpu.cfs_quota_us", "cpu.cfs_period_us"))):
        found, least = False, None
        for depth in range(len(parts), -1, -1):
            directory = os.path.join(mount, *parts[:depth])
            try:
                fields = []
                for name in names:
                    with open(os.path.join(directory, name), "rb") as handle:
                        fields += handle.read().decode("ascii", "replace").split()
            except OSError:
                continue
            found = True
            cpus = quota_cpus(*fields[:2]) if len(fields) >= 2 else None
            if cpus is not None and (least is None or cpus < least):
                least = cpus
        if found:
            return least
    return None


def _runnable() -> int | None:
    """The machine's runnable threads now, this one included (``/proc/loadavg``'s fourth
    field's numerator); None where that cannot be read."""
    try:
        if not _loadavg:
            _loadavg.append(os.open("/proc/loadavg", os.O_RDONLY))
        return int(os.pread(_loadavg[0], 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


_loadavg: list = []  # the open /proc/loadavg (read again at offset 0 each time)
_busy = [0.0, False, 0]  # until when the last verdict holds; whether the machine had no core to
# spare; the looks in a row that saw more runnable threads than CPUs (at most BUSY_LOOKS)


def machine_busy(now: float) -> bool:
    """Whether a spin would take a core that another runnable thread needs: this process may
    run on one CPU only (its peer would wait for the spinner's time slice), or the machine's
    runnable threads, this one included, outnumber the CPUs it may run on (a third process
    beside a spinning pair: the spinner delays it or the peer it waits for) at
    :data:`BUSY_LOOKS` looks in a row. A look (a read of ``/proc/loadavg``, ~2 us) holds for
    :data:`LOAD_EVERY_S`; one that sees a third thread where the looks before did not holds
    for :data:`RECHECK_S` only, its verdict still "free" (a passing thread: a daemon's wake);
    a busy verdict stays while each look sees it. Looks are in a row only while each comes
    within :data:`LOAD_EVERY_S` of when the verdict before ran out (a process idle between two
    sightings has not seen one thread twice). Where the read fails, the CPU count decides."""
    cpus = _cpus()
    running = _runnable() if cpus > 1 else None
    over = running is not None and running > cpus
    in_row = now - _busy[0] <= LOAD_EVERY_S  # (a look long after the last is a first one)
    seen = min(_busy[2] * in_row + 1, BUSY_LOOKS) if over else 0
    busy = cpus < 2 or seen >= BUSY_LOOKS
    _busy[:] = [now + (RECHECK_S if over and not busy else LOAD_EVERY_S), busy, seen]
    return busy


class Calls:
    """A process's bare calls, both sides: how many began (``began``) and how many are in
    flight (``flying``); a connection notes the count when its own call begins
    (``conn.began``), or -1 where another call was in flight then (its call is part of a
    shared step however the calls end). Nothing here does I/O: :func:`read_once` asks
    :meth:`alone`."""

    __slots__ = ("began", "flying")

    def __init__(self) -> None:
        self.began = 0
        self.flying = 0

    def begin(self, conn: Any) -> None:
        """``conn``'s call begins (the client: before its request; the server: its header read)."""
        self.began += 1
        conn.began = -1 if self.flying else self.began
        self.flying += 1

    def end(self) -> None:
        """A call that :meth:`begin` counted ended (answered, failed or cancelled)."""
        self.flying -= 1

    def alone(self, conn: Any, own: int) -> bool:
        """Whether ``conn`` is the process's only connection at work: its own last call began
        with none other in flight, no call began since, and none is in flight but its own
        (``own``: 1 where the waiter's call is still in flight, the client awaiting its
        answer; 0 for the server awaiting the next call). So a parameter-server step's client,
        whose RunGraphs to the worker and the ps overlap, does not spin for the one answered
        last, once the other's answer came."""
        return self.began == conn.began and self.flying <= own


CALLS = Calls()  # this process's


def decide(window: float, alone: bool, waited: float, no_core: Any) -> str:
    """Whether a wait spins (``"spin"``) or why it parks at once: ``"off"`` (no window),
    ``"shared"`` (another call at work in the process: a step with more than one peer),
    ``"skipped"`` (the connection's recent waits, ``waited`` s, over twice the window),
    ``"busy"`` (``no_core()``, asked last: no core to spare)."""
    if not window:
        return "off"
    if not alone:
        return "shared"
    if waited > 2 * window:
        return "skipped"
    return "busy" if no_core() else "spin"


def _no_core() -> bool:
    now = _clock()
    return _busy[1] if now < _busy[0] else machine_busy(now)


async def read_once(sock: Any, spin: bool = False, conn: Any = None, own: int = 0,
                    tries: int = 1) -> bytes:
    """The next bytes of a trio socket that had none a moment ago (b"" at EOF): one wait, one
    read (trio's ``recv`` would try the read again before waiting). With ``spin``, first
    non-blocking reads for :func:`spin_window_s` (see the module), a checkpoint before the
    first and then before every ``tries``-th (the client's answer: :data:`ANSWER_TRIES`; the
    worker's next call: :data:`NEXT_CALL_TRIES`).
    A ``conn`` makes the spin adaptive and alone (:func:`decide`): its ``waited`` (seconds,
    the recent waits' estimate that :func:`learn_wait` keeps) above twice the window parks at
    once, and so does another call of the process at work (:data:`CALLS`, ``conn.began``;
    ``own``: 1 where ``conn``'s call is in flight); its ``closing`` set meanwhile (what
    ``trio.lowlevel.notify_closing`` tells a parked wait) ends the spin with
    ``ClosedResourceError``; set before the wait began (its reading shut, a late call served
    since: no close was told to this wait), it parks, to the shut reading's EOF."""
    window = (_spin[0] if _spin else spin_window_s()) if spin else 0.0
    if not window or (conn is not None and conn.closing):
        COUNTS["parks"] += 1
        return await _park(sock)
    start, began = _clock(), CALLS.began
    alone = conn is None or CALLS.alone(conn, own)
    why = decide(window, alone, 0.0 if conn is None else conn.waited, _no_core)
    if why == "spin":
        end, left = start + window, 0
        while True:
            if left <= 0:  # (cancelled, past its deadline: raises here)
                await trio.lowlevel.checkpoint()
                left = tries
            left -= 1
            fd = sock.fileno()
            if fd < 0 or (conn is not None and conn.closing):  # as the wait would say
                raise trio.ClosedResourceError("the socket was closed")
            try:
                data = os.read(fd, RECV)
            except BlockingIOError:
                if _clock() >= end:
                    break
                if CALLS.began != began and conn is not None:  # another call: park
                    why = "shared"
                    break
                os.sched_yield()  # a process runnable on this core (the peer?) runs first
                continue
            COUNTS["spun"] += 1
            if conn is not None:
                learn_wait(conn, _clock() - start, window)
            return data
    if why != "spin":
        COUNTS[why] += 1
    COUNTS["parks"] += 1
    data = await _park(sock)
    if conn is not None and why != "shared" and CALLS.began == began:  # (parked: was the
        learn_wait(conn, _clock() - start, window)  # answer within the window? unless shared)
    return data


def learn_wait(conn: Any, seconds: float, window: float) -> None:
    """Fold one wait's duration (its start to its data, spun or parked) into ``conn.waited``:
    the mean of the estimate and the wait, the wait counted at most 8 windows (one long idle
    wait costs at most three short ones before the spin is back). :func:`read_once` spins while
    the estimate is within 2 windows: a parked wait runs longer than the spin would have, by
    the wake-ups of both sides (its peer parked too), so 1 would keep a loop that parks
    parked. The waits of a shared step are not learned (:func:`read_once`). A connection's first
    :data:`WARM_WAITS` waits (``conn.warm`` counts them) are not learned: its client's
    warm-up (graphs registered, first steps prepared) says nothing of its steps."""
    if conn.warm < WARM_WAITS:
        conn.warm += 1
        return
    conn.waited = (conn.waited + min(seconds, 8 * window)) * 0.5


async def _park(sock: Any) -> bytes:
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return os.read(sock.fileno(), RECV)
        except BlockingIOError:
            continue


_MAX_PIECES: Final = 64  # a small message's buffers, at most, written in one writev
# A message of at most this many bytes is one writev whatever its buffers' sizes (well inside a
# Unix socket's default send buffer, 208 KiB, so the kernel takes it whole): a RunGraph with a
# 64 KiB feed (the parameter-server MLP's batch) is one send, where send_pieces made it three,
# and its server then finds the whole frame there (``RequestBody``'s reads without a wait).
ONE_WRITE_BYTES: Final = 128 * 1024


def small_pieces(head: bytes, buffers: list) -> list | None:
    """``[head, *buffers]``, their pending checksum trailers filled, for a small message (a
    few buffers, each under :data:`JOIN_BYTES`: what :func:`send_pieces` would join into one
    send, or at most :data:`ONE_WRITE_BYTES` in all); None for any other (sent by
    ``send_pieces``)."""
    if len(buffers) > _MAX_PIECES:
        return None
    total, large = 0, False
    for buffer in buffers:
        size = len(buffer)
        total += size
        large = large or size >= JOIN_BYTES
    if large and total > ONE_WRITE_BYTES:
        return None
    for buffer in buffers:
        if type(buffer) is ChecksumTrailer and buffer.pending:
            buffer.fill()
    return [head, *buffers]


def write_now(sock: Any, pieces: list) -> bytes:
    """Write ``pieces`` with one ``writev`` (no join, no scheduler pass); what the kernel did
    not take, joined (b"" when it took all). Raises OSError as ``writev`` does."""
    try:
        sent = os.writev(sock.fileno(), pieces)  # -1 once closed: EBADF
    except BlockingIOError:
        sent = 0
    if sent == sum(map(len, pieces)):
        return b""
    return b"".join(pieces)[sent:]


def write_one(sock: Any, data: bytearray) -> bytes:
    """:func:`write_now` of one buffer, with ``write``."""
    try:
        sent = os.write(sock.fileno(), data)  # -1 once closed: EBADF
    except BlockingIOError:
        sent = 0
    return b"" if sent == len(data) else bytes(data[sent:])


async def write_request(sock: Any, head: bytes, buffers: list, deadline: float) -> bool:
    """Write a call's request: a small one with one :func:`write_now` (the usual call: no
    wait, no scope), else what the kernel did not take, or a large one's pieces
    (:func:`send_pieces`), in a cancel scope with ``deadline`` (trio time; ``math.inf``: none)
    entered only then. Returns False where the deadline passed before all was written (the
    connection carries no other call). A one-way call's deadline is bounded so without a scope
    of its own (``TrioHttpChannel``): a scope entered and left costs ~10 us of CPU a call."""
    pieces = small_pieces(head, buffers)
    if pieces is not None:
        rest = write_now(sock, pieces)
        if not rest:
            return True
        parts: Any = (rest,)
    else:
        parts = send_pieces(head, buffers)
    with trio.CancelScope(deadline=deadline) as scope:
        for part in parts:
            await send_all(sock, memoryview(part))
    return not scope.cancelled_caught


class ServerConnection(GuardedConnection):
    __slots__ = ("closing", "pending", "waiting", "waited", "warm", "began", "prepared", "calls",
                 "unsent")

    def __init__(self, stream: Any, now: float) -> None:
        super().__init__(stream, now)
        self.pending = b""  # received past the last call's request
        self.waiting = False  # waiting for the next call (idle since ``idle_since``)
        self.closing = False  # the idle sweep closes it (a spinning wait looks at this)
        self.waited = 0.0  # the recent waits for a call, estimated (``read_once``'s spin rule)
        self.warm = 0  # its waits so far, up to WARM_WAITS (``learn_wait``)
        self.began = -1  # CALLS.began when its last call began (``Calls.alone``)
        self.prepared = None  # the last RunGraph reply's prepared signature (``prepared_reply``)
        self.calls = None  # the cancel scope its calls run in (``bare.BareService._serve_calls``)
        self.unsent = None  # a cancelled call's answer, sent out of that scope (the same)

    async def receive(self, deadline: float) -> bytes:
        """The next bytes; b"" at EOF. Past ``deadline`` the connection's scope ends it."""
        sock = self.stream.socket
        try:  # what is there already costs no deadline and no scheduler pass
            return os.read(sock.fileno(), RECV)
        except BlockingIOError:
            pass
        self.scope.deadline = deadline
        try:
            return await read_once(sock)
        finally:
            self.scope.deadline = math.inf

    async def receive_exactly(self, n: int, deadline: float) -> bytes:
        """``n`` bytes, all by ``deadline`` (one for the whole: a client that trickles a header
        a byte at a time cannot stretch it, as HTTP's header timeout runs from its first byte)."""
        while len(self.pending) < n:
            data = await self.receive(deadline)
            if not data:
                raise PeerGone("the client closed the connection")
            self.pending += data
        data, self.pending = self.pending[:n], self.pending[n:]
        return data


def prepared_reply(conn: ServerConnection, reply: Any, limits: Any) -> list:
    """A RunGraph reply's buffers, from the connection's last one's prepared signature where
    it is of it (the next step of the same graph: a small reply's whole frame in one buffer,
    written by offsets, ``Prepared.encode_whole``), else as ``encode`` encodes it, its own
    signature kept for the next."""
    prepared = conn.prepared
    if prepared is not None:
        buffers = prepared.encode_whole(reply, limits, checksum_enabled(), defer=True)
        if buffers is not None:
            return buffers
    buffers, conn.prepared = encode_prepared(None, reply, limits, defer_checksums=True)
    return buffers


class RequestBody:
    """A request frame of known length: first what came with its header, then the socket."""

    def __init__(self, conn: ServerConnection, length: int, timeout: float) -> None:
        self._conn, self._left, self._timeout = conn, length, timeout
        self.done = length == 0
        self._eager = 0  # reads in a row taken without a wait (and so without a checkpoint)

    async def read_into(self, view: memoryview) -> int:
        conn, want = self._conn, min(len(view), self._left)
        if not want:
            self.done = True
            return 0
        if conn.pending:
            n = min(want, len(conn.pending))
            view[:n] = conn.pending[:n]
            conn.pending = conn.pending[n:]
        else:
            n = await self._receive_into(view[:want])
        self._left -= n
        self.done = not self._left
        return n

    async def _receive_into(self, view: memoryview) -> int:
        # Bytes already there (the rest of a frame sent in one write): taken at once, with no
        # timeout scope and no scheduler pass, at most CALLS_PER_CHECKPOINT in a row (as
        # bulk_io's reads), so a long body still lets other tasks and cancellation in.
        if self._eager < CALLS_PER_CHECKPOINT:
            try:
                n = os.readv(self._conn.stream.socket.fileno(), [view])
            except OSError:  # none there yet (or closed, reset: the wait below says how)
                pass
            else:
                if not n:
                    raise PeerGone("the client closed the connection in the middle of a frame")
                self._eager += 1
                return n
        self._eager = 0  # (the wait below is a checkpoint)
        with trio.move_on_after(self._timeout):
            n = await self._conn.stream.socket.recv_into(view)
            if not n:
                raise PeerGone("the client closed the connection in the middle of a frame")
            return n
        raise BodyTimeout(f"no frame bytes for {self._timeout} s")


def reads_whole(pending: bytes, length: int) -> bool:
    """Whether a request frame of ``length`` bytes, ``pending`` its start, is read whole before
    it is decoded (``read_whole``): one up to :data:`WHOLE_FRAME_BYTES` (not whole in the read
    that brought its call's header), whose header (its length in the prefix at hand) the
    decoder may take on the event loop; else it streams into its arrays (``body.read_frame``)."""
    return length <= WHOLE_FRAME_BYTES and len(pending) >= PREFIX.size and \
        PREFIX.unpack_from(pending)[1] <= SMALL_HEADER_BYTES


async def read_whole(conn: ServerConnection, length: int, timeout: float) -> memoryview:
    """The ``length`` bytes of a request frame, whole: what came with its call's header, then
    the socket's (``RequestBody``: its stall timeout, its peer gone, a checkpoint at times).

    Why: the usual PS step's 64 KiB feed makes a frame just over ``RECV``; streamed, the
    decoder's pieces cost the worker ~65 us a step, where the frame read whole decodes by its
    template in one pass (one more copy of its ~64 KiB, a few us)."""
    data = memoryview(bytearray(length))
    body, got = RequestBody(conn, length, timeout), 0
    while got < length:
        got += await body.read_into(data[got:])
    return data


def one_way_failed(handler: Any, method: str, message: Any, reply: Any) -> None:
    """Hand a one-way call's failure to the handler's ``one_way_failed(method, fields,
    error)``, where it has one: ``fields``, the request's plain fields (a damaged frame's
    where its header was checked intact; None where they are unknown), ``error`` the
    RemoteCallError the call would have been answered with."""
    hook = getattr(handler, "one_way_failed", None)
    if hook is None:
        return
    if message is not None and not isinstance(message, dict):
        message = {name: getattr(message, name) for name in message.__dataclass_fields__}
    hook(method, message, RemoteCallError(reply.code, reply.message, op=reply.op,
                                          derived=reply.derived))


def shut_reading(sock: Any) -> None:
    """No byte more is taken on ``sock`` (Unix: the client's later writes fail, EPIPE, so a
    one-way call it writes from now on is never lost unread); what came before can be read."""
    try:
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass


def late_call(sock: Any) -> bytes:
    """What a client wrote before ``shut_reading``: a call to serve before closing."""
    try:
        return os.read(sock.fileno(), RECV)
    except OSError:  # (BlockingIOError: nothing)
        return b""
