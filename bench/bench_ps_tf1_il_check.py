"""The interleaved PS MLP series against TF1 (``bench_ps_tf1_rounds.interleaved``: issue 34's
judged figure ``ps_mlp_over_tf1_il``) beside the contiguous form it replaced, alternated in one
process: is the interleaved ratio steadier, does the interleaving cost either side, and does
its median hide a tail of ours?

One asyncflow cluster (a ps, a worker) and one TF1 child (bench_ps_tf1_rounds' ``run``
protocol) are up the whole run. Each round runs three series, their order rotated round by
round: ``il`` and ``il2`` (two interleaved series as bench_vs_tf1 runs them: the second is the
A/A) and ``seq`` (ours for WARMUP + STEPS steps, then TF1's the same, as bench_vs_tf1's
sequential ``mlp_ms``, though seconds apart here, not 20-40 s). Per series: each side's median,
mean and p90 step (ms) and ours/TF1 of each. Summary over the rounds: each form's median
ratio (median, range), il/il2 (the A/A), each side's il median over its seq median in the same
round (what the interleaving costs a side), and the il series' mean and p90 ratios over its
median ratio (above 1: a tail of ours that the judged median does not show).

    .venv/bin/python bench/bench_ps_tf1_il_check.py --tf-python <TF> [--rounds 9] [--steps 100]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
FORMS = ("il", "il2", "seq")


def _stats(times):
    return {"median": statistics.median(times) * 1e3, "mean": statistics.fmean(times) * 1e3,
            "p90": statistics.quantiles(times, n=10)[-1] * 1e3}


async def _rounds(spec, args, child):
    import trio

    import asyncflow as af
    import bench_ps_tf1_rounds as r
    import bench_vs_tf1 as w
    xs, ys = w._mlp_data()
    g, x, y, loss, train, init = w._mlp(af, 0)
    rows = []
    async with af.Session(graph=g, cluster=spec) as sess:
        await sess.run(init)
        await sess.run([loss, train], {x: xs, y: ys})

        def step():
            return sess.run([loss, train], {x: xs, y: ys})

        async def interleaved():
            detail = {}
            await r.interleaved(step, child, detail=detail)
            return ([t for c in detail["ours_times"] for t in c],
                    [t for c in detail["tf1_times"] for t in c])

        async def sequential():
            ours = (await w._aseries(step, w.WARMUP + args.steps))[w.WARMUP:]
            reply = await trio.to_thread.run_sync(child.ask, f"run {args.steps} {w.WARMUP}",
                                                  r.RUN_DEADLINE_S)
            return ours, reply["times"]

        run = {"il": interleaved, "il2": interleaved, "seq": sequential}
        for k in range(args.rounds):
            row = {}
            for form in FORMS[k % 3:] + FORMS[:k % 3]:
                ours, theirs = await run[form]()
                row[form] = (_stats(ours), _stats(theirs))
            rows.append(row)
            print(f"round {k + 1:>2} (first {FORMS[k % 3]}): " + "; ".join(
                f"{form} {o['median']:.3f}/{t['median']:.3f} = {o['median'] / t['median']:.3f}"
                f" (mean {o['mean'] / t['mean']:.3f}, p90 {o['p90'] / t['p90']:.3f})"
                for form, (o, t) in row.items()) + f" | load "
                f"{open('/proc/loadavg').read().split()[0]}", flush=True)
    return rows


def _summary(rows):
    def ratio(row, form, stat="median"):
        ours, theirs = row[form]
        return ours[stat] / theirs[stat]

    def line(name, values):
        return (f"{name:<34} median {statistics.median(values):.3f} "
                f"[{min(values):.3f}-{max(values):.3f}] spread {max(values) - min(values):.3f}")

    print()
    for form in FORMS:
        print(line(f"{form} ours/TF1 (median steps)", [ratio(row, form) for row in rows]))
    print(line("A/A: il over il2 (ratios)", [ratio(row, "il") / ratio(row, "il2")
                                              for row in rows]))
    for side, name in ((0, "ours"), (1, "TF1")):
        print(line(f"{name}: il median over seq median",
                   [row["il"][side]["median"] / row["seq"][side]["median"] for row in rows]))
    for stat in ("mean", "p90"):
        print(line(f"il: {stat} ratio over median ratio",
                   [ratio(row, "il", stat) / ratio(row, "il") for row in rows]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=100, help="the seq form's timed steps")
    parser.add_argument("--tf-python", default=None)
    args = parser.parse_args()
    sys.path.insert(0, _HERE)
    sys.path.insert(0, os.path.join(_HERE, ".."))
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import trio

    import bench_ps_tf1_rounds as r
    import bench_vs_tf1 as w
    from local_cluster import local_cluster
    tf_python = w.find_tf_python(args.tf_python)
    if tf_python is None:
        parser.error("no --tf-python (nor ASYNCFLOW_TF_PYTHON)")
    child = r.start_tf_child(tf_python)
    try:
        with local_cluster({"ps": 1, "worker": 1}) as spec:
            rows = trio.run(_rounds, {"ps": spec["ps"], "worker": spec["worker"]}, args, child)
    finally:
        print(f"TF1 child's processes killed at its close: {child.close()}")
    _summary(rows)


if __name__ == "__main__":
    main()
