"""TF1's ``tf.broadcast_to``, ``tf.meshgrid`` and ``tf.linspace``/``tf.lin_space``: values
against numpy, gradients against finite differences, refusals; and against TF1 (``run_fuzz``;
skips without TensorFlow: ``ASYNCFLOW_TF_PYTHON``).
"""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (autouse fixture)
from gradcheck import check_gradients
from test_tf1_array_fuzz import _compare, run_fuzz


def test_broadcast_to_values_dtypes_and_refusals():
    hidden = tf.placeholder(tf.int32, [None])
    got = session_run([tf.broadcast_to([1, 2], [3, 2]),
                       tf.broadcast_to(np.array([True, False]), [2, 2]),
                       tf.broadcast_to(np.float64(2.5), [2]),
                       tf.broadcast_to(hidden, tf.constant([2, 3]))], {hidden: [7, 8, 9]})
    np.testing.assert_array_equal(got[0], np.broadcast_to([1, 2], (3, 2)))
    np.testing.assert_array_equal(got[1], [[True, False], [True, False]])
    assert got[2].dtype == np.float64 and got[0].dtype == np.int32
    np.testing.assert_array_equal(got[3], [[7, 8, 9], [7, 8, 9]])
    with pytest.raises(ValueError):
        tf.broadcast_to(tf.zeros([3]), [2, 2])


async def test_broadcast_to_gradient():
    x = np.array([[1.0], [2.0], [-0.5]])
    await check_gradients(lambda t: af.broadcast_to(t, [2, 3, 4]), [x])


def test_meshgrid_xy_and_ij():
    x, y, z = np.arange(3), np.arange(4) * 10, np.arange(2) * 100
    xy = session_run(tf.meshgrid(x, y, z))
    ij = session_run(tf.meshgrid(x, y, z, indexing="ij"))
    for got, want in zip(xy + ij, np.meshgrid(x, y, z) + np.meshgrid(x, y, z, indexing="ij")):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="indexing must be 'xy' or 'ij'"):
        tf.meshgrid(x, y, indexing="yx")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sparse'"):
        tf.meshgrid(x, y, sparse=True)


def test_linspace_values_and_refusals():
    count = tf.placeholder(tf.int32, [])
    got = session_run([tf.linspace(0.0, 1.0, 5), tf.lin_space(np.float64(2), 3.0, 1),
                       tf.linspace(1.0, -1.0, count)], {count: 3})
    np.testing.assert_allclose(got[0], np.linspace(0, 1, 5), rtol=1e-7)
    np.testing.assert_array_equal(got[1], [2.0])
    assert got[1].dtype == np.float64
    np.testing.assert_array_equal(got[2], [1.0, 0.0, -1.0])
    # 2.21's tf.compat.v1 (linspace_nd): num 0 is empty, integer bounds give float64
    # (tests/ops/test_tf1_linspace_debugging.py checks them against TF1)
    assert session_run(tf.linspace(0.0, 1.0, 0)).shape == (0,)
    assert session_run(tf.linspace(0.0, 1.0, count), {count: 0}).shape == (0,)
    assert session_run(tf.linspace(0, 1, 3)).dtype == np.float64
    with pytest.raises(ValueError, match="linspace: num must be >= 0"):
        tf.linspace(0.0, 1.0, -1)
    with pytest.raises(TypeError, match="linspace: start must be a number"):
        tf.linspace("a", "b", 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Requires num >= 0"):
        session_run(tf.linspace(0.0, 1.0, count), {count: -1})


def test_grids_agree_with_tf1(tmp_path):
    rng = np.random.default_rng(3)
    cases = [("tf.broadcast_to(a, [2, 3, 4])", {"a": rng.standard_normal((3, 1))}),
             ("tf.broadcast_to(a, [3])", {"a": np.array([True])}),
             ("tf.broadcast_to(a, [2, 2])", {"a": np.zeros(3, np.float32)}),
             ("tf.gradients(tf.broadcast_to(a, [2, 3]) * b, a)",
              {"a": np.ones((1, 3), np.float32), "b": rng.standard_normal((2, 3)).astype("f")}),
             ("tf.meshgrid(a, b)", {"a": np.arange(3), "b": np.arange(2.0)[::-1].astype("i")}),
             ("tf.meshgrid(a, b, indexing='ij')", {"a": np.arange(3.0), "b": np.arange(4.0)}),
             ("tf.meshgrid(a, b, a)", {"a": np.arange(2.0), "b": np.arange(3.0)}),
             ("tf.linspace(a, b, 7)", {"a": np.float32(-1.5), "b": np.float32(2.25)}),
             ("tf.lin_space(a, b, 1)", {"a": np.float64(0.5), "b": np.float64(4.0)}),
             ("tf.linspace(a, b, 4)", {"a": np.float64(3.0), "b": np.float64(-3.0)})]
    run_fuzz(tmp_path, cases, _compare)
