"""Training steps of real model shapes, asyncflow against TF1 in the same run (issue 37).

Models (digits-sized data: random 28x28 images and one-hot labels of 10 classes, float32;
weights drawn once in numpy and given to both frameworks):

* **mlp**: 784-256-256-10, ReLU, dropout (rate 0.25) after each hidden layer, softmax
  cross-entropy, RMSProp (lr 0.001), batch 128.
* **autoencoder**: 784-256-128-256-784, sigmoid everywhere, mean squared error, RMSProp
  (lr 0.01), batch 256.
* **convnet**: conv 5x5x32 + ReLU, max pool 2x2, conv 5x5x64 + ReLU, max pool 2x2, dense
  1024 + ReLU, dense 10, softmax cross-entropy, Adam (lr 1e-4), batch 128, SAME padding.

Each framework runs in a server process of its own (this same file with ``--serve af`` or
``--serve tf``) that builds all models once and then times what the driver asks for, so the
driver interleaves the frameworks round by round and machine noise hits both alike. A round
of a model is ``--steps`` training steps (feeds fed each step, the train op and the loss
fetched); the figure is the best round's mean step time. For each it reports the process's
CPU time over wall time during the timed steps, and per op type the time inside kernels
from each framework's own tracer (``FULL_TRACE`` step stats, a few traced steps after the
timed ones, summed per op type and averaged per step).

BLAS: the asyncflow server reports which library runs its float GEMMs (``gemm``: ``mkl`` or
``numpy``, ``ASYNCFLOW_BLAS``, kernels/blas.py) and the BLAS libraries loaded (threadpoolctl:
library, version, core type, threads). ``OPENBLAS_CORETYPE`` (and ``OPENBLAS_L2_SIZE``) change OpenBLAS's kernels and not
TF's oneDNN; ``--openblas both`` runs a second asyncflow server with both unset.

TensorFlow is never imported by the driver: the TF server runs in the interpreter given by
``--tf-python`` or ``ASYNCFLOW_TF_PYTHON``; without one only asyncflow's figures are printed.

``--baseline-tree PATH`` adds servers running asyncflow from another source tree (an earlier
commit, exported), so before and after are timed in the same run, interleaved.

Turns (bench/server_turns.py): each round's and model's order of the servers is a row of a
balanced Latin square (``--order balanced``, the default; each model takes the rows one a
round, so its own rounds walk the whole square), and beside the best round each server's
rounds, their median and its minor page faults a step are printed: an asyncflow process could
read 10-40% slower than its A/A twins for its whole life, faulting a fresh heap's pages in
each step (glibc's per-thread arenas). ``--malloc steady`` gives every server (TF1's too)
glibc's malloc in one arena, never trimmed (``STEADY_MALLOC``); ``--watch`` samples each
server's CPU for a second after its replies.

Run: ``.venv/bin/python bench/bench_models.py [--rounds 3] [--steps 10] [--models
convnet,autoencoder,mlp] [--openblas as-is|unset|both] [--tf-python PATH] [--intra-op N]
[--baseline-tree PATH] [--order balanced|fixed] [--malloc as-is|steady] [--watch]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

import server_turns

MODELS = ("convnet", "autoencoder", "mlp")
BATCH = {"mlp": 128, "autoencoder": 256, "convnet": 128}
TRACED_STEPS = 3


# -- the models, written once against TF1's names (asyncflow keeps them) ----------------------
def weights(model, rng):
    def dense(n_in, n_out):
        scale = np.sqrt(2.0 / (n_in + n_out))
        return [(rng.standard_normal((n_in, n_out)) * scale).astype(np.float32),
                np.zeros(n_out, np.float32)]
    if model == "mlp":
        return dense(784, 256) + dense(256, 256) + dense(256, 10)
    if model == "autoencoder":
        return dense(784, 256) + dense(256, 128) + dense(128, 256) + dense(256, 784)
    conv1 = (rng.standard_normal((5, 5, 1, 32)) * 0.1).astype(np.float32)
    conv2 = (rng.standard_normal((5, 5, 32, 64)) * 0.05).astype(np.float32)
    return ([conv1, np.zeros(32, np.float32), conv2, np.zeros(64, np.float32)]
            + dense(7 * 7 * 64, 1024) + dense(1024, 10))


def data(model, rng):
    batch = BATCH[model]
    images = rng.random((batch, 784), dtype=np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, size=batch)]
    return images, labels


def build(tf, model, initial):
    """``(feeds, loss, train_op)`` of ``model`` in the default graph of ``tf``."""
    params = [tf.Variable(value) for value in initial]
    x = tf.placeholder(tf.float32, [None, 784])
    y = tf.placeholder(tf.float32, [None, 10])
    if model == "mlp":
        w1, b1, w2, b2, w3, b3 = params
        h = tf.nn.dropout(tf.nn.relu(tf.matmul(x, w1) + b1), rate=0.25)
        h = tf.nn.dropout(tf.nn.relu(tf.matmul(h, w2) + b2), rate=0.25)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
            labels=y, logits=tf.matmul(h, w3) + b3))
        return (x, y), loss, tf.train.RMSPropOptimizer(0.001).minimize(loss)
    if model == "autoencoder":
        h = x
        for w, b in zip(params[0::2], params[1::2]):
            h = tf.nn.sigmoid(tf.matmul(h, w) + b)
        loss = tf.reduce_mean(tf.square(h - x))
        return (x, y), loss, tf.train.RMSPropOptimizer(0.01).minimize(loss)
    c1, cb1, c2, cb2, w1, b1, w2, b2 = params
    h = tf.reshape(x, [-1, 28, 28, 1])
    for kernel, bias in ((c1, cb1), (c2, cb2)):
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, kernel, strides=[1, 1, 1, 1],
                                                   padding="SAME"), bias))
        h = tf.nn.max_pool(h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
    h = tf.nn.relu(tf.matmul(tf.reshape(h, [-1, 7 * 7 * 64]), w1) + b1)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
        labels=y, logits=tf.matmul(h, w2) + b2))
    return (x, y), loss, tf.train.AdamOptimizer(1e-4).minimize(loss)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def minor_faults():
    """The process's minor page faults so far (a step that faults its arrays' pages in
    again: a fresh heap each step, bench/server_turns.py)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# -- the servers: one per framework, models built once, rounds on request ---------------------
