"""The trivial remote step against Ray's Compiled Graphs, timed in alternating chunks.

Both frameworks' trivial step follows the host's phase (on the 2-core VM a 1000-step median of
ours reads 0.05-0.06 ms or ~0.10-0.17 ms with no other process runnable and no steal), and
Ray's is drawn per compiled graph: one compile runs its steps at ~0.05 ms or ~0.15 ms and mostly
stays there for thousands of steps (bench/RESULTS.md). ``bench_vs_tf1.py``'s sequential figures
are one draw each, taken 20-40 s apart, so a round's ratio said which phase each side drew. Both
cannot run at once either: Ray's compiled-graph actor spins a core while its graph is compiled.
So here, in one series, the two are timed in turns: ``--chunks`` chunks (10) of ``--steps``
timed steps (100), each after ``--warmup`` untimed ones (30), ours and Ray's in turn (ours,
Ray's, ours, ...), so that every chunk of either side but our first follows one of the other's:
both pay the same hand-over, and a side's odd and even chunks are an A/A. (An order that
reversed the pair every chunk left half of each side's chunks after its own and half after the
other's: our chunks after Ray's read up to 2.6x those after ours, Ray's after its own up to 2.3x
those after ours, and the halves were no A/A.)

**Ray's graph is compiled once a series and kept** (``--ray-compile once``, the default), as a
Ray user runs it: compiled before the first chunk (untimed), every Ray chunk run on it, torn down
after the last. Ray's mode is drawn per compile, and a graph compiled at each chunk's start and
torn down at its end (``--ray-compile per-chunk``, the first form) drew its ~0.15 ms mode in most
chunks: alternated in one run, 16 series, Ray's median 0.144-0.155 ms compiled per chunk (its
fast chunks 20-40%) against 0.047-0.051 compiled once (80-100%; a kept graph's slow chunks are a
few, just after its compile or one of our stops): compiling per chunk cost Ray ~3x. A fresh
child's kept graph alone ran fast in 40 of 40 chunks, and in 37 of 40 stopped between them:
the stops do not make its fast mode (bench/RESULTS.md, r49ray).

Ray's side is a long-lived child in the Ray interpreter (``--ray-python``; this same file with
``--ray-child``) in a session of its own, driven over its stdin and stdout, one line per command
and one JSON object per reply: ``compile`` compiles the one-actor graph (``Doubler.double``, as
``bench_vs_tf1``'s ``ray_trivial_ms``) and keeps it (``{"compile_s"}``); ``run STEPS WARMUP``
runs the untimed and timed executions on it (``{"times": [s, ...]}``); ``teardown`` tears it
down, which stops its actor's spin (``{"teardown_s"}``); ``chunk STEPS WARMUP`` does all three
for one chunk (``{"times", "compile_s", "teardown_s"}``: the per-chunk form); ``idle SECONDS``
compiles, runs 100 executions and reads the actor's CPU over SECONDS idle with the graph
compiled, then again after its teardown, and all the child's processes' CPU over the second
window (``{"compiled_cpu_s", "torn_down_cpu_s", "tree_cpu_s"}``); ``quit`` ends it. A bad line,
or one out of turn (``run`` with no graph kept, ``compile``, ``chunk`` or ``idle`` with one), is
answered ``{"error": ...}``.

**During our chunks every process of the Ray child's session is stopped** (SIGSTOP, and SIGCONT
after), the kept graph's spinning actor and driver included: they resume where they were, and
every execution's value is checked (``Doubler.double(1.0) == 2.0``). Torn down, Ray's driver and
raylet still wake (4-10% of a core idle, more just after a teardown), and with them runnable
our client's spin saw a third runnable thread and parked (the same-host rule: 67-74% of our
waits parked for want of a core, our chunks 0.17 ms against 0.06-0.08 stopped); compiled, the
actor spins a whole core. While Ray's chunks run our processes wait parked (no spin, no timer).
Our cluster stays up for the whole series; each exchange with the child runs off trio's loop
(``trio.to_thread.run_sync``) under a deadline, and after the series, or on its failure or
cancellation, every process of its session is waited for (any left after 30 s killed by its
PID: ``ray_left_killed``); a SIGTERM during the series continues Ray's stopped processes before
this process ends (a stopped process never reads the end of its stdin).

Figures (``interleaved``): ``trivial_il_ms`` and ``ray_trivial_il_ms`` (each the median over all
its chunks' timed steps), ``trivial_over_ray_il`` (their ratio: issue 34's "within 1.5x of Ray");
``il_aa_ours`` and ``il_aa_ray`` (an A/A: a side's odd chunks' median over its even ones');
``best_chunk_ms``, ``ray_best_chunk_ms`` and ``best_over_ray_best_il`` (each side's fastest
chunk median and their ratio: each side's fast mode against the other's, where a series drew
its slow one in most chunks, as Ray's compiled per chunk did);
``ray_fast_chunks`` (the share of Ray's chunks whose median is under 0.1 ms: its fast mode);
``ray_compile_ms`` and ``ray_teardown_ms`` (untimed: the one compile's, or medians over the
chunks compiled per chunk);
``il_ours_busy_parks`` (the share of our chunks' waits that parked for want of a core);
``ray_frozen_processes``; ``ray_idle_compiled_cpu``, ``ray_idle_torn_down_cpu`` (the actor's
share of a core idle, graph compiled and torn down) and ``ray_idle_tree_cpu`` (all of the
child's processes, torn down).

Run alone (a local one-ps, one-worker cluster, ``--rounds`` interleaved series in it, each
chunk's median printed): ``.venv/bin/python bench/bench_trivial_vs_ray.py --ray-python <Ray>
[--rounds 3] [--chunks 10] [--steps 100] [--warmup 30] [--freeze yes|no|alternate]
[--ray-compile once|per-chunk|alternate]``.
``bench_vs_tf1.py`` runs one series per round at the end of its asyncflow side, on its cluster.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
CHUNKS, STEPS, CHUNK_WARMUP = 10, 100, 30
FAST_S = 1e-4  # a Ray chunk whose median is under this drew Ray's fast mode (~0.05 ms, else ~0.15)
REPLY_DEADLINE_S = 120.0  # one reply of the child (its start: ray.init and an actor)


# ----------------------------------------------------------------------------- the protocol


def parse_command(line):
    """``(name, args)`` of one command line to the Ray child; ValueError naming the line."""
    words = line.split()
    if words in (["quit"], ["compile"], ["teardown"]):
        return words[0], ()
    try:
        if len(words) == 3 and words[0] in ("chunk", "run"):
            steps, warmup = int(words[1]), int(words[2])
            if steps > 0 and warmup >= 0:
                return words[0], (steps, warmup)
        if len(words) == 2 and words[0] == "idle":
            seconds = float(words[1])
            if 0 < seconds <= 10:
                return "idle", (seconds,)
    except ValueError:
        pass
    raise ValueError(f"Ray child: bad command {line.strip()!r} (expected 'chunk STEPS WARMUP' "
                     "or 'run STEPS WARMUP' with STEPS > 0 and WARMUP >= 0, 'idle SECONDS' "
                     "with 0 < SECONDS <= 10, 'compile', 'teardown' or 'quit')")


def parse_reply(line, command, who="Ray child"):
    """The JSON object the Ray child (or ``who``: bench_ps_tf1_rounds' TF1 child speaks the same
    replies) answered to ``command``; RuntimeError naming both where the line is not one, is
    empty (the child ended) or carries the child's ``error``."""
    if not line:
        raise RuntimeError(f"{who}: no reply to {command!r} (it ended)")
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise RuntimeError(f"{who}: reply to {command!r} is not a JSON object: "
                           f"{line.strip()[:200]!r}")
    if "error" in reply:
        raise RuntimeError(f"{who}: {command!r} failed: {reply['error']}")
    name = command.split()[0] if command.split() else ""
    if name in ("chunk", "run") and not (isinstance(reply.get("times"), list)
                                         and reply["times"]):
        raise RuntimeError(f"{who}: reply to {command!r} has no step times: "
                           f"{line.strip()[:200]!r}")
    key = {"compile": "compile_s", "teardown": "teardown_s"}.get(name)
    if key and not isinstance(reply.get(key), (int, float)):
        raise RuntimeError(f"{who}: reply to {command!r} has no {key!r}: "
                           f"{line.strip()[:200]!r}")
    return reply


