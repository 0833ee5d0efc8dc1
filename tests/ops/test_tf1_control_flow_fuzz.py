"""Differential fuzz of TF1's control flow against TF1: ``tf.cond`` (nested, tuple and dict
branches, singletons with and without ``strict``, branches of different shapes), ``tf.case``
(list or dict pairs, ``default``, ``exclusive``), ``tf.while_loop`` (tuple, list and nested
loop vars, ``shape_invariants``, ``maximum_iterations``, ``parallel_iterations``,
``back_prop``, nested loops, zero trips) and ``tf.group`` / ``tf.control_dependencies``
(which ops a dependency reaches), with the gradients of each.

The runner and comparison of test_tf1_nn_fuzz.py (values, dtypes, static shapes, and the kind
of a refusal: raised while building or while running, and its class). Two helpers join
``grad`` there: ``flat(x)`` fetches any nesting of tensors as a flat list (dicts by sorted
key) and ``after(deps, fn)`` builds ``fn()`` under ``tf.control_dependencies(deps)``;
``grad`` answers a gradient that is None (no path, or ``back_prop=False``) with the int8
marker -1. The default run draws a few cases per family (seed 0) and the hand-picked
``EDGES``; the long form (``--runslow``) many more. A difference found here becomes a
TF-free regression test (tests/ops/test_control_flow_tf1_fixes.py).
"""
import numpy as np
import pytest

from test_tf1_array_fuzz import run_fuzz
from test_tf1_nn_fuzz import DRIVER as _NN_DRIVER, _compare

_HELPERS = """
def _flat(x):
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _flat(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    return [x]


def _after(deps, fn):
    with tf.control_dependencies(deps):
        return fn()


def _grad_or_none(y, xs):
    ys = _flat(y)
    # the weights from static shapes where known: a Shape op run on y would run y's ops
    # (TF1's graph optimizer folds it), and a case's Assert with them
    ws = [tf.constant(((np.arange(int(np.prod(t.shape.as_list()))) * 7 % 11 - 5) * 0.25)
                      .reshape(t.shape.as_list()), t.dtype) if t.shape.is_fully_defined() else
          tf.reshape(tf.cast(tf.floormod(tf.range(tf.size(t)) * 7, 11) - 5, t.dtype) * 0.25,
                     tf.shape(t)) for t in ys]
    grads = tf.gradients(ys, xs, grad_ys=ws)
    return [tf.constant(-1, tf.int8) if g is None else tf.convert_to_tensor(g) for g in grads]
"""
DRIVER = _HELPERS + _NN_DRIVER.replace('"grad": _grad,', '"grad": _grad_or_none, "flat": _flat, '
                                       '"after": _after,')
assert '"after": _after' in DRIVER

FLOATS = ("float32", "float64")


def _values(rng, shape, dtype):
    return (rng.standard_normal(shape) * 1.5).astype(dtype)


def _maybe_grad(rng, expr, names, p=0.6):
    return f"grad({expr}, [{', '.join(names)}])" if rng.random() < p else f"flat({expr})"


BRANCHES = ["a * 2.0", "tf.sin(a) * b", "a + b", "tf.square(b)", "tf.reduce_sum(a) + b",
            "b - a * a", "tf.identity(a)", "tf.exp(a * 0.1) * b"]


