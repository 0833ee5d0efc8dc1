"""A measuring patch, not a product path: the executor's time-slice checkpoint
(``asyncflow.exec.timeslice.checkpoint``) gives the event loop back only when something could
use it: another task runnable, a task waiting for I/O, a callback from a thread queued, or a
sleeping task's deadline passed (trio's run statistics say which); otherwise it only checks
for a cancellation (``checkpoint_if_cancelled``) and restarts the slice. Switched by ``ON``
at each call, for ``.venv/bin/python bench/bench_ab_setting.py --set
cheap_checkpoint_scratch:ON=True``; ``ON`` False is the tree as it is. Counts and times both
kinds, printed at exit, with the statistics each full checkpoint of form B saw.

Found with it (bench/RESULTS.md, c48ae): ``tasks_runnable`` is the length of trio's run queue,
which does not hold the tasks still ahead in the scheduler's current batch: a task that runs
after the caller in the same batch is invisible here, so this form can starve it
(``tests/exec/test_time_slices.py``'s ticker got one turn in a 2000-kernel step). A product
form needs trio's batch, which it does not expose; not built.
"""
from __future__ import annotations

import atexit
import time

import trio

from asyncflow.exec import timeslice

ON = False
_real = timeslice.checkpoint
reasons = {}
stats = {"cheap": 0, "full": 0, "full_s": 0.0}


async def checkpoint():
    if ON:
        s = trio.lowlevel.current_statistics()
        io = s.io_statistics
        if (not s.tasks_runnable and not s.run_sync_soon_queue_size
                and getattr(io, "tasks_waiting_read", 2) <= 1  # (trio's own wake-up reader)
                and not getattr(io, "tasks_waiting_write", 1)
                and s.seconds_to_next_deadline > 0):
            stats["cheap"] += 1
            await trio.lowlevel.checkpoint_if_cancelled()
            timeslice.restart()
            return
    stats["full"] += 1
    if ON:
        s = trio.lowlevel.current_statistics()
        io = s.io_statistics
        key = (s.tasks_runnable, s.run_sync_soon_queue_size, io.tasks_waiting_read,
               io.tasks_waiting_write, s.seconds_to_next_deadline > 0)
        reasons[key] = reasons.get(key, 0) + 1
    t0 = time.perf_counter()
    await _real()
    stats["full_s"] += time.perf_counter() - t0


timeslice.checkpoint = checkpoint


@atexit.register
def _report():
    full = stats["full"]
    print(f"cheap_checkpoint_scratch: {stats['cheap']} cheap, {full} full "
          f"({stats['full_s'] / max(full, 1) * 1e6:.1f} us each)")
    if reasons:
        print("  full where ON, by (runnable, soon queue, waiting read, write, deadline ahead):",
              reasons)
