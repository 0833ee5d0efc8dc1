"""The cases of the differential gradient fuzzer (``test_tf1_gradient_fuzz.py``).

A case is ``Case(expr, xs, c)``: ``expr`` is TF1 source that both sides evaluate with ``tf``
(``asyncflow.compat.v1`` here, ``tensorflow.compat.v1`` in the TF subprocess), ``np``, ``x``
(placeholders shaped like the arrays ``xs``, differentiated) and ``c`` (the arrays of ``c``:
indices, labels, conditions; never differentiated). Attributes (axes, strides, flags) are
literals written into ``expr``. ``expr`` gives one tensor or a list of tensors.

Each generator draws random shapes and attributes from ``rng``; ``cases(seed)`` calls every
generator once with a generator seeded from ``seed`` and the generator's name. ``fd=False``
marks a point where central differences are meaningless (a kink: ties, 0 of ``abs``); TF1's
subgradient there is the reference; ``fd_skip`` names inputs whose gradient is by definition not
the derivative (``stop_gradient``, TF1's choices). ``tf1=False`` marks a case TF1 cannot build (an op of ours
only): finite differences check it alone.
"""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np


@dataclasses.dataclass
class Case:
    expr: str
    xs: list
    c: dict = dataclasses.field(default_factory=dict)
    fd: bool = True
    fd_skip: tuple = ()  # inputs whose gradient is not the derivative (stop_gradient...)
    tf1: bool = True
    tf1_rtol: float = 1e-6
    rtol: float = 1e-4
    atol: float = 1e-6


GENERATORS = {}


def gen(fn):
    GENERATORS[fn.__name__] = fn
    return fn


def cases(seed):
    """``{name: Case}``, one per generator, drawn from ``seed``."""
    out = {}
    for name, fn in GENERATORS.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        out[name] = fn(rng)
    return out


def _shape(rng, rank=None, low=1, high=4):
    rank = int(rng.integers(1, 4)) if rank is None else rank
    return tuple(int(d) for d in rng.integers(low, high + 1, size=rank))


def _normal(rng, shape, scale=1.0):
    return rng.normal(scale=scale, size=shape)


