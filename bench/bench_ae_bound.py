"""The autoencoder's bound on this machine (issue 37): can any schedule of its step's work reach
0.8x TF1's step here? One run measures, at the step's exact shapes (784-256-128-256-784,
sigmoid, mean squared error, RMSProp, batch 256, float32):

a. **The GEMM floor on two cores**: the eleven GEMMs (``bench_gemm_floor.gemms``: four
   forward, four weight gradients ``x^T @ dy``, three input gradients ``dy @ W^T``, 307.2 M
   multiply-adds) timed (best of ``--rounds`` medians of ``--repeat`` calls)
   - on numpy's OpenBLAS at one thread and at two (OpenBLAS splitting each GEMM itself);
   - as two concurrent lists balanced by multiply-adds (``balanced_lists``), one a thread,
     BLAS at one thread each (the GIL released in the calls), each thread running its list
     ``--repeat`` times from one barrier: no dependencies respected and no hand-off a GEMM,
     a lower bound of any schedule on two threads;
   - each GEMM split in two by rows, the two threads running their halves of all eleven with
     no synchronisation between GEMMs (a lower bound of row splits), and through asyncflow's
     intra-op pool (``pool.run``: one hand-off and join a GEMM, as the MatMul kernel splits);
   - with MKL where its library loads (``kernels/blas.py``'s ``mkl_matmul``, MKL's sequential
     layer: one thread; the same two forms on two threads), and MKL's own threading
     (``MKL_Set_Threading_Layer`` Intel, 1 and 2 threads, in a child process of this file:
     its layer cannot change in a process once set).
   The floor is the least of the two-thread forms.
b. **The rest of the step at its floor, on one thread**: the four epilogues (bias add and
   sigmoid), the three hidden layers' SigmoidGrads and the output's, the mean squared error and
   its gradient, the four bias-gradient sums and RMSProp's dense applies over all eight
   variables (468,368 values; ms, mom and var in place), each in its fastest numpy form
   (``out=``, in place) and through asyncflow's own kernels (the compiled epilogue and apply
   loops, the fused loss-and-SigmoidGrad kernel, ``Sum``'s GEMV); the rest is the sum of each
   item's faster form.
c. **TF1** (in a child of ``--tf-python`` or ``ASYNCFLOW_TF_PYTHON``; this interpreter never
   imports TF): its training step (``bench_models.build``, best round's mean of ``--steps``;
   timed before the rest of the run and again after it, the faster taken),
   and its MatMul at the eleven shapes and transposes (graph mode, ``--chain`` MatMuls chained
   by control dependencies in one ``Session.run``, grappler off; intra-op 1 and 2 threads, each
   in a process of its own: TF sizes a process's intra-op pool by its first session).
d. **The bound**: the two-core GEMM floor plus half the rest (perfect overlap on two cores,
   no executor cost) against 0.8x TF1's step of the same run, and the same with TF's GEMMs
   where they are faster (``tf_gemm_floor``: TF's two-thread total, or the floor at TF's
   one-thread rate over OpenBLAS's). A lower bound: below the target it says the target is
   not ruled out, not that a schedule reaches it.

Without TF (no interpreter given) its parts are skipped with the reason printed; without MKL,
MKL's rows.

Run: ``.venv/bin/python bench/bench_ae_bound.py [--rounds 3] [--repeat 20] [--tf-python <TF>]``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_gemm_floor import LAYERS, best_ms, gemms  # noqa: E402  (numpy and threadpoolctl only)

BATCH, SIZES = LAYERS["autoencoder"]
KNOWN_MACS = 307_232_768  # 119.5 M forward, 119.5 M weight gradients, 68.2 M input gradients
TARGET = 0.8  # issue 37: at most 0.8x TF1's step
LR, RHO, MOMENTUM, EPSILON = 0.01, 0.9, 0.0, 1e-10  # tf.train.RMSPropOptimizer(0.01)


# -- the step's shapes and the bound's arithmetic (tests/test_bench_ae_bound.py) ---------------
def gemm_list():
    """``(label, a, b, multiply-adds)`` of the step's eleven GEMMs."""
    return [(label, a, b, a.shape[0] * a.shape[1] * b.shape[1])
            for label, a, b in gemms("autoencoder")]


