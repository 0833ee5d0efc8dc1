"""Regressions from the differential optimizer fuzz (tests/train/test_tf1_optimizer_fuzz.py),
each with TF1's answer written out so that no TensorFlow is needed: hyperparameters given as
Python floats are float32 values cast to the variable's dtype, Adam's beta powers are float32
variables, centered RMSProp names its slots in TF1's order, and ``variables()`` is sorted."""
import numpy as np
import pytest

import asyncflow as af


async def _steps(train, fetches, count=1):
    async with af.Session() as sess:
        await sess.run(af.global_variables_initializer())
        for _ in range(count):
            await sess.run(train)
        return await sess.run(fetches)


async def test_a_float_learning_rate_is_float32s_value_on_a_float64_variable():
    # TF1: convert_to_tensor(0.1) is float32 0.10000000149..., then cast to float64.
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, -2.0]), name="w")
        train = af.train.GradientDescentOptimizer(0.1).minimize(af.reduce_sum(var))
        value = await _steps(train, var)
    np.testing.assert_array_equal(value, np.array([1.0, -2.0]) - np.float64(np.float32(0.1)))
    assert value[0] != 1.0 - 0.1


@pytest.mark.parametrize("dtype", [af.float64, af.float16])
async def test_adam_beta_powers_are_float32_variables(dtype):
    with af.Graph().as_default():
        var = af.Variable(np.ones([3], dtype.np), name="w")
        opt = af.train.AdamOptimizer(0.1, beta1=0.9, beta2=0.999)
        train = opt.minimize(af.reduce_sum(var * var))
        beta1_power, beta2_power = opt._get_beta_accumulators(var.graph)
        assert beta1_power.dtype.base_dtype is af.float32
        assert beta2_power.dtype.base_dtype is af.float32
        b1, b2, value = await _steps(train, [beta1_power, beta2_power, var], count=2)
    # Advanced in float32: 0.9f * 0.9f * 0.9f (the initial value, then two steps).
    assert b1 == np.float32(0.9) * np.float32(0.9) * np.float32(0.9)
    assert b2 == np.float32(0.999) * np.float32(0.999) * np.float32(0.999)
    assert value.dtype == dtype.np


async def test_centered_rmsprop_names_its_slots_in_tf1s_order():
    # TF1 creates rms, then mg, then momentum: <var>/RMSProp, _1, _2.
    with af.Graph().as_default():
        var = af.Variable(np.ones([2], np.float32), name="w")
        opt = af.train.RMSPropOptimizer(0.1, centered=True)
        opt.minimize(af.reduce_sum(var * var))
        names = {slot: opt.get_slot(var, slot).op.name for slot in opt.get_slot_names()}
    assert names == {"rms": "w/RMSProp", "mg": "w/RMSProp_1", "momentum": "w/RMSProp_2"}


def test_optimizer_variables_are_sorted_by_name():
    with af.Graph().as_default():
        w = af.Variable(np.ones([2], np.float32), name="w")
        b = af.Variable(np.ones([2], np.float32), name="b")
        opt = af.train.AdamOptimizer(0.1)
        opt.minimize(af.reduce_sum(w * w) + af.reduce_sum(b * b))
        names = [v.op.name for v in opt.variables()]
    assert names == ["b/Adam", "b/Adam_1", "beta1_power", "beta2_power", "w/Adam", "w/Adam_1"]


async def test_an_integer_trainable_variable_does_not_stop_minimize():
    # TF1 checks the dtypes of the variables that get a gradient only: a trainable int
    # counter (``tf.Variable(0)``) is paired with None.
    with af.Graph().as_default():
        counter = af.Variable(0, name="counter")
        var = af.Variable(np.array([1.0, 2.0], np.float32), name="w")
        opt = af.train.GradientDescentOptimizer(0.5)
        pairs = opt.compute_gradients(af.reduce_sum(var * var))
        assert [(g is None, v.op.name) for g, v in pairs] == [(True, "counter"), (False, "w")]
        value = await _steps(opt.minimize(af.reduce_sum(var * var)), var)
    np.testing.assert_array_equal(value, np.array([0.0, 0.0], np.float32))