def summarize(ours, theirs, compile_s=(), teardown_s=()):
    """The interleaved series' figures from each side's chunks (lists of step times, s)."""
    def median_ms(chunks):
        return statistics.median([t for chunk in chunks for t in chunk]) * 1e3

    def aa(chunks):  # odd chunks over even ones: two halves of one side, the same conditions
        return median_ms(chunks[1::2]) / median_ms(chunks[0::2])

    out = {"trivial_il_ms": median_ms(ours), "ray_trivial_il_ms": median_ms(theirs)}
    out["trivial_over_ray_il"] = out["trivial_il_ms"] / out["ray_trivial_il_ms"]
    # Each side's best chunk: its fast mode against the other's, where both drew one.
    out["best_chunk_ms"] = min(median_ms([chunk]) for chunk in ours)
    out["ray_best_chunk_ms"] = min(median_ms([chunk]) for chunk in theirs)
    out["best_over_ray_best_il"] = out["best_chunk_ms"] / out["ray_best_chunk_ms"]
    if len(ours) > 1 and len(theirs) > 1:
        out["il_aa_ours"], out["il_aa_ray"] = aa(ours), aa(theirs)
    if compile_s:
        out["ray_compile_ms"] = statistics.median(compile_s) * 1e3
    if teardown_s:
        out["ray_teardown_ms"] = statistics.median(teardown_s) * 1e3
    return out


