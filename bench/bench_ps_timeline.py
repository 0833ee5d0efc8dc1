"""The parameter-server MLP step's timeline across its three processes (issue 34).

The workload is ``bench_vs_tf1.py``'s MLP (64-128-10, batch 256; w1/b1/w2/b2 on
``/job:ps/task:0``, forward + backward + SGD on ``/job:worker/task:0``, the session here). One
ps and one worker process (``af.Server`` each, started by this script with ``--serve``) and the
client in this process record timestamps of the step's events with ``time.perf_counter_ns``
(CLOCK_MONOTONIC on Linux, so the three processes' clocks are comparable on one host):

- client: each RunGraph sent and its reply (per task);
- each task: a RunGraph's handler entered and returned, a RecvTensors served (entered,
  returned), a pull sent and answered, the step's partition run (start, end), and a push
  sent / received where the tree pushes;

After the table, each process's CPU per step (``time.process_time``, from the ps's and the
worker's start-up to their end, over the measured and the 20 warm-up steps; the client's over
the measured steps) and its cyclic GC's collections per generation and their time
(``gc.callbacks``): per-step work the GC has to free shows there.

The probe wraps methods by name (``WorkerService.run_graph``, ``recv_tensors`` and, where
present, ``push_tensors``; ``StepRendezvous._request`` and, where present, ``_push``), so it
runs against an export of an older tree as well (``--tree``). It prints, per event, the
median offset from the step's start (the client sending its first RunGraph) over the measured
steps, and the step's median wall; the sequential hops are read off that table.

Run: ``.venv/bin/python bench/bench_ps_timeline.py [--steps 200] [--tree PATH]``.
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
EVENTS = []  # (perf_counter_ns, step_id, name)
GC = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0]}  # per generation
_GC_START = [0.0]
WARM_UP = 20


def _count_gc(phase, info):
    if phase == "start":
        _GC_START[0] = time.perf_counter()
    else:
        GC["collections"][info["generation"]] += 1
        GC["seconds"][info["generation"]] += time.perf_counter() - _GC_START[0]


_LAST_STEP = [0]


def _note(step_id, name):
    """Record an event; ``step_id`` -1: the step of the last event (one step at a time)."""
    if step_id == -1:
        step_id = _LAST_STEP[0]
    _LAST_STEP[0] = step_id
    EVENTS.append((time.perf_counter_ns(), step_id, name))


def _wrap_async(cls, method, name, step_of):
    original = getattr(cls, method, None)
    if original is None:
        return

    async def wrapped(self, *args, **kwargs):
        step = step_of(self, *args)
        _note(step, f"{name}>")
        try:
            return await original(self, *args, **kwargs)
        finally:
            _note(step, f"{name}<")

    setattr(cls, method, wrapped)


def _instrument_task(task_label):
    from asyncflow.cluster import remote_rendezvous, worker
    _wrap_async(worker.WorkerService, "run_graph_in_scope", f"{task_label}.RunGraph",
                lambda self, request, scope: request.step_id)  # (run_graph calls it too)
    _wrap_async(worker.WorkerService, "recv_tensors", f"{task_label}.serve_RecvTensors",
                lambda self, request: request.step_id)
    _wrap_async(worker.WorkerService, "push_tensors", f"{task_label}.serve_PushTensors",
                lambda self, request: request.step_id)
    _wrap_async(remote_rendezvous.StepRendezvous, "_request", f"{task_label}.pull",
                lambda self, *args: self.step_id)
    _wrap_async(remote_rendezvous.StepRendezvous, "_push", f"{task_label}.push",
                lambda self, *args: self.step_id)
    from transports.http import bare
    original_send = bare.BareService._send

    async def send(self, conn, call_id, kind, buffers, lend):
        _note(-1, f"{task_label}.reply_written>")
        try:
            return await original_send(self, conn, call_id, kind, buffers, lend)
        finally:
            _note(-1, f"{task_label}.reply_written<")

    bare.BareService._send = send
    _probe_bare_io(task_label)
    original_run = worker.WorkerService._execute

    async def execute(self, state, *args, **kwargs):
        _note(state.step_id, f"{task_label}.partition>")
        try:
            return await original_run(self, state, *args, **kwargs)
        finally:
            _note(state.step_id, f"{task_label}.partition<")

    worker.WorkerService._execute = execute


def _probe_bare_io(label):
    """Each process's writev of a bare message (its size in the name: a RunGraph, a push, a
    reply) and, on a server, each request's read: from its header taken (the process woken
    with it) to its frame decoded, noted under the step the frame names."""
    from transports.http import bare, bare_io

    def probed(original):
        def write_now(sock, pieces):
            name = f"{label}.writev[{sum(map(len, pieces)) // 1024}K]"
            _note(-1, f"{name}>")
            try:
                return original(sock, pieces)
            finally:
                _note(-1, f"{name}<")
        return write_now

    # (bare's name: a server's answers, and an older tree's requests; bare_io's: a newer
    # tree's requests, written by its ``write_request``)
    bare._write_now, bare_io.write_now = probed(bare._write_now), probed(bare_io.write_now)
    original_read = bare.BareService._read_request

    async def read_request(self, conn, rpc, length, timeout):
        start = time.perf_counter_ns()
        message = await original_read(self, conn, rpc, length, timeout)
        step = getattr(message, "step_id", None)
        if step is not None:
            EVENTS.append((start, step, f"{label}.read_{rpc.method}>"))
            _note(step, f"{label}.read_{rpc.method}<")
        return message

    bare.BareService._read_request = read_request


def serve(spec_json, job, out_path):
    import trio

    import asyncflow as af
    _instrument_task(job)

    started = [0.0]

    def dump(*_):
        with open(out_path, "w") as handle:
            json.dump({"events": EVENTS, "gc": GC,
                       "cpu_s": time.process_time() - started[0]}, handle)
        os._exit(0)

    signal.signal(signal.SIGTERM, dump)

    async def main():
        async with af.Server(json.loads(spec_json), job, 0) as server:
            started[0] = time.process_time()
            gc.callbacks.append(_count_gc)
            print("listening on", server.address, flush=True)
            await trio.sleep_forever()

    trio.run(main)


def _mlp_graph(af):
    sys.path.insert(0, _HERE)
    from bench_vs_tf1 import _mlp, _mlp_data
    return _mlp(af, 0), _mlp_data()


async def client(spec, steps):
    import asyncflow as af
    from asyncflow.cluster import master
    original = master.StepDriver._call

    async def call(self, task, tg, request, timeout, *rest):  # (rest: a newer tree's scope)
        _note(request.step_id, f"client.RunGraph[{task.name.split('/')[1][4:]}]>")
        try:
            return await original(self, task, tg, request, timeout, *rest)
        finally:
            _note(request.step_id, f"client.RunGraph[{task.name.split('/')[1][4:]}]<")

    master.StepDriver._call = call
    _probe_bare_io("client")
    (g, x, y, loss, train, init), (xs, ys) = _mlp_graph(af)
    walls = []
    async with af.Session(graph=g, cluster=spec) as sess:
        await sess.run(init)
        for _ in range(WARM_UP):
            await sess.run([loss, train], {x: xs, y: ys})
        EVENTS.clear()
        gc.callbacks.append(_count_gc)
        cpu = time.process_time()
        for _ in range(steps):
            start = time.perf_counter_ns()
            await sess.run([loss, train], {x: xs, y: ys})
            walls.append(time.perf_counter_ns() - start)
        cpu = time.process_time() - cpu
        gc.callbacks.remove(_count_gc)
    return walls, {"gc": GC, "cpu_s": cpu}


def measure(steps, tree, tmp):
    import trio
    from reserved_ports import free_ports  # (ports no test or other benchmark draws)
    ps, worker = free_ports(2)
    spec = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}
    env = {**os.environ, **_ONE_THREAD, "PYTHONPATH": tree}
    procs = {}
    try:
        for job in ("ps", "worker"):
            path = os.path.join(tmp, f"{job}.json")
            procs[job] = (subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--serve", json.dumps(spec), job,
                 path], stdout=subprocess.PIPE, text=True, env=env, cwd=tree), path)
            line = procs[job][0].stdout.readline()
            if "listening" not in line:
                raise RuntimeError(f"the {job} process did not start")
        walls, figures = trio.run(client, spec, steps)
    finally:
        for proc, _ in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in procs.values():
            proc.wait(timeout=30)
    events = list(EVENTS)
    processes = {"client": figures}
    for job, (_, path) in procs.items():
        with open(path) as handle:
            dumped = json.load(handle)
        events += [tuple(e) for e in dumped["events"]]
        processes[job] = {"gc": dumped["gc"], "cpu_s": dumped["cpu_s"]}
    return walls, events, processes


def process_table(processes, steps):
    """Each process's CPU per step and its GC collections (see the module docstring)."""
    for name, figures in processes.items():
        counted = steps if name == "client" else steps + WARM_UP
        collections_, seconds = figures["gc"]["collections"], figures["gc"]["seconds"]
        print(f"{name:>7}: CPU {figures['cpu_s'] / counted * 1e6:.0f} us a step; GC "
              f"collections (gen 0/1/2) {'/'.join(map(str, collections_))}, "
              f"{sum(seconds) * 1e3:.1f} ms in all (generation 2: "
              f"{seconds[2] / max(collections_[2], 1) * 1e3:.1f} ms a collection)")


