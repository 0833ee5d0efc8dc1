"""Differential fuzz of the array, layout, indexing, sorting and ``tf.nn`` forward ops and the
moments (``reduce_logsumexp``, ``reduce_variance``, ``reduce_std``) against TF1.

Seeded numpy draws build many small cases (an expression over fed placeholders, written once
as TF1 source); ``DRIVER`` builds them all into one graph and runs each alone, in TF's
interpreter (one subprocess for all the cases, ``tf1_run``) and here (``compat_run``). Each
case must agree on whether it fails; where both give values, on their count, dtypes, shapes
and values (exact for integers and bools), and the static shape asyncflow infers must fit the
value and know the dims TF1 knows, no more and no fewer. The default run draws a few cases
per family; the long form (``--runslow``) many more. A failing case shows its expression and
its inputs' dtypes and shapes, to become a focused regression test
(tests/ops/test_array_tf1_values.py, which needs no TensorFlow).
"""
import ast

import numpy as np
import pytest

from tf1_reference import compat_run, tf1_run

DRIVER = """
def _static(t):
    return t.shape.as_list() if t.shape.ndims is not None else None

_graph = tf.Graph()
_fetches, _feeds = {}, {}
with _graph.as_default():
    for _i, (_expr, _names) in enumerate(CASES):
        _env = {"tf": tf, "np": np}
        _feed = {}
        try:
            for _n in _names:
                _v = inputs[f"c{_i}_{_n}"]
                _env[_n] = tf.placeholder(tf.as_dtype(_v.dtype), _v.shape)
                _feed[_env[_n]] = _v
            _out = eval(_expr, _env)
            _out = list(_out) if isinstance(_out, (list, tuple)) else [_out]
            _fetches[_i], _feeds[_i] = _out, _feed
            outputs[f"c{_i}_static"] = np.array(repr([_static(t) for t in _out]))
        except Exception as _e:  # a build-time refusal is an answer too
            outputs[f"c{_i}_err"] = np.array(f"build {type(_e).__name__}: {_e}"[:400])
    with tf.Session(graph=_graph) as _sess:
        for _i, _out in _fetches.items():
            try:
                _values = _sess.run(_out, _feeds[_i])
                outputs[f"c{_i}_n"] = np.array(len(_values))
                outputs[f"c{_i}"] = [np.asarray(v) for v in _values]
            except Exception as _e:
                outputs[f"c{_i}_err"] = np.array(f"run {type(_e).__name__}: {_e}"[:400])
"""


# ---- draws -------------------------------------------------------------------------------

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")


def _dims(rng, rank, low=0, high=4):
    """A shape of ``rank`` dims in [low, high], zero-sized dims rarer than the others."""
    dims = rng.integers(max(low, 1), high + 1, size=rank)
    if low == 0 and rank and rng.random() < 0.1:
        dims[rng.integers(rank)] = 0
    return tuple(int(d) for d in dims)


def _float(rng, shape, dtype=None):
    dtype = dtype or rng.choice(FLOATS)
    return rng.standard_normal(shape).astype(dtype)


def _any(rng, shape):
    kind = rng.choice(["float32", "float64", "int32", "int64", "bool"])
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind.startswith("int"):
        return rng.integers(-9, 10, size=shape).astype(kind)
    return _float(rng, shape, kind)


def _int(rng):
    return str(rng.choice(INTS))


def _reshape(rng):
    shape = _dims(rng, rng.integers(0, 4))
    target = list(rng.permutation(shape)) if shape else []
    if target and rng.random() < 0.7 and 0 not in shape:
        target[rng.integers(len(target))] = -1
    if rng.random() < 0.2:
        target = [-1]
    return f"tf.reshape(a, {[int(t) for t in target]})", {"a": _any(rng, shape)}


def _transpose(rng):
    rank = int(rng.integers(0, 5))
    perm = [int(p) for p in rng.permutation(rank)]
    form = f"tf.transpose(a, {perm})" if rng.random() < 0.8 else "tf.transpose(a)"
    return form, {"a": _any(rng, _dims(rng, rank))}


def _concat(rng):
    rank = int(rng.integers(1, 4))
    axis = int(rng.integers(-rank, rank))
    base = list(_dims(rng, rank, 1))
    count = int(rng.integers(1, 4))
    dtype = rng.choice(FLOATS + INTS)
    inputs = {}
    for k in range(count):
        shape = list(base)
        shape[axis] = int(rng.integers(0, 4))
        inputs[f"a{k}"] = _float(rng, shape, "float64").astype(dtype)
    names = ", ".join(inputs)
    return f"tf.concat([{names}], {axis})", inputs


def _stack(rng):
    rank = int(rng.integers(0, 3))
    shape = _dims(rng, rank)
    count = int(rng.integers(1, 4))
    axis = int(rng.integers(-rank - 1, rank + 1))
    dtype = rng.choice(FLOATS + INTS)
    inputs = {f"a{k}": (_float(rng, shape, "float64") * 3).astype(dtype) for k in range(count)}
    return f"tf.stack([{', '.join(inputs)}], axis={axis})", inputs


def _unstack(rng):
    rank = int(rng.integers(1, 4))
    axis = int(rng.integers(-rank, rank))
    return f"tf.unstack(a, axis={axis})", {"a": _any(rng, _dims(rng, rank))}


