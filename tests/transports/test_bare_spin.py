"""The bare same-host path's spin before parking (``transports.http.bare_io.read_once``): a
message that arrives during the spin is taken without parking, the spin honours cancellation,
deadlines, the idle sweep's close and a socket closed meanwhile as the parked wait does, and a
window of 0 parks at once as before; the rule's decisions (a step shared with another call, a
connection's late answers, no core to spare) are fed their facts and checked. Parks and spun
messages are counted (``COUNTS``), never timed."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import types

import pytest
import trio
import trio.testing
from transport_fakes import FakeWorker

from transports.http import bare, bare_io
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.messages import RecvTensors

_machine_busy = bare_io.machine_busy  # (the real one: ``spare_core`` replaces it in each test)


@pytest.fixture
def window():
    """Set the spin's window for one test (microseconds); the environment's afterwards."""
    yield bare_io.set_spin_window
    bare_io.set_spin_window(None)


@pytest.fixture(autouse=True)
def spare_core(monkeypatch):
    """The machine has a core to spare (``machine_busy`` says no) unless a test says
    otherwise: the tests here run beside other test processes, which the real look at the
    machine's run queue would count. Returns a setter: ``spare_core(False)`` for a busy one."""
    state = {"busy": False}
    monkeypatch.setattr(bare_io, "_busy", [0.0, False, 0])  # (no look from another test holds)
    monkeypatch.setattr(bare_io, "machine_busy", lambda now: state["busy"])
    return lambda spare: state.update(busy=not spare)


@pytest.fixture
def still_clock(monkeypatch):
    """The spin's clock standing still (for 10,000 reads, then past any window: bounded), so
    a test's spin lasts until what it tests ends it, however late a loaded machine runs the
    test's other task (with the real clock, a 1 ms window could pass first)."""
    reads = itertools.count()
    monkeypatch.setattr(bare_io, "_clock", lambda: 0.0 if next(reads) < 10_000 else math.inf)


async def _soon(fn, *args):
    """``fn(*args)`` in a task of its own: run at the waiting task's next checkpoint."""
    fn(*args)


def _counts():
    return dict(bare_io.COUNTS)


def _more(before):
    return {key: bare_io.COUNTS[key] - before[key] for key in before}


# (``tries``: a checkpoint every try; every ANSWER_TRIES, the client's answer; every
# NEXT_CALL_TRIES, the worker's wait for the next call)
_TRIES = pytest.mark.parametrize(
    "tries", sorted({1, bare_io.ANSWER_TRIES, bare_io.NEXT_CALL_TRIES}))


@_TRIES
async def test_a_message_sent_during_the_spin_is_taken_without_parking(window, still_clock,
                                                                       tries):
    window(bare_io.MAX_SPIN_US)
    a, b = trio.socket.socketpair()
    with a, b:
        async with trio.open_nursery() as nursery:
            # runs at the spin's first checkpoint: the bytes arrive after the read began
            nursery.start_soon(_soon, os.write, b.fileno(), b"call")
            before = _counts()
            assert await bare_io.read_once(a, True, tries=tries) == b"call"
        assert _more(before) == {"parks": 0, "spun": 1, "skipped": 0, "busy": 0, "shared": 0}


async def test_a_window_of_zero_parks_at_once_as_before(window):
    window(0)
    a, b = trio.socket.socketpair()
    with a, b:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_soon, os.write, b.fileno(), b"call")
            before = _counts()
            assert await bare_io.read_once(a, True) == b"call"
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}
        # and without spin asked for, whatever the window
        window(bare_io.MAX_SPIN_US)
        os.write(b.fileno(), b"next")
        before = _counts()
        assert await bare_io.read_once(a) == b"next"
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


