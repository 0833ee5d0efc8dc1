"""Large elementwise kernels, BiasAdd and BiasAddGrad split over intra-op threads (issue 37):
the same bits as numpy computing them whole (elementwise is exact), close for BiasAddGrad's
column sums (a reduction added per chunk)."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.exec import intra_op


@pytest.fixture
def split_small(monkeypatch, cpu_only):
    """Splits at small sizes, on the CPU device (a GPU visible under make test-gpu would take
    these ops, and its kernels are not split over intra-op threads)."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 64)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 1024)


async def run_fed(threads, build, *values):
    with af.Graph().as_default():
        holders = [af.placeholder(af.as_dtype(v.dtype), v.shape) for v in values]
        fetches = build(*holders)
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            return await session.run(fetches, dict(zip(holders, values)))


CASES = {
    "exp": (lambda x, y: af.exp(x), lambda x, y: np.exp(x)),
    "neg": (lambda x, y: -x, lambda x, y: -x),
    "is_nan": (lambda x, y: af.is_nan(x), lambda x, y: np.isnan(x)),
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "mul_scalar": (lambda x, y: x * 3.0, lambda x, y: x * np.float32(3.0)),
    "greater": (lambda x, y: af.greater(x, y), lambda x, y: x > y),
    "relu": (lambda x, y: af.nn.relu(x), lambda x, y: np.maximum(x, np.float32(0))),
    "relu_grad": (lambda x, y: af.gradients(af.nn.relu(x), [x], grad_ys=[y])[0],
                  lambda x, y: y * (x > 0)),
    "bias_add": (lambda x, y: af.nn.bias_add(x, y[0, 0]), lambda x, y: x + y[0, 0]),
}


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_split_elementwise_gives_the_same_bits(name, threads, split_small):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 5, 13)).astype(np.float32)
    x.reshape(-1)[::17] = np.nan
    x.reshape(-1)[5::19] = np.inf
    y = rng.standard_normal((37, 5, 13)).astype(np.float32)
    build, reference = CASES[name]
    splits = intra_op.shared_pool(threads).splits
    value = await run_fed(threads, lambda a, b: build(a, b), x, y)
    expected = reference(x, y)
    assert value.dtype == expected.dtype and value.shape == expected.shape
    np.testing.assert_array_equal(value, expected)
    if threads > 1:
        assert intra_op.shared_pool(threads).splits > splits


