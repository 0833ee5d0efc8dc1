"""Which thread runs a GEMM-like kernel (issue 37): MatMul and the convolutions count their
cost in multiply-adds and offload from ``offload_scale`` (16) times the threshold, so a GEMM
the size of a small elementwise op stays on the calling thread (no worker round trip) while a
large convolution no longer holds the event loop for its whole run."""
import dataclasses
import threading

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import intra_op, registry
from asyncflow.exec.plan import OFFLOAD_COST


@pytest.fixture
def threads_of(monkeypatch):
    """Record the thread each MatMul/Conv2D kernel runs on, by op name."""
    seen = {}
    for op_type in ("MatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                    "_FusedConv2DBackprop"):
        kernel = registry._KERNELS[(op_type, registry.ANY)]

        def spy(ctx, *args, _fn=kernel.fn):
            seen[ctx.name] = threading.current_thread() is threading.main_thread()
            return _fn(ctx, *args)
        monkeypatch.setitem(registry._KERNELS, (op_type, registry.ANY),
                            dataclasses.replace(kernel, fn=spy))
    return seen


def test_gemm_kernels_declare_their_scale():
    for op_type in ("MatMul", "_FusedMatMul", "Conv2D", "_FusedConv2D",
                    "Conv2DBackpropInput", "Conv2DBackpropFilter", "_FusedConv2DBackprop"):
        assert registry._KERNELS[(op_type, registry.ANY)].offload_scale == \
            intra_op.MACS_PER_WORK, op_type
    assert registry._KERNELS[("Sum", registry.ANY)].offload_scale == 1


async def test_small_gemms_stay_inline_and_large_ones_offload(threads_of, cpu_only):
    rng = np.random.default_rng(0)
    with af.Graph().as_default():
        small = af.placeholder(af.float32, [None, None])   # 256^3: 16.7M multiply-adds
        large = af.placeholder(af.float32, [None, None])   # 512^3: 134M
        fetches = [af.matmul(small, small, name="small"), af.matmul(large, large, name="large")]
        async with af.Session() as session:
            await session.run(fetches, {small: rng.random((256, 256), np.float32),
                                        large: rng.random((512, 512), np.float32)})
    assert 256 ** 3 < OFFLOAD_COST * intra_op.MACS_PER_WORK <= 512 ** 3
    assert threads_of == {"small": True, "large": False}


async def test_a_large_convolution_and_its_gradients_leave_the_event_loop(threads_of, cpu_only):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 24, 24, 32)).astype(np.float32)  # 16*576*800*64: 472M
    f = rng.standard_normal((5, 5, 32, 64)).astype(np.float32)
    tiny = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    with af.Graph().as_default():
        holder = af.placeholder(af.float32, [None, 24, 24, 32])
        filters = af.constant(f)
        y = af.nn.conv2d(holder, filters, strides=1, padding="SAME", name="big")
        dx, df = af.gradients(af.reduce_sum(y), [holder, filters])
        small = af.nn.conv2d(af.constant(tiny), af.constant(np.ones((3, 3, 2, 2), np.float32)),
                             strides=1, padding="SAME", name="tiny")
        async with af.Session() as session:
            await session.run([y, dx, df, small], {holder: x})
    assert threads_of.pop("tiny") is True
    assert threads_of.pop("big") is False
    # Both gradients, one _FusedConv2DBackprop node (compile/optimize.py), offloaded.
    assert len(threads_of) == 1 and not any(threads_of.values())