class Timing:
    """Times ``steps`` calls of ``run_step`` (a blocking or awaited step)."""

    @staticmethod
    def record(wall, cpu, steps, losses, faults=0):
        return {"step_ms": 1e3 * wall / steps, "cpu_over_wall": cpu / wall,
                "loss": float(losses[-1]), "faults_per_step": faults / steps}


async def median_step_ms(sess, fetches, feed, steps):
    """``steps`` awaited ``sess.run(fetches, feed)``: the median wall and CPU milliseconds of
    one (the scripts that alternate forms or trees in one process, form_rounds.py and
    bench_model_timeline.py's ``--ab``)."""
    walls, cpus = [], []
    for _ in range(steps):
        cpu, wall = time.process_time(), time.perf_counter()
        await sess.run(fetches, feed)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return float(np.median(walls)) * 1e3, float(np.median(cpus)) * 1e3


def op_times_tf(graph, run_metadata):
    times = {}
    for device in run_metadata.step_stats.dev_stats:
        for node in device.node_stats:
            name = node.node_name.split(":")[0]
            try:
                op_type = graph.get_operation_by_name(name).type
            except (KeyError, ValueError):
                continue
            times[op_type] = times.get(op_type, 0.0) + node.op_end_rel_micros / 1e3
    return times


def op_times_af(run_metadata):
    times = {}
    for node in run_metadata.step_stats:
        times[node.op_type] = times.get(node.op_type, 0.0) + (node.end_us - node.start_us) / 1e3
    return times


