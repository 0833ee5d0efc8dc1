"""glibc malloc settings against each other across fresh processes (issue 37): which settings
keep every asyncflow process out of the state where its step thread gets a fresh glibc heap
each step and faults its arrays' pages in again (bench/RESULTS.md 2026-12-08, c50first).

Whether a process lands in that state is chance, decided once for its life, so a setting is
judged on several fresh servers (bench_models.py's, the same tree), not on one process's
rounds. Each candidate is an environment (``NAME=KEY=VALUE,KEY=VALUE``; ``NAME=`` for none
beyond the caller's); ``--servers`` servers per candidate start interleaved, and each round
asks them in turn, the order rotated each round, so the machine's phases hit all alike. Two
candidates with the same settings make an A/A.

Per server and model: the median step (ms) of its rounds, its minor page faults a step
(median; a process in the state reads thousands on the convnet) and its resident memory after
the last round (``VmRSS``, MiB); per candidate, the median of its servers' medians and how many
servers faulted more than ``FAULTING`` pages a convnet step, and that median over the first
candidate's.

    .venv/bin/python bench/bench_malloc.py --candidate plain= \\
        --candidate pad=MALLOC_TOP_PAD_=67108864,MALLOC_MMAP_THRESHOLD_=33554432 \\
        [--servers 2] [--models convnet,mlp,autoencoder] [--rounds 3] [--steps 20] [--tree PATH]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402  (its servers, models and timing)

FAULTING = 1000  # faults a convnet step above which a process is in the fresh-heap state


def parse_candidate(text):
    name, _, settings = text.partition("=")
    env = {}
    for item in filter(None, settings.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--candidate {text!r}: {item!r} is not KEY=VALUE")
        env[key] = value
    return name, env


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", action="append", required=True, metavar="NAME=K=V,...")
    parser.add_argument("--servers", type=int, default=2, help="servers per candidate")
    parser.add_argument("--models", default="convnet,mlp,autoencoder")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--intra-op", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tree", help="the asyncflow tree the servers import (an export of "
                        "another commit); this one's by default")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    candidates = [parse_candidate(text) for text in args.candidate]
    base = bench_models.environments("as-is", tree=args.tree)[0][1]
    servers = []  # (candidate name, Server), interleaved
    for index in range(args.servers):
        for name, env in candidates:
            servers.append((name, bench_models.Server(
                f"{name}#{index}", sys.executable, "af", models, args.intra_op,
                {**base, **env})))
    print(f"load average at start: {os.getloadavg()}")
    rounds = {}
    for round_index in range(args.rounds):
        for model in models:
            shift = round_index % len(servers)
            for name, server in servers[shift:] + servers[:shift]:
                result = server.ask(model=model, steps=args.steps, nodes=False, trace=False)
                rounds.setdefault((model, server.label), []).append(
                    (result["step_ms"], result.get("faults_per_step", 0.0)))
    rss = {server.label: rss_mib(server.process.pid) for _, server in servers}
    for _, server in servers:
        server.close()
    print(f"load average at end: {os.getloadavg()}")
    print("per server: median step ms (faults a step), then RSS MiB after the rounds")
    medians = {}
    for name, env in candidates:
        print(f"\n{name}: {' '.join(f'{k}={v}' for k, v in env.items()) or '(as the caller)'}")
        labels = [server.label for n, server in servers if n == name]
        for label in labels:
            cells = "  ".join(
                f"{model} {np.median([t for t, _ in rounds[(model, label)]]):7.2f} "
                f"({np.median([f for _, f in rounds[(model, label)]]):5.0f})" for model in models)
            print(f"  {label:>16}: {cells}  | {rss[label]:6.0f} MiB")
        for model in models:
            medians[(name, model)] = float(np.median(
                [np.median([t for t, _ in rounds[(model, label)]]) for label in labels]))
        first = candidates[0][0]
        summary = "  ".join(f"{model} {medians[(name, model)]:7.2f} "
                            f"({medians[(name, model)] / medians[(first, model)]:.3f}x {first})"
                            for model in models)
        faulting = sum(np.median([f for _, f in rounds[("convnet", label)]]) > FAULTING
                       for label in labels) if "convnet" in models else 0
        print(f"  {'median':>16}: {summary}  | {np.median([rss[l] for l in labels]):6.0f} MiB"
              f"; faulting (convnet) {faulting} of {len(labels)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