@_TRIES
async def test_a_spinning_wait_is_cancelled_at_its_next_checkpoint(window, still_clock, tries):
    window(bare_io.MAX_SPIN_US)
    a, b = trio.socket.socketpair()
    with a, b:
        before = _counts()
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_soon, scope.cancel)  # runs within the spin
                await bare_io.read_once(a, True, tries=tries)
                pytest.fail("not cancelled")
        assert scope.cancelled_caught
        assert _more(before) == {"parks": 0, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


@_TRIES
async def test_a_deadline_passing_during_the_spin_ends_it(autojump_clock, window, still_clock,
                                                          tries):
    window(bare_io.MAX_SPIN_US)
    a, b = trio.socket.socketpair()
    with a, b:
        start = trio.current_time()
        before = _counts()
        with trio.move_on_after(5.0) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_soon, autojump_clock.jump, 10.0)  # within the spin
                await bare_io.read_once(a, True, tries=tries)
        assert scope.cancelled_caught
        assert trio.current_time() - start == 10.0
        assert _more(before) == {"parks": 0, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


async def test_a_deadline_past_the_spin_ends_the_parked_wait_as_before(autojump_clock, window):
    window(bare_io.MAX_SPIN_US)
    a, b = trio.socket.socketpair()
    with a, b:
        start = trio.current_time()
        before = _counts()
        with trio.move_on_after(5.0) as scope:
            await bare_io.read_once(a, True)
        assert scope.cancelled_caught
        assert trio.current_time() - start == 5.0  # (the clock jumped once it parked)
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


@_TRIES
async def test_the_idle_sweeps_close_or_a_closed_socket_ends_the_spin(window, still_clock,
                                                                      tries):
    window(bare_io.MAX_SPIN_US)
    conn = _conn()
    a, b = trio.socket.socketpair()
    with a, b:
        before = _counts()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_soon, setattr, conn, "closing", True)
            with pytest.raises(trio.ClosedResourceError):
                await bare_io.read_once(a, True, conn, tries=tries)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_soon, a.close)
            with pytest.raises(trio.ClosedResourceError):
                await bare_io.read_once(a, True, tries=tries)
        assert _more(before) == {"parks": 0, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


async def test_a_wait_begun_after_the_sweeps_close_sees_its_eof_as_a_parked_one(
        window, still_clock):
    """The sweep shut a connection whose task had already taken a late call (its bytes woke
    the task in the sweep's batch): once that call is answered, the next wait, spun or not,
    sees what a parked wait sees, the shut reading's EOF (the connection closed as by its
    client, not counted timed out), not the close the sweep told no waiter of."""
    window(bare_io.MAX_SPIN_US)
    conn = _conn()
    a, b = trio.socket.socketpair()
    with a, b:
        conn.closing = True  # (as ``BareService._sweep_idle`` leaves it)
        bare_io.shut_reading(a)
        for spin in (False, True):
            assert await bare_io.read_once(a, spin, conn) == b""


class _TaskSteps(trio.abc.Instrument):
    """Counts one task's scheduler steps (a checkpoint ends one: its return begins the next)."""

    def __init__(self):
        self.task, self.steps = None, 0

    def before_task_step(self, task):
        self.steps += task is self.task


@pytest.mark.parametrize("tries", [1, 2, 16, 100])
async def test_a_spin_checkpoints_before_its_first_try_then_every_tries_tries(
        window, monkeypatch, tries):
    """Tries find nothing until the window has passed, then the wait parks until the answer:
    the waiting task took a scheduler step after each checkpoint (before tries 1, 1 + tries,
    ...; its first step, before the first, is not counted) and one to wake from the park."""
    window(bare_io.MAX_SPIN_US)
    reads = itertools.count()  # (some 47 tries' clocks inside the window, then past)
    monkeypatch.setattr(bare_io, "_clock", lambda: 0.0 if next(reads) < 48 else math.inf)
    yields = itertools.count()  # (every try but the last, which finds the window passed)
    monkeypatch.setattr(bare_io.os, "sched_yield", lambda: next(yields))
    count = _TaskSteps()
    a, b = trio.socket.socketpair()
    got = []

    async def wait():
        count.task = trio.lowlevel.current_task()
        got.append(await bare_io.read_once(a, True, tries=tries))

    with a, b:
        before = _counts()
        trio.lowlevel.add_instrument(count)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()  # (parked: its spin is over)
                os.write(b.fileno(), b"answer")
        finally:
            trio.lowlevel.remove_instrument(count)
    assert got == [b"answer"]
    spun = next(yields) + 1
    assert spun > 40
    assert count.steps == -(-spun // tries) + 1
    assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


class _CancelAtStep(trio.abc.Instrument):
    """Cancels ``scope`` when ``task``'s ``step``-th scheduler step ends (a checkpoint of its)."""

    def __init__(self, scope, step):
        self.scope, self.step, self.task, self.steps = scope, step, None, 0

    def after_task_step(self, task):
        if task is self.task:
            self.steps += 1
            if self.steps == self.step:
                self.scope.cancel()


@pytest.mark.parametrize(
    "tries", sorted({1, 2, bare_io.ANSWER_TRIES, bare_io.NEXT_CALL_TRIES, 100}))
async def test_a_cancel_made_during_the_spin_is_seen_within_tries_tries(window, still_clock,
                                                                       monkeypatch, tries):
    """A cancel made at the spin's second checkpoint (after ``tries`` tries) ends it at that
    checkpoint's return: ``tries`` tries more at most, never a park."""
    window(bare_io.MAX_SPIN_US)
    yields = itertools.count()  # (every try finds nothing: the still clock keeps the window)
    monkeypatch.setattr(bare_io.os, "sched_yield", lambda: next(yields))
    a, b = trio.socket.socketpair()
    with a, b, trio.CancelScope() as scope:
        # steps of the waiting task: its first ends at the checkpoint before try 1, its
        # second at the one before try 1 + tries, its third would end before 1 + 2 * tries
        cancel = _CancelAtStep(scope, 3)
        cancel.task = trio.lowlevel.current_task()
        before = _counts()
        trio.lowlevel.add_instrument(cancel)
        try:
            await trio.lowlevel.checkpoint()  # (this task's step count starts here)
            cancel.steps = 0
            await bare_io.read_once(a, True, tries=tries)
            pytest.fail("not cancelled")
        finally:
            trio.lowlevel.remove_instrument(cancel)
    assert scope.cancelled_caught
    assert next(yields) == 2 * tries  # the tries between the first and the third checkpoints
    assert _more(before) == {"parks": 0, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


async def test_the_clients_answer_spins_with_answer_tries_and_the_servers_wait_with_next_call_tries(
        window, monkeypatch):
    window(bare_io.MAX_SPIN_US)
    seen = []
    read = bare.__dict__["_read"]

    async def spy(sock, spin=False, conn=None, own=0, tries=1):
        seen.append((type(conn).__name__, spin, tries))
        return await read(sock, spin, conn, own, tries)

    monkeypatch.setattr(bare, "_read", spy)
    worker = FakeWorker()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address, bare=True) as channel:
            with trio.fail_after(20):
                for _ in range(3):
                    assert (await channel.health()).incarnation == 7
    assert ("BareConnection", True, bare_io.ANSWER_TRIES) in seen
    assert ("ServerConnection", True, bare_io.NEXT_CALL_TRIES) in seen
    assert all(tries == (bare_io.ANSWER_TRIES if kind == "BareConnection"
                         else bare_io.NEXT_CALL_TRIES) for kind, spin, tries in seen if spin)


async def test_a_server_stopping_while_its_wait_for_the_next_call_spins_ends_the_wait(
        window, still_clock, monkeypatch):
    """The server's wait for a connection's next call, spinning (the still clock: it would
    spin on), stopped after its spin's first tries (so at a later checkpoint than its first),
    ends at its next checkpoint: cancelled, never parked, within two checkpoints' tries."""
    window(bare_io.MAX_SPIN_US)
    waits = []
    tried = [0]  # the spins' tries that found nothing, all waits'
    monkeypatch.setattr(bare_io.os, "sched_yield", lambda: tried.__setitem__(0, tried[0] + 1))
    read = bare.__dict__["_read"]

    async def spy(sock, spin=False, conn=None, own=0, tries=1):
        if type(conn).__name__ != "ServerConnection" or not spin:
            return await read(sock, spin, conn, own, tries)
        parks = bare_io.COUNTS["parks"]
        waits.append([tries, "waiting", None, tried[0]])
        try:
            data = await read(sock, spin, conn, own, tries)
        except BaseException as exc:
            waits[-1][1:] = [type(exc).__name__, bare_io.COUNTS["parks"] - parks,
                             tried[0] - waits[-1][3]]
            raise
        waits[-1][1:] = ["data", bare_io.COUNTS["parks"] - parks, tried[0] - waits[-1][3]]
        return data

    monkeypatch.setattr(bare, "_read", spy)
    # (client and server in one process share CALLS, so each would see the other's call:
    # here each connection is taken to be alone, as in two processes)
    monkeypatch.setattr(bare_io.Calls, "alone", lambda self, conn, own: True)
    with trio.fail_after(20):
        async with contextlib.AsyncExitStack() as outlives_the_server:
            async with open_http_server(FakeWorker()) as server:
                channel = await outlives_the_server.enter_async_context(
                    TrioHttpChannel(server.address, bare=True))
                assert (await channel.health()).incarnation == 7
                # answered, and the next wait's spin past its first checkpoint and try
                while not waits or waits[-1][1] != "waiting" or tried[0] == waits[-1][3]:
                    await trio.lowlevel.checkpoint()
            # (the server stopped while its wait spun; the channel is closed after it)
    tries, how, parks, spun = waits[-1]
    assert (tries, how, parks) == (bare_io.NEXT_CALL_TRIES, "Cancelled", 0)
    assert tries <= spun <= 2 * tries


async def test_calls_over_the_bare_path_are_answered_with_the_spin_on_and_off(window):
    for us in (0, bare_io.MAX_SPIN_US):
        window(us)
        worker = FakeWorker()
        async with open_http_server(worker) as server:
            async with TrioHttpChannel(server.address, bare=True) as channel:
                before = _counts()
                with trio.fail_after(20):
                    for _ in range(5):
                        assert (await channel.health()).incarnation == 7
                assert channel.bare_calls == 5
                waits = _more(before)
                if us == 0:  # every wait parked: the client's five, the server's
                    assert waits["spun"] == 0 and waits["parks"] >= 5
                else:  # (in one process: the server runs in the client's spin and back)
                    assert waits["spun"] + waits["parks"] >= 5


def test_the_window_comes_from_the_environment_and_bad_values_are_refused(monkeypatch,
                                                                         window):
    assert bare_io.SPIN_ENV == "ASYNCFLOW_BARE_SPIN_US"  # (the name the docs give)
    for text, us in (("", bare_io.DEFAULT_SPIN_US), ("0", 0.0), (" 150 ", 150.0)):
        monkeypatch.setenv(bare_io.SPIN_ENV, text)
        window(None)
        assert bare_io.spin_window_s() == us / 1e6
    for text in ("fast", "-1", "1e9", "nan"):
        monkeypatch.setenv(bare_io.SPIN_ENV, text)
        window(None)
        with pytest.raises(ValueError, match=bare_io.SPIN_ENV):
            bare_io.spin_window_s()
    with pytest.raises(ValueError, match="spin window"):
        window(-5)


# The adaptive rule: each wait's duration (its start to its data) folds into the connection's
# ``waited``; a wait spins only while that estimate is within twice the window. The clock is a
# fake that the answering task moves on, so every wait lasts exactly what the test says.


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(bare_io, "_clock", fake)
    return fake


def _answer_after(clock, seconds, sock):
    clock.now += seconds  # the wait lasted this long, then the answer came
    os.write(sock.fileno(), b"x")


async def _waits(clock, conn, seconds_each):
    """One wait per duration on a socketpair; whether each spun (took its answer without
    parking) and the waits that parked at once by the rule."""
    spun, before = [], _counts()
    a, b = trio.socket.socketpair()
    with a, b:
        for seconds in seconds_each:
            was = bare_io.COUNTS["spun"]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_soon, _answer_after, clock, seconds, b)
                assert await bare_io.read_once(a, True, conn) == b"x"
            spun.append(bare_io.COUNTS["spun"] > was)
    return spun, _more(before)["skipped"]


def _conn(warm=bare_io.WARM_WAITS):
    """A connection past its warm-up (its waits learned), alone in this process: no call began
    since its last one (``bare_io.CALLS``, which the tests' calls leave with none in flight)."""
    return types.SimpleNamespace(closing=False, waited=0.0, warm=warm,
                                 began=bare_io.CALLS.began)


async def test_a_connection_whose_answers_come_within_the_window_spins(window, clock):
    window(200)
    conn = _conn()
    spun, skipped = await _waits(clock, conn, [50e-6] * 6)
    assert spun == [True] * 6 and skipped == 0
    assert 0 < conn.waited <= 50e-6


async def test_after_a_long_wait_the_next_parks_without_spinning(window, clock):
    window(200)
    conn = _conn()
    spun, skipped = await _waits(clock, conn, [20e-6, 1.5e-3, 20e-6])
    assert spun == [True, True, False] and skipped == 1  # (the second's spin was in vain)
    # a long wait counts at most 8 windows: a long idle does not keep the spin off for long
    assert conn.waited <= 4 * 200e-6


async def test_the_estimate_recovers_after_a_slow_phase(window, clock):
    window(200)
    conn = _conn()
    spun, skipped = await _waits(clock, conn, [2e-3] * 5)  # e.g. a PS MLP step's calls
    # the first wait spins (a new connection's estimate is 0: here the fake answer came within
    # it, as it was written at once) and learns 2 ms: the others park at once
    assert spun == [True] + [False] * 4 and skipped == 4
    spun, skipped = await _waits(clock, conn, [30e-6] * 6)  # a trivial-step loop again:
    # parked waits that got their answers within the window bring the spin back
    assert spun == [False, False, False, True, True, True] and skipped == 3


async def test_answers_alternating_slow_and_fast_park(window, clock):
    window(200)
    conn = _conn()
    spun, skipped = await _waits(clock, conn, [2e-3, 50e-6] * 5)
    assert spun == [True] + [False] * 9 and skipped == 9  # only the first wait spun


class _Ticking:
    """A clock that moves 1 us at every reading: a spin's length is its readings."""

    TICK = 1e-6

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += self.TICK
        return self.now


async def _parked_after(conn, clock):
    """Seconds of the ticking clock from one wait's start to its park (the answer is written
    only once the wait has parked: every task blocked), and the wait's counts."""
    a, b = trio.socket.socketpair()
    parked = []

    async def answer_once_parked():
        await trio.testing.wait_all_tasks_blocked()  # (a spinning wait is never blocked)
        parked.append(clock.now)
        os.write(b.fileno(), b"x")

    with a, b:
        before, start = _counts(), clock.now
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_once_parked)
            assert await bare_io.read_once(a, True, conn) == b"x"
    return parked[0] - start, _more(before)


