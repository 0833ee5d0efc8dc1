"""``tf.linspace`` at its edges and the ``tf.debugging`` namespace, against TF1 (2.21's
``tf.compat.v1``, where ``linspace`` is ``linspace_nd``).

``linspace`` refused ``num == 0`` (TF1 1.15's LinSpace kernel did; 2.21 gives an empty
vector), computed the last value as ``start + (num - 1) * step`` (TF1 puts ``stop`` itself
there: ``linspace(1e-3, 1e3, 50)`` ended at 1000.00006) and refused integer bounds (float64
in TF1)."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from tf1_reference import compat_run, tf1_run

LINSPACE = """
cases = [(0.1, 0.7, 7), (1.0, 5.0, 1), (5.0, 1.0, 4), (-3.3, 9.7, 13), (0.0, 1.0, 10),
         (np.float64(0.1), 0.7, 7), (2.5, 2.5, 3), (1e-3, 1e3, 50), (1.0, 5.0, 2), (1, 5, 3),
         (1.0, 5.0, 0)]
ys = [tf.linspace(a, b, n) for a, b, n in cases]
n = tf.placeholder(tf.int32, [])
fed = tf.linspace(0.1, 0.7, n)
with tf.Session() as sess:
    outputs["values"] = sess.run(ys)
    outputs["fed"] = [sess.run(fed, {n: k}) for k in (0, 1, 2, 7)]
outputs["dtypes"] = np.array([y.dtype.name for y in ys])
outputs["shapes"] = np.array([str(y.shape) for y in ys + [fed]])
"""


def test_linspace_edges():
    n = tf.placeholder(tf.int32, [])
    y = tf.linspace(1.0, 5.0, n)
    assert y.shape.as_list() == [None]
    assert session_run(y, {n: 0}).shape == (0,)
    np.testing.assert_array_equal(session_run(y, {n: 1}), [1.0])
    np.testing.assert_array_equal(session_run(y, {n: 2}), [1.0, 5.0])
    assert session_run(tf.linspace(1e-3, 1e3, 50))[-1] == np.float32(1e3)
    assert session_run(tf.linspace(1, 5, 3)).dtype == np.float64
    with pytest.raises(af.errors.InvalidArgumentError, match="Requires num >= 0"):
        session_run(y, {n: -1})
    with pytest.raises(ValueError, match="num must be >= 0, got -1"):
        tf.linspace(1.0, 5.0, -1)
    with pytest.raises(TypeError, match="num must be an integer"):
        tf.linspace(1.0, 5.0, tf.constant(3.0))
    with pytest.raises(ValueError, match="start must be a scalar"):
        tf.linspace([1.0, 2.0], 5.0, 3)


def test_linspace_as_tf1(tmp_path):
    ours = compat_run(LINSPACE, {})
    theirs = tf1_run(LINSPACE, tmp_path)
    for key in ("values", "fed"):
        for i, (got, want) in enumerate(zip(ours[key], theirs[key])):
            assert np.asarray(got).dtype == np.asarray(want).dtype, f"{key} {i}"
            np.testing.assert_array_equal(got, want, err_msg=f"{key} {i}")
    assert ours["dtypes"].tolist() == theirs["dtypes"].tolist()
    assert ours["shapes"].tolist() == theirs["shapes"].tolist()
