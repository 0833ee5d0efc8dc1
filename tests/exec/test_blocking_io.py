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
from asyncflow.kernels import registry
from asyncflow.ops import io as io_ops

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
    for _ in range(200):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError as exc:  # ENXIO: no reader (yet, or any more)
            if exc.errno != errno.ENXIO:
                raise
        time.sleep(0.01)


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
