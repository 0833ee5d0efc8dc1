"""GPU event path without a GPU: a fake stream whose host functions run on a foreign thread.

The real-GPU checks (kernels on CuPy, stream overlap) live in bench/gpu_check.py and in the
skipped test below, which runs only where CuPy finds CUDA.
"""
import types

import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
import fake_cupy
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.exec import devices as _device
from asyncflow.exec.gpu import GpuDevice, stream_done
from fake_cupy import FakeStream


def _fake_cupy():
    return fake_cupy.fake_cupy(manual_streams=True)


async def test_stream_done_wakes_from_a_foreign_thread():
    stream = FakeStream(manual=True)
    done = []

    async def waiter():
        await stream_done(stream)
        done.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert done == [] and len(stream.pending) == 1   # waiting, not polling
        stream.finish()
    assert done == [True]


async def test_cancelled_wait_is_harmless_when_the_callback_fires_later(autojump_clock):
    stream = FakeStream(manual=True)
    with trio.move_on_after(1):
        await stream_done(stream)
    stream.finish()   # the late callback must not raise or wake anything
    await trio.sleep(0)


async def test_gpu_device_to_host_waits_for_the_stream():
    gpu = GpuDevice("/job:localhost/replica:0/task:0/device:GPU:0", 0, cupy=_fake_cupy())
    value = gpu.put(np.arange(3))
    result = []

    async def fetch():
        result.append(await gpu.to_host(value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetch)
        await trio.testing.wait_all_tasks_blocked()
        assert result == []            # the producing stream has not finished
        gpu.stream.finish()
    np.testing.assert_array_equal(result[0], [0, 1, 2])


def test_bind_plan_runs_kernels_on_the_device_stream():
    gpu = GpuDevice("/job:localhost/replica:0/task:0/device:GPU:0", 0, cupy=_fake_cupy())
    seen = []
    with af.Graph().as_default():
        total = af.add(af.constant(1.0), 2.0)  # float: a device node
    ops = [total.op.inputs[0].op, total.op.inputs[1].op, total.op]
    op = NodeGraph.from_ops(ops, [], [total], [], {o: gpu.name for o in ops}).nodes[-1]
    node = types.SimpleNamespace(fn=lambda ctx, x: seen.append(gpu.stream.entered) or (x,),
                                 is_async=False, offload=True, blocking_io=False, op=op,
                                 ctx=types.SimpleNamespace(xp=gpu.xp))
    node.out_edges = ()
    gpu.bind_plan(types.SimpleNamespace(nodes=[node]))
    assert node.fn(None, 5) == (5,) and seen == [1] and node.offload is False
    assert gpu.stream.entered == 0


@pytest.mark.skipif(_device.cuda_device_count() == 0, reason="needs CUDA and CuPy")
async def test_real_gpu_stream_event():
    import cupy
    gpu = GpuDevice("/job:localhost/replica:0/task:0/device:GPU:0", 0)
    x = gpu.put(np.ones((256, 256), np.float32))
    with gpu._use():
        y = x @ x
    np.testing.assert_allclose(await gpu.to_host(y), np.full((256, 256), 256.0))
    assert isinstance(y, cupy.ndarray)


async def test_host_outputs_of_gpu_kernels_join_device_arithmetic(monkeypatch):
    # Shape and Size on a GPU return host arrays (TF's host memory); a GPU kernel that mixes
    # them with device arrays gets them copied onto the device instead of failing.
    fake_cupy.install(monkeypatch)
    with af.Graph().as_default():
        with af.device("/device:GPU:0"):
            x = af.placeholder(af.float32, [None, 3])
            y = af.cast(af.shape(x), af.float32) * af.reduce_sum(x) \
                + af.cast(af.size(x), af.float32)
            z = af.reshape(x, af.shape(x)[::-1])  # a shape consumer takes either
        config = af.SessionConfig(allow_soft_placement=False)
        async with af.Session(config=config) as sess:
            assert any(d.endswith("GPU:0") for d in sess.list_devices())
            got_y, got_z = await sess.run([y, z], {x: np.ones((2, 3), np.float32)})
    np.testing.assert_allclose(got_y, [18.0, 24.0])
    assert got_z.shape == (3, 2)