@pytest.mark.parametrize("waited", [0.0, 50e-6, 2 * 200e-6])  # new, quick, at the rule's edge
async def test_a_spin_never_runs_past_its_window(window, monkeypatch, waited):
    window(200)
    clock = _Ticking()
    monkeypatch.setattr(bare_io, "_clock", clock)
    conn = _conn()
    conn.waited = waited
    spent, counts = await _parked_after(conn, clock)  # no answer during the spin
    # it spun to its window and parked at once after: a few readings' ticks past it
    assert 200e-6 <= spent <= 200e-6 + 4 * clock.TICK
    assert counts["spun"] == 0 and counts["parks"] == 1 and counts["skipped"] == 0


async def test_a_connection_whose_answers_come_slowly_parks_without_spinning(window,
                                                                             monkeypatch):
    window(200)
    clock = _Ticking()
    monkeypatch.setattr(bare_io, "_clock", clock)
    conn = _conn()
    conn.waited = 2 * 200e-6 + 1e-6  # its answers' waits: just over twice the window
    spent, counts = await _parked_after(conn, clock)
    assert spent <= 2 * clock.TICK and counts["skipped"] == 1 and counts["spun"] == 0


async def test_a_window_of_zero_parks_at_once_and_learns_nothing(window, clock):
    window(0)
    conn = _conn()
    before = _counts()
    spun, _ = await _waits(clock, conn, [10e-6, 5e-3])
    assert spun == [False, False] and conn.waited == 0.0
    assert _more(before) == {"parks": 2, "spun": 0, "skipped": 0, "busy": 0, "shared": 0}


