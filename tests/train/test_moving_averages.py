"""``tf.train.ExponentialMovingAverage``: shadows of variables and tensors, their names, the
update with and without ``num_updates``, ``variables_to_restore`` with a Saver, the
refusals; and one program run under TF1 and here with the same outputs (``tf1_run``; skips
without TensorFlow: ``ASYNCFLOW_TF_PYTHON``).
"""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from tf1_reference import compat_run, tf1_run

# Two variables and a batch's mean, averaged over three steps; one average with num_updates.
PROGRAM = """
w = tf.Variable(np.array([1.0, 2.0], np.float32), name="w")
b = tf.Variable(np.array(0.5, np.float64), name="b")
x = tf.placeholder(tf.float32, [3, 2])
mean = tf.reduce_mean(x, axis=0, name="batch_mean")
step = tf.Variable(0, trainable=False, name="step")
ema = tf.train.ExponentialMovingAverage(0.9, name="ema")
maintain = ema.apply([w, b, mean])
counted = tf.train.ExponentialMovingAverage(0.99, num_updates=step)
maintain_counted = counted.apply([w])
with tf.control_dependencies([maintain, maintain_counted]):
    train = tf.group(tf.assign_add(w, [0.5, -1.0]), tf.assign_sub(b, 0.25),
                     tf.assign_add(step, 1))
outputs["names"] = np.array(sorted(v.op.name for v in tf.global_variables()))
outputs["restore"] = np.array(sorted(f"{k}={v.op.name}"
                                     for k, v in ema.variables_to_restore().items()))
outputs["moving"] = np.array(sorted(v.op.name for v in tf.moving_average_variables()))
outputs["average_names"] = np.array([ema.average_name(w), ema.average_name(mean),
                                     counted.average_name(b)])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for i in range(3):
        sess.run(train, {x: inputs["x"] * (i + 1)})
        averages = sess.run([ema.average(w), ema.average(b), ema.average(mean),
                             counted.average(w)])
        for k, value in enumerate(averages):
            outputs[f"step{i}_{k}"] = value
"""


def _inputs():
    return {"x": np.arange(6.0, dtype=np.float32).reshape(3, 2)}


def test_values_names_and_restore_map():
    outputs = compat_run(PROGRAM, _inputs())
    w, b = np.array([1.0, 2.0]), 0.5
    shadow_w, shadow_b, shadow_mean, counted_w = w.copy(), b, np.zeros(2), w.copy()
    for i in range(3):
        batch = (_inputs()["x"] * (i + 1)).mean(axis=0)
        shadow_w -= 0.1 * (shadow_w - w)
        shadow_b -= float(np.float32(1) - np.float32(0.9)) * (shadow_b - b)  # (TF1's float32)
        shadow_mean -= 0.1 * (shadow_mean - batch)
        counted_w -= (1 - min(0.99, (1 + i) / (10 + i))) * (counted_w - w)
        w, b = w + [0.5, -1.0], b - 0.25
        np.testing.assert_allclose(outputs[f"step{i}_0"], shadow_w, rtol=1e-6)
        np.testing.assert_allclose(outputs[f"step{i}_1"], shadow_b, rtol=1e-12)
        np.testing.assert_allclose(outputs[f"step{i}_2"], shadow_mean, rtol=1e-6)
        np.testing.assert_allclose(outputs[f"step{i}_3"], counted_w, rtol=1e-6)
    assert outputs["step0_1"].dtype == np.float64
    assert list(outputs["names"]) == ["b", "b/ema", "batch_mean/ema", "step", "w",
                                      "w/ExponentialMovingAverage", "w/ema"]
    assert list(outputs["moving"]) == ["b", "w", "w"]
    assert list(outputs["average_names"]) == ["w/ema", "batch_mean/ema",
                                              "b/ExponentialMovingAverage"]
    assert "b/ema=b" in outputs["restore"] and "w/ema=w" in outputs["restore"]
    assert "step=step" in outputs["restore"]


