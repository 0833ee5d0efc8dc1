"""The IO threads' hop itself (``exec/io_threads.py``), on a pool of its own: a job handed to an
idle thread by its bell, its result back through the job's bell; a cancelled read dropped
(its thread finishes alone, its bell reused only once it is quiet), a cancelled write waited
for, the backlog past ``MAX_THREADS``, idle threads ended, the pipe form where there is no
eventfd, and a forked child's pool."""
import multiprocessing
import os
import threading
import time

import pytest
import trio
import trio.testing

from asyncflow.exec import io_threads


@pytest.fixture(params=["eventfd", "pipe"] if hasattr(os, "eventfd") else ["pipe"])
def pool(request, monkeypatch):
    """A fresh pool, its bells eventfds or (as where the platform has none) pipes."""
    monkeypatch.setattr(io_threads, "_EVENTFD", request.param == "eventfd")
    pool = io_threads.IoThreads()
    yield pool
    with pool._lock:  # (its idle threads told to end, its spare bells closed: not left to
        idle, pool._idle = pool._idle, []  # the rest of the test run)
        bells, pool._bells = pool._bells, []
    for worker in idle:
        worker.bell.ring()  # (``job`` None: the thread ends)
    for bell in bells:
        bell.close()


def _quiet(pool):
    """Every spare bell of ``pool`` is unrung (a reused one must not wake its next waiter)."""
    for bell in pool._bells:
        with pytest.raises(BlockingIOError):
            os.read(bell.fd, 8)
    return True


class _Gate:
    """A function for a pool's thread that says when it started and waits to be let go."""

    def __init__(self, value=None):
        self.started = threading.Event()
        self.go = threading.Event()
        self.ran = []
        self.value = value

    def __call__(self, tag):
        self.ran.append((tag, threading.get_ident()))
        self.started.set()
        assert self.go.wait(30), "the test never let the gate go"
        return self.value


async def _until(predicate):
    """Yield to the pool's threads until ``predicate()``; bounded as the gates are (30 s),
    not by a count of 1 ms polls (about 3 s, little on a loaded 2-core machine)."""
    deadline = time.monotonic() + 30
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the pool's threads never got there")
        await trio.to_thread.run_sync(threading.Event().wait, 0.001)


async def test_values_and_errors_come_back_from_one_reused_thread(pool):
    idents = set()
    for i in range(20):
        assert await pool.run(None, lambda i=i: (i, idents.add(threading.get_ident()))) == \
            (i, None)
    with pytest.raises(ZeroDivisionError):
        await pool.run(None, lambda: 1 / 0)
    assert len(idents) == 1 and threading.get_ident() not in idents  # (one thread, reused)
    assert pool._threads == 1 and len(pool._bells) == 1 and _quiet(pool)


async def test_a_cancelled_read_is_dropped_and_its_thread_finishes_alone(pool):
    gate = _Gate(value="late")
    with trio.move_on_after(30) as scope:
        async with trio.open_nursery() as nursery:
            async def read():
                await pool.run(None, gate, "read", abandon=True)
                raise AssertionError("the read was not abandoned")
            nursery.start_soon(read)
            await trio.to_thread.run_sync(gate.started.wait)
            assert pool.abandoned == 0
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught  # (the read stopped waiting at once)
    assert pool.abandoned == 1 and not pool._bells  # its thread still runs; its bell with it
    gate.go.set()
    await _until(lambda: pool.abandoned == 0 and pool._idle)
    assert len(pool._bells) == 1 and _quiet(pool)  # (given back unrung: the result dropped)
    assert await pool.run(None, lambda: "next") == "next"  # that bell, reused, waits anew
    assert pool._threads == 1 and _quiet(pool)


async def test_a_cancel_after_the_thread_rang_leaves_the_bell_quiet(pool):
    # The read finished (its bell rung) but its task was cancelled before it woke: the drop
    # sees the job done, counts nothing, and clears the bell before it is reused.
    job = io_threads._Job(lambda: 1, (), io_threads._Bell(blocking=False))
    pool._submit(job)
    await _until(lambda: job.done)
    pool._drop(job)
    assert pool.abandoned == 0 and pool._bells == [job.bell] and _quiet(pool)


