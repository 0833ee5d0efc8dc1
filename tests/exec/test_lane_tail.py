"""Lane 0's tail (issue 37, ``exec/lanes.py`` ``LaneRun.tail``): once lane 0 has made the last
value lane 1 needs, a GEMM of lane 0's (whole on its thread while lane 1 is live) splits in
row chunks where the chunks keep the product's bits, and offers the chunks left to the lane
thread for when lane 1 ends: two threads on two cores, never a split worker as a third. The
split hands its chunks to the thread it was offered to and to no worker, a refused offer
leaves every chunk to the caller, the lane thread runs an offer made before lane 1's end and
refuses one after, and ``for_gemm`` chunks only a joinable GEMM whose chunks keep its bits."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from bounded_threads import bounded

from asyncflow.exec import intra_op, lanes
from asyncflow.kernels import intra_op as kernel_split


class Joiner:
    """What a lane's ``LaneRun`` is to a split of lane 0's tail: an offered split's ``help``
    runs on a thread of its own (the lane thread at lane 1's end) where it is accepted."""

    def __init__(self, accept):
        self.accept, self.retracted, self.thread = accept, 0, None

    def open(self):
        return self.accept

    def offer(self, help):
        if self.accept:
            self.thread = threading.Thread(target=help)
            self.thread.start()
        return self.accept

    def retract(self):
        self.retracted += 1


def split_in_the_tail(pool, joiner, work, chunks=6):
    """``pool.run(work)`` over ``chunks`` one-item chunks on a thread of its own, as lane 0's
    tail runs it: kernels whole there (``whole.active``), ``joiner`` offered the chunks."""
    def run():
        intra_op.whole.active, intra_op.whole.join = True, joiner
        try:
            assert pool.joinable() == joiner.accept
            pool.run(work, [(i, i + 1) for i in range(chunks)])
        finally:
            intra_op.whole.active, intra_op.whole.join = False, None
    assert bounded(run) is None
    if joiner.thread is not None:
        joiner.thread.join(30)
        assert not joiner.thread.is_alive()


def test_a_tail_split_hands_its_chunks_left_to_the_thread_it_was_offered_to():
    pool = intra_op.IntraOpPool(2)
    joiner = Joiner(accept=True)
    taken, both = {}, threading.Barrier(2)

    def work(start, stop):
        if threading.current_thread() not in taken.values():  # its first chunk: until
            both.wait(30)  # the other thread has one too
        taken[start] = threading.current_thread()
    try:
        split_in_the_tail(pool, joiner, work)
        assert sorted(taken) == list(range(6))
        assert joiner.thread in taken.values() and len(set(taken.values())) == 2
        assert joiner.retracted == 1
        assert pool._executor is None  # (no split worker started: two threads, not three)
    finally:
        pool.close()


def test_a_refused_offer_leaves_every_chunk_to_the_caller():
    pool = intra_op.IntraOpPool(2)
    joiner = Joiner(accept=False)
    taken = {}

    def work(start, stop):
        taken[start] = threading.current_thread()
    try:
        split_in_the_tail(pool, joiner, work)
        assert sorted(taken) == list(range(6)) and len(set(taken.values())) == 1
        assert joiner.retracted == 0 and pool._executor is None
    finally:
        pool.close()


def test_the_lane_thread_runs_an_offer_made_before_lane_1_ends_and_refuses_one_after():
    pool = intra_op.IntraOpPool(2)
    ran = []
    run = lanes.LaneRun(lambda slots, lane_run, flags: iter(()), [], 0, pool)
    run.future = object()  # (handed to a thread: what ``start`` records)
    assert run.open()
    assert run.offer(lambda: ran.append("offered"))
    run._work()  # lane 1 (no kernels) to its end, then the split offered before it ended
    assert ran == ["offered"] and run.done and not run.open()
    assert not run.offer(lambda: ran.append("late"))
    run.retract()
    assert run.joined is None and ran == ["offered"]


class Pool:
    """A CPU device's pool as ``for_gemm`` sees it in lane 0's tail: kernels whole here."""
    threads = 2

    def __init__(self, joinable):
        self._joinable, self.runs = joinable, []

    def alone(self):
        return True

    def all_busy(self):
        return False

    def joinable(self):
        return self._joinable

    def run(self, fn, bounds):
        self.runs.append(bounds)
        for start, stop in bounds:
            fn(start, stop)


class Context:
    def __init__(self, pool):
        self.device = type("Device", (), {"intra_op": pool})()


@pytest.mark.parametrize("joinable, keeps_bits, chunks", [
    (True, True, 1), (True, True, 4), (True, True, 8), (False, True, 8), (True, False, 8)])
def test_a_gemm_in_lane_0s_tail_splits_where_it_may_be_joined_and_its_chunks_keep_its_bits(
        joinable, keeps_bits, chunks, monkeypatch):
    monkeypatch.setattr(kernel_split, "split_keeps_bits", lambda dtype: keeps_bits)
    monkeypatch.setattr(kernel_split, "JOIN_CHUNKS", chunks)
    rng = np.random.default_rng(0)
    a, b = rng.random((784, 256), dtype=np.float32), rng.random((256, 256), dtype=np.float32)
    out = np.full((784, 256), np.nan, np.float32)

    def by_rows(start, stop):
        np.matmul(a[start:stop], b, out=out[start:stop])
    pool = Pool(joinable)
    bounds = kernel_split.for_gemm(Context(pool), 784, 256 * 256, by_rows,
                                   dtype=np.dtype(np.float32))
    assert bounds[0][0] == 0 and bounds[-1][1] == 784 and not np.isnan(out).any()
    if joinable and keeps_bits and chunks > 1:
        assert bounds == kernel_split.chunk_bounds(784, chunks) and pool.runs == [bounds]
    elif keeps_bits:
        assert bounds == [(0, 784)] and pool.runs == []  # whole: b packed once
    else:  # (the one-thread split's own bounds, as before: its bits depend on them)
        assert len(bounds) == 2 and pool.runs == [bounds]


class Interrupted(Joiner):
    """A joiner whose ``retract`` raises as a Ctrl-C there would (a signal's handler runs
    between any two bytecodes of the loop's thread, the lock's wait included); the offered
    ``help`` is kept for the lane thread to call later, as ``LaneRun`` keeps it."""

    def __init__(self):
        super().__init__(accept=True)
        self.help = None

    def offer(self, help):
        self.help = help
        return True

    def retract(self):
        self.retracted += 1
        raise KeyboardInterrupt


def test_a_ctrl_c_in_the_retract_still_closes_the_split_and_gives_blas_back():
    """Before, ``retract`` ran first in ``run``'s ``finally``: a Ctrl-C there skipped
    ``finish`` (the split left open to a late ``help``, a chunk of the lane thread's not
    waited for) and ``_release_blas`` (BLAS held at one thread for good)."""
    pool = intra_op.IntraOpPool(2)
    joiner = Interrupted()
    ran = []
    users = intra_op._blas_users
    try:
        intra_op.whole.active, intra_op.whole.join = True, joiner
        with pytest.raises(KeyboardInterrupt):
            pool.run(lambda start, stop: ran.append(start), [(i, i + 1) for i in range(4)])
    finally:
        intra_op.whole.active, intra_op.whole.join = False, None
        pool.close()
    assert joiner.retracted == 1 and ran == [0, 1, 2, 3]
    assert intra_op._blas_users == users
    joiner.help()  # (the lane thread, late: the split is closed, it runs nothing)
    assert ran == [0, 1, 2, 3] and joiner.help.__self__._closed


async def test_lane_1s_kernels_run_by_lane_0_in_its_tail_are_not_split_for_a_join():
    """Lane 0 waiting in its tail runs lane 1 itself where the lane thread has not taken it
    (``LaneRun._until``, ``on_loop``): a GEMM of lane 1's there would split for the lane
    thread, which joins only at lane 1's end, after the GEMM: its chunks all on lane 0, each
    packing ``b`` again, for nothing. Before, ``open`` said yes there."""
    pool = intra_op.IntraOpPool(2)
    seen = []

    def lane1(slots, lane_run, flags):
        seen.append(pool.joinable())
        yield -1
        seen.append(pool.joinable())

    async def pause(*args):
        pass
    run = lanes.LaneRun(lane1, [], 0, pool)
    run.future = object()  # (handed to a thread that has not taken lane 1 yet)
    intra_op.whole.active, intra_op.whole.join = True, run
    try:
        assert pool.joinable()
        await run.join(pause, pause)
    finally:
        intra_op.whole.active, intra_op.whole.join = False, None
        pool.close()
    assert run.stolen and run.done and seen == [False, False]


def test_an_error_in_a_chunk_the_lane_thread_took_is_raised_by_the_split_once_it_ended():
    """The lane thread's chunk fails: lane 0's ``run`` raises that error, and only after the
    chunk has ended (nothing of the split still writes into its output then)."""
    pool = intra_op.IntraOpPool(2)
    joiner = Joiner(accept=True)
    both, ended, lane_0 = threading.Barrier(2), [], []

    def work(start, stop):
        if threading.current_thread() is joiner.thread:
            try:
                both.wait(30)  # (lane 0 has a chunk too)
                raise ValueError(f"chunk {start}")
            finally:
                ended.append(start)
        elif not ended and not lane_0:  # (its first chunk: until the lane thread has one)
            lane_0.append(start)
            both.wait(30)
    def run():
        intra_op.whole.active, intra_op.whole.join = True, joiner
        try:
            pool.run(work, [(i, i + 1) for i in range(6)])
        except ValueError:
            raised.append(len(ended))  # (the lane thread's chunks ended by then)
            raise
        finally:
            intra_op.whole.active, intra_op.whole.join = False, None
    raised = []
    try:
        assert isinstance(bounded(run), ValueError) and raised == [1]
        joiner.thread.join(30)
        assert not joiner.thread.is_alive() and joiner.retracted == 1
    finally:
        pool.close()
