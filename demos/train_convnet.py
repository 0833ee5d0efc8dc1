"""A small convnet on scikit-learn's 8x8 digits: conv2d, max_pool, dense, trained with Adam.

    python demos/train_convnet.py [--steps 400]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import asyncflow as af
from asyncflow import aio
from train_digits import load_data


def build_model(learning_rate=0.003):
    images = af.placeholder(af.float32, [None, 64], name="images")
    labels = af.placeholder(af.int32, [None], name="labels")
    x = af.reshape(images, [-1, 8, 8, 1])
    init = af.glorot_uniform_initializer(seed=3)
    with af.variable_scope("conv1"):
        w = af.get_variable("w", [3, 3, 1, 16], initializer=init)
        b = af.get_variable("b", [16], initializer=af.zeros_initializer())
        x = af.nn.relu(af.nn.bias_add(af.nn.conv2d(x, w, strides=1, padding="SAME"), b))
        x = af.nn.max_pool(x, ksize=2, strides=2, padding="VALID")          # 4x4x16
    with af.variable_scope("conv2"):
        w = af.get_variable("w", [3, 3, 16, 32], initializer=init)
        b = af.get_variable("b", [32], initializer=af.zeros_initializer())
        x = af.nn.relu(af.nn.bias_add(af.nn.conv2d(x, w, strides=1, padding="SAME"), b))
        x = af.nn.max_pool(x, ksize=2, strides=2, padding="VALID")          # 2x2x32
    x = af.reshape(x, [-1, 2 * 2 * 32])
    with af.variable_scope("logits"):
        w = af.get_variable("w", [128, 10], initializer=init)
        b = af.get_variable("b", [10], initializer=af.zeros_initializer())
        logits = af.nn.bias_add(af.matmul(x, w), b)
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    accuracy = af.reduce_mean(af.cast(af.equal(af.cast(af.argmax(logits, 1), af.int32), labels), af.float32))
    train_op = af.train.AdamOptimizer(learning_rate).minimize(loss)
    return images, labels, loss, accuracy, train_op


async def main(steps, batch_size):
    x_train, x_test, y_train, y_test = load_data()
    with af.Graph().as_default() as graph:
        images, labels, loss, accuracy, train_op = build_model()
        init = af.global_variables_initializer()
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        for step in range(1, steps + 1):
            index = rng.choice(len(x_train), batch_size, replace=False)
            loss_value, _ = await sess.run([loss, train_op], {images: x_train[index], labels: y_train[index]})
            if step % 100 == 0:
                print(f"step {step:4d}  loss {loss_value:.4f}")
        test_accuracy = await sess.run(accuracy, {images: x_test, labels: y_test})
    seconds = time.perf_counter() - start
    print(f"convnet: {steps} steps in {seconds:.1f} s ({seconds / steps * 1e3:.1f} ms/step); "
          f"test accuracy {test_accuracy:.4f}")
    return test_accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    accuracy = aio.run_trio(main, args.steps, args.batch_size)
    if accuracy < 0.95:
        raise SystemExit(f"accuracy {accuracy:.4f} is below 0.95")
