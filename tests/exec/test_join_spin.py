"""A split's join in a short spin and a split worker's idle spin (``exec/join_spin.py``,
``exec/intra_op.py``): the caller still waits for every chunk a worker computes, a spin whose
bound passes falls back to the lock, an idle worker takes the next hand-off when the bell
rings, and gives its core to a running lane."""
from __future__ import annotations

import os
import platform
import signal
import sys
import threading

import numpy as np
import pytest

from asyncflow.exec import intra_op, join_spin

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the spin's pause is x86-64's")


@pytest.fixture
def spin(monkeypatch):
    pytest.importorskip("numba")
    join_spin.start(intra_op.hold_blas_loaded_since)
    if not join_spin.ready(120):
        pytest.skip("the spin's loops did not compile here")
    monkeypatch.setattr(join_spin, "SPIN_US", 500.0)
    monkeypatch.setattr(join_spin, "GAP_US", 1e9)  # (a loaded machine's preemption: no back-off)
    monkeypatch.setattr(join_spin, "_quiet_until", 0.0)
    return join_spin


def _split_with_a_late_worker(pool, release_after_waiting):
    """A two-chunk split whose worker's chunk waits for ``release`` (set by the test once the
    caller has waited 0.2 s); returns (the chunks done in order, whether the caller returned
    before the release)."""
    started, release = threading.Event(), threading.Event()
    done = []

    def work(start, stop):
        if threading.current_thread().name.startswith("asyncflow-intra-op"):  # the worker
            started.set()
            assert release.wait(30)
        else:  # the caller's chunk ends once the worker has taken the other
            assert started.wait(30)
        done.append(start)

    def run():
        pool.run(work, [(0, 1), (1, 2)])
        done.append("returned")
    caller = threading.Thread(target=run)
    caller.start()
    try:
        assert started.wait(30)
        caller.join(release_after_waiting)
        early = not caller.is_alive() or "returned" in done
    finally:
        release.set()
        caller.join(30)
    return done, early


def test_the_loops_wait_for_the_word_and_the_bell(spin):
    store, wait, ticks, idle = join_spin._functions
    word, bell, lanes = (np.zeros(1, np.int64) for _ in range(3))
    never = 1 << 60  # (no gap ends the spin)
    assert wait(word, int(100 * ticks), never) == 0  # an unset word: the bound passes
    store(word)
    assert wait(word, int(100 * ticks), never) == 1
    other = np.zeros(1, np.int64)
    assert idle(other, bell, 0, lanes, int(100 * ticks), 0, never) == 0  # no bell in 100 us
    assert other[0] == 1  # (the word is stored first)
    bell[0] = 1
    assert idle(other, bell, 0, lanes, int(1e6 * ticks), 0, never) == 1
    lanes[0] = 1  # a lane runs: the idle spin ends at once, however long its bound
    assert idle(other, bell, 1, lanes, int(60e6 * ticks), 0, never) == 0
    # Two reads of the cycle counter further apart than ``gap`` (here 0 ticks: any two): the
    # thread lost its CPU; both spins end at once, however long their bounds.
    assert wait(np.zeros(1, np.int64), int(60e6 * ticks), 0) == 2
    lanes[0] = 0
    assert idle(other, bell, 1, lanes, int(60e6 * ticks), 0, 0) == 2


@pytest.mark.parametrize("spin_us, caught, timed_out", [
    (5e6, 1, 0),  # the spin outlasts the test's wait: it still waits for the worker's chunk
    (1000.0, 0, 1),  # its bound passes: it sleeps on the lock
    (0.0, 0, 0),  # no spin: the lock alone
])
def test_a_split_s_caller_waits_for_the_worker_s_chunk_however_it_spins(
        spin, monkeypatch, spin_us, caught, timed_out):
    monkeypatch.setattr(join_spin, "SPIN_US", spin_us)
    pool = intra_op.IntraOpPool(2)
    before = join_spin.statistics()
    try:
        done, early = _split_with_a_late_worker(pool, 0.2)
    finally:
        pool.close(30)
    assert not early and sorted(done[:2]) == [0, 1] and done[2:] == ["returned"]
    after = join_spin.statistics()
    assert (after.caught - before.caught, after.timed_out - before.timed_out) == (caught, timed_out)
    if not spin_us:
        assert after == before


@pytest.mark.parametrize("idle_us", [0.0, 500.0, 5e6])
def test_splits_one_after_another_have_every_chunk_once(spin, monkeypatch, idle_us):
    """With the worker asleep, spinning idle, or spinning for longer than the test: every
    hand-off is taken (the bell or the queue), every chunk runs once, the workers' ``busy``
    is clear between splits, and the pool closes (a spinning worker's bell)."""
    monkeypatch.setattr(join_spin, "IDLE_US", idle_us)
    pool = intra_op.IntraOpPool(2)
    threads = set()
    try:
        for _ in range(50):
            out = np.zeros(64)

            def work(start, stop):
                threads.add(threading.current_thread().name)
                out[start:stop] += 1
            pool.run(work, [(0, 32), (32, 64)])
            assert (out == 1).all()
        assert not pool.all_busy()
    finally:
        pool.close(30)
    assert not any(thread.name.startswith("asyncflow-intra-op_") and thread.is_alive()
                   for thread in threading.enumerate())


def _cpu_seconds(thread):
    with open(f"/proc/self/task/{thread.native_id}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads a thread's CPU time")