def test_saver_restores_the_averages_into_the_variables(tmp_path):
    w = tf.Variable(np.array([1.0, 2.0], np.float32), name="w")
    ema = tf.train.ExponentialMovingAverage(0.5)
    maintain = ema.apply([w])
    with tf.control_dependencies([maintain]):
        train = tf.assign_add(w, [2.0, 2.0])
    saver = tf.train.Saver()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train)
        sess.run(train)
        averaged = sess.run(ema.average(w))
        path = saver.save(sess, str(tmp_path / "model"))
    np.testing.assert_allclose(averaged, [2.0, 3.0])  # 1 -> 1 -> 2 (w: 1, 3, 5)
    restorer = tf.train.Saver(ema.variables_to_restore())
    with tf.Session() as sess:
        restorer.restore(sess, path)
        np.testing.assert_allclose(sess.run(w), averaged)


def test_refusals():
    with pytest.raises(NotImplementedError, match="zero_debias=True is not provided"):
        tf.train.ExponentialMovingAverage(0.9, zero_debias=True)
    ema = tf.train.ExponentialMovingAverage(0.9)
    with pytest.raises(TypeError, match="must be half, float, or double: .* int32"):
        ema.apply([tf.Variable(1)])
    with pytest.raises(ValueError, match="the shape of .* must be known"):
        ema.apply([tf.placeholder(tf.float32, [None])])
    assert ema.average(tf.Variable(1.0)) is None


def test_agrees_with_tf1(tmp_path):
    theirs = tf1_run(PROGRAM, tmp_path, **_inputs())
    ours = compat_run(PROGRAM, _inputs())
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        mine, want = np.asarray(ours[key]), np.asarray(theirs[key])
        assert mine.dtype == want.dtype or mine.dtype.kind == want.dtype.kind == "U", key
        if mine.dtype.kind == "f":
            np.testing.assert_allclose(mine, want, rtol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(mine, want, err_msg=key)


# TF1's own example: the averages made after the training step (``apply`` inside
# ``control_dependencies([opt_op])``) see the variable it just updated; a decay given as a
# tensor; shadows named ``<op name>/<name>`` whatever name scope ``apply`` runs in.
AFTER_STEP = """
with tf.variable_scope("outer"):
    w = tf.Variable(np.array([1.0, 2.0], np.float32), name="w")
decay = tf.placeholder_with_default(np.float32(0.5), [])
step = tf.assign_add(w, [2.0, 2.0])
with tf.name_scope("averaging"):
    ema = tf.train.ExponentialMovingAverage(decay)
    with tf.control_dependencies([step]):
        train = ema.apply([w])
outputs["names"] = np.array(sorted(v.op.name for v in tf.global_variables()))
outputs["restore"] = np.array(sorted(ema.variables_to_restore()))
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for i in range(2):
        sess.run(train)
        outputs[f"step{i}"] = sess.run(ema.average(w))
"""


def test_apply_after_the_training_step_sees_its_update():
    outputs = compat_run(AFTER_STEP, {})
    # w: 1 -> 3 -> 5; the shadow: 1 -> 2 (half way to 3) -> 3.5 (half way to 5)
    np.testing.assert_allclose(outputs["step0"], [2.0, 3.0])
    np.testing.assert_allclose(outputs["step1"], [3.5, 4.5])


def test_shadow_names_ignore_the_name_scope_of_apply():
    outputs = compat_run(AFTER_STEP, {})
    assert list(outputs["names"]) == ["outer/w", "outer/w/ExponentialMovingAverage"]
    assert list(outputs["restore"]) == ["outer/w/ExponentialMovingAverage"]


def test_after_the_training_step_agrees_with_tf1(tmp_path):
    theirs = tf1_run(AFTER_STEP, tmp_path)
    ours = compat_run(AFTER_STEP, {})
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


def test_shadow_names_inside_a_variable_scope_repeat_it_as_tf1():
    # TF1's slot_creator opens variable_scope(None, "<op name>/<name>") inside the current
    # variable scope: the scope's name appears twice (TF 1.15 and 2.x's compat.v1 alike)
    with tf.variable_scope("model"):
        w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        ema = tf.train.ExponentialMovingAverage(0.5)
        ema.apply([w])
    assert ema.average(w).op.name == "model/model/w/ExponentialMovingAverage"
    assert sorted(ema.variables_to_restore()) == ["model/model/w/ExponentialMovingAverage"]
