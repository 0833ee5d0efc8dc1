"""The intra-op pool's hand-offs (``exec/intra_op.py``): a split hands its chunks to the
workers with one queue put and waits only for the chunks a worker is computing."""
from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from bounded_threads import bounded

from asyncflow.exec import intra_op


def test_the_caller_waits_for_the_chunk_a_worker_computes():
    pool = intra_op.IntraOpPool(2)
    started, release = threading.Event(), threading.Event()
    done = []

    def work(start, stop):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            assert release.wait(30)
        done.append(start)

    def run():
        pool.run(work, [(0, 1), (1, 2)])
        done.append("returned")
    caller = threading.Thread(target=run)
    try:
        caller.start()
        assert started.wait(30)
        caller.join(0.2)
        assert caller.is_alive() and "returned" not in done  # still waiting for the worker
        release.set()
        caller.join(30)
        assert sorted(d for d in done if d != "returned") == [0, 1] and done[-1] == "returned"
    finally:
        release.set()
        pool.close()


def test_a_hand_off_found_after_the_split_finished_runs_nothing():
    """The worker is busy while a split runs: the caller does every chunk; when the worker
    gets to the stale hand-off it runs no chunk of it, and the next split uses it again."""
    pool = intra_op.IntraOpPool(2)
    busy, release = threading.Event(), threading.Event()
    blocker = pool._workers().submit(lambda: (busy.set(), release.wait(30)))
    assert busy.wait(30)
    ran = []
    lock = threading.Lock()

    def work(start, stop):
        with lock:
            ran.append((start, threading.current_thread().name))
    pool.run(work, [(i, i + 1) for i in range(4)])
    release.set()
    blocker.result(30)
    assert sorted(start for start, _ in ran) == [0, 1, 2, 3]
    assert {name for _, name in ran} == {threading.current_thread().name}
    # The stale hand-off is gone through once the worker is free: a worker takes a chunk of
    # a later split (bounded: a few splits whose chunks wait for the worker).
    for _ in range(50):
        seen, go = threading.Event(), threading.Event()

        def wait_for_worker(start, stop):
            if threading.current_thread() is threading.main_thread():
                go.wait(5)  # the caller's chunk waits for a worker to take the other
            else:
                seen.set()
                go.set()
        pool.run(wait_for_worker, [(0, 1), (1, 2)])
        if seen.is_set():
            break
    assert seen.is_set()
    pool.close()


def test_close_stops_the_workers():
    pool = intra_op.IntraOpPool(3)
    pool.run(lambda start, stop: None, [(0, 1), (1, 2), (2, 3)])
    threads = list(pool._executor._threads)
    assert len(threads) == 2 and all(thread.daemon for thread in threads)
    pool.close()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()


def test_a_worker_error_is_raised_by_the_caller_after_every_chunk():
    pool = intra_op.IntraOpPool(2)
    started = threading.Event()
    finished = []

    def work(start, stop):
        if threading.current_thread() is threading.main_thread():
            assert started.wait(30)  # the worker took the other chunk
            finished.append(start)
        else:
            started.set()
            raise KeyError(f"chunk {start}")
    try:
        with pytest.raises(KeyError, match="chunk 1"):
            pool.run(work, [(0, 1), (1, 2)])
        assert finished == [0]
    finally:
        pool.close()


def _in_a_fresh_process(script):
    """Run ``script`` in a new interpreter (the BLAS hold and threadpoolctl's state are
    process-wide); returns its stdout's last line."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


_BLAS_THREADS = """
import threadpoolctl
def blas_threads():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
"""


def test_blas_is_held_from_threads_other_than_the_one_that_first_held_it():
    """threadpoolctl (3.8) lets one live thread set OpenBLAS's limits; another thread's
    limits did nothing. The claim is made on the main thread; the hold's extension to scipy's
    OpenBLAS comes from the thread a convolution is offloaded to, and a split's hold (where
    nothing claimed) from whichever thread splits first: both must take effect."""
    pytest.importorskip("threadpoolctl")
    pytest.importorskip("scipy.fft")
    out = _in_a_fresh_process(_BLAS_THREADS + """
import threading
import numpy
from asyncflow.exec import intra_op, join_spin
join_spin.SPIN_US = 0  # (no compile thread loading scipy's OpenBLAS while this one counts)
before = blas_threads()
pool = intra_op.IntraOpPool(2)
seen = {}
def chunk(start, stop):
    seen.setdefault("during", blas_threads())
