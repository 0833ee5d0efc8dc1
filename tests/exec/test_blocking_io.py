"""Kernels that do blocking IO (``register_kernel(..., blocking_io=True)``) always run on a
worker thread, whatever their inputs: a ReadFile of a FIFO nobody writes leaves the event loop
free and ends at the step's ``timeout_in_ms`` (an abandoned read), on the static and the
dynamic executor; small Save/Restore/checkpoint kernels run off the loop's thread too, with
their results unchanged."""
import dataclasses
import errno
import os
import threading
import time

import numpy as np
import outcome
import pytest
import trio

import asyncflow as af
from asyncflow.exec import io_threads
from asyncflow.kernels import registry
from asyncflow.ops import io as io_ops
from fifos import release_fifo

IO_KERNELS = {"ReadFile": True, "WriteFile": False, "Save": False, "Restore": True,
              "MergeCheckpointShards": False, "CommitCheckpoint": False,
              "LatestCheckpoint": True}  # op type: abandoned when its step is cancelled


def test_every_io_kernel_is_marked_and_only_reads_are_abandoned():
    for op_type, abandon in IO_KERNELS.items():
        kernel = registry.get_kernel(op_type, "CPU")
        assert kernel.blocking_io and kernel.offload, op_type
        assert kernel.abandon is abandon, op_type
    with pytest.raises(ValueError, match="'Nope'.*blocking_io"):
        registry.register_kernel("Nope", abandon=True)(lambda ctx: ())


@pytest.fixture
def threads_of(monkeypatch):
    """The thread idents each IO kernel ran on, by op type (a test hook wrapping the kernel),
    and the event loop's thread ident."""
    seen = {}
    for op_type in IO_KERNELS:
        kernel = registry.get_kernel(op_type, "CPU")
        key = (kernel.op_type, kernel.device_kind)

        def spy(ctx, *args, _fn=kernel.fn, _type=op_type):
            seen.setdefault(_type, set()).add(threading.get_ident())
            return _fn(ctx, *args)
        monkeypatch.setitem(registry._KERNELS, key, dataclasses.replace(kernel, fn=spy))
    return seen


@pytest.fixture
def fifo(tmp_path):
    """A FIFO nobody writes. Afterwards, a read still waiting on it (abandoned by its step) is
    let go: a writer opens and closes it, so the read ends at EOF (bounded retries while the
    abandoned thread has not reached its open yet)."""
    path = tmp_path / "never-written"
    os.mkfifo(path)
    yield str(path)
    release_fifo(path)


def _release_after(path, seconds):
    """Safety net only, so that a regression (a read on the loop's thread) fails instead of
    hanging the suite: after ``seconds`` of real time a writer opens the FIFO and closes it."""
    def release():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    timer = threading.Timer(seconds, release)
    timer.daemon = True
    timer.start()
    return timer


async def _ticking_while(run, ticks):
    """``await run()`` while another task ticks every 10 ms (trio time); returns its result
    or raises its error, the ticks counted in ``ticks[0]``."""
    async def tick():
        while True:
            await trio.sleep(0.01)
            ticks[0] += 1
    result = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        try:
            result.append(outcome.Value(await run()))
        except Exception as exc:  # noqa: BLE001 - raised again outside the nursery
            result.append(outcome.Error(exc))
        nursery.cancel_scope.cancel()
    return result[0].unwrap()


def _dynamic_extras():
    """Two kernels known to be large: the plan then takes the core executor, not the static
    form (``exec/plan.py``'s ``known_large``)."""
    a = af.placeholder(af.float32, [512, 512], name="a")
    return [af.matmul(a, a, name="m1"), af.matmul(a, a, name="m2")], a


@pytest.mark.parametrize("path", ["static", "dynamic", "traced"])
async def test_a_read_of_a_fifo_leaves_the_loop_free_and_times_out(autojump_clock, fifo,
                                                                    threads_of, cpu_only, path):
    timer = _release_after(fifo, 30)
    ticks = [0]
    try:
        with af.Graph().as_default():
            read = io_ops.read_file(fifo)
            fetches, feeds = [read], {}
            if path == "dynamic":
                extra, a = _dynamic_extras()
                fetches += extra
                feeds = {a: np.ones((512, 512), np.float32)}
            options = af.RunOptions(timeout_in_ms=500)
            if path == "traced":
                options = af.RunOptions(timeout_in_ms=500, trace_level=af.RunOptions.FULL_TRACE)
            async with af.Session() as sess:
                with pytest.raises(af.errors.DeadlineExceededError, match="500 ms"):
                    await _ticking_while(
                        lambda: sess.run(fetches, feeds, options=options), ticks)
                # The session still serves steps after the abandoned read.
                assert await sess.run(af.constant(2.0) + 1.0) == 3.0
    finally:
        timer.cancel()
    assert ticks[0] >= 40  # 10 ms ticks through the 500 ms the read waited
    assert threading.get_ident() not in threads_of.get("ReadFile", {None})


async def test_a_session_close_does_not_wait_for_a_fifo_read(autojump_clock, fifo, cpu_only):
    timer = _release_after(fifo, 30)
    try:
        with af.Graph().as_default():
            read = io_ops.read_file(fifo)
            sess = af.Session()
            async with trio.open_nursery() as nursery:
                async def run():
                    with pytest.raises(af.errors.CancelledError):
                        await sess.run(read)
                    done.append(True)
                done = []
                nursery.start_soon(run)
                await trio.sleep(1)
                await sess.close()
            assert done == [True]
    finally:
        timer.cancel()


