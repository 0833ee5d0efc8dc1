"""``asyncflow worker`` exits within a bounded time of SIGTERM or Ctrl-C whatever it is doing
(``cli.STOP_DEADLINE_S``): with its event loop blocked writing a log line to a stderr pipe
nobody reads (the leaked workers of a failed test run ignored SIGTERM so), in the middle of a
long kernel on a thread, or with a client that never reads its answers. The chief's Shutdown
stops it with the same deadline: in a file load that never ends, or with a full stderr pipe.

Every test runs the real CLI in a child process on loopback. The bound is a wall-clock one
because the process is real: the runtime promises an exit ``STOP_DEADLINE_S`` (2 s) after the
signal; ``EXIT_BOUND_S`` is five times that so that a loaded CI machine's scheduling does not
fail the test, and still far below the states' old behaviour (the blocked loop never exited,
the kernel's thread was joined until the kernel ended).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import trio

import asyncflow as af
from asyncflow import cli
from killable_workers import WorkerProcess

TASK = "/job:worker/replica:0/task:0"
EXIT_BOUND_S = 5 * cli.STOP_DEADLINE_S
START_S = 60.0  # start-up and calls on a loaded machine
STATUS = {signal.SIGTERM: 0, signal.SIGINT: 130}
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads the worker's state from /proc")


def _exit_s(proc, sig):
    """Send ``sig``; the seconds until the process exited (killed and failed past the bound)."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the worker ignored {sig.name} for {EXIT_BOUND_S} s")
    return time.monotonic() - sent


def _cpu_s(pid):
    """CPU seconds the process has used (its threads together), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _blocked_writing_stderr(pid):
    """True while a thread of the process is in write(2, ...) (x86-64 and aarch64 numbers)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/syscall") as f:
                fields = f.read().split()
        except FileNotFoundError:
            continue
        except OSError:
            pytest.skip("/proc/PID/task/TID/syscall is not readable here")
        if len(fields) > 1 and fields[0] in ("1", "64") and int(fields[1], 16) == 2:
            return True
    return False


@contextlib.contextmanager
def _worker_with_full_stderr(*argv):
    """A worker (logging at DEBUG) whose stderr is a full pipe nobody reads; yields the process
    and its address once a thread of it is blocked writing a log line there."""
    read_end, write_end = os.pipe()
    proc = None
    try:
        fcntl.fcntl(write_end, fcntl.F_SETFL, os.O_NONBLOCK)
        try:
            for _ in range(1 << 12):  # a pipe holds 64 KiB to 1 MiB
                os.write(write_end, b"x" * 4096)
        except BlockingIOError:
            pass
        fcntl.fcntl(write_end, fcntl.F_SETFL, 0)  # the child shares the flag: blocking again
        proc = subprocess.Popen(
            [sys.executable, "-m", "asyncflow", "worker", "--cluster",
             json.dumps({"worker": ["127.0.0.1:0"]}), "--job", "worker", "--task", "0",
             "--data-dir", tempfile.gettempdir(), "--log-level", "DEBUG", *argv],
            stdout=subprocess.PIPE, stderr=write_end, text=True, env=os.environ.copy())
        os.close(write_end)
        write_end = None
        deadline = time.monotonic() + START_S
        while not _blocked_writing_stderr(proc.pid):  # it logs "listening" at DEBUG
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.02)
        yield proc
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_worker_blocked_on_a_full_stderr_pipe_exits(sig):
    with _worker_with_full_stderr() as proc:
        assert _exit_s(proc, sig) < EXIT_BOUND_S
        assert proc.returncode == STATUS[sig]


