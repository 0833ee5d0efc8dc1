"""The dense RMSProp, Adam and momentum applies' compiled loops (kernels/jit.py) against their
numpy forms (``jit.ENABLED`` off), bit for bit: elementwise, the same operations in the same
order, so the same bits in the variable and in every slot, over several steps, in float32
and float64, at odd sizes, with NaN, infinities, -0 and subnormals, on one thread and split
over several (chunks that end anywhere in a vector); values held before an apply unchanged;
and no compile after the preload's warm-up for the argument types the kernels pass."""
import types

import numpy as np
import pytest

from asyncflow import dtypes, errors
from asyncflow.exec.resources import VariableResource
from asyncflow.kernels import intra_op, jit
from asyncflow.kernels import training

from apply_context import ApplyContext as Context  # same folder

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")

# kernel -> (slot count, the slots that must stay non-negative, has a nesterov form)
KERNELS = {"_apply_rms_prop": (2, (0,), False), "_apply_adam": (2, (1,), True),
           "_apply_momentum": (1, (), True)}
LOOPS = {"_apply_rms_prop": "rms_prop_loop", "_apply_adam": "_adam_loop",
         "_apply_momentum": "_momentum_loop"}


def _resources(values, dtype):
    out = []
    for index, value in enumerate(values):
        resource = VariableResource(f"v{index}", dtypes.as_dtype(dtype), value.shape)
        resource.assign(value)
        out.append(resource)
    return out


def _call(name, ctx, variables, grad, dtype):
    t = np.dtype(dtype).type
    fn = getattr(training, name)
    if name == "_apply_momentum":
        return fn(ctx, *variables, t(0.05), grad, t(0.9))[0]
    if name == "_apply_adam":
        return fn(ctx, *variables, t(0.9 ** 3), t(0.999 ** 3), t(0.01), t(0.9), t(0.999),
                  t(1e-7), grad)[0]
    return fn(ctx, *variables, t(0.01), t(0.9), t(0.5), t(1e-6), grad)[0]


def _initial(name, dtype, shape, rng, special):
    slots, positive, _ = KERNELS[name]
    values = [np.asarray(rng.standard_normal(shape), dtype=dtype)]
    for slot in range(slots):
        value = np.asarray(rng.standard_normal(shape), dtype=dtype)
        values.append(np.abs(value) + 16 if slot in positive else value)
    if special and values[0].size >= 8:
        flat = values[-1].reshape(-1)  # the last slot: NaN, infinities, zeros of both signs
        flat[:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
        values[0].reshape(-1)[5:8] = [np.nan, -0.0, np.finfo(dtype).tiny / 4]
    return values


def _gradient(dtype, shape, rng, special):
    grad = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 3, size=shape),
                      dtype=dtype)
    if special and grad.size >= 8:
        grad.reshape(-1)[:8] = [0.0, -0.0, np.finfo(dtype).tiny / 4, np.inf, -np.inf, np.nan,
                                np.finfo(dtype).max, -np.finfo(dtype).tiny]
    return grad


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 0)


