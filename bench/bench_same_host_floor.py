"""The floor of a same-host bare call (issue 34): a request/answer ping-pong between two
processes over a Unix socket against a shared-memory ring, with the trivial step's real sizes.

The question: our trivial remote step (one client, one worker, ``p * 2.0``) crosses the
same-host Unix socket twice a step (the RunGraph request, its reply), each side spinning on
non-blocking reads (``transports/http/bare_io.py``: ``os.read`` after a ``sched_yield``, 200 us,
then parked; a message sent with one ``os.writev``). Ray's compiled graphs instead spin on
shared-memory channels with no syscall a message. What would a shared-memory channel save us?

``--record`` first runs a real trivial step (a fresh one-ps, one-worker cluster,
``demos/local_cluster.py``) with the client's ``os.writev`` and ``os.read`` watched: the bytes
of its RunGraph request (one ``writev``) and of its reply (the ``os.read`` that returned it),
the last steps' sizes. Without it, ``--request``/``--reply`` give the sizes.

Then this process (the client) and a child (the server, started by this script, killed by its
PID at the end) run ``--rounds`` rounds; in each, every form in turn (the order rotated a round)
runs ``--turns`` turns, a turn being: the client sends the request, the server reads it whole and
sends the reply, the client reads it whole. Forms:

* ``spin``: a Unix stream socket, non-blocking; a read spins as ``bare_io.read_once`` does
  (``os.read``, on ``BlockingIOError`` a ``sched_yield``; 200 us, then parked in ``poll``);
  sends are one ``os.writev`` of two pieces (a head and a body, as the bare frames are);
* ``block``: the same socket blocking: each read parks in the kernel (a wake-up a message);
* ``shm``: a ring per direction, one ``mmap`` of a ``/dev/shm`` file each (unlinked once
  both sides mapped it: a killed process leaves no file). The writer copies the payload, then
  the length, then bumps the sequence counter (an aligned 8-byte store: x86 keeps stores in
  order, so a reader that sees the counter sees the payload). The reader spins on the counter
  (no syscall, no yield) for the window, then parks: it sets its ``parked`` word, re-reads the
  counter, and waits on the socket for a doorbell byte, which the writer sends when it reads
  ``parked`` set after bumping the counter. x86 may reorder each side's store before its later
  load (store -> load), so both can miss each other (the reader's re-check reads the old
  counter, the writer's check reads ``parked`` clear). Python can issue no ``mfence``, so the
  park is a bounded timed wait instead: ``poll`` for at most ``--park-ms`` (1 ms), then the
  counter read again (``lost`` counts the timed waits that found the message: missed wake-ups);
* ``shm_yield``: as ``shm``, a ``sched_yield`` between the spin's reads (as ``spin`` does: a
  third runnable thread gets the core);
* ``spin2``, ``shm2``: ``spin`` and ``shm`` again (A/A: the run's noise beside the A/B).

Printed per form: the turn's median, p10, p90 (us, all rounds' turns), the median of the rounds'
medians, and each side's CPU per turn (us, its thread's time on a CPU from
``time.thread_time_ns``), parks and lost wake-ups; then each form over ``spin`` per
round (the ratio of round medians: min, median, max) beside ``spin2`` over ``spin`` and ``shm2``
over ``shm``.

Run: ``.venv/bin/python bench/bench_same_host_floor.py [--record [--timed-steps 3000]] [--rounds 12] [--turns 2000]
[--request 288 --reply 216] [--forms spin,block,shm,shm_yield,spin2,shm2]``.
"""
from __future__ import annotations

import argparse
import mmap
import os
import secrets
import select
import socket
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
HEAD = 64  # a ring's header: [seq, length, parked] as 8-byte words, then padding
RING = 1 << 20  # a ring's size: the header and one payload
SPIN_S = 200e-6  # bare_io's default window
RECV = 64 * 1024
FORMS = ("spin", "block", "shm", "shm_yield", "spin2", "shm2")


def _on_cpu_ns():
    """This thread's CPU time so far (ns; ``CLOCK_THREAD_CPUTIME_ID``, exact for a thread
    that is running, where ``/proc/.../schedstat`` lags until its next tick or switch)."""
    return time.thread_time_ns()


# -- the ways a message goes -------------------------------------------------------------


