"""asyncflow.aio: sessions and batching for asyncio callers (trio as a guest of the loop)."""
import asyncio
import itertools

import aiohttp
import numpy as np
import pytest
from aiohttp import web

import asyncflow as af
from asyncflow import aio
from asyncflow.exec import timeslice


def build():
    x = af.placeholder(af.float32, [None, 2], name="x")
    return x, af.matmul(x, af.constant([[1.0], [2.0]]))


def test_session_in_plain_asyncio_run():
    async def main():
        with af.Graph().as_default():
            x, y = build()
            async with aio.Session() as sess:
                out = await sess.run({"y": y}, {x: [[1.0, 1.0]]})
                devices = sess.list_devices()
        return out, devices

    out, devices = asyncio.run(main())
    np.testing.assert_allclose(out["y"], [[3.0]])
    assert devices[0].endswith("CPU:0")


def test_errors_arrive_as_af_errors():
    async def main():
        with af.Graph().as_default():
            x, y = build()
            async with aio.Session() as sess:
                with pytest.raises(af.errors.InvalidArgumentError, match="must feed"):
                    await sess.run(y)
                with pytest.raises(af.errors.InvalidArgumentError, match="Cannot feed value of shape"):
                    await sess.run(y, {x: np.ones(3)})
                return await sess.run(y, {x: [[0.0, 1.0]]})

    np.testing.assert_allclose(asyncio.run(main()), [[2.0]])


def test_a_closed_session_refuses_runs_naming_itself():
    async def main():
        with af.Graph().as_default():
            x, y = build()
            sess = aio.Session()
            async with sess:
                await sess.run(y, {x: [[1.0, 1.0]]})
            with pytest.raises(RuntimeError, match=r"Attempted to use a closed Session\. "
                                                   r"\(session-\w+ in this process\)"):
                await sess.run(y, {x: [[1.0, 1.0]]})
    asyncio.run(main())


def test_cancelling_the_asyncio_task_cancels_the_step():
    async def main():
        loop = asyncio.get_running_loop()
        started = loop.create_future()

        async def wait_forever(value):
            import trio
            started.set_result(None)
            await trio.sleep_forever()

        with af.Graph().as_default():
            c = af.constant(np.float32(1.0))
            blocked = af.py_func(wait_forever, [c], af.float32)
            quick = c + 1.0
            async with aio.Session() as sess:
                task = asyncio.create_task(sess.run(blocked))
                await started
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                value = await sess.run(quick)
                # The cancelled step ends in the trio guest, on threads' time: a generous
                # deadline that only guards against a hang (a loaded machine may take long).
                deadline = asyncio.get_running_loop().time() + 60
                while sess.statistics().runs_in_flight and \
                        asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.01)
                return value, sess.statistics().runs_in_flight

    assert asyncio.run(main()) == (2.0, 0)


def test_guest_restarts_after_last_session_closes():
    async def main():
        with af.Graph().as_default():
            c = af.constant(5.0)
            async with aio.Session() as first:
                a = await first.run(c)
            async with aio.Session() as second, aio.Session() as third:
                b, d = await asyncio.gather(second.run(c), third.run(c * 2.0))
        return a, b, d

    assert asyncio.run(main()) == (5.0, 5.0, 10.0)


def test_aiohttp_app_with_batching_under_concurrent_clients():
    async def main():
        with af.Graph().as_default():
            x, y = build()
            async with aio.Session() as sess, aio.Batcher(sess, [x], y, max_batch_size=32) as batcher:
                async def predict(request):
                    rows = np.asarray((await request.json())["rows"], np.float32)
                    out = await batcher.run({x: rows})
                    return web.json_response({"y": out.tolist()})

                app = web.Application()
                app.router.add_post("/predict", predict)
                runner = web.AppRunner(app)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                port = site._server.sockets[0].getsockname()[1]
                try:
                    async with aiohttp.ClientSession() as client:
                        async def call(i):
                            async with client.post(f"http://127.0.0.1:{port}/predict",
                                                   json={"rows": [[i, 1.0]]}) as resp:
                                assert resp.status == 200
                                return (await resp.json())["y"]
                        answers = await asyncio.gather(*[call(i) for i in range(100)])
                finally:
                    await runner.cleanup()
                stats = batcher.statistics()
        return answers, stats

    answers, stats = asyncio.run(main())
    assert answers == [[[i + 2.0]] for i in range(100)]
    assert stats.requests == 100 and stats.batches < 100


