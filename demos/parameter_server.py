"""Data-parallel training on a parameter server: one ps and two workers on this machine.

Starts three ``asyncflow worker`` processes (a ps and two workers), then trains the digits MLP
(scikit-learn's bundled 8x8 digits) twice, TF1 style:

1. **Asynchronous, between-graph replication.** Two client tasks in this process each build the
   same graph under ``af.train.replica_device_setter(cluster, worker_device=...)``: variables
   (and Adam's slots) live on the ps, each client's forward/backward pass runs on its own
   worker, and each applies its own gradients to the shared variables whenever it is done
   (no coordination; updates interleave on the ps).
2. **Synchronous, in-graph replication.** One client builds one graph with a tower per worker;
   each tower computes gradients on half of the batch, the ps averages them and applies one
   update per step.

    python demos/parameter_server.py [--steps 200]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import trio
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import asyncflow as af
from asyncflow import aio
from local_cluster import local_cluster

BATCH = 128


def load_data():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def model(x, labels):
    """Logits, mean loss and accuracy of a 64-128-10 MLP (variables via get_variable)."""
    with af.variable_scope("mlp", reuse=af.AUTO_REUSE if hasattr(af, "AUTO_REUSE") else None):
        w1 = af.get_variable("w1", [64, 128], initializer=af.glorot_uniform_initializer(seed=1))
        b1 = af.get_variable("b1", [128], initializer=af.zeros_initializer())
        w2 = af.get_variable("w2", [128, 10], initializer=af.glorot_uniform_initializer(seed=2))
        b2 = af.get_variable("b2", [10], initializer=af.zeros_initializer())
    return _forward(x, labels, (w1, b1, w2, b2))


def _forward(x, labels, params):
    w1, b1, w2, b2 = params
    hidden = af.nn.relu(af.matmul(x, w1) + b1)
    logits = af.matmul(hidden, w2) + b2
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    correct = af.equal(af.cast(af.argmax(logits, 1), af.int32), labels)
    return loss, af.reduce_mean(af.cast(correct, af.float32))


def async_replica_graph(cluster, task):
    """One client's graph: variables on the ps, computation on /job:worker/task:<task>."""
    graph = af.Graph()
    with graph.as_default(), af.device(af.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        x = af.placeholder(af.float32, [None, 64], name="x")
        labels = af.placeholder(af.int32, [None], name="labels")
        loss, accuracy = model(x, labels)
        step = af.train.get_or_create_global_step()
        train = af.train.AdamOptimizer(0.005).minimize(loss, global_step=step)
        init = af.global_variables_initializer()
    return graph, x, labels, loss, accuracy, train, step, init


async def train_async(cluster, data, steps):
    x_train, x_test, y_train, y_test = data
    replicas = [async_replica_graph(cluster, task) for task in range(2)]
    async with af.Session(graph=replicas[0][0], cluster=cluster) as chief:
        await chief.run(replicas[0][7])  # the chief initializes the shared variables once
    counts = [0, 0]

    async def replica(task):
        graph, x, labels, loss, _, train, _, _ = replicas[task]
        rng = np.random.default_rng(task)
        async with af.Session(graph=graph, cluster=cluster) as sess:
            for _ in range(steps):
                index = rng.choice(len(x_train), BATCH, replace=False)
                await sess.run([loss, train], {x: x_train[index], labels: y_train[index]})
                counts[task] += 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for task in range(2):
            nursery.start_soon(replica, task)
    seconds = time.perf_counter() - started
    graph, x, labels, _, accuracy, _, step, _ = replicas[1]
    async with af.Session(graph=graph, cluster=cluster) as sess:
        test_accuracy, global_step = await sess.run([accuracy, step], {x: x_test, labels: y_test})
    print(f"async: workers ran {counts[0]} and {counts[1]} steps, each applying its own "
          f"gradients to the ps; global step {global_step}; {seconds:.2f} s "
          f"({seconds / sum(counts) * 1e3:.1f} ms per update); test accuracy {test_accuracy:.4f}")
    return test_accuracy


def sync_graph():
    """In-graph replication: a tower per worker, gradients averaged and applied on the ps."""
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            with af.variable_scope("sync"):
                params = [af.get_variable("w1", [64, 128],
                                          initializer=af.glorot_uniform_initializer(seed=1)),
                          af.get_variable("b1", [128], initializer=af.zeros_initializer()),
                          af.get_variable("w2", [128, 10],
                                          initializer=af.glorot_uniform_initializer(seed=2)),
                          af.get_variable("b2", [10], initializer=af.zeros_initializer())]
        optimizer = af.train.AdamOptimizer(0.005)
        feeds, tower_grads = [], []
        for task in range(2):
            with af.device(f"/job:worker/task:{task}"), af.name_scope(f"tower{task}"):
                x = af.placeholder(af.float32, [None, 64], name="x")
                labels = af.placeholder(af.int32, [None], name="labels")
                loss, accuracy = _forward(x, labels, params)
                grads = optimizer.compute_gradients(loss, var_list=params)
            feeds.append((x, labels))
            tower_grads.append([g for g, _ in grads])
        with af.device("/job:ps/task:0"):
            averaged = [(af.add_n([t[i] for t in tower_grads]) / 2.0, v)
                        for i, v in enumerate(params)]
            train = optimizer.apply_gradients(averaged)
        init = af.global_variables_initializer()
    return graph, feeds, accuracy, train, init


async def train_sync(cluster, data, steps):
    x_train, x_test, y_train, y_test = data
    graph, feeds, accuracy, train, init = sync_graph()
    rng = np.random.default_rng(0)
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(init)
        started = time.perf_counter()
        for _ in range(steps):
            index = rng.choice(len(x_train), 2 * BATCH, replace=False)
            halves = np.split(index, 2)
            feed = {}
            for (x, labels), half in zip(feeds, halves):
                feed[x], feed[labels] = x_train[half], y_train[half]
            await sess.run(train, feed)
        seconds = time.perf_counter() - started
        x, labels = feeds[1]
        test_accuracy = await sess.run(accuracy, {x: x_test, labels: y_test})
    print(f"sync: {steps} steps, each averaging both workers' gradients ({BATCH} examples "
          f"each) on the ps before one update; {seconds:.2f} s "
          f"({seconds / steps * 1e3:.1f} ms per step); test accuracy {test_accuracy:.4f}")
    return test_accuracy


async def main(cluster, steps):
    data = load_data()
    await af.Session.reset(cluster)
    first = await train_async(cluster, data, steps)
    second = await train_sync(cluster, data, steps)
    return min(first, second)


def cli():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per worker / sync steps")
    args = parser.parse_args()
    print("starting a ps and two workers:")
    started = time.perf_counter()
    with local_cluster({"ps": 1, "worker": 2}) as spec:
        cluster = af.ClusterSpec(spec)
        accuracy = aio.run_trio(main, cluster, args.steps)
    print(f"done in {time.perf_counter() - started:.1f} s")
    if accuracy < 0.9:
        raise SystemExit(f"accuracy {accuracy:.4f} is below 0.9")


if __name__ == "__main__":
    cli()
