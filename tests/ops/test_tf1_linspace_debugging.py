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
         (1.0, 5.0, 0), (0.0, np.inf, 3), (-3e38, 3e38, 4), (0.0, np.nan, 3)]
cases += [(tf.constant(1, dt), tf.constant(5, dt), 3)
          for dt in (tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.int64)]
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


def test_linspace_infinite_steps_and_small_integer_bounds():
    # TF1 puts start itself first: start + 0 * step was NaN for an infinite step (an overflowing
    # stop - start, an infinite or NaN bound); 8- and 16-bit integer bounds give float32, as
    # TF1's truediv of them (all integers gave float64)
    got = session_run([tf.linspace(0.0, np.inf, 3), tf.linspace(-3e38, 3e38, 4),
                       tf.linspace(0.0, np.nan, 3)])
    np.testing.assert_array_equal(got[0], [0.0, np.inf, np.inf])
    np.testing.assert_array_equal(got[1], np.array([-3e38, np.inf, np.inf, 3e38], np.float32))
    np.testing.assert_array_equal(got[2], [0.0, np.nan, np.nan])
    for dtype, want in ((tf.int8, tf.float32), (tf.uint8, tf.float32), (tf.int16, tf.float32),
                        (tf.uint16, tf.float32), (tf.int32, tf.float64), (tf.int64, tf.float64)):
        y = tf.linspace(tf.constant(1, dtype), tf.constant(5, dtype), 3)
        assert y.dtype is want, dtype
        np.testing.assert_array_equal(session_run(y), [1.0, 3.0, 5.0])


def test_linspace_as_tf1(tmp_path):
    ours = compat_run(LINSPACE, {})
    theirs = tf1_run(LINSPACE, tmp_path)
    for key in ("values", "fed"):
        for i, (got, want) in enumerate(zip(ours[key], theirs[key])):
            assert np.asarray(got).dtype == np.asarray(want).dtype, f"{key} {i}"
            np.testing.assert_array_equal(got, want, err_msg=f"{key} {i}")
    assert ours["dtypes"].tolist() == theirs["dtypes"].tolist()
    assert ours["shapes"].tolist() == theirs["shapes"].tolist()


DEBUGGING = """
names = ["Assert", "assert_all_finite", "assert_equal", "assert_greater", "assert_greater_equal",
         "assert_integer", "assert_less", "assert_less_equal", "assert_near", "assert_negative",
         "assert_non_negative", "assert_non_positive", "assert_none_equal", "assert_positive",
         "assert_proper_iterable", "assert_rank", "assert_rank_at_least", "assert_rank_in",
         "assert_same_float_dtype", "assert_scalar", "assert_type", "check_numerics",
         "is_finite", "is_inf", "is_nan", "is_non_decreasing", "is_numeric_tensor",
         "is_strictly_increasing"]
outputs["present"] = np.array([hasattr(tf.debugging, n) for n in names])
d = tf.debugging
checks = [d.is_non_decreasing([1, 1, 2]), d.is_strictly_increasing([1, 1, 2]),
          d.is_non_decreasing(tf.constant([], tf.float32)), d.is_strictly_increasing([[1, 2], [3, 4]]),
          d.is_non_decreasing(5), d.is_strictly_increasing([3.0]), d.is_non_decreasing([2.0, 1.0])]
p = tf.placeholder(tf.float32)
runs = [d.assert_near(tf.constant([1.0, 2.0]), tf.constant([1.0, 2.0001])),
        d.assert_near(tf.constant([1.0, 2.0]), [1.0, 2.0000001]),
        d.assert_near(tf.constant([1.0, 2.0]), [1.0, 2.1], rtol=0.1),
        d.assert_near(tf.constant([1.0, 2.0]), [1.0, 2.1], atol=0.05),
        d.assert_rank_in(p, [0, 2]), d.assert_all_finite(tf.constant([1.0, np.nan]), "bad"),
        d.assert_all_finite(tf.constant([1.0, 2.0]), "fine")]
failed = []
with tf.Session() as sess:
    outputs["checks"] = np.array(sess.run(checks))
    for r in runs:
        try:
            sess.run(r, {p: np.ones([3], np.float32)})
            failed.append(0)
        except tf.errors.InvalidArgumentError:
            failed.append(1)
outputs["failed"] = np.array(failed)
refused = []
for attempt in [lambda: d.assert_rank_in(tf.constant([1.0]), [0, 2]),
                lambda: d.assert_rank_in(tf.constant([1.0]), [1, 2]),
                lambda: d.assert_same_float_dtype([tf.constant(1.0), tf.constant(2.0, tf.float64)]),
                lambda: d.assert_same_float_dtype([tf.constant(1)]),
                lambda: d.assert_proper_iterable("abc"), lambda: d.assert_proper_iterable([1]),
                lambda: d.assert_proper_iterable(np.ones(2)),
                lambda: d.is_non_decreasing(tf.constant(["a", "b"]))]:
    try:
        attempt()
        refused.append("")
    except (TypeError, ValueError) as e:
        refused.append(type(e).__name__)
outputs["refused"] = np.array(refused)
outputs["dtypes"] = np.array([
    d.assert_same_float_dtype([tf.constant(1.0), tf.constant(2.0)]).name,
    d.assert_same_float_dtype(None, tf.float64).name, d.assert_same_float_dtype([]).name])
outputs["numeric"] = np.array([d.is_numeric_tensor(tf.constant(1)),
                               d.is_numeric_tensor(tf.constant("a")),
                               d.is_numeric_tensor(tf.constant(True)), d.is_numeric_tensor(3)])
"""