def _away(rng, shape, low=0.3, high=2.0):
    """Values of random sign with magnitude in [low, high]: away from kinks at 0."""
    return rng.uniform(low, high, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def _broadcast_pair(rng):
    """Two shapes that broadcast: size-1 dims and missing leading dims on either side,
    sometimes a rank-0 side."""
    full = _shape(rng, int(rng.integers(1, 4)), 2, 3)
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return full, ()
    if kind == 1:
        return (), full
    a = tuple(1 if rng.random() < 0.4 else d for d in full)
    b = tuple(1 if (rng.random() < 0.4 and ad != 1) else d for d, ad in zip(full, a))
    drop = int(rng.integers(0, len(b) + 1))
    return a, b[drop:]


# --- elementwise unary ----------------------------------------------------------------------
UNARY = {  # name -> (expr on x[0], domain)
    "abs": ("tf.abs(x[0])", "away"), "neg": ("tf.negative(x[0])", "any"),
    "sin": ("tf.sin(x[0])", "any"), "cos": ("tf.cos(x[0])", "any"),
    "exp": ("tf.exp(x[0])", "any"), "log": ("tf.log(x[0])", "pos"),
    "log1p": ("tf.log1p(x[0])", "pos"), "reciprocal": ("tf.reciprocal(x[0])", "away"),
    "sqrt": ("tf.sqrt(x[0])", "pos"), "rsqrt": ("tf.rsqrt(x[0])", "pos"),
    "square": ("tf.square(x[0])", "any"), "sigmoid": ("tf.sigmoid(x[0])", "any"),
    "tanh": ("tf.tanh(x[0])", "any"), "erf": ("tf.erf(x[0])", "any"),
    "erfc": ("tf.erfc(x[0])", "any"),
    "ensure_shape": ("tf.ensure_shape(x[0], x[0].shape)", "any"),
    "identity_n": ("tf.identity_n([x[0], tf.sin(x[0])])[1]", "any"),
    "lgamma": ("tf.lgamma(x[0])", "pos"), "elu": ("tf.nn.elu(x[0])", "away"),
    "selu": ("tf.nn.selu(x[0])", "away"), "gelu": ("tf.nn.gelu(x[0])", "any"),
    "gelu_approx": ("tf.nn.gelu(x[0], approximate=True)", "any"),
    "leaky_relu": ("tf.nn.leaky_relu(x[0], alpha=0.3)", "away"),
    "relu": ("tf.nn.relu(x[0])", "away"), "relu6": ("tf.nn.relu6(x[0] * 4.0)", "away"),
    "softplus": ("tf.nn.softplus(x[0])", "any"), "softsign": ("tf.nn.softsign(x[0])", "any"),
    "identity": ("tf.identity(x[0])", "any"),
    "check_numerics": ("tf.check_numerics(x[0], 'fuzz')", "any"),
    "print": ("tf.Print(x[0], [x[0]], summarize=0, first_n=0)", "any"),
    "cast_roundtrip": ("tf.cast(tf.cast(x[0], tf.float32), tf.float64)", "any"),
    "pow_scalar": ("tf.pow(x[0], 3.0)", "any"),
    "tan": ("tf.tan(tf.tanh(x[0]))", "any"), "asin": ("tf.asin(tf.tanh(x[0]) * 0.9)", "any"),
    "acos": ("tf.acos(tf.tanh(x[0]) * 0.9)", "any"), "atan": ("tf.atan(x[0])", "any"),
    "sinh": ("tf.sinh(x[0])", "any"), "cosh": ("tf.cosh(x[0])", "any"),
    "asinh": ("tf.asinh(x[0])", "any"), "acosh": ("tf.acosh(x[0] + 1.0)", "pos"),
    "atanh": ("tf.atanh(tf.tanh(x[0]) * 0.9)", "any"), "expm1": ("tf.expm1(x[0])", "any"),
}


def _unary(expr, domain):
    def build(rng):
        shape = _shape(rng)
        if domain == "pos":
            values = rng.uniform(0.3, 2.5, size=shape)
        elif domain == "away":
            values = _away(rng, shape)
        else:
            values = _normal(rng, shape)
        # Differences through a float32 round trip measure its rounding, not a derivative.
        return Case(expr, [values], fd="cast" not in expr)
    return build


for _name, (_expr, _domain) in UNARY.items():
    GENERATORS["unary_" + _name] = _unary(_expr, _domain)


@gen
def kinks_at_zero(rng):
    """``abs``, ``relu``, ``sqrt``, ``rsqrt``, ``pow`` at exactly 0 (and at 1 for relu6's
    upper kink): TF1's subgradients are the reference."""
    x = np.array([0.0, 0.0, 1.5, -0.5, 0.0])
    return Case("[tf.abs(x[0]), tf.nn.relu(x[0]), tf.nn.relu6(x[0] * 4.0),"
                " tf.nn.leaky_relu(x[0]), tf.nn.elu(x[0]), tf.nn.selu(x[0]),"
                " tf.sqrt(tf.abs(x[1])), tf.rsqrt(tf.abs(x[1]) + 0.0),"
                " tf.pow(tf.abs(x[1]), 2.0), tf.pow(tf.abs(x[1]), 0.5),"
                " tf.pow(x[2], x[3]), tf.clip_by_value(x[0], -0.5, 1.5)]",
                [x, np.array([0.0, 1.0, 4.0]), np.array([0.0, 0.0, 2.0, 0.0]),
                 np.array([2.0, 0.0, 3.0, 1.0])], fd=False)


# --- elementwise binary with broadcasting ---------------------------------------------------
BINARY = {"add": "x[0] + x[1]", "sub": "x[0] - x[1]", "mul": "x[0] * x[1]",
          "div": "tf.divide(x[0], x[1])", "maximum": "tf.maximum(x[0], x[1])",
          "minimum": "tf.minimum(x[0], x[1])", "pow": "tf.pow(x[0], x[1])",
          "squared_difference": "tf.squared_difference(x[0], x[1])"}


def _binary(name, expr):
    def build(rng):
        sa, sb = _broadcast_pair(rng)
        a = rng.uniform(0.5, 2.0, size=sa) if name == "pow" else _away(rng, sa)
        b = _away(rng, sb)
        if name in ("maximum", "minimum"):
            b = b + 0.05  # no ties: ties have their own case
        return Case(expr, [a, b])
    return build


for _name, _expr in BINARY.items():
    GENERATORS["binary_" + _name] = _binary(_name, _expr)


@gen
def maximum_minimum_ties(rng):
    """Ties: TF1 gives the whole gradient to x where x >= y (maximum), x <= y (minimum)."""
    a = np.array([[1.0, 2.0, -1.0], [0.5, 0.5, 3.0]])
    b = np.array([[1.0, 1.0, -1.0], [0.5, 2.0, 3.0]])
    return Case("[tf.maximum(x[0], x[1]), tf.minimum(x[0], x[1]),"
                " tf.maximum(x[0], x[2]), tf.minimum(x[2], x[0])]",
                [a, b, np.array(0.5)], fd=False)


@gen
def clip_by_value_bounds(rng):
    """At the bounds; with tensor bounds that broadcast (TF1 gives them gradients too)."""
    x = np.array([[-1.0, -0.5, 0.0, 0.5, 1.0, 2.0]])
    return Case("[tf.clip_by_value(x[0], -0.5, 0.5), tf.clip_by_value(x[0], x[1], x[2])]",
                [x, np.array(-0.5), np.array([[0.5], ])], fd=False)


@gen
def clip_by_value_random(rng):
    shape = _shape(rng)
    return Case("tf.clip_by_value(x[0], -0.7, 0.9)", [_normal(rng, shape) + 0.013])


@gen
def add_n(rng):
    shape = _shape(rng)
    return Case("tf.add_n([x[0], x[1], x[0], x[2]])", [_normal(rng, shape) for _ in range(3)])


@gen
def where_select(rng):
    shape = _shape(rng)
    cond = rng.random(shape) < 0.5
    return Case("tf.where(c['cond'], x[0], x[1])", [_normal(rng, shape), _normal(rng, shape)],
                {"cond": cond})


@gen
def bias_add_and_l2_loss(rng):
    shape = _shape(rng, int(rng.integers(2, 4)), 2, 3)
    return Case("[tf.nn.bias_add(x[0], x[1]), tf.nn.l2_loss(x[0]) + 0 * x[1]]",
                [_normal(rng, shape), _normal(rng, shape[-1:])])


# --- reductions ---------------------------------------------------------------------------
REDUCE = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]