@pytest.mark.filterwarnings("ignore:invalid value encountered", "ignore:overflow encountered")
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (13, 11), (3, 5, 67)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_loop_gives_the_numpy_form_s_bits(name, nesterov, dtype, shape, threads,
                                              split_everything, monkeypatch):
    if nesterov and not KERNELS[name][2]:
        pytest.skip("no nesterov form")
    rng = np.random.default_rng(len(shape) * 13 + threads)
    special = len(shape) > 1
    initial = _initial(name, dtype, shape, rng, special)
    loop_vars, numpy_vars = _resources(initial, dtype), _resources(initial, dtype)
    stored = [id(r.value) for r in loop_vars]
    calls = []
    loop = getattr(training, LOOPS[name])
    monkeypatch.setattr(training, LOOPS[name], lambda *args: calls.append(1) or loop(*args))
    for step in range(3):
        grad = _gradient(dtype, shape, rng, special)
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(jit, "ENABLED", False)
            expected = _call(name, Context(1, nesterov), numpy_vars, grad, dtype)
        got = _call(name, Context(threads, nesterov), loop_vars, grad, dtype)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes(), (step, int((got != expected).sum()))
        del got, expected  # a held result keeps the next step from updating in place
        for ours, theirs in zip(loop_vars, numpy_vars):
            assert ours.read().tobytes() == theirs.read().tobytes(), (step, ours.name)
            assert not ours.read().flags.writeable
    assert calls and len(calls) >= 3
    if shape:  # updated in the stored arrays themselves
        assert [id(r.value) for r in loop_vars] == stored


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_values_held_before_the_apply_do_not_change(name):
    rng = np.random.default_rng(7)
    initial = _initial(name, np.float32, (33, 9), rng, False)
    variables = _resources(initial, np.float32)
    held = [variables[0].read(), variables[-1].read()[3:9]]  # a fetch, a view
    copies = [h.copy() for h in held]
    _call(name, Context(2), variables, _gradient(np.float32, (33, 9), rng, False), np.float32)
    for value, copy in zip(held, copies):
        assert value.tobytes() == copy.tobytes()
    assert not np.array_equal(variables[0].read(), initial[0])


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_read_only_and_strided_gradients(name, monkeypatch):
    """A constant's read-only gradient and a transposed one: the numpy form's bits."""
    rng = np.random.default_rng(9)
    initial = _initial(name, np.float64, (6, 10), rng, False)
    grad = np.asfortranarray(_gradient(np.float64, (6, 10), rng, False))
    grad.flags.writeable = False
    loop_vars, numpy_vars = _resources(initial, np.float64), _resources(initial, np.float64)
    got = _call(name, Context(2), loop_vars, grad, np.float64)
    monkeypatch.setattr(jit, "ENABLED", False)
    expected = _call(name, Context(2), numpy_vars, grad, np.float64)
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("size", [4, 70000])  # (the numpy form: whole arrays, blocks)
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_slot_of_another_shape_is_named_and_nothing_is_left_open(name, compiled, size,
                                                                   monkeypatch):
    """The error names the slot, and the variable's stored array stays read-only with no
    writer: a later fetch of it is no array the client could change the variable through."""
    monkeypatch.setattr(jit, "ENABLED", compiled)
    values = [np.zeros(size, np.float32) for _ in range(KERNELS[name][0] + 1)]
    values[-1] = np.zeros(3, np.float32)
    variables = _resources(values, np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=f"v{len(values) - 1}.*shape \\[3\\]"):
        _call(name, Context(1), variables, np.ones(size, np.float32), np.float32)
    for resource in variables:
        assert resource.writer is None, resource.name
        assert not resource.read().flags.writeable, resource.name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_preload_compiles_every_signature_its_kernel_passes(dtype):
    """After the prepare hook's preload for an op type and dtype, applies of that type and
    dtype, writable or read-only gradients, compile nothing more: no compile on the event
    loop. A dtype no loop takes has nothing to preload."""
    loops = {"_apply_rms_prop": "ApplyRMSProp", "_apply_adam": "ApplyAdam",
             "_apply_momentum": "ApplyMomentum"}
    rng = np.random.default_rng(1)
    for name, op_type in loops.items():
        node = types.SimpleNamespace(type=op_type, output_dtypes=(np.dtype(dtype),))
        preload = training._preload(node)
        if preload is not None:  # (not warmed yet in this process)
            preload.load(None)
        assert training._preload(node) is None  # warmed once: nothing left to preload
        loop = getattr(training, LOOPS[name])
        count = len(loop._compiled.signatures)
        for writable in (True, False):
            grad = _gradient(dtype, (5,), rng, False)
            grad.flags.writeable = writable
            variables = _resources(_initial(name, dtype, (5,), rng, False), dtype)
            _call(name, Context(1, True), variables, grad, dtype)
        assert len(loop._compiled.signatures) == count, name
    for other in (np.float16, np.int32):
        node = types.SimpleNamespace(type="ApplyAdam", output_dtypes=(np.dtype(other),))
        assert training._preload(node) is None


def test_no_preload_on_a_gpu(monkeypatch):
    """A node on a GPU (its ``xp`` CuPy's) takes the numpy forms: nothing to compile for it
    before its first step, even where no loop was warmed yet."""
    monkeypatch.setattr(jit, "_warmed", set())
    monkeypatch.setattr(training, "_warms", {})
    for op_type in ("ApplyRMSProp", "ApplyAdam", "ApplyMomentum"):
        node = types.SimpleNamespace(type=op_type, output_dtypes=(np.dtype(np.float32),),
                                     xp=types.SimpleNamespace(__name__="cupy"))
        assert training._preload(node) is None, op_type
        node.xp = np
        assert training._preload(node) is not None, op_type  # (on CPU: not warmed yet)