def _split(rng):
    rank = int(rng.integers(1, 4))
    axis = int(rng.integers(-rank, rank))
    shape = list(_dims(rng, rank, 1, 6))
    size = shape[axis]
    if rng.random() < 0.5:
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        return f"tf.split(a, {int(rng.choice(divisors))}, axis={axis})", {"a": _any(rng, shape)}
    cuts = sorted(int(c) for c in rng.integers(0, size + 1, size=int(rng.integers(0, 3))))
    sizes = np.diff([0] + cuts + [size]).tolist()
    if rng.random() < 0.6:
        sizes[rng.integers(len(sizes))] = -1
    return f"tf.split(a, {sizes}, axis={axis})", {"a": _any(rng, shape)}


def _slice(rng):
    shape = _dims(rng, int(rng.integers(1, 4)), 0, 5)
    begin = [int(rng.integers(0, d + 1)) for d in shape]
    size = [int(rng.integers(0, d - b + 1)) if rng.random() < 0.7 else -1
            for d, b in zip(shape, begin)]
    return f"tf.slice(a, {begin}, {size})", {"a": _any(rng, shape)}


def _index_item(rng, dim):
    roll = rng.random()
    if roll < 0.25 and dim:
        return str(int(rng.integers(-dim, dim)))
    if roll < 0.3:
        return "None"

    def bound():
        if rng.random() < 0.3:
            return ""
        return str(int(rng.integers(-dim - 3, dim + 4)))
    step = rng.choice(["", "", "1", "2", "-1", "-2", "3"])
    return f"{bound()}:{bound()}" + (f":{step}" if step else "")


def _python_slice(rng):
    shape = _dims(rng, int(rng.integers(1, 5)), 0, 5)
    items = [_index_item(rng, d) for d in shape[:int(rng.integers(0, len(shape) + 1))]]
    if rng.random() < 0.4:
        items.insert(int(rng.integers(0, len(items) + 1)), "...")
    if rng.random() < 0.3:
        items.insert(int(rng.integers(0, len(items) + 1)), "None")
    return f"a[{', '.join(items) or '...'}]", {"a": _any(rng, shape)}


def _strided_slice(rng):
    rank = int(rng.integers(1, 4))
    shape = _dims(rng, rank, 1, 5)
    count = int(rng.integers(1, rank + 2))
    begin = [int(rng.integers(-6, 7)) for _ in range(count)]
    end = [int(rng.integers(-6, 7)) for _ in range(count)]
    strides = [int(rng.choice([1, 1, 2, -1, -2])) for _ in range(count)]

    def mask(p):
        return int(sum(1 << k for k in range(count) if rng.random() < p))
    masks = dict(begin_mask=mask(0.3), end_mask=mask(0.3), new_axis_mask=mask(0.1),
                 shrink_axis_mask=mask(0.15))
    if rng.random() < 0.3:
        masks["ellipsis_mask"] = 1 << int(rng.integers(count))
    args = ", ".join(f"{k}={v}" for k, v in masks.items())
    return f"tf.strided_slice(a, {begin}, {end}, {strides}, {args})", {"a": _any(rng, shape)}


def _gather(rng):
    rank = int(rng.integers(1, 4))
    shape = _dims(rng, rank, 1)
    batch_dims = int(rng.integers(0, rank)) if rng.random() < 0.3 else 0
    axis = int(rng.integers(batch_dims, rank))
    if rng.random() < 0.4:
        axis -= rank
    index_shape = shape[:batch_dims] + _dims(rng, int(rng.integers(0, 3)))
    high = shape[axis]
    indices = rng.integers(0, high, size=index_shape)
    if rng.random() < 0.08 and indices.size:
        indices.flat[0] = high  # TF1 on CPU refuses an index out of range
    batch = f", batch_dims={batch_dims}" if batch_dims else ""
    return (f"tf.gather(a, i, axis={axis}{batch})",
            {"a": _any(rng, shape), "i": indices.astype(_int(rng))})


def _gather_nd(rng):
    rank = int(rng.integers(1, 4))
    shape = _dims(rng, rank, 1)
    batch_dims = int(rng.integers(0, rank)) if rng.random() < 0.3 else 0
    depth = int(rng.integers(1, rank - batch_dims + 1))
    lead = shape[:batch_dims] + _dims(rng, int(rng.integers(0, 3)))
    columns = [rng.integers(0, shape[batch_dims + k], size=lead) for k in range(depth)]
    indices = np.stack(columns, -1)
    if rng.random() < 0.08 and indices.size:
        indices.flat[0] = -1
    batch = f", batch_dims={batch_dims}" if batch_dims else ""
    return (f"tf.gather_nd(a, i{batch})",
            {"a": _any(rng, shape), "i": indices.astype(_int(rng))})


def _scatter_nd(rng):
    shape = _dims(rng, int(rng.integers(1, 4)), 1)
    depth = int(rng.integers(1, len(shape) + 1))
    count = int(rng.integers(0, 5))
    indices = np.stack([rng.integers(0, shape[k], size=count) for k in range(depth)], -1)
    if rng.random() < 0.08 and count:
        indices[0, 0] = shape[0]
    dtype = rng.choice(FLOATS + INTS)
    updates = (rng.standard_normal((count,) + shape[depth:]) * 4).astype(dtype)
    index_dtype = _int(rng)
    roll = rng.random()
    if roll < 0.5:
        return (f"tf.scatter_nd(i, u, np.array({list(shape)}, '{index_dtype}'))",
                {"i": indices.astype(index_dtype), "u": updates})
    unique = {tuple(row) for row in indices.tolist()}
    if len(unique) < count:  # duplicates make an update's winner unspecified
        return _scatter_nd(rng)
    op = "tensor_scatter_nd_update" if roll < 0.75 else "tensor_scatter_update"
    base = (rng.standard_normal(shape) * 4).astype(dtype)
    return f"tf.{op}(t, i, u)", {"t": base, "i": indices.astype(index_dtype), "u": updates}