def _reduction(fn):
    def build(rng):
        shape = _shape(rng, int(rng.integers(1, 4)), 2, 4)
        rank = len(shape)
        axis = rng.choice([None, "int", "list"])
        if axis == "int":
            axis = int(rng.integers(-rank, rank))
        elif axis == "list":
            picked = {int(a) for a in rng.integers(0, rank, size=2)}  # distinct axes
            axis = sorted(a - rank if rng.random() < 0.5 else a for a in picked)
        keep = bool(rng.random() < 0.5)
        x = _away(rng, shape, 0.5, 1.5) if fn == "reduce_prod" else _normal(rng, shape)
        return Case(f"tf.{fn}(x[0], axis={axis!r}, keepdims={keep})", [x])
    return build


for _fn in REDUCE:
    GENERATORS[_fn] = _reduction(_fn)


@gen
def reduce_max_min_ties(rng):
    """TF1 splits the gradient of reduce_max/min evenly among the tied maxima."""
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    return Case("[tf.reduce_max(x[0], axis=1), tf.reduce_min(x[0], axis=-1, keepdims=True),"
                " tf.reduce_max(x[0])]", [x], fd=False)


@gen
def reduce_prod_zeros(rng):
    """One zero and two zeros in a row of reduce_prod: the gradient is the product of the
    others (TF1 computes it without dividing)."""
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.5, 2.0, -1.0]])
    return Case("[tf.reduce_prod(x[0], axis=1), tf.reduce_prod(x[0], axis=0, keepdims=True)]",
                [x])


@gen
def norms(rng):
    shape = _shape(rng, 3, 2, 3)
    return Case("[tf.norm(x[0]), tf.norm(x[0], ord=1, axis=-1), tf.norm(x[0], axis=[1, 2]),"
                " tf.nn.l2_normalize(x[0], axis=1), tf.nn.l2_normalize(x[0], axis=[0, -1])]",
                [_away(rng, shape)])


@gen
def moments_batch_norm(rng):
    shape = (int(rng.integers(2, 4)), 3)
    return Case("[tf.nn.batch_normalization(x[0], *tf.nn.moments(x[0], axes=[0]), x[1], x[2],"
                " 1e-3), tf.nn.batch_normalization(x[0], x[3], tf.square(x[4]) + 0.5, None,"
                " None, 1e-2)]",
                [_normal(rng, shape), _normal(rng, (3,)), _normal(rng, (3,)),
                 _normal(rng, (3,)), _normal(rng, (3,))])


# --- cumulative -----------------------------------------------------------------------------
@gen
def cumsum(rng):
    shape = _shape(rng, int(rng.integers(1, 4)), 2, 4)
    axis = int(rng.integers(-len(shape), len(shape)))
    ex, rev = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    return Case(f"tf.cumsum(x[0], axis={axis}, exclusive={ex}, reverse={rev})",
                [_normal(rng, shape)])


@gen
def cumprod(rng):
    shape = _shape(rng, int(rng.integers(1, 3)), 2, 4)
    axis = int(rng.integers(-len(shape), len(shape)))
    ex, rev = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    return Case(f"tf.cumprod(x[0], axis={axis}, exclusive={ex}, reverse={rev})",
                [_away(rng, shape, 0.5, 1.5)])


@gen
def cumprod_zeros(rng):
    """Zeros in cumprod: TF1's gradient divides by x (NaN, inf there), TF 2's compat.v1 gives 0
    (``div_no_nan``); both differ from the derivative, which ours gives: the finite
    differences are the reference."""
    x = np.array([[1.5, 0.0, 2.0, -1.0, 0.0], [0.0, 0.0, 3.0, 2.0, 0.5],
                  [2.0, 0.5, -1.0, 1.5, 0.0]])
    flags = [(bool(e), bool(r)) for e, r in rng.permutation([(0, 0), (0, 1), (1, 0), (1, 1)])]
    return Case("[" + ", ".join(f"tf.cumprod(x[0], axis={a}, exclusive={e}, reverse={r})"
                                for a, (e, r) in zip((1, -1, 0, 0), flags)) + "]",
                [x], tf1=False)


# --- matmul, einsum, linear algebra ---------------------------------------------------------
@gen
def matmul(rng):
    ta, tb = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    m, k, n = (int(v) for v in rng.integers(1, 4, size=3))
    batch = [(), (2,)][int(rng.integers(0, 2))]
    a = batch + ((k, m) if ta else (m, k))
    b = batch + ((n, k) if tb else (k, n))
    return Case(f"tf.matmul(x[0], x[1], transpose_a={ta}, transpose_b={tb})",
                [_normal(rng, a), _normal(rng, b)])


@gen
def einsum(rng):
    forms = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
             ("ij->ji", [(2, 3)]), ("ij,ij->i", [(3, 2), (3, 2)]), ("i,j->ij", [(2,), (3,)]),
             ("bij,jk->bk", [(2, 3, 2), (2, 3)]), ("ii->i", [(3, 3)])]
    eq, shapes = forms[int(rng.integers(0, len(forms)))]
    args = ", ".join(f"x[{i}]" for i in range(len(shapes)))
    return Case(f"tf.einsum({eq!r}, {args})", [_normal(rng, s) for s in shapes])


@gen
def matrix_ops(rng):
    n = int(rng.integers(2, 4))
    lo, hi = int(rng.integers(-1, 2)), int(rng.integers(-1, 2))
    return Case(f"[tf.matrix_band_part(x[0], {lo}, {hi}), tf.matrix_diag(x[1]),"
                " tf.matrix_diag_part(x[0]), tf.matrix_set_diag(x[0], x[1] * 2.0)]",
                [_normal(rng, (2, n, n)), _normal(rng, (2, n))])


