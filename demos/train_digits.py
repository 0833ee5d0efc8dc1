"""The main demo: train an MLP on scikit-learn's bundled digits, TF1 style, with asyncflow.

It builds the graph (placeholders, dense layers of matmul + relu, softmax cross-entropy, an
optimizer), trains with a progress bar, writes a TensorBoard log (scalars and the graph), saves
a checkpoint, restores it into a fresh session and prints the test accuracy.

    python demos/train_digits.py [--steps 600] [--logdir runs/digits]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

# Small matrices gain nothing from BLAS threads, and spinning thread pools on shared cores
# cost far more than they give: one BLAS thread unless the user chose otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import asyncflow as af
from asyncflow import aio


def load_data(seed=0):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def dense(x, units, name, activation=None):
    with af.variable_scope(name):
        w = af.get_variable("w", [x.shape[-1], units], initializer=af.glorot_uniform_initializer(seed=1))
        b = af.get_variable("b", [units], initializer=af.zeros_initializer())
        y = af.nn.bias_add(af.matmul(x, w), b)
        return activation(y) if activation else y


def build_model(learning_rate=0.002):
    x = af.placeholder(af.float32, [None, 64], name="x")
    labels = af.placeholder(af.int32, [None], name="labels")
    hidden = dense(x, 128, "hidden", af.nn.relu)
    logits = dense(hidden, 10, "logits")
    with af.name_scope("metrics"):
        loss = af.reduce_mean(
            af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
        accuracy = af.reduce_mean(af.cast(af.equal(af.cast(af.argmax(logits, 1), af.int32), labels),
                                          af.float32), name="accuracy")
    global_step = af.train.get_or_create_global_step()
    train_op = af.train.AdamOptimizer(learning_rate).minimize(loss, global_step=global_step)
    # A summary's tag is its op name, uniquified as in TF1: next to an op named "loss" it would
    # read "loss_1". The tensors live under "metrics/", so the tags read "loss" and "accuracy".
    af.summary.scalar("loss", loss)
    af.summary.scalar("accuracy", accuracy)
    return x, labels, loss, accuracy, train_op, global_step, af.summary.merge_all()


async def main(steps, batch_size, logdir, checkpoint_dir):
    x_train, x_test, y_train, y_test = load_data()
    graph = af.Graph()
    with graph.as_default():
        af.set_random_seed(0)
        x, labels, loss, accuracy, train_op, global_step, summaries = build_model()
        saver = af.train.Saver(max_to_keep=2)
        init = af.global_variables_initializer()
    rng = np.random.default_rng(0)
    writer = af.summary.FileWriter(logdir, graph)
    started = time.perf_counter()
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        columns = [TextColumn("training"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("loss {task.fields[loss]:.4f}"), TimeElapsedColumn()]
        with Progress(*columns) as progress:
            task = progress.add_task("train", total=steps, loss=float("nan"))
            for step in range(steps):
                index = rng.choice(len(x_train), batch_size, replace=False)
                feed = {x: x_train[index], labels: y_train[index]}
                if step % 20 == 0:
                    loss_value, summary, _ = await sess.run([loss, summaries, train_op], feed)
                    writer.add_summary(summary, step)
                else:
                    loss_value, _ = await sess.run([loss, train_op], feed)
                progress.update(task, advance=1, loss=float(loss_value))
        train_seconds = time.perf_counter() - started
        path = await saver.save(sess, os.path.join(checkpoint_dir, "digits"), global_step=global_step)
        trained_accuracy = await sess.run(accuracy, {x: x_test, labels: y_test})
    writer.close()
    # A fresh session starts uninitialized; restoring needs no initializer.
    async with af.Session(graph=graph) as sess:
        await saver.restore(sess, af.train.latest_checkpoint(checkpoint_dir))
        restored_accuracy, step_value = await sess.run([accuracy, global_step],
                                                       {x: x_test, labels: y_test})
    print(f"trained {steps} steps (batch {batch_size}) in {train_seconds:.2f} s "
          f"({train_seconds / steps * 1e3:.2f} ms/step)")
    print(f"checkpoint: {path}")
    print(f"TensorBoard log: {logdir}")
    print(f"test accuracy after training: {trained_accuracy:.4f}")
    print(f"test accuracy after restoring step {step_value} into a new session: {restored_accuracy:.4f}")
    return restored_accuracy


def cli():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--logdir", default=None,
                        help="TensorBoard log directory to keep (default: a temporary one)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="checkpoint directory to keep (default: a temporary one)")
    args = parser.parse_args()
    # Whatever the user did not ask to keep goes to a temporary directory removed at the end.
    with tempfile.TemporaryDirectory(prefix="asyncflow-digits-") as scratch:
        logdir = args.logdir or os.path.join(scratch, "logs")
        checkpoint_dir = args.checkpoint_dir or os.path.join(scratch, "checkpoints")
        accuracy = aio.run_trio(main, args.steps, args.batch_size, logdir, checkpoint_dir)
    if args.logdir:
        print(f"view it with: tensorboard --logdir {args.logdir}")
    else:
        print("(the log and the checkpoint were temporary; --logdir DIR and --checkpoint-dir DIR "
              "keep them)")
    if accuracy < 0.97:
        raise SystemExit(f"accuracy {accuracy:.4f} is below 0.97")


if __name__ == "__main__":
    cli()
