"""The learning-rate schedules' output tensors are named as TF1's (2.21's ``tf.compat.v1`` with
v2 behaviour off),
so a script that fetches or looks up the rate by name finds it: the schedule's scope itself
(``ExponentialDecay:0``, ``lr:0`` with ``name="lr"``, uniquified as a scope), except
``cosine_decay``'s ``CosineDecay/Mul_3:0`` and ``piecewise_constant``'s
``PiecewiseConstant/case/cond/Merge:0`` (TF1's ``tf.case``, whose names ``tf.case`` now
has too: ``case/cond/Merge:0``); ``natural_exp_decay`` is TF1's
``exponential_decay`` of ``exp(-decay_rate)`` and named as it. asyncflow named them all
``<scope>/learning_rate:0`` (``NaturalExpDecay/NaturalExpDecay/learning_rate:0``,
``PiecewiseConstant/Select_1:0``)."""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)

SCHEDULES = {
    "exponential_decay": (lambda step, **kw: tf.train.exponential_decay(0.1, step, 10, 0.9, **kw),
                          "ExponentialDecay"),
    "inverse_time_decay": (lambda step, **kw: tf.train.inverse_time_decay(0.1, step, 10, 0.5,
                                                                          **kw),
                           "InverseTimeDecay"),
    "natural_exp_decay": (lambda step, **kw: tf.train.natural_exp_decay(0.1, step, 10, 0.5, **kw),
                          "ExponentialDecay"),
    "polynomial_decay": (lambda step, **kw: tf.train.polynomial_decay(0.1, step, 10, cycle=True,
                                                                      **kw),
                         "PolynomialDecay"),
    "cosine_decay_restarts": (lambda step, **kw: tf.train.cosine_decay_restarts(0.1, step, 10,
                                                                                **kw),
                              "SGDRDecay"),
    "linear_cosine_decay": (lambda step, **kw: tf.train.linear_cosine_decay(0.1, step, 10, **kw),
                            "LinearCosineDecay"),
    "noisy_linear_cosine_decay": (lambda step, **kw: tf.train.noisy_linear_cosine_decay(
        0.1, step, 10, initial_variance=0.0, **kw), "NoisyLinearCosineDecay"),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_a_schedule_is_named_as_its_scope_as_tf1(schedule):
    build, scope = SCHEDULES[schedule]
    step = tf.placeholder(tf.int64, [])
    first, second = build(step), build(step)
    assert (first.name, second.name) == (f"{scope}:0", f"{scope}_1:0")
    assert build(step, name="lr").name == "lr:0"
    with tf.name_scope("outer"):
        assert build(step).name == f"outer/{scope}:0"
    values = session_run([first, second], {step: 3})
    assert values[0] == values[1] and 0 < values[0] < 0.1


def test_cosine_decay_and_piecewise_constant_are_named_as_tf1():
    step = tf.placeholder(tf.int64, [])
    cosine = tf.train.cosine_decay(0.1, step, 10)
    assert [cosine.name, tf.train.cosine_decay(0.1, step, 10, name="cd").name] == [
        "CosineDecay/Mul_3:0", "cd/Mul_3:0"]
    pieces = tf.train.piecewise_constant(step, [5, 10], [0.1, 0.05, 0.01])
    assert pieces.name == "PiecewiseConstant/case/cond/Merge:0"
    assert tf.train.piecewise_constant_decay(step, [5], [1, 2], name="pw").name == \
        "pw/case/cond/Merge:0"
    values = [session_run([cosine, pieces], {step: at}) for at in (0, 5, 6, 11)]
    assert tf.case([(step < 3, lambda: step), (step < 5, lambda: 2 * step)],
                   default=lambda: step).name == "case/cond/Merge:0"
    np.testing.assert_allclose([v[1] for v in values], [0.1, 0.1, 0.05, 0.01])
    np.testing.assert_allclose(values[0][0], 0.1)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_piecewise_constant_of_a_nan_step_is_the_first_value_as_tf1(dtype):
    # TF1's tf.case takes exclusive predicates (x <= b0, b0 < x <= b1, ..., x > b_last) and
    # the default values[0]: a NaN passes none of them, so TF1 gives 10.0 (checked on 2.21's
    # tf.compat.v1); the first-bound-not-passed chain gave the last value, 30.0.
    x = tf.placeholder(dtype, [])
    rate = tf.train.piecewise_constant(x, [1.0, 2.0], [10.0, 20.0, 30.0])
    got = [session_run(rate, {x: at}) for at in (np.nan, -np.inf, 1.0, 1.5, 2.0, np.inf)]
    np.testing.assert_array_equal(got, [10.0, 10.0, 10.0, 20.0, 20.0, 30.0])


def test_piecewise_constant_picks_without_control_flow():
    # The rate is read every training step: each cond of a tf.case costs this executor's
    # Switch/Merge machinery on every run (about 20x a Select chain's cost per run, measured
    # with 2 and 10 boundaries), so the picks are Selects, the last one named as TF1's case.
    step = tf.placeholder(tf.int64, [])
    rate = tf.train.piecewise_constant(step, [5, 10, 20], [0.1, 0.05, 0.01, 0.001])
    assert rate.name == "PiecewiseConstant/case/cond/Merge:0"
    kinds = {op.type for op in tf.get_default_graph().get_operations()}
    assert not kinds & {"Switch", "Merge", "Enter", "Exit"}, kinds
    got = [session_run(rate, {step: at}) for at in (0, 5, 6, 10, 11, 20, 21)]
    np.testing.assert_allclose(got, [0.1, 0.1, 0.05, 0.05, 0.01, 0.01, 0.001])
    with pytest.raises(ValueError, match="piecewise_constant.*scalar"):
        tf.train.piecewise_constant(tf.constant([1.0, 3.0]), [2.0], [5.0, 6.0])


def test_piecewise_constant_of_boundaries_out_of_order_fails_where_tf1s_case_does():
    # TF1's tf.case(exclusive=True) fails the run when x passes two of its predicates, which
    # boundaries out of order allow ([5, 2]: x <= 5 and x > 2 for x = 3); the Selects answered
    # 3.0. Increasing constant boundaries (the usual) add no check to the graph.
    from asyncflow import errors
    x = tf.placeholder(tf.float32, [])
    rate = tf.train.piecewise_constant(x, [5.0, 2.0], [1.0, 2.0, 3.0])
    assert rate.name == "PiecewiseConstant/case/cond/Merge:0"
    assert [session_run(rate, {x: at}) for at in (1.0, 6.0)] == [1.0, 3.0]
    with pytest.raises(errors.InvalidArgumentError, match="more than 1 conditions"):
        session_run(rate, {x: 3.0})
    bound = tf.placeholder(tf.float32, [])
    fed = tf.train.piecewise_constant(x, [5.0, bound], [1.0, 2.0, 3.0], name="fed")
    assert session_run(fed, {x: 6.0, bound: 7.0}) == 2.0
    with pytest.raises(errors.InvalidArgumentError, match="more than 1 conditions"):
        session_run(fed, {x: 3.0, bound: 2.0})
    sorted_ = tf.train.piecewise_constant(x, [2.0, 2.0, 5.0], [1.0, 2.0, 3.0, 4.0], name="ok")
    assert "CaseExclusive" not in {op.type for op in sorted_.graph.get_operations()
                                   if op.name.startswith("ok/")}
