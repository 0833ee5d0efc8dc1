"""Differential fuzz of convolutions, pooling and the image/``tf.nn`` ops around them against TF1.

The same machinery as test_tf1_array_fuzz.py (one TF1 subprocess for every case, the same
source run here through ``asyncflow.compat.v1``), over the kernels issue 37 rebuilt for speed:
conv1d/conv2d (strides larger than the kernel, dilations, kernels larger than the input under
SAME, 1x1), conv2d_transpose, atrous, depthwise and separable convolutions, max/avg pooling
(ties, NaN and infinities), bias_add, lrn, softmax and log_softmax on an axis, the
cross-entropies at extreme logits, and the resize/crop image ops, in NHWC and NCHW and in
float16/32/64, with their gradients (``grad(y, xs)``: ``tf.gradients`` of ``y`` with a fixed,
uneven upstream gradient). A ``Conv2D -> BiasAdd [-> Relu]`` chain whose intermediate is not
fetched is fused by the compile pass here (``_FusedConv2D``, and the two gradients of one
conv ``_FusedConv2DBackprop``); TF1 runs it op by op. asyncflow has no conv3d and no 3-D
pools, so none is drawn; conv2d's explicit padding and the 1-D pools are drawn by
``_explicit_and_1d`` (their own test). TF runs its own CPU kernels
(``TF_ENABLE_ONEDNN_OPTS=0``; oneDNN's disagree with them, see ``DIFFERENCES``), which have
no NCHW: TF's side computes NCHW as NHWC between transposes. The default run draws a few
cases per family (seed 0) and the hand-picked ``EDGES``; the long form (``--runslow``) many
more. A failing case becomes a focused regression test without TensorFlow
(tests/ops/test_conv_tf1_values.py).
"""
import numpy as np
import pytest

from test_tf1_array_fuzz import DRIVER as _ARRAY_DRIVER, compare_outcomes, run_fuzz

# ``grad(y, xs)``: the gradients of ``y`` for ``xs`` with the upstream gradient
# ``((7 k) mod 11 - 5) / 4`` at flat position k: uneven, exact in every float dtype (the same
# on both sides), independent of y.
_GRAD = """
def _grad(y, xs):
    w = tf.cast(tf.floormod(tf.range(tf.size(y)) * 7, 11) - 5, y.dtype) * 0.25
    w = tf.reshape(w, tf.shape(y))
    return [g for g in tf.gradients(y, xs, grad_ys=w)]
"""
# TF's own CPU kernels (oneDNN off, see ``_fuzz``) compute NHWC only: on TF's side an NCHW
# (NCW) convolution or pool is its NHWC form between transposes, attrs reordered.
_NCHW_ON_TF = """
if tf.__name__.startswith("tensorflow"):
    def _nhwc(x):
        return tf.transpose(x, [0, 2, 3, 1])

    def _nchw(y):
        return tf.transpose(y, [0, 3, 1, 2])

    def _hw(v):
        return [v[0], v[2], v[3], v[1]] if isinstance(v, (list, tuple)) and len(v) == 4 else v

    def _shim(fn, spatial):
        def wrapped(x, *args, data_format=None, **kwargs):
            if data_format not in ("NCHW", "NCW"):
                return fn(x, *args, data_format=data_format, **kwargs)
            args = [_hw(a) if i in spatial else a for i, a in enumerate(args)]
            kwargs = {k: _hw(v) for k, v in kwargs.items()}
            if data_format == "NCW":
                return tf.transpose(fn(tf.transpose(x, [0, 2, 1]), *args, data_format="NWC",
                                       **kwargs), [0, 2, 1])
            return _nchw(fn(_nhwc(x), *args, data_format="NHWC", **kwargs))
        return wrapped

    tf.nn.conv2d = _shim(tf.nn.conv2d, {1})
    tf.nn.conv1d = _shim(tf.nn.conv1d, set())
    tf.nn.max_pool1d = _shim(tf.nn.max_pool1d, set())
    tf.nn.avg_pool1d = _shim(tf.nn.avg_pool1d, set())
    tf.nn.conv2d_transpose = _shim(tf.nn.conv2d_transpose, {1, 2})
    tf.nn.max_pool = _shim(tf.nn.max_pool, {0, 1})
    tf.nn.avg_pool = _shim(tf.nn.avg_pool, {0, 1})
    tf.nn.depthwise_conv2d = _shim(tf.nn.depthwise_conv2d, {1})
    tf.nn.separable_conv2d = _shim(tf.nn.separable_conv2d, {2})
"""
DRIVER = _GRAD + _NCHW_ON_TF + _ARRAY_DRIVER.replace(
    '_env = {"tf": tf, "np": np}', '_env = {"tf": tf, "np": np, "grad": _grad}')
assert "_grad}" in DRIVER

