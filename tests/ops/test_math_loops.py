"""The fused squared error's and SigmoidGrad's compiled loops (kernels/math_loops.py) against
their numpy forms, which stay the reference (``jit.ENABLED`` off): the same bits, over odd
sizes and ranks, NaN, inf, -0 and overflowing squares, float32 and float64, whole and split
over 1-3 intra-op threads in small chunks; and SigmoidGrad against central differences."""
import numpy as np
import pytest

from asyncflow.kernels import jit, math_loops, registry

from test_conv_kernels import KernelContext, small_chunks

assert small_chunks  # a fixture, used by name below

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")

SHAPES = [(1,), (7,), (129,), (3, 5), (17, 129), (256, 784), (2, 3, 5, 7), (0, 4)]


def operands(shape, dtype, special, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    if special and a.size:
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        cells = rng.choice(flat_a.size, size=min(flat_a.size, 6), replace=False)
        values = [np.nan, np.inf, -np.inf, -0.0, np.finfo(dtype).max, 1e-30]
        flat_a[cells] = values[:cells.size]
        flat_b[cells[::2]] = -0.0
    return a, b


def run(op_type, threads, *args):
    ctx = KernelContext({}, threads)
    return registry.get_kernel(op_type, "CPU").fn(ctx, *args)


def both_forms(monkeypatch, op_type, threads, *args):
    """The kernel's outputs with its compiled loops, then with its numpy form."""
    looped = run(op_type, threads, *args)
    with monkeypatch.context() as patch:
        patch.setattr(jit, "ENABLED", False)
        plain = run(op_type, threads, *args)
    return looped, plain


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_squared_error_loop_gives_the_numpy_form_s_bits(monkeypatch, shape, dtype, special):
    a, b = operands(shape, dtype, special)
    with np.errstate(all="ignore"):
        looped, plain = both_forms(monkeypatch, "_FusedMeanSquaredError", 1, a, b)
    for got, want in zip(looped, plain):
        assert_same_bits(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_sigmoid_grad_loop_gives_the_numpy_form_s_bits(monkeypatch, shape, dtype, special):
    y, dy = operands(shape, dtype, special, seed=1)
    with np.errstate(all="ignore"):
        (looped,), (plain,) = both_forms(monkeypatch, "SigmoidGrad", 1, y, dy)
    assert_same_bits(looped, plain)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_loops_keep_the_bits(monkeypatch, small_chunks, threads):
    a, b = operands((37, 51), np.float32, True, seed=2)
    with np.errstate(all="ignore"):
        looped, plain = both_forms(monkeypatch, "_FusedMeanSquaredError", threads, a, b)
        (grad,), (plain_grad,) = both_forms(monkeypatch, "SigmoidGrad", threads, a, b)
    for got, want in zip(looped + (grad,), plain + (plain_grad,)):
        assert_same_bits(got, want)


def test_the_loops_step_aside_where_they_do_not_apply():
    ctx = KernelContext({}, 1)
    a = np.ones((4, 6), np.float32)
    squares = np.empty((4, 6), np.float32)
    assert math_loops.difference_and_squares(ctx, a, a, squares) is not None  # (applies)
    assert math_loops.sigmoid_grad(ctx, a, a) is not None
    assert math_loops.difference_and_squares(ctx, a, a.T.copy().T, squares) is None  # strided
    assert math_loops.difference_and_squares(ctx, a, a[:1], squares) is None  # broadcast
    assert math_loops.sigmoid_grad(ctx, a.astype(np.float16), a.astype(np.float16)) is None
    assert math_loops.sigmoid_grad(ctx, a, a.astype(np.float64)) is None
    assert math_loops.sigmoid_grad(ctx, np.float32(1).reshape(()), np.ones((), np.float32)) \
        is None
    # (the kernels then take their numpy forms: broadcasting and mixed shapes still work)
    loss, diff = run("_FusedMeanSquaredError", 1, a, a[:1] * 2)
    assert float(loss) == 1.0 and diff.shape == (4, 6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_grad_against_central_differences(dtype):
    # d/dx sum(dy * sigmoid(x)) = dy * s (1 - s): the loop's value against finite differences
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 9))
    dy = rng.standard_normal((5, 9))
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    step = 1e-6
    numeric = dy * (sigmoid(x + step) - sigmoid(x - step)) / (2 * step)
    (grad,) = run("SigmoidGrad", 1, sigmoid(x).astype(dtype), dy.astype(dtype))
    tolerance = 1e-5 if dtype == np.float32 else 1e-8
    np.testing.assert_allclose(grad, numeric, rtol=tolerance, atol=tolerance)


def test_preload_warms_on_cpu_only():
    class Node:
        xp = np
        output_dtypes = (np.dtype(np.float32),)
    hook = math_loops.preload(Node())
    if hook is not None:  # (None once another test warmed the loops)
        hook.load(KernelContext({}, 1))
    assert math_loops.preload(Node()) is None
    Node.xp = object()
    assert math_loops.preload(Node()) is None
