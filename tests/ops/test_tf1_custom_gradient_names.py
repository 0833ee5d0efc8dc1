"""TF1's ``tf.custom_gradient`` in graph mode (porting.md listed it as not provided): the
forward ops' values and names, the user's grad_fn used by ``tf.gradients`` (several inputs and
outputs, a grad_fn of forward tensors, variables read inside with ``grad_fn(variables=)``)
and TF1's refusals; one program run here and under TF1 itself."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from tf1_reference import compare_groups, compat_run, tf1_run

SNIPPET = """
@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)
    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return tf.log(1 + e), grad

@tf.custom_gradient
def clipped(a, b):
    def grad(da, db):
        return tf.clip_by_value(da + db, -0.5, 0.5), 3.0 * db
    return (a * b, a + b), grad

x = tf.constant(inputs["x"])
w = tf.get_variable("w", initializer=tf.constant(inputs["w"]))

@tf.custom_gradient
def scaled(v):
    def grad(dy, variables=None):
        return dy * 2.0, [tf.reduce_sum(dy * v) * 10.0]
    return v * w, grad

y1 = log1pexp(x)
y2, y3 = clipped(x, x * 2.0)
y4 = scaled(x)
loss = tf.reduce_sum(y1 * y1) + tf.reduce_sum(y2) + tf.reduce_sum(tf.sin(y3)) + tf.reduce_sum(y4)
grads = tf.gradients(loss, [x, w])
outputs["names"] = np.array([t.name for t in (y1, y2, y3, y4)] + [g.name for g in grads])
refused = []
def no_vars(v):
    return v * w, lambda dy: dy
def makes_var(v):
    return v * tf.get_variable("inner", initializer=tf.constant(1.0, tf.float64)), lambda dy: dy
for fn in (no_vars, makes_var):
    try:
        tf.custom_gradient(fn)(x)
        refused.append("none")
    except Exception as e:
        refused.append(type(e).__name__)
outputs["refused"] = np.array(refused)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["values"] = sess.run([y1, y2, y3, y4])
    outputs["grads"] = sess.run(grads)
"""

RNG = np.random.default_rng(11)
INPUTS = {"x": np.array([0.0, 100.0, -3.0, 0.4]), "w": np.array(1.5)}


def _here():
    with af.Graph().as_default():
        return compat_run(SNIPPET, INPUTS)


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path, **INPUTS)
    ours = _here()
    # (x's gradient sums four: asyncflow names that sum otherwise than TF1's AddN_1, for any
    # op, not this one's concern; w's gradient is the grad_fn's own op, named as TF1's)
    assert list(ours["names"][:4]) + [ours["names"][5]] == \
        list(theirs["names"][:4]) + [theirs["names"][5]]
    assert list(ours["refused"]) == list(theirs["refused"])
    compare_groups([ours["values"], ours["grads"]], theirs, ["values", "grads"], rtol=1e-14)


def test_values_and_the_users_gradient_here():
    out = _here()
    x, w = INPUTS["x"], float(INPUTS["w"])
    y1 = np.log1p(np.exp(x))
    np.testing.assert_allclose(out["values"][0], y1, rtol=1e-14)  # (log(1 + e))
    np.testing.assert_array_equal(out["values"][3], x * w)
    sig = 1 - 1 / (1 + np.exp(x))
    dx = 2 * y1 * sig  # log1pexp's grad_fn
    da = np.clip(1.0 + np.cos(3 * x), -0.5, 0.5)  # clipped's: da + db clipped, for a = x
    db = 3.0 * np.cos(3 * x)  # ... and 3 db for b = 2x
    expected_x = dx + da + 2 * db + 2.0  # scaled's: dy * 2
    np.testing.assert_allclose(out["grads"][0], expected_x, rtol=1e-14)
    np.testing.assert_allclose(out["grads"][1], np.sum(x) * 10.0, rtol=1e-15)
    assert list(out["refused"]) == ["TypeError", "TypeError"]


def test_refusals_are_named():
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0])

        @tf.custom_gradient
        def wrong_count(a, b):
            return a * b, lambda dy: [dy]
        y = wrong_count(x, x)
        with pytest.raises(ValueError, match="wrong_count's grad_fn returned 1 gradients for 2"):
            af.gradients(y, [x])
        w = af.Variable(2.0, name="w")

        @tf.custom_gradient
        def few(a):
            return a * w, lambda dy, variables=None: (dy, [])
        with pytest.raises(ValueError, match="Must return gradient for each variable"):
            af.gradients(few(x), [x])
        with pytest.raises(TypeError, match="grad_fn must accept keyword argument 'variables'"):
            tf.custom_gradient(lambda a: (a * w, lambda dy: dy))(x)