FLOATS = ("float16", "float32", "float64")


def _dtype(rng, floats=FLOATS):
    return str(rng.choice(floats, p=[0.2, 0.5, 0.3] if len(floats) == 3 else None))


def _values(rng, shape, dtype, special=0.0, nonfinite=True):
    """Normal draws; with probability ``special`` small integers (ties) and (``nonfinite``)
    sometimes a NaN or an inf."""
    if rng.random() < special:
        x = rng.integers(-2, 3, size=shape).astype(dtype)
        if x.size and nonfinite and rng.random() < 0.5:
            x.reshape(-1)[rng.integers(x.size)] = rng.choice([np.nan, np.inf, -np.inf])
        return x
    return rng.standard_normal(shape).astype(dtype)


def _layout(rng, dtype=None):
    return str(rng.choice(["NHWC", "NCHW"]))


def _to(layout, x):
    """An NHWC array in ``layout``."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if layout == "NCHW" else x


def _four(layout, h, w):
    return [1, 1, h, w] if layout == "NCHW" else [1, h, w, 1]


def _geometry(rng, low=1, high=7):
    """(height, width, kh, kw, padding): odd sizes, 1x1, a kernel larger than the input."""
    height, width = (int(d) for d in rng.integers(low, high + 1, size=2))
    padding = str(rng.choice(["SAME", "VALID"]))
    kh, kw = (int(k) for k in rng.integers(1, 5, size=2))
    if padding == "VALID":
        kh, kw = min(kh, height), min(kw, width)
    elif rng.random() < 0.2:
        kh, kw = height + int(rng.integers(0, 3)), width + int(rng.integers(0, 3))
    return height, width, kh, kw, padding


def _maybe_grad(rng, expr, names):
    return f"grad({expr}, [{', '.join(names)}])" if rng.random() < 0.5 else expr


def _conv2d(rng):
    dtype = _dtype(rng)
    layout = _layout(rng, dtype)
    height, width, kh, kw, padding = _geometry(rng)
    batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))
    x = _to(layout, _values(rng, (batch, height, width, depth), dtype))
    f = _values(rng, (kh, kw, depth, out), dtype)
    if rng.random() < 0.3:  # TF1's CPU kernels have no dilated gradients: _atrous has them
        dh, dw = (int(d) for d in rng.integers(1, 4, size=2))
        if padding == "VALID":
            f = f[:max(1, (height - 1) // dh + 1), :max(1, (width - 1) // dw + 1)].copy()
        expr = (f"tf.nn.conv2d(a, f, [1, 1, 1, 1], '{padding}', data_format='{layout}', "
                f"dilations={_four(layout, dh, dw)})")
        return expr, {"a": x, "f": f}
    strides = [int(s) for s in rng.integers(1, 5, size=2)]
    expr = f"tf.nn.conv2d(a, f, {_four(layout, *strides)}, '{padding}', data_format='{layout}')"
    return _maybe_grad(rng, expr, ["a", "f"]), {"a": x, "f": f}


def _fused(rng):
    """Conv2D -> BiasAdd [-> Relu]: fused here (the intermediate is not fetched), not in TF1."""
    dtype = _dtype(rng, ("float32", "float64"))
    layout = "NHWC" if rng.random() < 0.7 else "NCHW"
    height, width, kh, kw, padding = _geometry(rng)
    batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))
    x = _to(layout, _values(rng, (batch, height, width, depth), dtype))
    f = _values(rng, (kh, kw, depth, out), dtype)
    b = _values(rng, (out,), dtype)
    strides = _four(layout, *(int(s) for s in rng.integers(1, 4, size=2)))
    expr = (f"tf.nn.bias_add(tf.nn.conv2d(a, f, {strides}, '{padding}', data_format='{layout}'),"
            f" b, data_format='{layout}')")
    if rng.random() < 0.6:
        expr = f"tf.nn.relu({expr})"
    return _maybe_grad(rng, expr, ["a", "f", "b"]), {"a": x, "f": f, "b": b}


def _transpose(rng):
    dtype = _dtype(rng)
    layout = _layout(rng, dtype)
    height, width, kh, kw, padding = _geometry(rng)
    sh, sw = (int(s) for s in rng.integers(1, 4, size=2))
    batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))

    def size(n, k, s):
        return -(-n // s) if padding == "SAME" else (n - k) // s + 1
    value_shape = (batch, size(height, kh, sh), size(width, kw, sw), out)
    v = _to(layout, _values(rng, value_shape, dtype))
    f = _values(rng, (kh, kw, depth, out), dtype)
    shape = [batch, depth, height, width] if layout == "NCHW" else [batch, height, width, depth]
    expr = (f"tf.nn.conv2d_transpose(v, f, {shape}, {_four(layout, sh, sw)}, '{padding}', "
            f"data_format='{layout}')")
    return _maybe_grad(rng, expr, ["v", "f"]), {"v": v, "f": f}


def _conv1d(rng):
    dtype = _dtype(rng)
    layout = "NCW" if _layout(rng, dtype) == "NCHW" else "NWC"
    width, _, kw, _, padding = _geometry(rng)
    batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))
    x = _values(rng, (batch, width, depth), dtype)
    x = np.ascontiguousarray(x.transpose(0, 2, 1)) if layout == "NCW" else x
    f = _values(rng, (kw, depth, out), dtype)
    stride = int(rng.integers(1, 4))
    expr = f"tf.nn.conv1d(a, f, {stride}, '{padding}', data_format='{layout}')"
    return _maybe_grad(rng, expr, ["a", "f"]), {"a": x, "f": f}


def _atrous(rng):
    dtype = _dtype(rng)
    height, width, kh, kw, padding = _geometry(rng, 2, 8)
    rate = int(rng.integers(1, 4))
    if padding == "VALID":
        kh, kw = max(1, min(kh, (height - 1) // rate + 1)), max(1, min(kw, (width - 1) // rate + 1))
    batch, depth, out = (int(d) for d in rng.integers(1, 3, size=3))
    x = _values(rng, (batch, height, width, depth), dtype)
    f = _values(rng, (kh, kw, depth, out), dtype)
    expr = f"tf.nn.atrous_conv2d(a, f, {rate}, '{padding}')"
    return _maybe_grad(rng, expr, ["a", "f"]), {"a": x, "f": f}


def _depthwise(rng, separable=False):
    dtype = _dtype(rng, ("float32", "float64"))
    layout = _layout(rng, dtype)
    height, width, kh, kw, padding = _geometry(rng)
    batch, depth, mult = (int(d) for d in rng.integers(1, 4, size=3))
    x = _to(layout, _values(rng, (batch, height, width, depth), dtype))
    f = _values(rng, (kh, kw, depth, mult), dtype)
    stride, rate = int(rng.integers(1, 4)), None
    if rng.random() < 0.3:
        stride, rate = 1, [int(r) for r in rng.integers(1, 3, size=2)]
        if padding == "VALID":
            f = f[:max(1, (height - 1) // rate[0] + 1), :max(1, (width - 1) // rate[1] + 1)].copy()
    strides = _four(layout, stride, stride)
    args = f"{strides}, '{padding}', rate={rate}, data_format='{layout}'"
    if separable:
        p = _values(rng, (1, 1, depth * mult, int(rng.integers(1, 4))), dtype)
        expr = f"tf.nn.separable_conv2d(a, f, p, {args})"
        return _maybe_grad(rng, expr, ["a", "f", "p"]), {"a": x, "f": f, "p": p}
    expr = f"tf.nn.depthwise_conv2d(a, f, {args})"
    return _maybe_grad(rng, expr, ["a", "f"]), {"a": x, "f": f}


def _separable(rng):
    return _depthwise(rng, separable=True)


def _avg_pool_grad_overhangs(size, kernel, stride, padding):
    """Whether TF1's CPU AvgPoolGrad mis-sizes a window here (see DIFFERENCES)."""
    if padding != "SAME":
        return False
    top = max((-(-size // stride) - 1) * stride + kernel - size, 0) // 2
    return kernel > size and kernel - top < size


def _pool(rng):
    dtype = _dtype(rng)
    layout = _layout(rng, dtype)
    height, width, kh, kw, padding = _geometry(rng)
    batch, depth = (int(d) for d in rng.integers(1, 4, size=2))
    sh, sw = (int(s) for s in rng.integers(1, 5, size=2))
    op = str(rng.choice(["max_pool", "avg_pool"]))
    expr = (f"tf.nn.{op}(a, {_four(layout, kh, kw)}, {_four(layout, sh, sw)}, '{padding}', "
            f"data_format='{layout}')")
    graded = rng.random() < 0.5 and not (op == "avg_pool" and (
        _avg_pool_grad_overhangs(height, kh, sh, padding)
        or _avg_pool_grad_overhangs(width, kw, sw, padding)))
    x = _to(layout, _values(rng, (batch, height, width, depth), dtype, special=0.5))
    return (f"grad({expr}, [a])" if graded else expr), {"a": x}


def _bias_add(rng):
    dtype = _dtype(rng)
    shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(2, 5))))
    x = _values(rng, shape, dtype, special=0.2)
    if len(shape) >= 3 and rng.random() < 0.5:
        expr, b = "tf.nn.bias_add(a, b, data_format='NCHW')", _values(rng, shape[1:2], dtype)
    else:
        expr, b = "tf.nn.bias_add(a, b)", _values(rng, shape[-1:], dtype)
    return _maybe_grad(rng, expr, ["a", "b"]), {"a": x, "b": b}