def test_compute_gradients_refuses_an_integer_loss_and_a_bad_gate():
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, 2.0], np.float32), name="w")
        opt = af.train.GradientDescentOptimizer(0.5)
        with pytest.raises(ValueError, match="int32"):
            opt.compute_gradients(af.cast(af.reduce_sum(var), af.int32))
        with pytest.raises(ValueError, match="gate_gradients must be one of"):
            opt.compute_gradients(af.reduce_sum(var), gate_gradients=7)


async def test_apply_gradients_converts_a_list_and_refuses_another_dtype():
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, 2.0], np.float32), name="w")
        opt = af.train.GradientDescentOptimizer(0.5)
        with pytest.raises(ValueError, match="No variables provided"):
            opt.apply_gradients([])
        with pytest.raises(TypeError, match="float64"):
            opt.apply_gradients([(af.constant(np.ones(2)), var)])
        value = await _steps(opt.apply_gradients([([1.0, -1.0], var)]), var)
    np.testing.assert_array_equal(value, np.array([0.5, 2.5], np.float32))


async def test_tf1s_gradient_keywords_are_accepted_in_their_positions():
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, 2.0], np.float32), name="w")
        loss = af.reduce_sum(var * var)
        opt = af.train.GradientDescentOptimizer(0.25)
        # minimize(loss, global_step, var_list, gate, aggregation_method, colocate, name)
        train = opt.minimize(loss, None, [var], opt.GATE_OP,
                             af.AggregationMethod.EXPERIMENTAL_TREE, True, "train")
        assert train.name == "train"
        (grad, _), = opt.compute_gradients(loss, aggregation_method=af.AggregationMethod.ADD_N,
                                           colocate_gradients_with_ops=True)
        (same,) = af.gradients(loss, [var], None, "g", True, True,
                               af.AggregationMethod.EXPERIMENTAL_ACCUMULATE_N)
        with pytest.raises(ValueError, match="aggregation_method"):
            af.gradients(loss, [var], aggregation_method=7)
        values = await _steps(train, [var, grad, same])
    np.testing.assert_array_equal(values[0], np.array([0.5, 1.0], np.float32))
    np.testing.assert_array_equal(values[1], values[2])


def test_adam_beta_powers_take_the_callers_name_scope():
    # TF1 creates non-slot variables in the current name scope; slots keep their variable's.
    with af.Graph().as_default():
        with af.variable_scope("outer"):
            var = af.Variable(np.ones([2], np.float32), name="v")
        opt = af.train.AdamOptimizer()
        with af.name_scope("train"):
            opt.minimize(af.reduce_sum(var * var))
        names = sorted(v.op.name for v in af.global_variables())
        assert [v.op.name for v in opt._get_beta_accumulators()] == [
            "train/beta1_power", "train/beta2_power"]
    assert names == ["outer/v", "outer/v/Adam", "outer/v/Adam_1", "train/beta1_power",
                     "train/beta2_power"]


async def test_ftrl_beta_adds_beta_over_twice_the_rate_to_l2():
    # TF1's values for these two steps (FtrlOptimizer(0.1, l2=0.1, beta=0.3), loss sum(v^2)).
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, -2.0, 0.5], np.float32), name="v")
        train = af.train.FtrlOptimizer(0.1, l2_regularization_strength=0.1, beta=0.3).minimize(
            af.reduce_sum(var * var))
        value = await _steps(train, var, count=2)
    np.testing.assert_allclose(value, [0.5960536003112793, -1.5549579858779907,
                                       0.16749678552150726], rtol=1e-6)


