"""Dense RMSProp (plain and centered, with and without momentum) against TF1 itself, bit for
bit in float32 over three steps (issue 37): the kernels take the operation order of TF1's CPU
functors, ``ms + (grad^2 - ms) * (1 - rho)`` and ``mom * momentum + grad * lr / sqrt(...)``,
on variables small enough for the whole-array form and large enough for the blocked one
(several blocks, the last one partial). Skips where TensorFlow is not importable."""
import numpy as np

import asyncflow as af
from tests.tf1_reference import tf1_run

SETTINGS = [(False, 0.0), (False, 0.5), (True, 0.0), (True, 0.5)]  # centered, momentum


def _inputs():
    rng = np.random.default_rng(11)
    values = {}
    for name, size in (("small", 301), ("large", 70001)):
        values[name] = rng.standard_normal(size).astype(np.float32)
        # Gradients over nine decades, one zero, one -0 and one subnormal.
        grads = [rng.standard_normal(size).astype(np.float32)
                 * np.float32(10.0 ** rng.integers(-6, 3)) for _ in range(3)]
        grads[0][:3] = [0.0, -0.0, 1e-40]
        values[f"{name}_grads"] = np.stack(grads)
    return values


async def _ours(inputs):
    out = {}
    for name in ("small", "large"):
        for centered, momentum in SETTINGS:
            with af.Graph().as_default():
                var = af.Variable(inputs[name])
                grad = af.placeholder(af.float32, inputs[name].shape)
                train = af.train.RMSPropOptimizer(
                    0.01, decay=0.9, momentum=momentum, epsilon=1e-10,
                    centered=centered).apply_gradients([(grad, var)])
                async with af.Session() as session:
                    await session.run(af.global_variables_initializer())
                    for value in inputs[f"{name}_grads"]:
                        await session.run(train, {grad: value})
                    out[f"{name}-{centered}-{momentum}"] = await session.run(var)
    return out


async def test_dense_rmsprop_gives_tf1s_bits(tmp_path):
    inputs = _inputs()
    ours = await _ours(inputs)
    theirs = tf1_run(f"""
for name in ("small", "large"):
    for centered, momentum in {SETTINGS!r}:
        with tf.Graph().as_default():
            var = tf.Variable(inputs[name])
            grad = tf.placeholder(tf.float32, inputs[name].shape)
            train = tf.train.RMSPropOptimizer(
                0.01, decay=0.9, momentum=momentum, epsilon=1e-10,
                centered=centered).apply_gradients([(grad, var)])
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                for value in inputs[name + "_grads"]:
                    session.run(train, {{grad: value}})
                outputs[f"{{name}}-{{centered}}-{{momentum}}"] = session.run(var)
""", tmp_path, **inputs)
    assert sorted(theirs) == sorted(ours)
    for key, mine in ours.items():
        assert mine.dtype == theirs[key].dtype == np.float32
        assert mine.tobytes() == theirs[key].tobytes(), (
            key, int((mine != theirs[key]).sum()), "values differ")