def _lrn(rng):
    dtype = _dtype(rng, ("float16", "float32"))
    x = _values(rng, tuple(int(d) for d in rng.integers(1, 4, size=3)) + (int(rng.integers(1, 9)),),
                dtype)
    radius = int(rng.integers(0, 4))
    bias, alpha, beta = (round(float(v), 2) for v in (rng.uniform(0.5, 2), rng.uniform(0.05, 1),
                                                      rng.uniform(0.3, 1)))
    expr = f"tf.nn.lrn(a, {radius}, bias={bias}, alpha={alpha}, beta={beta})"
    return _maybe_grad(rng, expr, ["a"]), {"a": x}


def _extreme(rng, shape, dtype):
    x = rng.standard_normal(shape) * float(rng.choice([1, 30, 1e4]))
    if x.size and rng.random() < 0.4:
        x.reshape(-1)[rng.integers(x.size)] = rng.choice([1e30, -1e30, 500.0, -500.0])
    return x.astype(dtype)


def _softmaxes(rng):
    dtype = _dtype(rng)
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    axis = int(rng.integers(-len(shape), len(shape)))
    op = str(rng.choice(["softmax", "log_softmax"]))
    return _maybe_grad(rng, f"tf.nn.{op}(a, axis={axis})", ["a"]), {"a": _extreme(rng, shape, dtype)}


