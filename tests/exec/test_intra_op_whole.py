"""A split that is one update (``IntraOpPool.run(..., atomic=True)``: an apply writing a
variable's stored arrays in place) is never left half done by a Ctrl-C: SIGINT on the main
thread, or a KeyboardInterrupt a chunk raises, goes up only once every chunk ran, each once;
a plain split still stops at once (a fresh output may be given up half written), and an
error in a chunk still stops an atomic one."""
from __future__ import annotations

import _thread
import os
import signal
import threading

import pytest
from bounded_threads import bounded

from asyncflow.exec import intra_op
from asyncflow.kernels import sigint_hold


def interrupting(how, once_at=0):
    """A chunk function recording each chunk's start, whose chunk ``once_at`` is interrupted
    after its work: by SIGINT as a Ctrl-C would be (``signal``) or a KeyboardInterrupt it
    raises itself (``raise``)."""
    ran, lock = [], threading.Lock()

    def chunk(start, stop):
        with lock:
            ran.append(start)
        if start == once_at:
            if how == "signal":
                _thread.interrupt_main()  # (SIGINT's handler runs at the next bytecode)
            else:
                raise KeyboardInterrupt
    return chunk, ran


@pytest.mark.parametrize("how", ["signal", "raise"])
@pytest.mark.parametrize("atomic", [True, False])
def test_a_ctrl_c_in_an_atomic_split_goes_up_after_every_chunk(atomic, how, main_thread):
    """One thread: the caller takes the chunks in order, so the old behaviour (the split
    stopped after the interrupted chunk) is deterministic too."""
    pool = intra_op.IntraOpPool(1)
    chunk, ran = interrupting(how)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        pool.run(chunk, [(i, i + 1) for i in range(4)], atomic=atomic)
    assert ran == ([0, 1, 2, 3] if atomic else [0])
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_every_chunk_runs_once_with_a_worker(how, main_thread):
    pool = intra_op.IntraOpPool(2)
    try:
        for once_at in (0, 5):  # the caller's first chunk; one further on (either thread)
            chunk, ran = interrupting(how, once_at)
            with pytest.raises(KeyboardInterrupt):
                pool.run(chunk, [(i, i + 1) for i in range(8)], atomic=True)
            assert sorted(ran) == list(range(8))
    finally:
        pool.close(30)


def test_a_ctrl_c_held_goes_to_the_handler_found_after_the_split(main_thread):
    """The noted SIGINT is raised again once the split ended: the handler in place then (a
    test's own here; trio's during a step) decides what it does."""
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        chunk, ran = interrupting("signal")
        intra_op.IntraOpPool(1).run(chunk, [(0, 1), (1, 2), (2, 3)], atomic=True)
        assert ran == [0, 1, 2] and seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_error_still_stops_an_atomic_split(main_thread):
    ran = []

    def chunk(start, stop):
        ran.append(start)
        if start == 1:
            raise ValueError("chunk 1")
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(ValueError, match="chunk 1"):
        intra_op.IntraOpPool(1).run(chunk, [(i, i + 1) for i in range(4)], atomic=True)
    assert ran == [0, 1] and signal.getsignal(signal.SIGINT) is before


def test_an_atomic_split_inside_another_holds_once(main_thread):
    """An atomic split in a chunk of another (a paired apply): the inner one leaves the hold
    to the outer, and the Ctrl-C goes up after the outer's last chunk."""
    pool = intra_op.IntraOpPool(1)
    inner, inner_ran = interrupting("signal")
    outer_ran = []

    def outer(start, stop):
        outer_ran.append(start)
        if start == 0:
            pool.run(inner, [(0, 1), (1, 2)], atomic=True)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        pool.run(outer, [(0, 1), (1, 2), (2, 3)], atomic=True)
    assert inner_ran == [0, 1] and outer_ran == [0, 1, 2]
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_a_chunk_s_keyboard_interrupt_is_held():
    """A caller off the main thread (an offloaded kernel's) swaps no handler; a
    KeyboardInterrupt a chunk raises is still held to the end."""
    pool = intra_op.IntraOpPool(1)
    chunk, ran = interrupting("raise")
    outcome = bounded(lambda: pool.run(chunk, [(i, i + 1) for i in range(3)], atomic=True))
    assert isinstance(outcome, KeyboardInterrupt) and ran == [0, 1, 2]