def gemm_node(graph, name, batch):
    """The graph's MatMul that the executed node ``name`` computes (the node itself, or the
    one under a fused node named after its epilogue: Relu/Sigmoid over an Add/BiasAdd), as
    ``(matmul name, "[m, k] @ [k, n]" after the transposes, transposes)``; None for others.
    Both frameworks keep TF1's node names, so the two tracers' nodes meet on this key."""
    try:
        op = graph.get_operation_by_name(name)
    except (KeyError, ValueError):
        return None
    for _ in range(3):
        if op.type == "MatMul":
            break
        if op.type not in ("Relu", "Sigmoid", "Add", "AddV2", "BiasAdd") or not op.inputs:
            return None
        op = next((t.op for t in op.inputs if t.op.type in ("MatMul", "Add", "AddV2",
                                                              "BiasAdd")), None)
        if op is None:
            return None
    if op.type != "MatMul":
        return None
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    (a0, a1), (b0, b1) = ([batch if d is None else d for d in t.shape.as_list()]
                          for t in op.inputs)
    m, k = (a1, a0) if ta else (a0, a1)
    n = b0 if tb else b1
    return op.name, f"[{m}, {k}] @ [{k}, {n}]", f"{'T' if ta else 'N'}{'T' if tb else 'N'}"


def gemm_times(graph, nodes, batch):
    """``{matmul name: [ms, shape, transposes, executed op type]}`` for one traced step's
    ``nodes`` (``(name, op type, ms)``): the GEMM nodes, per node rather than per type."""
    times = {}
    for name, op_type, ms in nodes:
        found = gemm_node(graph, name, batch)
        if found is None:
            continue
        key, shape, trans = found
        entry = times.setdefault(key, [0.0, shape, trans, op_type])
        entry[0] += ms
    return times


def add_gemms(total, times, scale):
    for key, (ms, *rest) in times.items():
        entry = total.setdefault(key, [0.0, *rest])
        entry[0] += ms * scale


def add_times(total, times, scale):
    for op_type, ms in times.items():
        total[op_type] = total.get(op_type, 0.0) + ms * scale


def serve_tf(models, intra_op):
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    built = {}
    for model in models:
        graph = tf.Graph()
        rng = np.random.default_rng(0)
        with graph.as_default():
            feeds, loss, train = build(tf, model, weights(model, rng))
            config = tf.ConfigProto(intra_op_parallelism_threads=intra_op)
            session = tf.Session(graph=graph, config=config)
            session.run(tf.global_variables_initializer())
        built[model] = (graph, session, dict(zip(feeds, data(model, rng))), loss, train)
    reply({"framework": "tf", "version": tf.__version__, "blas": "oneDNN (TF's own)"})
    for line in sys.stdin:
        request = json.loads(line)
        graph, session, feed, loss, train = built[request["model"]]
        for _ in range(2):  # warm-up
            session.run([loss, train], feed)
        losses = []
        faults, cpu, wall = minor_faults(), cpu_seconds(), time.perf_counter()
        for _ in range(request["steps"]):
            losses.append(session.run([loss, train], feed)[0])
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        result = Timing.record(wall, cpu, request["steps"], losses, minor_faults() - faults)
        if request.get("trace"):
            ops, gemms = {}, {}
            for _ in range(TRACED_STEPS):
                metadata = tf.RunMetadata()
                session.run([loss, train], feed, options=tf.RunOptions(
                    trace_level=tf.RunOptions.FULL_TRACE), run_metadata=metadata)
                add_times(ops, op_times_tf(graph, metadata), 1 / TRACED_STEPS)
                if request.get("nodes"):
                    add_gemms(gemms, gemm_times(graph, [
                        (node.node_name.split(":")[0],
                         node.timeline_label.split("(")[0].split("= ")[-1].strip(),
                         node.op_end_rel_micros / 1e3)
                        for device in metadata.step_stats.dev_stats
                        for node in device.node_stats], BATCH[request["model"]]),
                        1 / TRACED_STEPS)
            result["ops_ms"] = ops
            result["gemms"] = gemms
        reply(result)


