"""Kernels of Conv2D, MaxPool, AvgPool and their gradients (see ops/nn_conv.py).

Theory of operation for the spatial kernels (Conv2D, pooling and their gradients; NHWC):
- ``_geometry`` turns one spatial dimension's (size, kernel, stride, dilation, padding) into
  the output size and the zero padding before/after, exactly as TF computes SAME and VALID.
- ``_taps`` yields, for every kernel tap (i, j), a strided view of the padded input whose
  element ``[n, y, x, c]`` is the input cell that tap reads for output ``[n, y, x]``. Taps are
  plain basic slicing, so they cost nothing and work for numpy and cupy alike.
- ``_patches`` is the im2col matrix ``[N*OH*OW, KH*KW*C]``: one ``as_strided`` view
  ``[N, OH, OW, KH, KW, C]`` of the padded input, copied once by the reshape (no list of tap
  views, no ``stack``). Conv2D is one matmul with the filter reshaped to ``[KH*KW*C, O]``;
  the filter gradient is ``patches.T @ grad``. With one input channel (grayscale images)
  that copy would move runs of KW cells, so the patches are built tap-major instead (one copy
  of OW-cell rows per tap) and handed to the GEMMs transposed.
- Conv2DBackpropInput does one GEMM per tap, ``grad[N*OH*OW, O] @ filter[i, j].T``, and adds
  the contiguous ``[N, OH, OW, C]`` result into that tap's strided view of a zero padded
  buffer (for one tap the strided positions are distinct, so ``+=`` on the view is exact);
  each row of the view is a run of ``OW*C`` cells at stride 1, not a run of ``C``.
- Conv2D, its two gradients and ``_FusedConv2DBackprop`` (both gradients on one output
  gradient, fused at compile time) first ask ``nn_conv_fft.choose``: for stride 1, no
  dilation and shapes where its cost model predicts the FFT algorithm faster (the convnet's
  14x14 5x5 layer), ``kernels/nn_conv_fft.py`` computes them; one input channel takes
  ``kernels/nn_conv_loops.py``'s compiled loops where they apply; else the code below.
- Pooling reduces over the taps elementwise. MaxPool is TF's CPU kernel: the largest cell
  that is not NaN, and never below the dtype's lowest finite value (a window of -inf or NaN
  only gives that lowest). MaxPoolGrad routes each output's gradient as TF's CPU kernel,
  which starts each window at its first real (unpadded) cell and moves on to a strictly
  greater one: to the first maximal non-NaN cell in row-major tap order, except where the
  first real cell is NaN or nothing beats -inf, where that first cell keeps it
  (``_first_cells``); taps are visited in order with a ``remaining`` mask,
  and the masks are applied by multiplication (10-20x cheaper than ``where``) unless the
  gradient holds an inf or NaN, where ``0 * inf`` would leak a NaN; then ``where`` routes it.
  Where windows tile, each tap writes its cells by a masked copy into zeros: the other
  cells +0 as in TF's zeroed output, and the gradient taken as ``0 + g`` (+0 for -0).
  AvgPool divides by the number of real (unpadded) cells, as TF. Where the compile pass pairs
  a MaxPool with its own gradient, ``kernels/nn_pool_taps.py`` routes by the forward's taps.
  On CPU for float32/float64 the max pools run ``kernels/pool_loops.py``'s compiled loops.
- Every kernel splits its batch into contiguous chunks over the device's intra-op threads
  (``kernels/intra_op.py``): each chunk writes its own rows of a preallocated output, so
  the split changes no bits where the per-row work is exact; the filter gradient adds the
  chunks' partial sums in chunk order.
- ``data_format="NCHW"`` (``_layout``): the kernel transposes its NCHW arguments to NHWC
  (one contiguous copy each), runs the NHWC computation with the attrs reordered, and
  transposes the result back: the same bits as an NHWC op between two transposes, at its
  cost plus the two copies (no NCHW path is faster: GEMMs want the channels contiguous).

Kernels never modify their inputs; outputs are fresh arrays.
"""
from __future__ import annotations

import functools

import numpy as np

from asyncflow import errors
from asyncflow.kernels import blas, intra_op, jit, nn_conv_fft, nn_conv_loops, pool_loops
from asyncflow.kernels.arguments import is_floating
from asyncflow.kernels.epilogue import fused_epilogue
from asyncflow.kernels.pool_ties import all_above_minus_inf, window_max
from asyncflow.kernels.registry import host_memory, register_kernel, register_prepare


