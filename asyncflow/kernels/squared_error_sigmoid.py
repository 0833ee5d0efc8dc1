"""The mean squared error of a sigmoid's output and the gradient's elementwise tail, one node.

Theory of operation (issue 37): an autoencoder's loss ``Mean(Square(sigmoid - x))`` runs as
``_FusedMeanSquaredError`` (the loss, the difference), ``_FusedMeanSquaredErrorGrad`` (the
difference times ``2 * grad / size``), a ``SumToShape`` back to the sigmoid's shape (nothing
to sum when the shapes agree) and ``SigmoidGrad``: four kernels one after the other, on one
thread, each a pass over the batch (the autoencoder's ~0.55 ms a step with the other core
idle, bench/bench_model_timeline.py). Where nothing else reads the intermediates,
``compile/fuse_squared_error.py`` makes them one ``_FusedMeanSquaredErrorSigmoidGrad(y, x,
grad) -> (loss, dy)`` node, whose kernel computes on CPU, for float32/float64 operands of one
shape, one compiled pass (``kernels/jit.py``) writing per element

    d = y - x;  squares = d * d;  dy = ((1 - y) * y) * (d * twice)

(``twice = (grad / size) * 2``: the gradient kernel's one-pass form, taken there when the loss
is finite) and numpy's sum of the squares: the same operations in the same order as the four
kernels, so the same bits. The pass runs whole on the calling thread: split in two at the
root of numpy's pairwise sum (the same bits) it measured slower, 0.77x of the four kernels
against 0.54x whole, and no faster in the autoencoder's step (bench/RESULTS.md, issue 37's
review). A loss that is not finite (the gradient kernel's other form), other shapes
(broadcasting), dtypes, a GPU, or numba missing run the four kernels themselves (their
registered forms), which stay the reference.
"""
from __future__ import annotations

import threading

import numpy as np

from asyncflow import errors
from asyncflow.kernels import jit
from asyncflow.kernels.registry import get_kernel, register_kernel, register_prepare

FUSED = "_FusedMeanSquaredErrorSigmoidGrad"

_local = threading.local()


@jit.loop
def _chain(y, x, twice, one, dy, squares):
    """One pass: the difference's squares and the sigmoid's input gradient (see above)."""
    for i in range(y.size):
        d = y[i] - x[i]
        squares[i] = d * d
        r = one - y[i]
        r = r * y[i]
        dy[i] = r * (d * twice)


def _scratch(count, dtype):
    """The squares' array, kept per thread and dtype (a new one of a batch's size may pay
    its page faults every step)."""
    cache = getattr(_local, "squares", None)
    if cache is None:
        cache = _local.squares = {}
    flat = cache.get(dtype)
    if flat is None or flat.size < count:
        flat = cache[dtype] = np.empty(count, dtype)
    return flat[:count]


def _fast(ctx, y, x, grad):
    """``(loss, dy)`` by the compiled pass, or None where the four kernels must run."""
    dtype = y.dtype
    if (y.shape != x.shape or y.ndim == 0 or y.size <= 1 or x.dtype != dtype
            or grad.size != 1 or grad.dtype != dtype or not y.flags.c_contiguous
            or not x.flags.c_contiguous or not jit.usable(ctx, y, x, grad)):
        return None
    count = y.size
    scale = grad.reshape(()) / dtype.type(count)
    twice = scale * dtype.type(2)
    if not np.isfinite(twice):
        return None
    one = dtype.type(1)
    flat_y, flat_x = jit.readonly(y.reshape(-1)), jit.readonly(x.reshape(-1))
    out = np.empty(count, dtype)
    squares = _scratch(count, dtype)
    _chain(flat_y, flat_x, twice, one, out, squares)
    loss = squares.sum(dtype=dtype) / count
    if not np.isfinite(loss):
        return None
    return np.asarray(loss, dtype), out.reshape(y.shape)


def _kernel_fn(op_type):
    return get_kernel(op_type, "CPU").fn


@register_kernel(FUSED)
def _fused_squared_error_sigmoid_grad(ctx, y, x, grad):
    """``(loss, dy)``: the loss of ``Mean(Square(y - x))`` and the gradient of the sigmoid's
    input (``y`` its output) for ``grad`` of the loss; see the module docstring."""
    if ctx.xp is np:
        fast = _fast(ctx, y, x, grad)
        if fast is not None:
            return fast
    loss, diff = _kernel_fn("_FusedMeanSquaredError")(ctx, y, x)
    (dy,) = _kernel_fn("_FusedMeanSquaredErrorGrad")(ctx, grad, diff, loss)
    if ctx.attrs.get("sum_to_y"):
        (dy,) = _kernel_fn("SumToShape")(ctx, dy, ctx.xp.asarray(y.shape, dtype=np.int64))
    elif dy.shape != y.shape:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"Incompatible shapes: {list(y.shape)} vs. {list(dy.shape)}")
    (out,) = _kernel_fn("SigmoidGrad")(ctx, y, dy)
    return loss, out


_warms = {}  # dtype -> the warm function jit.preload keeps track of


@register_prepare(FUSED)
def _preload(ctx):
    """Compile (or load from numba's disk cache) the pass for the node's dtype on a worker
    thread before the first step (``jit.preload``); None for other dtypes and on a GPU."""
    dtype = np.dtype(ctx.output_dtypes[0])
    if getattr(ctx, "xp", np) is not np or dtype not in jit.SUPPORTED:
        return None
    warm = _warms.get(dtype)
    if warm is None:
        def warm():
            tiny = jit.readonly(np.zeros(2, dtype))
            _chain(tiny, tiny, dtype.type(1), dtype.type(1), np.empty(2, dtype),
                   np.empty(2, dtype))
        warm = _warms.setdefault(dtype, warm)
    return jit.preload(warm)