def _boolean_mask(rng):
    rank = int(rng.integers(1, 4))
    shape = _dims(rng, rank)
    axis = int(rng.integers(0, rank))
    depth = int(rng.integers(1, rank - axis + 1))
    mask = rng.random(shape[axis:axis + depth]) < 0.5
    extra = f", axis={axis}" if axis else ""
    return f"tf.boolean_mask(a, m{extra})", {"a": _any(rng, shape), "m": mask}


def _where(rng):
    shape = _dims(rng, int(rng.integers(0, 4)))
    if rng.random() < 0.35:
        return "tf.where(c)", {"c": _any(rng, shape)}
    cond_shape = shape if (not shape or rng.random() < 0.6) else shape[:1]
    x, y = _any(rng, shape), _any(rng, shape)
    return "tf.where(c, x, y)", {"c": rng.random(cond_shape) < 0.5, "x": x, "y": y.astype(x.dtype)}


def _tile(rng):
    shape = _dims(rng, int(rng.integers(0, 4)))
    multiples = [int(rng.integers(0, 4)) for _ in shape]
    return f"tf.tile(a, {multiples})", {"a": _any(rng, shape)}


def _pad(rng):
    shape = _dims(rng, int(rng.integers(0, 4)), 0, 4)
    mode = rng.choice(["CONSTANT", "REFLECT", "SYMMETRIC", "constant", "reflect"])
    upper = {"REFLECT": -1, "SYMMETRIC": 0}.get(mode.upper(), 3)
    pads = [[int(rng.integers(0, max(d + upper, 0) + 1 + (rng.random() < 0.05)))
             for _ in range(2)] for d in shape]
    if not shape:  # TF1 reads a bare [] as shape [0] and refuses it; asyncflow takes either
        pads = "np.zeros((0, 2), 'int32')"
    value = ""
    if mode.upper() == "CONSTANT" and rng.random() < 0.5:
        value = f", constant_values={int(rng.integers(-3, 4))}"
    return f"tf.pad(a, {pads}, mode='{mode}'{value})", {"a": _any(rng, shape)}


def _reverse(rng):
    rank = int(rng.integers(0, 4))
    axes = [int(a) for a in rng.permutation(rank)[:int(rng.integers(0, rank + 1))]]
    axes = [a - rank if rng.random() < 0.3 else a for a in axes]
    return f"tf.reverse(a, {axes})", {"a": _any(rng, _dims(rng, rank))}


def _one_hot(rng):
    shape = _dims(rng, int(rng.integers(0, 3)))
    depth = int(rng.integers(0, 5))
    indices = rng.integers(-2, depth + 2, size=shape).astype(rng.choice(["int32", "int64", "uint8"]))
    if indices.dtype == np.uint8:
        indices = np.abs(indices.astype(np.int64)).astype(np.uint8)
    args = []
    if rng.random() < 0.5:
        args.append(f"on_value={float(rng.integers(1, 5))}, off_value={float(rng.integers(-3, 1))}")
    if rng.random() < 0.5:
        args.append(f"axis={int(rng.integers(-1, len(shape) + 1))}")
    if rng.random() < 0.4:
        args.append(f"dtype=tf.{rng.choice(['float64', 'int32', 'int64', 'float32'])}")
    extra = "".join(", " + a for a in args)
    return f"tf.one_hot(i, {depth}{extra})", {"i": indices}


def _expand_squeeze(rng):
    shape = _dims(rng, int(rng.integers(0, 4)))
    rank = len(shape)
    if rng.random() < 0.5:
        return f"tf.expand_dims(a, {int(rng.integers(-rank - 1, rank + 1))})", {"a": _any(rng, shape)}
    shape = tuple(1 if rng.random() < 0.4 else d for d in shape)
    ones = [k for k, d in enumerate(shape) if d == 1]
    if rng.random() < 0.3 or not ones:
        return "tf.squeeze(a)", {"a": _any(rng, shape)}
    axes = [int(k - rank if rng.random() < 0.4 else k)
            for k in rng.permutation(ones)[:int(rng.integers(1, len(ones) + 1))]]
    return f"tf.squeeze(a, {axes})", {"a": _any(rng, shape)}


def _shape_size_rank(rng):
    shape = _dims(rng, int(rng.integers(0, 4)))
    out_type = rng.choice(["", ", out_type=tf.int64", ", out_type=tf.int32"])
    return (f"[tf.shape(a{out_type}), tf.size(a{out_type}), tf.rank(a)]", {"a": _any(rng, shape)})


def _fill_like(rng):
    shape = _dims(rng, int(rng.integers(0, 4)))
    roll = rng.random()
    if roll < 0.3:
        value = rng.choice(["2.5", "3", "np.int64(4)", "np.float64(-1.5)", "True"])
        return f"tf.fill({list(shape)}, {value})", {}
    dtype = rng.choice(["", ", dtype=tf.int64", ", dtype=tf.float64", ", dtype=tf.bool",
                        ", dtype=tf.int32"])
    op = "zeros_like" if roll < 0.65 else "ones_like"
    return f"tf.{op}(a{dtype})", {"a": _any(rng, shape)}