def balanced_lists(macs):
    """Two lists of indices into ``macs`` with sums as equal as longest-first greedy makes."""
    lists, sums = ([], []), [0, 0]
    for index in sorted(range(len(macs)), key=lambda i: -macs[i]):
        side = 0 if sums[0] <= sums[1] else 1
        lists[side].append(index)
        sums[side] += macs[index]
    return lists


def bound(gemm_ms, rest_ms, tf_step_ms):
    """``(bound ms, target ms, bound / target)``: the two-core GEMM floor plus half the rest
    on one thread, against ``TARGET`` times TF1's step."""
    value = gemm_ms + rest_ms / 2
    target = TARGET * tf_step_ms
    return value, target, value / target


def tf_gemm_floor(floor, openblas_one, tf_one=None, tf_two=None):
    """The two-core GEMM floor with TF's GEMMs: TF's own two-thread total, or ``floor`` (ours
    on two cores, both cores' slow-down in it) at TF's one-thread rate against OpenBLAS's
    (``floor * tf_one / openblas_one``), the less; None without either. (Not ``tf_one / 2``:
    halving a one-core total assumes a second core at no cost, which ``floor`` does not.)"""
    forms = ([] if tf_two is None else [tf_two]) + (
        [] if tf_one is None else [floor * tf_one / openblas_one])
    return min(forms) if forms else None


def param_sizes():
    """The eight variables' sizes: each layer's weights and bias."""
    return [size for n_in, n_out in zip(SIZES[:-1], SIZES[1:]) for size in (n_in * n_out, n_out)]


# -- timing -------------------------------------------------------------------------------------
def two_threads_ms(work, rounds, repeat):
    """Two threads, each running its ``work[i]()`` ``repeat`` times from one barrier: the best
    round's wall to both done over ``repeat``, ms (one start a round, no sync between calls)."""
    best = float("inf")
    for _ in range(rounds):
        barrier = threading.Barrier(3)
        ends = [0.0, 0.0]

        def loop(side):
            barrier.wait()
            for _ in range(repeat):
                work[side]()
            ends[side] = time.perf_counter()
        threads = [threading.Thread(target=loop, args=(side,)) for side in (0, 1)]
        for thread in threads:
            thread.start()
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        best = min(best, max(ends) - start)
    return 1e3 * best / repeat


# -- a. the GEMM floor --------------------------------------------------------------------------
def gemm_forms(mm, items, rounds, repeat):
    """``{form: ms}`` of the eleven GEMMs through ``mm(a, b, out)`` on one thread each."""
    outs = [np.empty((a.shape[0], b.shape[1]), np.float32) for _, a, b, _ in items]
    lists = balanced_lists([macs for *_, macs in items])

    def run_list(indices):
        def run():
            for i in indices:
                mm(items[i][1], items[i][2], outs[i])
        return run
    halves = []
    for (_, a, b, _), out in zip(items, outs):
        cut = a.shape[0] // 2
        halves.append(((a[:cut], b, out[:cut]), (a[cut:], b, out[cut:])))

    def run_halves(side):
        def run():
            for pair in halves:
                mm(*pair[side])
        return run
    return {"lists": two_threads_ms([run_list(lists[0]), run_list(lists[1])], rounds, repeat),
            "rows": two_threads_ms([run_halves(0), run_halves(1)], rounds, repeat)}


def numpy_mm(a, b, out):
    np.matmul(a, b, out=out)


def openblas_rows(items, rounds, repeat):
    import threadpoolctl
    controller = threadpoolctl.ThreadpoolController()
    result = {}
    for threads in (1, 2):
        with controller.limit(limits=threads, user_api="blas"):
            per = []
            for _, a, b, _ in items:
                out = np.empty((a.shape[0], b.shape[1]), np.float32)
                per.append(best_ms(lambda a=a, b=b, out=out: np.matmul(a, b, out=out),
                                   rounds, repeat))
        result[threads] = per
    return result