def split_on_a_thread():  # main holds nothing: this thread's split holds BLAS
    pool.run(chunk, [(0, 1), (1, 2)])
pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # main sets and restores a hold first
thread = threading.Thread(target=split_on_a_thread)
thread.start(); thread.join()
after_split = blas_threads()
intra_op.claim_blas()  # on main, as a device made on the event loop's thread
def extend():
    import scipy.fft
    intra_op.hold_blas_loaded_since()
thread = threading.Thread(target=extend)
thread.start(); thread.join()
print(before, seen["during"], after_split, blas_threads())
""")
    before, during, after_split, extended = ast.literal_eval(f"[{out.replace('] [', '], [')}]")
    assert not before or during == [1] * len(before), out
    assert after_split == before, out
    assert extended and extended == [1] * len(extended), out


def test_a_blas_loaded_during_a_split_is_held_and_restored_when_the_last_split_ends():
    """Where no device claimed BLAS (a pool used directly), a chunk that loads scipy.fft and
    extends the hold (as ``nn_conv_fft._load_fft`` does on a worker thread) holds scipy's
    OpenBLAS at one thread beside numpy's until the split ends; then both get their own
    threads back, also when an outer split's hold was still in force on another thread."""
    pytest.importorskip("threadpoolctl")
    pytest.importorskip("scipy.fft")
    out = _in_a_fresh_process(_BLAS_THREADS + """
import threading
from asyncflow.exec import intra_op
before = blas_threads()
outer, inner = intra_op.IntraOpPool(2), intra_op.IntraOpPool(2)
seen = {}
inner_done = threading.Event()
def load(start, stop):
    if start == 0:
        import scipy.fft
        inner.hold_blas_loaded_since()
        seen["loaded"] = blas_threads()
def split_on_a_thread():  # a second split, its hold taken and ended inside the outer one's
    inner.run(load, [(0, 1), (1, 2)])
    seen["inner_ended"] = blas_threads()
    inner_done.set()
def chunk(start, stop):
    if start == 0:
        thread = threading.Thread(target=split_on_a_thread)
        thread.start(); thread.join()
outer.run(chunk, [(0, 1), (1, 2)])
import scipy.fft  # (loaded: its library's own default, as numpy's)
print(before, seen["loaded"], seen["inner_ended"], blas_threads())
""")
    before, loaded, inner_ended, after = ast.literal_eval(
        f"[{out.replace('] [', '], [')}]")
    assert len(before) == 1 and len(loaded) == 2 and loaded == [1, 1], out
    assert inner_ended == [1, 1], out  # the outer split still holds both
    assert after == before * 2, out  # both back to their own threads
    if before == [1]:
        pytest.skip("BLAS runs one thread of its own here: a hold looks like a restore")


def test_a_kernel_run_whole_inside_a_whole_chunk_leaves_it_whole():
    """``run_alone`` nested in a chunk of ``run_alone`` (a pair's kernel that pairs again)
    gives back the flag it found: the rest of the outer chunk still runs whole."""
    pool = intra_op.IntraOpPool(2)
    seen = []

    def outer(start, stop):
        pool.run_alone(lambda a, b: None, [(0, 1)])
        seen.append(getattr(intra_op.whole, "active", False))
    try:
        pool.run_alone(outer, [(0, 1)])
    finally:
        pool.close()
    assert seen == [True]
    assert not getattr(intra_op.whole, "active", False)


def test_a_forked_child_gets_workers_and_a_lane_of_its_own():
    """After ``os.fork()`` (a multiprocessing worker forked from a process that split) the
    parent's worker threads do not exist in the child: its pool starts new ones, and its
    locks are new (a lock another thread held at the fork would never be released)."""
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork here")
    out = _in_a_fresh_process("""
import os, threading
from asyncflow.exec import intra_op
pool = intra_op.shared_pool(2)
pool.run(lambda start, stop: None, [(0, 1), (1, 2)])  # the workers start
pool.submit(lambda: None).result(30)                  # the lane thread starts
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    threads, second = {}, threading.Event()
    met = []
    def chunk(start, stop):
        threads[start] = threading.get_ident()
        if start == 1:
            second.set()
        else:
            met.append(second.wait(10))  # the other chunk starts on another thread
    try:
        pool.run(chunk, [(0, 1), (1, 2)])
        lane = pool.submit(lambda: threading.get_ident()).result(10)
        report = f"{met == [True] and threads[0] != threads[1]} {lane != threading.get_ident()}"
    except BaseException as exc:
        report = f"error {exc!r}"
    os.write(write, report.encode())
    os._exit(0)
os.close(write)
answer = os.read(read, 1000).decode()
os.waitpid(pid, 0)
print(answer)
""")
    assert out == "True True", out