def _cond(rng):
    dtype = str(rng.choice(FLOATS))
    shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    inputs = {"a": _values(rng, shape, dtype), "b": _values(rng, shape, dtype),
              "p": np.array(rng.random() < 0.5)}
    one, two, three, four = (str(e) for e in rng.choice(BRANCHES, 4))
    roll = int(rng.integers(0, 6))
    if roll == 0:
        expr = f"tf.cond(p, lambda: {one}, lambda: {two})"
    elif roll == 1:  # tuples: the merged structure is true_fn's
        expr = f"tf.cond(p, lambda: ({one}, {two}), lambda: ({three}, {four}))"
    elif roll == 2:  # dicts and a nested tuple
        expr = (f"tf.cond(p, lambda: {{'x': {one}, 'y': ({two}, a)}}, "
                f"lambda: {{'x': {three}, 'y': (b, {four})}})")
    elif roll == 3:  # a singleton list: unpacked unless strict
        strict = str(rng.choice(["True", "False"]))
        expr = f"tf.cond(p, lambda: [{one}], lambda: [{two}], strict={strict})"
    elif roll == 4:  # nested conds, the inner predicate computed in the branch
        expr = (f"tf.cond(p, lambda: tf.cond(tf.reduce_sum(a) > 0.0, lambda: {one}, "
                f"lambda: {two}), lambda: {three})")
    else:  # a computed predicate, a branch of unknown shape (no gradient: TF1's gradient
        # of a PlaceholderWithDefault in the branch not taken fails, docs/porting.md)
        return (f"tf.cond(tf.logical_not(p), lambda: {one} + tf.reduce_mean(b), "
                f"lambda: tf.placeholder_with_default({two}, None))"), inputs
    return _maybe_grad(rng, expr, ["a", "b"]), inputs


def _cond_shapes(rng):
    """Branches whose static shapes differ: the merge keeps only the dims both agree on."""
    dtype = str(rng.choice(FLOATS))
    inputs = {"a": _values(rng, (2, 3), dtype), "b": _values(rng, (3,), dtype),
              "p": np.array(rng.random() < 0.5)}
    pairs = [("a", "b"), ("a", "a[:1]"), ("a[0]", "b"), ("tf.reduce_sum(a)", "b"),
             ("a", "tf.transpose(a)"), ("a", "tf.cast(a, tf.int32)")]
    left, right = pairs[int(rng.integers(len(pairs)))]
    return f"tf.cond(p, lambda: {left}, lambda: {right})", inputs


def _case(rng):
    dtype = str(rng.choice(FLOATS))
    inputs = {"a": _values(rng, (3,), dtype), "b": _values(rng, (3,), dtype),
              "k": np.array(int(rng.integers(-1, 4)), np.int32)}
    count = int(rng.integers(1, 4))
    fns = [f"lambda: {str(e)}" for e in rng.choice(BRANCHES, count)]
    preds = [f"k {rng.choice(['<', '>', '<=', '>='])} {int(rng.integers(0, 3))}" if
             rng.random() < 0.4 else f"tf.equal(k, {j})" for j in range(count)]
    as_dict = rng.random() < 0.3
    if as_dict:
        pairs = "{" + ", ".join(f"{p}: {f}" for p, f in zip(preds, fns)) + "}"
    else:
        pairs = "[" + ", ".join(f"({p}, {f})" for p, f in zip(preds, fns)) + "]"
    default = f", default=lambda: {str(rng.choice(BRANCHES))}" if rng.random() < 0.6 else ""
    exclusive = ", exclusive=True" if rng.random() < 0.4 else ""
    return _maybe_grad(rng, f"tf.case({pairs}{default}{exclusive})", ["a", "b"]), inputs


