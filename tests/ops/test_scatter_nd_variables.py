"""``af.scatter_nd_update``/``scatter_nd_add``/``scatter_nd_sub`` (and the Variable methods),
which the variable-update fuzz against TF1 (tests/train/test_tf1_variable_update_fuzz.py)
found missing; the expected values are TF1's."""
import numpy as np
import pytest

import asyncflow as af


async def _run(fetches, runs=1):
    async with af.Session() as sess:
        await sess.run(af.global_variables_initializer())
        outs = [await sess.run(fetches) for _ in range(runs)]
    return outs


async def test_repeated_tuples_replace_with_the_last_or_add_up():
    with af.Graph().as_default():
        table = np.arange(12, dtype=np.float32).reshape(3, 4)
        indices = [[2, 1], [0, 3], [2, 1]]
        update = af.scatter_nd_update(af.Variable(table), indices, [10.0, 20.0, 30.0])
        add = af.scatter_nd_add(af.Variable(table), indices, [10.0, 20.0, 30.0])
        var = af.Variable(np.arange(6, dtype=np.int64).reshape(3, 2))
        sub = var.scatter_nd_sub([[1], [1]], [[1, 2], [3, 4]])
        outs = await _run([update, add, sub], runs=2)
    expected_update = table.copy()
    expected_update[2, 1], expected_update[0, 3] = 30.0, 20.0
    expected_add = table.copy()
    for step in (1, 2):
        expected_add[2, 1] = table[2, 1] + 40.0 * step
        expected_add[0, 3] = table[0, 3] + 20.0 * step
        np.testing.assert_array_equal(outs[step - 1][0], expected_update)
        np.testing.assert_array_equal(outs[step - 1][1], expected_add)
        np.testing.assert_array_equal(outs[step - 1][2],
                                      [[0, 1], [2 - 4 * step, 3 - 6 * step], [4, 5]])


async def test_an_index_out_of_range_names_the_op_and_changes_nothing():
    with af.Graph().as_default():
        var = af.Variable(np.zeros([2, 2], np.float32), name="v")
        bad = af.scatter_nd_add(var, [[0, 0], [2, 0]], [1.0, 1.0], name="bad")
        async with af.Session() as sess:
            await sess.run(var.initializer)
            with pytest.raises(af.errors.InvalidArgumentError, match="bad"):
                await sess.run(bad)
            np.testing.assert_array_equal(await sess.run(var), np.zeros([2, 2], np.float32))


def test_dtype_and_shape_mismatches_are_refused_when_built():
    with af.Graph().as_default():
        var = af.Variable(np.zeros([2, 3], np.float32))
        with pytest.raises(TypeError, match="ScatterNdUpdate"):
            af.scatter_nd_update(var, [[0]], af.constant([[1, 2, 3]]))
        with pytest.raises(ValueError, match="ScatterNdAdd"):
            af.scatter_nd_add(var, [[0]], np.ones([1, 2], np.float32))
