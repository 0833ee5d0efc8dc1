"""A batching inference service for the digits model: aiohttp on asyncio, asyncflow as its guest.

Theory of operation:
- Model files. ``train_and_export`` (a trio program) trains a small MLP (64-128-10) on
  scikit-learn's 8x8 digits with ``af.train.AdamOptimizer``, then writes a checkpoint with
  ``af.train.Saver`` and the meta graph beside it (``export_meta_graph``). The serving
  tensors are recorded in collections (``serving_inputs``, ``serving_classes``,
  ``serving_probabilities``), so ``load_model`` rebuilds everything from the files with
  ``import_meta_graph``: the service never needs the code that built the model.
- Serving. ``make_app`` returns an aiohttp ``Application`` whose cleanup context opens one
  ``aio.Session`` on the imported graph, restores the checkpoint, and starts an
  ``aio.Batcher`` (trio runs as a guest of aiohttp's asyncio loop; no thread of ours).
  ``POST /predict`` hands each request's rows to the Batcher, which merges concurrent
  requests into one step (at most ``max_batch_size`` rows, waiting at most ``max_wait_ms``
  for company); ``POST /predict_unbatched`` runs one ``Session.run`` per request, the
  baseline the client compares against; ``GET /healthz`` reports the model, the
  Batcher's counters and the service's process CPU time (so a client can tell what each
  request cost the service, apart from its own cost on a shared machine).
- Errors. Malformed JSON or rows that are not ``n x 64`` numbers get HTTP 400 before any
  step runs; an ``af.errors.InvalidArgumentError`` from a step is a 400, any other
  ``OpError`` a 500, a request failed because the service is stopping a 503. A client that
  disconnects cancels its handler task, which cancels its wait (its rows may still be
  computed as part of a batch and are dropped).

Usage::

    python demos/inference_service.py [--model-dir DIR] [--port 8080]
        [--max-batch-size 128] [--max-wait-ms 2] [--train-steps 300]
    python demos/inference_client.py --url http://127.0.0.1:8080 --requests 1000

Without ``--model-dir`` the service first trains and saves a model in a temporary directory
(removed when the service stops).
"""
from __future__ import annotations

import os

# One BLAS thread per step: concurrency comes from batching, and on a small machine
# OpenBLAS's worker threads made a 64-row step take milliseconds instead of ~0.2 ms.
# (Only effective when this file is the program, i.e. before numpy is first imported.)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from aiohttp import web  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow import aio  # noqa: E402

FEATURES = 64
CLASSES = 10
INPUTS_KEY = "serving_inputs"
CLASSES_KEY = "serving_classes"
PROBABILITIES_KEY = "serving_probabilities"
MODEL = web.AppKey("model", object)
SESSION = web.AppKey("session", object)
BATCHER = web.AppKey("batcher", object)