def test_each_ctrl_c_held_is_raised_again(main_thread):
    """Two Ctrl-Cs during the split reach the handler twice after it (the worker's stop
    deadline exits at once on the second): none is folded into the other."""
    ran, seen = [], []

    def chunk(start, stop):
        ran.append(start)
        if start < 2:
            _thread.interrupt_main()  # (each noted at the next bytecode: two handler calls)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(len(ran)))
    try:
        intra_op.IntraOpPool(1).run(chunk, [(i, i + 1) for i in range(3)], atomic=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ran == [0, 1, 2] and seen == [3, 3]  # (both after the last chunk)


class _CtrlCAsTheHandlerIsPutBack:
    """``_signal`` where a second Ctrl-C lands just as the held handler is put back: the
    handler runs at once and raises (as Python's and trio's unprotected one do)."""

    def __init__(self, real):
        self._real, self.fired = real, False
        self.SIGINT, self.getsignal, self.raise_signal = (
            real.SIGINT, real.getsignal, real.raise_signal)

    def signal(self, signum, handler):
        previous = self._real.signal(signum, handler)
        if handler is not sigint_hold._note and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return previous


def test_a_ctrl_c_on_giving_back_is_not_raised_again_by_the_next_split(monkeypatch, main_thread):
    """The first Ctrl-C noted, a second one raised as the handler is put back: one
    KeyboardInterrupt; the next atomic split, uninterrupted, raises no phantom one."""
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        monkeypatch.setattr(sigint_hold, "_signal",
                            _CtrlCAsTheHandlerIsPutBack(sigint_hold._signal))
        chunk, ran = interrupting("signal")
        with pytest.raises(KeyboardInterrupt):
            intra_op.IntraOpPool(1).run(chunk, [(0, 1), (1, 2)], atomic=True)
        assert ran == [0, 1] and seen == []
        intra_op.IntraOpPool(1).run(lambda start, stop: None, [(0, 1), (1, 2)], atomic=True)
        assert seen == []
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_chunk_s_keyboard_interrupt_outranks_a_later_error():
    """A chunk's KeyboardInterrupt kept, a later chunk failing: the Ctrl-C goes up (the
    error as its context), not the error, which a caller may handle and go on."""
    pool = intra_op.IntraOpPool(1)
    ran = []

    def chunk(start, stop):
        ran.append(start)
        if start == 0:
            raise KeyboardInterrupt
        if start == 1:
            raise ValueError("chunk 1")
    with pytest.raises(KeyboardInterrupt) as caught:
        pool.run(chunk, [(i, i + 1) for i in range(3)], atomic=True)
    assert ran == [0, 1] and isinstance(caught.value.__context__, ValueError)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_by_another_thread_during_the_hold_gets_sigint_back(main_thread):
    """A thread forks while the main thread holds SIGINT: the child (whose main thread is
    the forking one, never inside the split) has the handler that was held, not the noter
    that would swallow every Ctrl-C it gets."""
    before = signal.getsignal(signal.SIGINT)
    seen = []

    def fork_and_look():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one byte, then out at once
            os.write(write, b"1" if signal.getsignal(signal.SIGINT) is before else b"0")
            os._exit(0)
        os.close(write)
        seen.append(os.read(read, 1))
        os.close(read)
        os.waitpid(pid, 0)

    def chunk(start, stop):
        if start == 0:
            thread = threading.Thread(target=fork_and_look)
            thread.start()
            thread.join(30)
    intra_op.IntraOpPool(1).run(chunk, [(0, 1), (1, 2)], atomic=True)
    assert seen == [b"1"] and signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_a_ctrl_c_in_a_chunk_of_run_alone_gives_its_flag_back(how, main_thread):
    """``run_alone`` (a pair's or a group's kernels whole, one a thread) sets the thread's
    flag around each chunk; a Ctrl-C inside one leaves it as found (else every later kernel
    on the loop's thread ran whole), inside a flag already set too (a lane's)."""
    pool = intra_op.IntraOpPool(1)
    for found in (False, True):
        intra_op.whole.active = found
        seen = []
        chunk, ran = interrupting(how)

        def alone(start, stop, chunk=chunk, seen=seen):
            seen.append(intra_op.IntraOpPool.alone())
            chunk(start, stop)
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.run_alone(alone, [(0, 1), (1, 2)])
            assert ran == [0] and seen == [True]
            assert intra_op.whole.active is found
        finally:
            intra_op.whole.active = False