# No core to spare: a spin would take the core that the peer or a third process needs.


async def test_a_machine_with_no_core_to_spare_parks_at_once(window, still_clock, spare_core):
    window(bare_io.MAX_SPIN_US)
    spare_core(False)
    a, b = trio.socket.socketpair()
    with a, b:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_soon, os.write, b.fileno(), b"call")
            before = _counts()
            assert await bare_io.read_once(a, True, _conn()) == b"call"
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 1, "shared": 0}


def _look(monkeypatch, cpus, runnable, looks=None):
    """The verdict of ``looks`` looks in a row (default ``BUSY_LOOKS``) at one reading."""
    monkeypatch.setattr(bare_io, "_cpus", lambda: cpus)
    monkeypatch.setattr(bare_io, "_runnable", lambda: runnable)
    bare_io._busy[:] = [0.0, False, 0]
    return [_machine_busy(1.0) for _ in range(looks or bare_io.BUSY_LOOKS)][-1]


def test_no_core_to_spare_one_cpu_or_more_runnable_threads_than_cpus(monkeypatch, spare_core):
    assert not _look(monkeypatch, 2, 2)  # this process and its peer: one core each
    assert _look(monkeypatch, 2, 3)  # a third runnable thread: a spin would take its core
    assert not _look(monkeypatch, 4, 3)
    assert _look(monkeypatch, 1, 1, looks=1)  # one CPU: the peer waits for the spinner's slice
    assert _look(monkeypatch, 1, None, looks=1)
    assert not _look(monkeypatch, 2, None)  # no /proc/loadavg: the CPU count decides
    # a free look holds for LOAD_EVERY_S from when it was taken
    assert bare_io._busy == [1.0 + bare_io.LOAD_EVERY_S, False, 0]