def test_a_running_lane_keeps_the_split_worker_from_spinning(spin, monkeypatch):
    monkeypatch.setattr(join_spin, "IDLE_US", 60e6)  # (without the lane: a minute's spin)
    pool = intra_op.IntraOpPool(2)
    try:
        pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # the worker starts
        in_lane, leave = threading.Event(), threading.Event()
        future = pool.submit(lambda: (in_lane.set(), leave.wait(30)))
        assert in_lane.wait(30) and pool._lanes[0] == 1
        worker = next(t for t in threading.enumerate() if t.name == "asyncflow-intra-op_0")
        # The worker, spinning idle, saw the lane and sleeps on its queue: it takes no CPU
        # (a spin would take all of the 0.3 s) ...
        spent = _cpu_seconds(worker)
        leave.wait(0.3)
        assert _cpu_seconds(worker) - spent < 0.1
        # ... and a split's hand-off still reaches it there (the put wakes it).
        ran = []
        pool.run(lambda start, stop: ran.append(threading.current_thread()), [(0, 1), (1, 2)])
        assert len(ran) == 2
        leave.set()
        future.result(30)
        assert pool._lanes[0] == 0 and worker.is_alive()
    finally:
        pool.close(30)


def test_a_caller_interrupted_in_its_spin_waits_for_the_chunk_a_worker_computes(
        spin, monkeypatch):
    """A signal's exception (Ctrl-C) noted while the caller spins on the done word is raised
    as the spin returns: it goes up only once the worker's chunk ended, as from the lock's
    wait (``_ChunkQueue.finish``). Here the spin ends on its word, stored by the test while
    the chunk still computes, as the bound passing would end it. (The interrupt used to
    leave ``finish`` at once, the worker still writing into the kernel's outputs.)"""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "pthread_kill"):
        pytest.skip("signals reach the main thread only")
    monkeypatch.setattr(join_spin, "SPIN_US", 60e6)  # (the test ends the spin itself)

    class Interrupt(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupt()
    main = threading.main_thread().ident
    started, returned, finished = threading.Event(), threading.Event(), []

    def in_frame(names):
        frame = sys._current_frames().get(main)
        return frame is not None and frame.f_code.co_name in names

    def chunk(start, stop):
        if threading.get_ident() == main:
            assert started.wait(30)  # a worker took the other chunk
            return
        started.set()
        for _ in range(30000):  # (30 s at most) until the caller spins on the word
            if in_frame(("wait",)) and intra_op._current.queue._word is not None:
                break
            returned.wait(0.001)
        signal.pthread_kill(main, signal.SIGUSR1)  # (noted; raised as the spin returns)
        join_spin.done(intra_op._current.queue._word)  # the spin ends, this chunk computes
        for _ in range(30000):  # until the caller waits for this chunk, or left without it
            if returned.is_set() or in_frame(("_wait_out", "_sleeper")):
                break
            returned.wait(0.001)
        finished.append(True)
    pool = intra_op.IntraOpPool(2)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(Interrupt):
            pool.run(chunk, [(0, 1), (1, 2)], waits=True)
        seen = list(finished)
    finally:
        returned.set()
        signal.signal(signal.SIGUSR1, previous)
        pool.close(30)
    assert seen == [True]


def test_a_spin_that_lost_its_cpu_turns_the_spins_off_for_a_while(spin, monkeypatch):
    """A spin that lost its CPU (here every spin: ``GAP_US`` 0) ends at once and turns both
    spins off for ``BACKOFF_S``: the caller sleeps on the split's lock, still waiting for the
    worker's chunk, and the next splits make no done word (``word()`` None) until the back-off
    ends. (Always spinning, the MLP's step was 1.4-1.6x slower beside a CPU hog.)"""
    monkeypatch.setattr(join_spin, "SPIN_US", 60e6)
    monkeypatch.setattr(join_spin, "GAP_US", 0.0)
    now = [1000.0]
    monkeypatch.setattr(join_spin, "_monotonic", lambda: now[0])
    pool = intra_op.IntraOpPool(2)
    before = join_spin.statistics()
    try:
        done, early = _split_with_a_late_worker(pool, 0.2)
        assert not early and sorted(done[:2]) == [0, 1] and done[2:] == ["returned"]
        assert join_spin.quiet() and join_spin.word() is None
        after = join_spin.statistics()
        assert after.lost_cpu > before.lost_cpu and after.caught == before.caught
        pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # (asleep on the lock: counted
        assert join_spin.statistics().timed_out == after.timed_out  # as no spin)
        now[0] += join_spin.BACKOFF_S
        assert not join_spin.quiet() and join_spin.word() is not None
    finally:
        pool.close(30)


_LAZY = """
import numpy as np
from asyncflow.exec import intra_op, join_spin
intra_op.claim_blas()
assert not join_spin._started, "a claim alone started the compile"
pool = intra_op.IntraOpPool(2)
out = np.zeros(64)
def work(start, stop):
    out[start:stop] += 1
pool.run(work, [(0, 32), (32, 64)])
pool.close(30)
assert (out == 1).all() and join_spin._started, "the first split handed over did not compile"
print("ready" if join_spin.ready(120) else "not compiled")
"""


def test_the_loops_are_compiled_by_the_first_split_not_by_a_claim_of_blas(spin):
    """A process that claims BLAS (a CPU device) but never splits a kernel, such as a worker
    serving small steps, spends no thread's CPU on compiling the spin's loops; its first
    split that a worker takes part in starts the compile (and runs on the lock meanwhile)."""
    import subprocess
    done = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "ready"
