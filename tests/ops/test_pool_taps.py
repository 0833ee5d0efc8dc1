"""MaxPoolGrad routed by the winners its MaxPool kept (issue 37; compile/pool_taps.py and the
``_MaxPoolWithTaps``/``_MaxPoolGradByTaps`` kernels in kernels/nn_conv.py): the same bits as
MaxPool and MaxPoolGrad (ties, NaN, inf, SAME/VALID, strides, odd sizes, any thread count),
the pass pairing only a MaxPool with its own gradient."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.compile import optimize
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import nn_conv, nn_pool_taps
from asyncflow.ops.construct import make

from test_conv_kernels import (  # same folder
    KernelContext, all_minus_inf, no_special, pool_attrs, pool_cases_with, small_chunks,
    with_nan_and_inf,
)

assert small_chunks  # a fixture, used by name below


def by_taps(attrs, x, grad, threads):
    ctx = KernelContext(attrs, threads)
    pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
    assert taps.dtype == np.uint8 and taps.shape == pooled.shape
    return pooled, nn_pool_taps._max_pool_grad_by_taps(ctx, x, taps, grad)[0]


def recomputed(attrs, x, grad):
    ctx = KernelContext(attrs, 1)
    pooled = nn_conv._max_pool(ctx, x)[0]
    return pooled, nn_conv._max_pool_grad(ctx, x, pooled, grad)[0]


def assert_same_bits(new, old, case):
    for a, b in zip(new, old):
        assert a.dtype == b.dtype and a.shape == b.shape, case
        assert a.tobytes() == b.tobytes(), case


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("special", [no_special, with_nan_and_inf, all_minus_inf])
def test_routing_by_taps_gives_maxpool_and_maxpoolgrad_bits(special, threads, small_chunks):
    """Ties to the first cell in row-major order, NaN never winning but a NaN first real cell
    keeping its window, windows of -inf routed to their first real cell, as MaxPoolGrad."""
    for case, attrs, x, grad in pool_cases_with(special):
        assert_same_bits(by_taps(attrs, x, grad, threads), recomputed(attrs, x, grad), case)


@pytest.mark.parametrize("threads", [1, 2])
def test_inf_and_nan_gradients_go_where_maxpoolgrad_sends_them(threads, small_chunks):
    for case, attrs, x, grad in pool_cases_with(with_nan_and_inf):
        grad = grad.copy()
        grad.reshape(-1)[::5] = np.inf
        grad.reshape(-1)[1::7] = np.nan
        assert_same_bits(by_taps(attrs, x, grad, threads), recomputed(attrs, x, grad), case)


@pytest.mark.parametrize("special", [no_special, with_nan_and_inf, all_minus_inf])
def test_relu_grad_folded_into_the_routing_gives_the_same_bits(special, small_chunks):
    """``ReluGrad(MaxPoolGrad(x, pooled, g), x)``, zeros' signs included: the inputs hold
    ties at 0 and below (a Relu's zeros), gradients of both signs, infs and NaNs."""
    for case, attrs, x, grad in pool_cases_with(special):
        x = x - 1.0  # values -1, 0, 1: windows of zeros and of negatives
        for g in (grad, np.where(np.arange(grad.size).reshape(grad.shape) % 6 == 0,
                                 np.float32(np.inf), -grad).astype(np.float32)):
            ctx = KernelContext(attrs, 2)
            pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
            new = nn_pool_taps._max_pool_relu_grad_by_taps(ctx, x, taps, g, pooled)[0]
            old = recomputed(attrs, x, g)[1] * (x > 0)
            assert new.tobytes() == old.tobytes(), case


def test_integers_and_float64_route_alike():
    rng = np.random.default_rng(5)
    attrs = pool_attrs(3, 3, 2, 2, "SAME")
    for x in (rng.integers(-3, 3, size=(2, 7, 7, 3)).astype(np.int32),
              rng.integers(-3, 3, size=(2, 7, 7, 3)).astype(np.float64)):
        grad = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
        assert_same_bits(by_taps(attrs, x, grad, 2), recomputed(attrs, x, grad), x.dtype)


def test_nchw_routes_alike():
    rng = np.random.default_rng(6)
    attrs = {"ksize": (1, 1, 3, 2), "strides": (1, 1, 2, 2), "padding": "SAME",
             "data_format": "NCHW"}
    x = rng.integers(0, 3, size=(2, 4, 7, 9)).astype(np.float32)
    grad = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    assert_same_bits(by_taps(attrs, x, grad, 2), recomputed(attrs, x, grad), "NCHW")
    for relu_attrs in ({**attrs, "ksize": (1, 1, 2, 2)}, attrs):  # tiling and overlapping
        ctx = KernelContext(relu_attrs, 2)
        y = x - 1.0
        pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, y)
        g = rng.standard_normal(pooled.shape).astype(np.float32)
        new = nn_pool_taps._max_pool_relu_grad_by_taps(ctx, y, taps, g, pooled)[0]
        assert new.tobytes() == (recomputed(relu_attrs, y, g)[1] * (y > 0)).tobytes()


