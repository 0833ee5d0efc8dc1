"""CPU per step of a trivial remote step's client layers alone: the session, ClusterTarget,
the master's step driver and the channel's call, the transport replaced by a canned reply.

One ``af.Server`` on loopback in this trio run (``bench_step_floor.inprocess_session``)
answers the first steps (open, registration, the reply to keep); then the channel's
``_exchange`` encodes each RunGraph (as the bare call does) and returns the kept reply, so
what is timed is the client's Python above the wire:
``time.process_time`` per step, best of ``--rounds`` rounds of ``--calls`` steps.

Usage: ``.venv/bin/python bench/bench_client_layers.py [--calls 4000] [--rounds 5]``; run it
with ``PYTHONPATH=<tree>`` beside another tree to compare them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


async def measure(calls, rounds):
    from bench_step_floor import inprocess_session
    from transports.wire import encode
    async with inprocess_session(50) as (sess, _, p, doubled):
        channel = next(iter(sess._target.master.tasks.values())).channel
        real, kept = channel._exchange, []

        async def keep(rpc, request):
            kept.append(await real(rpc, request))
            return kept[-1]

        async def canned(rpc, request):
            encode(request, channel._limits, defer_checksums=True)
            return kept[-1]

        channel._exchange = keep
        await sess.run(doubled, {p: 1.0})
        channel._exchange = canned
        figures = []
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(calls):
                await sess.run(doubled, {p: 1.0})
            figures.append((time.process_time() - start) / calls * 1e6)
        channel._exchange = real
    return figures


def main():
    import trio
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the best is printed)")
    args = parser.parse_args()
    figures = trio.run(measure, args.calls, args.rounds)
    print(f"client layers (canned reply, request encoded): best {min(figures):.1f} us per "
          f"step; rounds {', '.join(f'{f:.1f}' for f in figures)} (load average "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
