"""Why a round of ``bench_vs_tf1.py``'s parameter-server MLP step is slow (issue 34): the PS
MLP series in many short rounds, each printed with the counters that tell a slow round from a
fast one, in all three processes.

``--clusters`` times over, a fresh one-ps, one-worker cluster (``demos/local_cluster.py``, as
``bench_vs_tf1.py`` starts one a round; the client stays this one process, as there) first runs
what ``bench_vs_tf1``'s asyncflow side runs before its MLP (``--before full``: the local 64 MiB
reduce, 1010 trivial steps, the 64 MiB pulls, the chain; ``none``: nothing), then ``--rounds``
rounds, each a fresh session of the MLP step (64-128-10, batch 256, parameters on the ps) with
``bench_vs_tf1``'s 10 warm-up steps and ``--steps`` (100, its ``--quick`` count) timed ones.
``--between tf`` runs ``bench_vs_tf1``'s TF1 side (``--tf-python``) before each cluster and
prints its ``mlp_ms``: whether TF1's figure is slow in the same stretch as ours.

Per round, the line of ``bench_trivial_rounds.py`` (median, p10, p90, slow share, 100-step
windows, the vCPU probe, this client's bare waits and GC, each process's CPU, switches,
faults, schedstat, CPUs) and then, for the ps ``p`` and the worker ``w`` (a ``sitecustomize``
this script puts on their ``PYTHONPATH`` answers SIGUSR2 with its counters): their GC
collections and time, their bare waits by outcome (``bare_io.COUNTS``), and for all three the
codec's kept frame templates and header templates (a drop in a count: a cache cleared whole
when full, as ``transports.repeat_frames.forget_kept`` clears them) and the frames decoded
from a template.

Run: ``.venv/bin/python bench/bench_ps_rounds.py [--clusters 4] [--rounds 5] [--steps 100]
[--before full] [--between tf --tf-python <TF>] [--no-probe]``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))

_SITE = '''
import gc, json, os, signal, time
_gc = [0, 0.0, 0.0]  # collections, seconds, the current one's start
_out = os.environ.get("ASYNCFLOW_BENCH_COUNTERS")


def _watch(phase, info):
    if phase == "start":
        _gc[2] = time.perf_counter()
    else:
        _gc[0] += 1
        _gc[1] += time.perf_counter() - _gc[2]


def _dump(signum, frame):
    import sys
    out = {"gc": _gc[:2]}
    bare = sys.modules.get("transports.http.bare_io")
    out["waits"] = dict(bare.COUNTS) if bare else {}
    out.update(_codec())
    with open(os.path.join(_out, f"{os.getpid()}.json"), "w") as handle:
        json.dump(out, handle)


def _codec():
    import sys
    frames = sys.modules.get("transports.frame_templates")
    headers = sys.modules.get("transports.header_templates")
    out = {}
    if frames:
        out["frames"] = frames.statistics()
    if headers:
        out["headers"] = headers._count
    return out


if _out:
    gc.callbacks.append(_watch)
    signal.signal(signal.SIGUSR2, _dump)
'''


def _server_counters(tasks, folder):
    """{name: counters} of the ps and the worker (SIGUSR2, then their file)."""
    out = {}
    for name in ("ps", "worker"):
        path = os.path.join(folder, f"{tasks[name]}.json")
        if os.path.exists(path):
            os.unlink(path)
        os.kill(tasks[name], signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.002)  # (written whole: it is small)
        with open(path) as handle:
            out[name] = json.load(handle)
    return out


def _client_codec():
    from transports import frame_templates, header_templates
    return {"frames": frame_templates.statistics(), "headers": header_templates._count}


def _codec_line(before, after):
    frames_b, frames_a = before["frames"], after["frames"]
    return (f"kept {frames_b['kept']}->{frames_a['kept']} decoded "
            f"{frames_a['decoded'] - frames_b['decoded']} headers "
            f"{before['headers']}->{after['headers']}")


async def _before_mlp(spec):
    """bench_vs_tf1's asyncflow side up to its MLP, on this cluster (its --quick sizes)."""
    import asyncflow as af
    import bench_vs_tf1 as w
    (graph, p, doubled, big, small, big_sum, small_sum,
     local_graph, local_big, local_sum) = w._trivial_and_pull(af)
    async with af.Session(graph=local_graph) as local:
        await local.run(local_big.initializer)
        await w._timed(lambda: local.run(local_sum), 3, warmup=1)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(doubled, {p: 1.0})
        await w._aseries(lambda: sess.run(doubled, {p: 1.0}), w.WARMUP + w.TRIVIAL_STEPS)
        await sess.run([big.initializer, small.initializer])
        await sess.run(small_sum)
        await w._timed(lambda: sess.run(small_sum), 20)
        await sess.run(big_sum)
        await w._timed(lambda: sess.run(big_sum), 3, warmup=1)
    graph, p, twice = w._chain(af)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(twice, {p: 1.0})
        await w._timed(lambda: sess.run(twice, {p: 1.0}), 20)