# ----------------------------------------------------------------------------- the Ray child
# Runs in the Ray interpreter (``--ray-child``): imports ray, never asyncflow.


def _cpu_s(pid):
    """User + system CPU of a process (s) from /proc; 0.0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _state(pid):
    """A process's state letter (``R``, ``S``, ``T`` stopped, ...); ``?`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _session_pids(sid):
    """The live processes of session ``sid`` (the Ray child's: it starts its own); a zombie is
    not one (a killed orphan waits for init to reap it)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(name))
    return pids


def ray_child(stdin, stdout):
    import ray
    from ray.dag import InputNode
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")

    def reply(obj):
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    try:
        @ray.remote
        class Doubler:
            def double(self, value):
                return value * 2.0

            def pid(self):
                return os.getpid()

        actor = Doubler.remote()
        actor_pid = ray.get(actor.pid.remote())

        def compiled_graph():
            with InputNode() as node:
                return actor.double.bind(node).experimental_compile()

        def run(compiled, count):
            times = []
            for _ in range(count):
                start = time.perf_counter()
                value = ray.get(compiled.execute(1.0))
                times.append(time.perf_counter() - start)
                if value != 2.0:
                    raise RuntimeError(f"Doubler.double(1.0) returned {value!r}")
            return times

        reply({"ready": True, "actor_pid": actor_pid})
        kept = None  # the graph of "compile", kept compiled until "teardown"
        for line in stdin:
            try:
                name, args = parse_command(line)
                if name in ("compile", "chunk", "idle") and kept is not None:
                    raise ValueError(f"Ray child: {line.strip()!r} with the graph of 'compile' "
                                     "still compiled (send 'teardown' first)")
                if name in ("run", "teardown") and kept is None:
                    raise ValueError(f"Ray child: {line.strip()!r} with no graph compiled "
                                     "(send 'compile' first)")
            except ValueError as exc:
                reply({"error": str(exc)})
                continue
            if name == "quit":
                break
            if name == "run":
                steps, warmup = args
                run(kept, warmup)
                reply({"times": run(kept, steps)})
                continue
            if name == "teardown":
                start = time.perf_counter()
                kept, compiled = None, kept
                compiled.teardown()
                reply({"teardown_s": time.perf_counter() - start})
                continue
            start = time.perf_counter()
            compiled = compiled_graph()
            compile_s = time.perf_counter() - start
            if name == "compile":
                kept = compiled
                reply({"compile_s": compile_s})
                continue
            try:
                if name == "chunk":
                    steps, warmup = args
                    run(compiled, warmup)
                    times = run(compiled, steps)
                else:
                    run(compiled, 100)
                    before = _cpu_s(actor_pid)
                    time.sleep(args[0])
                    compiled_cpu = _cpu_s(actor_pid) - before
            finally:
                start = time.perf_counter()
                compiled.teardown()
                teardown_s = time.perf_counter() - start
            if name == "chunk":
                reply({"times": times, "compile_s": compile_s, "teardown_s": teardown_s})
                continue
            tree = _session_pids(os.getsid(0))
            before, tree_before = _cpu_s(actor_pid), {pid: _cpu_s(pid) for pid in tree}
            time.sleep(args[0])
            reply({"compiled_cpu_s": compiled_cpu, "torn_down_cpu_s": _cpu_s(actor_pid) - before,
                   "tree_cpu_s": sum(_cpu_s(pid) - cpu for pid, cpu in tree_before.items()),
                   "tree_processes": len(tree)})
    finally:
        ray.shutdown()


# ----------------------------------------------------------------------------- our side


def start_ray_child(ray_python, deadline_s=REPLY_DEADLINE_S):
    """The Ray child (this file with ``--ray-child`` in ``ray_python``), ready: its actor up."""
    return ChildSession([ray_python, os.path.abspath(__file__), "--ray-child"], deadline_s)


class ChildSession:
    """A child process that speaks the line protocol above, in a session of its own, so that
    every process it starts (Ray's raylet, GCS, workers, actors; TF1's servers for
    bench_ps_tf1_rounds, ``who`` naming it in errors) can be found, stopped during our chunks
    (``freeze``, ``thaw``) and waited for at the end (``close``). ``ready``: its first reply;
    ``ask`` sends one command and returns the parsed reply."""

    def __init__(self, argv, deadline_s=REPLY_DEADLINE_S, who="Ray child"):
        self.who = who
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._frozen = []
        self._pending = b""  # what the child wrote past the last line read
        self._ending = False  # set by ``thaw_on_sigterm``'s handler: no further SIGSTOP
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, start_new_session=True)
        try:
            self.ready = self._read("start", deadline_s)
        except BaseException:
            self.close()
            raise

    def _read(self, command, deadline_s):
        # Polled, not one select: a process the child started may hold its stdout open after
        # the child ended, so the end shows as the child's exit, not as an end of file. Bytes
        # as they come (``os.read``), not ``readline``: that blocked past the deadline on half
        # a line, and a second line it had buffered was not seen by the next select.
        end, fd = time.monotonic() + deadline_s, self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(min(end - time.monotonic(), 0.05), 0))
            chunk = os.read(fd, 65536) if ready else None
            if chunk:
                self._pending += chunk
            elif chunk == b"" or (self.proc.poll() is not None
                                  and not select.select([fd], [], [], 0)[0]):
                break  # the end of its stdout, or the child ended and all it wrote is read
            if time.monotonic() >= end and b"\n" not in self._pending:
                raise RuntimeError(f"{self.who}: no reply to {command!r} within {deadline_s:g} s"
                                   f"{self._stderr_tail()}")
        line, _, self._pending = self._pending.partition(b"\n")
        line = line.decode(errors="replace")
        try:
            return parse_reply(line, command, self.who)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}{self._stderr_tail()}") from None

    def _stderr_tail(self):
        self._stderr.seek(0)
        tail = self._stderr.read()[-1500:]
        return f"; its stderr ends: {tail}" if tail else ""

    def ask(self, command, deadline_s=REPLY_DEADLINE_S):
        with _gone():  # a child that ended is reported by ``_read``, with its stderr
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        return self._read(command, deadline_s)

    def freeze(self, deadline_s=2.0):
        """Stops (SIGSTOP) every process of the child's session and returns once each one is
        stopped, so that none of Ray's threads runs, or counts as runnable, during our chunk."""
        self._frozen = _session_pids(self.proc.pid)
        for pid in self._frozen:
            if self._ending:
                break
            with _gone():
                os.kill(pid, signal.SIGSTOP)
        end = time.monotonic() + deadline_s
        while True:
            running = [pid for pid in self._frozen if _state(pid) not in ("T", "t", "?")]
            if not running:
                return len(self._frozen)
            if time.monotonic() > end:
                self.thaw()
                raise RuntimeError(f"{self.who}: processes {running} not stopped within "
                                   f"{deadline_s} s of SIGSTOP")
            time.sleep(0.0005)

    def thaw(self):
        """Continues (SIGCONT) the processes ``freeze`` stopped."""
        for pid in self._frozen:
            with _gone():
                os.kill(pid, signal.SIGCONT)
        self._frozen = []

    def thaw_all(self):
        """Continues (SIGCONT) every process of the child's session and stops any further
        ``freeze``: for a process about to end without its ``close``."""
        self._ending = True
        for pid in set(self._frozen) | set(_session_pids(self.proc.pid)):
            with _gone():
                os.kill(pid, signal.SIGCONT)

    def close(self, deadline_s=30.0):
        """Ends the child and waits until every process of its session is gone (killing, by
        PID, any left after ``deadline_s``); returns how many had to be killed."""
        self.thaw()
        with _gone():
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        end = time.monotonic() + deadline_s
        while _session_pids(self.proc.pid) and time.monotonic() < end:
            time.sleep(0.05)
        left = _session_pids(self.proc.pid)
        for pid in left:
            with _gone():
                os.kill(pid, signal.SIGKILL)
        while _session_pids(self.proc.pid) and time.monotonic() < end + 10:
            time.sleep(0.05)
        self.proc.stdout.close()
        self._stderr.close()
        return len(left)