def _read_socket(fd, size, spin, counts):
    """``size`` bytes from ``fd``: with ``spin`` as ``bare_io.read_once`` (non-blocking reads
    and ``sched_yield`` for the window, then parked in ``poll``), else blocking reads."""
    got = []
    have = 0
    while have < size:
        if spin:
            end = time.perf_counter() + SPIN_S
            while True:
                try:
                    data = os.read(fd, RECV)
                    break
                except BlockingIOError:
                    if time.perf_counter() >= end:
                        counts["parks"] += 1
                        _poll_in(fd, -1)
                        end = time.perf_counter() + SPIN_S
                        continue
                    os.sched_yield()
        else:
            data = os.read(fd, RECV)
        if not data:
            raise EOFError("the peer closed the socket")
        got.append(data)
        have += len(data)
    return got[0] if len(got) == 1 else b"".join(got)


def _drain(fd):
    """Read what waits on ``fd`` (stale doorbells) without blocking."""
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        while True:
            os.read(fd, 64)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, blocking)


def _poll_in(fd, timeout_ms):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller.poll(timeout_ms)


class Ring:
    """One direction's shared-memory ring (see the module): a header of 8-byte words (the
    sequence counter, the payload's length, the reader's ``parked``), then the payload."""

    def __init__(self, path, create):
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, RING)
            self.map = mmap.mmap(fd, RING)
        finally:
            os.close(fd)
        self.words = memoryview(self.map).cast("Q")
        self.seq = self.words[0]  # the last message this side wrote or read

    def write(self, pieces, bell_fd):
        at = HEAD
        for piece in pieces:
            self.map[at:at + len(piece)] = piece
            at += len(piece)
        words = self.words
        words[1] = at - HEAD
        self.seq += 1
        words[0] = self.seq  # (published: the payload and length were stored before it)
        if words[2]:  # the reader parked (or is parking): ring its doorbell
            os.write(bell_fd, b"\1")

    def read(self, bell_fd, park_s, yielding, counts):
        words, want = self.words, self.seq + 1
        end = time.perf_counter() + SPIN_S
        while words[0] != want:
            if yielding:
                os.sched_yield()
            if time.perf_counter() < end:
                continue
            words[2] = 1  # parked; then the counter read again (see the module: no fence)
            counts["parks"] += 1
            while words[0] != want:
                if not _poll_in(bell_fd, park_s):
                    if words[0] == want:
                        counts["lost"] += 1
                    continue
                try:
                    bell = os.read(bell_fd, 64)  # the doorbell (and any stale one)
                except BlockingIOError:
                    continue
                if not bell:  # the peer's end closed: a ring has no EOF of its own
                    raise EOFError("the peer closed the doorbell socket")
            words[2] = 0
            break
        self.seq = want
        n = words[1]
        return bytes(self.map[HEAD:HEAD + n])


# -- the server (a child process) ----------------------------------------------------------


def _serve(argv):
    data_fd, ctl_fd = int(argv[0]), int(argv[1])
    to_server, to_client = Ring(argv[2], False), Ring(argv[3], False)
    request, reply = int(argv[4]), int(argv[5])
    park_ms = int(argv[6])
    answer = [b"H" * 16, b"r" * (reply - 16)]
    ctl = os.fdopen(ctl_fd, "rb", buffering=0)
    os.write(ctl_fd, b"mapped\n")
    line = b""
    while True:
        while not line.endswith(b"\n"):
            more = ctl.read(64)
            if not more:
                return
            line += more
        form, turns = line.split()
        line = b""
        form, turns = form.decode(), int(turns)
        counts = {"parks": 0, "lost": 0}
        os.set_blocking(data_fd, form == "block")
        cpu = _on_cpu_ns()
        if form.startswith("shm"):
            yielding = form == "shm_yield"
            for _ in range(turns):
                message = to_server.read(data_fd, park_ms, yielding, counts)
                if len(message) != request:
                    raise ValueError(f"server: a request of {len(message)} bytes")
                to_client.write(answer, data_fd)
        else:
            spin = form != "block"
            for _ in range(turns):
                message = _read_socket(data_fd, request, spin, counts)
                if len(message) != request:
                    raise ValueError(f"server: a request of {len(message)} bytes")
                os.writev(data_fd, answer)
        cpu = _on_cpu_ns() - cpu
        _drain(data_fd)  # a doorbell rung after its reader had found the message
        os.write(ctl_fd, f"{cpu} {counts['parks']} {counts['lost']}\n".encode())


# -- the client (this process) -------------------------------------------------------------


