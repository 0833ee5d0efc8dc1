"""Benchmark: one forward+backward step of an LSTM ``dynamic_rnn`` vs hand-written numpy.

The model: ``BasicLSTMCell(128)`` run by ``af.nn.dynamic_rnn`` over inputs of batch 32, 50
time steps, depth 128, loss ``reduce_sum(outputs ** 2)``, gradients with respect to the
inputs, the kernel and the bias. The baseline is the same LSTM written in numpy in this
process: a forward loop keeping each step's gates, and backpropagation through time. Both
use float32 and the same weights; the gradients are compared before timing. TF1's
``dynamic_rnn`` is timed as well when a Python with TensorFlow is found (``tf.compat.v1``,
run in ``$ASYNCFLOW_TF_PYTHON`` or this interpreter): report only.

Target: asyncflow <= 1.5x numpy (median step wall time). CPU time is printed too: the
machines are shared and wall time is noisy.

Run: ``python bench/bench_rnn.py [--repeats 10] [--units 128] [--batch 32] [--steps 50]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import trio

import asyncflow as af


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm_step(x, kernel, bias, forget_bias=1.0):
    """Forward and backward of TF1's BasicLSTMCell over ``x`` [T, B, D]; returns
    ``(loss, dx, dkernel, dbias)`` for ``loss = sum(h_t ** 2)``."""
    steps, batch, _ = x.shape
    units = bias.shape[0] // 4
    h = np.zeros((batch, units), x.dtype)
    c = np.zeros((batch, units), x.dtype)
    saved = []
    loss = 0.0
    for t in range(steps):
        joined = np.concatenate([x[t], h], axis=1)
        gates = joined @ kernel + bias
        i, j, f, o = np.split(gates, 4, axis=1)
        si, tj, sf, so = sigmoid(i), np.tanh(j), sigmoid(f + forget_bias), sigmoid(o)
        c_new = c * sf + si * tj
        tc = np.tanh(c_new)
        h = tc * so
        saved.append((joined, c, si, tj, sf, so, tc))
        c = c_new
        loss += float(np.sum(h * h))
    dkernel = np.zeros_like(kernel)
    dbias = np.zeros_like(bias)
    dx = np.zeros_like(x)
    dh_next = np.zeros((batch, units), x.dtype)
    dc_next = np.zeros((batch, units), x.dtype)
    depth = x.shape[2]
    for t in reversed(range(steps)):
        joined, c_prev, si, tj, sf, so, tc = saved[t]
        h_t = tc * so
        dh = 2.0 * h_t + dh_next
        do = dh * tc * so * (1 - so)
        dc = dh * so * (1 - tc * tc) + dc_next
        di = dc * tj * si * (1 - si)
        dj = dc * si * (1 - tj * tj)
        df = dc * c_prev * sf * (1 - sf)
        dgates = np.concatenate([di, dj, df, do], axis=1)
        dkernel += joined.T @ dgates
        dbias += dgates.sum(axis=0)
        djoined = dgates @ kernel.T
        dx[t] = djoined[:, :depth]
        dh_next = djoined[:, depth:]
        dc_next = dc * sf
    return loss, dx, dkernel, dbias


def build(units, batch, steps, depth):
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [steps, batch, depth], name="x")
        cell = af.nn.rnn_cell.BasicLSTMCell(units)
        outputs, _ = af.nn.dynamic_rnn(cell, x, dtype=af.float32, time_major=True)
        loss = af.reduce_sum(outputs * outputs)
        kernel, bias = sorted(af.trainable_variables(), key=lambda v: v.name)[::-1]
        grads = af.gradients(loss, [x, kernel, bias])
    return graph, x, loss, grads, kernel, bias


def timed(fn, repeats):
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return float(np.median(walls)), float(np.median(cpus))


async def bench_asyncflow(args, x0, kernel0, bias0):
    graph, x, loss, grads, kernel, bias = build(args.units, args.batch, args.steps, args.depth)
    async with af.Session(graph=graph) as sess:
        await sess.run([kernel.initializer, bias.initializer])
        await kernel.load(kernel0, sess)
        await bias.load(bias0, sess)
        result = await sess.run([loss] + grads, {x: x0})
        for _ in range(2):  # warm-up: compile and first runs
            await sess.run(grads, {x: x0})
        walls, cpus = [], []
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            await sess.run(grads, {x: x0})
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return result, float(np.median(walls)), float(np.median(cpus))


TF_SCRIPT = """
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
units, batch, steps, depth, repeats = map(int, sys.argv[1:6])
x = tf.placeholder(tf.float32, [steps, batch, depth])
cell = tf.nn.rnn_cell.BasicLSTMCell(units)
outputs, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, time_major=True)
loss = tf.reduce_sum(outputs * outputs)
grads = tf.gradients(loss, [x] + tf.trainable_variables())
x0 = np.random.default_rng(0).standard_normal((steps, batch, depth)).astype(np.float32)
config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
with tf.Session(config=config) as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(3):
        sess.run(grads, {x: x0})
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        sess.run(grads, {x: x0})
        walls.append(time.perf_counter() - start)
print(json.dumps({"wall": float(np.median(walls))}))
"""


def bench_tf(args):
    for python in (os.environ.get("ASYNCFLOW_TF_PYTHON"), sys.executable):
        if not python or not os.path.exists(python):
            continue
        env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": ""}
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
            handle.write(textwrap.dedent(TF_SCRIPT))
        try:
            done = subprocess.run([python, handle.name, str(args.units), str(args.batch),
                                   str(args.steps), str(args.depth), str(args.repeats)],
                                  capture_output=True, text=True, timeout=900, env=env)
        finally:
            os.unlink(handle.name)
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])["wall"]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--depth", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((args.steps, args.batch, args.depth)).astype(np.float32)
    kernel0 = (rng.standard_normal((args.depth + args.units, 4 * args.units)) * 0.05).astype(np.float32)
    bias0 = (rng.standard_normal(4 * args.units) * 0.05).astype(np.float32)

    ours, af_wall, af_cpu = trio.run(bench_asyncflow, args, x0, kernel0, bias0)
    reference = numpy_lstm_step(x0, kernel0, bias0)
    for name, mine, theirs in zip(["loss", "dx", "dkernel", "dbias"], ours, reference):
        np.testing.assert_allclose(mine, theirs, rtol=2e-3, atol=2e-3, err_msg=name)
    np_wall, np_cpu = timed(lambda: numpy_lstm_step(x0, kernel0, bias0), args.repeats)
    print(f"LSTM {args.units} units, batch {args.batch}, {args.steps} steps, depth {args.depth}: "
          "forward+backward step (median)")
    print(f"  numpy (hand-written BPTT): {np_wall * 1e3:8.2f} ms wall {np_cpu * 1e3:8.2f} ms CPU")
    print(f"  asyncflow dynamic_rnn:     {af_wall * 1e3:8.2f} ms wall {af_cpu * 1e3:8.2f} ms CPU"
          f"   ratio {af_wall / np_wall:.2f}x wall, {af_cpu / np_cpu:.2f}x CPU (target <= 1.5x)")
    tf_wall = bench_tf(args)
    if tf_wall is None:
        print("  TF1 dynamic_rnn:           not measured (no Python with TensorFlow)")
    else:
        print(f"  TF1 dynamic_rnn (1 thread): {tf_wall * 1e3:7.2f} ms wall   asyncflow / TF1 "
              f"{af_wall / tf_wall:.2f}x")


if __name__ == "__main__":
    main()
