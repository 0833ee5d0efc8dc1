"""The cost of refusing TF1's unfetchable and unfeedable tensors, same run.

``Session.prepare`` asks ``check_fetchable`` of every fetched op and ``check_feedable`` of
every fed tensor (a value inside a while loop or cond branch is refused before anything
runs, as in TF1). This times a trivial fetch (``identity`` of a constant) and a fed one
(``x + 1`` of a placeholder) with the checks as they are, and with both replaced by no-ops
in the session module; rounds alternate the two forms so load on the shared machine hits
them alike. Figures are the median and best of ``ROUNDS`` rounds of ``REPEATS`` awaited
runs, in CPU time of the process per run.

Usage: ``python bench/bench_fetch_checks.py``
"""
import statistics
import time

import trio

import asyncflow as af
from asyncflow import session as session_module

CLOCK = time.process_time
ROUNDS = 15
REPEATS = 2000


async def _per_run(sess, fetch, feed):
    start = CLOCK()
    for _ in range(REPEATS):
        await sess.run(fetch, feed)
    return (CLOCK() - start) / REPEATS


async def main():
    checks = (session_module.check_fetchable, session_module.check_feedable)
    graph = af.Graph()
    with graph.as_default():
        trivial = af.identity(af.constant(1.0))
        x = af.placeholder(af.float32, [])
        fed = x + 1.0
    times = {"checked": [], "unchecked": []}
    async with af.Session(graph=graph) as sess:
        for fetch, feed in ((trivial, None), (fed, {x: 1.0})):
            await sess.run(fetch, feed)  # compile the plans once
        for round_ in range(ROUNDS):
            order = ["checked", "unchecked"] if round_ % 2 == 0 else ["unchecked", "checked"]
            for form in order:
                if form == "unchecked":
                    session_module.check_fetchable = session_module.check_feedable = \
                        lambda _: None
                try:
                    times[form].append((await _per_run(sess, trivial, None),
                                        await _per_run(sess, fed, {x: 1.0})))
                finally:
                    session_module.check_fetchable, session_module.check_feedable = checks
    for index, what in enumerate(("trivial fetch", "fed x + 1")):
        checked = [t[index] * 1e6 for t in times["checked"]]
        unchecked = [t[index] * 1e6 for t in times["unchecked"]]
        print(f"{what}: checked {statistics.median(checked):.2f} us/run (best "
              f"{min(checked):.2f}), unchecked {statistics.median(unchecked):.2f} (best "
              f"{min(unchecked):.2f}): ratio {statistics.median(checked) / statistics.median(unchecked):.3f}x "
              f"(best {min(checked) / min(unchecked):.3f}x)")


if __name__ == "__main__":
    trio.run(main)
