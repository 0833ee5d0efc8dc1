"""A fused LSTM step: ``FusedLSTMCell`` and its gradient ``FusedLSTMCellGrad``.

``BasicLSTMCell`` (and ``LSTMCell`` without peepholes, clipping or projection) compute one
step as a single op instead of ~13 small ones, and its gradient as one op instead of ~30:
per-op overhead dominates an RNN step on small batches, and a loop body of plain inline
kernels lets the executor run the loop's iterations straight through. The math is TF1's
BasicLSTMCell exactly::

    gates = [x, h_prev] @ kernel + bias;  i, j, f, o = split(gates, 4)
    c = c_prev * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)
    h = tanh(c) * sigmoid(o)

Outputs: ``c``, ``h`` and ``activations`` (``[sigmoid(i), tanh(j), sigmoid(f + forget_bias),
sigmoid(o)]`` concatenated), which the gradient reads instead of recomputing them. The
activations output is internal: a gradient flowing into it is an error. The gradient op
itself has no gradient (no second derivatives through the fused step).
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make_op
from asyncflow.ops.sources import zeros_like


def _units(op, kernel_index):
    kernel = op.inputs[kernel_index]
    dims = kernel.shape.as_list() if kernel.shape.ndims == 2 else [None, None]
    return None if dims[1] is None else dims[1] // 4


def _infer_cell(op):
    x, c_prev, h_prev, kernel, bias = op.inputs
    for tensor in op.inputs[1:]:
        if tensor.dtype is not x.dtype:
            raise TypeError(f"FusedLSTMCell: all inputs must be {x.dtype.name}, got "
                            f"{tensor.name} of {tensor.dtype.name}")
    units = _units(op, 3)
    batch = x.shape.as_list()[0] if x.shape.ndims == 2 else None
    state = TensorShape([batch, units])
    wide = TensorShape([batch, None if units is None else 4 * units])
    return [(x.dtype, state), (x.dtype, state), (x.dtype, wide)]


def _infer_grad(op):
    x, c_prev, h_prev, kernel = op.inputs[:4]
    return [(x.dtype, x.shape), (x.dtype, c_prev.shape), (x.dtype, h_prev.shape),
            (x.dtype, kernel.shape), (x.dtype, TensorShape([kernel.shape.as_list()[1]
                                                            if kernel.shape.ndims == 2
                                                            else None]))]


register_op("FusedLSTMCell", infer=_infer_cell)
register_op("FusedLSTMCellGrad", infer=_infer_grad)
not_differentiable("FusedLSTMCellGrad")


def fused_lstm_cell(x, c_prev, h_prev, kernel, bias, forget_bias=1.0, name=None):
    """``(c, h)`` of one LSTM step (see the module docstring)."""
    x, c_prev, h_prev, kernel, bias = (as_tensor(t) for t in (x, c_prev, h_prev, kernel, bias))
    op = make_op("FusedLSTMCell", (x, c_prev, h_prev, kernel, bias),
                 {"forget_bias": float(forget_bias)}, name, "FusedLSTMCell")
    return op.outputs[0], op.outputs[1]


@register_gradient("FusedLSTMCell")
def _fused_lstm_cell_grad(op, grad_c, grad_h, grad_activations):
    if grad_activations is not None and grad_activations.op.type not in ("ZerosLike",):
        raise LookupError(f"FusedLSTMCell '{op.name}': its activations output is internal and "
                          "has no gradient")
    c, h, activations = op.outputs
    grad_c = grad_c if grad_c is not None else zeros_like(c)
    grad_h = grad_h if grad_h is not None else zeros_like(h)
    x, c_prev, h_prev, kernel, _ = op.inputs
    grad = make_op("FusedLSTMCellGrad", (x, c_prev, h_prev, kernel, activations, c, grad_c,
                                         grad_h), None, None, "FusedLSTMCellGrad")
    return list(grad.outputs)


__all__ = ["fused_lstm_cell"]
