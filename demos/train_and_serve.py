"""Train and serve in one trio nursery: the served answers improve while you watch.

Theory of operation: one ``af.Session`` holds the digits MLP's variables. In one nursery,
- a training task runs Adam steps on minibatches of the training digits;
- ``--clients`` client tasks keep asking for predictions of random held-out digits through a
  ``serving.Batcher`` on the same session, so concurrent questions become one step per batch;
- every ``--report-every`` training steps the training task prints the loss, how many
  answers were served since the last report and how many of them were right, and the
  served answers for a few fixed probe digits.

Steps never block each other: a serving step reads the variables' current snapshot (values
are immutable), and a training step replaces them, so every answer comes from some whole
training step, never half of one. When training ends, the nursery is cancelled: the Batcher
fails requests still waiting and the clients stop.

Usage: ``python demos/train_and_serve.py [--steps 400] [--clients 16] [--report-every 40]``.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import trio

import asyncflow as af
from asyncflow import aio
from asyncflow.serving import Batcher

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inference_service import build_digits_model, load_digits_split  # noqa: E402


class Window:
    """Counts of served answers since the last report."""

    def __init__(self):
        self.answers = 0
        self.correct = 0

    def take(self):
        answers, correct = self.answers, self.correct
        self.answers = self.correct = 0
        return answers, correct


async def train_and_serve(steps=400, clients=16, report_every=40, batch_size=32,
                          learning_rate=0.0005, seed=0, print=print):
    """Run the demo; returns the accuracy of the served answers in each report window."""
    train_x, train_y, test_x, test_y = load_digits_split(seed=seed)
    probes = np.arange(6)
    window, history = Window(), []
    with af.Graph().as_default():
        model = build_digits_model(learning_rate=learning_rate, seed=seed)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            async with Batcher(sess, [model.x], model.classes, max_batch_size=64,
                               max_wait_ms=2.0) as batcher:

                async def client(index):
                    rng = np.random.default_rng(seed + 100 + index)
                    while True:
                        picks = rng.integers(0, len(test_x), 1)
                        answer = await batcher.run({model.x: test_x[picks]})
                        window.answers += 1
                        window.correct += int(answer[0] == test_y[picks[0]])

                async def train(cancel_scope):
                    rng = np.random.default_rng(seed)
                    for step in range(1, steps + 1):
                        idx = rng.integers(0, len(train_x), batch_size)
                        feeds = {model.x: train_x[idx], model.labels: train_y[idx]}
                        loss, _ = await sess.run([model.loss, model.train_op], feeds)
                        await trio.sleep(0)  # let the clients' batches in between steps
                        if step % report_every == 0:
                            answers, correct = window.take()
                            accuracy = correct / max(answers, 1)
                            history.append(accuracy)
                            probe_answers = await batcher.run({model.x: test_x[probes]})
                            print(f"step {step:4d}  loss {loss:5.3f} | served {answers:5d} "
                                  f"answers, {accuracy:6.1%} right | probes "
                                  f"{' '.join(map(str, probe_answers))}")
                    cancel_scope.cancel()

                print(f"training {steps} steps while {clients} clients ask; probe labels "
                      f"{' '.join(map(str, test_y[probes]))}")
                async with trio.open_nursery() as nursery:
                    for index in range(clients):
                        nursery.start_soon(client, index)
                    nursery.start_soon(train, nursery.cancel_scope)
                stats = batcher.statistics()
            print(f"served {stats.requests} requests in {stats.batches} batched steps "
                  f"(largest {stats.largest_batch} rows) alongside {steps} training steps")
    return history


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--report-every", type=int, default=40)
    args = parser.parse_args(argv)
    aio.run_trio(train_and_serve, args.steps, args.clients, args.report_every)


if __name__ == "__main__":
    main()
