"""The fused bias-and-sigmoid epilogue's compiled passes (``kernels/epilogue.py``,
``_sigmoid_loops``) and its bias-and-Relu pass (``_bias_relu``) against the numpy form
(``jit.ENABLED`` off), the reference: the same bits, whole and split over 1-3 intra-op
threads, float32 and float64, with NaN (payloads, either sign), infinities, -0, values whose
``exp`` overflows and values at the overflow bound (a NaN plus a NaN bias: a NaN, whose
payload numpy's own add takes from either by position)."""
from types import SimpleNamespace

import numpy as np
import pytest

from asyncflow.exec import intra_op
from asyncflow.kernels import blas, epilogue, jit, math as math_kernels

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba is not installed")


@pytest.fixture(autouse=True)
def _numpy_s_gemms(monkeypatch):
    monkeypatch.setattr(blas, "CHOICE", "numpy")


@pytest.fixture(autouse=True, scope="module")
def _blas_one_thread():
    intra_op.claim_blas()


def _ctx(threads):
    return SimpleNamespace(device=SimpleNamespace(intra_op=intra_op.shared_pool(threads)),
                           xp=np, name="_FusedMatMul", attrs={
                               "transpose_a": False, "transpose_b": False,
                               "fused_ops": ["BiasAdd", "Sigmoid"]})


def _both_forms(monkeypatch, run, loops_name="_sigmoid_loops"):
    """``run()`` with the compiled passes (``epilogue.<loops_name>``, checking they ran), then
    with numpy's form (``jit.ENABLED`` off)."""
    calls = []
    loops = getattr(epilogue, loops_name)
    monkeypatch.setattr(epilogue, loops_name,
                        lambda *args: calls.append(args[1].shape) or loops(*args))
    compiled = run()
    assert calls, "the compiled passes did not run"
    monkeypatch.setattr(jit, "ENABLED", False)
    del calls[:]
    reference = run()
    assert not calls
    return compiled, reference


def _special(dtype, shape, seed):
    """Random rows with NaN, +-inf, overflowing values and the overflow bound's neighbours."""
    rows = (np.random.default_rng(seed).standard_normal(shape) * 6).astype(dtype)
    bound = np.asarray(np.log(np.finfo(dtype).max), dtype)  # (-rows past it overflow exp)
    edge = [np.nan, np.inf, -np.inf, -bound, np.nextafter(-bound, 0), -bound - 1,
            np.nextafter(-bound, -np.inf), -2 * bound, 0.0, -0.0]
    rows.flat[:len(edge)] = np.asarray(edge, dtype)
    return rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 784), (37, 5), (1, 1), (0, 3)])
