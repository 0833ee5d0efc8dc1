"""The dropout drawn in its product's row chunks (issue 37): ``_FusedMatMulDropout``
(compile/fuse_matmul_dropout.py, kernels/dropout_matmul.py) against ``_FusedMatMul`` then
``_FusedDropout``, bit for bit: result, mask, activations and the generator's state after
(float32, float64, odd sizes, keep 1 and tiny, a kept float32 half, split or whole); the
draws of any flat ranges in any order against the whole call's; the pass where the product
feeds only the dropout, its Shape and the Relu's gradient, not where anything else reads it;
the gradient through the fused node against central differences."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import optimize
from asyncflow.compile.fuse_dropout import fuse_dropout
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.prune import prune
from asyncflow.kernels import dropout, intra_op
from asyncflow.kernels.registry import get_kernel

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


class Pool:
    """An intra-op pool of two threads run inline, chunks in reverse (``for_gemm``'s)."""
    threads = 2

    def alone(self):
        return False

    def all_busy(self):
        return False

    def joinable(self):
        return False

    def hold_blas_loaded_since(self):
        pass

    def run(self, fn, bounds, *args, **kwargs):
        for start, stop in reversed(bounds):
            fn(start, stop)


class Device:
    def __init__(self, pool):
        self.intra_op = pool


class Ctx:
    xp, name, type, prepared = np, "drop", "_FusedMatMulDropout", None

    def __init__(self, dtype, rng, pool=None):
        self.attrs = {"transpose_a": False, "transpose_b": False,
                      "fused_ops": ("BiasAdd", "Relu"), "seed": 1, "seed2": 2}
        self.output_dtypes = [np.dtype(dtype)] * 3
        self.rng, self.device = rng, Device(pool) if pool else None

    def random_generator(self):
        return self.rng

    def to_device(self, array):
        return array


def operands(dtype, rows, inner, cols, seed=0):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((rows, inner))).astype(dtype),
            (rng.standard_normal((inner, cols)) * 0.1).astype(dtype),
            (rng.standard_normal(cols) * 0.1).astype(dtype))


def two_nodes(ctx, a, b, bias, keep):
    (features,) = get_kernel("_FusedMatMul", "CPU").fn(ctx, a, b, bias)
    out, mask = get_kernel("_FusedDropout", "CPU").fn(
        ctx, features, np.asarray(features.shape), keep)
    return out, mask, features


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, inner, cols", [(128, 784, 256), (129, 300, 255), (7, 5, 3),
                                               (1, 4, 1)])
@pytest.mark.parametrize("keep", [0.75, 1.0, 1e-6])
@pytest.mark.parametrize("pre", [0, 1])
def test_the_fused_kernel_is_the_two_nodes_bit_for_bit(monkeypatch, dtype, rows, inner, cols,
                                                       keep, pre):
    monkeypatch.setattr(intra_op, "MIN_SPLIT_WORK", 1 << 10)   # split the small ones too
    a, b, bias = operands(dtype, rows, inner, cols)
    keep = np.asarray(keep, dtype)
    got_rng, want_rng = np.random.default_rng([4, 2]), np.random.default_rng([4, 2])
    for rng in (got_rng, want_rng):
        rng.random(pre, dtype=np.float32)   # pre = 1: a float32 half kept first
    for _ in range(2):
        want = two_nodes(Ctx(dtype, want_rng, Pool()), a, b, bias, keep)
        got = get_kernel("_FusedMatMulDropout", "CPU").fn(Ctx(dtype, got_rng, Pool()), a, b,
                                                           bias, keep)
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        assert got_rng.bit_generator.state == want_rng.bit_generator.state
    assert got_rng.random(3, dtype=np.float32).tobytes() == \
        want_rng.random(3, dtype=np.float32).tobytes()


