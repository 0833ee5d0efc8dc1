"""A differential gradient fuzzer: every op type with a registered gradient, built at random
shapes and attributes (``gradient_fuzz_cases.py``), its ``tf.gradients(reduce_sum(y * w), x)``
for a random ``w`` compared with central finite differences in float64 (always) and with
TF1's ``tf.gradients`` on the same graph (all cases in one TF subprocess; skips without TF).

The registry is enumerated, not listed: ``test_every_gradient_is_fuzzed`` fails when an op type
with a gradient appears in no case's graph and is not in ``EXCLUDED`` (with the reason).
The default run draws one sample per generator (seed 0); the slow form draws four more.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import trio

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow.graph import registry
from gradient_fuzz_cases import cases
from gradcheck import assert_close
from tf1_reference import tf1_run

# Op types with a gradient that no case builds, and why.
EXCLUDED = {
    "RefEnter": "a while loop over a reference variable: TF1 builds it only for ref dtypes, "
                "its gradient is Enter's (fuzzed)",
    "RefExit": "as RefEnter: Exit's gradient (fuzzed)",
    "RefSwitch": "a cond on a reference variable: Switch's gradient (fuzzed)",
    "FusedLSTMCell": "an op of ours only (BasicLSTMCell's step), no TF1 counterpart: "
                     "tests/ops/test_rnn.py checks its gradients against the op-by-op cell's "
                     "and TF1's BasicLSTMCell",
}

SEEDS_SLOW = (1, 2, 3, 4)

# Kinks and zeros (rsqrt at 0, pow at 0...) warn in the kernels: the values are the point.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _placeholders(xs):
    return [tf.placeholder(tf.as_dtype(np.asarray(a).dtype), shape=np.shape(a), name=f"x{i}")
            for i, a in enumerate(xs)]


def _as_list(y):
    return list(y) if isinstance(y, (list, tuple)) else [y]


def _dense(g):
    return tf.convert_to_tensor(g) if isinstance(g, af.IndexedSlices) else g


async def _ours(name, case, seed):
    """Build the case here; returns its op types, forward values, w, gradients (None kept)
    and finite differences (None for non-float inputs, or when ``fd`` is off)."""
    rng = np.random.default_rng([seed, 7, len(name)])
    with af.Graph().as_default() as graph:
        x = _placeholders(case.xs)
        c = {k: np.asarray(v) for k, v in case.c.items()}
        ys = _as_list(eval(case.expr, {"tf": tf, "np": np, "x": x, "c": c}))  # noqa: S307
        types = {op.type for op in graph.get_operations()}
        feeds = dict(zip(x, case.xs))
        async with af.Session() as sess:
            y_values = [np.asarray(v) for v in await sess.run(ys, feeds)]
            w = [rng.standard_normal(v.shape) for v in y_values]
            w_ph = [tf.placeholder(y.dtype, shape=v.shape) for y, v in zip(ys, w)]
            loss = tf.add_n([tf.reduce_sum(y * wp) for y, wp in zip(ys, w_ph)])
            grads = [_dense(g) for g in tf.gradients(loss, x)]
            w_feeds = dict(zip(w_ph, w))
            live = [g for g in grads if g is not None]
            values = iter(await sess.run(live, {**feeds, **w_feeds}) if live else [])
            grad_values = [None if g is None else np.asarray(next(values)) for g in grads]
            numeric = [None] * len(x)
            if case.fd:
                for i, a in enumerate(case.xs):
                    if np.asarray(a).dtype.kind == "f" and i not in case.fd_skip:
                        numeric[i] = await _finite_differences(sess, ys, feeds, x[i], a, w)
    return types, y_values, w, grad_values, numeric


async def _finite_differences(sess, ys, feeds, placeholder, array, w, delta=1e-6):
    array = np.asarray(array, dtype=np.float64)
    out = np.zeros(array.shape)
    for k in range(array.size):
        sides = []
        for sign in (1.0, -1.0):
            shifted = array.copy()
            shifted.reshape(-1)[k] += sign * delta
            values = await sess.run(ys, {**feeds, placeholder: shifted})
            sides.append(sum(float(np.sum(np.asarray(v, np.float64) * wi))
                             for v, wi in zip(values, w)))
        out.reshape(-1)[k] = (sides[0] - sides[1]) / (2 * delta)
    return out


@functools.lru_cache(maxsize=None)
def _run_ours(seed):
    drawn = cases(seed)

    async def main():
        out = {}
        for name, case in drawn.items():
            try:
                out[name] = await _ours(name, case, seed)
            except Exception as error:  # reported by each check, naming the case
                out[name] = f"{type(error).__name__}: {error}"
        return out
    return drawn, trio.run(main)


def _built(drawn, ours, failures):
    """The cases that built here; the others are added to ``failures``."""
    for name, case in drawn.items():
        if isinstance(ours[name], str):
            failures.append(f"{name}: asyncflow failed to build {case.expr!r}: {ours[name]}")
        else:
            yield name, case


TF1_SNIPPET = """
import json
if not hasattr(tf.nn, "gelu"):  # TF2's gelu is TF1's contrib one: a name compat.v1 lacks
    import tensorflow as _tf2
    tf.nn.gelu = _tf2.nn.gelu


def _message(e):
    return f"{type(e).__name__}: {getattr(e, 'message', None) or e}"


