"""What a one-way push costs its sender: ``Channel.push_tensors`` with the push's timeout, from
the call to its return (issue 34).

The workload is the PS step's: the ps's four float32 parameters (64x128, 128, 128x10, 10,
~38 KiB) in one PushTensors, sent one-way (``channel.one_way``, as a worker's peer channels
send pushes) with ``timeout=PUSH_TIMEOUT_S`` over the bare same-host protocol to a server in
the same trio run that deposits nothing (its handler returns). Each push is timed alone, from
the call to its return (the request written whole: what the sender's push task spends before
its next step; the server reads it while the loop waits between pushes, outside the timed
region). Median and best batch of 64 pushes, microseconds a push.

With ``--trees OLD NEW`` the same runs in a fresh process per tree (``PYTHONPATH=TREE``),
alternating OLD, NEW, NEW, OLD, ... for ``--rounds`` pairs, then NEW/OLD of the medians.

Usage: ``.venv/bin/python bench/bench_push_send.py [--pushes 6400]``,
``.venv/bin/python bench/bench_push_send.py --trees <main> . --rounds 4``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCH = 64
SHAPES = ((64, 128), (128,), (128, 10), (10,))
KEY = "/job:ps/replica:0/task:0/device:CPU:0;1;/job:worker/replica:0/task:0/device:CPU:0;{};0:0"


def one_run(pushes):
    """This tree's figures: (median of the batches' mean, best batch's mean), us a push."""
    import numpy as np
    import trio

    from transports.http.client import TrioHttpChannel
    from transports.http.server import open_http_server
    from transports.messages import Health, HealthReply, PushTensors, TensorEntry

    class Sink:
        """Takes every push (deposits nothing); answers Health (the channel's first call)."""

        pushed = 0

        async def push_tensors(self, request):
            self.pushed += 1

        async def health(self, request):
            return HealthReply(7, "/job:ps/replica:0/task:0", [])

    rng = np.random.default_rng(0)
    values = [rng.random(shape, dtype=np.float32) for shape in SHAPES]
    batches = []

    async def main():
        sink = Sink()
        async with open_http_server(sink) as server:
            async with TrioHttpChannel(server.address) as channel:
                channel.one_way = frozenset({"push_tensors"})
                await channel.health(Health())
                for step in range(1, pushes // BATCH + 9):  # (the first 8 batches: warm-up)
                    spent = 0
                    for i in range(BATCH):
                        request = PushTensors(2 * (step * BATCH + i) + 1, [
                            TensorEntry(KEY.format(f"w{n}/read:0"), value)
                            for n, value in enumerate(values)])
                        start = time.perf_counter_ns()
                        await channel.push_tensors(request, timeout=60.0)
                        spent += time.perf_counter_ns() - start
                        while sink.pushed < step * BATCH + i - BATCH + 1:  # (server: untimed)
                            await trio.sleep(0)
                    if step > 8:
                        batches.append(spent / BATCH / 1e3)
                    await trio.testing.wait_all_tasks_blocked()
        assert sink.pushed >= pushes

    import trio.testing  # noqa: F401  (wait_all_tasks_blocked)
    trio.run(main)
    return statistics.median(batches), min(batches)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pushes", type=int, default=6400)
    parser.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.trees:
        median, best = one_run(args.pushes)
        if args.one:
            print(json.dumps([median, best]))
        else:
            print(f"one-way push of the PS step's parameters: {median:.1f} us a push "
                  f"(median batch), best batch {best:.1f} us")
        return
    trees = {"old": os.path.abspath(args.trees[0]), "new": os.path.abspath(args.trees[1])}
    runs = {"old": [], "new": []}
    for pair in range(args.rounds):
        for label in (("old", "new") if pair % 2 == 0 else ("new", "old")):
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", "--pushes",
                 str(args.pushes)], env={**os.environ, "PYTHONPATH": trees[label]},
                cwd=trees[label], check=True, capture_output=True, text=True)
            median, best = json.loads(done.stdout.splitlines()[-1])
            runs[label].append(median)
            print(f"{label}: {median:6.1f} us a push (median batch), best batch {best:6.1f} "
                  f"us; load {open('/proc/loadavg').read().split()[0]}", flush=True)
    old, new = statistics.median(runs["old"]), statistics.median(runs["new"])
    wins = sum(n < o for n, o in zip(runs["new"], runs["old"]))
    print(f"medians over {args.rounds} runs: old {old:.1f} us, new {new:.1f} us, new/old "
          f"{new / old:.3f}, new lower in {wins} of {args.rounds} pairs")


if __name__ == "__main__":
    main()
