"""Time slices: how long code that runs kernels may hold the event loop.

Kernels run inline in the task that runs a step, so a step that never awaits (a long
straight-line schedule, a loop of many iterations) would starve every other task of its event
loop, and a cancel scope or deadline around it could never fire. The rule: **no path runs
kernels for longer than ``TIME_SLICE_S`` (1 ms) without a checkpoint**. A cancelled or timed-out
step therefore stops within a slice plus the kernel that is running.

Theory of operation:
- Reading the clock costs a tenth of a small kernel, so the paths count kernels and read the
  clock only every ``CHECK_EVERY`` kernels (or loop iterations of about as many kernels; the
  generated static schedule, whose kernels cost no interpretation, every twice as many).
  The count and the end of the current slice are kept in one ``BUDGET`` (a plain object: a
  thread-local one costs ~6x more per access), so drains of several partitions, a frame loop
  and the compiled loop it enters share one budget. Event loops in several threads of one
  process share it too: one that restarts the slice can stretch another's by a slice at most
  per switch of the GIL; counts are only ever about timing, never about results.
- ``BUDGET.end`` is 0 while no slice is open: the first count that trips opens one
  (``due``), so the kernels of a step shorter than ``CHECK_EVERY`` never read the clock (the
  session reads it once as a run ends, ``Session._share_the_loop``, to yield between runs).
- Async paths (the static schedule, the owner of a core's run) ``await checkpoint()`` (or
  the asyncio loop's equivalent) when ``due()``; synchronous ones (the core's drain, its
  trampoline across partitions, a compiled loop) stop where they are and let their async
  owner checkpoint and resume them. A checkpoint closes the slice (``restart``).
- A path's own awaits (a report received, a kernel that waited) restart the slice. Other
  awaits (the application's, between two runs) leave it open, so a step begins with
  ``begin``: a slice that ended more than a slice ago dates from before such an await (the
  previous run checked it as it ended, ``Session._share_the_loop``, and little runs between
  that check and the next step), and is restarted rather than spent on a needless
  checkpoint. A loop of runs that never awaits keeps its slice and yields when it ends.
- A drain stopped at the end of a slice runs at least one kernel once its owner has
  checkpointed: every run makes progress.

A count bounds time only as well as kernels are small: the static schedule also checks after
every kernel its static shapes say is large (``LARGE_KERNEL_COST``) or that may be offloaded;
elsewhere, and for shapes known only at run time, ``CHECK_EVERY`` large kernels may run
between two checks. One kernel is never cut: a GEMM runs inline up to its offload threshold
(67M multiply-adds), about 0.75 ms split over two free cores and 1.3 ms on one, because an
offload costs 0.14-0.38 ms a kernel (docs/architecture.md, ``bench/bench_inline_gemm.py``).

What a checkpoint costs a step (``bench/bench_step_gaps.py``, bench/RESULTS.md): ~4 us in a
tight loop of checkpoints, ~30 us in a dense model's step (two a step in the MLP's, four in
the autoencoder's). Nothing else runs in it there (the step's own task, one ``epoll`` poll
of timeout 0): it is the first code after a large kernel, and every path of Python run once
a millisecond runs 3-5x slower than in a loop (caches and predictors cold; a session's
whole run of two small kernels: 11 us in a loop, 39 after a GEMM). Skipping every
checkpoint (a slice of 100 s) changed a step by -1.0% to +1.0% (round by round), inside
this machine's noise, so the slice keeps its plain trio checkpoint. (One that first asked
``trio.lowlevel.current_statistics`` whether the loop had anything else to do, 13 us
against 20 after a GEMM, could not see the host loop of a guest run, whose turn the
checkpoint also is.)

``TIME_SLICE_S`` is read at each check, so an embedding application may set it (e.g.
``asyncflow.exec.timeslice.TIME_SLICE_S = 0.005``) to trade latency of other tasks for
throughput; ``CHECK_EVERY`` is read by the interpreted paths as they count and when a plan's
straight-line schedule is generated.
"""
from __future__ import annotations

import time

import trio

TIME_SLICE_S = 0.001   # the longest kernels run without a checkpoint (seconds)
CHECK_EVERY = 16       # kernels between two reads of the clock
# A kernel of the static schedule whose static shapes say it touches this many elements
# (tens of microseconds of numpy) is followed by a check of its own.
LARGE_KERNEL_COST = 1 << 16

clock = time.perf_counter  # the slice clock (tests replace it with a stepped one)


class _Budget:
    """Kernels ``left`` before the next clock read, and the open slice's ``end`` (0: none)."""

    __slots__ = ("left", "end")

    def __init__(self):
        self.left = CHECK_EVERY
        self.end = 0.0


BUDGET = _Budget()


def due():
    """Whether the open slice is over; opens one (and answers False) when none is.

    Called only when a path's kernel count trips, never per kernel.
    """
    now = clock()
    budget = BUDGET
    end = budget.end
    if not end:
        budget.end = now + TIME_SLICE_S
        return False
    return now >= end


def begin():
    """A step begins: restart a slice that ended long ago (see the module docstring)."""
    budget = BUDGET
    end = budget.end
    if end and clock() >= end + TIME_SLICE_S:
        budget.left = CHECK_EVERY
        budget.end = 0.0


def restart():
    """Close the slice: the task has just given the event loop back (or begins afresh)."""
    budget = BUDGET
    budget.left = CHECK_EVERY
    budget.end = 0.0


async def checkpoint():
    """A trio checkpoint that ends the slice; raises ``trio.Cancelled`` if cancelled."""
    await trio.lowlevel.checkpoint()
    restart()
