"""The serving demos end to end: train, save, serve over HTTP from the files, query, compare."""
import asyncio
import importlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import urllib.request

import aiohttp
import numpy as np
import pytest
import trio

import asyncflow as af

DEMOS = pathlib.Path(__file__).resolve().parent.parent / "demos"
pytest.importorskip("sklearn")


def load_demo(name):
    """Import a demo script as a module (the demos import each other by file name).

    The environment is put back afterwards: ``inference_service`` sets the BLAS thread
    variables for its own process at import, and in this one they would reach every later
    test's subprocesses (workers with one BLAS thread after this file, not before it).
    """
    if str(DEMOS) not in sys.path:
        sys.path.insert(0, str(DEMOS))
    environ = dict(os.environ)
    try:
        return importlib.import_module(name)
    finally:
        for added in set(os.environ) - set(environ):
            del os.environ[added]
        os.environ.update(environ)


@pytest.fixture(scope="module")
def service():
    return load_demo("inference_service")


@pytest.fixture(scope="module")
def model_dir(service, tmp_path_factory):
    directory = tmp_path_factory.mktemp("digits")
    prefix, accuracy = trio.run(service.train_and_export, str(directory), 150, 64, 0,
                                lambda line: None)
    assert accuracy > 0.9
    return str(directory)


async def _weights_forward(service, model_dir, rows):
    """The model's answers computed in numpy from the checkpoint's restored variables."""
    model = service.load_model(model_dir)
    with model.graph.as_default():
        names = ["hidden/w", "hidden/b", "logits/w", "logits/b"]
        variables = {v.op.name: v for v in af.global_variables()}
        async with af.Session(graph=model.graph) as sess:
            await model.saver.restore(sess, model.checkpoint)
            w1, b1, w2, b2 = await sess.run([variables[n] for n in names])
    logits = np.maximum(rows @ w1 + b1, 0.0) @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return logits.argmax(axis=1), e / e.sum(axis=1, keepdims=True)


def test_service_answers_batched_and_unbatched_from_the_saved_files(service, model_dir):
    _, _, test_x, test_y = service.load_digits_split()
    rows = test_x[:40]
    expected_classes, expected_probabilities = trio.run(_weights_forward, service, model_dir,
                                                        rows)

    async def main():
        runner, url = await service.start_site(service.make_app(model_dir, max_batch_size=16))
        try:
            async with aiohttp.ClientSession() as client:
                async def ask(path, chunk):
                    async with client.post(url + path, json={"rows": chunk.tolist()}) as resp:
                        return resp.status, await resp.json()
                # 20 concurrent requests of 2 rows each, to both endpoints at once
                chunks = [rows[i:i + 2] for i in range(0, len(rows), 2)]
                answers = await asyncio.gather(*[ask(p, c) for c in chunks for p in
                                                 ("/predict", "/predict_unbatched")])
                bad_shape = await ask("/predict", np.ones((1, 3)))
                async with client.post(url + "/predict", data=b"not json") as resp:
                    not_json = resp.status, await resp.json()
                async with client.get(url + "/healthz") as resp:
                    health = await resp.json()
        finally:
            await runner.cleanup()
        return answers, bad_shape, not_json, health

    answers, bad_shape, not_json, health = asyncio.run(main())
    assert all(status == 200 for status, _ in answers)
    batched, unbatched = answers[0::2], answers[1::2]
    for endpoint in (batched, unbatched):
        classes = np.concatenate([body["classes"] for _, body in endpoint])
        probabilities = np.concatenate([body["probabilities"] for _, body in endpoint])
        np.testing.assert_array_equal(classes, expected_classes)
        np.testing.assert_allclose(probabilities, expected_probabilities, atol=2e-5)
    assert np.mean(expected_classes == test_y[:40]) > 0.85
    assert bad_shape[0] == 400 and "shape" in bad_shape[1]["message"]
    assert not_json[0] == 400 and not_json[1]["error"] == "BadRequest"
    assert health["status"] == "ok" and health["checkpoint"] == "digits-150"
    stats = health["batcher"]
    assert stats["requests"] == 20 and stats["batches"] < 20 and stats["largest_batch"] <= 16


def test_client_reports_both_endpoints(service, model_dir):
    client = load_demo("inference_client")

    async def main():
        runner, url = await service.start_site(service.make_app(model_dir))
        try:
            return await client.load_test(url, requests=60, rows=2, concurrency=30)
        finally:
            await runner.cleanup()

    results, health = asyncio.run(main())
    assert [r["endpoint"] for r in results] == ["/predict", "/predict_unbatched"]
    for r in results:
        assert r["requests"] == 60 and r["req_per_s"] > 0
        assert r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]
        assert r["accuracy"] > 0.85
        assert r["server_cpu_us"] > 0  # the service's own CPU per request, from /healthz
    lines = []
    client.report(results, health, print=lines.append)
    assert "batching:" in lines[3] and "less CPU per request" in lines[3]
    assert "server Batcher: 90 requests" in lines[4]  # 30 warm-up


def test_train_and_serve_answers_improve():
    demo = load_demo("train_and_serve")
    lines = []
    history = trio.run(demo.train_and_serve, 120, 4, 40, 32, 0.002, 0, lines.append)
    assert len(history) == 3
    assert history[-1] > 0.7 and history[-1] > history[0]
    assert lines[-1].startswith("served ") and "alongside 120 training steps" in lines[-1]


def test_service_cli_serves_and_stops_cleanly_on_sigint(model_dir):
    process = subprocess.Popen(
        [sys.executable, str(DEMOS / "inference_service.py"), "--model-dir", model_dir,
         "--port", "0", "--max-wait-ms", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        match = re.search(r"on (http://\S+) ", line)
        assert match, line
        request = urllib.request.Request(match.group(1) + "/predict",
                                         data=json.dumps({"rows": [[0.0] * 64]}).encode())
        with urllib.request.urlopen(request, timeout=30) as resp:
            body = json.load(resp)
        assert len(body["classes"]) == 1 and len(body["probabilities"][0]) == 10
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out
    assert out.strip().endswith("stopped")