async def test_decay_arguments_given_as_python_floats_are_float32_values():
    # TF1 casts a Python float to the rate's dtype through float32 (math_ops.cast of a
    # number): with a float64 rate, decay_steps=7.354 is 7.35400009155...
    with af.Graph().as_default():
        step = af.constant(8, af.int64)
        rate = af.constant(0.532, af.float64)
        decayed = af.train.inverse_time_decay(rate, step, 7.354, 0.111, staircase=True)
        polynomial = af.train.polynomial_decay(rate, step, 12, end_learning_rate=0.01, power=3.0)
        async with af.Session() as sess:
            values = await sess.run([decayed, polynomial])
    steps, decay, end = (np.float64(np.float32(v)) for v in (7.354, 0.111, 0.01))
    assert values[0] == 0.532 / (1 + decay * np.floor(8 / steps))
    np.testing.assert_allclose(values[1], (0.532 - end) * (1 - 8 / 12) ** 3 + end, rtol=1e-15)
    assert values[0] == 0.4788478841719196  # TF1's value


# TF1's values after a dense step, a sparse step (rows 2, 0, 2 of a gather) and a dense step.
NEW_OPTIMIZERS = {
    "adadelta": (lambda: af.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-3),
                 [[0.7182611227035522, -1.8474215269088745],
                  [0.30978167057037354, 0.014536134898662567],
                  [2.7301313877105713, -0.125514954328537]],
                 ["accum", "accum_update"], ["v", "v/Adadelta", "v/Adadelta_1"]),
    "proximal_gd": (lambda: af.train.ProximalGradientDescentOptimizer(
                        0.2, l1_regularization_strength=0.1, l2_regularization_strength=0.2),
                    [[0.11262519657611847, -0.7655043005943298], [0.13609468936920166, 0.0],
                     [0.5862825512886047, -0.32385075092315674]], [], ["v"]),
    "proximal_adagrad": (lambda: af.train.ProximalAdagradOptimizer(
                             0.5, initial_accumulator_value=0.1, l1_regularization_strength=0.1,
                             l2_regularization_strength=0.2),
                         [[0.06019072234630585, -1.249800443649292], [0.0, 0.0],
                          [1.8854371309280396, -0.2746429741382599]],
                         ["accumulator"], ["v", "v/ProximalAdagrad"]),
}


@pytest.mark.parametrize("which", sorted(NEW_OPTIMIZERS))
async def test_adadelta_and_the_proximal_optimizers_give_tf1s_values(which):
    make, expected, slot_names, variables = NEW_OPTIMIZERS[which]
    with af.Graph().as_default():
        var = af.Variable(np.array([[1.0, -2.0], [0.5, 0.05], [3.0, -0.1]], np.float32), name="v")
        opt = make()
        dense = opt.minimize(af.reduce_sum(var * var))
        sparse = opt.minimize(af.reduce_sum(af.gather(var, [2, 0, 2]) * np.float32(1.5)))
        assert opt.get_slot_names() == slot_names
        assert sorted(v.op.name for v in af.global_variables()) == variables
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            for op in (dense, sparse, dense):
                await sess.run(op)
            value = await sess.run(var)
    np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)


# TF1's values at steps 0, 1, 2, 3, 4, 5, 6, 9, 11, 12, 14 and 30.
DECAY_STEPS = [0, 1, 2, 3, 4, 5, 6, 9, 11, 12, 14, 30]
NEW_SCHEDULES = {
    "natural_exp": (lambda step: af.train.natural_exp_decay(0.5, step, 3, 0.4, staircase=True),
                    [0.5, 0.5, 0.5, 0.3351600170135498, 0.3351600170135498, 0.3351600170135498,
                     0.22466447949409485, 0.15059709548950195, 0.15059709548950195,
                     0.10094825178384781, 0.10094825178384781, 0.00915781781077385]),
    "linear_cosine": (lambda step: af.train.linear_cosine_decay(
                          0.5, step, 10, num_periods=1.0, alpha=0.1, beta=0.01),
                      [0.5550000071525574, 0.45725423097610474, 0.2995288074016571,
                       0.14319658279418945, 0.03842201456427574, 0.004999999888241291,
                       0.028872881084680557, 0.09545086324214935, 0.054999999701976776,
                       0.054999999701976776, 0.054999999701976776, 0.054999999701976776]),
    "restarts": (lambda step: af.train.cosine_decay_restarts(
                     0.5, step, 4, t_mul=2.0, m_mul=0.5, alpha=0.1),
                 [0.5, 0.4340990483760834, 0.2749999761581421, 0.11590097844600677,
                  0.2750000059604645, 0.26643645763397217, 0.24204951524734497,
                  0.11944811046123505, 0.05856354162096977, 0.16249999403953552,
                  0.15821821987628937, 0.10570958256721497]),
    "restarts_flat": (lambda step: af.train.cosine_decay_restarts(0.5, step, 4, t_mul=1.0,
                                                                  m_mul=0.5),
                      [0.5, 0.4267767071723938, 0.2499999850988388, 0.0732233077287674, 0.25,
                       0.2133883535861969, 0.1249999925494194, 0.10669417679309845,
                       0.01830582693219185, 0.0625, 0.03124999813735485,
                       0.0019531248835846782]),
    "piecewise_constant_decay": (lambda step: af.train.piecewise_constant_decay(
                                     step, [2, 5], [1.0, 0.5, 0.1]),
                                 [1.0, 1.0, 1.0, 0.5, 0.5, 0.5] + [np.float32(0.1)] * 6),
}


