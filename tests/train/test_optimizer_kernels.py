"""The dense optimizer applies rebuilt without temporaries (issue 37) against the kernels
they replaced (RMSProp, Adam and momentum: against TF1's functors' order,
``optimizer_kernels_tf1.py``), bit for
bit, on one and several intra-op threads; and values read before an apply never change
(variables are replaced, never mutated)."""
import types

import numpy as np
import pytest

from asyncflow import dtypes
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import training as rebuilt
from asyncflow.exec.resources import VariableResource

from apply_context import ApplyContext as KernelContext  # same folder
import optimizer_kernels_before as before  # same folder
import optimizer_kernels_tf1 as tf1_form  # same folder

# The reference of each dense apply: the kernel it replaced, TF1's order for RMSProp,
# Adam and momentum.
reference = types.SimpleNamespace(**{
    name: getattr(tf1_form, name, getattr(before, name, None)) for name in dir(before)})


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 256)


# kernel name -> slot count
KERNELS = {"_apply_momentum": 1, "_apply_adam": 2, "_apply_adagrad": 1, "_apply_rms_prop": 2,
           "_apply_centered_rms_prop": 3}


def resources(values, dtype):
    out = []
    for index, value in enumerate(values):
        resource = VariableResource(f"v{index}", dtypes.as_dtype(dtype), value.shape)
        resource.assign(value)
        out.append(resource)
    return out


def call(module, name, ctx, variables, scalars, grad):
    fn = getattr(module, name)
    if name == "_apply_momentum":
        var, accum = variables
        lr, momentum = scalars[:2]
        return fn(ctx, var, accum, lr, grad, momentum)
    if name == "_apply_adam":
        return fn(ctx, *variables, *scalars, grad)
    if name == "_apply_adagrad":
        return fn(ctx, *variables, scalars[0], grad)
    if name == "_apply_rms_prop":
        return fn(ctx, *variables, *scalars[:4], grad)
    return fn(ctx, *variables, *scalars[:4], grad)


def scalars_for(name, dtype):
    t = np.dtype(dtype).type
    if name == "_apply_adam":
        return [t(0.9 ** 3), t(0.999 ** 3), t(0.01), t(0.9), t(0.999), t(1e-7)]
    if name == "_apply_momentum":
        return [t(0.05), t(0.9)]
    if name == "_apply_adagrad":
        return [t(0.1)]
    return [t(0.01), t(0.9), t(0.5), t(1e-6)]  # lr, rho, momentum, epsilon