def _losses(rng):
    dtype = _dtype(rng, ("float32", "float64"))
    batch, classes = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    logits = _extreme(rng, (batch, classes), dtype)
    roll = int(rng.integers(0, 3))
    if roll == 0:
        labels = rng.integers(0, classes, size=batch).astype("int32")
        expr = "tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l, logits=a)"
        return _maybe_grad(rng, expr, ["a"]), {"a": logits, "l": labels}
    if roll == 1:
        labels = rng.dirichlet(np.ones(classes), size=batch).astype(dtype)
        expr = "tf.nn.softmax_cross_entropy_with_logits_v2(labels=l, logits=a)"
        return _maybe_grad(rng, expr, ["a", "l"]), {"a": logits, "l": labels}
    labels = rng.random(logits.shape).astype(dtype)
    expr = "tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=a)"
    return _maybe_grad(rng, expr, ["a", "l"]), {"a": logits, "l": labels}


def _resize(rng):
    batch, height, width, depth = (int(d) for d in rng.integers(1, 5, size=4))
    dtype = _dtype(rng, ("float32", "float64"))
    x = _values(rng, (batch, height, width, depth), dtype)
    size = [int(s) for s in rng.integers(1, 9, size=2)]
    corners = bool(rng.random() < 0.4)
    op = str(rng.choice(["resize_bilinear", "resize_nearest_neighbor"]))
    expr = f"tf.image.{op}(a, {size}, align_corners={corners})"
    if op == "resize_bilinear":
        if not corners and rng.random() < 0.5:
            expr = expr[:-1] + ", half_pixel_centers=True)"
        expr = _maybe_grad(rng, expr, ["a"])
    return expr, {"a": x}


def _resize_nearest(rng):
    """Nearest-neighbor resizes with their gradient (TF1's ResizeNearestNeighborGrad), in
    every mode (align_corners, half_pixel_centers, neither; both together fail on both sides),
    up and down, 4-D or 3-D through ``resize_images``. With both flags the gradient alone is not
    drawn: TF1's gradient kernel takes them, and its ``tf.shape(y)`` of a known shape is a
    constant, so TF1 computes it without running the failing forward op, where here
    ``grad``'s ``tf.shape(y)`` runs it."""
    batch, height, width, depth = (int(d) for d in rng.integers(1, 5, size=4))
    dtype = _dtype(rng)
    x = _values(rng, (batch, height, width, depth), dtype)
    size = [int(s) for s in rng.integers(1, 10, size=2)]
    corners, half = [(False, False), (True, False), (False, True), (True, True)][
        int(rng.choice(4, p=[0.3, 0.3, 0.3, 0.1]))]
    if rng.random() < 0.25 and not half:
        method = "tf.image.ResizeMethod.NEAREST_NEIGHBOR"
        expr = f"tf.image.resize_images(a, {size}, method={method}, align_corners={corners})"
        x = x[0]
    else:
        expr = (f"tf.image.resize_nearest_neighbor(a, {size}, align_corners={corners}, "
                f"half_pixel_centers={half})")
    return f"grad({expr}, [a])" if rng.random() < 0.8 and not (corners and half) else expr, \
        {"a": x}