@gen
def determinant_inverse_cholesky(rng):
    n = int(rng.integers(2, 4))
    a = _normal(rng, (n, n)) + 3 * np.eye(n)
    return Case(f"[tf.matrix_determinant(x[0]), tf.matrix_inverse(x[0]),"
                f" tf.cholesky(tf.matmul(x[0], x[0], transpose_b=True)"
                f" + {n}.0 * tf.eye({n}, dtype=tf.float64))]", [a])



@gen
def solves(rng):
    n, k = int(rng.integers(2, 4)), int(rng.integers(1, 3))
    adjoint, lower = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    a = _normal(rng, (2, n, n)) + 3 * np.eye(n)
    return Case(f"[tf.matrix_solve(x[0], x[1], adjoint={adjoint}),"
                f" tf.matrix_triangular_solve(x[0], x[1], lower={lower}, adjoint={adjoint}),"
                " tf.cholesky_solve(tf.matrix_band_part(x[0], -1, 0), x[1])]",
                [a, _normal(rng, (2, n, k))])

# --- layout -----------------------------------------------------------------------------------
@gen
def concat_split(rng):
    shape = _shape(rng, 2, 2, 4)
    axis = int(rng.integers(-2, 2))
    other = list(shape)
    other[axis] = int(rng.integers(1, 3))
    total = shape[axis] + other[axis]
    sizes = [1, total - 1]
    return Case(f"[tf.concat([x[0], x[1]], axis={axis}),"
                f" tf.split(tf.concat([x[0], x[1]], {axis}), {sizes}, axis={axis})[1],"
                f" tf.split(x[0] * 1.0, {shape[axis]}, axis={axis})[0]]",
                [_normal(rng, shape), _normal(rng, tuple(other))])


@gen
def stack_unstack(rng):
    shape = _shape(rng, 2, 2, 3)
    axis = int(rng.integers(-3, 3))
    return Case(f"[tf.stack([x[0], x[1], x[0]], axis={axis}),"
                f" tf.unstack(x[0], axis={axis % 2 - 2})[-1]]",
                [_normal(rng, shape), _normal(rng, shape)])


@gen
def reshape_squeeze_expand(rng):
    shape = (2, 1, 3)
    return Case("[tf.reshape(x[0], [3, -1]), tf.squeeze(x[0], axis=[1]), tf.squeeze(x[0]),"
                " tf.expand_dims(x[0], -1), tf.expand_dims(x[1], 0)]",
                [_normal(rng, shape), np.array(rng.normal())])


@gen
def transpose(rng):
    shape = _shape(rng, 3, 2, 4)
    perm = [int(p) for p in rng.permutation(3)]
    return Case(f"tf.transpose(x[0], {perm})", [_normal(rng, shape)])


@gen
def tile(rng):
    shape = _shape(rng, 2, 1, 3)
    reps = [int(r) for r in rng.integers(1, 4, size=2)]
    return Case(f"tf.tile(x[0], {reps})", [_normal(rng, shape)])


@gen
def pad(rng):
    shape = _shape(rng, 2, 3, 4)
    pads = [[int(v) for v in rng.integers(0, 3, size=2)] for _ in range(2)]
    mode = ["REFLECT", "SYMMETRIC"][int(rng.integers(0, 2))]
    return Case(f"[tf.pad(x[0], {pads}, mode={mode!r}), tf.pad(x[0], {pads}),"
                f" tf.pad(x[0], {pads}, constant_values=1.5)]", [_normal(rng, shape)])


@gen
def mirror_pad_second_order(rng):
    """The gradient of a mirror pad's gradient (MirrorPadGrad) w.r.t. the upstream values."""
    mode = ["REFLECT", "SYMMETRIC"][int(rng.integers(0, 2))]
    return Case(f"(lambda b: tf.gradients(tf.reduce_sum(tf.pad(b, [[1, 2], [2, 1]], {mode!r})"
                " * x[0]), b)[0])(tf.constant(c['base']))", [_normal(rng, (6, 6))],
                {"base": _normal(rng, (3, 3))})


@gen
def reverse_slice(rng):
    shape = _shape(rng, 3, 2, 4)
    axes = sorted({int(a) for a in rng.integers(0, 3, size=2)})  # distinct axes
    axes = [a - 3 if rng.random() < 0.5 else a for a in axes]
    begin = [int(rng.integers(0, d)) for d in shape]
    size = [int(rng.integers(1, d - b + 1)) if rng.random() < 0.7 else -1
            for d, b in zip(shape, begin)]
    return Case(f"[tf.reverse(x[0], {axes}), tf.slice(x[0], {begin}, {size})]",
                [_normal(rng, shape)])


@gen
def roll_where_v2_space_batch(rng):
    """tf.roll, tf.where_v2 (condition, x and y broadcast), space/depth and space/batch."""
    shape = _shape(rng, 2, 2, 4)
    shifts = [int(v) for v in rng.integers(-3, 4, size=2)]
    block = int(rng.integers(1, 3))
    return Case(f"[tf.roll(x[0], {shifts}, [0, -1]), tf.where_v2(c['m'], x[0], x[1]),"
                " tf.space_to_depth(x[2], 2), tf.depth_to_space(x[3], 2),"
                f" tf.space_to_batch_nd(x[2], [2, {block}], [[0, 0], [1, {block - 1}]]),"
                " tf.batch_to_space_nd(x[4], [2, 2], [[1, 0], [0, 1]])]",
                [_normal(rng, shape), _normal(rng, (shape[1],)), _normal(rng, (1, 4, 2, 2)),
                 _normal(rng, (2, 2, 1, 8)), _normal(rng, (4, 2, 2, 1))],
                {"m": rng.random((shape[0], 1)) < 0.5})