def test_a_full_stderr_pipe_does_not_stop_the_worker_serving():
    # The log lines wait on a thread of their own: the event loop goes on serving.
    with _worker_with_full_stderr() as proc:
        ready, _, _ = select.select([proc.stdout], [], [], START_S)
        assert ready, "the worker's loop is blocked: it never said it listens"
        line = proc.stdout.readline()
        assert " listening on " in line, line
        address = line.rsplit(" ", 1)[1].strip()
        graph = af.Graph()
        with graph.as_default(), af.device(TASK):
            x = af.placeholder(af.float32, [None])
            y = af.reduce_sum(x * 2.0)

        async def main():
            with trio.fail_after(START_S):
                async with af.Session(graph=graph, cluster={"worker": [address]}) as sess:
                    return [await sess.run(y, {x: [float(i), 1.0]}) for i in range(20)]
        assert trio.run(main) == [2.0 * i + 2.0 for i in range(20)]
        assert _exit_s(proc, signal.SIGTERM) < EXIT_BOUND_S
        assert proc.returncode == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_worker_in_a_long_kernel_exits(sig):
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    graph = af.Graph()
    # On the CPU device: the kernel runs on a thread, the loop's thread free to take the
    # signal (with a fake GPU visible, a default device would be the fake GPU, whose kernels
    # run on the loop's thread: numpy's matmul there delays every Python signal handler).
    with graph.as_default(), af.device(TASK + "/device:CPU:0"):
        a = af.random_normal([8000, 8000], seed=1)  # a TFLOP on one BLAS thread: many seconds
        y = af.reduce_sum(af.matmul(a, a))

    def kernel_runs():
        before = _cpu_s(worker.pid)
        return lambda: _cpu_s(worker.pid) >= before + 1.5

    assert _signalled_in_a_step(worker, graph, y, None, kernel_runs, sig) < EXIT_BOUND_S
    assert worker.proc.returncode == STATUS[sig]


def _signalled_in_a_step(worker, graph, fetch, feed, watch, sig):
    """Run ``fetch`` (fed ``feed``) on ``worker`` from a session, send ``sig`` by the worker's
    PID once ``watch()``'s predicate (made as the step starts) says its kernel runs (``START_S``
    at most): the seconds the worker took to exit (the step ends with an OpError); the worker
    is killed if it has not."""
    took = []

    async def main():
        async with trio.open_nursery() as nursery:
            async def step():
                with pytest.raises(af.errors.OpError):
                    async with af.Session(graph=graph,
                                          cluster={"worker": [worker.address]}) as sess:
                        await sess.run(fetch, feed)
            nursery.start_soon(step)
            running = watch()
            with trio.fail_after(START_S):
                while not running():
                    await trio.sleep(0.05)
            took.append(await trio.to_thread.run_sync(_exit_s, worker.proc, sig))
    try:
        trio.run(main)
    finally:
        worker.kill()
    return took[0]


def test_a_worker_with_a_client_that_never_reads_exits():
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    host, port = worker.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        request = b"GET /status/status.css HTTP/1.1\r\nHost: worker\r\n\r\n" * 50
        try:
            for _ in range(400):  # until the worker's answers fill both buffers
                client.send(request)
        except BlockingIOError:
            pass
        try:
            assert _exit_s(worker.proc, signal.SIGTERM) < EXIT_BOUND_S
            assert worker.proc.returncode == 0
        finally:
            worker.kill()