def _range(rng):
    if rng.random() < 0.5:
        start, limit = (int(v) for v in rng.integers(-6, 7, size=2))
        delta = int(rng.choice([1, 2, 3, -1, -2, -3]))
        dtype = rng.choice(["", ", dtype=tf.int64", ", dtype=tf.float32", ", dtype=tf.float64"])
        if rng.random() < 0.2:
            return f"tf.range({limit}{dtype})", {}
        return f"tf.range({start}, {limit}, {delta}{dtype})", {}
    start, limit = (round(float(v), 2) for v in rng.uniform(-4, 4, size=2))
    delta = round(float(rng.choice([-1, 1]) * rng.uniform(0.1, 1.5)), 2)
    return f"tf.range({start}, {limit}, {delta})", {}


def _unique(rng):
    values = rng.integers(-3, 4, size=int(rng.integers(0, 8)))
    dtype = rng.choice(["int32", "int64", "float32", "float64"])
    op = rng.choice(["unique", "unique_with_counts"])
    out = rng.choice(["", ", out_idx=tf.int64"])
    return f"tf.{op}(a{out})", {"a": values.astype(dtype)}


def _top_k(rng):
    shape = _dims(rng, int(rng.integers(1, 3)), 1, 6)
    values = rng.integers(-2, 3, size=shape).astype(rng.choice(FLOATS + INTS))  # many ties
    k = int(rng.integers(0, shape[-1] + 1))
    return f"tf.nn.top_k(a, {k})", {"a": values}


def _diagonals(rng):
    shape = _dims(rng, int(rng.integers(2, 4)), 1)
    x = _any(rng, shape)
    roll = int(rng.integers(0, 6))
    if roll == 0:
        lower, upper = (int(v) for v in rng.integers(-1, 4, size=2))
        return f"tf.matrix_band_part(a, {lower}, {upper})", {"a": x}
    if roll == 1:
        return "tf.matrix_diag_part(a)", {"a": x}
    if roll == 2:
        return "tf.matrix_diag(a)", {"a": x}
    if roll == 3:
        d = x[..., 0, :min(shape[-2:])]
        return "tf.matrix_set_diag(a, d)", {"a": x, "d": np.ascontiguousarray(d)}
    if roll == 4:
        return "tf.diag(a)", {"a": _any(rng, shape[:2])}
    return "tf.diag_part(tf.diag(a))", {"a": _any(rng, shape[:2])}


EQUATIONS = [("ij,jk->ik", "ab,bc"), ("bij,bjk->bik", "xab,xbc"), ("ii->i", "aa"),
             ("ij->", "ab"), ("ij->ji", "ab"), ("i,j->ij", "a,b"), ("...ij,...jk->...ik", "xab,xbc"),
             ("bij,jk", "xab,bc"), ("ij,ij->i", "ab,ab"), ("ijk->kji", "abc"),
             ("i,i->", "a,a"), ("ij,j->i", "ab,b"), ("abc,cd->abd", "xab,bc")]


def _einsum(rng):
    equation, pattern = EQUATIONS[int(rng.integers(len(EQUATIONS)))]
    sizes = {c: int(rng.integers(1, 4)) for c in "abcx"}
    dtype = rng.choice(FLOATS)
    inputs = {f"e{k}": _float(rng, tuple(sizes[c] for c in term), dtype)
              for k, term in enumerate(pattern.split(","))}
    return f"tf.einsum('{equation}', {', '.join(inputs)})", inputs


def _sequence_mask(rng):
    lengths = rng.integers(0, 5, size=_dims(rng, int(rng.integers(0, 3)))).astype(_int(rng))
    maxlen = rng.choice(["", ", 3", ", 0", ", maxlen=6"])
    dtype = rng.choice(["", ", dtype=tf.float32", ", dtype=tf.int32"])
    return f"tf.sequence_mask(l{maxlen}{dtype})", {"l": lengths}


def _segments(rng):
    count = int(rng.integers(0, 7))
    data = _float(rng, (count,) + _dims(rng, int(rng.integers(0, 3)), 1), None)
    if rng.random() < 0.5:
        data = (data * 4).astype(rng.choice(INTS))
    if rng.random() < 0.5:
        ids = np.sort(rng.integers(0, 4, size=count)).astype(_int(rng))
        return "tf.segment_sum(d, s)", {"d": data, "s": ids}
    num = int(rng.integers(1, 5))
    ids = rng.integers(-1, num, size=count).astype(_int(rng))
    return f"tf.unsorted_segment_sum(d, s, {num})", {"d": data, "s": ids}


def _softmaxes(rng):
    shape = _dims(rng, int(rng.integers(1, 4)), 1)
    rank = len(shape)
    axis = int(rng.integers(-rank, rank))
    op = rng.choice(["softmax", "log_softmax"])
    x = _float(rng, shape) * 3
    if rng.random() < 0.5:
        return f"tf.nn.{op}(a, axis={axis})", {"a": x}
    return f"tf.nn.{op}(a)", {"a": x}


def _normalizers(rng):
    shape = _dims(rng, int(rng.integers(1, 4)), 1)
    rank = len(shape)
    x = _float(rng, shape)
    axes = sorted(int(a) for a in rng.permutation(rank)[:int(rng.integers(1, rank + 1))])
    roll = int(rng.integers(0, 3))
    if roll == 0:
        return f"tf.nn.l2_normalize(a, {axes if len(axes) > 1 else axes[0]})", {"a": x}
    if roll == 1:
        keep = rng.choice(["True", "False"])
        return f"tf.nn.moments(a, {axes}, keep_dims={keep})", {"a": x}
    channel = (shape[-1],)
    inputs = {"a": x, "m": _float(rng, channel, x.dtype), "v": np.abs(_float(rng, channel, x.dtype)),
              "o": _float(rng, channel, x.dtype), "s": _float(rng, channel, x.dtype)}
    return "tf.nn.batch_normalization(a, m, v, o, s, 1e-3)", inputs