@gen
def cross(rng):
    """tf.cross over a leading batch, and of one vector."""
    rows = int(rng.integers(1, 4))
    return Case("[tf.cross(x[0], x[1]), tf.linalg.cross(x[2], x[0][0])]",
                [_normal(rng, (rows, 3)), _normal(rng, (rows, 3)), _normal(rng, (3,))])


@gen
def igamma(rng):
    """tf.igamma / tf.igammac with respect to x (a constant: TF1's IgammaGradA is not
    provided), a broadcast against x."""
    shape = _shape(rng, 2, 1, 4)
    return Case("[tf.igamma(tf.constant(c['a']), x[0]), tf.igammac(tf.constant(c['a'][:1]),"
                " x[0])]", [rng.uniform(0.3, 4.0, size=shape)],
                {"a": rng.uniform(0.5, 5.0, size=(shape[0], 1))})


@gen
def strided_slice(rng):
    """Negative strides, shrink and new axes, masks, ellipsis."""
    forms = ["x[0][::-1, 1:]", "x[0][-1::-2, ::2]", "x[0][1, ::-1]",
             "x[0][..., None, -2]", "x[0][:, None, 3:0:-1]",
             "tf.strided_slice(x[0], [3, 0], [0, 4], [-1, 3], begin_mask=2)",
             "tf.strided_slice(x[0], [0, -1], [0, -5], [1, -2], end_mask=1, shrink_axis_mask=0)"]
    form = forms[int(rng.integers(0, len(forms)))]
    return Case(f"[{form}, x[0][-1::-2, 3:0:-1]]", [_normal(rng, (4, 5))])


@gen
def strided_slice_second_order(rng):
    """StridedSliceGrad's gradient: the slice's gradient differentiated w.r.t. the upstream."""
    return Case("(lambda b: tf.gradients(tf.reduce_sum(b[::-2, 1:3] * x[0]), b)[0])"
                "(tf.constant(c['base']))",
                [_normal(rng, (2, 2))], {"base": _normal(rng, (4, 4))})


# --- indexing -------------------------------------------------------------------------------
@gen
def gather(rng):
    """Repeated indices: their gradients add."""
    shape = _shape(rng, int(rng.integers(1, 4)), 2, 4)
    axis = int(rng.integers(0, len(shape)))
    idx = rng.integers(0, shape[axis], size=_shape(rng, int(rng.integers(1, 3)), 1, 4))
    idx.reshape(-1)[0] = idx.reshape(-1)[-1]
    return Case(f"tf.gather(x[0], c['idx'], axis={axis})", [_normal(rng, shape)],
                {"idx": idx.astype(np.int32)})


@gen
def gather_nd(rng):
    shape = _shape(rng, 3, 2, 3)
    depth = int(rng.integers(1, 4))
    idx = np.stack([rng.integers(0, d, size=(4,)) for d in shape[:depth]], -1)
    idx[1] = idx[0]
    return Case("tf.gather_nd(x[0], c['idx'])", [_normal(rng, shape)],
                {"idx": idx.astype(np.int32)})


@gen
def scatter_nd(rng):
    """Updates through scatter_nd, duplicate indices included (they add)."""
    idx = np.array([[0, 1], [2, 0], [0, 1]], np.int32)
    return Case("tf.scatter_nd(c['idx'], x[0], [3, 2, 2])", [_normal(rng, (3, 2))],
                {"idx": idx})


@gen
def tensor_scatter_update(rng):
    idx = np.array([[1], [3]], np.int32)
    return Case("tf.tensor_scatter_update(x[0], c['idx'], x[1])",
                [_normal(rng, (4, 3)), _normal(rng, (2, 3))], {"idx": idx})


@gen
def segment_sums(rng):
    n = int(rng.integers(3, 6))
    seg = np.sort(rng.integers(0, 3, size=n)).astype(np.int32)
    useg = rng.integers(-1, 4, size=n).astype(np.int32)
    return Case("[tf.segment_sum(x[0], c['seg']), tf.unsorted_segment_sum(x[0], c['useg'], 4)]",
                [_normal(rng, (n, 2))], {"seg": seg, "useg": useg})


@gen
def tensor_scatter_combining(rng):
    """add/sub/max/min into a copy, a repeated tuple included (max/min: ties share)."""
    idx = np.array([[1], [3], [1]], np.int32)
    ops = ", ".join(f"tf.tensor_scatter_nd_{k}(x[0], c['idx'], x[1])"
                    for k in ("add", "sub", "max", "min"))
    return Case(f"[{ops}]", [_normal(rng, (4, 3)), _normal(rng, (3, 3))], {"idx": idx})


@gen
def segment_reductions(rng):
    """max/min/mean/prod, sorted and unsorted (every segment non-empty: an empty max is the
    dtype's lowest value, no place for a finite difference), negative ids dropped."""
    seg = np.sort(np.concatenate([[0, 1, 2], rng.integers(0, 3, size=3)])).astype(np.int32)
    useg = rng.permutation(np.concatenate([[0, 1, 2, -1], rng.integers(0, 3, size=2)]))
    ops = ", ".join([f"tf.segment_{k}(x[0], c['seg'])" for k in ("max", "min", "mean", "prod")]
                    + [f"tf.unsorted_segment_{k}(x[0], c['useg'], 3)"
                       for k in ("max", "min", "prod")])
    return Case(f"[{ops}]", [_normal(rng, (6, 2))], {"seg": seg, "useg": useg.astype(np.int32)})


