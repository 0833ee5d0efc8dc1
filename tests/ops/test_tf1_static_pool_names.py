"""TF1's ``tf.is_tensor``, ``tf.get_static_value``, ``tf.get_local_variable``,
``tf.no_gradient``/``NotDifferentiable``/``NoGradient`` and the pool spellings
``tf.nn.max_pool2d``/``avg_pool2d``/``max_pool_v2``/``avg_pool_v2`` (porting.md listed them as
not provided): one program run here and under TF1 itself (names, static shapes, values,
gradients, refusals), and the pools' gradients against finite differences."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow.graph.registry import get_op_def
from gradcheck import check_gradients
from tf1_reference import compare_groups, compat_run, tf1_run

SNIPPET = """
p = tf.placeholder(tf.float32, [2, 3])
u = tf.placeholder(tf.float32, None)
c = tf.constant([[1, 2], [3, 4]])
var = tf.Variable([1.0, 2.0], name="var")
sp = tf.SparseTensor([[0, 0]], [1.0], [2, 2])
outputs["is_tensor"] = np.array([tf.is_tensor(v) for v in
                                 (p, c, var, sp, np.ones(2), [1.0], 3, None)])
static = [tf.get_static_value(v) for v in (
    c, tf.shape(p), tf.size(p), tf.rank(p), tf.rank(u), tf.cast(c, tf.float64),
    tf.stack([c, c]), tf.stack([c, c], axis=1), tf.concat([c, c * 1], 1), tf.concat([tf.shape(p), [7]], 0),
    tf.fill([2, 2], 5.0), tf.identity(c), tf.stop_gradient(tf.shape(p)))]
outputs["static"] = [s for s in static if s is not None]
outputs["static_none"] = np.array([tf.get_static_value(v) is None for v in (
    p, tf.shape(u), tf.size(u), tf.concat([c, c * 1], 1), var, tf.shape(p) + 1)])
outputs["static_py"] = np.array([tf.get_static_value(3), tf.get_static_value([1, 2])[1]])

loc = tf.get_local_variable("loc", [2], initializer=tf.constant_initializer(4.0))
with tf.variable_scope("s"):
    loc2 = tf.get_local_variable("loc2", [3], trainable=True, collections=["mine"])
outputs["locals"] = np.array([v.name for v in tf.local_variables()] +
                             [v.name for v in tf.get_collection("mine")] + ["|"] +
                             [v.name for v in tf.global_variables()] + ["|"] +
                             [v.name for v in tf.trainable_variables()])

x4 = tf.constant(inputs["x4"])
x3 = tf.constant(inputs["x3"])
pools = [tf.nn.max_pool2d(x4, 2, 2, "VALID"), tf.nn.avg_pool2d(x4, [2, 2], [1, 1], "SAME"),
         tf.nn.max_pool_v2(x4, [1, 3, 2, 1], 1, "SAME", name="mp"),
         tf.nn.avg_pool_v2(x4, 2, [1, 2, 1, 1], "VALID"),
         tf.nn.max_pool_v2(x3, 2, 1, "VALID"), tf.nn.avg_pool_v2(x3, [3], 2, "SAME"),
         tf.nn.avg_pool2d(input=x4, ksize=3, strides=2, padding="SAME", value=None),
         tf.nn.max_pool_v2(x4, 2, 1, "VALID")]
grads = [tf.gradients(tf.reduce_sum(tf.sin(y)), x)[0] for y, x in zip(pools, [x4] * 4 + [x3] * 2 + [x4] * 2)]
outputs["pool_names"] = np.array([y.name for y in pools])
outputs["pool_shapes"] = np.array([str(y.shape.as_list()) for y in pools])
refused = []
for build in (lambda: tf.nn.max_pool_v2(tf.ones([2, 3]), 2, 1, "VALID"),
              lambda: tf.nn.avg_pool_v2(tf.ones([1, 2, 2, 2, 2, 2]), 2, 1, "VALID"),
              lambda: tf.nn.max_pool_v2(u, 2, 1, "VALID"),
              lambda: tf.nn.max_pool2d(x4, [1, 2, 2], 1, "VALID"),
              lambda: tf.no_gradient(3), lambda: tf.NotDifferentiable("Add"),
              lambda: tf.NoGradient("Shape")):
    try:
        build()
        refused.append("none")
    except Exception as e:
        refused.append(type(e).__name__)
