"""Consecutive narrow dense layers as one node (issue 37): the fusion pass
(compile/fuse_matmul_chain.py) makes ``_FusedMatMul`` layers that each read the one before one
``_FusedMatMulChain``; its kernel (kernels/matmul_chain.py) splits them once by rows where
every layer alone is too small to split, else runs them one by one. The training steps have
the unfused bits in both forms, float32 and float64; bad shapes are errors naming the op."""
from types import SimpleNamespace

import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import fuse_matmul_chain as fusion
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.compile.optimize import fuse_activations
from asyncflow.compile.prune import prune
from asyncflow.graph.registry import get_op_def
from asyncflow.kernels import intra_op as kernel_intra_op
from asyncflow.exec import intra_op as exec_intra_op
from asyncflow.kernels import math as math_kernels, matmul_chain

from traced_steps import traced_steps  # same folder

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
WIDTHS = (64, 128, 128, 64)  # k * n a layer: 8192, 16384, 8192


def build(rng, dtype, widths=WIDTHS):
    """A sigmoid autoencoder of ``widths`` under RMSProp: ``(x, y, loss, train)``."""
    x = af.placeholder(dtype, [None, widths[0]], name="x")
    y = af.placeholder(dtype, [None, widths[-1]], name="y")
    h = x
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        w = af.Variable((rng.standard_normal((n_in, n_out)) * 0.2).astype(dtype), name=f"w{i}")
        b = af.Variable((rng.standard_normal(n_out) * 0.1).astype(dtype), name=f"b{i}")
        h = af.sigmoid(af.matmul(h, w) + b, name=f"layer{i}")
    loss = af.reduce_mean(af.square(h - y))
    train = af.train.RMSPropOptimizer(0.01, momentum=0.5).minimize(loss)
    return x, y, loss, train


def fused_graph(widths=WIDTHS, fetch=None):
    graph = af.Graph()
    with graph.as_default():
        x, y, loss, train = build(np.random.default_rng(0), np.float32, widths)
        fetches = [loss] + ([graph.get_tensor_by_name(fetch)] if fetch else [])
    ops = prune(fetches, [train], [x, y])
    node_graph = NodeGraph.from_ops(ops, [x, y], fetches, [train], {op: CPU0 for op in ops})
    return fuse_activations(node_graph)


def test_the_pass_makes_the_layers_one_chain():
    graph = fused_graph()
    (chain,) = [n for n in graph.nodes if n.type == fusion.FUSED_TYPE]
    assert chain.name == "layer2"
    assert chain.attrs == {"transpose_a": False, "transpose_b": (False, False, False),
                           "fused_ops": (("BiasAdd", "Sigmoid"),) * 3}
    assert [p[0].name for p in chain.inputs] == ["x", "w0/read", "b0/read", "w1/read", "b1/read",
                                              "w2/read", "b2/read"]
    assert [spec[1].as_list() for spec in chain.out_specs] == [[None, 128], [None, 128],
                                                               [None, 64]]
    assert not [n for n in graph.nodes if n.type == "_FusedMatMul"]
    # each layer's activation is read where it was: its SigmoidGrad reads the chain's output
    grads = {n.name: n for n in graph.nodes if n.type == "SigmoidGrad"}
    assert grads["gradients/layer0_grad/SigmoidGrad"].inputs[0] == (chain, 0)
    assert grads["gradients/layer1_grad/SigmoidGrad"].inputs[0] == (chain, 1)


def test_a_wide_layer_ends_the_chain():
    graph = fused_graph((64, 128, 128, 1024))  # the last layer: k * n = 131072 > ROW_MACS
    (chain,) = [n for n in graph.nodes if n.type == fusion.FUSED_TYPE]
    assert chain.name == "layer1" and len(chain.out_specs) == 2
    assert [n.name for n in graph.nodes if n.type == "_FusedMatMul"] == ["layer2"]