def test_taps_of_the_wrong_shape_or_type_are_refused_by_name():
    attrs = pool_attrs(2, 2, 2, 2, "VALID")
    ctx = KernelContext(attrs, 1)
    x = np.zeros((2, 4, 4, 3), np.float32)
    grad = np.zeros((2, 2, 2, 3), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match="test_op: taps has shape"):
        nn_pool_taps._max_pool_grad_by_taps(ctx, x, np.zeros((2, 2, 3, 3), np.uint8), grad)
    with pytest.raises(errors.InvalidArgumentError, match="test_op: taps must be uint8"):
        nn_pool_taps._max_pool_grad_by_taps(ctx, x, np.zeros((2, 2, 2, 3), np.int32), grad)
    with pytest.raises(errors.InvalidArgumentError, match="more than 256 taps"):
        nn_pool_taps._max_pool_with_taps(KernelContext(pool_attrs(17, 17, 1, 1, "SAME"), 1), x)


# -- the pass -----------------------------------------------------------------------------------
def types_of(fetches, feeds):
    ops = prune(fetches, [], feeds)
    placement = {op: "/job:localhost/replica:0/task:0/device:CPU:0" for op in ops}
    graph = NodeGraph.from_ops(ops, list(feeds), list(fetches), [], placement)
    return [n.type for n in optimize.fuse_activations(graph).nodes]


def convnet_pools(x):
    first = af.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    second = af.nn.max_pool(af.nn.relu(first), [1, 3, 3, 1], [1, 2, 2, 1], "VALID")
    return first, second


