"""Training-step benchmark: the digits MLP (64-128-10, batch 256, SGD) in asyncflow vs the same
step hand-written in numpy (forward, backward, update), measured in the same process, with
the two interleaved so machine noise hits both alike. Also times building the gradient graph
of a 100-layer MLP.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import trio

import asyncflow as af

BATCH, IN, HIDDEN, OUT, LR = 256, 64, 128, 10, 0.1
ROUNDS, STEPS = 15, 20


def numpy_model(rng):
    return {"w1": rng.standard_normal((IN, HIDDEN)).astype(np.float32) * 0.1,
            "b1": np.zeros(HIDDEN, np.float32),
            "w2": rng.standard_normal((HIDDEN, OUT)).astype(np.float32) * 0.1,
            "b2": np.zeros(OUT, np.float32)}


def numpy_step(p, x, labels):
    h = x @ p["w1"] + p["b1"]
    a = np.maximum(h, 0)
    logits = a @ p["w2"] + p["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    probs = exp / exp.sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(labels)), labels]).mean()
    dlogits = probs
    dlogits[np.arange(len(labels)), labels] -= 1
    dlogits /= len(labels)
    dw2 = a.T @ dlogits
    db2 = dlogits.sum(axis=0)
    dh = (dlogits @ p["w2"].T) * (h > 0)
    dw1 = x.T @ dh
    db1 = dh.sum(axis=0)
    p["w1"] = p["w1"] - LR * dw1
    p["b1"] = p["b1"] - LR * db1
    p["w2"] = p["w2"] - LR * dw2
    p["b2"] = p["b2"] - LR * db2
    return loss


def build_graph():
    x = af.placeholder(af.float32, [None, IN])
    labels = af.placeholder(af.int32, [None])
    w1 = af.Variable(af.random_normal([IN, HIDDEN], stddev=0.1, seed=1))
    b1 = af.Variable(af.zeros([HIDDEN]))
    w2 = af.Variable(af.random_normal([HIDDEN, OUT], stddev=0.1, seed=2))
    b2 = af.Variable(af.zeros([OUT]))
    hidden = af.nn.relu(af.matmul(x, w1) + b1)
    logits = af.matmul(hidden, w2) + b2
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = af.train.GradientDescentOptimizer(LR).minimize(loss)
    return x, labels, loss, train


def gradient_graph_seconds(layers=100, width=32):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, width])
        h = x
        for i in range(layers):
            w = af.Variable(af.zeros([width, width]), name=f"w{i}")
            h = af.nn.relu(af.matmul(h, w))
        loss = af.reduce_sum(h)
        start = time.perf_counter()
        af.gradients(loss, af.trainable_variables())
        return time.perf_counter() - start


def report(kind, af_times, np_times):
    af_ms, np_ms = statistics.median(af_times) * 1e3, statistics.median(np_times) * 1e3
    print(f"MLP {IN}-{HIDDEN}-{OUT}, batch {BATCH}, SGD step ({kind} time): asyncflow "
          f"{af_ms:.3f} ms, hand-written numpy {np_ms:.3f} ms, ratio {af_ms / np_ms:.2f}")


async def step_times(rounds=ROUNDS, steps=STEPS):
    """Per-step seconds of the asyncflow and the numpy SGD step, interleaved by round.

    Returns:
        ``(asyncflow wall, numpy wall, asyncflow cpu, numpy cpu)``: lists of ``rounds``
        means over ``steps`` steps each.
    """
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal((BATCH, IN)).astype(np.float32)
    y_value = rng.integers(0, OUT, BATCH).astype(np.int32)
    params = numpy_model(rng)
    graph = af.Graph()
    with graph.as_default():
        x, labels, loss, train = build_graph()
        init = af.global_variables_initializer()
    af_times, np_times, af_cpu, np_cpu = [], [], [], []
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        feed = {x: x_value, labels: y_value}
        for _ in range(3):
            await sess.run([loss, train], feed)
            numpy_step(params, x_value, y_value)
        for _ in range(rounds):
            for clock, times in ((time.perf_counter, af_times), (time.process_time, af_cpu)):
                start = clock()
                for _ in range(steps):
                    await sess.run([loss, train], feed)
                times.append((clock() - start) / steps)
            for clock, times in ((time.perf_counter, np_times), (time.process_time, np_cpu)):
                start = clock()
                for _ in range(steps):
                    numpy_step(params, x_value, y_value)
                times.append((clock() - start) / steps)
    return af_times, np_times, af_cpu, np_cpu


async def main():
    af_times, np_times, af_cpu, np_cpu = await step_times()
    report("wall", af_times, np_times)
    # CPU time of this process: not inflated when other processes take the cores.
    report("cpu", af_cpu, np_cpu)
    print(f"gradient graph of a 100-layer MLP built in {gradient_graph_seconds() * 1e3:.0f} ms")


if __name__ == "__main__":
    trio.run(main)