def _looks_over_time(monkeypatch, clock, readings, times):
    """``_no_core()``'s verdicts at ``times`` (the real ``machine_busy``, two CPUs), the
    machine's runnable threads read from ``readings`` in turn; and the reads taken."""
    reads = []

    def runnable():
        reads.append(clock.now)
        return readings[len(reads) - 1]

    monkeypatch.setattr(bare_io, "machine_busy", _machine_busy)
    monkeypatch.setattr(bare_io, "_cpus", lambda: 2)
    monkeypatch.setattr(bare_io, "_runnable", runnable)
    verdicts = []
    for at in times:
        clock.now = at
        verdicts.append(bare_io._no_core())
    return verdicts, reads


def test_a_passing_third_thread_seen_once_keeps_the_spin(monkeypatch, clock):
    # a daemon's wake seen at one look: the spin goes on, the next look comes RECHECK_S later
    # (not LOAD_EVERY_S) and sees it gone; the free verdict then holds LOAD_EVERY_S again
    recheck, every = bare_io.RECHECK_S, bare_io.LOAD_EVERY_S
    times = [0.0, recheck / 2, recheck, recheck + every / 2, recheck + every]
    verdicts, reads = _looks_over_time(monkeypatch, clock, [3, 2, 2], times)
    assert verdicts == [False] * 5
    assert reads == [0.0, recheck, recheck + every]


def test_a_third_thread_seen_at_two_looks_in_a_row_parks_until_a_look_sees_it_gone(
        monkeypatch, clock):
    recheck, every = bare_io.RECHECK_S, bare_io.LOAD_EVERY_S
    assert bare_io.BUSY_LOOKS == 2 and recheck < every
    # a hog: seen, seen again RECHECK_S later (busy, held LOAD_EVERY_S), seen at every look
    # after (busy at once: no second look needed), until a look sees a core free
    # (and once free, a third thread seen again needs its second look again)
    times = [0.0, recheck, recheck + every / 2, recheck + every, recheck + 2 * every,
             recheck + 3 * every]
    verdicts, reads = _looks_over_time(monkeypatch, clock, [3, 4, 3, 2, 3], times)
    assert verdicts == [False, True, True, True, False, False]
    assert reads == [0.0, recheck, recheck + every, recheck + 2 * every, recheck + 3 * every]
    assert bare_io._busy == [recheck + 3 * every + recheck, False, 1]


def test_looks_over_the_cpus_must_be_in_a_row(monkeypatch, clock):
    # over, free, over: never two in a row, never busy (each over look rechecked soon)
    recheck, every = bare_io.RECHECK_S, bare_io.LOAD_EVERY_S
    times = [0.0, recheck, recheck + every, 2 * recheck + every]
    verdicts, reads = _looks_over_time(monkeypatch, clock, [3, 2, 3, 2], times)
    assert verdicts == [False] * 4 and reads == times


def test_looks_far_apart_are_not_in_a_row(monkeypatch, clock):
    # a third thread seen once, then again long after (the process idle between: no look
    # taken): a first sighting again, not a second in a row; and a busy verdict seen again
    # long after it ran out needs its second look too
    recheck, every = bare_io.RECHECK_S, bare_io.LOAD_EVERY_S
    times = [0.0, 1.0, 1.0 + recheck, 2.0 + recheck]
    verdicts, reads = _looks_over_time(monkeypatch, clock, [3, 3, 3, 3], times)
    assert verdicts == [False, False, True, False] and reads == times
    assert bare_io._busy == [times[-1] + recheck, False, 1]
    # the bound: a look taken within LOAD_EVERY_S of when the verdict before ran out is in a row
    verdicts, _ = _looks_over_time(monkeypatch, clock, [3, 3], [3.0, 3.0 + recheck + every])
    assert verdicts == [False, True]