def _explicit_and_1d(rng):
    """conv2d with TF1's explicit padding (NHWC and NCHW, a pair of zeros in the batch or
    depth now and then: both refuse it), and max_pool1d/avg_pool1d (NWC and NCW)."""
    dtype = _dtype(rng)
    if rng.random() < 0.6:
        layout = _layout(rng)
        height, width = (int(d) for d in rng.integers(1, 7, size=2))
        batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))
        pads = [[int(p) for p in rng.integers(0, 4, size=2)] for _ in range(2)]
        kh = int(rng.integers(1, height + sum(pads[0]) + 1))
        kw = int(rng.integers(1, width + sum(pads[1]) + 1))
        outer = [[0, int(rng.random() < 0.1)], [0, 0]]
        padding = [outer[0]] + pads + [outer[1]] if layout == "NHWC" else \
            [outer[0], outer[1]] + pads
        strides = _four(layout, *(int(s) for s in rng.integers(1, 4, size=2)))
        x = _to(layout, _values(rng, (batch, height, width, depth), dtype))
        expr = (f"tf.nn.conv2d(a, f, strides={strides}, padding={padding}, "
                f"data_format='{layout}')")
        return _maybe_grad(rng, expr, ["a", "f"]), {
            "a": x, "f": _values(rng, (kh, kw, depth, out), dtype)}
    layout = str(rng.choice(["NWC", "NCW"]))
    width, batch, depth = (int(d) for d in rng.integers(1, 8, size=3))
    padding = str(rng.choice(["SAME", "VALID"]))
    k = int(rng.integers(1, width + 1 if padding == "VALID" else width + 3))
    stride = int(rng.integers(1, 4))
    op = str(rng.choice(["max_pool1d", "avg_pool1d"]))
    x = _values(rng, (batch, width, depth), dtype, special=0.3, nonfinite=op == "max_pool1d")
    if layout == "NCW":
        x = np.ascontiguousarray(x.transpose(0, 2, 1))
    overhangs = op == "avg_pool1d" and _avg_pool_grad_overhangs(width, k, stride, padding)
    expr = f"tf.nn.{op}(a, {k}, {stride}, '{padding}', data_format='{layout}')"
    return (f"grad({expr}, [a])" if rng.random() < 0.5 and not overhangs else expr), {"a": x}