def _block(form, turns, data_fd, ctl, rings, sizes, park_ms):
    request, reply = sizes
    to_server, to_client = rings
    pieces = [b"H" * 24, b"q" * (request - 24)]
    counts = {"parks": 0, "lost": 0}
    os.set_blocking(data_fd, form == "block")
    os.write(ctl.fileno(), f"{form} {turns}\n".encode())
    times = [0] * turns
    clock = time.perf_counter_ns
    cpu = _on_cpu_ns()
    if form.startswith("shm"):
        yielding = form == "shm_yield"
        for k in range(turns):
            start = clock()
            to_server.write(pieces, data_fd)
            answer = to_client.read(data_fd, park_ms, yielding, counts)
            times[k] = clock() - start
            if len(answer) != reply:
                raise ValueError(f"client: a reply of {len(answer)} bytes")
    else:
        spin = form != "block"
        for k in range(turns):
            start = clock()
            os.writev(data_fd, pieces)
            answer = _read_socket(data_fd, reply, spin, counts)
            times[k] = clock() - start
            if len(answer) != reply:
                raise ValueError(f"client: a reply of {len(answer)} bytes")
    cpu = _on_cpu_ns() - cpu
    server_cpu, server_parks, server_lost = map(int, ctl.readline().split())
    _drain(data_fd)
    return {"times": times, "cpu_c": cpu / turns, "cpu_s": server_cpu / turns,
            "parks": counts["parks"] + server_parks, "lost": counts["lost"] + server_lost}


def _record(steps, timed):
    """(request bytes, reply bytes) of a real trivial step's RunGraph on the bare path: the
    client's ``os.writev`` and ``os.read`` watched over the last of ``steps`` steps. Then
    ``timed`` steps with their times split at the client's socket calls (printed, us, median
    and p90): the whole step, the ``writev`` of the request, from its return to the read that
    returned the reply (the call away: two hops and the worker's turn), and the rest (the
    client's own Python: the session, the executor, encoding and decoding)."""
    sys.path.insert(0, _HERE)
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import trio
    import asyncflow as af
    import bench_vs_tf1 as workloads
    from local_cluster import local_cluster
    seen = []
    marks = []
    real_writev, real_read = os.writev, os.read
    clock = time.perf_counter_ns

    def writev(fd, buffers):
        n = real_writev(fd, buffers)
        seen.append(("writev", fd, n, len(buffers)))
        return n

    def read(fd, n):
        data = real_read(fd, n)
        seen.append(("read", fd, len(data), 1))
        return data

    def writev_timed(fd, buffers):
        start = clock()
        n = real_writev(fd, buffers)
        marks.append(("w", start, clock()))
        return n

    def read_timed(fd, n):
        data = real_read(fd, n)
        if data:
            marks.append(("r", clock()))
        return data

    async def run(spec):
        graph, p, doubled, *_ = workloads._trivial_and_pull(af)
        cluster = {"ps": spec["ps"], "worker": spec["worker"]}
        async with af.Session(graph=graph, cluster=cluster) as sess:
            for _ in range(steps):
                await sess.run(doubled, {p: 1.0})
            os.writev, os.read = writev, read
            try:
                for _ in range(5):
                    seen.append(("step",))
                    assert await sess.run(doubled, {p: 1.0}) == 2.0
            finally:
                os.writev, os.read = real_writev, real_read
            if not timed:
                return
            os.writev, os.read = writev_timed, read_timed
            split = []
            try:
                for _ in range(timed):
                    marks.clear()
                    start = clock()
                    await sess.run(doubled, {p: 1.0})
                    end = clock()
                    if [m[0] for m in marks] == ["w", "r"]:
                        (_, w0, w1), (_, r) = marks
                        split.append((end - start, w1 - w0, r - w1, end - start - (r - w0)))
            finally:
                os.writev, os.read = real_writev, real_read
            print(f"the trivial step split at the client's socket calls ({len(split)} of "
                  f"{timed} steps with one writev and one read; us, median / p90):")
            for k, name in enumerate(("step", "writev", "away (2 hops + worker)",
                                      "client's own")):
                values = [row[k] / 1e3 for row in split]
                print(f"  {name:24} {statistics.median(values):6.1f} / {_pct(values, 0.9):6.1f}")

    with local_cluster({"ps": 1, "worker": 1}) as spec:
        trio.run(run, spec)
    last = seen[len(seen) - seen[::-1].index(("step",)):]
    print("the last step's I/O (call, fd, bytes, pieces):", last)
    writes = [entry for entry in last if entry[0] == "writev"]
    reads = [entry for entry in last if entry[0] == "read"]
    if len(writes) != 1 or len(reads) != 1:
        raise SystemExit(f"expected one writev and one read a step, saw {last}")
    return writes[0][2], reads[0][2]