async def _measure(spec, args, label, folder):
    import asyncflow as af
    import bench_vs_tf1 as w
    from bench_spin_policy import _tasks
    from bench_trivial_rounds import _GcWatch, _print, _round
    cluster = {"ps": spec["ps"], "worker": spec["worker"]}
    if args.before == "full":
        await _before_mlp(cluster)
    tasks = _tasks()
    watch = _GcWatch()
    gc.callbacks.append(watch)
    loadavg = os.open("/proc/loadavg", os.O_RDONLY)
    xs, ys = w._mlp_data()
    g, x, y, loss, train, init = w._mlp(af, 0)
    medians = []
    try:
        for n in range(args.rounds):
            servers, client = _server_counters(tasks, folder), _client_codec()
            async with af.Session(graph=g, cluster=cluster) as sess:
                await sess.run(init)
                await sess.run([loss, train], {x: xs, y: ys})
                for _ in range(w.WARMUP):
                    await sess.run([loss, train], {x: xs, y: ys})
                result = await _round(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                      args.steps, tasks, watch, loadavg, args)
            after, client_after = _server_counters(tasks, folder), _client_codec()
            medians.append(result["median"])
            _print(f"{label} round {n + 1}", result)
            parts = []
            for name in ("ps", "worker"):
                b, a = servers[name], after[name]
                waits = " ".join(f"{k} {a['waits'].get(k, 0) - b['waits'].get(k, 0)}"
                                 for k in a["waits"])
                parts.append(f"{name[0]} gc {a['gc'][0] - b['gc'][0]} "
                             f"({(a['gc'][1] - b['gc'][1]) * 1e3:.2f} ms) waits {waits} "
                             f"codec {_codec_line(b, a)}")
            parts.append(f"c codec {_codec_line(client, client_after)}")
            print(f"   servers: {' | '.join(parts)}", flush=True)
    finally:
        gc.callbacks.remove(watch)
        os.close(loadavg)
    print(f"{label}: round medians (ms) {' '.join(f'{m:.3f}' for m in medians)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--before", choices=("none", "full"), default="full")
    parser.add_argument("--between", choices=("none", "tf"), default="none")
    parser.add_argument("--tf-python", default=None, help="a Python with tensorflow")
    parser.add_argument("--no-probe", dest="probe", action="store_false")
    parser.add_argument("--sample-every", type=int, default=10)
    args = parser.parse_args()
    args.pause_ms, args.dump = 0.0, ""  # (bench_trivial_rounds' _round reads them)
    sys.path.insert(0, _HERE)
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import bench_vs_tf1 as w
    import local_cluster as cluster_module
    import trio
    tf_python = w.find_tf_python(args.tf_python) if args.between == "tf" else None
    if args.between == "tf" and tf_python is None:
        parser.error("--between tf: no --tf-python")
    base_env = cluster_module._ENV
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "sitecustomize.py"), "w") as handle:
            handle.write(_SITE)
        path = os.pathsep.join(filter(None, [folder, base_env.get("PYTHONPATH", "")]))
        for k in range(args.clusters):
            if tf_python:
                theirs = w.run_tf(tf_python, True, [1])
                print(f"-- TF1 before cluster {k + 1}: mlp_ms {theirs['mlp_ms']:.3f}",
                      flush=True)
            with open("/proc/loadavg") as handle:
                load = handle.read().split()[0]
            print(f"-- cluster {k + 1} (load {load})", flush=True)
            cluster_module._ENV = {**base_env, "PYTHONPATH": path,
                                   "ASYNCFLOW_BENCH_COUNTERS": folder}
            try:
                with cluster_module.local_cluster({"ps": 1, "worker": 1}) as spec:
                    cluster_module._ENV = base_env
                    trio.run(_measure, spec, args, f"cluster {k + 1}", folder)
            finally:
                cluster_module._ENV = base_env


if __name__ == "__main__":
    main()
