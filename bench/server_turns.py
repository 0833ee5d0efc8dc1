"""How the servers of ``bench_models.py`` take their turns (issue 37's "first column").

The driver times several long-lived server processes in turn, best of N rounds. One
asyncflow server could read 10-40% slower than its A/A twins for its whole life; measured
(bench/RESULTS.md, c50first): not the order (TF1's server burns no CPU after its replies:
``cpu_after``, ``--watch``), but the process's own heap: glibc gave a thread's arena a fresh
64 MiB heap during each step and unmapped it after, so the step faulted its arrays' pages in
again every time (6-7k minor faults a step against ~0.8k, ``faults_per_step`` in the
servers' records). Which process lands in that state is chance, so the driver:

* ``round_order``: each round's and model's order of the servers a row of a balanced Latin
  square (``orders``, ``turns``), each model walking the rows one a round (none always timed
  right after the same other; balanced per model over a whole square's rounds);
* reports each server's rounds, their median and its faults a step, beside the best round.
"""
from __future__ import annotations

import os
import time

_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")


def thread_cpu_ns(pid):
    """``{thread id: CPU time (user and system, ns)}`` of the live threads of process ``pid``
    (empty for a process that is gone)."""
    times = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return times
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
                times[tid] = int(file.read().split()[0])
                continue
        except (FileNotFoundError, ProcessLookupError):
            continue  # (the thread ended)
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        times[tid] = int((int(fields[11]) + int(fields[12])) * _TICK_NS)  # utime, stime
    return times


def cpu_used_ns(before, after):
    """The CPU time the threads ran between two ``thread_cpu_ns`` readings: a thread new
    since ``before`` counts from 0, one gone since counts nothing (never negative)."""
    return sum(max(0, ns - before.get(tid, 0)) for tid, ns in after.items())


def orders(count):
    """A balanced Latin square of ``count`` servers (Williams's design) as rows of indices:
    each server first in as many rows as any other, and right after each other server, within
    a row, equally often (once each for an even ``count``, in ``count`` rows; twice for an
    odd one, in ``2 * count`` rows: each row followed by its reverse, so that a run of fewer
    rounds than rows, e.g. 3 of 6, still has each other server right after the last one)."""
    first, low, high = [0], 1, count - 1
    while len(first) < count:
        first.append(low)
        low += 1
        if len(first) < count:
            first.append(high)
            high -= 1
    rows = [[(index + shift) % count for index in first] for shift in range(count)]
    return rows if count % 2 == 0 else [each for row in rows for each in (row, row[::-1])]


def turns(items, turn):
    """``items`` in the order of turn ``turn``: the rows of ``orders`` in turn, so no server is
    always timed right after the same other (a rotation would keep the cyclic order, and with
    it TF1's follower)."""
    items = list(items)
    if not items:
        return items
    rows = orders(len(items))
    return [items[index] for index in rows[turn % len(rows)]]



def round_order(items, round_index, model_index):
    """``items`` in the order of a round's model: each model takes the rows of ``orders`` one a
    round (offset by its index), so each model's own rounds, whose best is its figure, walk
    the whole square in ``len(orders(len(items)))`` rounds. (Numbering the turns ``round *
    models + model`` did not: a model then saw every ``models``-th row only, one order for all
    its rounds with 2 servers and 2 models, a row and its reverse with 3 and 3.)"""
    return turns(items, round_index + model_index)

def cpu_after(pid, slices=20, slice_s=0.05, cpu_ns=thread_cpu_ns, clock=time.perf_counter,
              sleep=time.sleep):
    """Process ``pid``'s CPU over wall in each of ``slices`` slices of ``slice_s`` seconds
    from now (1.0: one CPU's worth): what a server burns after its reply."""
    shares = []
    for _ in range(slices):
        start, before = clock(), cpu_ns(pid)
        sleep(slice_s)
        used = cpu_used_ns(before, cpu_ns(pid))
        shares.append(used / 1e9 / max(clock() - start, 1e-9))
    return shares
