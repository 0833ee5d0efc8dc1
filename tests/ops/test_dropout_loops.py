"""kernels/dropout.py's compiled loop against the numpy form, the reference (``jit.ENABLED``
off): the same mask and output bits as ``rng.random`` then ``floor(u + keep)`` and ``(x / keep)
* mask``, and the generator left in the same state (its kept half of a float32 draw included),
call after call; a seeded training's losses the same over steps; other dtypes and generators
on the numpy form; the prepare hook preloads the loop; the self-check against the running
numpy refuses a loop one bit off."""
import inspect
import textwrap

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
# (16,) to (65,): around the loop's blocks of 16 lanes (16 draws a float64 block, 32 values
# a float32 one), whole blocks and a tail of 1 to 16 draws.
@pytest.mark.parametrize("shape", [(128, 256), (3, 5, 7), (1,), (2,), (7,), (9,), (0, 4),
                                   (16,), (17,), (32,), (33,), (64,), (65,)])
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
    other.rng = np.random.Generator(np.random.PCG64DXSM(1))            # PCG64's other output
    run_kernel(other, x, 0.5)
    assert calls == []


async def seeded_losses(steps=4):
    """A small MLP with dropout, trained with plain gradient descent (a seeded graph), on the
    CPU: the loop is CPU's (a visible GPU would take the dropouts)."""
    with af.Graph().as_default(), af.device("/cpu:0"):
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


def mutant(loop, old, new):
    """``loop``'s source with ``old`` made ``new``, as plain Python (numpy scalars): what a
    numpy whose Generator draws otherwise would make the real loop."""
    source = textwrap.dedent(inspect.getsource(loop.fn)).replace("@jit.loop\n", "")
    assert source.count(old) >= 1, old
    namespace = dict(vars(dropout))
    exec(source.replace(old, new), namespace)
    function = namespace[loop.__name__]

    def run(*args):
        with np.errstate(over="ignore"):  # (uint64 products wrap, as in the compiled loop)
            return function(*args)
    return run


# A float conversion one bit off (an older numpy's ``>> 9``), a high half off, a stream off
# (a block's step, the lanes' first states). The block's step of each dtype: the self-check's
# sizes must reach a whole block of 16 draws (32 float32 values), not only the tail's draws.
MUTANTS = [
    (np.float32, "(bits & low32) >> np.uint64(8)", "((bits & low32) >> np.uint64(9)) << np.uint64(1)"),
    (np.float32, "bits >> np.uint64(40)", "(bits >> np.uint64(41)) << np.uint64(1)"),
    (np.float64, "bits >> np.uint64(11)", "(bits >> np.uint64(12)) << np.uint64(1)"),
    (np.float64, "nhi = hi + c_hi", "nhi = hi + c_hi + np.uint64(1)"),
    (np.float32, "lo = prod + i_lo", "lo = prod + i_lo + np.uint64(2)"),
    (np.float32, "nhi = hi + c_hi", "nhi = hi + c_hi + np.uint64(1)"),
]


def test_the_self_check_passes_the_loops_and_a_plain_python_copy():
    for dtype, loop in dropout._LOOPS.items():
        assert dropout._first_mismatch(dtype) is None
        interpreted = mutant(loop, "scale", "scale")  # the unchanged source, as Python
        assert dropout._first_mismatch(dtype, run=with_loop(dtype, interpreted)) is None


def with_loop(dtype, loop):
    """``compiled_dropout`` with ``loop`` as ``dtype``'s loop."""
    def run(*args):
        saved = dropout._LOOPS[np.dtype(dtype)]
        dropout._LOOPS[np.dtype(dtype)] = loop
        try:
            return dropout.compiled_dropout(*args)
        finally:
            dropout._LOOPS[np.dtype(dtype)] = saved
    return run


@pytest.mark.parametrize("dtype,old,new", MUTANTS)
def test_a_loop_one_bit_off_is_refused_and_the_kernel_takes_the_numpy_form(monkeypatch, dtype,
                                                                           old, new):
    loop = dropout._LOOPS[np.dtype(dtype)]
    monkeypatch.setitem(dropout._LOOPS, np.dtype(dtype), mutant(loop, old, new))
    monkeypatch.setattr(dropout, "_verdicts", {})
    calls = []
    real = dropout.compiled_dropout
    monkeypatch.setattr(dropout, "compiled_dropout",
                        lambda *args: calls.append(args) or real(*args))
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(dtype)
    with pytest.warns(RuntimeWarning, match=f"does not reproduce numpy .* {np.dtype(dtype)}"):
        got = run_kernel(Ctx(dtype), x, 0.6)
    assert calls == []
    monkeypatch.setattr(jit, "ENABLED", False)
    want = run_kernel(Ctx(dtype), x, 0.6)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
    assert dropout._verdicts == {np.dtype(dtype): False}


def test_a_loop_that_fails_is_refused(monkeypatch):
    def broken(*args):
        raise TypeError("no matching definition")
    monkeypatch.setitem(dropout._LOOPS, np.dtype(np.float32), broken)
    monkeypatch.setattr(dropout, "_verdicts", {})
    x = np.ones((4, 3), np.float32)
    with pytest.warns(RuntimeWarning, match="TypeError: no matching definition"):
        out, mask = run_kernel(Ctx(np.float32), x, 0.5)
    assert out.shape == mask.shape == (4, 3)
    assert dropout._verdicts == {np.dtype(np.float32): False}


def test_the_preload_compiles_the_read_only_signature_too(monkeypatch):
    """A variable's or constant's value is read-only: numba compiles it apart, which the
    preload does, not the first step."""
    monkeypatch.setattr(jit, "_warmed", set())
    for dtype, loop in dropout._LOOPS.items():
        dropout._preload(Ctx(dtype)).load(Ctx(dtype))
        before = len(loop._compiled.signatures)
        x = np.random.default_rng(0).standard_normal((6, 5)).astype(dtype)
        x.flags.writeable = False
        ctx = Ctx(dtype)
        run_kernel(ctx, x, 0.5)
        assert len(loop._compiled.signatures) == before
        assert any(not sig[3].mutable for sig in loop._compiled.signatures)
