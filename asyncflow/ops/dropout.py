"""``dropout`` (TF1's ``tf.nn.dropout`` with TF2's ``rate``), composed of random_uniform,
floor and a multiply, and the ``_FusedDropout``/``_FusedDropoutGrad``/``_FusedDropoutReluGrad``
ops the fusion pass (compile/fuse_dropout.py) makes of that chain and its gradient. Moved out of ops/nn.py (which re-exports
``dropout``) to keep that module under the size limit. Kernels: kernels/dropout.py.
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph import register_op
from asyncflow.ops import array as _array
from asyncflow.ops import math as _math
from asyncflow.ops.construct import as_tensor, graph_of, static_value
from asyncflow.ops.sources import random_uniform


def dropout(x, rate=None, keep_prob=None, noise_shape=None, seed=None, name=None):
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    Args:
        x: a floating tensor.
        rate: the drop probability in ``[0, 1)`` (a float or a scalar tensor).
        keep_prob: TF1's older spelling, ``1 - rate``; give one of the two.
        noise_shape: the shape of the random keep mask, broadcast against ``x``.
        seed: the op seed (combined with the graph seed as in TF1).

    Raises:
        ValueError: for both or neither of rate/keep_prob, a rate outside ``[0, 1)``, or a
            rate (keep_prob) tensor of another dtype than ``x``'s.
        ValueError: also if ``x`` is not floating (TF1's error, not a TypeError).
    """
    if (rate is None) == (keep_prob is None):
        raise ValueError("dropout: give exactly one of rate and keep_prob")
    graph = graph_of((x,))
    with graph.name_scope(name or "dropout") as scope:
        x = as_tensor(x)
        if not x.dtype.is_floating:
            raise ValueError(f"dropout: x has to be a floating point tensor since it's going "
                             f"to be scaled. Got a {x.dtype.name} tensor instead.")
        given = rate if keep_prob is None else keep_prob
        if hasattr(given, "op") and given.dtype is not x.dtype:  # TF1 casts no rate tensor
            what = "rate" if keep_prob is None else "keep_prob"
            raise ValueError(f"dropout: x's dtype ({x.dtype.name}) must be {what}'s "
                             f"({given.dtype.name}) when {what} is a tensor")
        if keep_prob is not None:
            rate = (1 - keep_prob) if not hasattr(keep_prob, "op") else \
                _math.subtract(1.0, as_tensor(keep_prob, dtype=x.dtype))
        value = static_value(rate) if hasattr(rate, "op") else rate
        if value is not None:
            rate = float(np.asarray(value))
            if not 0 <= rate < 1:
                raise ValueError(f"rate must be a scalar tensor or a float in the range [0, 1), "
                                 f"got {rate}")
            if rate == 0:
                return x
        keep = (1.0 - rate) if isinstance(rate, float) else \
            _math.subtract(1.0, as_tensor(rate, dtype=x.dtype))
        if noise_shape is None:
            noise_shape = x.shape.as_list() if x.shape.is_fully_defined() else _array.shape(x)
        random = random_uniform(noise_shape, dtype=x.dtype, seed=seed)
        mask = _math.floor(_math.add(random, keep))
        result = _math.multiply(_math.divide(x, keep), mask, name=scope)
        # The rate is a scalar, so the output has x's shape even when the rate's shape is
        # unknown (an unshaped keep_prob placeholder), as in TF1.
        result.set_shape(x.shape)
        return result


def _infer_fused_dropout(op):
    """``_FusedDropout(x, shape, keep) -> (output, mask)``: ``dropout``'s chain
    ``(x / keep) * floor(keep + random_uniform(shape))`` in one kernel, made only by the
    fusion pass (compile/fuse_dropout.py) where ``shape`` is ``x``'s and ``keep`` a scalar."""
    x = op.inputs[0]
    return [(x.dtype, x.shape), (x.dtype, x.shape)]


def _fused_dropout_cost(shapes, op):
    return op.outputs[0].shape.num_elements() or 0


register_op("_FusedDropout", infer=_infer_fused_dropout, stateful=True, differentiable=False,
            cost=_fused_dropout_cost)


def _infer_fused_dropout_grad(op):
    """``_FusedDropoutGrad(grad, mask, keep) -> (grad * mask) / keep`` of the mask's shape:
    the fused dropout's gradient (the same pass makes it)."""
    return [(op.inputs[1].dtype, op.inputs[1].shape)]


register_op("_FusedDropoutGrad", infer=_infer_fused_dropout_grad, differentiable=False)


def _infer_fused_dropout_relu_grad(op):
    """``_FusedDropoutReluGrad(grad, mask, keep, features) -> ((grad * mask) / keep) *
    (features > 0)``: a Relu's gradient through the dropout that follows it, the
    ``_FusedDropoutGrad`` and ``ReluGrad`` of one pass (the same pass makes it)."""
    return [(op.inputs[1].dtype, op.inputs[1].shape)]


register_op("_FusedDropoutReluGrad", infer=_infer_fused_dropout_relu_grad,
            differentiable=False)