def pool_rows_ms(items, rounds, repeat):
    """Each GEMM split by rows over asyncflow's intra-op pool of two (BLAS claimed at one)."""
    from asyncflow.exec.intra_op import shared_pool
    from asyncflow.kernels.intra_op import chunk_bounds
    pool = shared_pool(2)
    outs = [np.empty((a.shape[0], b.shape[1]), np.float32) for _, a, b, _ in items]

    def step():
        for (_, a, b, _), out in zip(items, outs):
            pool.run(lambda s, e, a=a, b=b, out=out: np.matmul(a[s:e], b, out=out[s:e]),
                     chunk_bounds(a.shape[0], 2))
    for _ in range(5):  # the first split compiles the spins (join_spin.arm)
        step()
    return best_ms(step, rounds, repeat)


def mkl_sequential():
    """asyncflow's ``mkl_matmul`` (MKL's sequential layer) or None with the reason."""
    from asyncflow.kernels import blas
    if os.environ.get("ASYNCFLOW_BLAS") == "numpy":
        return None, "ASYNCFLOW_BLAS=numpy"
    blas.CHOICE = "mkl"
    try:
        if blas._load() is None:
            return None, "MKL's library did not load"
    except Exception as error:  # noqa: BLE001 -- reported, the bench goes on without MKL
        return None, f"MKL: {error}"
    return blas.mkl_matmul, blas.mkl_library_path()


def mkl_threaded_child(rounds, repeat):
    """In a child of this file: MKL's own threads (Intel layer), 1 and 2, per GEMM; JSON."""
    from asyncflow.kernels.blas import _operand, mkl_library_path
    path = mkl_library_path()
    lib = ctypes.CDLL(path)
    lib.MKL_Set_Interface_Layer(0)
    layer = lib.MKL_Set_Threading_Layer(0)  # 0: Intel (OpenMP)
    fn = lib.cblas_sgemm
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                        ctypes.c_void_p, ctypes.c_int]
    fn.restype = None
    result = {"layer": layer}
    items = gemm_list()
    for threads in (1, 2):
        lib.MKL_Set_Num_Threads(threads)
        per = []
        for _, a, b, _ in items:
            out = np.empty((a.shape[0], b.shape[1]), np.float32)
            (ta, lda), (tb, ldb) = _operand(a), _operand(b)
            (m, k), n = a.shape, b.shape[1]

            def call(a=a, b=b, out=out, ta=ta, tb=tb, lda=lda, ldb=ldb, m=m, k=k, n=n):
                fn(101, ta, tb, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb, 0.0,
                   out.ctypes.data, n)
            per.append(best_ms(call, rounds, repeat))
        result[threads] = per
    print(json.dumps(result))


# -- b. the rest of the step ----------------------------------------------------------------------
class KernelContext:
    """What a kernel reads of its node context (as bench_model_kernels.py's): one thread."""

    def __init__(self, attrs):
        from asyncflow.exec.devices import Device
        self.attrs, self.name, self.type, self.xp = attrs, "bench", "bench", np
        self.prepared, self.output_dtypes = False, (np.dtype(np.float32),)
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 1,
                             intra_op_threads=1)


