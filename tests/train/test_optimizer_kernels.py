"""The dense optimizer applies rebuilt without temporaries (issue 37) against the kernels
they replaced, bit for bit, on one and several intra-op threads; and values read before an
apply never change (variables are replaced, never mutated)."""
import numpy as np
import pytest

from asyncflow import dtypes
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.kernels import training as rebuilt
from asyncflow.exec.devices import Device
from asyncflow.exec.resources import VariableResource

import optimizer_kernels_before as before  # same folder


class KernelContext:
    def __init__(self, threads, nesterov=False):
        self.attrs = {"use_nesterov": nesterov, "use_locking": False}
        self.name = "apply"
        self.type = "Apply"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)


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
    slots = KERNELS[name]
    initial = [rng.standard_normal(shape).astype(dtype)]
    for slot in range(slots):
        value = rng.standard_normal(shape).astype(dtype)
        # Second-moment slots must be non-negative (ms >= mg^2 for the centered form).
        positive = (name in ("_apply_adagrad",) or (name == "_apply_adam" and slot == 1)
                    or (name == "_apply_rms_prop" and slot == 0)
                    or (name == "_apply_centered_rms_prop" and slot == 1))
        initial.append(np.abs(value) + (16 if positive else 0))
    grad = rng.standard_normal(shape).astype(dtype)
    scalars = scalars_for(name, dtype)

    old_vars = resources(initial, dtype)
    new_vars = resources(initial, dtype)
    held = [r.read() for r in new_vars]  # values a client fetched before the apply
    old_out = call(before, name, KernelContext(1, nesterov), old_vars, scalars, grad)[0]
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