@pytest.mark.parametrize("which", sorted(NEW_SCHEDULES))
async def test_natural_exp_linear_cosine_and_restart_schedules_give_tf1s_values(which):
    make, expected = NEW_SCHEDULES[which]
    with af.Graph().as_default():
        step = af.placeholder(af.int64, [])
        rate = make(step)
        async with af.Session() as sess:
            values = [await sess.run(rate, {step: s}) for s in DECAY_STEPS]
    assert all(np.asarray(v).dtype == np.float32 for v in values)
    np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("hypers, message", [
    (dict(learning_rate=-0.1), "lr is not a positive scalar"),
    (dict(learning_rate=0.0), "lr is not a positive scalar"),
    (dict(learning_rate=float("nan")), "lr is not a positive scalar"),
    (dict(learning_rate=0.1, l1_regularization_strength=-0.1),
     "l1 regularization strength is not a non-negative scalar"),
    (dict(learning_rate=0.1, l2_regularization_strength=-0.1),
     "l2 regularization strength is not a non-negative scalar"),
])
async def test_proximal_adagrad_refuses_tf1s_invalid_hyperparameters(hypers, message, sparse):
    # TF1's (Sparse)ApplyProximalAdagrad fail the step (InvalidArgumentError) and change
    # nothing; proximal gradient descent and Adadelta check no value, in TF1 as here.
    start = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    with af.Graph().as_default():
        var = af.Variable(start, name="v")
        opt = af.train.ProximalAdagradOptimizer(**hypers)
        loss = af.reduce_sum(af.gather(var, [0, 1, 0]) * 1.5) if sparse \
            else af.reduce_sum(var * var)
        train = opt.minimize(loss)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            with pytest.raises(af.errors.InvalidArgumentError, match=message):
                await sess.run(train)
            value, accum = await sess.run([var, opt.get_slot(var, "accumulator")])
    np.testing.assert_array_equal(value, start)
    np.testing.assert_array_equal(accum, np.full([2, 2], 0.1, np.float32))


async def test_a_python_int_hyperparameter_beyond_int32_is_int64s_value():
    # TF1 converts 3_000_000_000 to an int64 tensor (it does not fit int32), then casts it:
    # the step is -3e9, not the value that int32 wraps it to.
    with af.Graph().as_default():
        var = af.Variable(np.array([0.0]), name="w")
        train = af.train.GradientDescentOptimizer(3_000_000_000).minimize(af.reduce_sum(var))
        value = await _steps(train, var)
    np.testing.assert_array_equal(value, [-3e9])


async def test_ftrl_takes_a_tensor_beta():
    # TF1 adds a tensor beta to l2 as a number (the values of the float beta test above).
    with af.Graph().as_default():
        var = af.Variable(np.array([1.0, -2.0, 0.5], np.float32), name="v")
        train = af.train.FtrlOptimizer(0.1, l2_regularization_strength=0.1,
                                       beta=af.constant(0.3)).minimize(af.reduce_sum(var * var))
        value = await _steps(train, var, count=2)
    np.testing.assert_allclose(value, [0.5960536003112793, -1.5549579858779907,
                                       0.16749678552150726], rtol=1e-6)