# -- layouts ----------------------------------------------------------------------------------
_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)


class _NhwcContext:
    """A kernel context whose attrs read as NHWC (strides, ksize, dilations reordered);
    everything else is the real context's."""

    __slots__ = ("_ctx", "attrs")

    def __init__(self, ctx):
        self._ctx = ctx
        attrs = dict(ctx.attrs)
        for key in ("strides", "ksize", "dilations"):
            if key in attrs:
                attrs[key] = tuple(attrs[key][i] for i in _TO_NHWC)
        attrs["data_format"] = "NHWC"
        self.attrs = attrs

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _layout(arrays=(), sizes=(), output=True):
    """Decorator: run an NHWC kernel on ``data_format="NCHW"`` arguments (module docstring).
    ``arrays``: positions of 4-d data inputs; ``sizes``: positions of size vectors in the
    data's layout; ``output``: whether the result is data (a filter gradient is not)."""
    def decorate(kernel):
        @functools.wraps(kernel)
        def run(ctx, *args):
            data_format = ctx.attrs.get("data_format")
            if data_format in (None, "NHWC"):
                return kernel(ctx, *args)
            if data_format != "NCHW":
                raise errors.InvalidArgumentError(
                    None, ctx.name, f"data_format {data_format!r} is not supported; use NHWC "
                    "or NCHW")
            xp, args = ctx.xp, list(args)
            for position in arrays:
                if args[position].ndim != 4:
                    raise errors.InvalidArgumentError(
                        None, ctx.name, f"input {position} must be 4-dimensional (NCHW), got "
                        f"shape {list(args[position].shape)}")
                args[position] = xp.ascontiguousarray(args[position].transpose(_TO_NHWC))
            for position in sizes:
                dims = np.asarray(args[position]).reshape(-1)
                args[position] = dims[list(_TO_NHWC)] if dims.size == 4 else dims
            results = kernel(_NhwcContext(ctx), *args)
            if not output:
                return results
            return tuple(xp.ascontiguousarray(r.transpose(_TO_NCHW)) for r in results)
        return run
    return decorate


# -- spatial geometry -----------------------------------------------------------------------
def _geometry(size, kernel, stride, dilation, padding, name):
    """``(out, pad_before, pad_after)`` of one spatial dimension, as TF computes them."""
    effective = (kernel - 1) * dilation + 1
    if padding == "VALID":
        if size < effective:
            raise errors.InvalidArgumentError(
                None, name, f"Computed output size would be negative: input size {size} is "
                f"smaller than the (dilated) window {effective} with VALID padding")
        out = (size - effective) // stride + 1
        return out, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2, total - total // 2


def _spatial(ctx, shape, kernel_hw):
    """Geometry of both spatial dims: ``((oh, top, bottom), (ow, left, right))``."""
    strides, padding = ctx.attrs["strides"], ctx.attrs["padding"]
    dilations = ctx.attrs.get("dilations", (1, 1, 1, 1))
    return tuple(_geometry(shape[1 + d], kernel_hw[d], strides[1 + d], dilations[1 + d],
                           padding, ctx.name) for d in range(2))


def _pad(xp, x, rows, cols, value=0):
    (_, top, bottom), (_, left, right) = rows, cols
    if not (top or bottom or left or right):
        return x
    return xp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def _padded_shape(shape, rows, cols):
    return (shape[0], shape[1] + rows[1] + rows[2], shape[2] + cols[1] + cols[2], shape[3])


def _taps(padded, kernel_hw, strides, dilations, out_hw):
    """Yield one strided view per kernel tap, in row-major tap order (see module docstring)."""
    (kh, kw), (oh, ow) = kernel_hw, out_hw
    sh, sw, dh, dw = strides[1], strides[2], dilations[1], dilations[2]
    for i in range(kh):
        for j in range(kw):
            yield padded[:, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw, :]


def _tap_args(ctx, kernel_hw, rows, cols):
    return (kernel_hw, ctx.attrs["strides"], ctx.attrs.get("dilations", (1, 1, 1, 1)),
            (rows[0], cols[0]))


def _crop(padded, rows, cols, height, width):
    return padded[:, rows[1]:rows[1] + height, cols[1]:cols[1] + width, :]


