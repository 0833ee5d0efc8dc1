"""The Batcher: concurrent requests batched into single steps, each caller its own rows."""
import json

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.serving import Batcher


def model():
    x = af.placeholder(af.float32, [None, 3], name="x")
    w = af.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    return x, af.matmul(x, w), af.reduce_sum(x, axis=1)


async def test_each_caller_gets_its_own_rows_in_order(autojump_clock):
    with af.Graph().as_default():
        x, y, s = model()
        rng = np.random.default_rng(0)
        requests = [rng.standard_normal((int(rng.integers(1, 4)), 3)).astype(np.float32)
                    for _ in range(60)]
        results = [None] * len(requests)
        async with af.Session() as sess:
            async with Batcher(sess, [x], [y, s], max_batch_size=16, max_wait_ms=5) as batcher:
                async def call(i):
                    await trio.sleep(float(i % 7) / 1000)
                    results[i] = await batcher.run({x: requests[i]})
                async with trio.open_nursery() as nursery:
                    for i in range(len(requests)):
                        nursery.start_soon(call, i)
                stats = batcher.statistics()
        w = np.arange(6, dtype=np.float32).reshape(3, 2)
        for rows, (got_y, got_s) in zip(requests, results):
            np.testing.assert_allclose(got_y, rows @ w, rtol=1e-6)
            np.testing.assert_allclose(got_s, rows.sum(axis=1), rtol=1e-6)
        assert stats.requests == 60
        assert stats.rows == sum(len(r) for r in requests)
        assert stats.batches < 60           # requests really were batched
        assert stats.largest_batch <= 16


async def test_single_output_and_max_wait(autojump_clock):
    with af.Graph().as_default():
        x, y, _ = model()
        async with af.Session() as sess:
            async with Batcher(sess, [x], y, max_batch_size=100, max_wait_ms=50) as batcher:
                start = trio.current_time()
                out = await batcher.run({x: np.ones((2, 3), np.float32)})
                waited = trio.current_time() - start
        assert out.shape == (2, 2)
        assert waited == pytest.approx(0.05)  # a lone request waits max_wait for company


async def test_step_error_fails_the_whole_batch(autojump_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 3], name="x")
        bad = af.reshape(x, [-1, 5], name="bad")
        async with af.Session() as sess:
            async with Batcher(sess, [x], bad, max_batch_size=8) as batcher:
                with pytest.raises(af.errors.InvalidArgumentError, match="bad"):
                    await batcher.run({x: np.ones((1, 3), np.float32)})
                with pytest.raises(af.errors.InvalidArgumentError, match="missing feeds"):
                    await batcher.run({})


async def test_stopping_fails_waiting_requests(autojump_clock):
    with af.Graph().as_default():
        x, y, _ = model()
        async with af.Session() as sess:
            errors_seen = []
            batcher = Batcher(sess, [x], y, max_batch_size=4, max_wait_ms=1000)

            async def caller():
                try:
                    await batcher.run({x: np.ones((1, 3), np.float32)})
                except af.errors.CancelledError as exc:
                    errors_seen.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller)
                async with batcher:
                    await trio.sleep(0.1)  # the request waits for company
            assert len(errors_seen) == 1


async def test_queued_requests_join_without_waiting(autojump_clock):
    # max_wait_ms=0 must still batch what is already queued (it only means "don't wait"),
    # and queued requests join without the serving task yielding once per request.
    with af.Graph().as_default():
        x, y, _ = model()
        async with af.Session() as sess:
            async with Batcher(sess, [x], y, max_batch_size=8, max_wait_ms=0) as batcher:
                results = [None] * 20

                async def call(i):
                    results[i] = await batcher.run({x: np.full((1, 3), i, np.float32)})
                start = trio.current_time()
                async with trio.open_nursery() as nursery:
                    for i in range(20):
                        nursery.start_soon(call, i)
                stats = batcher.statistics()
        assert trio.current_time() == start  # nothing waited on the clock
        assert stats.batches == 3 and stats.largest_batch == 8  # 8 + 8 + 4 rows
        w = np.arange(6, dtype=np.float32).reshape(3, 2)
        for i, out in enumerate(results):
            np.testing.assert_allclose(out, np.full((1, 3), i, np.float32) @ w)


async def test_a_request_that_waited_behind_a_batch_does_not_wait_again(autojump_clock):
    # The wait for company is measured from when the batch's first request was queued (TF
    # Serving's batch timeout), not from when the serving task got to it.
    async def slow(value):
        await trio.sleep(0.1)
        return value

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 3], name="x")
        y = af.py_func(slow, [x], af.float32) * 2.0
        async with af.Session() as sess:
            async with Batcher(sess, [x], y, max_batch_size=4, max_wait_ms=50) as batcher:
                done = {}
                start = trio.current_time()

                async def call(name, delay):
                    await trio.sleep(delay)
                    await batcher.run({x: np.ones((1, 3), np.float32)})
                    done[name] = trio.current_time() - start

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call, "first", 0.0)
                    nursery.start_soon(call, "second", 0.06)
    # first: waits 50 ms for company, then a 100 ms step; second arrived at 60 ms, while
    # that step ran, and its own 50 ms were over when the step ended at 150 ms.
    assert done["first"] == pytest.approx(0.15)
    assert done["second"] == pytest.approx(0.25)


async def test_statistics_record_converts_to_json(autojump_clock):
    with af.Graph().as_default():
        x, y, _ = model()
        async with af.Session() as sess:
            async with Batcher(sess, [x], y, max_batch_size=4, max_wait_ms=1) as batcher:
                await batcher.run({x: np.ones((3, 3), np.float32)})
                stats = batcher.statistics()
    assert json.loads(json.dumps(stats.as_dict())) == {
        "requests": 1, "batches": 1, "rows": 3, "queued": 0, "largest_batch": 3}