@gen
def dynamic_partition_stitch(rng):
    n = 5
    parts = rng.integers(0, 3, size=n).astype(np.int32)
    return Case("[tf.dynamic_partition(x[0], c['parts'], 3)[1] * 2.0,"
                " tf.dynamic_partition(x[0], c['parts'], 3)[0],"
                " tf.dynamic_stitch([c['i0'], c['i1']], [x[1], x[2]])]",
                [_normal(rng, (n, 2)), _normal(rng, (2,)), _normal(rng, (3,))],
                {"parts": parts, "i0": np.array([0, 3], np.int32),
                 "i1": np.array([1, 4, 2], np.int32)})


@gen
def dynamic_stitch_duplicates(rng):
    """Index 1 stitched twice: the later value wins, yet TF1 gives the overwritten one the
    gradient too (a gather per input, no mask): TF1's choice, which ours keeps; no finite
    differences."""
    return Case("tf.dynamic_stitch([c['i0'], c['i1']], [x[0], x[1]])",
                [_normal(rng, (2, 2)), _normal(rng, (2, 2))],
                {"i0": np.array([0, 1], np.int32), "i1": np.array([1, 2], np.int32)}, fd=False)


@gen
def top_k(rng):
    x = rng.permutation(12).reshape(3, 4).astype(np.float64) * 0.5
    k = int(rng.integers(1, 4))
    return Case(f"tf.nn.top_k(x[0], k={k})[0]", [x])


@gen
def atan2(rng):
    y_shape, x_shape = _broadcast_pair(rng)
    return Case("tf.atan2(x[0], x[1])", [_normal(rng, y_shape), rng.uniform(0.3, 2.5, x_shape)])


@gen
def sort(rng):
    """Sort (distinct values: differentiable) and, through the gradient of its gradient,
    PermuteAlongAxis."""
    x = rng.permutation(12).reshape(3, 4).astype(np.float64) * 0.5
    axis = int(rng.integers(-2, 2))
    direction = rng.choice(["ASCENDING", "DESCENDING"])
    return Case(f"[tf.sort(x[0], axis={axis}, direction='{direction}'),"
                f" tf.gradients(tf.sort(x[0], axis={axis}) * x[1], x[0])[0]]",
                [x, _normal(rng, (3, 4))])


# --- nn -------------------------------------------------------------------------------------
def _conv2d(rng, dilated):
    padding = ["SAME", "VALID"][int(rng.integers(0, 2))]
    strides, dil = [1, 1], [1, 1]
    if dilated:
        dil = [int(d) for d in rng.integers(1, 3, size=2)]
        dil[int(rng.integers(0, 2))] = 2
    else:
        strides = [int(s) for s in rng.integers(1, 3, size=2)]
    fh, fw = (int(v) for v in rng.integers(1, 4, size=2))
    h, w = (int(v) for v in rng.integers(5, 7, size=2))
    return Case(f"tf.nn.conv2d(x[0], x[1], strides=[1, {strides[0]}, {strides[1]}, 1],"
                f" padding={padding!r}, dilations=[1, {dil[0]}, {dil[1]}, 1])",
                [_normal(rng, (1, h, w, 2)), _normal(rng, (fh, fw, 2, 2))], tf1=not dilated)


@gen
def conv2d(rng):
    return _conv2d(rng, False)


@gen
def conv2d_dilated(rng):
    """TF's CPU kernels have no dilated Conv2DBackpropFilter: finite differences only."""
    return _conv2d(rng, True)


