"""kernels/dropout.py's compiled loop against the numpy form, the reference (``jit.ENABLED``
off): the same mask and output bits as ``rng.random`` then ``floor(u + keep)`` and ``(x / keep)
* mask``, and the generator left in the same state (its kept half of a float32 draw included),
call after call; a seeded training's losses the same over steps; other dtypes and generators
on the numpy form; the prepare hook preloads the loop."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import dropout, jit
from asyncflow.kernels.registry import Preload

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")


def numpy_form(rng, x, keep):
    mask = rng.random(x.shape, dtype=x.dtype)
    np.add(mask, keep, out=mask)
    np.floor(mask, out=mask)
    out = np.true_divide(x, keep)
    np.multiply(out, mask, out=out)
    return out, mask


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(128, 256), (3, 5, 7), (1,), (2,), (7,), (9,), (0, 4)])
def test_the_loop_gives_the_numpy_form_s_bits_and_generator_state(dtype, shape):
    want_rng, got_rng = np.random.default_rng([3, 4]), np.random.default_rng([3, 4])
    data = np.random.default_rng(5)
    for call, keep in enumerate([0.75, 0.5, 0.1, 1.0, 0.9]):
        x = (data.standard_normal(shape) * 3).astype(dtype)
        if x.size:
            x.reshape(-1)[0] = np.inf  # inf * 0 is NaN, in both forms
        keep = np.asarray(keep, dtype=dtype)
        want = numpy_form(want_rng, x, keep)
        got = dropout.compiled_dropout(got_rng, x, keep, dtype)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), (call, keep)
        assert got_rng.bit_generator.state == want_rng.bit_generator.state, call
        if call == 1:  # a float32 draw of one value: the other half is kept for the next
            assert want_rng.random(1, dtype=np.float32) == got_rng.random(1, dtype=np.float32)
            assert got_rng.bit_generator.state["has_uint32"] == 1
    if x.size > 100:
        kept = got[1] != 0
        assert kept.any() and not kept.all()


class Ctx:
    """What ``_FusedDropout``'s kernel reads of its context, with its own generator."""
    xp, name, attrs, prepared = np, "drop", {}, None

    def __init__(self, dtype, seed=1):
        self.output_dtypes = [np.dtype(dtype), np.dtype(dtype)]
        self.rng = np.random.default_rng(seed)

    def random_generator(self):
        return self.rng

    @staticmethod
    def to_device(value):
        return value


def run_kernel(ctx, x, keep):
    return dropout._fused_dropout(ctx, x, np.asarray(x.shape, np.int32),
                                  np.asarray(keep, x.dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernel_takes_the_loop_and_jit_off_the_numpy_form(monkeypatch, dtype):
    x = np.random.default_rng(0).standard_normal((33, 17)).astype(dtype)
    calls = []
    real = dropout.compiled_dropout
    monkeypatch.setattr(dropout, "compiled_dropout",
                        lambda *args: calls.append(args[3]) or real(*args))
    got = run_kernel(Ctx(dtype), x, 0.6)
    assert calls == [np.dtype(dtype)]
    monkeypatch.setattr(jit, "ENABLED", False)
    want = run_kernel(Ctx(dtype), x, 0.6)
    assert calls == [np.dtype(dtype)]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


def test_other_dtypes_generators_and_layouts_take_the_numpy_form(monkeypatch):
    calls = []
    monkeypatch.setattr(dropout, "compiled_dropout", lambda *args: calls.append(args))
    x = np.ones((4, 6), np.float32)
    run_kernel(Ctx(np.float16), x.astype(np.float16), 0.5)           # a dtype numba lacks
    run_kernel(Ctx(np.float32), np.asfortranarray(x[:, :5]), 0.5)    # not C-contiguous
    other = Ctx(np.float32)
    other.rng = np.random.Generator(np.random.Philox(1))               # another bit generator
    run_kernel(other, x, 0.5)
    assert calls == []


async def seeded_losses(steps=4):
    """A small MLP with dropout, trained with plain gradient descent (a seeded graph)."""
    with af.Graph().as_default():
        af.set_random_seed(11)
        x = af.placeholder(af.float32, [32, 20])
        labels = af.placeholder(af.float32, [32, 5])
        w1 = af.Variable(af.random_normal([20, 16], stddev=0.3))
        w2 = af.Variable(af.random_normal([16, 5], stddev=0.3))
        hidden = af.nn.dropout(af.nn.relu(af.matmul(x, w1)), rate=0.25)
        logits = af.matmul(af.nn.dropout(hidden, rate=0.5), w2)
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits_v2(
            labels=labels, logits=logits))
        train = af.train.GradientDescentOptimizer(0.5).minimize(loss)
        data = np.random.default_rng(3)
        feed = {x: data.standard_normal((32, 20)).astype(np.float32),
                labels: np.eye(5, dtype=np.float32)[data.integers(0, 5, 32)]}
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            return [(await session.run([loss, train], feed))[0] for _ in range(steps)]


async def test_seeded_training_losses_are_the_same_bits_with_the_loop_or_without(monkeypatch):
    calls = []
    real = dropout.compiled_dropout
    monkeypatch.setattr(dropout, "compiled_dropout",
                        lambda *args: calls.append(args[1].shape) or real(*args))
    got = await seeded_losses()
    assert [shape for shape in calls if shape != (3,)] == [(32, 16)] * 8  # (3,): the warm
    monkeypatch.setattr(jit, "ENABLED", False)
    calls.clear()
    want = await seeded_losses()
    assert calls == []
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
    assert len(set(got)) == len(got)  # the draws (and the weights) moved each step


def test_the_prepare_hook_preloads_the_loop_of_its_dtype(monkeypatch):
    monkeypatch.setattr(jit, "_warmed", set())
    for dtype, loop in ((np.float32, dropout._dropout_f32_loop),
                        (np.float64, dropout._dropout_f64_loop)):
        hook = dropout._preload(Ctx(dtype))
        assert isinstance(hook, Preload)
        hook.load(Ctx(dtype))
        assert loop._compiled is not None and loop._compiled.signatures
    assert dropout._preload(Ctx(np.float16)) is None
    gpu = Ctx(np.float32)
    gpu.xp = object()  # a GPU's array module: no loops there
    assert dropout._preload(gpu) is None