def _patches(xp, x, ctx, kernel_hw, rows, cols):
    """The ``[N*OH*OW, KH*KW*C]`` patch matrix of ``x``: one strided view, copied once (numpy;
    other array modules stack the tap views, as portable basic slicing)."""
    padded = xp.ascontiguousarray(_pad(xp, x, rows, cols))
    (kh, kw), strides, dilations, (oh, ow) = _tap_args(ctx, kernel_hw, rows, cols)
    n, _, _, depth = padded.shape
    if type(padded) is not np.ndarray:
        views = list(_taps(padded, *_tap_args(ctx, kernel_hw, rows, cols)))
        return xp.stack(views, axis=3).reshape(n * oh * ow, kh * kw * depth)
    if depth == 1:
        # One channel: the as_strided copy below would move runs of KW cells; one copy per
        # tap moves rows of OW cells (4.3x faster for the convnet's [128, 28, 28, 1] 5x5:
        # 0.57 against 2.47 ms). Tap-major, returned transposed: the GEMMs take it as it is.
        taps = np.empty((kh * kw, n, oh, ow), dtype=padded.dtype)
        for tap, view in enumerate(_taps(padded, *_tap_args(ctx, kernel_hw, rows, cols))):
            taps[tap] = view[..., 0]
        return taps.reshape(kh * kw, n * oh * ow).T
    s_n, s_h, s_w, s_c = padded.strides
    view = np.lib.stride_tricks.as_strided(
        padded, (n, oh, ow, kh, kw, depth),
        (s_n, s_h * strides[1], s_w * strides[2], s_h * dilations[1], s_w * dilations[2], s_c))
    return view.reshape(n * oh * ow, kh * kw * depth)


def _sizes(ctx, tensor, what):
    dims = [int(d) for d in tensor.reshape(-1).tolist()]
    if len(dims) != 4 or any(d < 0 for d in dims):
        raise errors.InvalidArgumentError(None, ctx.name, f"{what} must be 4 non-negative "
                                                          f"sizes, got {dims}")
    return dims


def _check_depth(ctx, x_shape, filter_shape):
    if x_shape[3] != filter_shape[2]:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"input depth {x_shape[3]} does not match the filter's input depth "
            f"{filter_shape[2]} (input {list(x_shape)}, filter {list(filter_shape)})")


# -- convolution ----------------------------------------------------------------------------
@register_kernel("Conv2D", offload=True, offload_scale=intra_op.MACS_PER_WORK)
@_layout(arrays=(0,))
def _conv2d(ctx, x, filters):
    return (_convolve(ctx, x, filters),)


@register_kernel("_FusedConv2D", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _fused_conv2d(ctx, x, filters, bias):
    """Conv2D, BiasAdd [, Relu] in one pass over each chunk (compile/optimize.py fuses them)."""
    return (_fused_convolve(ctx, x, filters, bias),)


def _fused_convolve(ctx, x, filters, bias, kept=None):
    """``_convolve`` with the fused ops' epilogue (``kept``: as there)."""
    if bias.shape != (filters.shape[3],):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"bias has shape {list(bias.shape)}, expected [{filters.shape[3]}]")
    return _convolve(ctx, x, filters, fused_epilogue(ctx.xp, ctx.attrs["fused_ops"], bias),
                     kept, (ctx.attrs["fused_ops"], bias))


