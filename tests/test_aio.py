"""asyncflow.aio: sessions and batching for asyncio callers (trio as a guest of the loop)."""
import asyncio

import aiohttp
import numpy as np
import pytest
from aiohttp import web

import asyncflow as af
from asyncflow import aio


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
                for _ in range(100):
                    if sess.statistics()["runs_in_flight"] == 0:
                        break
                    await asyncio.sleep(0.01)
                return value, sess.statistics()["runs_in_flight"]

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