outputs["refused"] = np.array(refused)
with tf.Session() as sess:
    sess.run(tf.local_variables_initializer())
    outputs["loc"] = [sess.run(loc)]
    outputs["pools"] = sess.run(pools)
    outputs["grads"] = sess.run(grads)
"""

RNG = np.random.default_rng(5)
INPUTS = {"x4": RNG.standard_normal((2, 5, 4, 3)), "x3": RNG.standard_normal((2, 7, 3))}


def _here():
    with af.Graph().as_default():
        return compat_run(SNIPPET, INPUTS)


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path, **INPUTS)
    ours = _here()
    for key in ("is_tensor", "static_none", "static_py", "locals", "pool_names", "pool_shapes",
                "refused"):
        assert list(ours[key]) == list(theirs[key]), key
    compare_groups([ours["static"], ours["loc"], ours["pools"], ours["grads"]], theirs,
                   ["static", "loc", "pools", "grads"], rtol=1e-14)


def test_values_here():
    out = _here()
    assert list(out["is_tensor"]) == [True] * 4 + [False] * 4
    assert [s.tolist() for s in out["static"][:4]] == [[[1, 2], [3, 4]], [2, 3], 6, 2]
    assert out["static"][5].tolist() == [[[1, 2], [3, 4]], [[1, 2], [3, 4]]]  # (axis 1: None)
    assert out["static"][-1].tolist() == [2, 3] and out["static"][-4].tolist() == [2, 3, 7]
    assert out["static_none"].all()
    assert list(out["locals"]) == ["loc:0", "s/loc2:0", "s/loc2:0", "|", "var:0", "|", "var:0"]
    np.testing.assert_array_equal(out["loc"][0], [4.0, 4.0])
    np.testing.assert_array_equal(out["pools"][0], INPUTS["x4"][:, :4].reshape(2, 2, 2, 2, 2, 3)
                                  .max(axis=(2, 4)))
    np.testing.assert_array_equal(out["pools"][4], np.maximum(INPUTS["x3"][:, :-1],
                                                              INPUTS["x3"][:, 1:]))
    assert list(out["refused"]) == ["ValueError", "ValueError", "ValueError", "ValueError",
                                    "TypeError", "KeyError", "KeyError"]


@pytest.mark.parametrize("pool", [
    lambda x: tf.nn.max_pool2d(x, 2, 1, "SAME"), lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID"),
    lambda x: tf.nn.max_pool_v2(x, 3, 2, "SAME"), lambda x: tf.nn.avg_pool_v2(x, 2, 1, "SAME"),
], ids=["max_pool2d", "avg_pool2d", "max_pool_v2", "avg_pool_v2"])
async def test_pool_gradients(pool):
    await check_gradients(pool, [RNG.standard_normal((1, 4, 5, 2))])


async def test_pool_v2_1d_gradient_and_3d_refused():
    await check_gradients(lambda x: tf.nn.avg_pool_v2(x, 2, 1, "SAME"),
                          [RNG.standard_normal((2, 5, 2))])
    with af.Graph().as_default():
        with pytest.raises(NotImplementedError, match="max_pool_v2: a 5-D input's 3-D pool"):
            tf.nn.max_pool_v2(af.ones([1, 2, 2, 2, 1]), 2, 1, "VALID")


async def test_no_gradient_declares_an_op_type(monkeypatch):
    monkeypatch.setattr(get_op_def("TruncateMod"), "differentiable", True)  # restored after
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [3])
        with pytest.raises(LookupError, match="TruncateMod"):
            af.gradients(tf.truncatemod(x, 2.0), [x])
        tf.NotDifferentiable("TruncateMod")
        assert af.gradients(tf.truncatemod(x, 2.0), [x]) == [None]
        y = tf.truncatemod(x, 2.0) + x * 3.0
        grad = af.gradients(y, [x])[0]
        async with af.Session() as session:
            value = await session.run(grad, {x: [1.0, 2.5, -4.0]})
    np.testing.assert_array_equal(value, [3.0, 3.0, 3.0])
    with pytest.raises(KeyError, match="Registering two gradient with name 'TruncateMod'"):
        tf.no_gradient("TruncateMod")
    with pytest.raises(KeyError, match="'NoSuchOp' is not registered"):
        tf.NoGradient("NoSuchOp")