def _activations(rng):
    x = _float(rng, _dims(rng, int(rng.integers(0, 3)))) * 4
    op = rng.choice(["relu6(a)", "elu(a)", "selu(a)", "leaky_relu(a)", "leaky_relu(a, 0.05)",
                     "leaky_relu(a, alpha=1.5)", "relu(a)", "softplus(a)", "softsign(a)"])
    return f"tf.nn.{op}", {"a": x}


def _bias_add(rng):
    shape = _dims(rng, int(rng.integers(2, 5)), 1)
    x = _float(rng, shape)
    if len(shape) >= 3 and rng.random() < 0.5:
        return "tf.nn.bias_add(a, b, data_format='NCHW')", {"a": x, "b": _float(rng, shape[1:2], x.dtype)}
    return "tf.nn.bias_add(a, b)", {"a": x, "b": _float(rng, shape[-1:], x.dtype)}


def _conv_pool(rng):
    batch, height, width, depth = (int(d) for d in rng.integers(1, 4, size=4))
    height, width = height + int(rng.integers(0, 5)), width + int(rng.integers(0, 5))
    padding = rng.choice(["SAME", "VALID"])
    stride_h, stride_w = (int(s) for s in rng.integers(1, 4, size=2))
    x = _float(rng, (batch, height, width, depth))
    if rng.random() < 0.5:
        kh, kw = (int(k) for k in rng.integers(1, 4, size=2))
        op = rng.choice(["max_pool", "avg_pool"])
        return (f"tf.nn.{op}(a, [1, {kh}, {kw}, 1], [1, {stride_h}, {stride_w}, 1], '{padding}')",
                {"a": x})
    kh, kw = (int(k) for k in rng.integers(1, 4, size=2))
    f = _float(rng, (kh, kw, depth, int(rng.integers(1, 4))), x.dtype)
    if rng.random() < 0.4:
        dh, dw = (int(d) for d in rng.integers(1, 3, size=2))
        return (f"tf.nn.conv2d(a, f, [1, 1, 1, 1], '{padding}', dilations=[1, {dh}, {dw}, 1])",
                {"a": x, "f": f})
    return f"tf.nn.conv2d(a, f, [1, {stride_h}, {stride_w}, 1], '{padding}')", {"a": x, "f": f}


def _losses(rng):
    batch, classes = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    logits = _float(rng, (batch, classes)) * 3
    roll = int(rng.integers(0, 5))
    if roll == 0:
        labels = rng.integers(0, classes + (rng.random() < 0.1), size=batch).astype(_int(rng))
        return ("tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l, logits=a)",
                {"a": logits, "l": labels})
    if roll == 1:
        labels = rng.dirichlet(np.ones(classes), size=batch).astype(logits.dtype)
        op = rng.choice(["softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits_v2"])
        if rng.random() < 0.4:
            return (f"tf.nn.{op}(labels=tf.transpose(l), logits=tf.transpose(a), dim=0)",
                    {"a": logits, "l": labels})
        return f"tf.nn.{op}(labels=l, logits=a)", {"a": logits, "l": labels}
    if roll == 2:
        labels = rng.random(logits.shape).astype(logits.dtype)
        return "tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=a)", {"a": logits, "l": labels}
    if roll == 3:
        ties = rng.integers(-1, 2, size=(batch, classes)).astype("float32")
        targets = rng.integers(0, classes + (rng.random() < 0.1), size=batch).astype(_int(rng))
        return f"tf.nn.in_top_k(a, t, {int(rng.integers(0, classes + 1))})", {"a": ties, "t": targets}
    x = _float(rng, (batch, 2, 3, int(rng.integers(1, 8))), "float32")
    radius = int(rng.integers(0, 4))
    return (f"tf.nn.local_response_normalization(a, {radius}, bias=1.5, alpha=0.3, beta=0.75)",
            {"a": x})


GENERATORS = [_reshape, _transpose, _concat, _stack, _unstack, _split, _slice, _python_slice,
              _python_slice, _strided_slice, _gather, _gather_nd, _scatter_nd, _boolean_mask,
              _where, _tile, _pad, _reverse, _one_hot, _expand_squeeze, _shape_size_rank,
              _fill_like, _range, _unique, _top_k, _diagonals, _einsum, _sequence_mask,
              _segments, _softmaxes, _normalizers, _activations, _bias_add, _conv_pool,
              _losses]

