"""SoftmaxCrossEntropyWithLogits in fewer passes (issue 37): the rows kernel against the
whole-array form it replaced (within float32 rounding, class-major and row-major sides of
``CLASS_MAJOR_MAX``), NaN and inf as that form gives them, and its gradient (one
ExpandDimsMul now) against finite differences."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncflow as af
from asyncflow.kernels.registry import get_kernel
from gradcheck import check_gradients

SETTINGS = settings(max_examples=40, deadline=None)


class Ctx:
    xp = np
    name = "xent"
    attrs = {"axis": -1}


def kernel(logits, labels):
    return get_kernel("SoftmaxCrossEntropyWithLogits", "CPU").fn(Ctx(), logits, labels)


def whole_array_form(logits, labels):
    """The kernel before this change (log_softmax, then exp of it)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    loss = -(labels * log_probs).sum(axis=-1)
    return loss.astype(logits.dtype), np.exp(log_probs) - labels


@SETTINGS
@given(st.data())
def test_rows_kernel_matches_the_whole_array_form(data):
    batch = data.draw(st.integers(1, 40))
    classes = data.draw(st.sampled_from([1, 2, 3, 10, 31, 32, 33, 70]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    scale = data.draw(st.sampled_from([0.1, 3.0, 30.0]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    logits = (rng.standard_normal((batch, classes)) * scale).astype(dtype)
    labels = rng.random((batch, classes)).astype(dtype)
    labels /= labels.sum(axis=1, keepdims=True)
    loss, backprop = kernel(logits, labels)
    want_loss, want_backprop = whole_array_form(logits, labels)
    assert loss.dtype == backprop.dtype == dtype
    assert loss.shape == (batch,) and backprop.shape == (batch, classes)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(loss, want_loss, rtol=16 * eps, atol=16 * eps * (1 + scale))
    np.testing.assert_allclose(backprop, want_backprop, rtol=16 * eps, atol=4 * eps)
    assert not np.shares_memory(backprop, logits) and not np.shares_memory(backprop, labels)


@pytest.mark.parametrize("classes", [10, 40])
def test_nan_and_inf_rows_as_before(classes):
    logits = np.zeros((3, classes), np.float32)
    logits[0, 1] = np.nan
    logits[1, 2] = np.inf
    labels = np.full((3, classes), 1 / classes, np.float32)
    loss, backprop = kernel(logits, labels)
    want_loss, want_backprop = whole_array_form(logits, labels)
    np.testing.assert_array_equal(np.isnan(loss), np.isnan(want_loss))
    np.testing.assert_array_equal(np.isnan(backprop), np.isnan(want_backprop))
    np.testing.assert_allclose(loss[2], want_loss[2], rtol=1e-6)


@pytest.mark.parametrize("shape", [(4, 3), (5, 40)])
async def test_gradient_against_finite_differences(shape):
    rng = np.random.default_rng(1)
    labels = rng.random(shape)
    labels /= labels.sum(axis=1, keepdims=True)

    def build(logits):
        return af.nn.softmax_cross_entropy_with_logits(labels=af.constant(labels),
                                                       logits=logits)
    await check_gradients(build, [rng.standard_normal(shape) * 2], rtol=1e-6, atol=1e-9)


def test_gradient_is_one_kernel_with_an_unknown_batch():
    with af.Graph().as_default():
        logits = af.placeholder(af.float32, [None, 10])
        labels = af.placeholder(af.float32, [None, 10])
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(labels=labels,
                                                                     logits=logits))
        (grad,) = af.gradients(loss, [logits])
    assert grad.op.type == "ExpandDimsMul" and grad.op.get_attr("axis") == 1