def test_one_busy_look_is_the_rule_before_where_busy_looks_is_one(monkeypatch, clock):
    monkeypatch.setattr(bare_io, "BUSY_LOOKS", 1)
    every = bare_io.LOAD_EVERY_S
    verdicts, reads = _looks_over_time(monkeypatch, clock, [3, 2], [0.0, every / 2, every])
    assert verdicts == [True, True, False] and reads == [0.0, every]


def test_the_machine_look_reads_this_machines_run_queue(monkeypatch):
    monkeypatch.setattr(bare_io, "_loadavg", [])  # (opened afresh, and closed below)
    runnable = bare_io._runnable()
    if bare_io._loadavg:
        os.close(bare_io._loadavg[0])
    if os.path.exists("/proc/loadavg"):  # (Linux: read, at least the thread that reads it)
        assert runnable is not None and runnable >= 1
    else:
        assert runnable is None
    assert bare_io._cpus() >= 1


def _runnable_of(monkeypatch, tmp_path, text):
    path = tmp_path / "loadavg"
    path.write_bytes(text)
    fd = os.open(path, os.O_RDONLY)
    monkeypatch.setattr(bare_io, "_loadavg", [fd])
    try:
        return bare_io._runnable(), bare_io._runnable()  # (twice: read at offset 0 each time)
    finally:
        os.close(fd)


def test_the_run_queue_is_loadavgs_fourth_fields_numerator(monkeypatch, tmp_path):
    assert _runnable_of(monkeypatch, tmp_path, b"1.58 1.76 2.69 4/155 18821\n") == (4, 4)
    assert _runnable_of(monkeypatch, tmp_path, b"0.00 0.01 0.05 17/1200 99\n") == (17, 17)
    # a line not of that form (a sandbox's own /proc) reads as unknown, never raises
    assert _runnable_of(monkeypatch, tmp_path, b"") == (None, None)
    assert _runnable_of(monkeypatch, tmp_path, b"0.00 0.01 0.05 x/1 9\n") == (None, None)


def test_without_proc_the_look_says_unknown_and_the_cpu_count_decides(monkeypatch):
    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/loadavg")

    monkeypatch.setattr(bare_io, "_loadavg", [])
    monkeypatch.setattr(bare_io.os, "open", no_proc)
    assert bare_io._runnable() is None and bare_io._loadavg == []
    monkeypatch.setattr(bare_io, "_cpus", lambda: 2)
    assert not _machine_busy(1.0)
    monkeypatch.setattr(bare_io, "_cpus", lambda: 1)
    assert _machine_busy(1.0)


async def test_the_look_at_the_machine_is_taken_once_per_period(window, monkeypatch, clock):
    window(200)
    looks = []

    def look(now):
        looks.append(now)
        bare_io._busy[:] = [now + bare_io.LOAD_EVERY_S, False, 0]
        return False

    monkeypatch.setattr(bare_io, "machine_busy", look)
    conn = _conn()
    spun, _ = await _waits(clock, conn, [20e-6] * 4)
    assert spun == [True] * 4 and looks == [0.0]  # (all four started within the period)
    conn.waited = 0.0
    clock.now += bare_io.LOAD_EVERY_S
    await _waits(clock, conn, [20e-6])
    assert len(looks) == 2


# The step's shape (``bare_io.Calls``): a wait spins only while its connection is the process's
# only one at work. Fed the calls' beginnings and ends as each process of a step sees them.


def _conns(n):
    return [types.SimpleNamespace(began=-1) for _ in range(n)]


def test_a_trivial_step_is_alone_on_both_sides():
    client, worker = bare_io.Calls(), bare_io.Calls()
    (to_worker,), (from_client,) = _conns(1), _conns(1)
    for _ in range(3):  # step after step
        client.begin(to_worker)  # RunGraph sent: the client awaits its answer
        assert client.alone(to_worker, own=1)
        worker.begin(from_client)  # the worker reads it, answers
        worker.end()
        assert worker.alone(from_client, own=0)  # and awaits the next call: spins
        client.end()
    assert client.flying == worker.flying == 0


def test_a_parameter_server_step_is_shared_in_every_process():
    client, worker, ps = bare_io.Calls(), bare_io.Calls(), bare_io.Calls()
    to_worker, to_ps = _conns(2)
    from_client, worker_to_ps = _conns(2)
    ps_from_client, ps_from_worker = _conns(2)
    # the client's two RunGraphs in flight at once: neither answer's wait spins
    client.begin(to_worker)
    assert client.alone(to_worker, own=1)  # (until the second begins: a spin ends then)
    client.begin(to_ps)
    assert not client.alone(to_worker, own=1) and not client.alone(to_ps, own=1)
    client.end()  # either answer in first: the other's wait still parks (its call overlapped)
    assert not client.alone(to_worker, own=1) and not client.alone(to_ps, own=1)
    client.flying += 1  # (both in flight again, for the rest of the step)
    # the worker pulls the parameters from the ps while it serves its RunGraph
    worker.begin(from_client)
    worker.begin(worker_to_ps)
    assert not worker.alone(worker_to_ps, own=1)
    ps.begin(ps_from_client)
    ps.begin(ps_from_worker)
    ps.end()  # the pull answered: the ps's wait for the worker's next call is shared
    assert not ps.alone(ps_from_worker, own=0)
    worker.end()
    worker.end()  # the worker answered its RunGraph; a pull began during that call
    assert not worker.alone(from_client, own=0)
    ps.end()
    assert not ps.alone(ps_from_client, own=0)
    client.end()
    client.end()
    assert client.flying == worker.flying == ps.flying == 0
    # the next step alone (a trivial step on the same cluster): alone again
    client.begin(to_worker)
    assert client.alone(to_worker, own=1)
    worker.begin(from_client)
    worker.end()
    assert worker.alone(from_client, own=0)


