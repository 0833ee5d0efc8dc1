"""word2vec (skip-gram with NCE) on parameter servers: 2 ps and 2 worker processes.

The corpus is text that ships with Python: the Language Reference topics behind ``help()``
(``pydoc_data.topics``) and the docstrings of some sixty standard-library modules. The
vocabulary is the most frequent words; every other word becomes ``UNK``.

The model is TF1's ``word2vec_basic``: an ``[V, 64]`` embedding table and the NCE output
weights ``[V, 64]`` and biases, each a partitioned variable (``fixed_size_partitioner(2)``)
whose parts ``replica_device_setter`` puts on the two ps tasks. Two client tasks in this
process train asynchronously (between-graph replication), each on its own worker; a step
looks up 128 centre words, samples 64 negative classes (log-uniform) and applies the
gradients, which are IndexedSlices, as sparse Adagrad updates on the ps: a step moves rows, not
tables. At the end it prints the nearest neighbours (cosine similarity) of a few words.

    python demos/word2vec.py [--steps 8000] [--vocabulary 2000]

Takes a few minutes (8,000 steps); with fewer steps the loss falls but the neighbours are
still mostly noise. A run of 8,000 steps here printed ``false`` among the neighbours of
``true``, ``returns`` for ``return``, ``error`` and ``raised`` for ``exception``, ``open``
and ``path`` for ``file`` (the two workers interleave their updates, so runs differ).
"""
from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import re
import time
import warnings

import numpy as np
import trio

import asyncflow as af
from asyncflow import aio
from local_cluster import local_cluster

MODULES = ("os", "re", "json", "collections", "itertools", "functools", "string", "textwrap",
           "argparse", "logging", "socket", "threading", "subprocess", "shutil", "pathlib",
           "datetime", "decimal", "fractions", "random", "statistics", "heapq", "bisect",
           "struct", "zipfile", "tarfile", "csv", "configparser", "email.message",
           "http.client", "urllib.parse", "unittest", "doctest", "pdb", "inspect", "ast",
           "tokenize", "typing", "dataclasses", "enum", "contextlib", "asyncio", "queue",
           "selectors", "ssl", "hashlib", "pickle", "copy", "pprint", "difflib", "io",
           "codecs", "locale", "tempfile", "sqlite3", "mailbox", "smtplib", "ftplib",
           "imaplib", "pydoc", "decimal", "array", "operator")
PROBES = ("true", "return", "exception", "file", "thread", "list")
EMBEDDING, BATCH, SAMPLED, WINDOW = 64, 128, 64, 2


def python_text():
    """The Language Reference topics and stdlib docstrings, each docstring once."""
    import pydoc_data.topics
    parts = dict.fromkeys(pydoc_data.topics.topics.values())
    with warnings.catch_warnings():  # reading deprecated members' docstrings (typing.io)
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in MODULES:
            _add_docstrings(parts, name)
    return "\n".join(parts)