def _explicit_backprops(rng):
    """conv2d_transpose, conv2d_backprop_input, conv2d_backprop_filter and max_pool with TF1's
    explicit padding, with their gradients: the gradients of a zero pad and a VALID
    convolution; the max over the value padded with its lowest finite number. NHWC
    only: TF's CPU kernels of these ops have no NCHW (asyncflow's NCHW is conv2d's layout
    code, which the other cases draw)."""
    dtype = _dtype(rng, ("float32", "float64"))
    layout = "NHWC"
    height, width = (int(d) for d in rng.integers(1, 7, size=2))
    batch, depth, out = (int(d) for d in rng.integers(1, 4, size=3))
    pads = [[int(p) for p in rng.integers(0, 4, size=2)] for _ in range(2)]
    kh = int(rng.integers(1, height + sum(pads[0]) + 1))
    kw = int(rng.integers(1, width + sum(pads[1]) + 1))
    sh, sw = (int(s) for s in rng.integers(1, 4, size=2))
    padding = [[0, 0]] + pads + [[0, 0]] if layout == "NHWC" else [[0, 0], [0, 0]] + pads
    grid = ((height + sum(pads[0]) - kh) // sh + 1, (width + sum(pads[1]) - kw) // sw + 1)
    sizes = [batch, height, width, depth]
    sizes = [sizes[i] for i in (0, 3, 1, 2)] if layout == "NCHW" else sizes
    grads = _to(layout, _values(rng, (batch,) + grid + (out,), dtype))
    args = f"strides={_four(layout, sh, sw)}, padding={padding}, data_format='{layout}'"
    op = str(rng.choice(["conv2d_transpose", "conv2d_backprop_input", "conv2d_backprop_filter",
                         "max_pool"]))
    if op == "max_pool":
        # Each pad smaller than the window (larger: both refuse). A window of only padding
        # and -inf has TF1's value but not its gradient (docs/porting.md): no inf with grad.
        ksize = _four(layout, min(kh, 3), min(kw, 3))
        padding = [[0, 0]] + [[min(p, k) for p in pair] for pair, k in zip(pads, ksize[1:3])] \
            + [[0, 0]]
        take_grad = rng.random() < 0.5
        x = _values(rng, (batch, height, width, depth), dtype, special=0.3,
                    nonfinite=not take_grad)
        expr = (f"tf.nn.max_pool(a, {ksize}, {_four(layout, sh, sw)}, padding={padding})")
        return (f"grad({expr}, [a])" if take_grad else expr), {"a": x}
    if op == "conv2d_backprop_filter":
        x = _to(layout, _values(rng, (batch, height, width, depth), dtype))
        expr = f"tf.nn.conv2d_backprop_filter(a, {[kh, kw, depth, out]}, g, {args})"
        return _maybe_grad(rng, expr, ["a", "g"]), {"a": x, "g": grads}
    value = "g, f, " + repr(sizes) if op == "conv2d_transpose" else repr(sizes) + ", f, g"
    expr = f"tf.nn.{op}({value}, {args})"
    return _maybe_grad(rng, expr, ["f", "g"]), {
        "f": _values(rng, (kh, kw, depth, out), dtype), "g": grads}


def _crops(rng):
    height, width, depth = (int(d) for d in rng.integers(1, 7, size=3))
    x = _values(rng, (height, width, depth), _dtype(rng, ("float32", "float64")))
    if rng.random() < 0.3:
        x = x[None]
    roll = int(rng.integers(0, 4))
    if roll == 0:
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        th, tw = int(rng.integers(1, height - top + 1)), int(rng.integers(1, width - left + 1))
        return f"tf.image.crop_to_bounding_box(a, {top}, {left}, {th}, {tw})", {"a": x}
    if roll == 1:
        top, left = (int(v) for v in rng.integers(0, 3, size=2))
        th, tw = height + top + int(rng.integers(0, 3)), width + left + int(rng.integers(0, 3))
        return f"tf.image.pad_to_bounding_box(a, {top}, {left}, {th}, {tw})", {"a": x}
    if roll == 2:
        th, tw = (int(v) for v in rng.integers(1, 9, size=2))
        return f"tf.image.resize_image_with_crop_or_pad(a, {th}, {tw})", {"a": x}
    fraction = round(float(rng.uniform(0.1, 1.0)), 2)
    return f"tf.image.central_crop(a, {fraction})", {"a": x}


GENERATORS = [_conv2d, _conv2d, _fused, _transpose, _conv1d, _atrous, _depthwise, _separable,
              _pool, _pool, _bias_add, _lrn, _softmaxes, _losses, _resize, _crops]


_F32, _F64, _INF, _NAN = np.float32, np.float64, np.inf, np.nan

# Where TF1 (TensorFlow 2.21's compat.v1 on x86 CPU) is not the reference, and so no case
# draws it:
DIFFERENCES = {
    "AvgPoolGrad": "TF1's CPU AvgPoolGrad (GetBroadcastSize) sizes a SAME window that starts in "
                   "the padding and is larger than the input as the whole input: avg_pool(4x4, "
                   "ksize 5, stride 3, SAME)'s gradient puts g/16 on 16 cells where its own "
                   "AvgPool averaged 9; asyncflow's AvgPoolGrad is AvgPool's derivative "
                   "(tests/ops/test_conv_tf1_values.py checks it by finite differences)",
    "oneDNN": "TF 2.21 on x86 runs float32 Conv2D, pools and their gradients through oneDNN "
              "unless TF_ENABLE_ONEDNN_OPTS=0; the fuzz runs TF's own kernels, since oneDNN "
              "answered conv2d(a [2, 7, 2, 1], f [2, 2, 1, 1], strides [1, 1, 3, 1], VALID) "
              "with wrong values (TF's own kernels and asyncflow agree with the sums), "
              "routed a MaxPoolGrad window whose first cell is NaN to its largest cell, "
              "dropped the gradient of an all -inf window starting in the padding, and gave "
              "conv2d of an empty batch the input's channel count. TF's own kernels have no "
              "NCHW on CPU: TF's side computes NCHW as NHWC between transposes",
    "dilated Conv2D gradients": "TF1's CPU kernels refuse them; atrous_conv2d (TF1: "
                                "space_to_batch) checks asyncflow's dilated gradients",
}

# Hand-picked edges: empty batches, windows larger than the input, NaN and infinities, logits
# past float range.
EDGES = [
    ("tf.nn.conv2d(a, f, [1, 1, 1, 1], 'SAME')", {"a": np.zeros((0, 3, 3, 2), _F32),
                                                  "f": np.ones((2, 2, 2, 1), _F32)}),
    ("grad(tf.nn.conv2d(a, f, [1, 2, 2, 1], 'SAME'), [a, f])",
     {"a": np.zeros((0, 3, 3, 2), _F32), "f": np.ones((2, 2, 2, 1), _F32)}),
    ("tf.nn.conv2d(a, f, [1, 1, 1, 1], 'VALID')", {"a": np.ones((1, 2, 2, 1), _F32),
                                                   "f": np.ones((3, 1, 1, 1), _F32)}),
    ("grad(tf.nn.conv2d(a, f, [1, 5, 5, 1], 'SAME'), [a, f])",
     {"a": np.arange(18.0).reshape(1, 3, 3, 2), "f": np.ones((7, 7, 2, 2))}),
    ("tf.nn.conv2d(a, f, [1, 1, 1, 1], 'SAME')",
     {"a": np.array([_INF, _NAN, 1.0, -_INF], _F32).reshape(1, 2, 2, 1),
      "f": np.array([1.0, 0.0], _F32).reshape(1, 2, 1, 1)}),
    ("tf.nn.max_pool(a, [1, 2, 2, 1], [1, 2, 2, 1], 'VALID')", {"a": np.zeros((0, 2, 2, 1))}),
    ("tf.nn.max_pool(a, [1, 3, 3, 1], [1, 1, 1, 1], 'VALID')", {"a": np.zeros((1, 2, 2, 1))}),
    ("grad(tf.nn.max_pool(a, [1, 3, 3, 1], [1, 2, 2, 1], 'SAME'), [a])",
     {"a": np.full((1, 3, 3, 1), -_INF, _F64)}),
    ("grad(tf.nn.max_pool(a, [1, 2, 2, 1], [1, 1, 1, 1], 'SAME'), [a])",
     {"a": np.full((1, 3, 3, 1), _NAN, _F64)}),
    ("grad(tf.nn.max_pool(a, [1, 2, 2, 1], [1, 2, 2, 1], 'SAME'), [a])",
     {"a": np.array([1, _NAN, 1, 2, _INF, 3, _NAN, 0, -1], np.float16).reshape(1, 3, 3, 1)}),
    ("grad(tf.nn.avg_pool(a, [1, 2, 2, 1], [1, 1, 1, 1], 'SAME'), [a])",
     {"a": np.array([1, _NAN, 1, 2, _INF, 3, -_INF, 0, -1], _F32).reshape(1, 3, 3, 1)}),
    ("grad(tf.nn.avg_pool(a, [1, 3, 4, 1], [1, 2, 3, 1], 'SAME'), [a])",
     {"a": np.arange(35.0).reshape(1, 5, 7, 1)}),
    ("grad(tf.nn.avg_pool(a, [1, 6, 6, 1], [1, 2, 2, 1], 'SAME'), [a])",
     {"a": np.arange(16.0).reshape(1, 4, 4, 1)}),  # larger than the input, one window
    ("grad(tf.nn.softmax(a), [a])", {"a": np.array([[_INF, 0.0], [-_INF, 0.0]], _F32)}),
    ("grad(tf.nn.log_softmax(a, axis=0), [a])", {"a": np.array([[-_INF, 1e30], [0.0, -1e30]],
                                                               _F32)}),
    ("grad(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l, logits=a), [a])",
     {"a": np.array([[1e30, -1e30, 0.0], [-_INF, 0.0, 1.0]], _F32),
      "l": np.array([1, 2], np.int32)}),
    ("grad(tf.nn.softmax_cross_entropy_with_logits_v2(labels=l, logits=a), [a, l])",
     {"a": np.array([[1e30, -1e30, 0.0], [500.0, -500.0, 0.0]], _F64),
      "l": np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], _F64)}),
    ("grad(tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=a), [a, l])",
     {"a": np.array([1e30, -1e30, 100.0, -100.0, _INF], _F32),
      "l": np.array([0.0, 1.0, 0.3, 0.7, 1.0], _F32)}),
    ("grad(tf.nn.lrn(a, 2, bias=1.0, alpha=1.0, beta=0.5), [a])",
     {"a": np.array([1e3, -1e3, 0.0, 1e-3, 5.0], _F32).reshape(1, 1, 1, 5)}),
    ("grad(tf.nn.bias_add(a, b, data_format='NCHW'), [a, b])",
     {"a": np.ones((2, 3, 2, 2, 2), _F32), "b": np.arange(3.0).astype(_F32)}),
    ("tf.image.resize_bilinear(a, [1, 1], align_corners=True)",
     {"a": np.arange(8.0).reshape(1, 2, 4, 1)}),
    # Next to an inf, a NaN or a difference that overflows, a pixel on a whole source
    # coordinate is the source's (TF1's upper index is ceil(coordinate), not floor + 1).
    ("tf.image.resize_bilinear(a, [4, 4])",
     {"a": np.array([1.0, 2.0, 3.0, -_INF], _F32).reshape(1, 2, 2, 1)}),
    ("tf.image.resize_bilinear(a, [3, 7], align_corners=True)",
     {"a": np.array([_INF, 1.0, _NAN, 3e38, -3e38, 2.0], _F32).reshape(1, 2, 3, 1)}),
    # Half-pixel centers: a coordinate below 0 reads the edge pixel; with align_corners
    # the op and its gradient fail on both sides.
    ("grad(tf.image.resize_bilinear(a, [5, 7], half_pixel_centers=True), [a])",
     {"a": np.array([1.0, 2.0, 3.0, -_INF, 5.0, 6.0], _F32).reshape(1, 2, 3, 1)}),
    ("tf.image.resize_bilinear(a, [5, 7], half_pixel_centers=True)",
     {"a": np.array([1.0, 2.0, 3.0, -_INF, 5.0, 6.0], _F32).reshape(1, 2, 3, 1)}),
    ("grad(tf.image.resize_bilinear(a, [3, 3], align_corners=True, half_pixel_centers=True), [a])",
     {"a": np.ones((1, 2, 2, 1), _F32)}),
    ("tf.image.resize_images(a, [5, 4])",
     {"a": np.array([1.0, _INF, 2.0, -_INF, 1e308, -1e308], _F64).reshape(3, 2, 1)}),
    ("tf.image.resize_nearest_neighbor(a, [5, 3], align_corners=True)",
     {"a": np.arange(8, dtype=np.int32).reshape(1, 2, 4, 1)}),
    # align_corners rounds as roundf: row 41 of 83 sits at float32 0.49999997 and copies row 0.
    ("grad(tf.image.resize_nearest_neighbor(a, [83, 2], align_corners=True), [a])",
     {"a": np.arange(4.0, dtype=_F32).reshape(1, 2, 2, 1)}),
    ("tf.image.central_crop(a, 0.5)", {"a": np.arange(35.0).reshape(5, 7, 1)}),
    ("tf.image.resize_image_with_crop_or_pad(a, 2, 9)", {"a": np.arange(35.0).reshape(5, 7, 1)}),
]