def serve_af(models, intra_op):
    import trio

    import threadpoolctl

    import asyncflow as af

    def config():
        try:
            return af.ConfigProto(intra_op_parallelism_threads=intra_op)
        except TypeError:  # a tree from before the intra-op pool (--baseline-tree)
            return af.ConfigProto()

    async def main():
        built, graphs = {}, {}
        for model in models:
            graph = af.Graph()
            graphs[model] = graph
            rng = np.random.default_rng(0)
            with graph.as_default():
                feeds, loss, train = build(af, model, weights(model, rng))
                init = af.global_variables_initializer()
            session = af.Session(graph=graph, config=config())
            await session.__aenter__()
            await session.run(init)
            built[model] = (session, dict(zip(feeds, data(model, rng))), loss, train)
        try:  # which library runs the float GEMMs (ASYNCFLOW_BLAS); loads MKL where it does
            from asyncflow.kernels import blas as gemms
            gemm = gemms.name()
        except ImportError:  # a tree from before kernels/blas.py
            gemm = "numpy"
        blas = [info for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]
        reply({"framework": "af", "version": af.__version__, "tree": os.path.dirname(
            os.path.dirname(os.path.abspath(af.__file__))), "gemm": gemm, "blas": blas,
               "env": {key: os.environ.get(key) for key in ("OPENBLAS_CORETYPE",
                                                            "OPENBLAS_L2_SIZE")}})
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            request = json.loads(line)
            session, feed, loss, train = built[request["model"]]
            for _ in range(2):
                await session.run([loss, train], feed)
            losses = []
            faults, cpu, wall = minor_faults(), cpu_seconds(), time.perf_counter()
            for _ in range(request["steps"]):
                losses.append((await session.run([loss, train], feed))[0])
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            result = Timing.record(wall, cpu, request["steps"], losses,
                                   minor_faults() - faults)
            if request.get("trace"):
                ops, gemms = {}, {}
                for _ in range(TRACED_STEPS):
                    metadata = af.RunMetadata()
                    await session.run([loss, train], feed, options=af.RunOptions(
                        trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
                    add_times(ops, op_times_af(metadata), 1 / TRACED_STEPS)
                    if request.get("nodes"):
                        add_gemms(gemms, gemm_times(graphs[request["model"]], [
                            (node.node_name, node.op_type, (node.end_us - node.start_us) / 1e3)
                            for node in metadata.step_stats], BATCH[request["model"]]),
                            1 / TRACED_STEPS)
                result["ops_ms"] = ops
                result["gemms"] = gemms
            reply(result)
        for session, *_ in built.values():
            await session.__aexit__(None, None, None)
    trio.run(main)


def reply(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# -- the driver -----------------------------------------------------------------------------
class Server:
    def __init__(self, label, python, framework, models, intra_op, env):
        self.label = label
        self.process = subprocess.Popen(
            [python, os.path.abspath(__file__), "--serve", framework, "--models",
             ",".join(models), "--intra-op", str(intra_op)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.info = self._read()

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} server exited "
                               f"(code {self.process.wait(timeout=30)})")
        return json.loads(line)

    def ask(self, **request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# ``--malloc steady``: glibc's malloc in one arena (the brk heap), never trimmed, its top
# padded and a fixed mmap threshold: a step's arrays come back from memory already faulted in.
STEADY_MALLOC = {"MALLOC_ARENA_MAX": "1", "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                 "MALLOC_TOP_PAD_": str(64 << 20), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


def environments(mode, tree=None, malloc="as-is"):
    base = dict(os.environ)
    if malloc == "steady":
        base.update(STEADY_MALLOC)
    repo = tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base["PYTHONPATH"] = repo + os.pathsep + base.get("PYTHONPATH", "")
    unset = {k: v for k, v in base.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    coretype = base.get("OPENBLAS_CORETYPE", "unset")
    if mode == "unset":
        return [("af", unset)]
    if mode == "both":
        return [(f"af[OPENBLAS_CORETYPE={coretype}]", base), ("af[unset]", unset)]
    return [("af", base)]


def print_gemms(model, servers, gemm_rounds):
    """Each GEMM node's median time over the rounds, per server, and its difference to TF1's
    (``--nodes``): where TF1's GEMM is faster, node by node."""
    keys = sorted({key for (m, _, key) in gemm_rounds if m == model},
                  key=lambda key: -max(float(np.median([e[0] for e in gemm_rounds.get(
                      (model, s.label, key), [[0.0]])])) for s in servers))
    print("    per GEMM node, ms per step (median of the rounds; type as executed): "
          + "  ".join(server.label for server in servers))
    total = {}
    for key in keys:
        cells, shape = [], ""
        for server in servers:
            entries = gemm_rounds.get((model, server.label, key))
            if not entries:
                cells.append(f"{'-':>8} {'':<14}")
                continue
            ms = float(np.median([e[0] for e in entries]))
            total[server.label] = total.get(server.label, 0.0) + ms
            shape = f"{entries[0][1]} {entries[0][2]}"
            cells.append(f"{ms:8.3f} {entries[0][3]:<14}")
        print(f"    {key:>34} {shape:>26}: {'  '.join(cells)}")
    print(f"    {'all GEMM nodes':>34} {'':>26}: " + "  ".join(
        f"{total.get(s.label, 0.0):8.3f} {'':<14}" for s in servers))


def print_rounds(args, models, servers, rounds, watched):
    """Each server's step per round (ms, in the rounds' order), their median and the minor
    page faults a step (median), and its CPU after its replies (``--watch``)."""
    print(f"\nper round (order {args.order}; ms per step, then the median and the median "
          "minor page faults a step):")
    for model in models:
        for server in servers:
            times = [ms for ms, _ in rounds[(model, server.label)]]
            faults = np.median([f for _, f in rounds[(model, server.label)]])
            print(f"  {model:>11} {server.label:>32}: "
                  + " ".join(f"{ms:7.2f}" for ms in times)
                  + f"  | {np.median(times):7.2f} ms {faults:6.0f} faults")
    for server in servers:
        shares = watched.get(server.label)
        if shares:
            mean = np.mean(shares, axis=0)
            print(f"  CPU after {server.label}'s replies (mean of {len(shares)}, 50 ms slices): "
                  + " ".join(f"{share:.2f}" for share in mean))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--openblas", choices=("as-is", "unset", "both"), default="as-is")
    parser.add_argument("--tf-python", default=os.environ.get("ASYNCFLOW_TF_PYTHON"))
    parser.add_argument("--intra-op", type=int, default=0,
                        help="intra_op_parallelism_threads of both frameworks (0: cores)")
    parser.add_argument("--baseline-tree", metavar="PATH",
                        help="also time asyncflow imported from this source tree (e.g. a "
                             "checkout of an earlier commit), labelled af-before")
    parser.add_argument("--af-env", action="append", default=[], metavar="KEY=VALUE",
                        help="also time asyncflow with this environment variable set "
                             "(repeatable: one more server each, e.g. OPENBLAS_NUM_THREADS=1)")
    parser.add_argument("--nodes", action="store_true",
                        help="trace every round and print each GEMM node's time (the median "
                             "over rounds of its mean over the traced steps) beside TF1's")
    parser.add_argument("--order", choices=("balanced", "fixed"), default="balanced",
                        help="balanced: each round's and model's order of the servers a row of "
                             "a balanced Latin square (none always timed right after the same "
                             "other); fixed: as listed")
    parser.add_argument("--malloc", choices=("as-is", "steady"), default="as-is",
                        help="steady: every server (TF1's too) with glibc's malloc in one "
                             "arena, never trimmed (MALLOC_ARENA_MAX=1 and the rest of "
                             "STEADY_MALLOC): no process pays a fresh heap's page faults "
                             "each step (bench/server_turns.py)")
    parser.add_argument("--watch", action="store_true",
                        help="after each reply, sample the replying server's CPU in 50 ms "
                             "slices for 1 s and print the mean per server (a diagnostic)")
    parser.add_argument("--serve", choices=("af", "tf"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    for model in models:
        if model not in MODELS:
            parser.error(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    if args.serve == "tf":
        return serve_tf(models, args.intra_op)
    if args.serve == "af":
        return serve_af(models, args.intra_op)

    servers = [Server(label, sys.executable, "af", models, args.intra_op, env)
               for label, env in environments(args.openblas, malloc=args.malloc)]
    for assignment in args.af_env:
        key, _, value = assignment.partition("=")
        env = {**environments("as-is", malloc=args.malloc)[0][1], key: value}
        servers.append(Server(f"af[{assignment}]", sys.executable, "af", models, args.intra_op,
                              env))
    if args.baseline_tree:
        servers += [Server(label.replace("af", "af-before", 1), sys.executable, "af", models,
                           args.intra_op, env)
                    for label, env in environments(args.openblas, args.baseline_tree,
                                                   args.malloc)]
    if args.tf_python:
        tf_env = {**environments("as-is", malloc=args.malloc)[0][1],
                  "TF_CPP_MIN_LOG_LEVEL": "2"}
        servers.append(Server("tf1", args.tf_python, "tf", models, args.intra_op, tf_env))
    print(f"load average at start: {os.getloadavg()}")
    for server in servers:
        print(f"{server.label}: {json.dumps(server.info)}")
    best, gemm_rounds, rounds, watched = {}, {}, {}, {}
    for round_index in range(args.rounds):
        for model_index, model in enumerate(models):
            order = (server_turns.round_order(servers, round_index, model_index)
                     if args.order == "balanced" else servers)
            for server in order:
                result = server.ask(model=model, steps=args.steps, nodes=args.nodes,
                                    trace=args.nodes or round_index == args.rounds - 1)
                for key, entry in (result.get("gemms") or {}).items():
                    gemm_rounds.setdefault((model, server.label, key), []).append(entry)
                if args.watch:
                    watched.setdefault(server.label, []).append(
                        server_turns.cpu_after(server.process.pid))
                key = (model, server.label)
                rounds.setdefault(key, []).append((result["step_ms"],
                                                   result.get("faults_per_step", 0.0)))
                if key not in best or result["step_ms"] < best[key]["step_ms"]:
                    best[key] = {**result, "ops_ms": best.get(key, {}).get("ops_ms")}
                if "ops_ms" in result:
                    best[key]["ops_ms"] = result["ops_ms"]
                # the loss after the last round: every server has then run the same steps (the
                # best round's loss is after a different number of steps per server); the
                # convnet's and autoencoder's agree bit for bit, the MLP's dropout is unseeded
                best[key]["final_loss"] = result["loss"]
    for server in servers:
        server.close()
    print(f"load average at end: {os.getloadavg()}")
    print_rounds(args, models, servers, rounds, watched)
    summary = {}
    for model in models:
        print(f"\n{model} (batch {BATCH[model]}, best of {args.rounds} rounds of "
              f"{args.steps} steps)")
        tf_ms = best.get((model, "tf1"), {}).get("step_ms")
        for server in servers:
            result = best[(model, server.label)]
            ratio = (f"  {result['step_ms'] / tf_ms:.2f}x TF1"
                     if tf_ms and server.label != "tf1" else "")
            print(f"  {server.label:>32}: {result['step_ms']:8.2f} ms/step  cpu/wall "
                  f"{result['cpu_over_wall']:.2f}  final loss {result['final_loss']:.4f}{ratio}")
            summary[f"{model}/{server.label}"] = {k: v for k, v in result.items()
                                                  if k not in ("ops_ms", "gemms")}
        print("    per op type, ms per step (tracers): "
              + "  ".join(server.label for server in servers))
        op_types = set()
        for server in servers:
            op_types |= set((best[(model, server.label)].get("ops_ms") or {}))

        def weight(op_type):
            return -max((best[(model, s.label)].get("ops_ms") or {}).get(op_type, 0.0)
                        for s in servers)
        for op_type in sorted(op_types, key=weight)[:14]:
            cells = "  ".join(
                f"{(best[(model, s.label)].get('ops_ms') or {}).get(op_type, 0.0):8.2f}"
                for s in servers)
            print(f"    {op_type:>28}: {cells}")
        if args.nodes:
            print_gemms(model, servers, gemm_rounds)
    print("\nJSON " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