@contextlib.contextmanager
def thaw_on_sigterm(child):
    """While in it, a SIGTERM (``timeout``'s) first continues every process of ``child``'s
    session, then goes on to the handler before it (by default: this process ends, no
    ``finally`` run). A stopped process never reads the end of its stdin, so without this Ray's
    processes stopped during one of our chunks stayed stopped for good. Outside the main thread
    (where no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    previous = signal.SIG_DFL if previous is None else previous

    def on_sigterm(signum, frame):
        child.thaw_all()
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _gone:
    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return kind is not None and issubclass(kind, (BrokenPipeError, ProcessLookupError))


async def interleaved(step, child, chunks=CHUNKS, steps=STEPS, warmup=CHUNK_WARMUP,
                      detail=None, freeze=True, compile_once=True):
    """Ours (``await step()``) and Ray's (``child``) trivial step in alternating chunks; the
    figures of ``summarize`` plus the idle check (``ray_idle_*``: the actor's CPU share idle
    with the graph compiled and after its teardown)."""
    import trio
    try:  # this client's waits that parked for want of a core (a third runnable thread)
        from transports.http.bare_io import COUNTS as counts
    except ImportError:
        counts = {}
    ours, theirs, compile_s, teardown_s, frozen, busy = [], [], [], [], [], 0
    command = f"{'run' if compile_once else 'chunk'} {steps} {warmup}"
    if compile_once:
        compile_s.append((await trio.to_thread.run_sync(child.ask, "compile"))["compile_s"])
    for index in range(chunks):
        for side in ("ours", "ray"):
            if side == "ours":
                if freeze:
                    frozen.append(await trio.to_thread.run_sync(child.freeze))
                try:
                    before = dict(counts)
                    for _ in range(warmup):
                        await step()
                    times = []
                    for _ in range(steps):
                        start = time.perf_counter()
                        await step()
                        times.append(time.perf_counter() - start)
                    busy += counts.get("busy", 0) - before.get("busy", 0)
                finally:
                    child.thaw()
                ours.append(times)
            else:
                reply = await trio.to_thread.run_sync(child.ask, command)
                theirs.append(reply["times"])
                if not compile_once:
                    compile_s.append(reply["compile_s"])
                    teardown_s.append(reply["teardown_s"])
    if compile_once:
        teardown_s.append((await trio.to_thread.run_sync(child.ask, "teardown"))["teardown_s"])
    out = summarize(ours, theirs, compile_s, teardown_s)
    out["ray_fast_chunks"] = sum(statistics.median(c) < FAST_S for c in theirs) / len(theirs)
    if detail is not None:  # each chunk's median (us), in order
        for name, chunked in (("ours", ours), ("ray", theirs)):
            detail[name] = [round(statistics.median(c) * 1e6) for c in chunked]
    out["il_ours_busy_parks"] = busy / (chunks * (steps + warmup))
    if frozen:
        out["ray_frozen_processes"] = statistics.median(frozen)
    idle = await trio.to_thread.run_sync(child.ask, "idle 0.5")
    out["ray_idle_compiled_cpu"] = idle["compiled_cpu_s"] / 0.5
    out["ray_idle_torn_down_cpu"] = idle["torn_down_cpu_s"] / 0.5
    out["ray_idle_tree_cpu"] = idle["tree_cpu_s"] / 0.5
    return out


async def trivial_interleaved(af, cluster, ray_python, trivial=None, chunks=CHUNKS,
                              steps=STEPS, warmup=CHUNK_WARMUP, detail=None, freeze=True,
                              compile_once=True):
    """One interleaved series on ``cluster`` against a fresh Ray child, ended and waited for
    (every process of its session gone) before returning. ``trivial``: ``(graph, p, doubled)``
    of ``bench_vs_tf1``'s trivial workload (built here when None), run in a session of its own."""
    import trio
    if trivial is None:
        from bench_vs_tf1 import _trivial_and_pull
        trivial = _trivial_and_pull(af)[:3]
    graph, p, doubled = trivial
    child = await trio.to_thread.run_sync(start_ray_child, ray_python)
    try:
        with thaw_on_sigterm(child):
            async with af.Session(graph=graph, cluster=cluster) as sess:
                await sess.run(doubled, {p: 1.0})
                out = await interleaved(lambda: sess.run(doubled, {p: 1.0}), child, chunks,
                                        steps, warmup, detail, freeze, compile_once)
    finally:
        with trio.CancelScope(shield=True):  # cancelled, Ray's processes are still ended
            killed = await trio.to_thread.run_sync(child.close)
    out["ray_left_killed"] = killed
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ray-python", default=os.environ.get("ASYNCFLOW_RAY_PYTHON"),
                        help="a Python that can import ray (else $ASYNCFLOW_RAY_PYTHON)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--warmup", type=int, default=CHUNK_WARMUP)
    parser.add_argument("--freeze", choices=("yes", "no", "alternate"), default="yes",
                        help="stop Ray's processes during our chunks (alternate: even rounds)")
    parser.add_argument("--ray-compile", choices=("once", "per-chunk", "alternate"),
                        default="once", help="Ray's graph compiled once a series and kept, or "
                        "at each of its chunks (alternate: once in even rounds)")
    parser.add_argument("--ray-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ray_child:
        ray_child(sys.stdin, sys.stdout)
        return
    if not args.ray_python:
        parser.error("no --ray-python and no $ASYNCFLOW_RAY_PYTHON")
    sys.path.insert(0, os.path.join(_HERE, ".."))
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import trio
    from local_cluster import local_cluster

    import asyncflow as af

    async def rounds(spec):
        for index in range(args.rounds):
            detail = {}
            freeze = args.freeze == "yes" or (args.freeze == "alternate" and index % 2 == 0)
            once = args.ray_compile == "once" or (args.ray_compile == "alternate"
                                                  and index % 2 == 0)
            out = await trivial_interleaved(af, spec, args.ray_python, None, args.chunks,
                                            args.steps, args.warmup, detail, freeze, once)
            print(f"-- round {index + 1}/{args.rounds} (freeze {freeze}, Ray compiled "
                  f"{'once' if once else 'per chunk'}): " + ", ".join(
                f"{key} {value:.4g}" for key, value in out.items()), flush=True)
            print(f"   chunk medians (us): ours {detail['ours']}, Ray's {detail['ray']}",
                  flush=True)

    with local_cluster({"ps": 1, "worker": 1}) as spec:
        trio.run(rounds, spec)


if __name__ == "__main__":
    main()