def test_a_call_still_in_flight_from_before_makes_a_wait_shared():
    calls = bare_io.Calls()
    slow, fast = _conns(2)
    calls.begin(slow)  # e.g. a long pull, begun first
    calls.begin(fast)
    calls.end()  # fast's call answered, before the pull
    assert not calls.alone(fast, own=0)  # the pull is still in flight
    calls.end()  # the pull ends: none in flight, none began since fast's; but fast's call
    assert not calls.alone(fast, own=0)  # began beside the pull: a shared step's, it parks
    calls.begin(fast)  # fast's next call, alone
    calls.end()
    assert calls.alone(fast, own=0)


def test_the_rules_decision_from_its_facts():
    never = lambda: pytest.fail("no look at the machine where the rule already parked")  # noqa: E731
    window = 200e-6
    assert bare_io.decide(0.0, True, 0.0, never) == "off"
    assert bare_io.decide(window, False, 0.0, never) == "shared"
    assert bare_io.decide(window, False, 1.0, never) == "shared"  # (shared is said first)
    assert bare_io.decide(window, True, 2 * window + 1e-9, never) == "skipped"
    assert bare_io.decide(window, True, 2 * window, lambda: True) == "busy"
    assert bare_io.decide(window, True, 0.0, lambda: False) == "spin"


async def test_a_shared_steps_wait_parks_at_once_and_is_not_learned(window, still_clock):
    window(bare_io.MAX_SPIN_US)
    conn = _conn()
    conn.began -= 1  # another call began since this connection's
    a, b = trio.socket.socketpair()
    with a, b:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_soon, os.write, b.fileno(), b"call")
            before = _counts()
            assert await bare_io.read_once(a, True, conn) == b"call"
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 1}
    assert conn.waited == 0.0


async def _begin_then_answer(other, sock):
    """Another call begins in this process (at the spin's first checkpoint); once every task
    waits (the spin parked), the answer comes."""
    bare_io.CALLS.begin(other)
    try:
        await trio.testing.wait_all_tasks_blocked()
    finally:
        bare_io.CALLS.end()
    os.write(sock.fileno(), b"answer")


async def test_a_call_beginning_during_the_spin_ends_it(window, still_clock):
    window(bare_io.MAX_SPIN_US)
    conn = _conn()
    a, b = trio.socket.socketpair()
    with a, b:
        before = _counts()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_begin_then_answer, types.SimpleNamespace(began=-1), b)
            assert await bare_io.read_once(a, True, conn) == b"answer"
        assert _more(before) == {"parks": 1, "spun": 0, "skipped": 0, "busy": 0, "shared": 1}


async def _another_call_then_answer(clock, seconds, sock):
    """Another call of this process begins and ends while the wait is parked; the answer
    comes ``seconds`` after the wait began."""
    await trio.testing.wait_all_tasks_blocked()  # (the wait parked)
    bare_io.CALLS.begin(types.SimpleNamespace(began=-1))
    bare_io.CALLS.end()
    _answer_after(clock, seconds, sock)


@pytest.mark.parametrize("late", [True, False])  # parked by the connection's rule, or for want
async def test_a_parked_wait_that_another_call_shared_is_not_learned(window, clock, spare_core,
                                                                    late):  # of a core
    window(200)
    conn = _conn()
    conn.waited = 3 * 200e-6 if late else 0.0
    spare_core(late)
    a, b = trio.socket.socketpair()
    with a, b:
        before = _counts()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_another_call_then_answer, clock, 5e-3, b)
            assert await bare_io.read_once(a, True, conn) == b"x"
    assert _more(before)["skipped" if late else "busy"] == 1
    assert conn.waited == (3 * 200e-6 if late else 0.0)  # (a shared step's wait says nothing)


def test_a_connections_warm_up_is_not_learned():
    window = 200e-6
    conn = _conn(warm=0)
    for _ in range(bare_io.WARM_WAITS):  # a fresh client's first calls: registered, prepared
        bare_io.learn_wait(conn, 0.5, window)
    assert conn.waited == 0.0 and conn.warm == bare_io.WARM_WAITS
    bare_io.learn_wait(conn, 0.5, window)  # then its steps are
    assert conn.waited == 4 * window


def test_the_cgroups_quota_in_whole_cpus():
    assert bare_io.quota_cpus("max", "100000") is None  # no quota
    assert bare_io.quota_cpus("-1", "100000") is None  # (cgroup v1's none)
    assert bare_io.quota_cpus("50000", "100000") == 0
    assert bare_io.quota_cpus("150000", "100000") == 1  # 1.5 CPUs: a spinning pair throttled
    assert bare_io.quota_cpus("200000", "100000") == 2
    assert bare_io.quota_cpus("100000", "0") is None and bare_io.quota_cpus("", "x") is None


