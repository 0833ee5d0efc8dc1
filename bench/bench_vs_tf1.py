"""asyncflow's distributed runtime against TF1's gRPC runtime, same workloads, same run.

Workloads (one ps and worker processes on loopback; one BLAS thread per asyncflow worker):

* **trivial**: fetch ``p * 2.0`` computed on ``/job:worker/task:0`` from a fed scalar
  (per-step fixed cost of the distributed path), the median of ``TRIVIAL_STEPS`` (1000) steps
  in both modes, as many as Ray's side times. ``trivial_first_ms``: the median of its
  ``WARMUP`` untimed steps, the process's first remote steps.

Every timed series (both frameworks) follows ``WARMUP`` (10) untimed steps of the same
workload (one for the 64 MiB pulls): step times are the steady state a training loop sees.
* **pull**: a 64 MiB float32 variable on the ps, ``reduce_sum`` on the worker. Throughput =
  64 MiB / (step - the same step with a 4-element variable - a local 64 MiB reduce, each
  measured in the same framework), next to a raw loopback socket moving 64 MiB between two
  processes (``sendall``/``recv_into``), measured in the same run. Once the pull takes a
  few ms, the local reduce subtracted is as large as it and measured elsewhere (another
  session, memory not just written), so ``pull_mib_s`` swings widely; ``pull_and_reduce_mib_s``
  = 64 MiB / (step - the small step) counts the remote reduce as part of the pull: a lower
  bound, the same for both frameworks. ``worker_unix_conns`` /
  ``worker_tcp_conns`` (asyncflow only, Linux): the worker process's connected Unix and TCP
  sockets after the pulls (read from ``/proc``): the pulls from the ps take the same-host Unix
  socket when the first is above 0 and the second is 0.
* **mlp**: MLP 64-128-10, batch 256, parameters on the ps, forward + backward + SGD update
  on the worker side (updates colocated with the parameters, as TF places them); one step
  fetches the loss and runs the train op. ``mlp_requests_per_step`` (asyncflow only): the
  step's calls, one RunGraph per task plus the RecvTensors and PushTensors the workers counted.
* **batch sweep**: the same MLP step at batch 1, 64 and 256 (a 256 B, 16 KiB and 64 KiB
  feed), interleaved step by step so each size sees the same load: the issue-15 "cliff" check
  (``mlp_b256_over_b1`` near 1: no stall; a 40 ms delayed-ACK stall would make it several).
* **chain**: ``p * 2.0`` on ``/job:worker/task:0``, then ``* 2.0`` again on ``/job:ps/task:0``,
  fetched: a step through two tasks in turn (Ray's two-actor chain below).
* **scaling**: steps/s of the MLP step with 1, 2 and 4 worker processes against one ps,
  between-graph replication (one client session per worker, all in one client process,
  running concurrently). On a 2-core machine this measures contention, not scaling.

TF1 side: ``tf.compat.v1`` graphs, ``tf.distribute.Server`` processes, a ``grpc://`` session
on worker 0 (the master). TensorFlow is never imported here: the TF side runs this same file
in the interpreter given by ``--tf-python`` or the ``ASYNCFLOW_TF_PYTHON`` environment
variable (any Python with ``tensorflow`` importable); without one, only asyncflow's figures
are printed. Each of ``--runs`` rounds measures both frameworks back to back and prints
ratios (asyncflow / TF1: below 1 is faster for step times, above 1 is faster for throughput);
the summary gives median [min-max] over the rounds.

Ray side (``--ray-python`` or ``ASYNCFLOW_RAY_PYTHON``: any Python with ``ray`` importable; never
a dependency of this project): Ray's Compiled Graphs (``ray.dag``, ``experimental_compile``)
with actors in their own processes on this machine, in each round after TF1's: ``trivial_ms``
(one actor doubles the input) and ``chain_ms`` (two actors in turn), each the median of
``--ray-steps`` executions after 100 warm-up ones; printed as ``ray_trivial_ms`` and
``ray_chain_ms`` beside asyncflow's ``trivial_ms`` and ``chain_ms`` with their ratios.
Without one, the Ray columns are skipped and the reason is printed.

**Issue 34's "within 1.5x of Ray" is judged on ``trivial_over_ray_il``**, not on the sequential
``trivial_over_ray`` (still printed): both frameworks' trivial step follows the host's phase (on
the 2-core VM ours reads 0.05-0.06 ms or ~0.10-0.17 ms for hundreds of steps, with no other
process runnable and no steal), Ray's is drawn per compiled graph (~0.05 or ~0.15 ms, kept for
thousands of steps), and the sequential figures are one draw each taken 20-40 s apart, so a
round's ratio read which phase each side drew (0.3x to 2.9x for the same trees: bench/RESULTS.md).
Both cannot run at once either: Ray's compiled-graph actor spins a core while its graph is
compiled. So at the end of each round's asyncflow side, on the same cluster,
``bench_trivial_vs_ray.py`` times ours and Ray's in alternating chunks (10 of 100 steps, 30
untimed before each; Ray's graph compiled once before the series and kept, as a Ray user runs
it, and torn down after it, which stops its actor's spin; Ray's processes, its spinning actor
included, stopped during our chunks) and prints
``trivial_il_ms``, ``ray_trivial_il_ms``, ``trivial_over_ray_il``, an A/A of each side's odd
chunks over its even ones (``il_aa_ours``, ``il_aa_ray``) and its fairness checks (that module's
docstring). Every process of that Ray child is gone before the round goes on.

**Issue 34's "PS MLP at most 0.7x TF1" is judged on ``ps_mlp_over_tf1_il``**, not on the
sequential ``mlp_ms`` ratio (still printed) for the same reason: both frameworks' PS step follows
the host's phase (a round's step tracks its three processes' CPU time a step, up to ~1.9x apart
for the same work: bench/RESULTS.md, c48ps), and the sequential figures are timed 20-40 s apart,
so one side could meet a slow phase the other missed (a round at 0.785 whose trivial step read
0.09 ms against 0.05 beside it). So after the scaling series, on the same cluster,
``bench_ps_tf1_rounds.py`` times ours and TF1's (a fresh TF1 cluster and ``grpc://`` session in
a child of the TF interpreter, up for the series only) in alternating chunks (10 of 30 steps
a side, 20 untimed before each) and prints ``mlp_il_ms``, ``tf1_mlp_il_ms``,
``ps_mlp_over_tf1_il``, the A/As ``il_aa_ours_mlp`` and ``il_aa_tf1_mlp``, what each idle side
burnt during the other's chunks (``il_tf1_idle_cpu``, ``il_ours_idle_cpu``, in cores) and
``tf1_left_killed``; beside them ``mlp_il_over_seq`` and ``tf1_mlp_il_over_seq``, each side's
interleaved median over its sequential one in the round: near 1 for both over many rounds, but
a round's figure reads 0.66-1.45 with the host's phase, as the sequential one does, so it is no
fairness check of a round; ``bench_ps_tf1_il_check.py`` is (the two forms alternated in one
process, seconds apart, with an A/A, and the mean and p90 beside the median).

Ray's compiled graph waits by spinning: its shared-memory channel's reader (the actor waiting
for its input, the driver in ``ray.get``) loops on ``sched_yield`` and a ``sem_trywait`` until
the value is there (strace of the actor over 2,000 steps: 110,109 ``sched_yield`` calls, no
blocking wait per step). Where another process is runnable the yield hands it the core and the
step is a sequence of turns on one core (0.14-0.15 ms here at a 1-minute load of 3.3, the same
pinned to one CPU); where the machine is quiet the driver and the actor spin on two cores and a
round can read 0.08 ms. asyncflow's same-host calls spin by default too (a 200 us window,
``ASYNCFLOW_BARE_SPIN_US``; parking at once where the machine has no core to spare or the step
has more than one peer: bench/RESULTS.md), so ``trivial_ms`` against ``ray_trivial_ms`` is
like for like; set ``ASYNCFLOW_BARE_SPIN_US=0`` in this script's environment for the parking
figure. ``trivial_spin_ms`` times the same trivial series in a second cluster whose processes
(and this client's step, in a child process) run with ``ASYNCFLOW_BARE_SPIN_US=--spin-us``
(200; 0 skips it), printed beside ``trivial_spin_over_ray``. ``trivial_ms`` and
``trivial_over_ray`` are the default's (issue 34's target).

Run: ``.venv/bin/python bench/bench_vs_tf1.py [--quick] [--runs 3] [--tf-python PATH]
[--ray-python PATH]``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

from raw_socket import raw_socket_mib_s  # same folder (the script's directory is on sys.path)
from reserved_ports import free_ports

_HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
BIG = 16 * MIB  # float32 elements: 64 MiB
BATCH = 256
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _spec(workers):
    ps, *ports = free_ports(1 + workers)  # (ports no test or other benchmark draws)
    return {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{port}" for port in ports]}


def _mlp_data(batch=BATCH):
    rng = np.random.default_rng(0)
    return (rng.random((batch, 64), dtype=np.float32),
            rng.integers(0, 10, batch).astype(np.int32))


def _init_params():
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((64, 128)) * 0.1).astype(np.float32),
            np.zeros(128, np.float32),
            (rng.standard_normal((128, 10)) * 0.1).astype(np.float32),
            np.zeros(10, np.float32)]


def _trivial_and_pull(fw):
    """The trivial and pull workloads' graphs, built with ``fw`` (``asyncflow`` or
    ``tf.compat.v1``). Returns (graph, p, doubled, big, small, big_sum, small_sum) of the
    distributed graph, then (local_graph, local_big, local_sum) of the local reduce baseline."""
    graph = fw.Graph()
    with graph.as_default():
        p = fw.placeholder(fw.float32, [], name="p")
        with fw.device("/job:worker/task:0"):
            doubled = p * 2.0
        with fw.device("/job:ps/task:0"):
            big = fw.Variable(fw.zeros([BIG], fw.float32), name="big")
            small = fw.Variable(fw.zeros([4], fw.float32), name="small")
        with fw.device("/job:worker/task:0"):
            big_sum, small_sum = fw.reduce_sum(big), fw.reduce_sum(small)
    local_graph = fw.Graph()
    with local_graph.as_default():
        local_big = fw.Variable(fw.zeros([BIG], fw.float32))
        local_sum = fw.reduce_sum(local_big)
    return graph, p, doubled, big, small, big_sum, small_sum, local_graph, local_big, local_sum


def _chain(fw):
    """The chain workload: (graph, p, twice) with ``p * 2.0`` on the worker, then ``* 2.0`` on
    the ps, so a step runs on two tasks in turn."""
    graph = fw.Graph()
    with graph.as_default():
        p = fw.placeholder(fw.float32, [], name="p")
        with fw.device("/job:worker/task:0"):
            doubled = p * 2.0
        with fw.device("/job:ps/task:0"):
            twice = doubled * 2.0
    return graph, p, twice


def _mlp(fw, worker):
    """The MLP step's graph for one worker; returns (graph, x, y, loss, train, init).

    ``fw`` is ``asyncflow`` or ``tf.compat.v1``: the builders have the same names in both, so
    both frameworks build the same workload from this one function."""
    graph = fw.Graph()
    with graph.as_default():
        with fw.device("/job:ps/task:0"):
            params = [fw.Variable(v, name=n) for v, n in zip(_init_params(),
                                                               ["w1", "b1", "w2", "b2"])]
        with fw.device(f"/job:worker/task:{worker}"):
            x = fw.placeholder(fw.float32, [None, 64], name="x")
            y = fw.placeholder(fw.int32, [None], name="y")
            w1, b1, w2, b2 = params
            logits = fw.matmul(fw.nn.relu(fw.matmul(x, w1) + b1), w2) + b2
            loss = fw.reduce_mean(fw.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            train = fw.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = fw.group(*[p.initializer for p in params])
    return graph, x, y, loss, train, init


SWEEP = (1, 64, 256)  # batch sizes of the interleaved MLP sweep (256: a 64 KiB feed)


def _sweep_figures(times):
    """Median step per batch size of the interleaved sweep, and batch 256 over batch 1."""
    medians = {b: statistics.median(t) for b, t in times.items()}
    out = {f"mlp_b{b}_ms": m * 1e3 for b, m in medians.items()}
    out["mlp_b256_over_b1"] = medians[256] / medians[1]
    return out


# Untimed steps before each timed series, the same for both frameworks (Ray's side takes
# 100): a process's first remote steps cost more (the first ~8 trivial steps of a fresh
# asyncflow client 0.4-0.6 ms against 0.30-0.31 after, while a second session in the same
# process starts at the steady figure: process-wide warm-up such as CPython specialising a
# function after it has run 8 times), and a training loop lives at the steady state. What
# the first steps cost is printed apart (``trivial_first_ms``, the median of the first
# remote workload's warm-up steps).
WARMUP = 10
TRIVIAL_STEPS = 1000


def _series(fn, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _median_time(fn, repeats, warmup=WARMUP):
    return statistics.median(_series(fn, warmup + repeats)[warmup:])


def _sizes(quick):
    # The trivial step is timed over as many steps as Ray's compiled graph (``--ray-steps``
    # default) in both modes, and the PS MLP over 100 / 200: a 20-step median (0.005 s of
    # trivial steps) fell inside one of this machine's fast or slow phases, so a round's
    # ratio to another framework's 1000-step median said more about the phase than the step.
    return {"repeats": 20 if quick else 100, "big_rounds": 3 if quick else 7,
            "trivial_steps": TRIVIAL_STEPS, "mlp_steps": 100 if quick else 200,
            "scaling_s": 1.5 if quick else 4.0}


# ----------------------------------------------------------------------------- asyncflow side


def asyncflow_side(quick, worker_counts, ray_python=None, tf_python=None):
    sys.path.insert(0, os.path.join(_HERE, ".."))
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import trio
    from local_cluster import local_cluster
    sizes = _sizes(quick)
    out = {}
    with local_cluster({"ps": 1, "worker": max(worker_counts)}) as spec:
        trio.run(_asyncflow_measure, spec, sizes, worker_counts, out, ray_python, tf_python)
    return out


async def _aseries(fn, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return times


async def _timed(fn, repeats, warmup=WARMUP):
    return statistics.median((await _aseries(fn, warmup + repeats))[warmup:])


def _connections(address):
    """(connected Unix sockets, established TCP sockets) of the worker process serving
    ``address`` on this host, read from /proc; (-1, -1) where that cannot be read."""
    try:
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
        for pid in pids:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
                if b"worker" in argv and b"--job" in argv and \
                        argv[argv.index(b"--job") + 1] == b"worker" and address.encode() in \
                        b" ".join(argv):
                    break
        else:
            return -1, -1
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        counts = []
        for table, inode_col, state_col, connected in (("unix", 6, 5, "03"), ("tcp", 9, 3, "01")):
            rows = [line.split() for line in open(f"/proc/{pid}/net/{table}").read()
                    .splitlines()[1:]]
            counts.append(sum(1 for r in rows if len(r) > inode_col and r[inode_col] in inodes
                              and r[state_col] == connected))
        return tuple(counts)
    except OSError:
        return -1, -1


async def _pull_requests(cluster):
    """The RecvTensors and PushTensors requests every task of ``cluster`` has made (Health's
    statistics; a tree without pushes counts none)."""
    from asyncflow.cluster import channels
    total = 0
    for addresses in cluster.values():
        for address in addresses:
            async with channels.connect(address) as channel:
                stats = (await channel.health(timeout=30)).stats
                total += stats.pull_requests + getattr(stats, "push_requests", 0)
    return total


async def _asyncflow_measure(spec, sizes, worker_counts, out, ray_python=None,
                             tf_python=None):
    import trio

    import asyncflow as af
    repeats = sizes["repeats"]
    (graph, p, doubled, big, small, big_sum, small_sum,
     local_graph, local_big, local_sum) = _trivial_and_pull(af)
    trivial = graph, p, doubled
    async with af.Session(graph=local_graph) as local:
        await local.run(local_big.initializer)
        local_reduce = await _timed(lambda: local.run(local_sum), sizes["big_rounds"],
                                    warmup=1)
    cluster = {"ps": spec["ps"], "worker": spec["worker"]}
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(doubled, {p: 1.0})
        times = await _aseries(lambda: sess.run(doubled, {p: 1.0}),
                              WARMUP + sizes["trivial_steps"])
        out["trivial_first_ms"] = statistics.median(times[:WARMUP]) * 1e3
        out["trivial_ms"] = statistics.median(times[WARMUP:]) * 1e3
        await sess.run([big.initializer, small.initializer])
        await sess.run(small_sum)
        small_step = await _timed(lambda: sess.run(small_sum), repeats)
        await sess.run(big_sum)
        big_step = await _timed(lambda: sess.run(big_sum), sizes["big_rounds"], warmup=1)
        out["pull_mib_s"] = 64 / max(big_step - small_step - local_reduce, 1e-9)
        out["pull_and_reduce_mib_s"] = 64 / max(big_step - small_step, 1e-9)
        out["pull_step_ms"] = big_step * 1e3
        out["worker_unix_conns"], out["worker_tcp_conns"] = _connections(spec["worker"][0])
    graph, p, twice = _chain(af)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(twice, {p: 1.0})
        out["chain_ms"] = await _timed(lambda: sess.run(twice, {p: 1.0}), repeats) * 1e3
    xs, ys = _mlp_data()
    mlp = _mlp(af, 0)
    g, x, y, loss, train, init = mlp
    async with af.Session(graph=g, cluster=cluster) as sess:
        await sess.run(init)
        await sess.run([loss, train], {x: xs, y: ys})
        pulls = await _pull_requests(cluster)
        out["mlp_ms"] = await _timed(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                     sizes["mlp_steps"]) * 1e3
        # Requests per step: a RunGraph per task, plus the pulls and pushes the workers counted.
        out["mlp_requests_per_step"] = 2 + (await _pull_requests(cluster) - pulls) / \
            (WARMUP + sizes["mlp_steps"])
        sweep = {b: _mlp_data(b) for b in SWEEP}
        times = {b: [] for b in SWEEP}
        for _ in range(sizes["mlp_steps"] // 2):  # interleaved: every batch sees the same load
            for b, (bx, by) in sweep.items():
                start = time.perf_counter()
                await sess.run([loss, train], {x: bx, y: by})
                times[b].append(time.perf_counter() - start)
        out.update(_sweep_figures(times))
    for n in worker_counts:
        replicas = [_mlp(af, w) for w in range(n)]
        counts = [0] * n
        async with contextlib.AsyncExitStack() as stack:
            sessions = [await stack.enter_async_context(af.Session(graph=r[0], cluster=cluster))
                        for r in replicas]
            await sessions[0].run(replicas[0][5])
            for sess, (_, x, y, loss, train, _) in zip(sessions, replicas):
                await sess.run([loss, train], {x: xs, y: ys})

            async def loop(i, deadline):
                _, x, y, loss, train, _ = replicas[i]
                while time.perf_counter() < deadline:
                    await sessions[i].run([loss, train], {x: xs, y: ys})
                    counts[i] += 1

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(loop, i, start + sizes["scaling_s"])
            out[f"scaling_{n}w_steps_s"] = sum(counts) / (time.perf_counter() - start)
    if tf_python:  # TF1's cluster is up only for this series, and gone after it
        from bench_ps_tf1_rounds import mlp_interleaved
        try:
            out.update(await mlp_interleaved(af, cluster, tf_python, mlp))
        except RuntimeError as exc:
            print(f"interleaved PS MLP series against TF1 failed: {exc}")
    if ray_python:  # last: Ray's processes are up only for this series, and gone after it
        from bench_trivial_vs_ray import trivial_interleaved
        try:
            out.update(await trivial_interleaved(af, cluster, ray_python, trivial))
        except RuntimeError as exc:
            print(f"interleaved series against Ray failed: {exc}")
    return out


# ----------------------------------------------------------------------------- spin side
# Runs in a child process (``--spin-side``) whose environment turns the same-host spin on, so
# that its cluster's processes (``local_cluster`` passes the environment on) and its client
# spin, as Ray's compiled graph does.


def spin_side(steps):
    return on_local_cluster(_spin_measure, steps)


def on_local_cluster(measure, *args):
    """``out`` after ``trio.run(measure, spec, *args, out)`` on a local cluster of one ps and
    one worker (``spec``), started with this process's environment (the spin as it is set
    here); bench_spin_policy.py's child measures this way too."""
    sys.path.insert(0, os.path.join(_HERE, ".."))
    sys.path.insert(0, os.path.join(_HERE, "..", "demos"))
    import trio
    from local_cluster import local_cluster
    out = {}
    with local_cluster({"ps": 1, "worker": 1}) as spec:
        trio.run(measure, spec, *args, out)
    return out