def test_a_fetched_layer_is_not_taken_and_the_switch_keeps_them_apart(monkeypatch):
    graph = fused_graph(fetch="layer1:0")  # layer 1 pinned: no two consecutive layers left
    assert not [n for n in graph.nodes if n.type == fusion.FUSED_TYPE]
    monkeypatch.setattr(fusion, "ENABLED", False)
    assert not [n for n in fused_graph().nodes if n.type == fusion.FUSED_TYPE]


def test_the_cost_is_the_layers_multiply_adds():
    cost = get_op_def(fusion.FUSED_TYPE).cost
    op = type("Op", (), {"attrs": {"transpose_a": False}})()
    assert cost([(256, 64), (64, 128), (128,), (128, 32), (32,)], op) == 256 * (64 * 128
                                                                             + 128 * 32)
    op.attrs["transpose_a"] = True
    assert cost([(64, 256), (64, 128), (128,)], op) == 256 * 64 * 128


async def steps(dtype, count=3, batch=256):
    """Losses and variables after each of ``count`` steps (and a traced one) on two intra-op
    threads, and the op types run."""
    rng = np.random.default_rng(1)
    images = rng.random((batch, WIDTHS[0])).astype(dtype)
    images[0, :3] = [np.inf, -0.0, 0.0]
    images[1, :] = 0.0
    return await traced_steps(lambda: build(rng, dtype), images,
                              images[:, :WIDTHS[-1]].copy(), count,
                              af.ConfigProto(intra_op_parallelism_threads=2))


@pytest.fixture
def splits(monkeypatch):
    """A GEMM split threshold of 8.4 M multiply-adds: each layer at batch 256 below it, the
    three together at it; every chain kernel's split decision recorded."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 1 << 19)
    decided = []
    bounds = matmul_chain.split_bounds

    def spy(ctx, a, layers):
        split = bounds(ctx, a, layers)
        decided.append(None if split is None else split[0])
        return split
    monkeypatch.setattr(matmul_chain, "split_bounds", spy)
    return decided


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
async def test_the_steps_have_the_unfused_bits(monkeypatch, splits, dtype, cpu_only):
    fused, fused_types = await steps(dtype)
    chained = list(splits)
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain, plain_types = await steps(dtype)
    assert fusion.FUSED_TYPE in fused_types and fusion.FUSED_TYPE not in plain_types
    assert len(chained) == 4 and len(splits) == 4  # (no chain in the unfused form)
    if kernel_intra_op.split_keeps_bits(np.dtype(dtype)):
        least = kernel_intra_op.BLAS_SMALL_MACS // 8192 + 1
        for bounds in chained:  # split once, the caller's chunk first and longer
            assert len(bounds) == 2 and bounds[0][0] == 0 and bounds[-1][1] == 256
            assert bounds[0][1] - bounds[0][0] >= bounds[1][1] - bounds[1][0] >= least
    else:  # (float64, or a BLAS whose row chunks round otherwise: one by one)
        assert chained == [None] * 4
    assert len(fused) == len(plain)
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


async def test_a_chain_too_small_or_a_layer_too_large_runs_layer_by_layer(monkeypatch, splits,
                                                                        cpu_only):
    fused, _ = await steps(np.float32, count=1, batch=128)  # together below the threshold
    assert splits == [None] * 2
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 1 << 17)  # each layer splits alone
    splits.clear()
    alone, _ = await steps(np.float32, count=1)
    assert splits == [None] * 2
    monkeypatch.setattr(fusion, "ENABLED", False)
    plain, _ = await steps(np.float32, count=1)
    for a, b in zip(alone, plain):
        assert a.tobytes() == b.tobytes()


def _ctx(threads=2):
    device = SimpleNamespace(intra_op=exec_intra_op.shared_pool(threads) if threads else None)
    return SimpleNamespace(device=device, xp=np, name="layer2", type=fusion.FUSED_TYPE,
                           output_dtypes=[np.float32] * 2,
                           attrs={"transpose_a": False, "transpose_b": (False, True),
                                  "fused_ops": (("BiasAdd", "Sigmoid"), ("BiasAdd", "Relu"))})


def _operands(rows=256):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(shape).astype(np.float32)
            for shape in ((rows, 64), (64, 128), (128,), (64, 128), (64,))]


@pytest.mark.parametrize("threads", [None, 1, 2])
def test_the_kernel_has_each_layers_bits(monkeypatch, threads):
    """Split as a chain (two threads), or layer by layer (no pool, one thread): the bits of
    ``_FusedMatMul``'s kernel run on each layer, the second layer's ``b`` transposed."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 1 << 18)  # each layer below it
    a, w0, b0, w1, b1 = _operands()
    ctx = _ctx(threads)
    outs = matmul_chain._matmul_chain(ctx, a, w0, b0, w1, b1)
    first = math_kernels.fused_product(ctx, a, w0, b0, ("BiasAdd", "Sigmoid"))
    second = math_kernels.fused_product(ctx, first, w1.T, b1, ("BiasAdd", "Relu"))
    assert [o.tobytes() for o in outs] == [first.tobytes(), second.tobytes()]
    split = matmul_chain.split_bounds(ctx, a, matmul_chain._layers(ctx, a, (w0, b0, w1, b1)))
    assert (split is not None) == (threads == 2 and kernel_intra_op.split_keeps_bits(a.dtype))


