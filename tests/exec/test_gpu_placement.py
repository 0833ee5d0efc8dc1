"""With a GPU present: kernel-aware placement, host-memory arguments, strings never on CuPy,
out-of-memory as ResourceExhaustedError, and the error naming the CuPy extra to install.

Each runs against the strict fake CuPy (``fake_cupy.py``), which refuses what the H200
refused: a string array handed to ``cupy.asarray`` ("Unsupported dtype object") and a device
array where CuPy needs host values (``pad``'s widths, ``arange``'s bounds: "Implicit
conversion to a NumPy array is not allowed").
"""
import os
import sys
import types

import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.exec import devices as _device

import fake_cupy

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


@pytest.fixture
def cupy(monkeypatch):
    module = fake_cupy.install(monkeypatch)
    yield module
    fake_cupy.set_memory_limit(None)


def _gpu_of(sess):
    return next(d for d in sess._target.devices if d.kind == "GPU")


async def _traced(sess, fetches, feed=None):
    meta = af.RunMetadata()
    values = await sess.run(fetches, feed, options=af.RunOptions(
        trace_level=af.RunOptions.FULL_TRACE), run_metadata=meta)
    return values, {r.node_name: r.device for r in meta.step_stats}


async def test_default_placement_keeps_strings_summaries_and_py_func_on_the_cpu(cupy):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4], name="x")
        y = af.tanh(x, name="y") * 2.0
        label = af.constant(np.array([b"a", b"bc"], dtype=object), name="label")
        joined = af.identity(label, name="joined")
        summary = af.summary.scalar("total", af.reduce_sum(y))
        doubled = af.py_func(lambda v: v * 2.0, [y], af.float32, name="double")
        async with af.Session() as sess:
            values, where = await _traced(sess, [y, joined, summary, doubled],
                                          {x: np.arange(4, dtype=np.float32)})
    assert where["y"] == GPU
    assert where["joined"] == CPU and where["double"] == CPU
    assert where[summary.op.name] == CPU
    np.testing.assert_allclose(values[3], np.tanh(np.arange(4)) * 4.0, rtol=1e-6)
    assert values[1].tolist() == [b"a", b"bc"]


async def test_an_explicit_gpu_request_without_a_gpu_kernel_fails_as_tf1_does(cupy):
    with af.Graph().as_default():
        with af.device("/device:GPU:0"):
            total = af.summary.scalar("s", af.constant(1.0))
        config = af.SessionConfig(allow_soft_placement=False)
        async with af.Session(config=config) as sess:
            with pytest.raises(errors.InvalidArgumentError) as info:
                await sess.run(total)
        message = str(info.value)
        assert "Could not satisfy explicit device specification '/device:GPU:0'" in message
        assert "ScalarSummary" in message and f"devices that have it: {CPU}" in message
        async with af.Session(config=af.SessionConfig(allow_soft_placement=True)) as sess:
            assert isinstance(await sess.run(total), bytes)


async def test_saver_saves_and_restores_gpu_variables(cupy, tmp_path):
    # demos/train_digits.py crashed here on the H200: the checkpoint name was put on the GPU.
    with af.Graph().as_default():
        v = af.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="v")
        bump = af.assign_add(v, af.ones([2, 3]))
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            _, where = await _traced(sess, bump)
            assert where["v"] == GPU
            path = await saver.save(sess, str(tmp_path / "model"))
            await sess.run(bump)
            await saver.restore(sess, path)
            restored = await sess.run(v)
    np.testing.assert_array_equal(restored, np.arange(6).reshape(2, 3) + 1.0)


async def test_host_memory_arguments_stay_on_the_host(cupy):
    # Pad's paddings, Range's bounds, Reshape's shape from Shape, Tile's multiples, Fill's
    # dims: computed on the host and handed over without a device round trip.
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2, 3], name="x")
        padded = af.pad(x, [[1, 0], [0, 2]], constant_values=5.0)
        ranged = af.range(0.0, 3.0, 0.5) + 1.0
        counted = af.range(0, 6) * 2
        flipped = af.reshape(x, af.shape(x)[::-1])
        tiled = af.tile(x, [2, 1])
        filled = af.fill(af.shape(x), 3.0) + x
        fetches = [padded, ranged, counted, flipped, tiled, filled]
        inputs = {x: np.arange(6, dtype=np.float32).reshape(2, 3)}
        async with af.Session() as sess:
            on_gpu, where = await _traced(sess, fetches, inputs)
            stats = _gpu_of(sess).statistics()
        async with af.Session(config=af.SessionConfig(device_count={"GPU": 0})) as sess:
            on_cpu = await sess.run(fetches, inputs)
    assert where[padded.op.name] == GPU and where[ranged.op.name] == GPU
    for got, expected in zip(on_gpu, on_cpu):
        np.testing.assert_allclose(got, expected)
    assert stats.round_trips == 0 and stats.host_nodes > 0 and stats.mixed_nodes > 0