def _while(rng):
    dtype = str(rng.choice(FLOATS))
    shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 2))))
    inputs = {"a": _values(rng, shape, dtype), "b": _values(rng, shape, dtype),
              "n": np.array(int(rng.integers(0, 5)), str(rng.choice(["int32", "int64"])))}
    extra = []
    if rng.random() < 0.3:
        extra.append(f"maximum_iterations={int(rng.integers(0, 4))}")
    if rng.random() < 0.3:
        extra.append(f"parallel_iterations={int(rng.choice([1, 2, 32]))}")
    back = rng.random() < 0.15
    if back:
        extra.append("back_prop=False")
    options = "".join(", " + e for e in extra)
    roll = int(rng.integers(0, 5))
    if roll == 0:  # a counter and an accumulator as a tuple
        expr = (f"tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, tf.sin(s) * b + a), "
                f"(tf.zeros_like(n), a){options})")
    elif roll == 1:  # a list, nested structure, a captured tensor in cond
        expr = (f"tf.while_loop(lambda i, ab: tf.logical_and(i < n, tf.reduce_sum(ab[0]) < 50.0), "
                f"lambda i, ab: [i + 1, (ab[0] * 1.5 + ab[1], ab[1] * b)], "
                f"[tf.zeros_like(n), (a, b)]{options})")
    elif roll == 2:  # a one-element list: the loop returns the tensor itself
        # (TF1 refuses a body returning a one-element list under maximum_iterations:
        # docs/porting.md)
        step = "s * 1.7 + 0.5" if "maximum" in options or rng.random() < 0.5 else "[s * 1.7 + 0.5]"
        expr = f"tf.while_loop(lambda s: tf.reduce_sum(s * s) < 40.0, lambda s: {step}, [a]{options})"
    elif roll == 3:  # a nested loop whose trip count depends on the outer counter
        expr = (f"tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, tf.while_loop("
                f"lambda j, t: j < i, lambda j, t: (j + 1, t * b + 0.25), (0 * i, s))[1]), "
                f"(tf.zeros_like(n), a){options})")
    else:  # a growing tensor under a shape invariant
        rows = int(rng.integers(1, 3))
        inputs["a"] = _values(rng, (rows, 2), dtype)
        expr = (f"tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, tf.concat([s, s[:1] * 2.0], 0)), "
                f"(tf.zeros_like(n), a), shape_invariants=(n.shape, tf.TensorShape([None, 2])){options})")
        return _maybe_grad(rng, expr, ["a"]), inputs
    return _maybe_grad(rng, expr, ["a", "b"], p=0.8 if not back else 0.9), inputs


def _dependencies(rng):
    """Which ops a control dependency reaches: an op created inside the block waits for the
    dependency (an assert fails it); a tensor made before the block does not."""
    dtype = str(rng.choice(FLOATS))
    inputs = {"a": _values(rng, (3,), dtype), "b": np.abs(_values(rng, (3,), dtype))}
    check = str(rng.choice(["tf.assert_less(tf.zeros_like(a), a)", "tf.assert_less(a, b)",
                            "tf.group(tf.assert_less_equal(tf.zeros_like(b), b), tf.assert_less(tf.zeros_like(a), a))",
                            "tf.check_numerics(a, 'finite')"]))
    body = str(rng.choice(["tf.identity(a)", "a", "a * b", "tf.tuple([a, b])",
                           "tf.cond(tf.reduce_sum(a) > 0.0, lambda: a, lambda: b)",
                           "tf.while_loop(lambda s: tf.reduce_sum(s) < 5.0, lambda s: s + 1.0, [b])"]))
    return f"after([{check}], lambda: {body})", inputs


GENERATORS = [_cond, _cond, _cond_shapes, _case, _case, _while, _while, _while, _dependencies]

_F32, _F64 = np.float32, np.float64

