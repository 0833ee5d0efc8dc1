"""variable_scope / get_variable with TF1's reuse rules, and af.initializers."""
import math

import numpy as np
import pytest
import trio

import asyncflow as af


async def run(fetch, feed=None, init=True):
    async with af.Session() as sess:
        if init:
            await sess.run(af.global_variables_initializer())
        return await sess.run(fetch, feed)


def test_names_follow_variable_scopes_not_name_scopes():
    with af.Graph().as_default():
        with af.variable_scope("layer1"):
            w = af.get_variable("w", [3, 4])
            with af.variable_scope("inner"):
                b = af.get_variable("b", [4])
            with af.name_scope("ns"):
                v = af.get_variable("v", [1])
                op = af.add(w, 1.0)
        assert (w.name, b.name, v.name) == ("layer1/w:0", "layer1/inner/b:0", "layer1/v:0")
        assert op.name == "layer1/ns/add:0"
        assert af.get_variable_scope().name == ""
        assert af.trainable_variables() == [w, b, v]


def test_reuse_true_returns_the_same_variable_and_inherits():
    with af.Graph().as_default():
        with af.variable_scope("model"):
            with af.variable_scope("dense"):
                w = af.get_variable("w", [2, 2])
        with af.variable_scope("model", reuse=True) as scope:
            assert scope.reuse is True
            with af.variable_scope("dense", reuse=False):  # False inherits, as in TF1
                assert af.get_variable("w", [2, 2]) is w
                assert af.get_variable("w") is w
            op = af.identity(w)
        assert op.name == "model_1/Identity:0"  # ops get a fresh name scope
        assert len(af.global_variables()) == 1


def test_creating_twice_without_reuse_is_an_error():
    with af.Graph().as_default():
        with af.variable_scope("foo"):
            af.get_variable("w", [1])
        with pytest.raises(ValueError, match=r"Variable foo/w already exists, disallowed\. "
                                             r"Did you mean to set reuse=True"):
            with af.variable_scope("foo"):
                af.get_variable("w", [1])


def test_reuse_true_requires_existence():
    with af.Graph().as_default():
        with af.variable_scope("foo", reuse=True):
            with pytest.raises(ValueError, match="Variable foo/missing does not exist"):
                af.get_variable("missing", [1])


def test_auto_reuse_creates_then_returns():
    with af.Graph().as_default():
        def layer():
            with af.variable_scope("shared", reuse=af.AUTO_REUSE):
                return af.get_variable("w", [3])
        assert layer() is layer()
        assert len(af.global_variables()) == 1


def test_sharing_checks_shape_and_dtype():
    with af.Graph().as_default():
        with af.variable_scope("s"):
            af.get_variable("w", [2, 3])
        with af.variable_scope("s", reuse=True):
            with pytest.raises(ValueError, match="specified shape"):
                af.get_variable("w", [3, 2])
            with pytest.raises(ValueError, match="specified dtype"):
                af.get_variable("w", [2, 3], dtype=af.float64)


def test_scope_object_reentry_and_reuse_variables():
    with af.Graph().as_default():
        with af.variable_scope("enc") as enc:
            w = af.get_variable("w", [1])
        with af.variable_scope("other"):
            with af.variable_scope(enc, reuse=True) as again:
                assert again.name == "enc"  # a scope object is entered as is, not nested
                assert af.get_variable("w") is w
                # TF1: a fresh name scope after the last component, under the current one
                assert af.identity(w).op.name == "other/enc/Identity"
        with af.variable_scope("dec") as dec:
            af.get_variable("v", [1])
            dec.reuse_variables()
            assert af.get_variable("v") is af.global_variables()[-1]


def test_default_names_are_uniquified_and_reset_on_reentry():
    with af.Graph().as_default():
        names = []
        for _ in range(2):
            with af.variable_scope("net"):
                for _ in range(2):
                    with af.variable_scope(None, default_name="dense") as scope:
                        names.append(scope.name)
        assert names == ["net/dense", "net/dense_1", "net/dense", "net/dense_1"]
        with pytest.raises(TypeError, match="default_name is None"):
            with af.variable_scope(None):
                pass
        with pytest.raises(ValueError, match="reuse=True cannot be used"):
            with af.variable_scope(None, default_name="x", reuse=True):
                pass


def test_shape_must_be_fully_defined_and_constant_initializers():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="must be fully defined"):
            af.get_variable("a", [None, 3])
        with pytest.raises(ValueError, match="must be fully defined"):
            af.get_variable("b")
        with pytest.raises(ValueError, match="do not specify shape"):
            af.get_variable("c", [2], initializer=np.ones(2, np.float32))
        v = af.get_variable("d", initializer=af.constant([[1, 2]], af.int64))
        assert v.dtype is af.int64 and v.shape.as_list() == [1, 2]