# -- data and model -------------------------------------------------------------------------
def load_digits_split(test_fraction=0.25, seed=0):
    """scikit-learn's digits, scaled to [0, 1], split into train and test parts.

    Returns:
        ``(train_x, train_y, test_x, test_y)``: float32 rows of 64 pixels, int64 labels.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1.0 - test_fraction))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


@dataclasses.dataclass
class DigitsModel:
    """The tensors of a freshly built digits graph."""
    x: af.Tensor
    labels: af.Tensor
    classes: af.Tensor
    probabilities: af.Tensor
    loss: af.Tensor
    accuracy: af.Tensor
    train_op: af.Operation


def build_digits_model(hidden=128, learning_rate=0.01, seed=0):
    """Build the 64-``hidden``-10 MLP, its loss and Adam training op in the default graph.

    The serving tensors are also added to the ``serving_*`` collections, which the meta
    graph carries to the service.

    Returns:
        A ``DigitsModel``.
    """
    af.set_random_seed(seed)
    x = af.placeholder(af.float32, [None, FEATURES], name="x")
    labels = af.placeholder(af.int64, [None], name="labels")
    with af.name_scope("hidden"):
        w1 = af.Variable(af.truncated_normal([FEATURES, hidden], stddev=0.1, seed=1), name="w")
        b1 = af.Variable(af.zeros([hidden], af.float32), name="b")
        h = af.nn.relu(af.matmul(x, w1) + b1)
    with af.name_scope("logits"):
        w2 = af.Variable(af.truncated_normal([hidden, CLASSES], stddev=0.1, seed=2), name="w")
        b2 = af.Variable(af.zeros([CLASSES], af.float32), name="b")
        logits = af.matmul(h, w2) + b2
    probabilities = af.nn.softmax(logits, name="probabilities")
    classes = af.argmax(logits, 1, name="classes")
    loss = af.reduce_mean(
        af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
    accuracy = af.reduce_mean(af.cast(af.equal(classes, labels), af.float32), name="accuracy")
    train_op = af.train.AdamOptimizer(learning_rate).minimize(loss)
    af.add_to_collection(INPUTS_KEY, x)
    af.add_to_collection(CLASSES_KEY, classes)
    af.add_to_collection(PROBABILITIES_KEY, probabilities)
    return DigitsModel(x, labels, classes, probabilities, loss, accuracy, train_op)


async def train_and_export(model_dir, steps=300, batch_size=64, seed=0, log=print):
    """Train the digits MLP and write a checkpoint plus its meta graph (a trio program).

    Args:
        model_dir: directory for the checkpoint files (created if missing).
        steps: Adam steps on random minibatches of ``batch_size`` rows.
        log: called with a progress line every 100 steps and at the end.

    Returns:
        ``(checkpoint_prefix, test_accuracy)``.
    """
    train_x, train_y, test_x, test_y = load_digits_split(seed=seed)
    rng = np.random.default_rng(seed)
    os.makedirs(model_dir, exist_ok=True)
    with af.Graph().as_default():
        model = build_digits_model(seed=seed)
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            for step in range(1, steps + 1):
                idx = rng.integers(0, len(train_x), batch_size)
                loss, _ = await sess.run([model.loss, model.train_op],
                                         {model.x: train_x[idx], model.labels: train_y[idx]})
                if step % 100 == 0:
                    log(f"  train step {step:4d}  loss {loss:.3f}")
            accuracy = await sess.run(model.accuracy, {model.x: test_x, model.labels: test_y})
            prefix = await saver.save(sess, os.path.join(model_dir, "digits"), global_step=steps)
            saver.export_meta_graph(prefix + ".meta")
    log(f"  trained {steps} steps: test accuracy {accuracy:.3f}; saved {os.path.basename(prefix)}")
    return prefix, float(accuracy)


@dataclasses.dataclass
class ServingModel:
    """A model rebuilt from files: its graph, Saver, checkpoint and serving tensors."""
    graph: af.Graph
    saver: object
    checkpoint: str
    x: af.Tensor
    classes: af.Tensor
    probabilities: af.Tensor


def load_model(model_dir):
    """Rebuild the serving graph from the newest checkpoint's meta graph in ``model_dir``.

    Raises:
        FileNotFoundError: if ``model_dir`` holds no complete checkpoint.
    """
    checkpoint = af.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir!r}")
    graph = af.Graph()
    with graph.as_default():
        saver = af.train.import_meta_graph(checkpoint + ".meta")
    (x,), (classes,), (probabilities,) = (graph.get_collection(k) for k in
                                          (INPUTS_KEY, CLASSES_KEY, PROBABILITIES_KEY))
    return ServingModel(graph, saver, checkpoint, x, classes, probabilities)


# -- the web service ------------------------------------------------------------------------
class BadRequest(Exception):
    """The request body is not ``{"rows": [[64 numbers], ...]}``."""


async def parse_rows(request):
    """The request's rows as a float32 ``(n, 64)`` array; raises ``BadRequest``."""
    try:
        body = await request.json()
        rows = np.asarray(body["rows"], dtype=np.float32)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadRequest(f'expected JSON {{"rows": [[{FEATURES} numbers], ...]}}: {exc}') from None
    if rows.ndim != 2 or rows.shape[1] != FEATURES or rows.shape[0] == 0:
        raise BadRequest(f"rows must have shape (n >= 1, {FEATURES}); got {rows.shape}")
    return rows


def answer(classes, probabilities):
    probabilities = np.round(probabilities.astype(np.float64), 6)
    return web.json_response({"classes": np.asarray(classes).tolist(),
                              "probabilities": probabilities.tolist()})


def error_response(exc):
    if isinstance(exc, BadRequest):
        status = 400
    elif isinstance(exc, af.errors.CancelledError):
        status = 503
    elif isinstance(exc, af.errors.InvalidArgumentError):
        status = 400
    else:
        status = 500
    return web.json_response({"error": type(exc).__name__, "message": str(exc)}, status=status)