def rest_rows(rounds, repeat):
    """``{item: (numpy ms, asyncflow ms)}`` of the step's work outside its GEMMs, one thread."""
    from asyncflow import dtypes
    from asyncflow.exec.resources import VariableResource
    from asyncflow.kernels import epilogue
    from asyncflow.kernels.registry import get_kernel
    rng = np.random.default_rng(1)
    widths = SIZES[1:]
    pre = [rng.standard_normal((BATCH, w)).astype(np.float32) for w in widths]
    acts = [rng.random((BATCH, w), dtype=np.float32) for w in widths]
    grads = [rng.standard_normal((BATCH, w)).astype(np.float32) * 1e-3 for w in widths]
    biases = [rng.standard_normal(w).astype(np.float32) * 0.1 for w in widths]
    x = rng.random((BATCH, SIZES[0]), dtype=np.float32)
    temps = [np.empty((BATCH, w), np.float32) for w in widths]
    rows = {}

    def restore():  # fresh pre-activations: the in-place sigmoid's values stay as the step's
        for z, p in zip(temps, pre):
            np.copyto(z, p)

    def sig_numpy():
        for z, nb in zip(temps, negs):
            np.subtract(nb, z, out=z)
            np.exp(z, out=z)
            z += 1
            np.reciprocal(z, out=z)
    negs = [np.negative(b) for b in biases]
    ctx = KernelContext({})
    applies = [epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), b, ctx) for b in biases]

    def sig_af():
        for z, apply in zip(temps, applies):
            apply(z)
    for fn in (sig_numpy, sig_af):  # (the first call compiles the loops: untimed)
        restore()
        fn()
    copy_ms = best_ms(restore, rounds, repeat)
    rows["bias add and sigmoid x4"] = tuple(
        best_ms(lambda fn=fn: (restore(), fn()), rounds, repeat) - copy_ms
        for fn in (sig_numpy, sig_af))

    sgrad = get_kernel("SigmoidGrad", "CPU").fn
    outs = [np.empty_like(t) for t in temps]

    def sgrad_numpy():
        for y, dy, t in zip(acts[:3], grads[:3], outs):
            np.subtract(np.float32(1), y, out=t)
            t *= y
            t *= dy
    rows["SigmoidGrad x3 (hidden)"] = (
        best_ms(sgrad_numpy, rounds, repeat),
        best_ms(lambda: [sgrad(ctx, y, dy) for y, dy in zip(acts[:3], grads[:3])], rounds,
                repeat))

    h, diff, out = acts[3], np.empty_like(x), outs[3]
    scale = np.float32(2.0 / h.size)

    def loss_numpy():  # the loss, its gradient, and the output's SigmoidGrad
        np.subtract(h, x, out=diff)
        flat = diff.reshape(-1)
        float(np.dot(flat, flat)) / h.size
        np.multiply(diff, scale, out=diff)
        np.subtract(np.float32(1), h, out=out)
        np.multiply(out, h, out=out)
        np.multiply(out, diff, out=out)
    fused = get_kernel("_FusedMeanSquaredErrorSigmoidGrad", "CPU")
    one = np.asarray(1.0, np.float32)
    lctx = KernelContext({"sum_to_y": False})
    if fused is not None:
        fused.fn(lctx, h, x, one)
    rows["MSE, its gradient, output SigmoidGrad"] = (
        best_ms(loss_numpy, rounds, repeat),
        best_ms(lambda: fused.fn(lctx, h, x, one), rounds, repeat) if fused else float("nan"))

    sums = [np.empty(w, np.float32) for w in widths]
    ones = np.ones(BATCH, np.float32)

    def sum_numpy():
        for g, s in zip(grads, sums):
            np.sum(g, axis=0, out=s)

    def sum_gemv():
        for g, s in zip(grads, sums):
            np.matmul(ones, g, out=s)
    sctx = KernelContext({"axis": (0,), "keepdims": False})
    ksum = get_kernel("Sum", "CPU").fn
    rows["bias-gradient sums x4"] = (
        min(best_ms(sum_numpy, rounds, repeat), best_ms(sum_gemv, rounds, repeat)),
        best_ms(lambda: [ksum(sctx, g) for g in grads], rounds, repeat))

    sizes = param_sizes()
    var = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    ms_ = [np.ones(n, np.float32) for n in sizes]
    mom = [np.zeros(n, np.float32) for n in sizes]
    grad = [rng.standard_normal(n).astype(np.float32) * 1e-3 for n in sizes]
    t = np.empty(max(sizes), np.float32)
    u = np.empty(max(sizes), np.float32)
    lr, rho1, momentum, eps = (np.float32(v) for v in (LR, 1 - RHO, MOMENTUM, EPSILON))

    def rms_numpy():
        for v, s, m, g in zip(var, ms_, mom, grad):
            tt, uu = t[:g.size], u[:g.size]
            np.square(g, out=tt)
            tt -= s
            tt *= rho1
            s += tt
            np.add(s, eps, out=tt)
            np.sqrt(tt, out=tt)
            np.multiply(g, lr, out=uu)
            uu /= tt
            m *= momentum
            m += uu
            v -= m
    rms = get_kernel("ApplyRMSProp", "CPU").fn
    rctx = KernelContext({"use_locking": False})
    refs = []
    for index, n in enumerate(sizes):
        group = []
        for slot, value in enumerate((var[index], ms_[index], mom[index])):
            ref = VariableResource(f"v{index}_{slot}", dtypes.float32, (n,))
            ref.assign(value.copy())
            group.append(ref)
        refs.append(group)
    scalars = [np.float32(v) for v in (LR, RHO, MOMENTUM, EPSILON)]

    def rms_af():
        for group, g in zip(refs, grad):
            rms(rctx, *group, *scalars, g)
    rms_af()
    rows[f"RMSProp applies ({sum(sizes):,} values)"] = (
        best_ms(rms_numpy, rounds, repeat), best_ms(rms_af, rounds, repeat))
    return rows