def test_a_quota_under_two_cpus_is_one_cpu_never_spun_on(monkeypatch):
    monkeypatch.setattr(bare_io, "_runnable", lambda: 1)
    monkeypatch.setattr(bare_io, "_quota", [1])
    assert bare_io._cpus() == 1 and _machine_busy(1.0)
    monkeypatch.setattr(bare_io, "_quota", [None])
    if len(os.sched_getaffinity(0)) > 1:
        assert bare_io._cpus() == len(os.sched_getaffinity(0)) and not _machine_busy(1.0)


def test_a_quota_under_one_cpu_is_one_cpu(monkeypatch):
    # (a CI container's 500m: 0 whole CPUs; a process still runs on one, never spun on)
    monkeypatch.setattr(bare_io, "_runnable", lambda: 1)
    monkeypatch.setattr(bare_io, "_quota", [bare_io.quota_cpus("50000", "100000")])
    assert bare_io._cpus() == 1 and _machine_busy(1.0)


async def test_calls_are_counted_on_both_sides_and_none_left_in_flight(window):
    window(0)
    worker = FakeWorker()
    flying = bare_io.CALLS.flying
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address, bare=True) as channel:
            with trio.fail_after(20):
                began = bare_io.CALLS.began
                for _ in range(3):
                    assert (await channel.health()).incarnation == 7
                assert bare_io.CALLS.began == began + 6  # the client's three, the server's
                assert bare_io.CALLS.flying == flying
                async with trio.open_nursery() as nursery:
                    async def pull(scope):
                        with scope:
                            await channel.recv_tensors(RecvTensors(1, ["never"]))
                    scope = trio.CancelScope()
                    nursery.start_soon(pull, scope)
                    await worker.waiter_arrived.wait()
                    assert bare_io.CALLS.flying == flying + 2  # in flight on both sides
                    scope.cancel()  # the client leaves midway: the server's call cancelled
                await worker.recv_cancelled.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert bare_io.CALLS.flying == flying


# Where the quota is read: the process's own cgroup (``/proc/self/cgroup``) and those above it
# that the mount shows, the least; a fake mount and a fake ``/proc/self/cgroup`` per case.


def _quota_of(monkeypatch, tmp_path, own, files):
    """``_read_quota`` where ``/proc/self/cgroup`` says ``own`` (None: unreadable) and the
    cgroup mount holds ``files`` (a path under the mount: its text)."""
    root = tmp_path / "mount"
    root.mkdir()
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = tmp_path / "self_cgroup"
    if own is not None:
        proc.write_text(own)
    monkeypatch.setattr(bare_io, "_CGROUP_ROOT", str(root))
    monkeypatch.setattr(bare_io, "_SELF_CGROUP", str(proc))
    return bare_io._read_quota()


@pytest.mark.parametrize("own, files, cpus", [
    # cgroup v2 without a namespace (a systemd unit's CPUQuota=, a container sharing the
    # host's): the quota is on the process's own cgroup, not at the mount's root
    ("0::/system.slice/job.service\n", {"system.slice/job.service/cpu.max": "150000 100000\n",
                                         "system.slice/cpu.max": "max 100000\n"}, 1),
    # a cgroup above it limits it too: the least of them
    ("0::/a/b\n", {"a/b/cpu.max": "max 100000\n", "a/cpu.max": "100000 100000\n"}, 1),
    ("0::/a/b\n", {"a/b/cpu.max": "400000 100000\n", "a/cpu.max": "800000 100000\n"}, 4),
    # a namespaced container: its cgroup is the mount's root
    ("0::/\n", {"cpu.max": "300000 100000\n"}, 3),
    # a path the mount does not show (a container's view of a host path): the root's
    ("0::/docker/abc\n", {"cpu.max": "100000 100000\n"}, 1),
    ("0::/../other\n", {"cpu.max": "200000 100000\n", "other/cpu.max": "100000 100000\n"}, 2),
    # no quota, no files, odd text: none
    ("0::/x\n", {"x/cpu.max": "max 100000\n"}, None),
    ("0::/x\n", {}, None),
    ("0::/x\n", {"x/cpu.max": "\n"}, None),
    ("0::/x\n", {"x/cpu.max": "lots 100000\n"}, None),
    # /proc/self/cgroup unreadable: the mount's root
    (None, {"cpu.max": "100000 100000\n"}, 1),
    # cgroup v1 (a hybrid machine's too): the cpu controller's line and its two files
    ("4:memory:/m\n3:cpu,cpuacct:/job\n0::/\n",
     {"cpu/job/cpu.cfs_quota_us": "150000\n", "cpu/job/cpu.cfs_period_us": "100000\n",
      "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),
    ("3:cpu,cpuacct:/job\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
     None),
    ("3:cpu,cpuacct:/job\n", {"cpu/job/cpu.cfs_quota_us": "150000\n"}, None),  # (no period)
])
def test_the_quota_is_read_from_this_process_cgroup_and_those_above(monkeypatch, tmp_path,
                                                                     own, files, cpus):
    assert _quota_of(monkeypatch, tmp_path, own, files) == cpus
