"""Sources (constants, fills, ranges, random ops) and variable state ops."""
import numpy as np
import pytest

import asyncflow as af


async def run(fetch, feed=None, sess=None):
    async with af.Session() as sess:
        return await sess.run(fetch, feed)


async def test_constants_and_fills():
    with af.Graph().as_default():
        c = af.constant(7, shape=[2, 2])
        d = af.constant([1.5, 2.5], dtype=af.float64)
        z = af.zeros([2, 3], af.int32)
        o = af.ones([0, 2])
        f = af.fill([2], 9.0)
        zl = af.zeros_like(d)
        ol = af.ones_like(c, dtype=af.float32)
        e = af.constant(np.zeros((0,), np.float32))
        assert c.shape.as_list() == [2, 2] and z.shape.as_list() == [2, 3]
        out = await run([c, d, z, o, f, zl, ol, e])
    np.testing.assert_array_equal(out[0], np.full((2, 2), 7, np.int32))
    assert out[1].dtype == np.float64
    assert out[2].dtype == np.int32 and out[2].shape == (2, 3)
    assert out[3].shape == (0, 2) and out[3].dtype == np.float32
    np.testing.assert_array_equal(out[4], [9.0, 9.0])
    np.testing.assert_array_equal(out[5], [0.0, 0.0])
    assert out[6].dtype == np.float32
    assert out[7].shape == (0,)
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="does not fit"):
            af.constant([1, 2, 3], shape=[2, 2])
        with pytest.raises(TypeError, match="out of range"):
            af.constant(300, dtype=af.int8)