async def test_a_cancelled_write_is_waited_for(pool):
    gate = _Gate()
    ended = []
    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        async def write():
            try:
                with scope:
                    await pool.run(None, gate, "write")  # (abandon=False: a write)
            finally:
                ended.append(gate.go.is_set())
        nursery.start_soon(write)
        await trio.to_thread.run_sync(gate.started.wait)
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [] and pool.abandoned == 0  # still waiting for the write
        gate.go.set()
    assert ended == [True]  # it ended only once the write had
    assert len(pool._bells) == 1 and _quiet(pool)



async def test_a_cancelled_write_no_thread_took_yet_is_not_run(pool, monkeypatch):
    # Waited for, a write still in the backlog kept its cancelled step until a thread came
    # free (never, with every thread in a write to a FIFO nobody reads); never started, it
    # has nothing half done: it is removed and the cancellation goes on at once.
    monkeypatch.setattr(io_threads, "MAX_THREADS", 1)
    busy, queued = _Gate("busy"), _Gate("queued")
    ended = []
    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run, None, busy, "busy")
        await trio.to_thread.run_sync(busy.started.wait)

        async def write():
            try:
                with scope:
                    await pool.run(None, queued, "queued")  # (a write: abandon=False)
            finally:
                ended.append(True)
        nursery.start_soon(write)
        try:
            await trio.testing.wait_all_tasks_blocked()
            assert len(pool._backlog) == 1
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert ended == [True] and not pool._backlog and pool.abandoned == 0
        finally:
            busy.go.set()
            queued.go.set()  # (only for a failure: nothing runs it)
    await _until(lambda: pool._idle)
    assert queued.ran == [] and len(pool._bells) == 2 and _quiet(pool)

async def test_jobs_past_max_threads_wait_in_the_backlog(pool, monkeypatch):
    monkeypatch.setattr(io_threads, "MAX_THREADS", 1)
    first, second, third = _Gate("a"), _Gate("b"), _Gate("c")
    results = {}
    async with trio.open_nursery() as nursery:
        async def run(name, gate, abandon=False):
            results[name] = await pool.run(None, gate, name, abandon=abandon)
        nursery.start_soon(run, "first", first)
        await trio.to_thread.run_sync(first.started.wait)
        nursery.start_soon(run, "second", second)
        async with trio.open_nursery() as dropped:
            dropped.start_soon(run, "third", third, True)
            await trio.testing.wait_all_tasks_blocked()
            assert len(pool._backlog) == 2 and pool._threads == 1
            dropped.cancel_scope.cancel()  # (a job never started: dropped, not abandoned)
        assert len(pool._backlog) == 1 and pool.abandoned == 0
        second.go.set()  # (it waits for the one thread)
        first.go.set()
    assert results == {"first": "a", "second": "b"} and third.ran == []
    assert first.ran[0][1] == second.ran[0][1]  # the same thread took the backlog's job
    assert pool._threads == 1 and _quiet(pool)


async def test_a_thread_idle_too_long_is_ended_by_the_next_job(pool, monkeypatch):
    gates = [_Gate(i) for i in range(2)]
    async with trio.open_nursery() as nursery:  # two threads at once
        for i, gate in enumerate(gates):
            nursery.start_soon(pool.run, None, gate, i)
            await trio.to_thread.run_sync(gate.started.wait)
        for gate in gates:
            gate.go.set()
    await _until(lambda: len(pool._idle) == 2)
    assert pool._threads == 2
    monkeypatch.setattr(io_threads, "IDLE_S", -1.0)  # (both idle too long now)
    oldest = pool._idle[0]
    ending = [t for t in threading.enumerate() if t.name == "asyncflow-io"]
    assert await pool.run(None, lambda: 3) == 3  # taken by the newest; the oldest ended
    assert pool._threads == 1 and pool._idle != [oldest] and oldest.job is None
    await _until(lambda: sum(t.is_alive() for t in ending) < len(ending))


def _child(connection):
    connection.send(trio.run(io_threads.IO_THREADS.run, None, lambda: os.getpid()))