def _pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true",
                        help="take the sizes from a real trivial step first")
    parser.add_argument("--timed-steps", type=int, default=0,
                        help="with --record: this many steps split at the client's socket "
                             "calls")
    parser.add_argument("--request", type=int, default=288)
    parser.add_argument("--reply", type=int, default=216)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--park-ms", type=int, default=1)
    parser.add_argument("--forms", default=",".join(FORMS))
    args = parser.parse_args()
    forms = args.forms.split(",")
    for form in forms:
        if form not in FORMS:
            parser.error(f"--forms: {form!r} is none of {FORMS}")
    sizes = _record(200, args.timed_steps) if args.record else (args.request, args.reply)
    if min(sizes) < 32:
        parser.error(f"messages of {sizes} bytes: at least 32 are due")
    print(f"request {sizes[0]} bytes, reply {sizes[1]} bytes; {args.rounds} rounds x "
          f"{args.turns} turns a form; load {open('/proc/loadavg').read().split()[0]}",
          flush=True)
    data_c, data_s = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl_c, ctl_s = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    tag = secrets.token_hex(6)
    paths = [f"/dev/shm/asyncflow-floor-{tag}-{way}" for way in ("up", "down")]
    rings = [Ring(path, True) for path in paths]
    server = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve", str(data_s.fileno()),
         str(ctl_s.fileno()), *paths, str(sizes[0]), str(sizes[1]), str(args.park_ms)],
        pass_fds=(data_s.fileno(), ctl_s.fileno()))
    results = {form: [] for form in forms}
    try:
        data_s.close()
        ctl_s.close()
        ctl = ctl_c.makefile("rb", buffering=0)
        if ctl.readline() != b"mapped\n":
            raise SystemExit("the server did not start")
        for path in paths:
            os.unlink(path)  # both mapped: nothing left behind a killed process
        paths = []
        data_fd = data_c.fileno()
        _block("spin", 200, data_fd, ctl, rings, sizes, args.park_ms)  # warm-up
        _block("shm", 200, data_fd, ctl, rings, sizes, args.park_ms)
        for n in range(args.rounds):
            for form in forms[n % len(forms):] + forms[:n % len(forms)]:
                results[form].append(_block(form, args.turns, data_fd, ctl, rings, sizes,
                                            args.park_ms))
    finally:
        for path in paths:
            os.unlink(path)
        ctl_c.close()
        data_c.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    print(f"{'form':10} {'median':>7} {'p10':>6} {'p90':>6} {'rnd-med':>7} {'cpu c':>6} "
          f"{'cpu s':>6} {'parks':>6} {'lost':>5}   (us a turn; cpu: each side's on-CPU us a "
          "turn)")
    medians = {}
    for form in forms:
        rounds = results[form]
        every = [t / 1e3 for r in rounds for t in r["times"]]
        medians[form] = [statistics.median(r["times"]) / 1e3 for r in rounds]
        print(f"{form:10} {statistics.median(every):7.1f} {_pct(every, 0.1):6.1f} "
              f"{_pct(every, 0.9):6.1f} {statistics.median(medians[form]):7.1f} "
              f"{statistics.median(r['cpu_c'] for r in rounds) / 1e3:6.1f} "
              f"{statistics.median(r['cpu_s'] for r in rounds) / 1e3:6.1f} "
              f"{sum(r['parks'] for r in rounds):6d} {sum(r['lost'] for r in rounds):5d}")
    print("per round, the ratio of round medians (min / median / max):")
    pairs = [(form, "spin") for form in forms if form != "spin" and "spin" in forms]
    if "shm2" in forms and "shm" in forms:
        pairs.append(("shm2", "shm"))
    for a, b in pairs:
        ratios = [x / y for x, y in zip(medians[a], medians[b])]
        print(f"  {a:>9} / {b:<5} {min(ratios):.3f} / {statistics.median(ratios):.3f} / "
              f"{max(ratios):.3f}")
    print("round medians (us):")
    for form in forms:
        print(f"  {form:10}", " ".join(f"{m:.1f}" for m in medians[form]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2:])
    else:
        main()