# -- c. TF1 in a child ---------------------------------------------------------------------------
def tf_child(rounds, repeat, steps, chain, intra_op):
    """Run under TF's interpreter: ``intra_op`` 0, TF1's step (its default config); else TF's
    MatMul at the eleven shapes, every session at ``intra_op`` threads; JSON. TF's intra-op
    pool is the process's, sized by its first session (a later session's
    ``intra_op_parallelism_threads`` is not read): each setting runs in a fresh child."""
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    result = {"version": tf.__version__}
    if intra_op:
        result["matmul"], result["cpu_over_wall"] = tf_matmuls(tf, rounds, repeat, chain,
                                                               intra_op)
        return print(json.dumps(result))
    import bench_models
    graph = tf.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        feeds, loss, train = bench_models.build(tf, "autoencoder",
                                                bench_models.weights("autoencoder", rng))
        session = tf.Session(graph=graph, config=tf.ConfigProto())
        session.run(tf.global_variables_initializer())
    feed = dict(zip(feeds, bench_models.data("autoencoder", rng)))
    for _ in range(3):
        session.run([loss, train], feed)
    best = float("inf")
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            session.run([loss, train], feed)
        wall = time.perf_counter() - start
        if wall / steps < best:
            best, result["step_cpu_over_wall"] = wall / steps, (time.process_time() - cpu) / wall
    result["step_ms"] = 1e3 * best
    session.close()
    print(json.dumps(result))


def tf_matmuls(tf, rounds, repeat, chain, threads):
    """TF's MatMul at the eleven shapes (ms each: ``best_ms``'s estimator, best of ``rounds``
    medians of ``repeat`` samples, a sample one ``Session.run`` of ``chain`` MatMuls over
    ``chain``) and the process's CPU over wall meanwhile."""
    per, cpus, walls = [], 0.0, 0.0
    for _, a, b, _ in gemm_list():
        graph = tf.Graph()
        with graph.as_default():
            # The operands as the step holds them: x^T as x with transpose_a, W^T as W
            # with transpose_b (the views of gemms() say which).
            ta, tb = not a.flags.c_contiguous, not b.flags.c_contiguous
            va = tf.Variable(np.ascontiguousarray(a.T if ta else a))
            vb = tf.Variable(np.ascontiguousarray(b.T if tb else b))
            last = None
            for _ in range(chain):
                deps = [] if last is None else [last]
                with tf.control_dependencies(deps):
                    last = tf.matmul(va, vb, transpose_a=ta, transpose_b=tb)
            config = tf.ConfigProto(intra_op_parallelism_threads=threads,
                                    inter_op_parallelism_threads=1)
            config.graph_options.rewrite_options.disable_meta_optimizer = True
            session = tf.Session(graph=graph, config=config)
            session.run(tf.global_variables_initializer())
            fetch = last.op
            for _ in range(3):
                session.run(fetch)
            cpu, wall = time.process_time(), time.perf_counter()
            per.append(best_ms(lambda: session.run(fetch), rounds, repeat) / chain)
            cpus, walls = cpus + time.process_time() - cpu, walls + time.perf_counter() - wall
            session.close()
    return per, cpus / walls


