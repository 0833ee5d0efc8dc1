"""Cases for the differential fuzz of the math families against TF1 (test_tf1_math_fuzz.py).

A case is ``(key, expression, inputs)``: the expression is Python over ``tf``, ``np`` and
the placeholders ``a``, ``b``, ``c`` (fed with ``inputs``' arrays), built and run by
``SNIPPET`` in one graph and one session, the same program under TF1 and under
``asyncflow.compat.v1``. Draws come from a seeded ``numpy`` generator, with each dtype's
special values (NaN, +-inf, -0.0, max, tiny, subnormal; integer min and max) mixed in.
"""
from __future__ import annotations

import numpy as np

# Both sides run this: ``outputs[key]`` is the value, ``outputs[key + "!"]`` the error's text.
SNIPPET = """
import warnings
warnings.simplefilter("ignore")
graph = tf.Graph()
built = []
with graph.as_default():
    for line in inputs["__cases"]:
        key, expr = str(line).split("\\t")
        env, feed = {"tf": tf, "np": np}, {}
        for name in ("a", "b", "c"):
            value = inputs.get(key + "." + name)
            if value is not None:
                env[name] = tf.placeholder(tf.as_dtype(value.dtype), value.shape)
                feed[env[name]] = value
        try:
            built.append((key, eval(expr, env), feed))
        except Exception as e:  # noqa: BLE001 - the error is the result
            outputs[key + "!"] = np.array("build " + type(e).__name__ + ": " + str(e)[:400])
    with tf.Session() as sess:
        for key, fetch, feed in built:
            try:
                outputs[key] = sess.run(fetch, feed)
            except Exception as e:  # noqa: BLE001
                outputs[key + "!"] = np.array("run " + type(e).__name__ + ": " + str(e)[:400])
"""

