"""Train a softmax regression on sklearn's digits through a queue-based input pipeline.

The data is written as ``.npz`` shards to a temporary directory. Queue runners (trio tasks)
dequeue shard names from a filename queue, read rows with ``af.NumpyRecordReader`` (files are
loaded on worker threads, never on the event loop) and fill a RandomShuffleQueue; the training
loop dequeues shuffled batches from it. Every step, reader and trainer alike, is traced, and
with ``--timeline FILE`` the merged trace is written with ``af.timeline.write``: open it in
Perfetto to see reading steps overlapping training steps. The shards are removed at the end.

Usage: ``python demos/input_pipeline.py [--epochs 30] [--timeline FILE]``
"""
from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits

import asyncflow as af
from asyncflow import aio

SHARDS = 8
BATCH = 32
READ = 64
THREADS = 2
WARM_UP_STEPS = 20


def write_shards(directory, x, y):
    paths = []
    for i, (xs, ys) in enumerate(zip(np.array_split(x, SHARDS), np.array_split(y, SHARDS))):
        path = pathlib.Path(directory) / f"digits-{i:02d}-of-{SHARDS:02d}.npz"
        np.savez(path, x=xs, y=ys)
        paths.append(str(path))
    return paths


def build(paths, epochs):
    filenames = af.train.string_input_producer(paths, num_epochs=epochs, seed=1)
    reader = af.NumpyRecordReader([af.float32, af.int64], shapes=[[64], []], names=["x", "y"])
    _, rows = reader.read_up_to(filenames, READ)
    x, y = af.train.shuffle_batch([rows["x"], rows["y"]], batch_size=BATCH, capacity=1000,
                                  min_after_dequeue=300, num_threads=THREADS, seed=2,
                                  enqueue_many=True, allow_smaller_final_batch=True)
    # The digits MLP of the main demo (64-128-10).
    init = af.glorot_uniform_initializer(seed=3)
    w1 = af.Variable(init([64, 128]), name="hidden/w")
    b1 = af.Variable(np.zeros([128], np.float32), name="hidden/b")
    w2 = af.Variable(init([128, 10]), name="logits/w")
    b2 = af.Variable(np.zeros([10], np.float32), name="logits/b")
    logits = af.matmul(af.nn.relu(af.matmul(x / 16.0, w1) + b1), w2) + b2
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
        labels=af.cast(y, af.int32), logits=logits))
    train_op = af.train.GradientDescentOptimizer(0.5).minimize(loss)
    return loss, train_op, (w1, b1, w2, b2)


async def main(epochs, timeline_path):
    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    held_out = 300
    with tempfile.TemporaryDirectory() as directory, af.Graph().as_default():
        paths = write_shards(directory, x[held_out:], y[held_out:])
        loss, train_op, params = build(paths, epochs)
        trace = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
        stats = []

        def keep(metadata):
            stats.extend(metadata.step_stats or [])

        async with af.Session() as sess:
            await sess.run([af.global_variables_initializer(), af.local_variables_initializer()])
            steps, start, losses = 0, time.perf_counter(), []
            waited_us, step_us = 0, 0  # time the training step spent waiting for its batch
            async with af.train.start_queue_runners(sess, options=trace, on_metadata=keep):
                while True:
                    metadata = af.RunMetadata()
                    value, _ = await sess.run([loss, train_op], options=trace,
                                              run_metadata=metadata)
                    keep(metadata)
                    if steps >= WARM_UP_STEPS and metadata.step_stats:
                        records = metadata.step_stats
                        step_us += max(r.end_us for r in records) - min(r.start_us for r in records)
                        # Only a dequeue that could not finish inline waited for data.
                        waited_us += sum(r.end_us - r.start_us for r in records
                                         if r.op_type.startswith("QueueDequeue") and r.waited)
                    losses.append(float(value))
                    steps += 1
                    if steps % 200 == 0:
                        print(f"step {steps:5d}  loss {np.mean(losses[-200:]):.4f}")
            elapsed = time.perf_counter() - start
            w1, b1, w2, b2 = await sess.run(list(params))
    hidden = np.maximum(x[:held_out] / 16.0 @ w1 + b1, 0)
    accuracy = float(np.mean(np.argmax(hidden @ w2 + b2, axis=1) == y[:held_out]))
    print(f"{steps} steps in {elapsed:.1f} s ({steps * BATCH / elapsed:.0f} examples/s); "
          f"final loss {np.mean(losses[-50:]):.4f}; held-out accuracy {accuracy:.3f}")
    if step_us:
        print(f"after {WARM_UP_STEPS} warm-up steps, training steps waited for data "
              f"{100 * waited_us / step_us:.1f}% of their time (dequeues that had to wait)")
    if timeline_path:
        timeline = getattr(af, "timeline", None)
        if timeline is None:
            print("af.timeline is not available in this build; no timeline written")
        else:
            metadata = af.RunMetadata()
            metadata.step_stats = sorted(stats, key=lambda s: s.start_us)
            timeline.write(metadata, timeline_path)
            readers = sum(1 for s in stats if s.op_type == "ReaderReadUpTo")
            print(f"timeline: {timeline_path} ({len(stats)} nodes, {readers} reads; open it "
                  "in https://ui.perfetto.dev)")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--timeline", default=None, metavar="FILE",
                        help="write a Chrome trace of the training steps and the queue runners "
                             "to FILE (about 9 MB for 30 epochs)")
    args = parser.parse_args()
    aio.run_trio(main, args.epochs, args.timeline)
    if not args.timeline:
        print("(--timeline FILE writes a trace of the pipeline to open in https://ui.perfetto.dev)")