@pytest.mark.parametrize("width", [0, 64])
def test_a_layer_of_no_multiply_adds_runs_layer_by_layer(monkeypatch, width):
    """A chain whose last layer has a zero side, ``b`` ``[64, 0]``, and whose other layers
    together reach the split threshold: the layers one by one (the split's least rows a
    chunk were divided by that layer's multiply-adds a row, zero: ZeroDivisionError), with
    their own kernels' bits and shapes. Width 0: ``[0, 64]`` after a layer of no units (the
    chain below the threshold)."""
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 1 << 18)  # each layer below it
    a, w0, b0, w1, b1 = _operands()
    w1 = w1.T[:, :width]  # [128, width], not transposed
    w2 = np.ones((width, 0 if width else 64), np.float32)
    b1, b2 = b1[:width], np.zeros(w2.shape[1], np.float32)
    ctx = _ctx()
    ctx.attrs = {"transpose_a": False, "transpose_b": (False,) * 3,
                 "fused_ops": (("BiasAdd", "Sigmoid"), ("BiasAdd", "Relu"), ("BiasAdd",))}
    outs = matmul_chain._matmul_chain(ctx, a, w0, b0, w1, b1, w2, b2)
    first = math_kernels.fused_product(ctx, a, w0, b0, ("BiasAdd", "Sigmoid"))
    second = math_kernels.fused_product(ctx, first, w1, b1, ("BiasAdd", "Relu"))
    third = math_kernels.fused_product(ctx, second, w2, b2, ("BiasAdd",))
    assert [(o.shape, o.tobytes()) for o in outs] == [
        (r.shape, r.tobytes()) for r in (first, second, third)]
    assert outs[2].shape == (256, w2.shape[1])


@pytest.mark.parametrize("index, shape, message", [
    (4, (7,), r"layer 1: bias has shape \[7\], expected \[64\]"),
    (3, (64, 127), r"layer 1: Matrix size-incompatible: In\[0\]: \[256, 128\], "
                   r"In\[1\]: \[127, 64\]"),
    (0, (256, 64, 1), r"input must be 2-D"),
])
def test_bad_shapes_are_errors_naming_the_op(index, shape, message):
    operands = _operands()
    operands[index] = np.zeros(shape, np.float32)
    with pytest.raises(af.errors.InvalidArgumentError, match=message) as info:
        matmul_chain._matmul_chain(_ctx(), *operands)
    assert info.value.op == "layer2"
