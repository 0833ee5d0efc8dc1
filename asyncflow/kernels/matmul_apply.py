"""A dense weight gradient and its RMSProp apply in one kernel (``_FusedMatMulApplyRMSProp``,
made by compile/fuse_matmul_apply.py; issue 37).

A training step's last kernels are a layer's weight gradient ``x^T @ dy`` (split over the
intra-op threads by rows when large) and, once the whole product is there, the variable's
apply on one thread (paired with other variables' applies, exec/pairs.py). Here each row
chunk of the split product is applied on the thread that computed it, while its rows are in
that core's cache: the apply's passes run on both cores, with no hand-off of their own.

The same bits as the two kernels: the product is split by ``intra_op.for_gemm`` with the
arguments ``MatMul``'s kernel gives it (kernels/math.py: the same chunks, so the same
rounding), and the apply is the compiled RMSProp loop, elementwise, over the chunk's
elements of the flattened arrays (kernels/training.py: each element's operations do not
depend on the range it falls in). Where ``MatMul`` would not split by rows, or the apply
would not take its compiled loop (another dtype, a GPU, numba missing), the two kernels run
one after the other, as unfused. A shape error is raised before any array changes. One update
with respect to a Ctrl-C (``sigint_hold.whole``, the split's hold inside it).
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels import blas, intra_op, jit, math as math_kernels, sigint_hold, training
from asyncflow.kernels.registry import ANY, get_kernel, register_kernel, register_prepare


def _by_rows(a, b):
    """Whether ``MatMul``'s kernel splits ``a @ b`` by rows (its own tests: ``math.splits``,
    ``math.by_rows``)."""
    return (a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]
            and math_kernels.splits(a, b) and math_kernels.by_rows(a.shape[0], b.shape[1]))


# Offloadable as ``MatMul``: a product from 64M multiply-adds (its cost: ops/training.py) runs on a
# worker thread, not on the event loop's.
@register_kernel("_FusedMatMulApplyRMSProp", offload=True, offload_scale=intra_op.MACS_PER_WORK)
@sigint_hold.whole
def _matmul_apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, a, b):
    attrs = ctx.attrs
    x, y = a, b
    if attrs["transpose_a"]:
        x = x.swapaxes(-1, -2)
    if attrs["transpose_b"]:
        y = y.swapaxes(-1, -2)
    value = var.read()
    if not (_by_rows(x, y) and value.dtype == x.dtype and jit.usable(ctx, x, y)):
        del value
        # the two kernels the unfused nodes run (the registry's, as the executor finds them)
        grad = get_kernel("MatMul", ANY).fn(ctx, a, b)[0]
        return get_kernel("ApplyRMSProp", ANY).fn(ctx, var, ms, mom, lr, rho, momentum, epsilon,
                                                  grad)
    (rows, inner), cols = x.shape, y.shape[1]
    if value.shape != (rows, cols):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: variable {var.name} has shape {list(value.shape)} "
            f"but the gradient has shape {[rows, cols]}")
    dtype = value.dtype
    del value  # (no reference held: the stored arrays may be updated in place)
    one = dtype.type(1)
    rho, lr, momentum, epsilon = [training.scalar_of(s, dtype) for s in (rho, lr, momentum,
                                                                       epsilon)]
    scalars = (one - rho, lr, momentum, epsilon)
    slots = (ms, mom)
    training.check_slots(ctx, slots, (rows, cols))
    news = [training.in_place(ctx, ref, (rows, cols), dtype) for ref in (var,) + slots]
    out = np.empty((rows, cols), dtype=dtype)
    flat = [array.reshape(-1) for array in news] + [training.loop_gradient(out, dtype)]
    mm = blas.gemm(ctx, x, y)
    split_dtype = None if mm is blas.mkl_matmul else dtype
    loop = training.rms_prop_loop

    def by_rows(start, stop):
        mm(x[start:stop], y, out[start:stop])
        loop(*flat, *scalars, start * cols, stop * cols)
    cache_bytes = 0 if math_kernels.ROW_CHUNKS_FOR_EPILOGUE_ONLY else cols * x.itemsize * 2
    try:
        intra_op.for_gemm(ctx, rows, inner * cols, by_rows, cache_bytes, split_dtype,
                          atomic=True)
    finally:
        flat.clear()  # (no view of a stored array kept queued)
    for ref, new in zip(slots, news[1:]):
        ref.assign(new, fresh=True)
    return (var.assign(news[0], validate_shape=False, fresh=True),)


register_prepare("_FusedMatMulApplyRMSProp")(
    lambda ctx: blas.preload(ctx, training.preload_loop(ctx, "ApplyRMSProp")))