def _draw(seed, per_family):
    rng = np.random.default_rng([seed, 37])
    return [generator(rng) for _ in range(per_family) for generator in GENERATORS]


# Relative to the largest finite magnitude of TF1's answer: sums of many products differ in
# their last bits by summation order (float16 accumulates in float32 on both sides).
_TOLERANCE = {np.dtype("float16"): 4e-3, np.dtype("float32"): 2e-5, np.dtype("float64"): 1e-11}


# Ops that compute in float32 whatever their input's dtype (ResizeBilinear and its gradient
# weigh in float32 on both sides): their float64 gradients are compared at float32's tolerance.
FLOAT32_INSIDE = ("resize_bilinear",)


def _close(mine, want, expr=""):
    tolerance = _TOLERANCE.get(want.dtype)
    if tolerance is not None and any(name in expr for name in FLOAT32_INSIDE):
        tolerance = max(tolerance, _TOLERANCE[np.dtype("float32")])
    if tolerance is None:
        return np.array_equal(mine, want)
    finite = np.abs(want[np.isfinite(want)].astype(np.float64))
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return np.allclose(mine.astype(np.float64), want.astype(np.float64), rtol=tolerance,
                       atol=tolerance * scale, equal_nan=True)


def _compare(ours, theirs, i, expr=""):
    """The differences between our case ``i`` and TF1's, as lines (none when they agree)."""
    def differs(mine, want):
        if _close(mine, want, expr):
            return None
        worst = int(np.nanargmax(np.abs(mine.astype(np.float64) - want)))
        return (f"at {np.unravel_index(worst, want.shape)} {mine.reshape(-1)[worst]} TF1 "
                f"{want.reshape(-1)[worst]}; {mine.ravel()[:6]} TF1 {want.ravel()[:6]}")
    return compare_outcomes(ours, theirs, i, differs)