def test_aio_server_serves_a_cluster_session_from_asyncio():
    async def main():
        cluster = af.ClusterSpec({"worker": ["127.0.0.1:0"]})
        async with aio.Server(cluster, "worker", 0, port=0) as server:
            assert server.address.startswith("127.0.0.1:")
            with af.Graph().as_default():
                with af.device("/job:worker/task:0"):
                    x = af.placeholder(af.float32, [2])
                    y = x * 3.0
                async with aio.Session(server.address) as sess:
                    devices = sess.list_devices()
                    out = await sess.run(y, {x: [1.0, 2.0]})
        return devices, out

    devices, out = asyncio.run(main())
    assert any("/job:worker/replica:0/task:0/device:CPU:0" in d for d in devices)
    np.testing.assert_allclose(out, [3.0, 6.0])


def test_static_steps_run_on_the_asyncio_loop_without_crossing_into_trio(cpu_only):
    async def main():
        with af.Graph().as_default():
            x, y = build()
            v = af.Variable(np.float32(1.0), name="v")
            bump = af.assign_add(v, 1.0)
            q = af.FIFOQueue(4, [af.float32])
            enqueue = q.enqueue([af.constant(3.0)])
            async with aio.Session() as sess:
                await sess.run(v.initializer)
                guest = sess._guest
                calls = guest.calls
                outs = [await sess.run(y, {x: [[float(i), 1.0]]}) for i in range(50)]
                bumped = [await sess.run(bump) for _ in range(5)]
                inline_calls = guest.calls - calls
                await sess.run(enqueue)  # a waiting kernel: runs in the trio guest
                queued_calls = guest.calls - calls - inline_calls
        return outs, bumped, inline_calls, queued_calls

    outs, bumped, inline_calls, queued_calls = asyncio.run(main())
    assert [o.tolist() for o in outs] == [[[i + 2.0]] for i in range(50)]
    assert bumped == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert inline_calls == 0 and queued_calls == 1


def test_inline_step_errors_name_the_op():
    async def main():
        with af.Graph().as_default():
            x = af.placeholder(af.float32, [None], name="x")
            bad = af.reshape(x, [2, 2], name="bad_reshape")
            async with aio.Session() as sess:
                with pytest.raises(af.errors.InvalidArgumentError, match="bad_reshape") as info:
                    await sess.run(bad, {x: [1.0, 2.0, 3.0]})
                return info.value.op.name, sess.statistics().runs_in_flight

    assert asyncio.run(main()) == ("bad_reshape", 0)


def test_large_kernel_of_an_inline_step_runs_on_a_worker_thread(cpu_only):
    import threading

    from asyncflow.kernels import registry

    threads = []
    matmul = registry.get_kernel("MatMul", "CPU").fn

    async def main():
        with af.Graph().as_default():
            # 512^3 multiply-adds: above MatMul's offload threshold (kernels/registry.py)
            a = af.placeholder(af.float32, [512, 512], name="a")
            b = af.placeholder(af.float32, [512, 512], name="b")
            product = af.matmul(a, b)
            rng = np.random.default_rng(0)
            av, bv = rng.random((512, 512), np.float32), rng.random((512, 512), np.float32)
            async with aio.Session() as sess:
                ticks = 0
                task = asyncio.create_task(sess.run(product, {a: av, b: bv}))
                while not task.done():  # the loop keeps running while the matmul computes
                    ticks += 1
                    await asyncio.sleep(0)
                return await task, av @ bv, ticks

    def spy(ctx, *args):
        threads.append(threading.current_thread().name)
        return matmul(ctx, *args)

    kernel = registry.get_kernel("MatMul", "CPU")
    original = kernel.fn
    try:
        object.__setattr__(kernel, "fn", spy) if hasattr(kernel, "__dataclass_fields__") \
            else setattr(kernel, "fn", spy)
        got, want, ticks = asyncio.run(main())
    finally:
        object.__setattr__(kernel, "fn", original) if hasattr(kernel, "__dataclass_fields__") \
            else setattr(kernel, "fn", original)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert threads and threads[0].startswith("asyncflow-CPU0")
    assert ticks >= 1


def test_cancelling_an_offloaded_inline_step_raises_cancelled_error():
    async def main():
        with af.Graph().as_default():
            a = af.placeholder(af.float32, [512, 512], name="a")
            product = af.matmul(af.matmul(a, a), a)
            value = np.ones((512, 512), np.float32)
            async with aio.Session() as sess:
                task = asyncio.create_task(sess.run(product, {a: value}))
                await asyncio.sleep(0)  # the step is now waiting for its worker thread
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return await sess.run(af.reduce_sum(a), {a: value})

    assert asyncio.run(main()) == 512 * 512


