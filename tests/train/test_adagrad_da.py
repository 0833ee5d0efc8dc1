"""``AdagradDAOptimizer`` (TF1's Adagrad dual averaging) against its rule worked out by hand:
after ``T`` steps of a constant gradient ``c`` the accumulators hold ``T c`` and ``k + T c^2``,
and the variable is ``-sign(T c) lr max(T |c| - T l1, 0) / (T l2 lr + sqrt(k + T c^2))``, where
the optimizer's step ``T`` is the global step plus one. TF1's values for random programs:
tests/train/test_tf1_optimizer_fuzz.py."""
import numpy as np
import pytest

import asyncflow as af

# Exact in float32, so the float32 hyperparameters TF1 builds from Python floats are these.
LR, L1, L2, K = 0.5, 0.25, 0.125, 0.75


def _expected(total, total_squared, step, l1=L1):
    """The rule on the accumulated gradient ``total`` and squares ``total_squared``."""
    shrunk = np.maximum(np.abs(total) - step * l1, 0.0) if l1 > 0 else np.abs(total)
    return -np.sign(total) * LR * shrunk / (step * L2 * LR + np.sqrt(K + total_squared))


async def _run(train, fetches, steps):
    async with af.Session() as sess:
        await sess.run(af.global_variables_initializer())
        for _ in range(steps):
            await sess.run(train)
        return await sess.run(fetches)


@pytest.mark.parametrize("l1", [0.0, L1])
async def test_dense_steps_follow_the_closed_form(l1):
    c = np.array([[2.0, -0.5, 0.1], [-3.0, 0.25, 0.0]])
    with af.Graph().as_default():
        var = af.Variable(np.ones([2, 3]), name="w")
        step = af.train.get_or_create_global_step()
        opt = af.train.AdagradDAOptimizer(LR, step, initial_gradient_squared_accumulator_value=K,
                                          l1_regularization_strength=l1,
                                          l2_regularization_strength=L2)
        train = opt.minimize(af.reduce_sum(var * c), global_step=step)
        fetches = [var, opt.get_slot(var, "gradient_accumulator"),
                   opt.get_slot(var, "gradient_squared_accumulator"), step]
        value, accum, squared, done = await _run(train, fetches, steps=3)
    # The third update ran with the global step at 2, plus one: T = 3.
    assert done == 3
    np.testing.assert_allclose(accum, 3 * c, rtol=1e-15)
    np.testing.assert_allclose(squared, K + 3 * c * c, rtol=1e-15)
    np.testing.assert_allclose(value, _expected(3 * c, 3 * c * c, step=3, l1=l1), rtol=1e-14)
    if l1:  # |c| <= l1 gives an exact zero: the sparsity the method is for
        assert (value[np.abs(c) <= l1] == 0).all()


async def test_without_a_step_increment_every_update_uses_step_one():
    c = np.array([1.5, -2.0], np.float32)
    with af.Graph().as_default():
        var = af.Variable(np.zeros([2], np.float32), name="w")
        step = af.train.get_or_create_global_step()
        opt = af.train.AdagradDAOptimizer(LR, step, initial_gradient_squared_accumulator_value=K,
                                          l1_regularization_strength=L1,
                                          l2_regularization_strength=L2)
        train = opt.minimize(af.reduce_sum(var * c))  # no global_step: it stays 0
        value = await _run(train, var, steps=2)
    np.testing.assert_allclose(value, _expected(2.0 * c, 2.0 * c * c, step=1), rtol=1e-6)