def initial_values(name, dtype, shape, rng):
    slots = KERNELS[name]
    initial = [rng.standard_normal(shape).astype(dtype)]
    for slot in range(slots):
        value = rng.standard_normal(shape).astype(dtype)
        # Second-moment slots must be non-negative (ms >= mg^2 for the centered form).
        positive = (name in ("_apply_adagrad",) or (name == "_apply_adam" and slot == 1)
                    or (name == "_apply_rms_prop" and slot == 0)
                    or (name == "_apply_centered_rms_prop" and slot == 1))
        initial.append(np.abs(value) + (16 if positive else 0))
    return initial


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(), (7,), (13, 11), (3, 5, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_apply_in_place_matches_the_kernel_it_replaced_bit_for_bit(name, nesterov, dtype, shape,
                                                                   threads, small_chunks,
                                                                   monkeypatch):
    """Nothing but the variables holds their values: the update writes into the stored
    arrays themselves (in blocks of 5 elements here, so blocks end inside every chunk), with
    the same bits as the old kernel's new arrays, over several steps."""
    if nesterov and name not in ("_apply_momentum", "_apply_adam"):
        pytest.skip("no nesterov form")
    monkeypatch.setattr(rebuilt, "BLOCK", 5)
    monkeypatch.setattr(rebuilt, "SMALL_BYTES", 0)  # (small ones get new arrays: cheaper)
    rng = np.random.default_rng(len(shape) * 11 + threads)
    old_vars = resources(initial_values(name, dtype, shape, rng), dtype)
    new_vars = resources([np.array(r.read(), dtype=dtype) for r in old_vars], dtype)
    stored = [id(r.value) for r in new_vars]
    scalars = scalars_for(name, dtype)
    for _ in range(3):
        grad = rng.standard_normal(shape).astype(dtype)
        old_out = call(reference, name, KernelContext(1, nesterov), old_vars, scalars, grad)[0]
        new_out = call(rebuilt, name, KernelContext(threads, nesterov), new_vars, scalars,
                       grad)[0]
        np.testing.assert_array_equal(new_out, old_out)
        del new_out, old_out  # a held result keeps the next step from updating in place
    assert [id(r.value) for r in new_vars] == stored  # updated in place, every step
    for old_resource, new_resource in zip(old_vars, new_vars):
        np.testing.assert_array_equal(new_resource.read(), old_resource.read())
        assert not new_resource.read().flags.writeable


def test_apply_leaves_a_view_of_the_stored_value_alone(small_chunks, monkeypatch):
    """A view of the stored array (a fetch, a wire buffer) makes the update write a new
    array: the view keeps showing the value it was taken of."""
    monkeypatch.setattr(rebuilt, "SMALL_BYTES", 0)
    rng = np.random.default_rng(3)
    variables = resources(initial_values("_apply_rms_prop", np.float32, (64,), rng), np.float32)
    view = variables[1].read()[8:16]
    before_view = view.copy()
    stored = [id(r.value) for r in variables]  # ids: a reference would stop the reuse
    rebuilt._apply_rms_prop(KernelContext(2), *variables,
                            *scalars_for("_apply_rms_prop", np.float32),
                            rng.standard_normal(64).astype(np.float32))
    np.testing.assert_array_equal(view, before_view)
    assert [id(r.value) == i for r, i in zip(variables, stored)] == [True, False, True]


@pytest.mark.parametrize("held", [False, True])
def test_gradient_descent_matches_the_kernel_it_replaced(held):
    rng = np.random.default_rng(4)
    old_var, new_var = resources([rng.standard_normal((9, 5)).astype(np.float32)] * 2, np.float32)
    fetched = new_var.read() if held else None
    delta, alpha = rng.standard_normal((9, 5)).astype(np.float32), np.float32(0.3)
    old = before._apply_gradient_descent(KernelContext(1), old_var, alpha, delta)[0]
    new = rebuilt._apply_gradient_descent(KernelContext(2), new_var, alpha, delta)[0]
    np.testing.assert_array_equal(new, old)
    if held:
        assert not np.array_equal(fetched, new)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(), (7,), (13, 11), (3, 5, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_apply_matches_the_kernel_it_replaced_bit_for_bit(name, nesterov, dtype, shape,
                                                          threads, small_chunks):
    if nesterov and name not in ("_apply_momentum", "_apply_adam"):
        pytest.skip("no nesterov form")
    rng = np.random.default_rng(len(shape) * 7 + threads)
    initial = initial_values(name, dtype, shape, rng)
    grad = rng.standard_normal(shape).astype(dtype)
    scalars = scalars_for(name, dtype)

    old_vars = resources(initial, dtype)
    new_vars = resources(initial, dtype)
    held = [r.read() for r in new_vars]  # values a client fetched before the apply
    old_out = call(reference, name, KernelContext(1, nesterov), old_vars, scalars, grad)[0]
    new_out = call(rebuilt, name, KernelContext(threads, nesterov), new_vars, scalars, grad)[0]
    assert new_out.dtype == old_out.dtype and new_out.shape == old_out.shape
    np.testing.assert_array_equal(new_out, old_out)
    for old_resource, new_resource in zip(old_vars, new_vars):
        np.testing.assert_array_equal(new_resource.read(), old_resource.read())
        assert not new_resource.read().flags.writeable
    for value, original in zip(held, initial):
        np.testing.assert_array_equal(value, original)


def test_apply_reports_a_shape_mismatch_naming_the_variable():
    ctx = KernelContext(2)
    var, m, v = resources([np.zeros(3, np.float32)] * 3, np.float32)
    with pytest.raises(Exception, match="v0"):
        rebuilt._apply_adam(ctx, var, m, v, *scalars_for("_apply_adam", np.float32),
                            np.zeros(4, np.float32))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (inf * 0, both kernels)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["_apply_rms_prop", "_apply_centered_rms_prop"])
def test_rmsprop_without_momentum_gives_tf1s_bits_slots_included(name, dtype, threads,
                                                                 small_chunks, monkeypatch):
    """Momentum 0 (the optimizer's default) keeps ``mom * 0 + ...``: TF1's bits in the
    variable and in the slots over three steps in place and in blocks, gradients with zeros,
    -0 and a subnormal included (``+0 + -0`` is ``+0``: the sign of a zero in the slot
    depends on the old slot), and a NaN or an infinity in the slot stays NaN there, as in
    TF1. (Writing ``lr * grad / sqrt(...)`` straight into the slot saves two of the eleven
    passes but measured no faster in a step's cold caches: bench/RESULTS.md.)"""
    monkeypatch.setattr(rebuilt, "BLOCK", 7)
    monkeypatch.setattr(rebuilt, "SMALL_BYTES", 0)
    rng = np.random.default_rng(5)
    shape = (9, 13)
    initial = initial_values(name, dtype, shape, rng)
    initial[-1][2, 3:] = [np.nan, np.inf, -np.inf] + [0.0] * 7  # the moment slot
    initial[-1][3, :4] = [-0.0, 0.0, -1.0, 1.0]
    old_vars, new_vars = resources(initial, dtype), resources(initial, dtype)
    t = np.dtype(dtype).type
    scalars = [t(0.01), t(0.9), t(0.0), t(1e-6)]
    for step in range(3):
        grad = rng.standard_normal(shape).astype(dtype)
        grad[0, :3] = [0.0, -0.0, np.finfo(dtype).tiny / 4]
        grad[3, :4] = -0.0
        old_out = call(reference, name, KernelContext(1), old_vars, scalars, grad)[0]
        new_out = call(rebuilt, name, KernelContext(threads), new_vars, scalars, grad)[0]
        assert new_out.tobytes() == old_out.tobytes(), step
        del new_out, old_out
        for old_resource, new_resource in zip(old_vars, new_vars):
            assert new_resource.read().tobytes() == old_resource.read().tobytes(), step
    assert np.isnan(new_vars[-1].read()[2, 3:6]).all()  # the slot's NaN and infinities kept