# Every case in one graph and one run (a Session per case costs TF seconds); a case whose
# run fails is run alone afterwards to name it.
_built, _feeds = {}, {}
for _name, _expr, _nx, _cnames in json.loads(CASES):
    try:
        with tf.name_scope(_name):
            x = [tf.placeholder(tf.as_dtype(inputs[f"{_name}.x{i}"].dtype),
                                shape=inputs[f"{_name}.x{i}"].shape) for i in range(_nx)]
            c = {k: inputs[f"{_name}.c.{k}"] for k in _cnames}
            _ys = eval(_expr)
            _ys = list(_ys) if isinstance(_ys, (list, tuple)) else [_ys]
            _loss = tf.add_n([tf.reduce_sum(_y * inputs[f"{_name}.w{j}"])
                              for j, _y in enumerate(_ys)])
            _gs = [g if g is None or not isinstance(g, tf.IndexedSlices)
                   else tf.convert_to_tensor(g) for g in tf.gradients(_loss, x)]
        _built[_name] = _gs
        _feeds.update({p: inputs[f"{_name}.x{i}"] for i, p in enumerate(x)})
    except Exception as _e:
        outputs[f"{_name}.error"] = np.array(_message(_e))
_fetch = {n: [g for g in gs if g is not None] for n, gs in _built.items()}
with tf.Session() as _sess:
    try:
        _values = _sess.run(_fetch, _feeds)
    except Exception:
        _values = {}
        for _name, _live in _fetch.items():
            try:
                _values[_name] = _sess.run(_live, _feeds)
            except Exception as _e:
                outputs[f"{_name}.error"] = np.array(_message(_e))
for _name, _gs in _built.items():
    if _name not in _values:
        continue
    outputs[f"{_name}.none"] = np.array([g is None for g in _gs])
    _vals = iter(_values[_name])
    for i, g in enumerate(_gs):
        if g is not None:
            outputs[f"{_name}.g{i}"] = next(_vals)
"""


def _tf1_gradients(seed, tmp_path):
    drawn, ours = _run_ours(seed)
    table, inputs = [], {}
    for name, case in drawn.items():
        if not case.tf1 or isinstance(ours[name], str):
            continue
        table.append((name, case.expr, len(case.xs), sorted(case.c)))
        inputs.update({f"{name}.x{i}": np.asarray(a) for i, a in enumerate(case.xs)})
        inputs.update({f"{name}.c.{k}": np.asarray(v) for k, v in case.c.items()})
        inputs.update({f"{name}.w{j}": w for j, w in enumerate(ours[name][2])})
    snippet = f"CASES = {json.dumps(json.dumps(table))}\n" + TF1_SNIPPET
    return drawn, ours, tf1_run(snippet, tmp_path, **inputs)


def _check_against_tf1(seed, tmp_path):
    drawn, ours, theirs = _tf1_gradients(seed, tmp_path)
    failures = []
    for name, case in _built(drawn, ours, failures):
        if not case.tf1:
            continue
        if f"{name}.error" in theirs:
            failures.append(f"{name}: TF1 failed to build {case.expr!r}: {theirs[name + '.error']}")
            continue
        none = theirs[f"{name}.none"]
        for i, got in enumerate(ours[name][3]):
            if (got is None) != bool(none[i]):
                failures.append(f"{name} input {i}: ours {'None' if got is None else 'a tensor'}"
                                f", TF1 {'None' if none[i] else 'a tensor'} ({case.expr})")
                continue
            if got is None:
                continue
            try:
                assert_close(got, theirs[f"{name}.g{i}"], rtol=case.tf1_rtol, atol=1e-9,
                             what=f"{name} input {i} ({case.expr}) ours vs TF1")
            except AssertionError as error:
                failures.append(str(error))
    assert not failures, "\n".join(failures)


def _check_against_finite_differences(seed):
    drawn, ours = _run_ours(seed)
    failures = []
    for name, case in _built(drawn, ours, failures):
        for i, (got, numeric) in enumerate(zip(ours[name][3], ours[name][4])):
            if numeric is None:
                continue
            try:
                assert_close(np.zeros_like(numeric) if got is None else got, numeric,
                             rtol=case.rtol, atol=case.atol,
                             what=f"{name} input {i} ({case.expr}) ours vs finite differences")
            except AssertionError as error:
                failures.append(str(error))
    assert not failures, "\n".join(failures)


def test_every_gradient_is_fuzzed():
    _, ours = _run_ours(0)
    covered = set().union(*(entry[0] for entry in ours.values() if not isinstance(entry, str)))
    # (the project's own op types: tests register throwaway ones in the same registry)
    with_gradient = {t for t, d in registry._OPS.items() if d.grad is not None
                     and getattr(d.grad, "__module__", "").startswith("asyncflow.")}
    missing = with_gradient - covered - set(EXCLUDED)
    assert not missing, f"op types with a gradient that no fuzz case builds: {sorted(missing)}"
    assert not set(EXCLUDED) & covered, "an excluded op type is fuzzed: drop it from EXCLUDED"


def test_gradients_match_finite_differences():
    _check_against_finite_differences(0)


def test_gradients_match_tf1(tmp_path):
    _check_against_tf1(0, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS_SLOW)
def test_gradients_match_finite_differences_more_draws(seed):
    _check_against_finite_differences(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS_SLOW)
def test_gradients_match_tf1_more_draws(seed, tmp_path):
    _check_against_tf1(seed, tmp_path)
