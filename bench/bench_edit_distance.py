"""What ``tf.edit_distance``'s kernel costs (rtf1names): Python's dynamic programming, one
Levenshtein distance per pair of sequences, on the host (``kernels/edit_distance.py``).

Measured in one process, interleaved: a step of ``edit_distance`` of two fed SparseTensors of
``pairs`` sequences of ``length`` int64 values, against the same step fetching a
``size`` of the same fed values instead (the baseline: the feeds, the session and the
executor without the kernel). The figure is each form's best round's mean step time; the
ratio is against the baseline, and ``per entry`` the kernel's share over the entries of both
inputs. It sizes the kernel's ``offload_scale`` (from about a hundred entries, ~0.4 ms, the
executor runs it on a worker thread, off the event loop).

Run: ``.venv/bin/python bench/bench_edit_distance.py [--rounds 5] [--steps 20]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import asyncflow.compat.v1 as tf


def sparse(rng, pairs, length):
    index = np.array([[i, j] for i in range(pairs) for j in range(length)], np.int64)
    return tf.SparseTensorValue(index, rng.randint(0, 5, len(index)).astype(np.int64),
                                [pairs, length])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    print(f"{'pairs':>6} {'length':>6} {'entries':>8} {'baseline ms':>12} {'edit ms':>9} "
          f"{'ratio':>7} {'us/entry':>9}")
    for pairs, length in [(10, 10), (30, 10), (100, 10), (100, 30)]:
        with tf.Graph().as_default():
            h, t = tf.sparse_placeholder(tf.int64), tf.sparse_placeholder(tf.int64)
            forms = {"baseline": tf.size(h.values) + tf.size(t.values),
                     "edit": tf.edit_distance(h, t)}
            feed = {h: sparse(rng, pairs, length), t: sparse(rng, pairs, length)}
            best = {name: float("inf") for name in forms}
            with tf.Session() as sess:
                for fetch in forms.values():
                    sess.run(fetch, feed)
                for _ in range(args.rounds):
                    for name, fetch in forms.items():
                        start = time.perf_counter()
                        for _ in range(args.steps):
                            sess.run(fetch, feed)
                        best[name] = min(best[name], (time.perf_counter() - start) / args.steps)
        entries = 2 * pairs * length
        print(f"{pairs:>6} {length:>6} {entries:>8} {best['baseline'] * 1e3:>12.3f} "
              f"{best['edit'] * 1e3:>9.3f} {best['edit'] / best['baseline']:>7.1f} "
              f"{(best['edit'] - best['baseline']) / entries * 1e6:>9.2f}")


if __name__ == "__main__":
    main()
