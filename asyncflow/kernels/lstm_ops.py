"""Kernels of the fused LSTM step (see ops/lstm_ops.py)."""
from __future__ import annotations

from asyncflow.kernels.registry import register_kernel


def _sigmoid(xp, x):
    return 1.0 / (1.0 + xp.exp(-x))


@register_kernel("FusedLSTMCell")
def _fused_lstm_cell(ctx, x, c_prev, h_prev, kernel, bias):
    xp = ctx.xp
    gates = xp.concatenate([x, h_prev], axis=1) @ kernel
    gates += bias
    units = kernel.shape[1] // 4
    i, j, f, o = (gates[:, k * units:(k + 1) * units] for k in range(4))
    forget_bias = x.dtype.type(ctx.attrs["forget_bias"])
    activations = xp.concatenate([_sigmoid(xp, i), xp.tanh(j), _sigmoid(xp, f + forget_bias),
                                  _sigmoid(xp, o)], axis=1).astype(x.dtype, copy=False)
    si, tj, sf, so = (activations[:, k * units:(k + 1) * units] for k in range(4))
    c = c_prev * sf + si * tj
    h = xp.tanh(c) * so
    return (c, h, activations)


@register_kernel("FusedLSTMCellGrad")
def _fused_lstm_cell_grad(ctx, x, c_prev, h_prev, kernel, activations, c, grad_c, grad_h):
    xp = ctx.xp
    units = kernel.shape[1] // 4
    si, tj, sf, so = (activations[:, k * units:(k + 1) * units] for k in range(4))
    tc = xp.tanh(c)
    dc = grad_c + grad_h * so * (1 - tc * tc)
    dgates = xp.concatenate([dc * tj * si * (1 - si), dc * si * (1 - tj * tj),
                             dc * c_prev * sf * (1 - sf), grad_h * tc * so * (1 - so)], axis=1)
    joined = xp.concatenate([x, h_prev], axis=1)
    dkernel = joined.T @ dgates
    dbias = dgates.sum(axis=0)
    djoined = dgates @ kernel.T
    depth = x.shape[1]
    return (djoined[:, :depth], dc * sf, djoined[:, depth:], dkernel, dbias)