def test_a_worker_mid_hand_off_finishes_before_the_interpreter_exits(tmp_path):
    """The workers are daemon threads: at exit they are stopped and joined (as
    ``concurrent.futures`` joins its workers), not frozen mid-kernel while the interpreter
    tears numpy down under them."""
    done = tmp_path / "done"
    _in_a_fresh_process(f"""
import threading
import numpy as np
from asyncflow.exec import intra_op
pool = intra_op.IntraOpPool(2)
started = threading.Event()
def work():
    started.set()
    a = np.full((200, 200), 0.5)
    for _ in range(40):
        a = a @ a / 200
    open({str(done)!r}, "w").write("done")
pool._workers().submit(work)
assert started.wait(30)
print("exiting")
""")
    assert done.read_text() == "done"


def test_an_interrupted_caller_waits_for_the_chunk_a_worker_computes():
    """A signal's exception (Ctrl-C) raised in the caller while it waits for a worker's chunk
    goes up only after that chunk finished: no worker still writes into a kernel's outputs
    (or a paired apply into its variable) once the caller has given up on them."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "pthread_kill"):
        pytest.skip("signals reach the main thread only")

    class Interrupt(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupt()
    main = threading.main_thread().ident
    started, checked, finished = threading.Event(), threading.Event(), []

    def chunk(start, stop):
        if threading.get_ident() == main:
            assert started.wait(10)  # a worker took the other chunk
            return
        started.set()
        for _ in range(10000):  # (10 s at most) until the caller waits for this chunk
            frame = sys._current_frames().get(main)
            if frame is not None and frame.f_code.co_name == "finish":
                break
            checked.wait(0.001)
        signal.pthread_kill(main, signal.SIGUSR1)
        checked.wait(0.5)  # the caller, if it did not wait, looks now
        finished.append(True)
    pool = intra_op.IntraOpPool(2)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with pytest.raises(Interrupt):
            pool.run(chunk, [(0, 1), (1, 2)])
        seen = list(finished)
    finally:
        checked.set()
        signal.signal(signal.SIGUSR1, previous)
        pool.close()
    assert seen == [True]


def waits_in_finish_or_returned(ident, returned):
    """Until the thread ``ident`` waits in the split's ``finish`` for a worker's chunk, or
    ``returned`` is set (10 s at most)."""
    for _ in range(10000):
        frame = sys._current_frames().get(ident)
        if returned.is_set() or (frame is not None and frame.f_code.co_name in (
                "finish", "_wait_out")):
            return
        returned.wait(0.001)


def test_a_caller_interrupted_between_two_chunks_stops_the_split_and_waits_for_it(
        monkeypatch):
    """KeyboardInterrupt raised in the caller outside any chunk (it took a chunk from the
    queue and has not started it: ``drain`` outside its ``try``) stops the split: the chunk
    is never computed, no worker starts another, and the interrupt goes up only once the
    chunk a worker computes ended. (It used to go up at once, the worker taking the
    remaining chunks after it.)"""
    pool = intra_op.IntraOpPool(2)
    caller, log, lock = [], [], threading.Lock()
    worker_started, caller_took, returned = (threading.Event(), threading.Event(),
                                             threading.Event())
    take = intra_op._ChunkQueue._take

    def taken(queue):
        chunk = take(queue)
        if chunk is not None and threading.get_ident() == caller[0] and not caller_took.is_set():
            assert worker_started.wait(30)
            caller_took.set()
            raise KeyboardInterrupt
        return chunk
    monkeypatch.setattr(intra_op._ChunkQueue, "_take", taken)

    def chunk(start, stop):
        with lock:
            log.append(("start", start))
        if threading.get_ident() != caller[0]:
            worker_started.set()
            assert caller_took.wait(30)
            waits_in_finish_or_returned(caller[0], returned)
        with lock:
            log.append(("end", start))

    def split():
        caller.append(threading.get_ident())
        try:
            pool.run(chunk, [(i, i + 1) for i in range(4)])
        finally:
            with lock:
                log.append("returned")
            returned.set()
    try:
        assert isinstance(bounded(split), KeyboardInterrupt)
    finally:
        pool.close(30)
    assert len(log) == 3 and log[0][0] == "start" and log[1] == ("end", log[0][1]), log
    assert log[2] == "returned", log