def _add_docstrings(parts, name):
    """Add the docstrings of module ``name``, its classes, functions and methods."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return
    parts[inspect.getdoc(module) or ""] = None
    for _, member in inspect.getmembers(module):
        if inspect.isclass(member) or inspect.isroutine(member):
            parts[inspect.getdoc(member) or ""] = None
            if inspect.isclass(member):
                for _, method in inspect.getmembers(member, inspect.isroutine):
                    parts[inspect.getdoc(method) or ""] = None


def build_dataset(text, vocabulary):
    """Word ids (0 is UNK) and the id -> word list."""
    words = re.findall(r"[a-z]+", text.lower())
    common = collections.Counter(words).most_common(vocabulary - 1)
    names = ["UNK"] + [w for w, _ in common]
    index = {w: i for i, w in enumerate(names)}
    ids = np.array([index.get(w, 0) for w in words], np.int64)
    return ids, names


def skipgram_batch(ids, rng):
    """``BATCH`` (centre, context) pairs within ``WINDOW`` words of each other."""
    centres = rng.integers(WINDOW, len(ids) - WINDOW, BATCH)
    offsets = rng.choice([o for o in range(-WINDOW, WINDOW + 1) if o], BATCH)
    return ids[centres].astype(np.int32), ids[centres + offsets].reshape(-1, 1)


def replica_graph(cluster, task, vocabulary):
    """One client's graph; variables (partitioned) on the ps, the step on its worker."""
    graph = af.Graph()
    with graph.as_default(), af.device(af.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{task}")):
        af.set_random_seed(task + 1)
        with af.variable_scope("word2vec", partitioner=af.fixed_size_partitioner(2)):
            embeddings = af.get_variable(
                "embeddings", [vocabulary, EMBEDDING],
                initializer=af.random_uniform_initializer(-1.0, 1.0, seed=1))
            nce_weights = af.get_variable(
                "nce_weights", [vocabulary, EMBEDDING],
                initializer=af.truncated_normal_initializer(stddev=EMBEDDING ** -0.5, seed=2))
            nce_biases = af.get_variable("nce_biases", [vocabulary],
                                         initializer=af.zeros_initializer())
        centres = af.placeholder(af.int32, [BATCH], name="centres")
        contexts = af.placeholder(af.int64, [BATCH, 1], name="contexts")
        embedded = af.nn.embedding_lookup(embeddings, centres, partition_strategy="div")
        loss = af.reduce_mean(af.nn.nce_loss(
            nce_weights, nce_biases, contexts, embedded, SAMPLED, vocabulary,
            partition_strategy="div"))
        train = af.train.AdagradOptimizer(1.0).minimize(loss)
        table = af.convert_to_tensor(embeddings)
        init = af.global_variables_initializer()
    return graph, centres, contexts, loss, train, table, init


def nearest(table, names, words, count=5):
    """The ``count`` nearest words of each of ``words`` by cosine similarity."""
    unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    index = {w: i for i, w in enumerate(names)}
    found = {}
    for word in words:
        if word not in index:
            continue
        scores = unit @ unit[index[word]]
        order = [i for i in np.argsort(-scores) if i != index[word]][:count]
        found[word] = [names[i] for i in order]
    return found


async def train(spec, ids, names, steps):
    cluster = af.ClusterSpec(spec)
    replicas = [replica_graph(cluster, task, len(names)) for task in range(2)]
    async with af.Session(graph=replicas[0][0], cluster=cluster) as chief:
        await chief.run(replicas[0][6])  # the chief initializes the shared variables once
    losses = [[], []]

    async def replica(task):
        graph, centres, contexts, loss, step, _, _ = replicas[task]
        rng = np.random.default_rng(task)
        async with af.Session(graph=graph, cluster=cluster) as sess:
            for _ in range(steps // 2):
                batch, labels = skipgram_batch(ids, rng)
                value, _ = await sess.run([loss, step], {centres: batch, contexts: labels})
                losses[task].append(float(value))

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for task in range(2):
            nursery.start_soon(replica, task)
    seconds = time.perf_counter() - started
    graph, _, _, _, _, table, _ = replicas[1]
    async with af.Session(graph=graph, cluster=cluster) as sess:
        vectors = await sess.run(table)
    merged = [v for pair in zip(*losses) for v in pair]
    window = max(1, len(merged) // 10)
    first, last = float(np.mean(merged[:window])), float(np.mean(merged[-window:]))
    print(f"{len(merged)} steps on 2 workers in {seconds:.1f} s "
          f"({seconds / len(merged) * 1e3:.1f} ms per step); NCE loss {first:.2f} -> {last:.2f}")
    return vectors, first, last


def main(steps=8000, vocabulary=2000):
    """Train, print neighbours; returns ``(first loss, last loss, neighbours)``."""
    ids, names = build_dataset(python_text(), vocabulary)
    print(f"corpus: {len(ids):,} words, vocabulary {len(names):,} "
          f"({np.mean(ids == 0):.1%} UNK)")
    with local_cluster({"ps": 2, "worker": 2}) as spec:
        vectors, first, last = aio.run_trio(train, spec, ids, names, steps)
    found = nearest(vectors, names, PROBES)
    for word, neighbours in found.items():
        print(f"  {word:>10}: {', '.join(neighbours)}")
    return first, last, found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8000, help="training steps (both workers)")
    parser.add_argument("--vocabulary", type=int, default=2000, help="words kept (with UNK)")
    args = parser.parse_args()
    main(args.steps, args.vocabulary)
