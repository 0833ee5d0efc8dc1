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
