"""TF1's ``tf.assert_*`` family beyond ``assert_equal``/``assert_less(_equal)``: comparisons
and signs checked when the step runs (``InvalidArgumentError`` with TF1's wording), ranks and
types checked while building where they are known (as TF1), else when the step runs. The last
test runs them under TF1 and here (``run_fuzz``; skips without TensorFlow).
"""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (autouse fixture)
from test_tf1_array_fuzz import _compare, run_fuzz


def _checked(assertion, value):
    """``value`` fetched after ``assertion`` ran."""
    with tf.control_dependencies([assertion]):
        return tf.identity(value)


@pytest.mark.parametrize("build,good,bad,wording", [
    (tf.assert_positive, [1, 2], [1, 0], "x > 0"),
    (tf.assert_negative, [-1.0], [-1.0, 0.0], "x < 0"),
    (tf.assert_non_negative, [0, 3], [0, -3], "x >= 0"),
    (tf.assert_non_positive, [0.0, -1.0], [0.5], "x <= 0"),
])
def test_sign_asserts(build, good, bad, wording):
    x = tf.placeholder(tf.float32, [None])
    checked = _checked(build(x, message="custom"), x)
    np.testing.assert_array_equal(session_run(checked, {x: good}), good)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"custom.*Condition {wording} did not hold element-wise"):
        session_run(checked, {x: bad})


@pytest.mark.parametrize("build,symbol,good,bad", [
    (tf.assert_greater, ">", ([2, 3], [1, 2]), ([2, 3], [2, 2])),
    (tf.assert_greater_equal, ">=", ([2, 3], [2, 2]), ([1, 3], [2, 2])),
    (tf.assert_none_equal, "!=", ([2, 3], [1, 2]), ([2, 3], [1, 3])),
])
def test_comparison_asserts(build, symbol, good, bad):
    x, y = tf.placeholder(tf.int32, [2]), tf.placeholder(tf.int32, [2])
    checked = _checked(build(x, y), x)
    session_run(checked, {x: good[0], y: good[1]})
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"Condition x {symbol} y did not hold element-wise"):
        session_run(checked, {x: bad[0], y: bad[1]})


def test_rank_asserts_static_and_dynamic():
    known = tf.zeros([2, 3])
    assert tf.assert_rank(known, 2).type == "NoOp"
    assert tf.assert_rank_at_least(known, 1).type == "NoOp"
    with pytest.raises(ValueError, match="must have rank 3. Received rank 2"):
        tf.assert_rank(known, 3)
    with pytest.raises(ValueError, match="must have rank at least 3"):
        tf.assert_rank_at_least(known, 3)
    x = tf.placeholder(tf.float32, None)
    exact, at_least = _checked(tf.assert_rank(x, 2), x), _checked(tf.assert_rank_at_least(x, 2), x)
    session_run([exact, at_least], {x: np.zeros((1, 2))})
    session_run(at_least, {x: np.zeros((1, 2, 3))})
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank 2"):
        session_run(exact, {x: np.zeros((1, 2, 3))})
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank at least 2"):
        session_run(at_least, {x: np.zeros(3)})


def test_type_integer_and_scalar_asserts():
    x = tf.zeros([2], tf.int64)
    assert tf.assert_type(x, tf.int64).type == "NoOp"
    assert tf.assert_integer(x).type == "NoOp"
    with pytest.raises(TypeError, match="must be of type float32, got int64"):
        tf.assert_type(x, tf.float32)
    with pytest.raises(TypeError, match="Expected integer type .* float32"):
        tf.assert_integer(tf.zeros([1]))
    scalar = tf.constant(3.0)
    assert tf.assert_scalar(scalar) is scalar
    with pytest.raises(ValueError, match="Expected scalar shape"):
        tf.assert_scalar(x)


def test_failed_assert_prints_nan_and_inf_as_tf1():
    # TF1's SummarizeValue streams floats: "nan", "inf", "1e+20"; numpy's repr of a scalar
    # ("np.float32(nan)") is not TF1's wording and names numpy's types in the message
    x = tf.placeholder(tf.float32, [None])
    checked = _checked(tf.assert_less_equal(x, 3.0, summarize=5), x)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        session_run(checked, {x: [np.nan, np.inf, -np.inf, 1e20, 1.5]})
    assert "[nan inf -inf 1e+20 1.5]" in str(caught.value)
    assert "np." not in str(caught.value)


def test_asserts_agree_with_tf1(tmp_path):
    a = np.array([1.0, 2.0], np.float32)
    b = np.array([1.0, 0.0], np.float32)
    cases = []
    for name in ("positive", "negative", "non_negative", "non_positive"):
        for value in (a, b, -a):
            cases.append((f"tf.tuple([a], control_inputs=[tf.assert_{name}(a)])", {"a": value}))
    for name in ("greater", "greater_equal", "none_equal"):
        for y in (b, a):
            cases.append((f"tf.tuple([a], control_inputs=[tf.assert_{name}(a, b)])",
                          {"a": a, "b": y}))
    cases += [("tf.tuple([a], control_inputs=[tf.assert_rank(a, 1)])", {"a": a}),
              ("tf.tuple([a], control_inputs=[tf.assert_rank(a, 2)])", {"a": a}),
              ("tf.tuple([a], control_inputs=[tf.assert_rank_at_least(a, 1)])", {"a": a}),
              ("tf.tuple([a], control_inputs=[tf.assert_type(a, tf.float32)])", {"a": a}),
              ("tf.tuple([a], control_inputs=[tf.assert_type(a, tf.int32)])", {"a": a}),
              ("tf.tuple([a], control_inputs=[tf.assert_integer(a)])", {"a": a}),
              ("tf.assert_scalar(a)", {"a": a}), ("tf.assert_scalar(a)", {"a": a[0]})]
    run_fuzz(tmp_path, cases, _compare)