async def test_string_and_int32_feeds_stay_on_the_host(cupy):
    gpu = _device.make_local_devices()[1]
    words = np.array([b"x", b"yz"], dtype=object)
    assert gpu.put(words) is words
    assert isinstance(gpu.put(np.arange(3, dtype=np.int32)), np.ndarray)
    assert isinstance(gpu.put(np.ones(3, np.float32)), cupy.ndarray)
    with pytest.raises(ValueError, match="Unsupported dtype object"):
        cupy.asarray(words)   # what the H200 answered


async def test_bfloat16_nodes_run_on_the_host(cupy):
    # CuPy has no bfloat16 arrays: bfloat16 values stay on the host (put), so a node that
    # takes or makes one runs there too (a Sum's gradient filled into a device array failed)
    gpu = _device.make_local_devices()[1]
    halves = np.ones(3, af.bfloat16.as_numpy_dtype)
    assert gpu.put(halves) is halves
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2, 3])
        h = af.cast(x, af.bfloat16)
        grad = af.gradients(af.reduce_sum(h * h), h)[0]
        async with af.Session() as sess:
            got = await sess.run(af.cast(grad, af.float32),
                                 {x: np.arange(6, dtype=np.float32).reshape(2, 3)})
    np.testing.assert_array_equal(got, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))


async def test_out_of_memory_names_op_and_bytes_and_the_session_stays_usable(cupy):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 256], name="x")
        y = af.matmul(x, x, transpose_b=True, name="gram")
        async with af.Session() as sess:
            fake_cupy.set_memory_limit(1 << 20)
            with pytest.raises(errors.ResourceExhaustedError) as info:
                await sess.run(y, {x: np.ones((1024, 256), np.float32)})
            message = str(info.value)
            assert "MatMul 'gram'" in message and "4,194,304 bytes" in message
            assert GPU in message
            got = await sess.run(y, {x: np.ones((4, 256), np.float32)})
    np.testing.assert_allclose(got, np.full((4, 4), 256.0))


def test_missing_cupy_names_the_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)   # import cupy raises ImportError
    count, reason = _device.cuda_status()
    assert count == 0
    assert "[gpu-cuda12]" in reason and "[gpu-cuda13]" in reason and "nvidia-smi" in reason


def test_cupy_built_for_another_cuda_names_the_other_extra(monkeypatch):
    class CUDARuntimeError(RuntimeError):
        pass

    def no_driver():
        raise CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                               "insufficient for CUDA runtime version")
    runtime = types.SimpleNamespace(getDeviceCount=no_driver, runtimeGetVersion=lambda: 13000)
    module = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime),
                                   __version__="14.2.0")
    monkeypatch.setitem(sys.modules, "cupy", module)
    count, reason = _device.cuda_status()
    assert count == 0
    assert "built for CUDA 13" in reason and "install [gpu-cuda12] instead" in reason


async def test_a_gpu_request_without_a_gpu_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with af.Graph().as_default():
        with af.device("/device:GPU:0"):
            y = af.constant(1.0) + 1.0
        async with af.Session(config=af.SessionConfig(allow_soft_placement=False)) as sess:
            with pytest.raises(errors.InvalidArgumentError, match=r"gpu-cuda13"):
                await sess.run(y)


@pytest.mark.skipif(os.environ.get("ASYNCFLOW_FAKE_GPU") != "1",
                    reason="runs under make test-gpu (tests/fake_gpu on PYTHONPATH)")
def test_make_test_gpu_sees_the_fake_gpu():
    import cupy  # noqa: F401
    assert _device.cuda_device_count() == 1
    assert any(d.kind == "GPU" for d in _device.make_local_devices())


def test_the_fake_refuses_what_the_h200_refused(cupy):
    x = cupy.asarray(np.ones((2, 2), np.float32))
    widths = cupy.asarray(np.array([[1, 1], [0, 0]], np.int32))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        cupy.pad(x, widths)                               # PadV2 on the H200
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        cupy.arange(cupy.asarray(np.int32(0)), cupy.asarray(np.int32(3)))   # Range
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        x.reshape(cupy.asarray(np.array([4], np.int32)))
    with pytest.raises(ValueError, match="Unsupported dtype object"):
        cupy.asarray(np.array([b"ckpt"], dtype=object))   # Saver's file name
    assert cupy.pad(x, np.array([[1, 1], [0, 0]])).shape == (4, 2)   # host widths are fine