async def test_range():
    with af.Graph().as_default():
        r = [af.range(5), af.range(1, 10, 3), af.range(0.0, 1.0, 0.25), af.range(5, 0, -2)]
        assert r[0].shape.as_list() == [5]
        out = await run(r)
    np.testing.assert_array_equal(out[0], np.arange(5))
    assert out[0].dtype == np.int32
    np.testing.assert_array_equal(out[1], [1, 4, 7])
    np.testing.assert_allclose(out[2], [0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(out[3], [5, 3, 1])


async def test_placeholder_with_default():
    with af.Graph().as_default():
        p = af.placeholder_with_default([1.0, 2.0], shape=[None])
        y = p * 2.0
        async with af.Session() as sess:
            np.testing.assert_array_equal(await sess.run(y), [2.0, 4.0])
            np.testing.assert_array_equal(await sess.run(y, {p: [5.0]}), [10.0])


async def test_random_ops_follow_tf1_seeding():
    async def draw(graph_seed, op_seed, runs=2):
        with af.Graph().as_default():
            if graph_seed is not None:
                af.set_random_seed(graph_seed)
            t = af.random_normal([100], seed=op_seed)
            async with af.Session() as sess:
                return [await sess.run(t) for _ in range(runs)]

    first = await draw(1, 2)
    again = await draw(1, 2)
    np.testing.assert_array_equal(first[0], again[0])  # same seeds, same sequence
    assert not np.array_equal(first[0], first[1])      # each run draws anew
    other = await draw(1, 3)
    assert not np.array_equal(first[0], other[0])
    graph_only = await draw(5, None)
    np.testing.assert_array_equal(graph_only[0], (await draw(5, None))[0])


async def test_random_distributions():
    with af.Graph().as_default():
        af.set_random_seed(0)
        n = af.random_normal([20000], mean=3.0, stddev=2.0)
        u = af.random_uniform([20000], minval=-1.0, maxval=1.0)
        t = af.truncated_normal([20000], stddev=1.0)
        i = af.random_uniform([1000], minval=2, maxval=5, dtype=af.int32)
        out = await run([n, u, t, i])
    assert abs(out[0].mean() - 3.0) < 0.1 and abs(out[0].std() - 2.0) < 0.1
    assert out[1].min() >= -1.0 and out[1].max() < 1.0 and out[1].dtype == np.float32
    assert np.abs(out[2]).max() <= 2.0
    assert set(np.unique(out[3])) <= {2, 3, 4} and out[3].dtype == np.int32


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
async def test_random_uniform_draws_in_its_dtype(dtype):
    """float32 and float64 are drawn in the dtype itself (float32: numpy's 24-bit draws, no
    float64 array and cast); the others from float64 draws. Values in [0, 1), the same per
    seed, spread over the interval."""
    with af.Graph().as_default():
        u = af.random_uniform([4096], dtype=getattr(af, dtype), seed=5)
        first, second = await run([u]), await run([u])
    np.testing.assert_array_equal(first[0], second[0])
    values = first[0].astype(np.float64)
    assert first[0].dtype == getattr(af, dtype).np
    assert values.min() >= 0.0 and values.max() <= 1.0 and 0.45 < values.mean() < 0.55
    if dtype == "float32":
        # every value a multiple of 2^-24: one 32-bit draw each, not a rounded float64
        np.testing.assert_array_equal(values * 2.0 ** 24, np.floor(values * 2.0 ** 24))
        assert values.max() < 1.0


async def test_assign_family_and_scatter():
    with af.Graph().as_default():
        v = af.Variable(np.zeros((4, 2), np.float32), name="v")
        add = v.assign_add(np.ones((4, 2), np.float32))
        sub = af.assign_sub(v, np.full((4, 2), 0.5, np.float32))
        upd = af.scatter_update(v, [0, 2], np.array([[7, 7], [8, 8]], np.float32))
        sadd = af.scatter_add(v, [1, 1], np.array([[1, 1], [2, 2]], np.float32))
        bad = af.scatter_update(v, [9], np.array([[1, 1]], np.float32), name="bad_scatter")
        async with af.Session() as sess:
            await sess.run(v.initializer)
            np.testing.assert_array_equal(await sess.run(add), np.ones((4, 2)))
            np.testing.assert_array_equal(await sess.run(sub), np.full((4, 2), 0.5))
            await sess.run(upd)
            await sess.run(sadd)
            np.testing.assert_array_equal(await sess.run(v), [[7, 7], [3.5, 3.5], [8, 8], [0.5, 0.5]])
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"bad_scatter.*indices\[0\] = 9 is not in \[0, 4\)"):
                await sess.run(bad)
            with pytest.raises(ValueError, match="incompatible"):
                v.assign(np.zeros((3,), np.float32))


async def test_variable_initialized_from_another_variable_and_validate_shape():
    with af.Graph().as_default():
        a = af.Variable([1.0, 2.0], name="a")
        b = af.Variable(a * 2.0, name="b")
        c = af.Variable([1.0], validate_shape=False, name="c")
        grow = af.assign(c, [1.0, 2.0, 3.0], validate_shape=False)
        async with af.Session() as sess:
            await sess.run(a.initializer)
            await sess.run([b.initializer, c.initializer])
            np.testing.assert_array_equal(await sess.run(b), [2.0, 4.0])
            np.testing.assert_array_equal(await sess.run(grow), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("make", [
    lambda shape: af.random_uniform(shape, seed=1),
    lambda shape: af.random_normal(shape, seed=1),
    lambda shape: af.truncated_normal(shape, seed=1),
    lambda shape: af.random_uniform(shape, maxval=10, dtype=af.int32, seed=1),
])
async def test_a_large_random_tensor_is_made_on_a_worker_thread(make, monkeypatch, cpu_only):
    # A variable's random initializer of millions of elements takes tens of milliseconds: on the
    # event loop it would stall a parameter server's Health answers. Its cost is the tensor it
    # makes (OFFLOAD_COST elements or more: a worker thread), not its small shape input.
    import threading

    from asyncflow.exec.context import NodeContext
    from asyncflow.exec.plan import OFFLOAD_COST
    threads = []
    generator = NodeContext.random_generator

    def recorded(self):
        threads.append(threading.current_thread())
        return generator(self)
    monkeypatch.setattr(NodeContext, "random_generator", recorded)
    with af.Graph().as_default():
        large, small = make([OFFLOAD_COST // 1024, 1024]), make([3, 4])
        async with af.Session() as sess:
            large_value = await sess.run(large)
            assert threads.pop() is not threading.main_thread()
            small_value = await sess.run(small)
            assert threads.pop() is threading.main_thread()  # small ones stay inline
    assert large_value.shape == (OFFLOAD_COST // 1024, 1024) and small_value.shape == (3, 4)
    assert np.isfinite(large_value.astype(np.float64)).all()