# Hand-picked edges: rank 0, empty tensors, clamped bounds and the errors TF1 raises on CPU.
EDGES = [
    ("tf.reshape(a, [])", {"a": np.array([7.0], np.float32)}),
    ("tf.reshape(a, [0, -1])", {"a": np.zeros((0, 3), np.int32)}),
    ("tf.reshape(a, [4, -1])", {"a": np.zeros((3, 3), np.float32)}),
    ("tf.concat([a, b], 0)", {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 2), np.float32)}),
    ("tf.gather(a, i)", {"a": np.arange(4.0), "i": np.array([4], np.int32)}),
    ("tf.gather(a, i)", {"a": np.arange(4.0), "i": np.array([-1], np.int64)}),
    ("tf.gather(a, i, axis=1)", {"a": np.zeros((2, 0)), "i": np.zeros((0,), np.int32)}),
    ("tf.gather_nd(a, i)", {"a": np.arange(6.0).reshape(2, 3), "i": np.array([[1, 3]], np.int32)}),
    ("tf.gather_nd(a, i)", {"a": np.arange(6.0).reshape(2, 3), "i": np.zeros((0, 2), np.int32)}),
    ("tf.scatter_nd(i, u, [3])", {"i": np.array([[3]], np.int32), "u": np.ones(1, np.float32)}),
    ("a[5:9]", {"a": np.arange(4)}),
    ("a[-9:2]", {"a": np.arange(4)}),
    ("a[::-1]", {"a": np.zeros((0,), np.float32)}),
    ("a[7]", {"a": np.arange(4)}),
    ("a[..., None]", {"a": np.array(3.0)}),
    ("a[None, ..., None, 1:, ::2]", {"a": np.arange(24).reshape(2, 3, 4)}),
    ("tf.strided_slice(a, [3], [0], [0])", {"a": np.arange(4)}),
    ("tf.pad(a, [[3, 0]], 'REFLECT')", {"a": np.arange(3.0)}),
    ("tf.pad(a, [[0, 4]], 'SYMMETRIC')", {"a": np.arange(3.0)}),
    ("tf.pad(a, [[1, 1]], constant_values=2.5)", {"a": np.arange(3.0)}),
    ("tf.tile(a, [2, 3])", {"a": np.array(1.0)}),
    ("tf.one_hot(i, 3, on_value=5, off_value=-1)", {"i": np.array([0, -1, 3, 2], np.int64)}),
    ("tf.one_hot(i, 3, axis=0)", {"i": np.array([[0, 2], [1, 5]], np.int32)}),
    ("tf.range(0)", {}), ("tf.range(5, 1)", {}), ("tf.range(1, 5, -1)", {}),
    ("tf.range(0.0, 1.0, 0.3)", {}), ("tf.range(3, 0.5, -0.75)", {}), ("tf.range(1, 4, 0)", {}),
    ("tf.squeeze(a, [0])", {"a": np.zeros((2, 1))}),
    ("tf.expand_dims(a, 3)", {"a": np.zeros((2, 1))}),
    ("tf.transpose(a, [0, 0])", {"a": np.zeros((2, 1))}),
    ("tf.split(a, 3)", {"a": np.zeros((4, 2))}),
    ("tf.split(a, [1, -1, -1])", {"a": np.zeros((4, 2))}),
    ("tf.split(a, [1, 1])", {"a": np.zeros((4, 2))}),
    ("tf.slice(a, [1], [4])", {"a": np.arange(4)}),
    ("tf.boolean_mask(a, m)", {"a": np.arange(4), "m": np.array([True, False])}),
    ("tf.boolean_mask(a, m)", {"a": np.array(1.0), "m": np.array(True)}),
    ("tf.where(c)", {"c": np.array(True)}),
    ("tf.where(c)", {"c": np.array([[0.0, 1.5], [np.nan, 0.0]])}),
    ("tf.where(c, x, y)", {"c": np.array([True, False, True]), "x": np.ones((3, 2)),
                           "y": np.zeros((3, 2))}),
    ("tf.where(c, x, y)", {"c": np.array([True, False]), "x": np.ones((3, 2)), "y": np.zeros((3, 2))}),
    ("tf.unique(a)", {"a": np.zeros((0,), np.int32)}),
    ("tf.unique(a)", {"a": np.array([2.0, np.nan, 2.0, -0.0, 0.0])}),
    ("tf.nn.top_k(a, 3)", {"a": np.array([1.0, 3.0, 1.0, 3.0, 2.0])}),
    ("tf.nn.top_k(a, 6)", {"a": np.array([1.0, 3.0, 1.0, 3.0, 2.0])}),
    ("tf.nn.top_k(a, 2)", {"a": np.array([np.inf, 1.0, np.inf, -np.inf])}),
    ("tf.nn.top_k(a, 3)", {"a": np.array([[-2 ** 31, 0, 5, -2 ** 31]], np.int32)}),
    ("tf.nn.in_top_k(a, t, 2)", {"a": np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32),
                                 "t": np.array([5, 0], np.int32)}),
    ("tf.nn.in_top_k(a, t, 2)", {"a": np.array([[np.inf, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32),
                                 "t": np.array([2, 1], np.int64)}),
    ("tf.one_hot(i, 2, on_value=2.5, dtype=tf.int32)", {"i": np.array([0, 1], np.int32)}),
    ("tf.one_hot(i, 2, on_value=2, dtype=tf.float64)", {"i": np.array([0, 1], np.int32)}),
    ("tf.one_hot(i, 2, off_value=np.float64(-1))", {"i": np.array([0, 1], np.int32)}),
    ("tf.pad(a, [[1, 1]], constant_values=1)", {"a": np.array([True, False])}),
    ("tf.pad(a, [[1, 1]], constant_values=True)", {"a": np.array([True, False])}),
    ("tf.constant(1, dtype=tf.bool)", {}),
    ("tf.strided_slice(a, [1], [2], [-1], shrink_axis_mask=1)", {"a": np.arange(4)}),
    ("a[1::-1]", {"a": np.arange(4)}),
    ("tf.matrix_band_part(a, 3, -1)", {"a": np.zeros((2, 3), np.float32)}),
    ("tf.matrix_band_part(a, 2, 3)", {"a": np.zeros((2, 3), np.float32)}),
    ("tf.boolean_mask(a, m, axis=1)", {"a": np.zeros((0, 2, 3)), "m": np.array([True, False])}),
    ("tf.reshape(a, [-1, 0])", {"a": np.zeros((2, 0, 3))}),
    ("tf.reshape(a, [0, -1, 2])", {"a": np.zeros((0, 3))}),
    ("tf.reshape(a, [2, -1])", {"a": np.zeros((0, 3))}),
    ("tf.nn.in_top_k(a, t, 1)", {"a": np.array([[1.0, 1.0, 0.0]], np.float32),
                                 "t": np.array([1], np.int32)}),
    ("tf.nn.in_top_k(a, t, 2)", {"a": np.array([[1.0, np.nan, 0.0]], np.float32),
                                 "t": np.array([1], np.int32)}),
    ("tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l, logits=a)",
     {"l": np.array([-1], np.int32), "a": np.zeros((1, 3), np.float32)}),
    ("tf.nn.softmax(a)", {"a": np.zeros((2, 0), np.float32)}),
    ("tf.nn.softmax(a)", {"a": np.array([1000.0, 0.0, -np.inf], np.float32)}),
    ("tf.nn.log_softmax(a)", {"a": np.array([1000.0, 0.0, -1000.0], np.float64)}),
    ("tf.nn.l2_normalize(a, 0)", {"a": np.zeros(3, np.float32)}),
    ("tf.sequence_mask(l, 2)", {"l": np.array([0, 1, 5], np.int32)}),
    ("tf.sequence_mask(l)", {"l": np.zeros((0,), np.int32)}),
    ("tf.segment_sum(d, s)", {"d": np.arange(3.0), "s": np.array([0, 2, 1], np.int32)}),
    ("tf.segment_sum(d, s)", {"d": np.arange(3.0), "s": np.array([1, 1, 3], np.int32)}),
    ("tf.unsorted_segment_sum(d, s, 2)", {"d": np.arange(3.0), "s": np.array([0, 2, 1], np.int32)}),
    ("tf.einsum('ij,jk->ik', a, b)", {"a": np.zeros((2, 3)), "b": np.zeros((2, 3))}),
    ("tf.matrix_band_part(a, 0, 0)", {"a": np.zeros((0, 3), np.int32)}),
    ("tf.fill([2, 0], 1.5)", {}), ("tf.fill([], 7)", {}),
    ("tf.zeros_like(a)", {"a": np.array([True, False])}),
    ("tf.ones_like(a, dtype=tf.int64)", {"a": np.array(1.5)}),
    ("tf.stack([a, b])", {"a": np.zeros(2), "b": np.zeros(3)}),
    ("tf.unstack(a)", {"a": np.zeros((0, 2))}),
    ("tf.nn.max_pool(a, [1, 3, 3, 1], [1, 2, 2, 1], 'VALID')", {"a": np.zeros((1, 2, 2, 1), np.float32)}),
    ("tf.nn.conv2d(a, f, [1, 1, 1, 1], 'VALID')", {"a": np.zeros((1, 2, 2, 1), np.float32),
                                                   "f": np.zeros((3, 3, 1, 1), np.float32)}),
]


def _draw(seed, per_family):
    rng = np.random.default_rng(seed)
    return [generator(rng) for _ in range(per_family) for generator in GENERATORS]


def program(cases, driver=DRIVER):
    """The source that runs ``cases`` (``(expr, inputs)``) under ``driver``, and its feeds.
    Shared with the other TF1 fuzzes (their own drivers)."""
    listed = [(expr, sorted(inputs)) for expr, inputs in cases]
    feeds = {f"c{i}_{name}": np.asarray(value) for i, (_, inputs) in enumerate(cases)
             for name, value in inputs.items()}
    return f"CASES = {listed!r}\n" + driver, feeds


def _tolerance(dtype):
    return {np.dtype("float32"): 2e-5, np.dtype("float64"): 1e-11,
            np.dtype("float16"): 2e-3}.get(np.dtype(dtype))


def _compatible(static, actual):
    return static is None or (len(static) == len(actual)
                              and all(s is None or s == a for s, a in zip(static, actual)))


def _outcome(outputs, i):
    if f"c{i}_err" in outputs:
        return str(outputs[f"c{i}_err"]), None, None
    count = int(outputs[f"c{i}_n"])
    values = list(outputs.get(f"c{i}", []))[:count] if count else []
    return None, values, ast.literal_eval(str(outputs[f"c{i}_static"]))


# A documented difference: TF1 keeps leaky_relu's alpha as a float32 attr, so its float64
# answer is x * 0.05000000074505806 where asyncflow's is x * 0.05 (both exact otherwise).
LOOSE_FLOAT64 = ("leaky_relu",)


def _compare(ours, theirs, i, expr=""):
    """The differences between our case ``i`` and TF1's, as lines (none when they agree)."""
    def differs(mine, want):
        tolerance = _tolerance(want.dtype)
        if want.dtype == np.float64 and any(name in expr for name in LOOSE_FLOAT64):
            tolerance = 1e-7
        if tolerance is None:
            same = np.array_equal(mine, want)
        else:
            same = np.allclose(mine, want, rtol=tolerance, atol=tolerance, equal_nan=True)
        return None if same else f"{mine.ravel()[:8]} TF1 {want.ravel()[:8]}"
    return compare_outcomes(ours, theirs, i, differs)


def compare_outcomes(ours, theirs, i, differs):
    """Case ``i``'s differences, as lines: errors on one side only, output counts, dtypes and
    shapes, values (``differs(mine, want)``: a line, or None where they agree) and static
    shapes. Shared with the other TF1 fuzzes."""
    our_error, our_values, our_static = _outcome(ours, i)
    tf_error, tf_values, tf_static = _outcome(theirs, i)
    if our_error or tf_error:
        if bool(our_error) != bool(tf_error):
            return [f"ours: {our_error or 'a value'} | TF1: {tf_error or 'a value'}"]
        return []
    if len(our_values) != len(tf_values):
        return [f"{len(our_values)} outputs, TF1 {len(tf_values)}"]
    problems = []
    for k, (mine, want) in enumerate(zip(our_values, tf_values)):
        mine, want = np.asarray(mine), np.asarray(want)
        if mine.dtype != want.dtype or mine.shape != want.shape:
            problems.append(f"out {k}: {mine.dtype}{list(mine.shape)}, TF1 {want.dtype}"
                            f"{list(want.shape)}")
            continue
        difference = differs(mine, want)
        if difference:
            problems.append(f"out {k}: {difference}")
        if not _compatible(our_static[k], list(mine.shape)):
            problems.append(f"out {k}: static shape {our_static[k]} but value {list(mine.shape)}")
        elif our_static[k] is not None and (tf_static[k] is None or not _compatible(
                tf_static[k], our_static[k]) or not _compatible(our_static[k], tf_static[k])):
            # neither a dim TF1 contradicts nor one it does not claim (nor fewer than it knows)
            problems.append(f"out {k}: static shape {our_static[k]}, TF1 {tf_static[k]}")
    return problems


def run_fuzz(tmp_path, cases, compare, driver=DRIVER):
    """Run ``cases`` in TF1's process and here; fail with every difference
    ``compare(ours, theirs, i, expr)`` lists, each case named with its inputs' dtypes and
    shapes (the conv and nn fuzzes' runner too, with their own driver and comparison)."""
    source, feeds = program(cases, driver)
    theirs = tf1_run(source, tmp_path, **feeds)
    ours = compat_run(source, feeds)
    report = []
    for i, (expr, inputs) in enumerate(cases):
        for problem in compare(ours, theirs, i, expr):
            shapes = {k: f"{np.asarray(v).dtype}{list(np.shape(v))}" for k, v in inputs.items()}
            report.append(f"case {i} {expr} {shapes}: {problem}")
    assert not report, f"{len(report)} differences from TF1:\n" + "\n".join(report)


def _fuzz(tmp_path, cases):
    run_fuzz(tmp_path, cases, _compare)


def test_array_and_nn_ops_agree_with_tf1(tmp_path):
    _fuzz(tmp_path, EDGES + _draw(seed=0, per_family=3))



# ---- sort, argsort and the moments (their own draws: the families above keep theirs) ------

def _sorts(rng):
    rank = int(rng.integers(1, 4))
    shape = _dims(rng, rank, 0, 5)
    dtype = rng.choice(["float32", "float64", "int32", "int64", "uint8", "int8"])
    values = rng.integers(0 if dtype == "uint8" else -2, 3, size=shape).astype(dtype)  # ties
    if dtype.startswith("float") and values.size and rng.random() < 0.3:
        values.flat[rng.integers(values.size, size=2)] = rng.choice([np.inf, -np.inf], 2)
    axis = int(rng.integers(-rank, rank))
    direction = rng.choice(["ASCENDING", "DESCENDING"])
    op = rng.choice(["tf.sort(a, axis={}, direction='{}')",
                     "tf.argsort(a, axis={}, direction='{}')",
                     "tf.argsort(a, {}, '{}', stable=True)"])
    return op.format(axis, direction), {"a": values}


def _moments(rng):
    rank = int(rng.integers(0, 4))
    shape = _dims(rng, rank, 0, 4)
    dtype = rng.choice(["float32", "float64", "float32", "float64", "int32"])
    values = (rng.standard_normal(shape) * 3).astype(dtype)
    op = rng.choice(["tf.reduce_logsumexp", "tf.math.reduce_logsumexp",
                     "tf.math.reduce_variance", "tf.math.reduce_std"])
    if "logsumexp" in op and values.size and dtype != "int32" and rng.random() < 0.4:
        values.flat[rng.integers(values.size, size=2)] = rng.choice([np.inf, -np.inf], 2)
    axis = None
    if rank and rng.random() < 0.7:
        picked = rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False)
        axis = [int(a) - rank * int(rng.integers(0, 2)) for a in picked]  # some negative
        axis = axis[0] if len(axis) == 1 and rng.random() < 0.5 else axis
    keepdims = bool(rng.random() < 0.5)
    return f"{op}(a, axis={axis!r}, keepdims={keepdims})", {"a": values}


def test_sort_and_moments_agree_with_tf1(tmp_path):
    rng = np.random.default_rng(20261206)
    edges = [("tf.sort(a)", {"a": np.array(3.0, np.float32)}),
             ("tf.sort(a, axis=1)", {"a": np.zeros((2,), np.float32)}),
             ("tf.argsort(a, direction='DESCENDING')",
              {"a": np.array([0, np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0], np.int32)}),
             ("tf.reduce_logsumexp(a, axis=1)",
              {"a": np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.inf, np.inf]], np.float32)}),
             ("tf.math.reduce_variance(a, axis=0)", {"a": np.zeros((0, 3), np.float64)})]
    run_fuzz(tmp_path, edges + [g(rng) for _ in range(12) for g in (_sorts, _moments)],
             _compare)

@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_array_and_nn_ops_agree_with_tf1_long(tmp_path, seed):
    _fuzz(tmp_path, _draw(seed=seed, per_family=25))