def test_other_generators_and_dtypes_take_the_two_kernels_in_turn():
    a, b, bias = operands(np.float16, 9, 6, 5)
    for dtype, rng in ((np.float16, np.random.default_rng(3)),
                       (np.float32, np.random.Generator(np.random.Philox(3)))):
        a_, b_, bias_ = (x.astype(dtype) for x in (a, b, bias))
        keep = np.asarray(0.5, dtype)
        again = np.random.Generator(type(rng.bit_generator)(3))
        got = get_kernel("_FusedMatMulDropout", "CPU").fn(Ctx(dtype, rng), a_, b_, bias_, keep)
        want = two_nodes(Ctx(dtype, again), a_, b_, bias_, keep)
        assert all(x.tobytes() == y.tobytes() for x, y in zip(got, want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ranges_in_any_order_are_the_whole_call(dtype):
    data = np.random.default_rng(6)
    for size in (0, 1, 2, 3, 31, 32, 33, 67, 257):
        for pre in (0, 1):
            x = data.standard_normal(size).astype(dtype)
            keep = np.asarray(0.6, dtype)
            want_rng, got_rng = np.random.default_rng(size), np.random.default_rng(size)
            for rng in (want_rng, got_rng):
                rng.random(pre, dtype=np.float32)
            want = dropout.compiled_dropout(want_rng, x, keep, dtype)
            draws = dropout.reserve_draws(got_rng, size, keep, dtype)
            assert got_rng.bit_generator.state == want_rng.bit_generator.state
            cuts = sorted({0, size, *data.integers(0, size + 1, 4).tolist()})
            ranges = list(zip(cuts, cuts[1:]))
            data.shuffle(ranges)
            out, mask = np.empty(size, dtype), np.empty(size, dtype)
            for start, stop in ranges:
                draws.apply(x, out, mask, start, stop)
            assert out.tobytes() == want[0].tobytes() and mask.tobytes() == want[1].tobytes()


def layer(extra=lambda h: []):
    graph = af.Graph()
    with graph.as_default():
        x = af.placeholder(af.float32, [None, 6], name="x")
        w = af.Variable(np.ones((6, 5), np.float32), name="w")
        b = af.Variable(np.zeros(5, np.float32), name="b")
        h = af.nn.relu(af.matmul(x, w) + b, name="relu")
        out = af.nn.dropout(h, rate=0.25, seed=3, name="drop")
        loss = af.reduce_sum(out * out)
        fetches = [loss, af.gradients(loss, [w])[0]] + extra(h)
    ops = prune(fetches, [], [x])
    graph = NodeGraph.from_ops(ops, [x], fetches, [], {op: CPU0 for op in ops})
    return fuse_dropout(optimize.fuse_activations(graph))


def test_the_pass_takes_the_dropout_into_its_product():
    graph = layer()
    types = [n.type for n in graph.nodes]
    assert "_FusedMatMul" not in types and "_FusedDropout" not in types
    (fused,) = [n for n in graph.nodes if n.type == "_FusedMatMulDropout"]
    assert fused.name == "drop" and fused.attrs["seed"] is not None
    assert fused.attrs["fused_ops"] == ("BiasAdd", "Relu")
    (grad,) = [n for n in graph.nodes if n.type == "_FusedDropoutReluGrad"]
    assert grad.inputs[1] == (fused, 1) and grad.inputs[3] == (fused, 2)
    assert "drop/Shape" not in [n.name for n in graph.nodes]  # the random shape's, gone


@pytest.mark.parametrize("extra", [lambda h: [h], lambda h: [af.reduce_sum(h)]])
def test_no_fusion_where_the_product_has_another_reader(extra):
    types = [n.type for n in layer(extra).nodes]
    assert "_FusedMatMulDropout" not in types
    assert "_FusedMatMul" in types and "_FusedDropout" in types


async def test_the_gradient_through_the_fused_node_against_central_differences():
    rng = np.random.default_rng(8)
    value = rng.uniform(-1.0, 1.0, (5, 4))
    weights = rng.uniform(-1.0, 1.0, (4, 3))

    async def first_run(v, with_grad):
        with af.Graph().as_default():
            x = af.placeholder(af.float64, v.shape)
            w = af.constant(weights)
            out = af.nn.dropout(af.nn.relu(af.matmul(x, w) + af.constant(np.ones(3) * 0.1)),
                                rate=0.4, seed=7)
            loss = af.reduce_sum(out * out)
            fetches = [loss, af.gradients(loss, [x])[0]] if with_grad else loss
            async with af.Session() as session:
                return await session.run(fetches, {x: v})
    _, grad = await first_run(value, True)
    eps = 1e-6
    for index in [(0, 0), (2, 1), (4, 3)]:
        moved = [value.copy(), value.copy()]
        moved[0][index] += eps
        moved[1][index] -= eps
        numeric = (await first_run(moved[0], False) - await first_run(moved[1], False)) / (2 * eps)
        np.testing.assert_allclose(grad[index], numeric, rtol=1e-5, atol=1e-8)
