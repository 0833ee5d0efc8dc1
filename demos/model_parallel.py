"""Model parallelism: one model's layers split across two worker processes.

Starts two ``asyncflow worker`` processes and trains the digits MLP (64-256-128-10) with its
first layer (and that layer's variables) on worker 0 and the other
layers plus the loss on worker 1. Every training step crosses between the workers twice: the
activations go forward from worker 0 to worker 1, the gradient of those activations comes back.
The client feeds the images into worker 0's RunGraph and the labels into worker 1's.

    python demos/model_parallel.py [--steps 300]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import asyncflow as af
from asyncflow import aio
from local_cluster import local_cluster


def dense(x, units, name, activation=None, seed=0):
    with af.variable_scope(name):
        w = af.get_variable("w", [x.shape[-1], units],
                            initializer=af.glorot_uniform_initializer(seed=seed))
        b = af.get_variable("b", [units], initializer=af.zeros_initializer())
        y = af.matmul(x, w) + b
        return activation(y) if activation else y


def build():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [None, 64], name="x")
            hidden1 = dense(x, 256, "layer1", af.nn.relu, seed=1)
        with af.device("/job:worker/task:1"):
            labels = af.placeholder(af.int32, [None], name="labels")
            hidden2 = dense(hidden1, 128, "layer2", af.nn.relu, seed=2)
            logits = dense(hidden2, 10, "logits", seed=3)
            loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            correct = af.equal(af.cast(af.argmax(logits, 1), af.int32), labels)
            accuracy = af.reduce_mean(af.cast(correct, af.float32))
        # Gradient ops ask for no device: the placer's cost model puts them next to their
        # inputs, so the backward pass splits the same way; each variable's update runs where
        # the variable lives (a reference edge keeps them together).
        train = af.train.AdamOptimizer(0.003).minimize(loss)
        init = af.global_variables_initializer()
    return graph, x, labels, loss, accuracy, train, init


async def main(cluster, steps):
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32),
        test_size=0.25, random_state=0, stratify=digits.target)
    graph, x, labels, loss, accuracy, train, init = build()
    rng = np.random.default_rng(0)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(init)
        started = time.perf_counter()
        for step in range(steps):
            index = rng.choice(len(x_train), 128, replace=False)
            loss_value, _ = await sess.run([loss, train], {x: x_train[index],
                                                           labels: y_train[index]})
            if step % 100 == 0:
                print(f"  step {step}: loss {loss_value:.4f}")
        seconds = time.perf_counter() - started
        test_accuracy = await sess.run(accuracy, {x: x_test, labels: y_test})
    placement = {}
    for op in graph.get_operations():
        if op.type == "VariableV2":
            placement.setdefault(op.device, []).append(op.name)
    for device, names in sorted(placement.items()):
        print(f"variables on {device}: {', '.join(sorted(names))}")
    print(f"trained {steps} steps split across two workers in {seconds:.2f} s "
          f"({seconds / steps * 1e3:.1f} ms per step); test accuracy {test_accuracy:.4f}")
    return test_accuracy


def cli():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print("starting two workers:")
    started = time.perf_counter()
    with local_cluster({"worker": 2}) as spec:
        accuracy = aio.run_trio(main, af.ClusterSpec(spec), args.steps)
    print(f"done in {time.perf_counter() - started:.1f} s")
    if accuracy < 0.9:
        raise SystemExit(f"accuracy {accuracy:.4f} is below 0.9")


if __name__ == "__main__":
    cli()