@pytest.mark.parametrize("threads", [2, 3])
async def test_split_bias_add_grad_is_close(threads, split_small):
    rng = np.random.default_rng(8)
    grad = rng.standard_normal((41, 9, 7, 6)).astype(np.float32)
    with af.Graph().as_default():
        holder = af.placeholder(af.float32, grad.shape)
        bias = af.Variable(np.zeros(6, np.float32))
        out = af.nn.bias_add(holder, bias)
        (bias_grad,) = af.gradients(out, [bias], grad_ys=[holder])
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            value = await session.run(bias_grad, {holder: grad})
    np.testing.assert_allclose(value, grad.sum(axis=(0, 1, 2)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [40, 90])
async def test_large_bias_add_grad_matches_float64_and_the_old_form(batch):
    # The whole-array GEMV path (below the split threshold) and the chunked one.
    rng = np.random.default_rng(9)
    grad = (rng.standard_normal((batch, 28, 28, 32)) + 0.5).astype(np.float32)
    with af.Graph().as_default():
        holder = af.placeholder(af.float32, grad.shape)
        bias = af.Variable(np.zeros(32, np.float32))
        (bias_grad,) = af.gradients(af.nn.bias_add(holder, bias), [bias], grad_ys=[holder])
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            value = await session.run(bias_grad, {holder: grad})
    exact = grad.astype(np.float64).sum(axis=(0, 1, 2))
    old = grad.sum(axis=(0, 1, 2))  # numpy's float32 sum: the kernel's form before
    assert value.dtype == np.float32 and value.shape == (32,)
    np.testing.assert_allclose(value, exact, rtol=1e-5)
    assert np.abs(value - exact).max() <= np.abs(old - exact).max() * 4 + 1e-3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, m", [(1, 1), (7, 5), (8, 32), (9, 3), (1001, 32), (32771, 6)])
def test_column_sums_loop_matches_float64(n, m, dtype):
    """kernels/nn.py ``_column_sums`` (BiasAddGrad's chunks on CPU, GIL released): eight
    interleaved partial sums per column, within a few roundings of the exact sum (every
    row count modulo 8), NaN and inf as numpy's sum gives them."""
    from asyncflow.kernels import jit, nn
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    rng = np.random.default_rng(n + m)
    rows = (rng.standard_normal((n, m)) + 0.25).astype(dtype)
    out = np.empty(m, dtype)
    nn._column_sums(rows, out)
    exact = rows.astype(np.longdouble).sum(axis=0)
    scale = np.abs(rows).astype(np.longdouble).sum(axis=0)
    assert np.all(np.abs(out - exact) <= 4 * np.finfo(dtype).eps * np.sqrt(n) * scale + 1e-30)
    if m >= 3:
        rows[n // 2, 0] = np.nan
        rows[n - 1, 1] = np.inf
        rows[0, 2] = np.inf
        if n > 1:
            rows[n - 1, 2] = -np.inf
        nn._column_sums(rows, out)
        np.testing.assert_array_equal(np.isnan(out[:3]), np.isnan(rows.sum(axis=0)[:3]))
        assert out[1] == np.inf


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bias_add_grad_loop_is_close_to_the_gemv_form(threads, monkeypatch):
    """The loop against the GEMV form it stands in for (``jit.ENABLED`` off), split or not,
    and the same bits again on a second call (the chunks' sums added in chunk order)."""
    from asyncflow.exec.devices import Device
    from asyncflow.kernels import jit, nn
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")

    class Context:
        attrs, name, xp = {"data_format": "NHWC"}, "test_op", np
        device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                        intra_op_threads=threads)
    grad = (np.random.default_rng(3).standard_normal((37, 28, 27, 32)) + 0.5).astype(np.float32)
    looped = nn._bias_add_grad(Context, grad)[0]
    with monkeypatch.context() as patch:
        patch.setattr(jit, "ENABLED", False)
        reference = nn._bias_add_grad(Context, grad)[0]
    exact = grad.astype(np.float64).sum(axis=(0, 1, 2))
    assert looped.dtype == np.float32 and looped.shape == (32,)
    np.testing.assert_allclose(looped, exact, rtol=1e-5)
    assert np.abs(looped - exact).max() <= 2 * np.abs(reference - exact).max() + 1e-3
    np.testing.assert_array_equal(nn._bias_add_grad(Context, grad)[0], looped)  # determined


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_column_sums_warm_up_compiles_what_the_kernel_calls(dtype, monkeypatch):
    """``nn._warm_column_sums`` (BiasAddGrad's prepare hook) compiles the signature the split
    kernel calls, a read-only gradient included (before, that was another signature,
    compiled at the step's first call, on the event loop's thread)."""
    from asyncflow.exec.devices import Device
    from asyncflow.kernels import jit, nn
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 512)

    class Context:
        attrs, name, xp = {"data_format": "NHWC"}, "test_op", np
        device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 2,
                        intra_op_threads=2)
    nn._warm_column_sums()
    compiled = set(nn._column_sums._compiled.signatures)
    for writeable in (False, True):
        grad = np.random.default_rng(4).standard_normal((3, 5, 7, 32)).astype(dtype)
        grad.flags.writeable = writeable
        np.testing.assert_allclose(nn._bias_add_grad(Context, grad)[0],
                                   grad.sum(axis=(0, 1, 2)), rtol=1e-4, atol=1e-4)
    assert set(nn._column_sums._compiled.signatures) == compiled