def _fuzz(tmp_path, cases, monkeypatch):
    # TF's own CPU kernels: TF 2.21 on x86 otherwise runs float32 Conv2D, pools and their
    # gradients through oneDNN, which gets some geometries wrong (see DIFFERENCES).
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    run_fuzz(tmp_path, cases, _compare, DRIVER)


# Kinks, NaN and infinities warn in the kernels: the values are the point.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_convolutions_pools_and_image_ops_agree_with_tf1(tmp_path, monkeypatch):
    _fuzz(tmp_path, EDGES + _draw(seed=0, per_family=3), monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_convolutions_pools_and_image_ops_agree_with_tf1_long(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng([seed, 41])
    more = [_resize_nearest(rng) for _ in range(60)] + [_explicit_and_1d(rng) for _ in range(60)]
    _fuzz(tmp_path, _draw(seed=seed, per_family=20) + more, monkeypatch)


def test_nearest_neighbor_resize_gradients_agree_with_tf1(tmp_path, monkeypatch):
    rng = np.random.default_rng([0, 41])
    _fuzz(tmp_path, [_resize_nearest(rng) for _ in range(30)], monkeypatch)


def test_explicit_padding_of_the_conv_backprops_and_max_pool_agrees_with_tf1(tmp_path, monkeypatch):
    rng = np.random.default_rng([0, 53])
    _fuzz(tmp_path, [_explicit_backprops(rng) for _ in range(60)], monkeypatch)


def test_explicit_padding_and_1d_pools_agree_with_tf1(tmp_path, monkeypatch):
    rng = np.random.default_rng([0, 43])
    _fuzz(tmp_path, [_explicit_and_1d(rng) for _ in range(30)], monkeypatch)
