"""TF1's ``tf.make_template`` (porting.md listed it as not provided): variables created on the
first call and shared by later ones, unique template scopes (``scale``, ``scale_1``),
``create_scope_now_`` and ``unique_name_``, op names of repeated calls, the template's
variable lists and TF1's refusals; one program run here and under TF1 itself."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from tf1_reference import compare_groups, compat_run, tf1_run

SNIPPET = """
def scale(x, name):
    w = tf.get_variable(name, shape=[3], initializer=tf.constant_initializer(inputs["w"]))
    with tf.variable_scope("inner"):
        b = tf.get_variable("b", shape=[], initializer=tf.ones_initializer())
    return x * w + b

x = tf.constant(inputs["x"])
t1 = tf.make_template("scale", scale, name="w")
t2 = tf.make_template("scale", scale, name="w")
now = tf.make_template("now", scale, create_scope_now_=True, name="v")
fixed = tf.make_template("ignored", scale, unique_name_="fixed", name="u")
with tf.variable_scope("outer"):
    nested = tf.make_template("scale", scale, name="w")
    ys = [nested(x), nested(x * 2.0)]
ys += [t1(x), t1(x), t2(x), now(x), now(x), fixed(x), t1(x * 3.0)]
names = [t.name for t in ys] + [v.name for v in tf.global_variables()]
names += [v.name for v in t1.trainable_variables] + [v.name for v in now.variables]
names += [t1.variable_scope_name, now.variable_scope.name, fixed.variable_scope_name]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["values"] = sess.run(ys)
outputs["names"] = np.array(names)

def bad(x):
    return x * tf.Variable(1.0, name="v")
t = tf.make_template("bad", bad)
t(x)
try:
    t(x)
    outputs["refused"] = np.array(["none"])
except ValueError as e:
    outputs["refused"] = np.array([type(e).__name__, str(e).split(":")[0]])
try:
    tf.make_template(None, bad)
    outputs["no_name"] = np.array(["none"])
except ValueError as e:
    outputs["no_name"] = np.array([type(e).__name__, str(e)])
"""

INPUTS = {"x": np.array([1.0, -2.0, 0.5], np.float32), "w": np.array([0.5, 2.0, -1.0], np.float32)}


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path, **INPUTS)
    with af.Graph().as_default():
        ours = compat_run(SNIPPET, INPUTS)
    assert list(ours["names"]) == list(theirs["names"])
    for key in ("refused", "no_name"):
        assert list(ours[key]) == list(theirs[key]), key
    compare_groups([ours["values"]], theirs, ["values"], rtol=0)


def test_sharing_values_and_refusals_here():
    with af.Graph().as_default():
        outputs = compat_run(SNIPPET, INPUTS)
    x, w = INPUTS["x"], INPUTS["w"]
    expected = [x * w + 1, 2 * x * w + 1] + [x * w + 1] * 6 + [3 * x * w + 1]
    for value, want in zip(outputs["values"], expected):
        np.testing.assert_array_equal(value, want)
    names = list(outputs["names"])
    assert names[:9] == ["outer/scale/add:0", "outer/scale_1/add:0", "scale/add:0",
                         "scale_1/add:0", "scale_2/add:0", "now/add:0", "now_1/add:0",
                         "fixed/add:0", "scale_3/add:0"]  # (t2: variable scope scale_1)
    variables = [n for n in names[9:] if n.endswith(":0") and "/" in n]
    assert "scale/w:0" in variables and "scale_1/w:0" in variables  # t2 is its own template
    assert "now/v:0" in variables and "fixed/u:0" in variables
    assert names[-3:] == ["scale/", "now", "fixed/"]
    assert list(outputs["refused"]) == ["ValueError", "Trainable variable created when calling "
                                        "a template after the first time, perhaps you used "
                                        "tf.Variable when you meant tf.get_variable"]


def test_gradients_reach_the_shared_variable():
    with af.Graph().as_default():
        template = tf.make_template("lin", lambda x: x * tf.get_variable(
            "w", shape=[], initializer=tf.constant_initializer(3.0)))
        y = template(af.constant(2.0)) + template(af.constant(5.0))
        assert len(template.trainable_variables) == 1
        (w,) = template.trainable_variables
        grad = af.gradients(y, [w])[0]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run(grad) == 7.0
    with pytest.raises(NotImplementedError, match="make_template: custom_getter_"):
        tf.make_template("t", lambda: None, custom_getter_=lambda getter, *a, **k: None)