async def test_small_io_kernels_run_off_the_loop_with_unchanged_results(tmp_path, threads_of):
    # (no cpu_only: under a visible GPU, these CPU kernels run beside GPU plans)
    target = str(tmp_path / "file.bin")
    with af.Graph().as_default():
        write = io_ops.write_file(target, af.constant(b"payload"))
        read = io_ops.read_file(target)
        v = af.Variable(np.arange(3, dtype=np.float32), name="v")
        saver = af.train.Saver([v])
        async with af.Session() as sess:
            await sess.run(write)
            assert await sess.run(read) == b"payload"
            await sess.run(v.initializer)
            prefix = await saver.save(sess, str(tmp_path / "ckpt"))
            await sess.run(v.assign(np.zeros(3, np.float32)))
            await saver.restore(sess, prefix)
            np.testing.assert_array_equal(await sess.run(v), np.arange(3, dtype=np.float32))
    loop = threading.get_ident()
    assert {"ReadFile", "WriteFile", "Save", "Restore"} <= set(threads_of)
    for op_type, idents in threads_of.items():
        assert loop not in idents, op_type


def _release_all(path, seconds=5.0):
    """Let every read still waiting on the FIFO ``path`` go (writers open and close it until
    no reader is left for a while, bounded in real time)."""
    deadline, quiet = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and quiet < 20:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            quiet = 0
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            quiet += 1
        time.sleep(0.01)


def _wait_for_no_abandoned_reads(seconds=30.0):
    deadline = time.monotonic() + seconds
    while io_threads.IO_THREADS.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert io_threads.IO_THREADS.abandoned == 0, "an earlier test's abandoned reads never ended"


async def test_many_abandoned_fifo_reads_leave_other_io_and_trio_threads_working(
        autojump_clock, tmp_path, cpu_only):
    # An abandoned read's thread runs until its read returns. With trio's default limiter
    # (40 tokens, held until the thread ends), 40 FIFO reads left every later IO kernel, and
    # trio's own threads (getaddrinfo, trio.Path), waiting forever.
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    regular = tmp_path / "regular.bin"
    regular.write_bytes(b"ok")
    # An earlier test's abandoned reads, let go by its fixture, may not have ended yet: one
    # ending between the count below and the refused read lets that read start, and on the
    # autojump clock it then times out (CI saw it). Wait for them first (bounded, real time).
    _wait_for_no_abandoned_reads()
    timer = _release_after(fifo, 60)
    try:
        with af.Graph().as_default():
            stuck = io_ops.read_file(fifo)
            read = io_ops.read_file(str(regular))
            options = af.RunOptions(timeout_in_ms=100)
            async with af.Session() as sess:
                for _ in range(3 * io_threads.MAX_ABANDONED):  # (bounded; some may time out
                    # before their read started)
                    if io_threads.IO_THREADS.abandoned >= io_threads.MAX_ABANDONED:
                        break
                    with pytest.raises(af.errors.DeadlineExceededError):
                        await sess.run(stuck, options=options)
                assert io_threads.IO_THREADS.abandoned >= io_threads.MAX_ABANDONED
                assert await trio.to_thread.run_sync(lambda: 7) == 7  # trio's own: free
                # Past the bound, a clear error at once rather than a wait that never ends.
                with pytest.raises(af.errors.ResourceExhaustedError,
                                   match="ReadFile.*32 abandoned blocking reads"):
                    await sess.run(read, options=options)
                _release_all(fifo)  # the stuck reads end; IO kernels run again
                for _ in range(500):  # (bounded: real time, while their threads finish)
                    try:
                        assert await sess.run(read) == b"ok"  # (autojump: no timeout)
                        break
                    except af.errors.ResourceExhaustedError:
                        time.sleep(0.01)
                else:
                    raise AssertionError("IO kernels never ran again")
    finally:
        timer.cancel()
        _release_all(fifo)


def test_the_asyncio_path_waits_for_a_cancelled_write(tmp_path):
    # A step run inline on an asyncio loop (aio.Session's loop-free path) offloads through
    # run_in_executor: cancelled, its task ended while the write went on (an abandoned
    # future). A write is never abandoned: the cancelled run ends once the write has.
    import asyncio

    from asyncflow import aio
    fifo = str(tmp_path / "written")
    os.mkfifo(fifo)  # the write's open blocks until a reader comes
    timer = _release_after(fifo, 30)

    def read_all():
        with open(fifo, "rb") as handle:
            return handle.read()

    async def main():
        with af.Graph().as_default():
            write = io_ops.write_file(fifo, af.constant(b"data"))
            async with aio.Session() as sess:
                task = asyncio.ensure_future(sess.run(write))
                for _ in range(50):  # (bounded: until the write's thread is in its open)
                    await asyncio.sleep(0.01)
                task.cancel()
                await asyncio.sleep(0.05)
                assert not task.done()  # still waiting for the write
                got = await asyncio.get_running_loop().run_in_executor(None, read_all)
                with pytest.raises(asyncio.CancelledError):
                    await task
                return got
    try:
        assert asyncio.run(main()) == b"data"
    finally:
        timer.cancel()