def test_a_forked_child_starts_its_own_threads():
    # The parent's threads are not in the child: a pool that counted them idle would hand
    # the child's jobs to nobody. (A synchronous test: the child starts its own trio run.)
    assert trio.run(io_threads.IO_THREADS.run, None, lambda: 1) == 1  # (an idle thread here)
    with io_threads.IO_THREADS._lock:  # (the thread rang, then went idle, under the lock)
        assert io_threads.IO_THREADS._idle
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(child,))
    process.start()
    got = parent.poll(30)
    pid = parent.recv() if got else None
    process.join(30)
    assert got and pid == process.pid and process.exitcode == 0


@pytest.mark.parametrize("failing", ["thread", "bell"])
async def test_a_thread_that_cannot_start_gives_back_its_place_and_bells(pool, monkeypatch,
                                                                          failing):
    # Out of threads or file descriptors (EMFILE): the job fails with that error, and the
    # pool must not keep counting a thread that never started (past MAX_THREADS such
    # failures every later job waited in the backlog for ever) nor lose the job's bell.
    monkeypatch.setattr(io_threads, "MAX_THREADS", 1)
    made, closed, refusing = [], [], [True]

    class Bell(io_threads._Bell):
        __slots__ = ()

        def __init__(self, blocking):
            if blocking and failing == "bell" and refusing[0]:
                raise OSError(24, "Too many open files")
            super().__init__(blocking)
            made.append(self)

        def close(self):
            closed.append(self)
            super().close()

    def refuse(thread):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(io_threads, "_Bell", Bell)
    with monkeypatch.context() as patch:
        if failing == "thread":
            patch.setattr(threading.Thread, "start", refuse)
        for _ in range(2):
            with pytest.raises((OSError, RuntimeError)):
                await pool.run(None, lambda: 1)
            assert pool._threads == 0 and not pool._backlog
    refusing[0] = False
    job_bells = [bell for bell in made if bell not in closed]
    assert pool._bells == job_bells[:1] and len(job_bells) == 1 and _quiet(pool)
    with trio.fail_after(30):  # (it once waited in the backlog for a thread never started)
        assert await pool.run(None, lambda: 2) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_closes_the_parents_bells():
    # The parent's threads and spare bells are gone from the child's pool; their descriptors
    # were left open there (inherited: close-on-exec only acts on exec).
    assert trio.run(io_threads.IO_THREADS.run, None, lambda: 1) == 1
    pool = io_threads.IO_THREADS
    with pool._lock:  # (the thread rang, then went idle, under the lock)
        fds = [bell.fd for bell in pool._bells] + [worker.bell.fd for worker in pool._idle]
        assert pool._bells and pool._idle
    pid = os.fork()
    if pid == 0:  # (the child: only os calls, then out at once)
        still = 0
        for fd in fds:
            try:
                os.fstat(fd)
                still += 1
            except OSError:
                pass
        os._exit(min(still, 100))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # (the number still open in the child)
    for fd in fds:
        os.fstat(fd)  # (the parent's own still open)


def test_a_job_dropped_before_its_thread_began_it_is_skipped_and_never_counted_abandoned():
    # A thread took the job but had not begun it when its step gave up: it holds nothing, so
    # it is not counted among the abandoned reads (which refuse new IO kernels past
    # MAX_ABANDONED): counting it made the count dip when its thread then skipped it, and a
    # read the test expected refused started (a fresh-clone CI run failed so).
    pool, ran = io_threads.IoThreads(), []
    job = io_threads._Job(ran.append, (1,), io_threads._Bell(blocking=False))
    worker = io_threads._Worker(job)
    pool._threads = 1
    assert pool._drop(job) is True and pool.abandoned == 0
    thread = threading.Thread(target=pool._serve, args=(worker,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # (bounded, real time: the thread's pass)
    while worker not in pool._idle and time.monotonic() < deadline:
        time.sleep(0.001)
    assert worker in pool._idle and job.done and ran == [] and pool.abandoned == 0
    worker.job = None
    worker.bell.ring()
    thread.join(30)
    assert not thread.is_alive()