async def _spin_measure(spec, steps, out):
    import asyncflow as af
    from transports.http.bare_io import spin_window_s
    graph, p, doubled = _trivial_and_pull(af)[:3]
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(doubled, {p: 1.0})
        times = await _aseries(lambda: sess.run(doubled, {p: 1.0}), WARMUP + steps)
    out["trivial_spin_ms"] = statistics.median(times[WARMUP:]) * 1e3
    out["spin_window_us"] = spin_window_s() * 1e6  # (the child's own reading: not 0)


def run_spin(spin_us, steps):
    command = [sys.executable, os.path.abspath(__file__), "--spin-side", "--ray-steps",
               str(steps)]
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            env={**os.environ, "ASYNCFLOW_BARE_SPIN_US": str(spin_us)})
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        print(f"spin side failed (exit {result.returncode}): {result.stderr[-2000:]}")
        return None
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- TF1 side
# Runs in the TF interpreter (``--tf-side``): imports tensorflow, never asyncflow.

_TF_SERVER = """
import json, sys, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
spec, job, index = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=index,
                              protocol="grpc", start=True)
print("ready", flush=True)
server.join()
"""


def _wait_port(address, deadline):
    host, port = address.rsplit(":", 1)
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"TF server at {address} did not start")


def tf_side(quick, worker_counts):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    sizes = _sizes(quick)
    spec = _spec(max(worker_counts))
    procs = [subprocess.Popen([sys.executable, "-c", _TF_SERVER, json.dumps(spec), job, str(i)],
                              stdout=subprocess.DEVNULL, env={**os.environ})
             for job, addresses in spec.items() for i in range(len(addresses))]
    try:
        deadline = time.monotonic() + 120
        for addresses in spec.values():
            for address in addresses:
                _wait_port(address, deadline)
        return _tf_measure(tf, tf1, spec, sizes, worker_counts)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _tf_measure(tf, tf1, spec, sizes, worker_counts):
    import threading
    out = {}
    repeats = sizes["repeats"]
    target = f"grpc://{spec['worker'][0]}"
    (graph, p, doubled, big, small, big_sum, small_sum,
     local_graph, local_big, local_sum) = _trivial_and_pull(tf1)
    with tf1.Session(graph=local_graph) as local:
        local.run(local_big.initializer)
        local.run(local_sum)
        local_reduce = _median_time(lambda: local.run(local_sum), sizes["big_rounds"],
                                    warmup=1)
    with tf1.Session(target, graph=graph) as sess:
        sess.run(doubled, {p: 1.0})
        times = _series(lambda: sess.run(doubled, {p: 1.0}), WARMUP + sizes["trivial_steps"])
        out["trivial_first_ms"] = statistics.median(times[:WARMUP]) * 1e3
        out["trivial_ms"] = statistics.median(times[WARMUP:]) * 1e3
        sess.run([big.initializer, small.initializer])
        sess.run(small_sum)
        small_step = _median_time(lambda: sess.run(small_sum), repeats)
        sess.run(big_sum)
        big_step = _median_time(lambda: sess.run(big_sum), sizes["big_rounds"], warmup=1)
        out["pull_mib_s"] = 64 / max(big_step - small_step - local_reduce, 1e-9)
        out["pull_and_reduce_mib_s"] = 64 / max(big_step - small_step, 1e-9)
        out["pull_step_ms"] = big_step * 1e3
    graph, p, twice = _chain(tf1)
    with tf1.Session(target, graph=graph) as sess:
        sess.run(twice, {p: 1.0})
        out["chain_ms"] = _median_time(lambda: sess.run(twice, {p: 1.0}), repeats) * 1e3
    xs, ys = _mlp_data()
    g, x, y, loss, train, init = _mlp(tf1, 0)
    with tf1.Session(target, graph=g) as sess:
        sess.run(init)
        sess.run([loss, train], {x: xs, y: ys})
        out["mlp_ms"] = _median_time(lambda: sess.run([loss, train], {x: xs, y: ys}),
                                     sizes["mlp_steps"]) * 1e3
        sweep = {b: _mlp_data(b) for b in SWEEP}
        times = {b: [] for b in SWEEP}
        for _ in range(sizes["mlp_steps"] // 2):
            for b, (bx, by) in sweep.items():
                start = time.perf_counter()
                sess.run([loss, train], {x: bx, y: by})
                times[b].append(time.perf_counter() - start)
        out.update(_sweep_figures(times))
    for n in worker_counts:
        replicas = [_mlp(tf1, w) for w in range(n)]
        sessions = [tf1.Session(f"grpc://{spec['worker'][w]}", graph=r[0])
                    for w, r in enumerate(replicas)]
        try:
            sessions[0].run(replicas[0][5])
            for sess, (_, x, y, loss, train, _) in zip(sessions, replicas):
                sess.run([loss, train], {x: xs, y: ys})
            counts = [0] * n
            start = time.perf_counter()
            deadline = start + sizes["scaling_s"]

            def loop(i):
                _, x, y, loss, train, _ = replicas[i]
                while time.perf_counter() < deadline:
                    sessions[i].run([loss, train], {x: xs, y: ys})
                    counts[i] += 1

            threads = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            out[f"scaling_{n}w_steps_s"] = sum(counts) / (time.perf_counter() - start)
        finally:
            for sess in sessions:
                sess.close()
    return out


# ----------------------------------------------------------------------------- Ray side
# Runs in the Ray interpreter (``--ray-side``): imports ray, never asyncflow or tensorflow.


def ray_side(steps):
    import ray
    from ray.dag import InputNode
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    try:
        @ray.remote
        class Doubler:
            def double(self, value):
                return value * 2.0

        first, second = Doubler.remote(), Doubler.remote()
        out = {}
        for name, build in (("ray_trivial_ms", lambda node: first.double.bind(node)),
                            ("ray_chain_ms",
                             lambda node: second.double.bind(first.double.bind(node)))):
            with InputNode() as node:
                compiled = build(node).experimental_compile()
            try:
                for _ in range(100):
                    if ray.get(compiled.execute(1.0)) != (2.0 if "trivial" in name else 4.0):
                        raise RuntimeError(f"{name}: wrong result")
                out[name] = _median_time(lambda: ray.get(compiled.execute(1.0)), steps,
                                         warmup=0) * 1e3
            finally:
                compiled.teardown()
        return out
    finally:
        ray.shutdown()


def find_ray_python(option):
    """The interpreter that runs the Ray side and why there is none: the option, else
    $ASYNCFLOW_RAY_PYTHON, else this one when it can import ray."""
    for candidate in (option, os.environ.get("ASYNCFLOW_RAY_PYTHON")):
        if candidate:
            return candidate, None
    probe = subprocess.run([sys.executable, "-c", "import ray"], capture_output=True)
    if probe.returncode == 0:
        return sys.executable, None
    return None, ("no --ray-python, no ASYNCFLOW_RAY_PYTHON, and ray is not importable here "
                  "(it is never a dependency: install it in a separate environment)")


def run_ray(ray_python, steps):
    command = [ray_python, os.path.abspath(__file__), "--ray-side", "--ray-steps", str(steps)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        print(f"Ray side failed (exit {result.returncode}): {result.stderr[-2000:]}")
        return None
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- driver


def find_tf_python(option):
    """The interpreter that runs the TF side: the option, else $ASYNCFLOW_TF_PYTHON, else
    this one when it can import tensorflow, else None."""
    candidates = [option, os.environ.get("ASYNCFLOW_TF_PYTHON")]
    for candidate in candidates:
        if candidate:
            return candidate
    probe = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True)
    return sys.executable if probe.returncode == 0 else None


def run_tf(tf_python, quick, worker_counts):
    command = [tf_python, os.path.abspath(__file__), "--tf-side",
               "--workers", ",".join(map(str, worker_counts))] + (["--quick"] if quick else [])
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        print(f"TF side failed (exit {result.returncode}): {result.stderr[-2000:]}")
        return None
    return json.loads(lines[-1])


LOWER_IS_BETTER = ("trivial_ms", "trivial_spin_ms", "trivial_first_ms", "trivial_il_ms",
                   "chain_ms", "pull_step_ms", "mlp_ms", "mlp_il_ms",
                   "mlp_b1_ms", "mlp_b64_ms", "mlp_b256_ms", "mlp_b256_over_b1")


def _fmt(value):
    return "-" if value is None else f"{value:,.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--runs", type=int, default=3, help="rounds of both frameworks")
    parser.add_argument("--tf-python", default=None,
                        help="a Python that can import tensorflow (else $ASYNCFLOW_TF_PYTHON)")
    parser.add_argument("--no-tf", action="store_true", help="asyncflow figures only")
    parser.add_argument("--workers", default="1,2,4", help="worker counts for scaling")
    parser.add_argument("--ray-python", default=None,
                        help="a Python that can import ray (else $ASYNCFLOW_RAY_PYTHON)")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray's Compiled Graphs")
    parser.add_argument("--ray-steps", type=int, default=TRIVIAL_STEPS,
                        help="timed executions per Ray figure")
    parser.add_argument("--spin-us", type=float, default=200.0,
                        help="ASYNCFLOW_BARE_SPIN_US of the trivial_spin_ms series (0: none)")
    parser.add_argument("--tf-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ray-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spin-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    worker_counts = [int(n) for n in args.workers.split(",")]
    if args.tf_side:
        print(json.dumps(tf_side(args.quick, worker_counts)))
        return
    if args.ray_side:
        print(json.dumps(ray_side(args.ray_steps)))
        return
    if args.spin_side:
        print(json.dumps(spin_side(args.ray_steps)))
        return
    tf_python = None if args.no_tf else find_tf_python(args.tf_python)
    print(f"TF1 side: {tf_python}" if tf_python else "TF1 side: none (no --tf-python, no "
          "ASYNCFLOW_TF_PYTHON, no tensorflow here): asyncflow figures only")
    ray_python, why_not = (None, "--no-ray") if args.no_ray else find_ray_python(args.ray_python)
    print(f"Ray side: {ray_python}" if ray_python else f"Ray side: skipped ({why_not})")
    rounds = []
    for run in range(args.runs):
        ours = asyncflow_side(args.quick, worker_counts, ray_python, tf_python)
        ours["raw_socket_mib_s"] = raw_socket_mib_s(64 * MIB, 3 if args.quick else 7)
        ours["pull_vs_raw"] = ours["pull_mib_s"] / ours["raw_socket_mib_s"]
        theirs = run_tf(tf_python, args.quick, worker_counts) if tf_python else None
        spin = run_spin(args.spin_us, args.ray_steps) if args.spin_us else None
        if spin is not None:
            ours["trivial_spin_ms"] = spin["trivial_spin_ms"]
        ray = run_ray(ray_python, args.ray_steps) if ray_python else None
        if ray is not None:
            ours.update(ray)
            ours["trivial_over_ray"] = ours["trivial_ms"] / ray["ray_trivial_ms"]
            if spin is not None:
                ours["trivial_spin_over_ray"] = spin["trivial_spin_ms"] / ray["ray_trivial_ms"]
            ours["chain_over_ray"] = ours["chain_ms"] / ray["ray_chain_ms"]
        if "mlp_il_ms" in ours:  # each side's interleaved median over its sequential one
            ours["mlp_il_over_seq"] = ours["mlp_il_ms"] / ours["mlp_ms"]
            if theirs is not None and theirs.get("mlp_ms"):
                ours["tf1_mlp_il_over_seq"] = ours["tf1_mlp_il_ms"] / theirs["mlp_ms"]
        rounds.append((ours, theirs))
        print(f"\n-- round {run + 1}/{args.runs}")
        print(f"{'metric':<22} {'asyncflow':>12} {'TF1 gRPC':>12} {'ratio':>8}")
        for key, value in ours.items():
            other = None if theirs is None else theirs.get(key)
            ratio = None if other in (None, 0) else value / other
            print(f"{key:<22} {_fmt(value):>12} {_fmt(other):>12} {_fmt(ratio):>8}")
    print(f"\n-- summary over {args.runs} round(s): median [min-max]; ratio = asyncflow / TF1 "
          f"({', '.join(LOWER_IS_BETTER)}: lower is better; the others: higher is better)")
    print("   scaling: 1, 2, 4 worker processes and one ps share this machine's cores, so "
          "on a 2-core box it is a contention figure")
    print("   ray_*: Ray Compiled Graphs in the same round; trivial_over_ray, chain_over_ray = "
          "asyncflow / Ray (lower is better)")
    print("   trivial_spin_ms: ours with the same-host spin on (Ray's channel spins); "
          "trivial_spin_over_ray: its ratio to Ray's")
    print("   *_il_*: ours and Ray's trivial step in alternating chunks of one series "
          "(bench_trivial_vs_ray.py); trivial_over_ray_il is the target's figure")
    print("   mlp_il_ms, tf1_mlp_il_ms: ours and TF1's PS MLP step in alternating chunks "
          "(bench_ps_tf1_rounds.py); ps_mlp_over_tf1_il is the target's figure, mlp_ms's "
          "ratio the sequential one")
    for key in rounds[0][0]:
        ours = [r[0][key] for r in rounds if key in r[0]]
        if not ours:
            continue
        line = f"{key:<22} {_spread(ours):>28}"
        if all(r[1] is not None and key in r[1] for r in rounds):
            theirs = [r[1][key] for r in rounds]
            ratios = [a / b for a, b in zip(ours, theirs)]
            line += f"  TF1 {_spread(theirs):>28}  ratio {_spread(ratios)}"
        print(line)
    verdicts = target_verdicts(rounds)
    if verdicts:
        print("\n-- issue 34's targets, every round (the worst round's ratio, unrounded):")
        for name, value, limit, met in verdicts:
            sign = "<=" if name.startswith(("trivial", "mlp", "ps_mlp")) else ">="
            print(f"{name:<22} worst {value:.4f}  target {sign} {limit}  "
                  f"{'met' if met else 'NOT met'}")
        everyone = len(verdicts) == len(TARGETS) and all(v[3] for v in verdicts)
        print(f"all four in every round: {'yes' if everyone else 'no'}")


# Issue 34's targets, each in every round: (figure, against, limit, "max" or "min" of the rounds).
# "Within 1.5x of Ray" is judged on the interleaved ratio (``trivial_over_ray_il``) and "the PS
# MLP at most 0.7x TF1" on ``ps_mlp_over_tf1_il``: see the module's docstring; the sequential
# ``trivial_over_ray`` and ``mlp_ms`` ratios are printed beside them, not judged.
TARGETS = (("trivial_ms", "TF1", 0.5, "max"), ("trivial_over_ray_il", None, 1.5, "max"),
           ("ps_mlp_over_tf1_il", None, 0.7, "max"), ("pull_mib_s", "TF1", 3.0, "min"))


def target_verdicts(rounds):
    """Issue 34's four targets over ``rounds`` (``(ours, theirs)`` pairs, ``theirs`` None
    without TF): ``(name, worst round's ratio, limit, met)`` for each target every round has
    the figures of; the worst ratio unrounded, so a round at 0.704 is not read as 0.70."""
    out = []
    for key, against, limit, worst in TARGETS:
        if against is None:
            ratios = [ours[key] for ours, _ in rounds if key in ours]
        else:
            ratios = [ours[key] / theirs[key] for ours, theirs in rounds
                      if theirs is not None and key in ours and theirs.get(key)]
        if len(ratios) != len(rounds) or not ratios:
            continue
        value = max(ratios) if worst == "max" else min(ratios)
        met = value <= limit if worst == "max" else value >= limit
        name = key if against is None else f"{key} / {against}"
        out.append((name, value, limit, met))
    return out


def _spread(values):
    return f"{statistics.median(values):,.2f} [{min(values):,.2f}-{max(values):,.2f}]"


if __name__ == "__main__":
    main()