@gen
def conv2d_transpose(rng):
    """Conv2DBackpropInput as an op of its own (tf.nn.conv2d_transpose): gradients to the
    input and the filter."""
    stride = int(rng.integers(1, 3))
    padding = ["SAME", "VALID"][int(rng.integers(0, 2))]
    out = [1, 5, 5, 2] if padding == "SAME" or stride == 1 else [1, 5, 5, 2]
    x_hw = (-(-5 // stride)) if padding == "SAME" else (5 - 3) // stride + 1
    return Case(f"tf.nn.conv2d_transpose(x[0], x[1], {out}, [1, {stride}, {stride}, 1],"
                f" padding={padding!r})",
                [_normal(rng, (1, x_hw, x_hw, 3)), _normal(rng, (3, 3, 2, 3))])


@gen
def conv2d_second_order(rng):
    """Conv2DBackpropFilter and Conv2DBackpropInput differentiated: the gradients of a conv's
    gradients w.r.t. the upstream gradient."""
    return Case("(lambda i, f: tf.gradients(tf.reduce_sum(tf.nn.conv2d(i, f, [1, 2, 1, 1],"
                " 'SAME') * x[0]), [i, f]))(tf.constant(c['img']), tf.constant(c['f']))",
                [_normal(rng, (1, 3, 5, 2))],
                {"img": _normal(rng, (1, 5, 5, 2)), "f": _normal(rng, (2, 3, 2, 2))})


@gen
def pools(rng):
    ksize = [int(v) for v in rng.integers(1, 4, size=2)]
    strides = [int(v) for v in rng.integers(1, 3, size=2)]
    padding = ["SAME", "VALID"][int(rng.integers(0, 2))]
    # distinct values: no ties
    x = rng.permutation(2 * 5 * 6 * 2).reshape(2, 5, 6, 2) * 0.1
    return Case(f"[tf.nn.max_pool(x[0], [1, {ksize[0]}, {ksize[1]}, 1],"
                f" [1, {strides[0]}, {strides[1]}, 1], {padding!r}),"
                f" tf.nn.avg_pool(x[0], [1, {ksize[0]}, {ksize[1]}, 1],"
                f" [1, {strides[0]}, {strides[1]}, 1], {padding!r})]", [x])


@gen
def max_pool_ties(rng):
    """Ties in a window: TF1's max_pool gradient goes to the first max only."""
    x = np.array([[1.0, 1.0, 0.0, 2.0], [1.0, 0.5, 2.0, 2.0], [0.0, 3.0, 3.0, 3.0],
                  [3.0, 3.0, 1.0, 1.0]]).reshape(1, 4, 4, 1)
    return Case("[tf.nn.max_pool(x[0], [1, 2, 2, 1], [1, 2, 2, 1], 'VALID'),"
                " tf.nn.max_pool(x[0], [1, 3, 3, 1], [1, 1, 1, 1], 'SAME')]", [x], fd=False)


@gen
def pool_second_order(rng):
    """AvgPoolGrad differentiated w.r.t. its upstream gradient."""
    return Case("(lambda i: tf.gradients(tf.reduce_sum(tf.nn.avg_pool(i, [1, 2, 3, 1],"
                " [1, 2, 1, 1], 'SAME') * x[0]), i)[0])(tf.constant(c['img']))",
                [_normal(rng, (1, 3, 5, 1))], {"img": _normal(rng, (1, 5, 5, 1))})


@gen
def image_patches(rng):
    """ExtractImagePatches (VALID or SAME, strides and rates drawn) and its gradient op
    differentiated w.r.t. the upstream gradient."""
    k, stride, rate = (int(v) for v in rng.integers(1, 3, size=3))
    padding = "SAME" if rng.random() < 0.5 else "VALID"
    attrs = f"[1, 2, {k}, 1], [1, {stride}, 1, 1], [1, 1, {rate}, 1], {padding!r}"
    span = k + (k - 1) * (rate - 1)
    rows = -(-3 // stride) if padding == "SAME" else (3 - 2 + stride) // stride
    cols = 4 if padding == "SAME" else 4 - span + 1
    return Case(f"[tf.extract_image_patches(x[0], {attrs}),"
                f" (lambda i: tf.gradients(tf.reduce_sum(tf.extract_image_patches(i, {attrs})"
                " * x[1]), i)[0])(tf.constant(c['img']))]",
                [_normal(rng, (2, 3, 4, 2)), _normal(rng, (1, rows, cols, 2 * k * 2))],
                {"img": _normal(rng, (1, 3, 4, 2))})


@gen
def activation_second_order(rng):
    """ReluGrad, SigmoidGrad, TanhGrad, SoftplusGrad: the activation's gradient differentiated
    w.r.t. the input and the upstream gradient."""
    shape = _shape(rng, 2, 2, 3)
    return Case("[tf.gradients(tf.reduce_sum(f(x[0]) * x[1]), x[0])[0] for f in"
                " (tf.nn.relu, tf.sigmoid, tf.tanh, tf.nn.softplus)]",
                [_away(rng, shape), _normal(rng, shape)])


def _lrn(rng, float32):
    radius = int(rng.integers(1, 3))
    expr = (f"tf.nn.local_response_normalization(x[0], depth_radius={radius}, bias=1.0,"
            " alpha=0.5, beta=0.75)")
    if float32:  # TF's LRN has no float64 kernel; differences through float32 are noise
        expr = f"tf.cast({expr.replace('x[0]', 'tf.cast(x[0], tf.float32)')}, tf.float64)"
    return Case(expr, [_normal(rng, (1, 2, 2, 5))], fd=not float32, tf1=float32,
                tf1_rtol=1e-4)


@gen
def lrn(rng):
    return _lrn(rng, False)


@gen
def lrn_float32(rng):
    return _lrn(rng, True)


@gen
def resize_bilinear(rng):
    """ResizeBilinear computes in float32 (so finite differences at 1e-6 are noise; its
    finite-difference check is tests/ops/test_conv_tf1_values.py's): TF1 is the reference."""
    size = [int(v) for v in rng.integers(1, 7, size=2)]
    align = bool(rng.random() < 0.5)
    return Case(f"tf.cast(tf.image.resize_bilinear(x[0], {size}, align_corners={align}),"
                " tf.float64)", [_normal(rng, _shape(rng, 4, 1, 4))], fd=False, tf1_rtol=1e-5)


@gen
def resize_nearest_neighbor(rng):
    """Linear in the image: finite differences are exact up to rounding, in every mode."""
    size = [int(v) for v in rng.integers(1, 8, size=2)]
    align, half = [(False, False), (True, False), (False, True)][int(rng.integers(3))]
    return Case(f"tf.image.resize_nearest_neighbor(x[0], {size}, align_corners={align}, "
                f"half_pixel_centers={half})", [_normal(rng, _shape(rng, 4, 1, 5))])


@gen
def softmax_family(rng):
    shape = _shape(rng, 2, 2, 4)
    return Case("[tf.nn.softmax(x[0]), tf.nn.log_softmax(x[0]), tf.nn.softmax(x[0], axis=0),"
                " tf.nn.log_softmax(x[0], axis=0)]", [_normal(rng, shape)])


@gen
def softmax_cross_entropy(rng):
    """Both the logits' and the labels' gradient (v2 has the labels' one; v1 stops it)."""
    n, k = (int(v) for v in rng.integers(2, 5, size=2))
    labels = rng.dirichlet(np.ones(k), size=n)
    return Case("[tf.nn.softmax_cross_entropy_with_logits_v2(labels=x[1], logits=x[0]),"
                " tf.nn.softmax_cross_entropy_with_logits(labels=x[2] * 1.0, logits=x[0] * 2.0)]",
                [_normal(rng, (n, k)), labels, labels[::-1].copy()], fd_skip=(2,))


@gen
def cross_entropy_second_order(rng):
    """The cross entropies' logits gradient differentiated (ExpandDimsMul's gradient)."""
    n, k = (int(v) for v in rng.integers(2, 4, size=2))
    return Case("[tf.gradients(tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits_v2("
                "labels=c['p'], logits=x[0]) * x[1]), x[0])[0],"
                " tf.gradients(tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits("
                "labels=c['y'], logits=x[0]) * x[1]), x[0])[0]]",
                [_normal(rng, (n, k)), _normal(rng, (n,))],
                {"p": rng.dirichlet(np.ones(k), size=n), "y": rng.integers(0, k, size=n)
                 .astype(np.int32)})


@gen
def broadcast_second_order(rng):
    """A broadcasting op's gradient (the sum back to the input's shape) differentiated."""
    return Case("(lambda b: tf.gradients(tf.reduce_sum(tf.sin(b * x[0] + b)), b)[0])"
                "(tf.placeholder_with_default(c['b'], [None, 1]))", [_normal(rng, (3, 4))], {"b": _normal(rng, (3, 1))})


@gen
def sparse_softmax_cross_entropy(rng):
    n, k = (int(v) for v in rng.integers(2, 5, size=2))
    # the integer labels are an input: their gradient is None, as in TF1
    return Case("tf.nn.sparse_softmax_cross_entropy_with_logits(labels=x[1], logits=x[0])",
                [_normal(rng, (n, k)), rng.integers(0, k, size=n).astype(np.int32)])


# --- sparse ---------------------------------------------------------------------------------
@gen
def sparse_to_dense_scalar_value(rng):
    """A scalar value broadcast to every index: its gradient is the sum there (TF 2's
    compat.v1 returns a wrongly shaped one): finite differences only."""
    return Case("tf.sparse_to_dense(c['s'], [2, 3], x[0], x[1])",
                [np.array(rng.normal()), np.array(rng.normal())],
                {"s": np.array([[0, 1], [1, 0], [1, 2]], np.int32)}, tf1=False)


@gen
def sparse_ops(rng):
    a_idx = np.array([[0, 1], [2, 0], [1, 3]], np.int64)
    b_idx = np.array([[2, 0], [0, 0]], np.int64)
    return Case("[tf.sparse_tensor_to_dense(tf.sparse_add("
                "tf.SparseTensor(c['a'], x[0], [3, 4]), tf.SparseTensor(c['b'], x[1], [3, 4]))),"
                " tf.sparse_tensor_to_dense(tf.sparse_reorder(tf.SparseTensor(c['a'], x[0],"
                " [3, 4]))), tf.sparse_to_dense(c['s'], [4], x[2], x[3])]",
                [_normal(rng, (3,)), _normal(rng, (2,)), _normal(rng, (2,)),
                 np.array(rng.normal())],
                {"a": a_idx, "b": b_idx, "s": np.array([[0], [2]], np.int32)})


# --- control flow, tensor arrays ------------------------------------------------------------
@gen
def cond_and_while(rng):
    return Case("[tf.cond(c['p'], lambda: tf.sin(x[0]) * x[1], lambda: x[0] * 3.0),"
                " tf.cond(tf.logical_not(c['p']), lambda: tf.sin(x[0]), lambda: x[1] * x[1]),"
                " tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.sin(a) * x[1]),"
                " [tf.constant(0), x[0]])[1]]",
                [_normal(rng, (3,)), _normal(rng, (3,))], {"p": np.array(True)})


@gen
def tensor_array(rng):
    return Case("[tf.TensorArray(tf.float64, size=3).unstack(x[0]).read(1) * 2.0,"
                " tf.TensorArray(tf.float64, size=3).unstack(x[0]).gather([2, 0]),"
                " tf.TensorArray(tf.float64, size=2, infer_shape=False).split(x[1], [1, 3]).concat(),"
                " tf.TensorArray(tf.float64, size=2).write(0, x[2]).write(1, x[2] * 3.0)"
                ".stack()]",
                [_normal(rng, (3, 2)), _normal(rng, (4,)), _normal(rng, (2,))])


# --- integer inputs, stop_gradient, unconnected -----------------------------------------------
@gen
def integer_and_unconnected(rng):
    """An integer input's gradient is None; stop_gradient and unconnected inputs give None;
    placeholder_with_default passes the gradient."""
    return Case("[tf.cast(x[1], tf.float64) * x[0], tf.stop_gradient(x[2]) * x[0],"
                " tf.gather(x[0], x[4]), tf.placeholder_with_default(x[0], [3]) * 2.0]",
                [_normal(rng, (3,)), np.array([1, 2, 3], np.int32), _normal(rng, (3,)),
                 _normal(rng, (3,)), np.array([2, 0, 2], np.int32)], fd_skip=(2,))