@register_kernel("_FusedConv2DWithSpectra", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _fused_conv2d_with_spectra(ctx, x, filters, bias):
    """``_FusedConv2D``, and the input's and filter's spectra where the FFT algorithm ran
    (``nn_conv_fft.conv2d``; empty else): compile/conv_spectra.py hands them to the backprop."""
    kept = []
    out = _fused_convolve(ctx, x, filters, bias, kept)
    if not kept:
        return out, ctx.xp.empty((0,), dtype=x.dtype)
    return out, kept[0]


def _convolve(ctx, x, filters, epilogue=None, kept=None, fused=None):
    """Conv2D by batch chunks: patches, one GEMM into the chunk's output rows, then
    ``epilogue(rows)`` on them while they are in cache. ``kept``: a list the FFT algorithm
    appends its input's and filter's spectra to (``nn_conv_fft.conv2d``); ``fused``: the ops
    fused and the bias the epilogue applies (for the compiled loops of either path)."""
    xp = ctx.xp
    _check_depth(ctx, x.shape, filters.shape)
    kh, kw, _, depth_out = filters.shape
    rows, cols = _spatial(ctx, x.shape, (kh, kw))
    out_shape = (x.shape[0], rows[0], cols[0], depth_out)
    if 0 in out_shape or x.size == 0:
        out = xp.zeros(out_shape, dtype=x.dtype)
        if epilogue is not None and out.size:
            epilogue(out.reshape(-1, depth_out))
        return out
    out = xp.empty(out_shape, dtype=xp.result_type(x.dtype, filters.dtype))
    plan = nn_conv_fft.choose(ctx, (x, filters), x.shape, filters.shape, rows, cols,
                              out.dtype)
    if plan is not None:
        return nn_conv_fft.conv2d(ctx, plan, x, filters, out, epilogue, kept, fused)
    if nn_conv_loops.forward(ctx, x, filters, rows, cols, out, fused):
        return out
    matrix, per_image = filters.reshape(-1, depth_out), rows[0] * cols[0]
    whole = (x.shape[0] * per_image, matrix.shape[0], depth_out)  # (blas: one library)

    def chunk(start, stop):
        patches = _patches(xp, x[start:stop], ctx, (kh, kw), rows, cols)
        result = out[start:stop].reshape(-1, depth_out)
        blas.gemm(ctx, patches, matrix, whole)(patches, matrix, result)
        if epilogue is not None:
            epilogue(result)
    intra_op.for_batch(ctx, x.shape[0], per_image * matrix.size // intra_op.MACS_PER_WORK, chunk,
                       per_image * filters.shape[0] * filters.shape[1] * x.shape[3] * x.itemsize)
    return out


@register_kernel("Conv2DBackpropInput", offload=True, offload_scale=intra_op.MACS_PER_WORK)
@_layout(arrays=(2,), sizes=(0,))
def _conv2d_backprop_input(ctx, input_sizes, filters, grad):
    xp = ctx.xp
    x_shape = _sizes(ctx, input_sizes, "input_sizes")
    _check_depth(ctx, x_shape, filters.shape)
    kh, kw, depth_in, depth_out = filters.shape
    rows, cols = _spatial(ctx, x_shape, (kh, kw))
    expected = [x_shape[0], rows[0], cols[0], depth_out]
    if list(grad.shape) != expected:
        raise errors.InvalidArgumentError(None, ctx.name, f"out_backprop has shape "
                                          f"{list(grad.shape)}, expected {expected}")
    dtype = xp.result_type(grad.dtype, filters.dtype)
    if not (grad.size and filters.size):
        return (xp.zeros(x_shape, dtype=dtype),)
    out = xp.empty(x_shape, dtype=dtype)
    plan = nn_conv_fft.choose(ctx, (grad, filters), x_shape, filters.shape, rows, cols, dtype)
    if plan is not None:
        return (nn_conv_fft.backprop_input(ctx, plan, filters, grad, out),)
    # One [O, C] matrix per tap, transposed once: the GEMMs below read it contiguously.
    per_tap = xp.ascontiguousarray(filters.reshape(kh * kw, depth_in, depth_out)
                                   .transpose(0, 2, 1))
    tap_args = _tap_args(ctx, (kh, kw), rows, cols)
    whole = (x_shape[0] * rows[0] * cols[0], depth_out, depth_in)  # a tap's, every image

    def chunk(start, stop):
        count, flat = stop - start, grad[start:stop].reshape(-1, depth_out)
        padded = xp.zeros(_padded_shape([count] + x_shape[1:], rows, cols), dtype=dtype)
        columns = xp.empty((flat.shape[0], depth_in), dtype=dtype)
        mm = blas.gemm(ctx, flat, per_tap[0], whole)
        for tap, view in enumerate(_taps(padded, *tap_args)):
            mm(flat, per_tap[tap], columns)
            view += columns.reshape(count, rows[0], cols[0], depth_in)
        out[start:stop] = _crop(padded, rows, cols, x_shape[1], x_shape[2])
    padded_cells = (x_shape[1] + rows[1] + rows[2]) * (x_shape[2] + cols[1] + cols[2])
    intra_op.for_batch(ctx, x_shape[0],
                       rows[0] * cols[0] * filters.size // intra_op.MACS_PER_WORK, chunk,
                       (padded_cells * depth_in + rows[0] * cols[0] * depth_in) * grad.itemsize)
    return (out,)


@register_kernel("Conv2DBackpropFilter", offload=True, offload_scale=intra_op.MACS_PER_WORK)
@_layout(arrays=(0, 2), output=False)
def _conv2d_backprop_filter(ctx, x, filter_sizes, grad):
    xp = ctx.xp
    f_shape = _sizes(ctx, filter_sizes, "filter_sizes")
    _check_depth(ctx, x.shape, f_shape)
    kh, kw, depth_in, depth_out = f_shape
    rows, cols = _spatial(ctx, x.shape, (kh, kw))
    if grad.size == 0 or x.size == 0:
        return (xp.zeros(f_shape, dtype=x.dtype),)
    dtype = xp.result_type(x.dtype, grad.dtype)
    plan = nn_conv_fft.choose(ctx, (x, grad), x.shape, f_shape, rows, cols, dtype)
    if plan is not None:
        return (nn_conv_fft.backprop_filter(ctx, plan, x, grad, f_shape, dtype),)
    looped = nn_conv_loops.filter_grad(ctx, x, grad, f_shape, rows, cols)
    if looped is not None:
        return (looped,)
    partials, patch_row = {}, kh * kw * depth_in
    whole = (patch_row, x.shape[0] * rows[0] * cols[0], depth_out)  # (blas: one library)

    def chunk(start, stop):
        dy = grad[start:stop].reshape(-1, depth_out)
        partials[start] = blas.matmul(ctx, _patches(xp, x[start:stop], ctx, (kh, kw), rows,
                                                    cols).T, dy, whole)
    intra_op.for_batch(ctx, x.shape[0],
                       rows[0] * cols[0] * patch_row * depth_out // intra_op.MACS_PER_WORK,
                       chunk, rows[0] * cols[0] * patch_row * x.itemsize)
    ordered = [partials[start] for start in sorted(partials)]
    total = ordered[0]
    for partial in ordered[1:]:
        total += partial
    return (total.reshape(f_shape),)


@register_kernel("_FusedConv2DBackpropWithSpectra", offload=True,
                 offload_scale=intra_op.MACS_PER_WORK)
def _fused_conv2d_backprop_with_spectra(ctx, input_sizes, filters, grad, x, filter_sizes,
                                        spectra):
    """``_FusedConv2DBackprop`` given the forward's x and filter spectra (compile/conv_spectra.py;
    used where the FFT algorithm runs here too and they fit its plan, else ignored)."""
    return _fused_conv2d_backprop(ctx, input_sizes, filters, grad, x, filter_sizes, spectra)


@register_kernel("_FusedConv2DBackprop", offload=True, offload_scale=intra_op.MACS_PER_WORK)
def _fused_conv2d_backprop(ctx, input_sizes, filters, grad, x, filter_sizes, spectra=None):
    """Conv2DBackpropInput and Conv2DBackpropFilter on one ``grad`` (compile/optimize.py
    fuses them, NHWC only): by FFT where both apply, ``grad`` is transformed once for both;
    otherwise the two kernels above, one after the other (the same bits as unfused)."""
    xp = ctx.xp
    f_shape = _sizes(ctx, filter_sizes, "filter_sizes")
    x_shape = _sizes(ctx, input_sizes, "input_sizes")
    if (list(x.shape) == x_shape and list(filters.shape) == f_shape and grad.size and x.size
            and filters.size and x.dtype == filters.dtype == grad.dtype):
        _check_depth(ctx, x_shape, f_shape)
        rows, cols = _spatial(ctx, x_shape, f_shape[:2])
        expected = [x_shape[0], rows[0], cols[0], f_shape[3]]
        plan = (nn_conv_fft.choose(ctx, (x, filters, grad), x_shape, f_shape, rows, cols,
                                   x.dtype) if list(grad.shape) == expected else None)
        if plan is not None:
            dx = xp.empty(x_shape, dtype=x.dtype)
            return nn_conv_fft.backprop_both(ctx, plan, x, filters, grad, dx, spectra)
    return (_conv2d_backprop_input(ctx, input_sizes, filters, grad)[0],
            _conv2d_backprop_filter(ctx, x, filter_sizes, grad)[0])


# Where each convolution's input and filter shapes are known at plan time: an input's (its
# position) or the output's ("out").
_SHAPES_OF = {"Conv2D": (0, 1), "_FusedConv2D": (0, 1), "_FusedConv2DWithSpectra": (0, 1),
              "Conv2DBackpropInput": ("out", 1), "Conv2DBackpropFilter": (0, "out"),
              "_FusedConv2DBackprop": (3, 1), "_FusedConv2DBackpropWithSpectra": (3, 1)}


def _fft_preload(ctx):
    """Prepare hook of the convolutions: ``nn_conv_fft.preload`` by the node's static shapes
    (None where they are not 4-d, and once scipy.fft is loaded). A dimension unknown here is
    tried at the sizes of ``nn_conv_fft.candidate_shapes``: the cost model may pick the FFT
    path for a size it takes when the step runs that is small enough to run on the loop."""
    if not nn_conv_fft.may_preload(ctx):
        return None
    op = ctx.op
    shapes = [op.out_spec(0)[1] if where == "out" else op.inputs[where][0].out_spec(
        op.inputs[where][1])[1] for where in _SHAPES_OF[ctx.type]]
    if any(shape.rank != 4 for shape in shapes):
        return None
    (x_shape, f_shape), nhwc = [s.as_list() for s in shapes], ctx
    if ctx.attrs.get("data_format") == "NCHW":
        x_shape, nhwc = [x_shape[i] for i in _TO_NHWC], _NhwcContext(ctx)
    if None in f_shape[:2]:  # (an unknown window: whenever the attrs allow the FFT path)
        return nn_conv_fft.preload(nhwc, (), ctx.output_dtypes[0], unknown_window=True)
    if x_shape[3] is None:
        x_shape[3] = f_shape[2]
    attrs = nhwc.attrs
    key = (tuple(x_shape), tuple(f_shape), tuple(attrs["strides"]),
           tuple(attrs.get("dilations", ())), attrs["padding"], str(ctx.output_dtypes[0]),
           nn_conv_fft.FORCE)
    if key not in _PRELOADS:  # (up to 150 shapes tried: ~3 ms, once per kind of node)
        if len(_PRELOADS) >= 1024:
            _PRELOADS.clear()

        def geometries():
            for shape, filters in nn_conv_fft.candidate_shapes(x_shape, f_shape):
                try:
                    rows, cols = _spatial(nhwc, shape, filters[:2])
                except errors.OpError:  # (the kernel reports it when it runs)
                    continue
                yield shape, filters, rows, cols
        _PRELOADS[key] = nn_conv_fft.preload(nhwc, geometries(), ctx.output_dtypes[0])
    return _PRELOADS[key]


_PRELOADS = {}  # _fft_preload's answers by shapes and attrs, while scipy.fft is not loaded


def _prepare(ctx):
    """Prepare hook of the convolutions: ``_fft_preload``, ``blas.preload``, ``nn_conv_loops``."""
    where, op = _SHAPES_OF[ctx.type][1], ctx.op
    spec = op.out_spec(0) if where == "out" else op.inputs[where][0].out_spec(op.inputs[where][1])
    f_shape = spec[1].as_list() if spec[1].rank == 4 else [None] * 4
    return nn_conv_loops.preload(ctx, f_shape, blas.preload(ctx, _fft_preload(ctx)))


for _type in _SHAPES_OF:
    register_prepare(_type)(_prepare)


# -- pooling ----------------------------------------------------------------------------------
def _lowest(dtype):
    return -np.inf if is_floating(dtype) else np.iinfo(dtype).min


def _first_cells(xp, x, kernel_hw, strides, rows, cols):
    """Each window's first real (unpadded) cell: its values ``[n, OH, OW, C]`` and its
    row-major tap index (``[OH, OW, 1]``, or 0 for all where nothing is padded above or left:
    then the values are a strided view of ``x``). TF's CPU MaxPoolGrad starts every window
    there and moves on only to a strictly greater cell, so the first cell keeps the gradient
    where it is NaN or where no cell beats -inf."""
    if not (rows[1] or cols[1]):
        return x[:, :rows[0] * strides[1]:strides[1], :cols[0] * strides[2]:strides[2]], 0
    row0 = np.arange(rows[0]) * strides[1] - rows[1]
    col0 = np.arange(cols[0]) * strides[2] - cols[1]
    first_row, first_col = np.maximum(row0, 0), np.maximum(col0, 0)
    tap = (first_row - row0)[:, None] * kernel_hw[1] + (first_col - col0)[None, :]
    values = x[:, xp.asarray(first_row)][:, :, xp.asarray(first_col)]
    return values, xp.asarray(tap[:, :, None])


def _first_cell_keeps(xp, x, best, kernel_hw, strides, rows, cols):
    """(the windows whose first real cell takes the gradient, that cell's tap index), or None
    where there are none: a NaN first cell, or a maximum (``fmax``, NaN ignored) of -inf."""
    if not is_floating(x.dtype):
        return None
    first, tap = _first_cells(xp, x, kernel_hw, strides, rows, cols)
    keeps = xp.isnan(first)
    keeps |= best == -np.inf
    return (keeps, tap) if bool(keeps.any()) else None


def _pool_setup(ctx, shape):
    kernel_hw = tuple(ctx.attrs["ksize"][1:3])
    rows, cols = _spatial(ctx, shape, kernel_hw)
    return kernel_hw, rows, cols


@register_kernel("MaxPool", offload=True)
@_layout(arrays=(0,))
def _max_pool(ctx, x):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    out_shape = (x.shape[0], rows[0], cols[0], x.shape[3])
    if 0 in out_shape:
        return (xp.zeros(out_shape, dtype=x.dtype),)
    out = xp.empty(out_shape, dtype=x.dtype)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    if jit.usable(ctx, x):  # the same bits in one pass (kernels/pool_loops.py)
        return (pool_loops.max_pool(ctx, x, out, kernel_hw, rows, cols),)

    def chunk(start, stop):
        padded = _pad(xp, x[start:stop], rows, cols, _lowest(x.dtype))
        window_max(xp, list(_taps(padded, *tap_args)), out[start:stop])
    intra_op.for_batch(ctx, x.shape[0], out[0].size * kernel_hw[0] * kernel_hw[1], chunk,
                       x[0].size * x.itemsize)
    return (out,)


@register_kernel("MaxPoolGrad", offload=True)
@_layout(arrays=(0, 1, 2))
def _max_pool_grad(ctx, x, _output, grad):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    if grad.size == 0:
        return (xp.zeros(x.shape, dtype=grad.dtype),)
    out = xp.empty(x.shape, dtype=grad.dtype)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    finite = not is_floating(grad.dtype) or bool(xp.isfinite(grad).all())
    # Windows that do not overlap and tile the padded input: each tap writes its cells once,
    # so the taps assign into an uninitialized buffer instead of adding into a zeroed one.
    strides = ctx.attrs["strides"]
    tiled = (strides[1] == kernel_hw[0] and strides[2] == kernel_hw[1]
             and x.shape[1] + rows[1] + rows[2] == rows[0] * strides[1]
             and x.shape[2] + cols[1] + cols[2] == cols[0] * strides[2])
    # Without padding the chunk's gradient is written straight into its rows of ``out``
    # (no padded buffer, no copy of it back).
    unpadded = not (rows[1] or rows[2] or cols[1] or cols[2])
    if pool_loops.usable(ctx, kernel_hw, x, grad):  # the winners, then routed (pool_loops.py)
        return (pool_loops.max_pool_grad(ctx, x, grad, out, kernel_hw, rows, cols, tiled),)

    def chunk(start, stop):
        padded = _pad(xp, x[start:stop], rows, cols, _lowest(x.dtype))
        taps = list(_taps(padded, *tap_args))
        # The window maximum over its non-NaN cells (padding is -inf, so no padded cell
        # equals it where it beats -inf); elsewhere the first real cell keeps the gradient.
        best = xp.array(taps[0], copy=True)
        for view in taps[1:]:
            xp.maximum(best, view, out=best)
        keeps = None
        if not all_above_minus_inf(best):  # a NaN or -inf: NaN never wins (fmax)
            xp.copyto(best, taps[0])
            for view in taps[1:]:
                xp.fmax(best, view, out=best)
            keeps = _first_cell_keeps(xp, x[start:stop], best, kernel_hw, strides, rows, cols)
        g = grad[start:stop] + grad.dtype.type(0) if tiled else grad[start:stop]
        if unpadded:
            result = out[start:stop]
            if not tiled:
                result.fill(0)
        else:
            result = (xp.empty if tiled else xp.zeros)(padded.shape, dtype=grad.dtype)
        # until a cell of the window has won (at once where the first real cell keeps it)
        remaining = xp.ones(best.shape, dtype=bool) if keeps is None else ~keeps[0]
        hit = xp.empty(best.shape, dtype=bool)
        routed = None if tiled else xp.empty(best.shape, dtype=grad.dtype)
        last = len(taps) - 1
        for tap, (view, target) in enumerate(zip(taps, _taps(result, *tap_args))):
            xp.equal(view, best, out=hit)
            hit &= remaining                         # the first maximal cell wins
            if tap != last:
                remaining ^= hit
            if keeps is not None:
                hit |= keeps[0] & (keeps[1] == tap)
            _route(xp, g, hit, target, tiled, finite, routed)
        if not unpadded:
            out[start:stop] = _crop(result, rows, cols, x.shape[1], x.shape[2])
    intra_op.for_batch(ctx, x.shape[0], grad[0].size * kernel_hw[0] * kernel_hw[1] * 6, chunk,
                       (2 * x[0].size + 3 * grad[0].size) * grad.itemsize)
    return (out,)


def _route(xp, g, hit, target, tiled, finite, routed):
    """Add (or, where the windows tile, write) ``g`` where ``hit`` into one tap's ``target``
    view: masks on bools (a byte a cell) and one multiply, into the scratch ``routed`` where
    windows overlap; where() only for inf/NaN gradients, since 0 * inf is NaN. A tiled
    window's other cells get +0, as TF1's zeroed output does (``g * False`` would be -0
    where ``g`` is negative); the callers pass ``g + 0`` there (TF1's ``0 + g``: +0 for -0)."""
    if tiled:
        target.fill(0)
        xp.copyto(target, g, where=hit)
    elif finite:
        xp.multiply(g, hit, out=routed)
        target += routed
    else:
        target += xp.where(hit, g, g.dtype.type(0))


def _window_counts(xp, rows, cols, shape, ctx, kernel_hw, dtype):
    """How many real (unpadded) cells each output window covers, ``[1, OH, OW, 1]``."""
    counts = []
    for (out, before, _), size, k, d in zip((rows, cols), shape[1:3], kernel_hw, (1, 2)):
        starts = np.arange(out) * ctx.attrs["strides"][d] - before
        counts.append(np.clip(starts + k, 0, size) - np.clip(starts, 0, size))
    table = np.outer(counts[0], counts[1]).astype(dtype)
    return xp.asarray(table.reshape(1, rows[0], cols[0], 1))


@register_kernel("AvgPool", offload=True)
@_layout(arrays=(0,))
def _avg_pool(ctx, x):
    xp = ctx.xp
    kernel_hw, rows, cols = _pool_setup(ctx, x.shape)
    out_shape = (x.shape[0], rows[0], cols[0], x.shape[3])
    if 0 in out_shape:
        return (xp.zeros(out_shape, dtype=x.dtype),)
    counts = _window_counts(xp, rows, cols, x.shape, ctx, kernel_hw, x.dtype)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    out = xp.empty(out_shape, dtype=x.dtype)

    def chunk(start, stop):
        padded = _pad(xp, x[start:stop], rows, cols)
        total = functools.reduce(xp.add, _taps(padded, *tap_args))
        xp.divide(total, counts, out=out[start:stop])
    intra_op.for_batch(ctx, x.shape[0], out[0].size * kernel_hw[0] * kernel_hw[1], chunk,
                       2 * x[0].size * x.itemsize)
    return (out,)


@register_kernel("AvgPoolGrad", offload=True)
@_layout(arrays=(1,), sizes=(0,))
def _avg_pool_grad(ctx, input_shape, grad):
    xp = ctx.xp
    shape = _sizes(ctx, input_shape, "orig_input_shape")
    kernel_hw, rows, cols = _pool_setup(ctx, shape)
    if not grad.size:
        return (xp.zeros(shape, dtype=grad.dtype),)
    counts = _window_counts(xp, rows, cols, shape, ctx, kernel_hw, grad.dtype)
    tap_args = _tap_args(ctx, kernel_hw, rows, cols)
    out = xp.empty(shape, dtype=grad.dtype)
    unpadded = not (rows[1] or rows[2] or cols[1] or cols[2])

    def chunk(start, stop):
        if unpadded:  # accumulate straight into the chunk's rows of ``out``
            result = out[start:stop]
            result.fill(0)
        else:
            result = xp.zeros(_padded_shape([stop - start] + shape[1:], rows, cols),
                              dtype=grad.dtype)
        share = grad[start:stop] / counts
        for view in _taps(result, *tap_args):
            view += share
        if not unpadded:
            out[start:stop] = _crop(result, rows, cols, shape[1], shape[2])
    intra_op.for_batch(ctx, shape[0], grad[0].size * kernel_hw[0] * kernel_hw[1], chunk,
                       2 * grad[0].size * kernel_hw[0] * kernel_hw[1] * grad.itemsize)
    return (out,)


# Arguments kept in host memory on a GPU (TF's HostMemory registrations; exec/gpu.py).
host_memory("Conv2DBackpropInput", inputs=(0,))
host_memory("Conv2DBackpropFilter", inputs=(1,))
host_memory("_FusedConv2DBackprop", inputs=(0, 4))
host_memory("AvgPoolGrad", inputs=(0,))