def table(walls, events):
    by_step = collections.defaultdict(list)
    for ns, step, name in events:
        by_step[step].append((ns, name))
    offsets = collections.defaultdict(list)
    for step, items in by_step.items():
        starts = [ns for ns, name in items if name.startswith("client.RunGraph") and
                  name.endswith(">")]
        if not starts:
            continue
        t0 = min(starts)
        seen = collections.Counter()
        for ns, name in sorted(items):
            seen[name] += 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            offsets[label].append((ns - t0) / 1000)
    rows = sorted(((statistics.median(v), k, len(v)) for k, v in offsets.items()))
    print(f"step wall: median {statistics.median(walls) / 1e3:.0f} us, "
          f"p10 {sorted(walls)[len(walls) // 10] / 1e3:.0f} us over {len(walls)} steps")
    print(f"{'us from the first RunGraph sent':>34}  event (count)")
    for median, name, count in rows:
        print(f"{median:>34.0f}  {name} ({count})")
    return rows


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tree", default=os.path.join(_HERE, ".."),
                        help="the asyncflow tree the three processes run (default: this one)")
    args = parser.parse_args()
    tree = os.path.abspath(args.tree)
    sys.path.insert(0, tree)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        walls, events, processes = measure(args.steps, tree, tmp)
    table(walls, events)
    process_table(processes, args.steps)


if __name__ == "__main__":
    main()