def test_debugging_namespace_holds_the_top_level_checks():
    for name in tf.debugging.__all__:
        top = getattr(tf, "verify_tensor_all_finite" if name == "assert_all_finite" else name)
        assert getattr(tf.debugging, name) is top, name


def test_debugging_checks():
    x = tf.placeholder(tf.float32)
    near = tf.debugging.assert_near(x, [1.0, 2.0], atol=0.5)
    session_run(near, {x: [1.2, 2.4]})
    with pytest.raises(af.errors.InvalidArgumentError, match="not equal to tolerance"):
        session_run(near, {x: [1.2, 2.6]})
    checked = tf.debugging.assert_all_finite(x, "bad input")
    np.testing.assert_array_equal(session_run(checked, {x: [1.0]}), [1.0])
    with pytest.raises(af.errors.InvalidArgumentError, match="bad input"):
        session_run(checked, {x: [np.inf]})
    assert session_run(tf.is_non_decreasing(x), {x: [[1, 2], [2, 3]]})
    assert not session_run(tf.is_strictly_increasing(x), {x: [[1, 2], [2, 3]]})
    with pytest.raises(ValueError, match=r"must have rank in \(0, 2\).  Received rank 1"):
        tf.assert_rank_in(tf.constant([1.0]), [0, 2])
    with pytest.raises(af.errors.InvalidArgumentError, match="must have rank in"):
        session_run(tf.assert_rank_in(x, [0, 2]), {x: [1.0]})


def test_debugging_checks_edges():
    # TF1 skips None among assert_same_float_dtype's tensors (an absent optional argument)
    # and names a dtype argument once; is_numeric_tensor is false for a Variable (no Tensor
    # in TF1 either); assert_rank_in of no ranks fails when it runs, as TF1's
    x = tf.constant([1.0])
    assert tf.assert_same_float_dtype([None, x, None]) is tf.float32
    with pytest.raises(ValueError) as raised:
        tf.assert_same_float_dtype([x], tf.float64)
    assert str(raised.value) == f"{x.name}, type=float32, must be of the same type (float64)."
    assert not tf.is_numeric_tensor(tf.Variable(1.0)) and tf.is_numeric_tensor(x)
    p = tf.placeholder(tf.float32)
    with pytest.raises(af.errors.InvalidArgumentError, match="must have rank in"):
        session_run(tf.assert_rank_in(p, []), {p: 1.0})


def test_debugging_as_tf1(tmp_path):
    ours = compat_run(DEBUGGING, {})
    theirs = tf1_run(DEBUGGING, tmp_path)
    assert ours["present"].all()
    for key in ("present", "checks", "failed", "refused", "dtypes", "numeric"):
        assert ours[key].tolist() == theirs[key].tolist(), key