EDGES = [
    # a one-element tuple through cond: TF1 unpacks tuples as well as lists (strict=False)
    ("flat(tf.cond(p, lambda: (a,), lambda: (b,)))",
     {"p": np.array(True), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.cond(p, lambda: [a], lambda: [b], strict=True)",
     {"p": np.array(False), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    # a Python bool as the predicate: TF1 refuses it
    ("tf.cond(True, lambda: a, lambda: b)", {"a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.cond(p, lambda: a, lambda: b)",
     {"p": np.array([True]), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.cond(p, lambda: (a, b), lambda: a)",
     {"p": np.array(True), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    # case: no predicate true and no default: TF1 fails the run
    ("tf.case([(tf.equal(k, 0), lambda: a), (tf.equal(k, 1), lambda: b)])",
     {"k": np.array(5, np.int32), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.case([(tf.equal(k, 0), lambda: a), (tf.less(k, 2), lambda: b)])",
     {"k": np.array(0, np.int32), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.case([(tf.equal(k, 0), lambda: a), (tf.less(k, 2), lambda: b)], exclusive=True)",
     {"k": np.array(0, np.int32), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.case([(tf.equal(k, 0), lambda: a)], default=lambda: b, exclusive=True)",
     {"k": np.array(3, np.int32), "a": np.ones(2, _F32), "b": np.zeros(2, _F32)}),
    ("tf.case([], default=lambda: b)", {"b": np.zeros(2, _F32)}),
    ("grad(tf.case([(tf.equal(k, 0), lambda: a * b)], default=lambda: b * 3.0), [a, b])",
     {"k": np.array(3, np.int32), "a": np.ones(2, _F64), "b": np.arange(2.0)}),
    # while: zero trips, a body that changes a shape without an invariant, wrong structure
    ("grad(tf.while_loop(lambda i, s: i < 0, lambda i, s: (i + 1, s * s), (0, a)), [a])",
     {"a": np.arange(3.0)}),
    ("tf.while_loop(lambda s: tf.size(s) < 4, lambda s: tf.concat([s, s], 0), [a])",
     {"a": np.arange(1.0)}),
    ("tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1,), (0, a))", {"a": np.arange(2.0)}),
    ("tf.while_loop(lambda i: i < 3, lambda i: i + 1, [0], maximum_iterations=0)", {}),
    ("tf.while_loop(lambda i: i < 10, lambda i: i + 1, [tf.constant(0, tf.int64)], "
     "maximum_iterations=4)", {}),
    ("tf.while_loop(lambda i: i < 3, lambda i: i + 1, 0)", {}),
    ("flat(tf.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s * 2.0), [0, a], "
     "return_same_structure=True))", {"a": np.ones(2, _F32)}),
    ("grad(tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * a), (0, b), "
     "back_prop=False)[1], [a, b])", {"a": np.full(2, 1.5), "b": np.ones(2)}),
    ("grad(tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * a), (0, b), "
     "maximum_iterations=2)[1], [a, b])", {"a": np.full(2, 1.5), "b": np.ones(2)}),
    # control dependencies on a tensor made outside the block: TF1 does not wait for them
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: a)", {"a": -np.ones(2, _F32)}),
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: tf.identity(a))", {"a": -np.ones(2, _F32)}),
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: a + 0.0)", {"a": -np.ones(2, _F32)}),
    ("after([tf.group(tf.assert_less(tf.zeros_like(a), a))], lambda: tf.cond(tf.constant(True), lambda: a, "
     "lambda: a * 2.0))", {"a": -np.ones(2, _F32)}),
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: tf.constant(1.0))", {"a": -np.ones(2, _F32)}),
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: tf.while_loop(lambda i: i < 2, lambda i: i + 1, [0]))",
     {"a": -np.ones(2, _F32)}),
    ("after([tf.assert_less(tf.zeros_like(a), a)], lambda: tf.tuple([a, a * 2.0]))", {"a": -np.ones(2, _F32)}),
    ("tf.tuple([a, b], control_inputs=[tf.assert_less(tf.zeros_like(a), a)])",
     {"a": -np.ones(2, _F32), "b": np.ones(2, _F32)}),
    ("after([tf.group(tf.no_op(), a)], lambda: tf.identity(a))", {"a": np.ones(2, _F32)}),
    # an op inside a cond branch that depends on nothing in it still runs only when taken
    ("tf.cond(p, lambda: after([tf.assert_less(tf.zeros_like(a), a)], lambda: a * 1.0), lambda: a * 2.0)",
     {"p": np.array(False), "a": -np.ones(2, _F32)}),
    ("tf.cond(p, lambda: tf.constant(1.0), lambda: tf.constant(2.0))", {"p": np.array(False)}),
]


def _draw(seed, per_family):
    rng = np.random.default_rng([seed, 61])
    return [generator(rng) for _ in range(per_family) for generator in GENERATORS]


def _fuzz(tmp_path, cases):
    run_fuzz(tmp_path, cases, _compare, DRIVER)


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_control_flow_agrees_with_tf1(tmp_path):
    _fuzz(tmp_path, EDGES + _draw(seed=0, per_family=4))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_control_flow_agrees_with_tf1_long(tmp_path, seed):
    _fuzz(tmp_path, _draw(seed=seed, per_family=25))
