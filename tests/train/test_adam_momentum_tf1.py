"""Dense Adam and momentum (plain and Nesterov) against TF1 itself, bit for bit in float32
and float64 over three steps: the kernels (the compiled loops and the numpy forms alike) take
the operation order of TF1's CPU functors (``training_ops.cc``: ``m += (grad - m) * (1 -
beta1)``, ``v += (grad^2 - v) * (1 - beta2)``, ``var -= grad * lr + accum * momentum * lr``),
on variables small enough for the whole-array numpy form and large enough for the blocked
one. Adam through the optimizers, and its Nesterov form (no TF1 optimizer has one) through
the raw op. Skips where TensorFlow is not importable."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import jit
from asyncflow.ops.training import apply_update
from tests.tf1_reference import tf1_run

CASES = ["adam", "adam-nesterov", "momentum", "momentum-nesterov"]
SIZES = (("small", 301), ("large", 70001))


def _inputs():
    rng = np.random.default_rng(12)
    values = {}
    for name, size in SIZES:
        for dtype in ("float32", "float64"):
            key = f"{name}-{dtype}"
            values[key] = rng.standard_normal(size).astype(dtype)
            # Gradients over nine decades, one zero, one -0 and one subnormal.
            grads = [rng.standard_normal(size).astype(dtype)
                     * (10.0 ** rng.integers(-6, 3, size=size)).astype(dtype) for _ in range(3)]
            grads[0][:3] = [0.0, -0.0, np.finfo(dtype).tiny / 4]
            values[f"{key}_grads"] = np.stack(grads)
    return values


async def _ours(inputs):
    out = {}
    for key in (k for k in inputs if not k.endswith("_grads")):
        for case in CASES:
            with af.Graph().as_default():
                var = af.Variable(inputs[key], name="w")
                dtype = var.dtype.base_dtype
                grad = af.placeholder(dtype, inputs[key].shape)
                if case == "adam":
                    train = af.train.AdamOptimizer(0.01).apply_gradients([(grad, var)])
                elif case.startswith("momentum"):
                    train = af.train.MomentumOptimizer(
                        0.05, 0.9, use_nesterov=case.endswith("nesterov")
                    ).apply_gradients([(grad, var)])
                else:  # the raw op, fixed beta powers
                    m = af.Variable(np.zeros_like(inputs[key]), name="m")
                    v = af.Variable(np.zeros_like(inputs[key]), name="v")
                    train = apply_update("ApplyAdam", [var._ref(), m._ref(), v._ref()],
                                         [0.9 ** 3, 0.999 ** 3, 0.01, 0.9, 0.999, 1e-7, grad],
                                         use_nesterov=True)
                async with af.Session() as session:
                    await session.run(af.global_variables_initializer())
                    for value in inputs[f"{key}_grads"]:
                        await session.run(train, {grad: value})
                    out[f"{key}-{case}"] = await session.run(var)
    return out


@pytest.mark.parametrize("compiled", [True, False])
async def test_dense_adam_and_momentum_give_tf1s_bits(tmp_path, compiled, monkeypatch):
    if compiled and not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(jit, "ENABLED", compiled)
    inputs = _inputs()
    ours = await _ours(inputs)
    theirs = tf1_run(f"""
from tensorflow.python.ops import gen_training_ops
for key in [k for k in inputs if not k.endswith("_grads")]:
    for case in {CASES!r}:
        with tf.Graph().as_default():
            var = tf.Variable(inputs[key], name="w")
            dtype = var.dtype.base_dtype
            grad = tf.placeholder(dtype, inputs[key].shape)
            if case == "adam":
                train = tf.train.AdamOptimizer(0.01).apply_gradients([(grad, var)])
            elif case.startswith("momentum"):
                train = tf.train.MomentumOptimizer(
                    0.05, 0.9, use_nesterov=case.endswith("nesterov")
                ).apply_gradients([(grad, var)])
            else:
                m = tf.Variable(np.zeros_like(inputs[key]), name="m")
                v = tf.Variable(np.zeros_like(inputs[key]), name="v")
                c = lambda x: tf.constant(x, dtype)
                train = gen_training_ops.apply_adam(
                    var, m, v, c(0.9 ** 3), c(0.999 ** 3), c(0.01), c(0.9), c(0.999), c(1e-7),
                    grad, use_nesterov=True)
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                for value in inputs[key + "_grads"]:
                    session.run(train, {{grad: value}})
                outputs[f"{{key}}-{{case}}"] = session.run(var)
""", tmp_path, **inputs)
    assert sorted(theirs) == sorted(ours)
    for key, mine in ours.items():
        assert mine.dtype == theirs[key].dtype
        assert mine.tobytes() == theirs[key].tobytes(), (
            key, int((mine != theirs[key]).sum()), "values differ")