def make_app(model_dir, max_batch_size=128, max_wait_ms=2.0):
    """An aiohttp application serving the model saved in ``model_dir``.

    Args:
        model_dir: a directory written by ``train_and_export``.
        max_batch_size: the most rows one batched step takes.
        max_wait_ms: how long a batch's first request waits for company.

    Returns:
        A ``web.Application``; the session and Batcher live from its startup to cleanup.
    """
    app = web.Application()

    async def model_context(app):
        model = load_model(model_dir)
        async with aio.Session(graph=model.graph) as sess:
            await model.saver.restore(sess, model.checkpoint)
            async with aio.Batcher(sess, [model.x], [model.classes, model.probabilities],
                                   max_batch_size=max_batch_size,
                                   max_wait_ms=max_wait_ms) as batcher:
                app[MODEL], app[SESSION], app[BATCHER] = model, sess, batcher
                yield

    async def predict(request):
        try:
            rows = await parse_rows(request)
            classes, probabilities = await app[BATCHER].run({app[MODEL].x: rows})
        except (BadRequest, af.errors.OpError) as exc:
            return error_response(exc)
        return answer(classes, probabilities)

    async def predict_unbatched(request):
        model = app[MODEL]
        try:
            rows = await parse_rows(request)
            classes, probabilities = await app[SESSION].run(
                [model.classes, model.probabilities], {model.x: rows})
        except (BadRequest, af.errors.OpError) as exc:
            return error_response(exc)
        return answer(classes, probabilities)

    async def healthz(request):
        stats = app[BATCHER].statistics()
        return web.json_response({
            "status": "ok", "checkpoint": os.path.basename(app[MODEL].checkpoint),
            "cpu_seconds": time.process_time(),  # lets a client see what serving cost
            "batcher": {"requests": stats.requests, "batches": stats.batches, "rows": stats.rows,
                        "queued": stats.queued, "largest_batch": stats.largest_batch}})

    app.cleanup_ctx.append(model_context)
    app.router.add_post("/predict", predict)
    app.router.add_post("/predict_unbatched", predict_unbatched)
    app.router.add_get("/healthz", healthz)
    return app


async def start_site(app, host="127.0.0.1", port=0):
    """Start ``app`` on ``host:port`` (0 picks a free port); returns ``(runner, base_url)``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    bound_port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://{host}:{bound_port}"


async def serve_forever(model_dir, host, port, max_batch_size, max_wait_ms):
    runner, url = await start_site(make_app(model_dir, max_batch_size, max_wait_ms), host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before saying "Ctrl-C stops"
        loop.add_signal_handler(sig, stop.set)
    print(f"serving {model_dir} on {url} (max batch {max_batch_size} rows, "
          f"max wait {max_wait_ms} ms); Ctrl-C stops", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()  # stops the Batcher, closes the session, ends the trio guest
    print("stopped", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", help="checkpoint directory (default: train one first)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--max-batch-size", type=int, default=128)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--train-steps", type=int, default=300)
    args = parser.parse_args(argv)
    if args.model_dir is not None:
        problem = model_dir_problem(args.model_dir)
        if problem is not None:
            parser.error(problem)  # one line and exit status 2, no traceback
        serve(args, args.model_dir)
        return
    # No model given: train one into a temporary directory, removed when the service stops.
    with tempfile.TemporaryDirectory(prefix="digits-model-") as model_dir:
        print(f"no --model-dir: training a digits MLP into {model_dir} (removed when the "
              "service stops)", flush=True)
        start = time.perf_counter()
        aio.run_trio(train_and_export, model_dir, args.train_steps)
        print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)
        serve(args, model_dir)


def model_dir_problem(model_dir):
    """What is missing for ``--model-dir`` to be served, in one line; None when nothing is."""
    if not os.path.exists(model_dir):
        return f"--model-dir {model_dir}: no such folder"
    if not os.path.isdir(model_dir):
        return f"--model-dir {model_dir}: not a folder"
    checkpoint = af.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        return (f"--model-dir {model_dir}: no checkpoint in it (no 'checkpoint' state file "
                "naming a complete checkpoint); omit --model-dir to train one first")
    if not os.path.exists(checkpoint + ".meta"):
        return (f"--model-dir {model_dir}: the checkpoint {os.path.basename(checkpoint)} has "
                "no meta graph (.meta) to rebuild the model from")
    return None


def serve(args, model_dir):
    asyncio.run(serve_forever(model_dir, args.host, args.port, args.max_batch_size,
                              args.max_wait_ms))


if __name__ == "__main__":
    main()