def run_child(python, args):
    """The JSON a child of this file prints last, or ``(None, why)``."""
    try:
        done = subprocess.run([python, os.path.abspath(__file__), *args], capture_output=True,
                              text=True, timeout=150)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(args[:2])}: no answer in 150 s"
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return None, (done.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(lines[-1]), None


# -- the run ------------------------------------------------------------------------------------
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="TF1 steps a round")
    parser.add_argument("--chain", type=int, default=10, help="TF MatMuls a Session.run")
    parser.add_argument("--tf-python", default=os.environ.get("ASYNCFLOW_TF_PYTHON"))
    parser.add_argument("--child", choices=("tf", "mkl"), help=argparse.SUPPRESS)
    parser.add_argument("--intra-op", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "tf":
        return tf_child(args.rounds, args.repeat, args.steps, args.chain, args.intra_op)
    if args.child == "mkl":
        return mkl_threaded_child(args.rounds, args.repeat)
    print(f"load average at start: {os.getloadavg()}")
    items = gemm_list()
    total = sum(macs for *_, macs in items)
    lists = balanced_lists([macs for *_, macs in items])
    print(f"eleven GEMMs, {total / 1e6:.1f} M multiply-adds; balanced lists "
          + " / ".join(f"{sum(items[i][3] for i in side) / 1e6:.1f} M" for side in lists))

    tf, tf_reason = (None, "no --tf-python nor ASYNCFLOW_TF_PYTHON given")
    if args.tf_python:  # first, while this process holds no threads of its own
        options = ["--rounds", str(args.rounds + 2), "--repeat", str(args.repeat), "--steps",
                   str(args.steps), "--chain", str(args.chain)]
        tf, tf_reason = run_child(args.tf_python, ["--child", "tf", *options])
        for threads in (1, 2) if tf is not None else ():  # a fresh process each (tf_child)
            matmul, reason = run_child(args.tf_python, ["--child", "tf", "--intra-op",
                                                        str(threads), *options,
                                                        "--rounds", str(args.rounds)])
            tf[threads] = matmul
            if matmul is None:
                print(f"TF's MatMul at intra-op {threads} skipped: {reason}")
    blas_rows = openblas_rows(items, args.rounds, args.repeat)
    from asyncflow.exec.intra_op import claim_blas
    claim_blas()  # numpy's BLAS at one thread from here
    two = {"OpenBLAS 2 threads each GEMM": sum(blas_rows[2])}
    for form, ms in gemm_forms(numpy_mm, items, args.rounds, args.repeat).items():
        two[f"OpenBLAS 1 thread x2, {form}"] = ms
    one = {"OpenBLAS": sum(blas_rows[1])}
    per_gemm = {"OpenBLAS 1": blas_rows[1], "OpenBLAS 2": blas_rows[2]}
    mkl, where = mkl_sequential()
    if mkl is None:
        print(f"MKL skipped: {where}")
    else:
        per = []
        for _, a, b, _ in items:
            out = np.empty((a.shape[0], b.shape[1]), np.float32)
            per.append(best_ms(lambda a=a, b=b, out=out: mkl(a, b, out), args.rounds,
                               args.repeat))
        one["MKL sequential"] = sum(per)
        per_gemm["MKL 1"] = per
        for form, ms in gemm_forms(mkl, items, args.rounds, args.repeat).items():
            two[f"MKL 1 thread x2, {form}"] = ms
        threaded, reason = run_child(sys.executable, ["--child", "mkl", "--rounds",
                                                      str(args.rounds), "--repeat",
                                                      str(args.repeat)])
        if threaded is None:
            print(f"MKL's own threads skipped: {reason}")
        else:
            one["MKL own threads (1)"] = sum(threaded["1"])
            two["MKL own threads (2) each GEMM"] = sum(threaded["2"])
            per_gemm["MKL own 2"] = threaded["2"]
    tf_rows = {1: (one, "TF MatMul intra-op 1"), 2: (two, "TF MatMul intra-op 2 each GEMM")}
    for threads, (table, form) in tf_rows.items():
        if tf is not None and tf[threads] is not None:
            per_gemm[f"TF {threads}"] = tf[threads]["matmul"]
            table[form] = sum(tf[threads]["matmul"])

    print("\na. per GEMM, ms: " + ", ".join(per_gemm))
    for index, (label, _, _, macs) in enumerate(items):
        print(f"  {label:22s} {macs / 1e6:6.1f} M "
              + " ".join(f"{values[index]:7.3f}" for values in per_gemm.values()))
    print("one thread, the eleven (ms, G multiply-adds/s):")
    for form, ms in one.items():
        print(f"  {form:40s} {ms:7.3f}  {total / ms / 1e6:6.1f}")
    print("two threads, the eleven (ms, G multiply-adds/s):")
    for form, ms in two.items():
        print(f"  {form:40s} {ms:7.3f}  {total / ms / 1e6:6.1f}")
    ours = {form: ms for form, ms in two.items() if not form.startswith("TF")}
    floor_form = min(ours, key=ours.get)
    floor = ours[floor_form]
    print(f"GEMM floor on two cores (ours): {floor:.3f} ms ({floor_form})")

    rest = rest_rows(args.rounds, args.repeat * 5)
    # Last: the pool's workers spin idle after a split (exec/join_spin.py), a core's worth.
    pool_ms = pool_rows_ms(items, args.rounds, args.repeat)
    print(f"two threads, each GEMM split by rows over asyncflow's pool: {pool_ms:.3f} ms "
          f"({total / pool_ms / 1e6:.1f} G multiply-adds/s)")
    print("\nb. the rest on one thread, ms: numpy's fastest form / asyncflow's kernels")
    rest_ms = 0.0
    for item, (numpy_ms, af_ms) in rest.items():
        rest_ms += min(numpy_ms, af_ms)
        print(f"  {item:42s} {numpy_ms:7.3f} {af_ms:7.3f}  (asyncflow {af_ms / numpy_ms:.2f}x)")
    print(f"  {'rest (each item at its faster form)':42s} {rest_ms:7.3f}")

    print("\nc. TF1")
    if tf is None:
        print(f"  skipped: {tf_reason}")
        print(f"\nd. bound: {floor + rest_ms / 2:.3f} ms (GEMM floor {floor:.3f} + rest/2 "
              f"{rest_ms / 2:.3f}); no TF1 step to compare")
        return None
    after, reason = run_child(args.tf_python, ["--child", "tf", *options])
    steps = [tf["step_ms"]] + ([after["step_ms"]] if after else [])
    print(f"  TF {tf['version']}: step before ours and after "
          + " / ".join(f"{ms:.3f}" for ms in steps) + (f" (after: {reason})" if after is None
                                                      else "")
          + f" ms, the target from the faster (CPU/wall {tf['step_cpu_over_wall']:.2f})")
    tf["step_ms"] = min(steps)
    for threads, (table, form) in tf_rows.items():
        if form in table:
            print(f"  MatMul eleven, intra-op {threads} (a process of its own): "
                  f"{table[form]:.3f} ms (CPU/wall {tf[threads]['cpu_over_wall']:.2f})")
    if "TF MatMul intra-op 1" in one:
        print(f"  OpenBLAS's one thread / TF's intra-op 1: "
              f"{one['OpenBLAS'] / one['TF MatMul intra-op 1']:.2f}")
    value, target, ratio = bound(floor, rest_ms, tf["step_ms"])
    print(f"\nd. bound {value:.3f} ms (GEMM floor {floor:.3f} + rest/2 {rest_ms / 2:.3f}) "
          f"against 0.8x TF1 {target:.3f} ms: bound / target {ratio:.3f} (the bound "
          f"{'below' if ratio < 1 else 'not below'} the target); bound / TF1 step "
          f"{value / tf['step_ms']:.3f}")
    tf_floor = tf_gemm_floor(floor, one["OpenBLAS"], one.get("TF MatMul intra-op 1"),
                             two.get("TF MatMul intra-op 2 each GEMM"))
    if tf_floor is not None and tf_floor < floor:
        value, _, tf_ratio = bound(tf_floor, rest_ms, tf["step_ms"])
        print(f"   with TF's GEMMs ({tf_floor:.3f} ms): bound {value:.3f} ms, bound / target "
              f"{tf_ratio:.3f}; bound / TF1 step {value / tf['step_ms']:.3f}")
    elif tf_floor is not None:
        print(f"   TF's GEMMs no faster ({tf_floor:.3f} ms on two threads at best)")
    print(f"\nload average at end: {os.getloadavg()}")
    return ratio


if __name__ == "__main__":
    main()