async def run_both_ways(build, images):
    """Fetches with the graph optimized and not, and the op types each step ran."""
    results = {}
    for optimize_graph in (True, False):
        with af.Graph().as_default():
            x = af.placeholder(af.float32, [None, None, None, None], name="x")
            fetches = build(x)
            config = af.ConfigProto(optimize_graph=optimize_graph)
            async with af.Session(config=config) as session:
                metadata = af.RunMetadata()
                values = await session.run(fetches, {x: images}, options=af.RunOptions(
                    trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
        results[optimize_graph] = values, {s.op_type for s in metadata.step_stats}
    return results


@pytest.mark.parametrize("window, stride, padding", [(2, 2, "SAME"), (3, 2, "SAME"),
                                                     (2, 2, "VALID")])
async def test_a_relu_pool_and_its_gradients_fold_with_the_same_bits(window, stride, padding):
    rng = np.random.default_rng(8)
    images = rng.integers(-2, 3, size=(4, 9, 10, 3)).astype(np.float32)
    filters = rng.standard_normal((1, 1, 3, 2)).astype(np.float32)  # gradients of both signs

    def build(x):
        pooled = af.nn.max_pool(af.nn.relu(x), [1, window, window, 1], [1, stride, stride, 1],
                                padding)
        weights = af.constant(filters)
        loss = af.reduce_sum(af.nn.conv2d(pooled, weights, 1, "SAME") ** 2)
        return [pooled] + af.gradients(loss, [x])
    results = await run_both_ways(build, images)
    assert "_MaxPoolReluGradByTaps" in results[True][1]
    assert not {"ReluGrad", "MaxPoolGrad", "_MaxPoolGradByTaps"} & results[True][1]
    for a, b in zip(results[True][0], results[False][0]):
        assert a.tobytes() == b.tobytes()


async def test_a_pools_own_gradient_reads_its_taps_with_the_same_bits():
    rng = np.random.default_rng(7)
    images = rng.integers(0, 4, size=(5, 11, 9, 3)).astype(np.float32)
    images.reshape(-1)[::13] = np.nan
    images.reshape(-1)[5::17] = -np.inf

    def build(x):
        first, second = convnet_pools(x)
        loss = af.reduce_sum(second * second) + af.reduce_sum(first)
        return [first, second] + af.gradients(loss, [x])
    results = await run_both_ways(build, images)
    assert {"_MaxPoolWithTaps", "_MaxPoolGradByTaps"} <= results[True][1]
    assert not {"MaxPool", "MaxPoolGrad"} & results[True][1]
    assert {"MaxPool", "MaxPoolGrad"} <= results[False][1]
    for a, b in zip(results[True][0], results[False][0]):
        assert a.tobytes() == b.tobytes()


def test_the_pass_pairs_only_a_pool_with_its_own_gradient():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4, 8, 8, 2], name="x")
        first, second = convnet_pools(x)
        grads = af.gradients(af.reduce_sum(second), [x])
        types = types_of(grads, [x])  # the second pool's input is a Relu's output
        assert types.count("_MaxPoolGradByTaps") == 1 and "ReluGrad" not in types
        assert types.count("_MaxPoolReluGradByTaps") == 1
        attrs = {"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "SAME",
                 "data_format": "NHWC"}
        ones = af.ones_like(first)
        other = af.placeholder(af.float32, [4, 4, 4, 2], name="other")
        refused = [
            make("MaxPoolGrad", (x, first, ones), {**attrs, "padding": "VALID"}),
            make("MaxPoolGrad", (x, first, ones), {**attrs, "ksize": (1, 1, 1, 1)}),
            make("MaxPoolGrad", (x * 2.0, first, ones), attrs),   # another input
            make("MaxPoolGrad", (x, other, ones), attrs),         # the user's own tensor
        ]
        for grad in refused:
            types = types_of([grad], [x, other])
            assert "MaxPoolGrad" in types and "_MaxPoolGradByTaps" not in types
            assert "_MaxPoolWithTaps" not in types
        paired = make("MaxPoolGrad", (x, first, ones), attrs)
        assert "_MaxPoolGradByTaps" in types_of([paired], [x])
        # A window of more than 256 taps keeps the recomputing kernel.
        big = af.nn.max_pool(x, [1, 8, 8, 1], [1, 1, 1, 1], "SAME")
        wide = af.nn.max_pool(big, [1, 17, 17, 1], [1, 1, 1, 1], "SAME")
        types = types_of(af.gradients(af.reduce_sum(wide), [x]), [x])
        assert types.count("MaxPoolGrad") == 1 and types.count("_MaxPoolGradByTaps") == 1


@pytest.mark.parametrize("padding, rows", [("VALID", 8), ("SAME", 7)])  # windows that tile
def test_the_tiled_relu_fold_learns_of_nan_first_cells_from_the_winners(padding, rows):
    """The fold's NaN first cells (whose gradient ReluGrad zeroes: NaN is not > 0) come with
    the winners ``_MaxPoolWithTaps`` wrote, not from a pass over the input: with the input's
    values hidden the fold gives the same bits, and still TF's with them."""
    rng = np.random.default_rng(8)
    attrs = pool_attrs(2, 2, 2, 2, padding)
    x = np.maximum(rng.standard_normal((3, rows, 8, 4)), 0).astype(np.float32)
    x[:, ::2, ::2][rng.random((3, 4, 4, 4)) < 0.3] = np.nan  # first cells, next to positives
    ctx = KernelContext(attrs, 2)
    pooled, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
    g = rng.standard_normal(pooled.shape).astype(np.float32)
    new = nn_pool_taps._max_pool_relu_grad_by_taps(ctx, x, taps, g, pooled)[0]
    assert new.tobytes() == (recomputed(attrs, x, g)[1] * (x > 0)).tobytes()
    hidden = np.broadcast_to(np.float32(np.nan), x.shape)
    blind = nn_pool_taps._max_pool_relu_grad_by_taps(ctx, hidden, taps, g, pooled)[0]
    assert blind.tobytes() == new.tobytes()
