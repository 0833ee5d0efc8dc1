"""The fused gradient ops of the training hot path: ``BroadcastToLike`` (the gradient of Sum
and Mean), ``ExpandDimsMul`` (the cross entropies' gradient) and the constant seed of a
static ``y``. Checked against central finite differences in float64, with static, hidden
and unknown-rank shapes, and through gradients of gradients.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af
from asyncflow.ops.nn import _expand_dims_mul
from gradcheck import assert_close, check_gradients

SETTINGS = settings(max_examples=25, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0, width=64))


def hide_shape(t):
    return af.placeholder_with_default(t, [None] * t.shape.ndims)


def hide_rank(t):
    return af.placeholder_with_default(t, None)


@st.composite
def reductions(draw):
    x = draw(arrays(draw(shapes)))
    axis = draw(st.none() | st.lists(st.integers(0, max(x.ndim - 1, 0)), unique=True,
                                     max_size=x.ndim))
    if x.ndim == 0:
        axis = None
    return x, axis, draw(st.booleans()), draw(st.sampled_from([af.reduce_sum, af.reduce_mean]))


@SETTINGS
@given(reductions())
async def test_sum_and_mean_gradients(case):
    x, axis, keepdims, reduce = case
    await check_gradients(lambda t: reduce(t, axis=axis, keepdims=keepdims), [x])
    await check_gradients(lambda t: reduce(hide_shape(t), axis=axis, keepdims=keepdims), [x])
    if axis is None:
        await check_gradients(lambda t: reduce(hide_rank(t), keepdims=keepdims), [x])


@SETTINGS
@given(reductions())
async def test_sum_and_mean_second_order(case):
    x, axis, keepdims, reduce = case

    def grad_of_grad(t):
        y = reduce(af.square(t) * t, axis=axis, keepdims=keepdims)
        (g,) = af.gradients(af.reduce_sum(af.square(y)), [t])
        return g

    await check_gradients(grad_of_grad, [x])


def test_gradient_of_mean_is_one_op():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None])
        (g,) = af.gradients(af.reduce_mean(x), [x])
        assert g.op.type == "BroadcastToLike"
        assert g.op.inputs[0].op.type == "Const"  # the seed of a scalar y
        assert g.shape.as_list() == [None]


async def test_gradient_of_mean_value_and_writable():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 2])
        (g,) = af.gradients(af.reduce_mean(x, axis=1), [x])
        async with af.Session() as sess:
            value = await sess.run(g, {x: np.ones((3, 2), np.float32)})
    assert value.dtype == np.float32 and value.flags.writeable
    assert_close(value, np.full((3, 2), 0.5))


async def test_gradient_of_empty_mean_is_empty():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 3])
        (g,) = af.gradients(af.reduce_mean(x), [x])
        async with af.Session() as sess:
            value = await sess.run(g, {x: np.zeros((0, 3), np.float32)})
    assert value.shape == (0, 3)


async def test_broadcast_to_like_rejects_misfit_gradient():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None])
        grad_y = af.placeholder(af.float32, [None])
        (g,) = af.gradients(af.reduce_sum(x, axis=1), [x], grad_ys=[grad_y])
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match="does not fit"):
                await sess.run(g, {x: np.ones((3, 2), np.float32),
                                   grad_y: np.ones(2, np.float32)})


def test_seed_stays_ones_like_for_dynamic_y():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None])
        (g,) = af.gradients(x * 2.0, [x])
        assert "OnesLike" in {op.type for op in af.get_default_graph().get_operations()}
        assert g is not None


@SETTINGS
@given(st.data())
async def test_expand_dims_mul_gradients(data):
    y = data.draw(arrays(data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3))))
    axis = data.draw(st.integers(0, y.ndim - 1))
    x = data.draw(arrays(y.shape[:axis] + y.shape[axis + 1:]))
    await check_gradients(lambda a, b: _expand_dims_mul(a, b, axis), [x, y])
    await check_gradients(lambda a, b: _expand_dims_mul(hide_shape(a), hide_shape(b), axis),
                          [x, y])
    # Gradients of its gradients: it is its own adjoint in y, a Sum in x.
    await check_gradients(
        lambda a, b: af.gradients(af.reduce_sum(af.square(_expand_dims_mul(a, b, axis))),
                                  [a])[0], [x, y])


async def test_expand_dims_mul_rejects_bad_shapes():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="without axis"):
            _expand_dims_mul(af.zeros([3]), af.zeros([3, 2, 1]), 1)
        x = af.placeholder(af.float32, None)
        y = af.placeholder(af.float32, None)
        out = _expand_dims_mul(x, y, 1)
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match="without axis"):
                await sess.run(out, {x: np.ones(3, np.float32), y: np.ones((2, 3), np.float32)})


async def test_sparse_xent_logits_gradient_in_the_loss_weights():
    logits = np.random.default_rng(0).standard_normal((4, 3))
    labels = np.array([0, 2, 1, 2], np.int32)

    def build(weights):
        logit_tensor = af.constant(logits)
        loss = af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logit_tensor)
        (grad,) = af.gradients(af.reduce_sum(loss * weights), [logit_tensor])
        assert grad.op.type == "ExpandDimsMul"
        return grad

    await check_gradients(build, [np.linspace(0.5, 2.0, 4)])


@pytest.mark.parametrize("classes", [1, 3, 40])
@pytest.mark.parametrize("lead", [(1,), (5,), (2, 3)])
async def test_sparse_xent_loss_and_backprop_match_numpy(classes, lead):
    """Both kernel layouts (class-major for few classes, row-major for many)."""
    rng = np.random.default_rng(classes)
    logits = np.asfortranarray(rng.standard_normal(lead + (classes,)) * 10)
    labels = rng.integers(0, classes, lead).astype(np.int64)
    original = logits.copy()
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected_loss = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    expected_backprop = np.exp(log_probs) - np.eye(classes)[labels]
    with af.Graph().as_default():
        x = af.placeholder(af.float64, logits.shape)
        loss = af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x)
        (grad,) = af.gradients(af.reduce_sum(loss), [x])
        async with af.Session() as sess:
            loss_value, grad_value = await sess.run([loss, grad], {x: logits})
    assert_close(loss_value, expected_loss, rtol=1e-10, atol=1e-10)
    assert_close(grad_value, expected_backprop, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(logits, original)


async def test_gradient_descent_updates_scalar_and_vector_variables():
    """ApplyGradientDescent's in-place update path (arrays) and its 0-d path."""
    with af.Graph().as_default():
        v = af.Variable(3.0)
        w = af.Variable([1.0, 2.0])
        loss = af.square(v) + af.reduce_mean(w * w)
        train = af.train.GradientDescentOptimizer(0.25).minimize(loss)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            before = await sess.run(w)
            await sess.run(train)
            v_value, w_value = await sess.run([v, w])
    assert_close(v_value, 1.5)
    assert_close(w_value, [0.75, 1.5])
    assert_close(before, [1.0, 2.0])  # the snapshot fetched before the step is unchanged