FLOATS = ("float16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
INTS = SIGNED + ("uint8",)
REALS = FLOATS + INTS


def special_values(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        info = np.finfo(dtype)
        # (no subnormals: TF1 on CPU flushes them to zero, asyncflow keeps them; porting.md)
        return np.array([0.0, -0.0, 1, -1, 0.5, -0.5, 1.5, 2.5, -2.5, 3, -7, 1e-3, 100,
                         np.nan, np.inf, -np.inf, info.max, -info.max, info.tiny, -info.tiny],
                        dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1]
        if dtype.kind == "i":
            values += [-1, -2, -3, -7]
        return np.array(values, dtype)
    if dtype.kind == "c":
        return np.array([0, 1, -1j, 1 + 1j, -2.5 + 0.5j, np.nan, np.inf, complex(0, np.inf)],
                        dtype)
    return np.array([True, False])


def castable(values, target):
    """``values`` with the floats that do not fit integer ``target`` (NaN, inf, out of its
    range once truncated) replaced by 0: C++ leaves their conversion undefined and TF1's
    results vary with the source dtype (``_CAST_UB``)."""
    target = np.dtype(target)
    if values.dtype.kind != "f" or target.kind not in "iu":
        return values
    info = np.iinfo(target)
    with np.errstate(all="ignore"):
        wide = np.trunc(values.astype(np.float64))
        fits = (wide >= info.min) & (wide <= float(info.max)) & (wide < 2.0 ** (8 * target.itemsize
                                                                   - (target.kind == "i")))
    return np.where(fits, values, values.dtype.type(0))


def draw(rng, dtype, shape, special=0.3, low=None, high=None):
    """An array of ``dtype`` and ``shape``: random values, ``special`` of them special."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo = max(info.min, -100 if low is None else low)
        hi = min(info.max, 100 if high is None else high)
        out = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
    else:
        lo, hi = (-4.0 if low is None else low), (4.0 if high is None else high)
        out = rng.uniform(lo, hi, shape)
        if dtype.kind == "c":
            out = out + 1j * rng.uniform(lo, hi, shape)
        out = out.astype(dtype)
        if rng.random() < 0.3:  # exact halves and integers: ties of round, floor, mod
            out = (np.round(out.real * 2) / 2).astype(dtype)
    out = np.array(out, dtype)
    if special and out.size and low is None and high is None:
        pool = special_values(dtype)
        mask = np.asarray(rng.random(shape) < special)
        out[mask] = rng.choice(pool, int(mask.sum()))
    return np.asarray(out)


def shape_pair(rng):
    """Two broadcast-compatible shapes (rank 0 to 3, sizes 0 to 3)."""
    rank = int(rng.integers(0, 4))
    first = [int(rng.choice([0, 1, 2, 3], p=[0.08, 0.22, 0.35, 0.35])) for _ in range(rank)]
    kept = int(rng.integers(0, rank + 1))
    second = [d if rng.random() < 0.7 else 1 for d in first[rank - kept:]]
    if rng.random() < 0.5:
        return first, second
    return second, first


def shape_one(rng, min_rank=0):
    rank = int(rng.integers(min_rank, 4))
    return [int(rng.choice([0, 1, 2, 3, 4], p=[0.06, 0.14, 0.3, 0.3, 0.2])) for _ in range(rank)]


# Where TF1's answers are not to be copied (docs/porting.md, "Numbers"), draws avoid them:
# _FLUSHED: TF1 on CPU flushes subnormal numbers to zero (inputs and results); asyncflow
#   keeps them. No draw is subnormal; a float floordiv whose quotient would be is dropped
#   (TF1's -1 // max is -0.0: floor of the flushed quotient; asyncflow's -1).
# _ERF_BUG: TF1's float64 erf is NaN for |x| above about 1e300 and at +-inf (not +-1).
# _CAST_UB: a float cast to an integer dtype it does not fit (NaN, inf, out of range) is
#   undefined in C++; TF1 gives -128 for NaN in int8 from float16 and float64 but 0 from
#   float32, saturates some conversions and wraps others. Casts are drawn in range.
# _NEGATIVE_UNSIGNED: TF1 wraps a negative Python number into an unsigned tensor's dtype
#   (``-5 % a`` with uint8 ``a`` is ``251 % a``); asyncflow refuses it ("Value -5 is out of
#   range for dtype uint8"): an error, not a different answer, so not drawn.
# _INT_POW_BUG: TF 2.x's integer Pow with a negative exponent fails with "RuntimeError:
# basic_string::_M_construct null not valid" or crashes the process (it means to raise
# "Integers to negative integer powers are not allowed"), so no draw has one; asyncflow's
# error is checked in test_math_tf1_values.py.

# TF1 expression -> dtypes to try (each draw picks one; TF1's refusals are compared too).
UNARY = {
    "tf.negative(a)": REALS, "-a": SIGNED + FLOATS, "tf.abs(a)": REALS,
    "tf.square(a)": REALS, "tf.sqrt(a)": FLOATS + ("int32",), "tf.rsqrt(a)": FLOATS,
    "tf.exp(a)": FLOATS, "tf.log(a)": FLOATS, "tf.log1p(a)": FLOATS, "tf.tanh(a)": FLOATS,
    "tf.sigmoid(a)": FLOATS, "tf.reciprocal(a)": FLOATS, "tf.sign(a)": REALS,
    "tf.floor(a)": FLOATS + ("int32",), "tf.ceil(a)": FLOATS, "tf.round(a)": FLOATS + SIGNED,
    "tf.sin(a)": FLOATS, "tf.cos(a)": FLOATS, "tf.logical_not(a)": ("bool",),
    "tf.is_nan(a)": FLOATS, "tf.is_finite(a)": FLOATS, "tf.math.is_nan(a)": FLOATS,
    "tf.erf(a)": FLOATS, "tf.lgamma(a)": FLOATS, "tf.digamma(a)": FLOATS,
    "tf.math.negative(a)": FLOATS, "tf.math.abs(a)": FLOATS,
}
BINARY = {
    "tf.add(a, b)": REALS, "a + b": REALS, "tf.subtract(a, b)": REALS,
    "a - b": REALS, "tf.multiply(a, b)": REALS, "a * b": REALS,
    "tf.divide(a, b)": REALS, "a / b": REALS, "tf.truediv(a, b)": REALS,
    "tf.div(a, b)": REALS, "tf.floordiv(a, b)": REALS, "a // b": REALS,
    "tf.floormod(a, b)": REALS, "a % b": REALS, "tf.mod(a, b)": REALS,
    "tf.pow(a, b)": FLOATS + SIGNED, "a ** b": FLOATS + ("int32", "int64"),
    "tf.maximum(a, b)": REALS, "tf.minimum(a, b)": REALS,
    "tf.squared_difference(a, b)": FLOATS + ("int32", "int64"),
    "tf.equal(a, b)": REALS + ("bool",), "tf.not_equal(a, b)": REALS + ("bool",),
    "tf.less(a, b)": REALS, "tf.less_equal(a, b)": REALS, "tf.greater(a, b)": REALS,
    "tf.greater_equal(a, b)": REALS, "a < b": REALS, "a >= b": REALS,
    "tf.logical_and(a, b)": ("bool",), "tf.logical_or(a, b)": ("bool",),
    "tf.logical_xor(a, b)": ("bool",), "a & b": ("bool",), "a | b": ("bool",),
    "a ^ b": ("bool",),
}
_DIVISIONS = ("/", "%", "div", "mod")
# Python scalars on one side (the tensor's dtype is the result's in TF1)
SCALAR = ["a + 1", "2 - a", "a * 3", "a / 2", "1 / a", "a // 2", "7 // a", "a % 3", "-5 % a",
          "a ** 2", "2 ** a", "a ** -1", "tf.maximum(a, 0)", "tf.pow(a, 3)", "a > 0",
          "tf.equal(a, 1)", "a * 0.5", "a + 1.5"]
REDUCE = ["tf.reduce_sum", "tf.reduce_mean", "tf.reduce_prod", "tf.reduce_max",
          "tf.reduce_min", "tf.math.reduce_euclidean_norm"]
REDUCE_BOOL = ["tf.reduce_any", "tf.reduce_all"]
CAST_TO = FLOATS + INTS + ("bool", "uint16")


def _axis_args(rng, rank):
    """Source text of a reduction's ``axis``/``keepdims`` arguments (some out of range or
    repeated, which TF1 refuses)."""
    keep = ", keepdims=True" if rng.random() < 0.4 else ""
    kind = rng.random()
    if kind < 0.2:
        return keep.lstrip(", ")
    if kind < 0.3:
        return "axis=[]" + keep
    if rank == 0:
        return f"axis={int(rng.choice([0, -1]))}" + keep
    if kind < 0.65:
        return f"axis={int(rng.integers(-rank, rank))}" + keep
    if kind < 0.95:
        count = int(rng.integers(1, rank + 1))
        axes = [int(a) - (rank if rng.random() < 0.3 else 0)
                for a in rng.permutation(rank)[:count]]
        return f"axis={axes}" + keep
    if rng.random() < 0.5:
        return f"axis=[{rank - 1}, {-1}]" + keep  # the same axis twice
    return f"axis={rank}" + keep


def math_cases(seed, rounds):
    """Every op on every pair of its dtypes' special values, then ``rounds`` random draws of
    every op family: a list of ``(key, expression, inputs)``."""
    rng = np.random.default_rng(seed)
    cases = []

    def add(expr, **inputs):
        cases.append((f"c{len(cases)}", expr, inputs))

    for dtype in REALS + ("bool",):
        values = special_values(dtype)
        for expr, kinds in UNARY.items():
            if dtype in kinds:
                add(expr, a=values[~(np.abs(values) > 1e300)] if expr == "tf.erf(a)" and
                    dtype == "float64" else values)  # _ERF_BUG
        a, b = (grid.reshape(-1) for grid in np.meshgrid(values, values))
        for expr, kinds in BINARY.items():
            if dtype not in kinds:
                continue
            if dtype in FLOATS and any(op in expr for op in ("//", "floordiv")):
                with np.errstate(all="ignore"):
                    quotient = np.abs(a.astype(np.float64) / b.astype(np.float64))
                keep = ~((quotient > 0) & (quotient < np.finfo(dtype).tiny))  # (_FLUSHED)
            elif expr == "tf.erf(a)" and dtype == "float64":
                keep = ~(np.abs(a) > 1e300)  # _ERF_BUG
            elif dtype in INTS and ("pow" in expr or "**" in expr):
                keep = b >= 0  # _INT_POW_BUG: non-negative exponents only
            elif dtype in INTS and any(op in expr for op in _DIVISIONS):
                keep = b != 0  # (TF1 refuses the whole op then: the draws below check it)
            else:
                keep = np.ones(a.shape, bool)
            add(expr, a=a[keep], b=b[keep])
        for target in CAST_TO:
            add(f"tf.cast(a, tf.{target})", a=castable(values, target))

    for _ in range(rounds):
        for expr, kinds in UNARY.items():
            dtype = str(rng.choice(kinds))
            a = draw(rng, dtype, shape_one(rng))
            if expr == "tf.erf(a)" and dtype == "float64":
                a[np.abs(a) > 1e300] = 0  # _ERF_BUG
            add(expr, a=a)
        for expr, kinds in BINARY.items():
            dtype = str(rng.choice(kinds))
            sa, sb = shape_pair(rng)
            a, b = draw(rng, dtype, sa), draw(rng, dtype, sb)
            if ("pow" in expr or "**" in expr) and dtype in INTS:
                b = np.maximum(b, 0).astype(dtype)  # TF1 crashes on these (_INT_POW_BUG)
            add(expr, a=a, b=b)
        for expr in SCALAR:
            dtype = str(rng.choice(FLOATS if expr == "a ** -1" else REALS))
            a = draw(rng, dtype, shape_one(rng))
            if expr == "2 ** a" and dtype in INTS:
                a = np.maximum(a, 0).astype(dtype)
            if dtype == "uint8" and "-" in expr:  # (_NEGATIVE_UNSIGNED)
                continue
            if dtype in FLOATS and "//" in expr:  # _FLUSHED: tiny // 2 is subnormal
                a[np.abs(a) < 4 * np.finfo(dtype).tiny] = 0
            add(expr, a=a)
        for index, op in enumerate(REDUCE + REDUCE_BOOL):
            dtype = "bool" if op in REDUCE_BOOL else str(rng.choice(REALS))
            shape = shape_one(rng)
            # Every other reduction of an input of unknown rank (no draw: the stream of
            # cases stays as it was), whose negative axes resolve when the op runs.
            source = "tf.placeholder_with_default(a, None)" if index % 2 else "a"
            add(f"{op}({source}{', ' if (args := _axis_args(rng, len(shape))) else ''}{args})",
                a=draw(rng, dtype, shape, special=0.1))
        for op in ("tf.argmax", "tf.argmin"):
            dtype = str(rng.choice(REALS))
            shape = shape_one(rng)
            x = draw(rng, dtype, shape, special=0.15)
            if x.size and rng.random() < 0.5:  # ties
                x = (x // 2 * 2).astype(x.dtype) if x.dtype.kind in "iu" else np.round(x)
            axis = int(rng.integers(-len(shape), len(shape))) if shape else 0
            kind = ", output_type=tf.int32" if rng.random() < 0.3 else ""
            add(f"{op}(a, {axis}{kind})", a=x)
        for op in ("tf.cumsum", "tf.cumprod"):
            dtype = str(rng.choice(FLOATS + ("int32", "int64")))
            shape = shape_one(rng, min_rank=1)
            axis = int(rng.integers(-len(shape), len(shape)))
            flags = "".join(f", {flag}=True" for flag in ("exclusive", "reverse")
                            if rng.random() < 0.5)
            add(f"{op}(a, {axis}{flags})", a=draw(rng, dtype, shape, special=0.1))
        for _ in range(3):
            src = str(rng.choice(REALS + ("bool",)))
            dst = str(rng.choice(CAST_TO))
            x = draw(rng, src, shape_one(rng))
            if src in FLOATS and rng.random() < 0.5:  # around the target's range
                with np.errstate(over="ignore"):  # (float16's: inf, which castable drops)
                    x = (rng.uniform(-3e9, 3e9, x.shape) * 10.0 ** rng.integers(-9, 1)
                         ).astype(src)
            add(f"tf.cast(a, tf.{dst})", a=castable(x, dst))
        dtype = str(rng.choice(REALS))
        shape = shape_one(rng)
        lo, hi = sorted(draw(rng, dtype, [2], special=0.0))
        add(f"tf.clip_by_value(a, b, c)", a=draw(rng, dtype, shape), b=np.asarray(lo),
            c=np.asarray(hi))
        dtype = str(rng.choice(FLOATS + ("int32", "int64")))
        shape = shape_one(rng)
        n = int(rng.integers(1, 4))
        terms = [draw(rng, dtype, shape, special=0.1) for _ in range(n)]
        add("tf.add_n([" + ", ".join("abc"[:n]) + "])", **dict(zip("abc", terms)))
        dtype = str(rng.choice(REALS))
        shape = shape_one(rng)
        add("tf.where(a, b, c)", a=draw(rng, "bool", shape), b=draw(rng, dtype, shape),
            c=draw(rng, dtype, shape))
    return cases


def pack(cases):
    """The inputs ``tf1_run``/``compat_run`` take: every case's arrays and the case list."""
    inputs = {"__cases": np.array([f"{key}\t{expr}" for key, expr, _ in cases])}
    for key, _, arrays in cases:
        for name, value in arrays.items():
            inputs[f"{key}.{name}"] = np.asarray(value)
    return inputs