def test_a_worker_stopped_by_shutdown_in_a_kernel_that_never_ends_exits(tmp_path, monkeypatch):
    # The chief's Shutdown stops a worker as a signal does, with the same deadline: its step
    # reads a FIFO nobody writes to (a reader loads its file on a thread, which never
    # returns), so the orderly stop, which waits for that thread, can never end by itself.
    token = "stop-deadline-token"
    fifo = tmp_path / "never_written"
    os.mkfifo(fifo)
    monkeypatch.setenv("ASYNCFLOW_TOKEN", token)  # the session's and the chief's
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0, data_dir=tmp_path,
                           env={"ASYNCFLOW_TOKEN": token}).start()
    graph = af.Graph()
    with graph.as_default(), af.device(TASK):
        queue = af.FIFOQueue(1, [af.string])
        enqueue = queue.enqueue([str(fifo)])
        read = af.TextLineReader().read(queue)
    took, writer = [], []

    def opened_by_the_worker():
        # A writer may open the FIFO without waiting once a reader has it open: then the
        # kernel's read waits for data this test never writes (until it closes its end).
        try:
            writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            assert exc.errno == errno.ENXIO, exc
            return False
        return True

    async def main():
        async with trio.open_nursery() as nursery:
            async def step():
                with pytest.raises(af.errors.OpError):
                    async with af.Session(graph=graph,
                                          cluster={"worker": [worker.address]}) as sess:
                        await sess.run(enqueue)
                        await sess.run(read)
            nursery.start_soon(step)
            with trio.fail_after(START_S):
                while not opened_by_the_worker():
                    await trio.sleep(0.05)
            sent = time.monotonic()
            stopped = await af.distribute.shutdown_cluster(
                {"worker": [worker.address]}, token=token, timeout=START_S)
            assert stopped == {TASK: "stopped"}
            try:
                await trio.to_thread.run_sync(worker.proc.wait, EXIT_BOUND_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the worker stopped by Shutdown was alive {EXIT_BOUND_S} s later")
            took.append(time.monotonic() - sent)
    try:
        trio.run(main)
    finally:
        worker.kill()
        for fd in writer:
            os.close(fd)
    assert took[0] < EXIT_BOUND_S
    assert worker.proc.returncode == 0
    assert any("stopped: Shutdown received" in line for line in worker.log_lines)
    assert any("cleanup cut off after" in line for line in worker.log_lines), worker.log_lines


def test_a_worker_stopped_by_shutdown_with_a_full_stderr_pipe_exits(monkeypatch):
    # Its log lines wait for a pipe nobody reads: the orderly stop ends, but the interpreter's
    # exit flushes the logging handlers and waits on the thread that holds them, for ever.
    token = "stop-deadline-token"
    monkeypatch.setenv("ASYNCFLOW_TOKEN", token)
    with _worker_with_full_stderr() as proc:
        ready, _, _ = select.select([proc.stdout], [], [], START_S)
        assert ready, "the worker never said it listens"
        address = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        sent = time.monotonic()
        stopped = trio.run(af.distribute.shutdown_cluster, {"worker": [address]}, None, token,
                           START_S)
        assert stopped == {TASK: "stopped"}
        try:
            proc.wait(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker stopped by Shutdown was alive {EXIT_BOUND_S} s later")
        assert time.monotonic() - sent < EXIT_BOUND_S
        assert proc.returncode == 0
        assert "stopped: Shutdown received" in proc.stdout.read()


_SIGNAL_AFTER_SERVE = """\
import os, signal, sys
from asyncflow import cli
log_off_the_loop = cli._log_off_the_loop

def signalled_at_flush(level):  # the worker's exit, after serve: a signal lands here
    flush = log_off_the_loop(level)
    def flush_after_a_signal():
        os.kill(os.getpid(), {sig})
        flush()
    return flush_after_a_signal
cli._log_off_the_loop = signalled_at_flush
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_after_the_shutdowns_orderly_stop_exits_with_its_status(sig, monkeypatch):
    # Past serve (flushing the logs, the interpreter's exit) trio has put back the handlers it
    # replaced: a signal there killed the worker with the default action (SIGTERM: status
    # -15, not 0; SIGINT: a KeyboardInterrupt traceback) instead of exiting at once with the
    # signal's status, as it does during the stop.
    token = "stop-deadline-token"
    monkeypatch.setenv("ASYNCFLOW_TOKEN", token)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_AFTER_SERVE.format(sig=int(sig)), "worker",
         "--cluster", json.dumps({"worker": ["127.0.0.1:0"]}), "--job", "worker", "--task",
         "0", "--data-dir", tempfile.gettempdir()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_S)
        assert ready, "the worker never said it listens"
        address = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        stopped = trio.run(af.distribute.shutdown_cluster, {"worker": [address]}, None, token,
                           START_S)
        assert stopped == {TASK: "stopped"}
        out, err = proc.communicate(timeout=EXIT_BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == STATUS[sig], (proc.returncode, err)
    assert "Traceback" not in err, err
    assert "stopped: Shutdown received" in out


def _threads_cpu_s(pid):
    """CPU seconds each thread of the process has used, by thread id, from /proc."""
    seconds = {}
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        seconds[thread] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two cores")
def test_a_worker_in_a_split_kernel_exits_on_ctrl_c():
    # SIGINT while the step's one kernel, a matmul split by rows over the CPU device's
    # intra-op pool, runs on two of the worker's threads at once (the split's caller and a
    # pool worker, each seen gaining CPU time in /proc): the split's chunks being computed
    # and waited for keep neither the stop nor the exit (status 130) past the bound.
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    graph = af.Graph()
    with graph.as_default(), af.device(TASK + "/device:CPU:0"):
        shape = af.placeholder(af.int32, [2])  # (fed: nothing to fold, the fill is cheap)
        a = af.fill(shape, 0.5)  # [8000, 8000]: a TFLOP, many seconds on two cores
        y = af.reduce_sum(af.matmul(a, a))

    def split_runs():  # two threads each 0.5 s of CPU further
        before = _threads_cpu_s(worker.pid)
        return lambda: sum(seconds >= before.get(thread, 0.0) + 0.5 for thread, seconds in
                           _threads_cpu_s(worker.pid).items()) >= 2

    took = _signalled_in_a_step(worker, graph, y, {shape: [8000, 8000]}, split_runs,
                                signal.SIGINT)
    assert took < EXIT_BOUND_S
    assert worker.proc.returncode == STATUS[signal.SIGINT]