@pytest.mark.parametrize("case", ["ordinary", "special", "all below the bound"])
def test_the_epilogue_has_the_numpy_form_s_bits(dtype, shape, case, monkeypatch):
    rng = np.random.default_rng(1)
    bias = rng.standard_normal(shape[1]).astype(dtype)
    rows = (rng.standard_normal(shape) * 4).astype(dtype)
    if case == "special" and rows.size >= 10:
        rows = _special(dtype, shape, 2)
    elif case == "all below the bound":  # (every exp overflows: the masked form for all)
        rows = np.full(shape, -1000, dtype)
    ctx = _ctx(1)

    def run():
        out = rows.copy()
        epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), bias, ctx)(out)
        return out
    compiled, reference = _both_forms(monkeypatch, run)
    assert compiled.tobytes() == reference.tobytes()
    unfused = rows + bias  # (and both are the separate kernels' bits)
    epilogue.sigmoid_into(np, unfused, unfused)
    assert compiled.tobytes() == unfused.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_loops_at_the_overflow_bound_take_the_masked_form(dtype, monkeypatch):
    """Sums exactly at ``-log(max)`` rounded to the dtype (float32's -88.72284 overflows
    ``exp``) and either side of it: the never-overflowing form's bits, in both forms (the
    loops compared there in float32 where numpy 1's scalar comparison took float64)."""
    bound = dtype(-np.log(np.finfo(dtype).max))
    x = np.array([np.nextafter(bound, dtype(0)), bound, np.nextafter(bound, dtype(-np.inf))],
                 dtype)
    rows = np.stack([x] * 4)

    def run():
        out = rows.copy()
        epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), np.zeros(3, dtype), _ctx(1))(out)
        return out
    compiled, reference = _both_forms(monkeypatch, run)
    expected = np.stack([epilogue._sigmoid_masked(np, x.copy())] * 4)
    assert compiled.tobytes() == expected.tobytes() == reference.tobytes()
    assert np.all(compiled > 0)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_split_fused_matmul_with_the_loops_has_the_numpy_form_s_bits(threads, dtype,
                                                                       monkeypatch):
    """``[256, 784] @ [784, 256]`` with a bias and a sigmoid, split by rows over the pool
    (each chunk's rows through the loops), against the numpy epilogue on the same split."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 784)).astype(dtype)
    b = (rng.standard_normal((784, 256)) * 0.2).astype(dtype)
    bias = rng.standard_normal(256).astype(dtype)
    a[5, :] = np.nan  # (a row of NaNs, and rows whose exp overflows)
    a[9, :] = 50
    ctx = _ctx(threads)
    compiled, reference = _both_forms(
        monkeypatch, lambda: math_kernels._fused_matmul(ctx, a, b, bias)[0])
    assert compiled.tobytes() == reference.tobytes()


def test_column_blocks_and_other_dtypes_take_the_numpy_form(monkeypatch):
    calls = []
    monkeypatch.setattr(epilogue, "_sigmoid_loops", lambda *args: calls.append(args))
    bias = np.ones(4, np.float16)
    rows = np.zeros((3, 4), np.float16)
    epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), bias, _ctx(1))(rows)
    np.testing.assert_array_equal(rows, np.full((3, 4), 1 / (1 + np.exp(-1)), np.float16))
    wide = np.zeros((3, 8), np.float32)
    epilogue.fused_epilogue(np, ("BiasAdd", "Sigmoid"), np.zeros(8, np.float32), _ctx(1))(
        wide[:, 2:6], 2, 6)
    assert not calls and np.all(wide[:, 2:6] == 0.5) and np.all(wide[:, :2] == 0)


@pytest.mark.parametrize("activation", ["Sigmoid", "Relu"])
def test_the_prepare_hook_preloads_the_loops_for_a_sigmoid_or_a_relu(activation):
    ctx = SimpleNamespace(xp=np, output_dtypes=[np.float32],
                          attrs={"fused_ops": ["BiasAdd", activation]})
    hook = epilogue.preload(ctx)
    if hook is not None:  # (None once warm: another test ran them)
        hook.load(ctx)
    assert epilogue.preload(ctx) is None
    other = object()
    for ops in (["BiasAdd", "Tanh"], ["BiasAdd"]):
        ctx.attrs = {"fused_ops": ops}
        assert epilogue.preload(ctx, other) is other
    ctx.attrs, ctx.output_dtypes = {"fused_ops": ["BiasAdd", activation]}, [np.float16]
    assert epilogue.preload(ctx) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_warm_up_compiles_what_the_kernel_calls(dtype):
    """``_warm`` (the prepare hook's) compiles the signatures ``_FusedMatMul`` then calls, whole
    and split, with read-only inputs (a variable's value): a signature it missed would compile
    at the first step, on the event loop's thread where a small product runs inline."""
    epilogue._warm()
    loops = (epilogue._subtract_from, epilogue._reciprocal_of_one_plus)
    compiled = [set(loop._compiled.signatures) for loop in loops]
    rng = np.random.default_rng(4)
    for rows in (3, 256):
        a = rng.standard_normal((rows, 784)).astype(dtype)
        b = rng.standard_normal((784, 256)).astype(dtype)
        bias = rng.standard_normal(256).astype(dtype)
        for array in (a, b, bias):
            array.flags.writeable = False
        math_kernels._fused_matmul(_ctx(2), a, b, bias)
    assert [set(loop._compiled.signatures) for loop in loops] == compiled


def _relu_special(dtype, shape, seed):
    """Rows and a bias whose sums are NaN (with payloads, either sign), infinities, -0 (a -0
    row value plus a -0 bias: ``maximum`` gives +0), +0, the least subnormals and ordinary
    values."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal(shape).astype(dtype)
    bias = rng.standard_normal(shape[1]).astype(dtype)
    if rows.size >= 16 and shape[1] >= 8:
        tiny = np.finfo(dtype).smallest_subnormal
        rows[0, :8] = np.asarray([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, -0.0, tiny],
                                 dtype)
        bias[:8] = np.asarray([0, 0, 0, 0, -0.0, -0.0, 0.0, -2 * tiny], dtype)
        uint = np.uint32 if dtype == np.float32 else np.uint64
        rows[1, :2] = np.asarray([np.nan, -np.nan], dtype)
        rows[1, :2].view(uint)[:] |= uint(5)  # (a payload numpy's maximum keeps)
        bias[8] = np.inf
        rows[2, 8] = -np.inf  # (inf + -inf: a NaN from the add)
    return rows, bias


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(128, 256), (37, 9), (1, 1), (0, 3), (64, 300)])
def test_the_bias_and_relu_pass_has_the_numpy_form_s_bits(dtype, shape, monkeypatch):
    rows, bias = _relu_special(dtype, shape, 1)
    bias.flags.writeable = False  # (a variable's value; its own type is tested below)

    def run():
        out = rows.copy()
        with np.errstate(invalid="ignore"):  # (inf + -inf: numpy's form warns)
            epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), bias, _ctx(1))(out)
        return out
    compiled, reference = _both_forms(monkeypatch, run, "_bias_relu")
    assert compiled.tobytes() == reference.tobytes()
    with np.errstate(invalid="ignore"):
        unfused = rows + bias  # (the separate BiasAdd and Relu kernels' operations)
    np.maximum(unfused, dtype(0), out=unfused)
    assert compiled.tobytes() == unfused.tobytes()
    if rows.size >= 16 and shape[1] >= 8:
        assert not np.signbit(compiled[0, 4]) and np.isnan(compiled[2, 8])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_split_fused_matmul_with_a_relu_has_the_numpy_form_s_bits(threads, dtype,
                                                                     monkeypatch):
    """The MLP's first layer, ``[128, 784] @ [784, 256]`` with a bias and a Relu, split by
    rows over the pool (each chunk's rows through the pass), and its second, ``[128, 256] @
    [256, 256]``, whole: against the numpy epilogue on the same products."""
    rng = np.random.default_rng(5)
    bias = rng.standard_normal(256).astype(dtype)
    for inner in (784, 256):
        a = rng.standard_normal((128, inner)).astype(dtype)
        b = (rng.standard_normal((inner, 256)) * 0.1).astype(dtype)
        a[3, :] = np.nan
        ctx = _ctx(threads)
        ctx.attrs = dict(ctx.attrs, fused_ops=["BiasAdd", "Relu"])
        compiled, reference = _both_forms(
            monkeypatch, lambda: math_kernels._fused_matmul(ctx, a, b, bias)[0], "_bias_relu")
        monkeypatch.setattr(jit, "ENABLED", True)
        assert compiled.tobytes() == reference.tobytes()
        assert np.isnan(compiled[3]).all() and (compiled[4:] >= 0).all()


def test_relu_column_blocks_and_other_dtypes_take_the_numpy_form(monkeypatch):
    calls = []
    monkeypatch.setattr(epilogue, "_bias_relu", lambda *args: calls.append(args))
    rows = np.full((3, 4), -2, np.float16)
    epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), np.ones(4, np.float16), _ctx(1))(rows)
    assert np.all(rows == 0)
    wide = np.full((3, 8), -1, np.float32)
    epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), np.full(8, 3, np.float32), _ctx(1))(
        wide[:, 2:6], 2, 6)
    assert not calls and np.all(wide[:, 2:6] == 2) and np.all(wide[:, :2] == -1)
    plain = np.full((3, 4), -1, np.float32)  # (no ctx: a convolution's epilogue)
    epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), np.full(4, 3, np.float32))(plain)
    assert not calls and np.all(plain == 2)
    strided = np.full((3, 4), -1, np.float32)  # (a strided bias: numba would compile anew)
    epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), np.full(8, 3, np.float32)[::2],
                            _ctx(1))(strided)
    assert not calls and np.all(strided == 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_nan_plus_a_nan_bias_is_a_nan_and_every_other_value_keeps_its_bits(dtype,
                                                                              monkeypatch):
    """Where a row's NaN meets a NaN bias the pass's NaN need not be numpy's: numpy's add
    keeps the row's payload in its vector body and the bias's in some other columns, varying
    with the shape and dtype, so the docstrings promise a NaN there, the bits elsewhere."""
    uint = np.uint32 if dtype == np.float32 else np.uint64
    rows, bias = _relu_special(dtype, (5, 300), 2)
    rows[:, 16:] = np.nan
    rows[:, 16:].view(uint)[:] |= uint(3)
    bias[::3] = -np.nan
    bias[::3].view(uint)[:] |= uint(6)
    bias.flags.writeable = False

    def run():
        out = rows.copy()
        with np.errstate(invalid="ignore"):
            epilogue.fused_epilogue(np, ("BiasAdd", "Relu"), bias, _ctx(1))(out)
        return out
    compiled, reference = _both_forms(monkeypatch, run, "_bias_relu")
    both = np.isnan(rows) & np.isnan(bias)
    assert both.any() and np.isnan(compiled[both]).all()
    assert compiled[~both].tobytes() == reference[~both].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation, warm, loops", [
    ("Relu", "_warm_relu", ["_bias_relu"]),
    ("Sigmoid", "_warm", ["_subtract_from", "_reciprocal_of_one_plus"])])
def test_the_warm_up_s_argument_types_are_the_kernel_s(dtype, activation, warm, loops,
                                                       monkeypatch):
    """Each call of a loop by ``_FusedMatMul`` (whole and split, a read-only or writable bias)
    has the argument types of a call by the warm-up, recorded as they are passed: a check of
    the loops' compiled signatures after the kernel (above) passes whatever the warm-up does
    once another test has run the kernel in this process (r48mlp)."""
    numba = jit._load()
    seen, phase = {"warm": set(), "kernel": set()}, ["warm"]

    def recorder(name, loop):
        return lambda *args: seen[phase[0]].add(
            (name,) + tuple(numba.typeof(a) for a in args)) or loop(*args)
    for name in loops:
        monkeypatch.setattr(epilogue, name, recorder(name, getattr(epilogue, name)))
    getattr(epilogue, warm)()
    phase[0] = "kernel"
    rng = np.random.default_rng(7)
    for rows in (3, 128):
        a = rng.standard_normal((rows, 784)).astype(dtype)
        b = rng.standard_normal((784, 256)).astype(dtype)
        for writeable in (False, True):
            bias = rng.standard_normal(256).astype(dtype)
            bias.flags.writeable = writeable
            ctx = _ctx(2)
            ctx.attrs = dict(ctx.attrs, fused_ops=["BiasAdd", activation])
            math_kernels._fused_matmul(ctx, a, b, bias)
    assert {call[0] for call in seen["kernel"]} == set(loops)
    assert seen["kernel"] <= seen["warm"]