@pytest.mark.parametrize("rest", [[], [1], [3]], ids=["scalar_rows", "rows_of_1", "rows_of_3"])
async def test_sparse_updates_touch_the_gathered_rows_once_each(rest):
    # Rows of one element and rows of more take TF1's two sparse forms; both follow the rule.
    shape = [4] + rest
    c = np.linspace(-1.0, 1.5, int(np.prod(rest or [1]))).reshape(rest or [])
    with af.Graph().as_default():
        var = af.Variable(np.full(shape, 7.0), name="w")
        step = af.train.get_or_create_global_step()
        opt = af.train.AdagradDAOptimizer(LR, step, initial_gradient_squared_accumulator_value=K,
                                          l1_regularization_strength=L1,
                                          l2_regularization_strength=L2)
        rows = af.gather(var, [2, 0, 2])  # row 2 twice: its gradient is 2c a step
        grads_and_vars = opt.compute_gradients(af.reduce_sum(rows * c), var_list=[var])
        assert isinstance(grads_and_vars[0][0], af.IndexedSlices)
        train = opt.apply_gradients(grads_and_vars, global_step=step)
        fetches = [var, opt.get_slot(var, "gradient_accumulator"),
                   opt.get_slot(var, "gradient_squared_accumulator")]
        value, accum, squared = await _run(train, fetches, steps=2)
    np.testing.assert_allclose(value[0], _expected(2 * c, 2 * c * c, step=2), rtol=1e-14)
    np.testing.assert_allclose(value[2], _expected(4 * c, 8 * c * c, step=2), rtol=1e-14)
    np.testing.assert_array_equal(value[[1, 3]], np.full([2] + rest, 7.0))
    np.testing.assert_array_equal(accum[[1, 3]], 0.0)
    np.testing.assert_array_equal(squared[[1, 3]], K)
    np.testing.assert_allclose(accum[2], 4 * c, rtol=1e-15)


def test_slots_and_names_are_tf1s():
    with af.Graph().as_default():
        var = af.Variable(np.ones([2], np.float32), name="w")
        step = af.train.get_or_create_global_step()
        opt = af.train.AdagradDAOptimizer(0.1, step)
        opt.minimize(af.reduce_sum(var * var), global_step=step)
        assert opt.get_slot_names() == ["gradient_accumulator", "gradient_squared_accumulator"]
        assert opt.get_slot(var, "gradient_accumulator").op.name == "w/AdagradDA"
        assert opt.get_slot(var, "gradient_squared_accumulator").op.name == "w/AdagradDA_1"
        assert [v.op.name for v in opt.variables()] == ["w/AdagradDA", "w/AdagradDA_1"]


def test_bad_arguments_are_refused_with_a_reason():
    with af.Graph().as_default():
        step = af.train.get_or_create_global_step()
        with pytest.raises(ValueError, match="initial_gradient_squared_accumulator_value"):
            af.train.AdagradDAOptimizer(0.1, step, initial_gradient_squared_accumulator_value=0.0)
        with pytest.raises(ValueError, match="global_step must be an int64 tensor"):
            af.train.AdagradDAOptimizer(0.1, None)
        half = af.Variable(np.ones([2], np.float16), name="half")
        with pytest.raises(TypeError, match="no kernel for float16 variables"):
            af.train.AdagradDAOptimizer(0.1, step).minimize(af.reduce_sum(half * half))
        var = af.Variable(np.ones([2], np.float32), name="w")
        with pytest.raises(TypeError, match="global_step must be an int64 scalar, got int32"):
            af.train.AdagradDAOptimizer(0.1, af.constant(3)).minimize(af.reduce_sum(var * var))


async def test_an_index_out_of_range_changes_nothing():
    with af.Graph().as_default():
        var = af.Variable(np.ones([3, 2], np.float32), name="w")
        step = af.train.get_or_create_global_step()
        opt = af.train.AdagradDAOptimizer(0.1, step)
        opt.minimize(af.reduce_sum(var * var), global_step=step)  # creates the slots
        bad = af.IndexedSlices(af.constant(np.ones([2, 2], np.float32)), af.constant([1, 5]),
                               af.constant([3, 2]))
        train = opt.apply_gradients([(bad, var)])
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            with pytest.raises(af.errors.InvalidArgumentError, match="Index 5 at offset 1"):
                await sess.run(train)
            np.testing.assert_array_equal(await sess.run(var), np.ones([3, 2], np.float32))