async def test_initializers_produce_their_values():
    with af.Graph().as_default():
        with af.variable_scope("init", initializer=af.ones_initializer()):
            ones = af.get_variable("ones", [2, 2])
            zeros = af.get_variable("zeros", [3], initializer=af.zeros_initializer())
            const = af.get_variable("const", [2, 2], initializer=af.constant_initializer([1, 2, 3, 4]))
            ints = af.get_variable("ints", [2], dtype=af.int32, initializer=None)
        ones_v, zeros_v, const_v, ints_v = await run([ones, zeros, const, ints])
    np.testing.assert_array_equal(ones_v, np.ones((2, 2)))
    np.testing.assert_array_equal(zeros_v, np.zeros(3))
    np.testing.assert_array_equal(const_v, [[1, 2], [3, 4]])
    # A scope initializer applies to ints too, as in TF1.
    np.testing.assert_array_equal(ints_v, [1, 1])


async def test_default_is_glorot_uniform_with_tf1_limits():
    with af.Graph().as_default():
        w = af.get_variable("w", [200, 300])
        assert w.dtype is af.float32
        value = await run(w)
    limit = math.sqrt(6 / (200 + 300))
    assert value.min() >= -limit and value.max() <= limit
    assert abs(value.std() - limit / math.sqrt(3)) < 0.01 * limit


@pytest.mark.parametrize("init,std,bound", [
    (af.initializers.glorot_normal(seed=1), math.sqrt(2 / 500), 2 * math.sqrt(2 / 500) / 0.8796),
    (af.initializers.he_normal(seed=1), math.sqrt(2 / 200), 2 * math.sqrt(2 / 200) / 0.8796),
    (af.initializers.he_uniform(seed=1), math.sqrt(2 / 200), math.sqrt(6 / 200)),
    (af.initializers.random_normal(1.0, 0.5, seed=1), 0.5, None),
    (af.initializers.truncated_normal(0.0, 0.5, seed=1), 0.5 * 0.8796, 1.0),
    (af.initializers.random_uniform(-2.0, 2.0, seed=1), 4 / math.sqrt(12), 2.0),
])
async def test_random_initializers_statistics(init, std, bound):
    with af.Graph().as_default():
        tensor = init([200, 300], dtype=af.float32)
        assert isinstance(tensor, af.Tensor) and tensor.shape.as_list() == [200, 300]
        value = await run(tensor, init=False)
    assert abs(value.std() - std) < 0.03 * std
    if bound is not None:
        assert np.abs(value - value.mean()).max() <= bound * 1.0001 + abs(value.mean())


def test_initializer_argument_errors():
    with pytest.raises(ValueError, match="scale"):
        af.initializers.variance_scaling(scale=0.0)
    with pytest.raises(ValueError, match="mode"):
        af.initializers.variance_scaling(mode="fan_sideways")
    assert af.initializers.compute_fans([3, 3, 16, 32]) == (144, 288)
    assert af.initializers.compute_fans([7]) == (7, 7)
    assert af.initializers.compute_fans([]) == (1, 1)


def test_variable_store_is_per_graph():
    first, second = af.Graph(), af.Graph()
    with first.as_default():
        with af.variable_scope("a"):
            af.get_variable("w", [1])
    with second.as_default():
        with af.variable_scope("a"):
            af.get_variable("w", [1])  # no clash: another graph's store
        assert af.get_variable_scope().name == ""
    assert first.extensions["variable_store"] is not second.extensions["variable_store"]


async def test_two_tasks_building_in_one_graph_keep_their_own_scopes():
    graph = af.Graph()
    names = {}

    async def build(label):
        with graph.as_default():
            with af.variable_scope(label):
                await trio.sleep(0)  # let the other task enter its scope meanwhile
                names[label] = af.get_variable("w", [1]).name
    async with trio.open_nursery() as nursery:
        nursery.start_soon(build, "x")
        nursery.start_soon(build, "y")
    assert names == {"x": "x/w:0", "y": "y/w:0"}


async def test_variables_from_get_variable_train_with_gradients():
    with af.Graph().as_default():
        with af.variable_scope("lin"):
            w = af.get_variable("w", [2, 1], initializer=af.constant_initializer([[1.0], [2.0]]))
        x = af.constant([[1.0, 1.0]])
        loss = af.reduce_sum(af.matmul(x, w))
        (grad,) = af.gradients(loss, [w])
        value = await run(grad)
    np.testing.assert_array_equal(value, [[1.0], [1.0]])
