"""The fused mean squared error's forward split in two halves over the intra-op threads
(kernels/squared_error_split.py, issue 37): the same bits as the one-thread kernel (numpy's
pairwise sum split at its own root; the elementwise passes exact), its loss and its gradients
alike in a session, NaN and inf included."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.exec import intra_op
from asyncflow.exec.devices import Device
from asyncflow.kernels import math as kernel_math
from asyncflow.kernels import squared_error_split


class KernelContext:
    def __init__(self, threads):
        self.attrs = {}
        self.name = "test_mse"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)


def whole(a, b):
    """The one-thread kernel's forms: ``a - b``, its squares' sum, the mean."""
    diff = np.subtract(a, b)
    total = np.square(diff).sum(axis=tuple(range(diff.ndim)), dtype=diff.dtype)
    return diff, total, total / diff.size


SHAPES = [(256, 784), (65536,), (257, 263), (3, 129, 173), (65537,), (65543,)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_halves_give_the_whole_kernels_bits(shape, dtype, monkeypatch):
    rng = np.random.default_rng(sum(shape))
    a = (rng.standard_normal(shape) * rng.uniform(0.01, 50)).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    ctx = KernelContext(2)
    split = squared_error_split.squared_difference_sum(ctx, a, b)
    assert split is not None
    diff, total, mean = whole(a, b)
    assert split[0].dtype == diff.dtype and split[0].shape == diff.shape
    np.testing.assert_array_equal(split[0], diff)
    assert np.asarray(split[1]).tobytes() == np.asarray(total).tobytes()
    # through the kernel: the split, then the whole form (the split switched off)
    loss, kernel_diff = kernel_math._fused_mean_squared_error(ctx, a, b)
    monkeypatch.setattr(squared_error_split, "MIN_SIZE", 1 << 62)
    loss_whole, diff_whole = kernel_math._fused_mean_squared_error(ctx, a, b)
    assert loss.dtype == loss_whole.dtype == np.dtype(dtype) and loss.shape == ()
    assert loss.tobytes() == loss_whole.tobytes() == np.asarray(mean).tobytes()
    np.testing.assert_array_equal(kernel_diff, diff_whole)


def test_nan_and_inf_as_the_whole_kernel():
    rng = np.random.default_rng(3)
    ctx = KernelContext(2)
    for poison in (np.nan, np.inf, -np.inf, 3e38):
        a = rng.standard_normal((300, 300)).astype(np.float32)
        b = rng.standard_normal((300, 300)).astype(np.float32)
        a.reshape(-1)[[7, 45000, 89999]] = poison
        with np.errstate(over="ignore", invalid="ignore"):
            split = squared_error_split.squared_difference_sum(ctx, a, b)
            diff, total, _ = whole(a, b)
        np.testing.assert_array_equal(split[0], diff)
        assert np.asarray(split[1]).tobytes() == np.asarray(total).tobytes()


def test_whole_where_it_does_not_apply():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 784)).astype(np.float32)
    split = squared_error_split.squared_difference_sum
    assert split(KernelContext(1), a, a) is None                      # one thread
    assert split(KernelContext(2), a[:, :100], a[:, :100]) is None    # small
    assert split(KernelContext(2), a.T, a.T) is None                  # not C-contiguous
    assert split(KernelContext(2), a, a[:1]) is None                  # broadcasts
    assert split(KernelContext(2), a.astype(np.float16), a.astype(np.float16)) is None


async def run_loss(threads, x, y):
    with af.Graph().as_default():
        a = af.Variable(x)
        b = af.placeholder(af.float32, y.shape)
        loss = af.reduce_mean(af.square(a - b))
        grad = af.gradients(loss, [a])[0]
        config = af.ConfigProto(intra_op_parallelism_threads=threads)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            return await session.run([loss, grad], {b: y})


async def test_session_loss_and_gradient_the_same_bits_on_two_threads(cpu_only):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((256, 784)).astype(np.float32)
    y = rng.standard_normal((256, 784)).astype(np.float32)
    splits = intra_op.shared_pool(2).splits
    loss2, grad2 = await run_loss(2, x, y)
    assert intra_op.shared_pool(2).splits > splits
    loss1, grad1 = await run_loss(1, x, y)
    assert loss2.tobytes() == loss1.tobytes()
    np.testing.assert_array_equal(grad2, grad1)
