"""TF's MatMul on one thread against numpy's OpenBLAS on one thread, alternated in one process
(issue 37): the autoencoder's eleven GEMMs (``bench_ae_bound.gemm_list``: shapes and
transposes as the step runs them), a round timing all eleven in three forms in a rotating
order: TF (graph mode, one session at ``intra_op_parallelism_threads=1``, the process's first,
grappler off), numpy (``np.matmul(a, b, out=)``, ``OPENBLAS_NUM_THREADS=1``) and numpy again
(the A/A). Every form is timed the same way: a sample is ``--chain`` calls back to back (TF:
``--chain`` MatMuls chained by control dependencies in one ``Session.run``, so its sample
carries one run's overhead, numpy's ``--chain`` Python calls), each GEMM's median of
``--repeat`` samples, the round's total over the eleven.

Runs in a child of ``--tf-python`` (or ``ASYNCFLOW_TF_PYTHON``); this interpreter never imports
TF. TF's interpreter's numpy is used for both numpy forms (its OpenBLAS version is printed:
compare it with ``bench_ae_bound.py``'s before reading its figure against that bench's).

Run: ``.venv/bin/python bench/bench_tf_gemm_ab.py --tf-python <TF> [--rounds 12]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ae_bound import gemm_list  # noqa: E402  (numpy only)

FORMS = ("TF", "numpy", "numpy A/A")


def child(rounds, repeat, chain):
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    items, graph = gemm_list(), tf.Graph()
    fetches = []
    with graph.as_default():
        for _, a, b, _ in items:
            ta, tb = not a.flags.c_contiguous, not b.flags.c_contiguous
            va = tf.Variable(np.ascontiguousarray(a.T if ta else a))
            vb = tf.Variable(np.ascontiguousarray(b.T if tb else b))
            last = None
            for _ in range(chain):
                with tf.control_dependencies([] if last is None else [last]):
                    last = tf.matmul(va, vb, transpose_a=ta, transpose_b=tb)
            fetches.append(last.op)
        session = tf.Session(graph=graph, config=config)
        session.run(tf.global_variables_initializer())
    outs = [np.empty((a.shape[0], b.shape[1]), np.float32) for _, a, b, _ in items]

    def sample_tf(index):
        session.run(fetches[index])

    def sample_numpy(index):
        _, a, b, _ = items[index]
        for _ in range(chain):
            np.matmul(a, b, out=outs[index])
    samplers = {"TF": sample_tf, "numpy": sample_numpy, "numpy A/A": sample_numpy}

    def round_ms(form):
        total = 0.0
        for index in range(len(items)):
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                samplers[form](index)
                times.append(time.perf_counter() - start)
            total += statistics.median(times) / chain
        return 1e3 * total
    for form in FORMS:  # warm-up: every GEMM of every form once, untimed
        for index in range(len(items)):
            samplers[form](index)
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    print(f"TF {tf.__version__}; numpy {np.__version__}, {blas['name']} {blas['version']}; "
          f"load average {os.getloadavg()}")
    rows = []
    for index in range(rounds):
        order = FORMS[index % 3:] + FORMS[:index % 3]
        row = {form: round_ms(form) for form in order}
        rows.append(row)
        print(f"round {index + 1:2d} (" + ", ".join(order) + "): "
              + "  ".join(f"{form} {row[form]:.3f}" for form in FORMS)
              + f"  TF/numpy {row['TF'] / row['numpy']:.3f}"
              + f"  A/A {row['numpy A/A'] / row['numpy']:.3f}")
    for form in FORMS[0], FORMS[2]:
        ratios = [row[form] / row["numpy"] for row in rows]
        print(f"{form} / numpy: median {statistics.median(ratios):.3f} over {rounds} rounds, "
              f"{form} lower in {sum(r < 1 for r in ratios)}; best rounds "
              f"{min(r[form] for r in rows) / min(r['numpy'] for r in rows):.3f}")
    session.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--chain", type=int, default=10)
    parser.add_argument("--tf-python", default=os.environ.get("ASYNCFLOW_TF_PYTHON"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.rounds, args.repeat, args.chain)
    if not args.tf_python:
        sys.exit("bench_tf_gemm_ab: no --tf-python nor ASYNCFLOW_TF_PYTHON given")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([args.tf_python, os.path.abspath(__file__), "--child", "--rounds",
                           str(args.rounds), "--repeat", str(args.repeat), "--chain",
                           str(args.chain)], env=env, timeout=180)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
