"""Control flow demo: an RNN trained with gradients through time, and a data-dependent loop.

1. A recurrent net written as ``af.while_loop`` over the time steps of a batch of sequences,
   ``h = tanh(x_t W_x + h W_h + b)``, learns to output the mean of each sequence from its
   final state. ``optimizer.minimize`` differentiates through the loop: the forward loop
   saves each step's values on stacks and a gradient loop replays the steps backwards.
2. Collatz: the number of steps to reach 1, a loop whose trip count depends on the data,
   with an ``af.cond`` choosing n/2 or 3n+1 in every iteration.

    python demos/control_flow.py [--steps 300] [--length 8]
"""
from __future__ import annotations

import argparse

import numpy as np

import asyncflow as af
from asyncflow import aio


def build_rnn(length, hidden=16, batch=32, seed=0):
    """The RNN graph: returns (inputs, targets, loss, train_op)."""
    af.set_random_seed(seed)
    inputs = af.placeholder(af.float32, [length, batch, 1], name="inputs")
    targets = af.placeholder(af.float32, [batch, 1], name="targets")
    w_x = af.Variable(af.random_normal([1, hidden], stddev=0.5, seed=1), name="w_x")
    w_h = af.Variable(af.random_normal([hidden, hidden], stddev=0.3, seed=2), name="w_h")
    bias = af.Variable(af.zeros([hidden]), name="b")
    w_out = af.Variable(af.random_normal([hidden, 1], stddev=0.3, seed=3), name="w_out")

    def step(t, h):
        x_t = af.gather(inputs, t)
        return t + 1, af.tanh(af.matmul(x_t, w_x) + af.matmul(h, w_h) + bias)

    _, final = af.while_loop(lambda t, h: t < length, step,
                             (af.constant(0), af.zeros([batch, hidden])), name="rnn")
    prediction = af.matmul(final, w_out)
    loss = af.reduce_mean(af.square(prediction - targets))
    train_op = af.train.AdamOptimizer(0.01).minimize(loss)
    return inputs, targets, loss, train_op


def batches(length, batch, rng):
    while True:
        x = rng.uniform(-1.0, 1.0, size=(length, batch, 1)).astype(np.float32)
        yield x, x.mean(axis=0)


def build_collatz():
    """Steps of the Collatz sequence from ``n`` down to 1."""
    n = af.placeholder(af.int64, [], name="n")

    def body(value, steps):
        value = af.cond(af.equal(af.mod(value, 2), 0), lambda: af.floordiv(value, 2),
                        lambda: 3 * value + 1)
        return value, steps + 1
    _, steps = af.while_loop(lambda value, steps: value > 1, body, (n, af.constant(0)),
                             name="collatz")
    return n, steps


async def main(train_steps, length):
    graph = af.Graph()
    with graph.as_default():
        inputs, targets, loss, train_op = build_rnn(length)
        n, steps = build_collatz()
        init = af.global_variables_initializer()
    rng = np.random.default_rng(0)
    data = batches(length, 32, rng)
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        x, y = next(data)
        first = await sess.run(loss, {inputs: x, targets: y})
        print(f"RNN over {length} steps, batch 32: initial loss {first:.4f}")
        for index in range(1, train_steps + 1):
            x, y = next(data)
            value, _ = await sess.run([loss, train_op], {inputs: x, targets: y})
            if index % max(1, train_steps // 5) == 0:
                print(f"  step {index:4d}  loss {value:.4f}")
        x, y = next(data)
        final = await sess.run(loss, {inputs: x, targets: y})
        print(f"final loss on a fresh batch {final:.4f} ({first / max(final, 1e-9):.0f}x lower)")
        for start in (1, 6, 7, 27, 97, 871):
            print(f"Collatz steps from {start}: {await sess.run(steps, {n: start})}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--length", type=int, default=8)
    args = parser.parse_args()
    aio.run_trio(main, args.steps, args.length)