def test_aio_batcher_answers_each_caller_and_handles_cancellation_and_errors():
    async def main():
        with af.Graph().as_default():
            x, y = build()
            bad = af.reshape(x, [-1, 3], name="bad")
            rng = np.random.default_rng(1)
            requests = [rng.random((int(rng.integers(1, 4)), 2), np.float32) for _ in range(80)]
            async with aio.Session() as sess:
                async with aio.Batcher(sess, [x], [y, af.reduce_sum(x, axis=1)],
                                       max_batch_size=16, max_wait_ms=5) as batcher:
                    results = await asyncio.gather(*[batcher.run({x: r}) for r in requests])
                    stats = batcher.statistics()
                    # A caller cancelled while waiting for company stops waiting; the
                    # batcher goes on serving the others.
                    lone = asyncio.create_task(batcher.run({x: requests[0]}))
                    await asyncio.sleep(0)
                    lone.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await lone
                    after = await batcher.run({"x:0": requests[1]})
                async with aio.Batcher(sess, [x], bad, max_batch_size=4) as failing:
                    with pytest.raises(af.errors.InvalidArgumentError, match="bad"):
                        await failing.run({x: np.ones((1, 2), np.float32)})
                    with pytest.raises(af.errors.InvalidArgumentError, match="rows of shape"):
                        await failing.run({x: np.ones((1, 5), np.float32)})
                stopping = aio.Batcher(sess, [x], y, max_batch_size=8, max_wait_ms=10_000)
                async with stopping:
                    waiting = asyncio.create_task(stopping.run({x: requests[2]}))
                    await asyncio.sleep(0)  # the task starts and queues its request
                    assert stopping.statistics().queued == 1
                with pytest.raises(af.errors.CancelledError):
                    await waiting
        return requests, results, stats, after

    requests, results, stats, after = asyncio.run(main())
    w = np.array([[1.0], [2.0]], np.float32)
    for rows, (got_y, got_sum) in zip(requests, results):
        np.testing.assert_allclose(got_y, rows @ w, rtol=1e-6)
        np.testing.assert_allclose(got_sum, rows.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(after[0], requests[1] @ w, rtol=1e-6)
    assert stats.requests == 80 and stats.batches < 80 and stats.largest_batch <= 16


def test_aio_server_serves_http_on_the_callers_loop():
    """The worker's trio HTTP server runs in the loop's trio guest (no thread of its own)."""
    async def main():
        cluster = af.ClusterSpec({"worker": ["127.0.0.1:0"]})
        async with aio.Server(cluster, "worker", 0, port=0) as server:
            async with aiohttp.ClientSession() as client:
                async with client.post(f"http://{server.address}/v1/graphs", data=b"junk") as r:
                    garbage = r.status
                async with client.get(f"http://{server.address}/v1/devices") as r:
                    devices = r.status  # answered by the worker service in the trio guest
            return type(server._server.http).__module__, garbage, devices

    module, garbage, devices = asyncio.run(main())
    assert module == "transports.http.server"
    assert garbage == 400 and devices == 200


def test_saver_saves_and_restores_from_asyncio(tmp_path):
    async def main():
        with af.Graph().as_default():
            v = af.Variable(np.float32(3.0), name="v")
            step = af.Variable(7, name="step", trainable=False)
            saver = af.train.Saver()
            async with aio.Session() as sess:
                await sess.run(af.global_variables_initializer())
                path = await saver.save(sess, str(tmp_path / "model"), global_step=step)
                await sess.run(v.assign(5.0))
                await saver.restore(sess, path)
                return path, await sess.run(v), af.train.latest_checkpoint(str(tmp_path))

    path, value, latest = asyncio.run(main())
    assert path.endswith("model-7") and latest == path
    assert value == 3.0


def test_a_loop_of_inline_runs_lets_other_asyncio_tasks_run(monkeypatch, cpu_only):
    # The time-slice clock advances a quarter slice per read, so a slice ends after a fixed
    # number of reads instead of at a wall-clock moment (deterministic on a loaded machine).
    reads = itertools.count()
    monkeypatch.setattr(timeslice, "clock", lambda: next(reads) * timeslice.TIME_SLICE_S / 4)
    timeslice.restart()
    runs = 400

    async def main():
        with af.Graph().as_default():
            x, y = build()
            async with aio.Session() as sess:
                ticks = 0
                stop = False

                async def ticker():
                    nonlocal ticks
                    while not stop:
                        ticks += 1
                        await asyncio.sleep(0)

                other = asyncio.create_task(ticker())
                await asyncio.sleep(0)
                ticks = 0
                for _ in range(runs):  # runs that never suspend on their own
                    await sess.run(y, {x: [[1.0, 1.0]]})
                stop = True
                await other
                return ticks

    try:
        ticks = asyncio.run(main())
    finally:
        timeslice.restart()
    # Each run reads the clock once or twice, so a slice ends every few runs: the ticker ran
    # throughout, yet runs do not yield one by one (an inline run finishes without suspending).
    assert runs // 8 <= ticks < runs, ticks
