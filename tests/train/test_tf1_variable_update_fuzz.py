"""A differential fuzz of the variable update ops against TF1: ``assign``, ``assign_add``,
``assign_sub``, ``scatter_update/add/sub/mul/div/min/max`` (the functions and the Variable
methods that take an ``IndexedSlices``) and ``scatter_nd_update/add/sub`` (functions and
methods), on float16,
float32, float64, int32 and int64 variables, with indices that repeat, are unsorted, scalar
or of rank 2, now and then one out of range (both must fail), updates of the full shape or a
scalar, run 1-3 times (the same op: each run
updates the value the last one left). The same program (``DRIVER``) runs under TF1
(``tf1_run``; skips without TensorFlow) and here (``compat_run``): both must agree on whether
a case fails and otherwise on every run's output and the variable's final value.

Tolerances: exact for integers; float64 ``rtol 1e-12``, float32 ``1e-6``, float16 ``1e-3``
(repeated ``scatter_mul``/``scatter_div`` rows are applied one after another on both sides,
so only the rounding of the kernels' arithmetic may differ). Integer ``scatter_div`` never
divides by zero (TF1's CPU kernel traps on it).
"""
import numpy as np
import pytest

from tf1_reference import compat_run, tf1_run

TOLERANCES = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3}

DRIVER = """
for _i, (_op, _form, _runs) in enumerate(CASES):
    _graph = tf.Graph()
    try:
        with _graph.as_default():
            _v = tf.Variable(inputs[f"c{_i}_v"], name="v")
            _u = tf.constant(inputs[f"c{_i}_u"])
            _x = tf.constant(inputs[f"c{_i}_x"]) if f"c{_i}_x" in inputs else None
            if _form == "method":
                _out = getattr(_v, _op)(tf.IndexedSlices(_u, _x))
            elif _form == "nd_method":
                _out = getattr(_v, _op)(_x, _u)
            elif _x is None:
                _out = getattr(tf, _op)(_v, _u)
            else:
                _out = getattr(tf, _op)(_v, _x, _u)
            _init = tf.global_variables_initializer()
        with tf.Session(graph=_graph) as _sess:
            _sess.run(_init)
            outputs[f"c{_i}_runs"] = [_sess.run(_out) for _ in range(_runs)]
            outputs[f"c{_i}_final"] = _sess.run(_v)
    except Exception as _e:
        outputs[f"c{_i}_err"] = np.array(f"{type(_e).__name__}: {_e}"[:300])
"""

SCATTERS = ["scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div",
            "scatter_min", "scatter_max"]
SCATTER_NDS = ["scatter_nd_update", "scatter_nd_add", "scatter_nd_sub"]
ASSIGNS = ["assign", "assign_add", "assign_sub"]


def _values(rng, dtype, shape, nonzero=False):
    if dtype.kind == "i":
        value = rng.integers(-9, 10, size=shape)
        if nonzero:
            value[value == 0] = 3
        return value.astype(dtype)
    value = rng.uniform(-2, 2, size=shape)
    if nonzero:
        value[np.abs(value) < 0.25] = 0.5
    return value.astype(dtype)


def _draw(seed, count):
    rng = np.random.default_rng([seed, 11])
    cases, arrays = [], {}
    for i in range(count):
        dtype = np.dtype(str(rng.choice(["float64", "float32", "float16", "int32", "int64"])))
        family = rng.choice(["assign", "scatter", "scatter", "scatter_nd"])
        shape = [int(d) for d in rng.integers(1, 5, size=rng.integers(1, 4))]
        runs = int(rng.integers(1, 4))
        arrays[f"c{i}_v"] = _values(rng, dtype, shape)
        if family == "assign":
            op, form = str(rng.choice(ASSIGNS)), "function"
            arrays[f"c{i}_u"] = _values(rng, dtype, shape)
        elif family == "scatter":
            op = str(rng.choice(SCATTERS))
            form = "method" if op != "scatter_update" and rng.integers(3) == 0 else "function"
            index_shape = [] if rng.integers(5) == 0 else (
                [int(rng.integers(0, 7))] if rng.integers(4) else [2, int(rng.integers(1, 4))])
            if form == "method" and len(index_shape) != 1:
                index_shape = [int(rng.integers(1, 7))]
            index_dtype = np.int64 if rng.integers(2) else np.int32
            arrays[f"c{i}_x"] = rng.integers(0, shape[0], size=index_shape).astype(index_dtype)
            rows = index_shape + shape[1:]
            scalar = form == "function" and rng.integers(6) == 0
            arrays[f"c{i}_u"] = _values(rng, dtype, [] if scalar else rows,
                                        nonzero=op == "scatter_div")
        else:
            op, form = str(rng.choice(SCATTER_NDS)), str(rng.choice(["function", "nd_method"]))
            depth = int(rng.integers(1, len(shape) + 1))
            count_ = int(rng.integers(0, 6))
            arrays[f"c{i}_x"] = np.stack(
                [rng.integers(0, d, size=count_) for d in shape[:depth]], axis=-1
            ).astype(np.int32) if count_ else np.zeros([0, depth], np.int32)
            arrays[f"c{i}_u"] = _values(rng, dtype, [count_] + shape[depth:])
        index = arrays.get(f"c{i}_x")
        # An index out of range must fail. Not for scatter_mul/div: TF1's graph optimizer
        # drops a multiplication or division by all-ones updates, and its range check with it.
        if (index is not None and index.size and op not in ("scatter_mul", "scatter_div")
                and rng.integers(15) == 0):
            index.reshape(-1)[0] = rng.choice([-1, shape[0] + int(rng.integers(2))])
        cases.append((op, form, runs))
    return cases, arrays


def _compare(ours, theirs, i, dtype):
    prefix = f"c{i}_"
    if (prefix + "err" in ours) != (prefix + "err" in theirs):
        yield (f"asyncflow: {ours.get(prefix + 'err', 'ran')}; "
               f"TF1: {theirs.get(prefix + 'err', 'ran')}")
        return
    if prefix + "err" in ours:
        return
    for key in ("runs", "final"):
        a_list, b_list = ours[prefix + key], theirs[prefix + key]
        if key == "final":
            a_list, b_list = [a_list], [b_list]
        for a, b in zip(a_list, b_list):
            a, b = np.asarray(a), np.asarray(b)
            if a.dtype != b.dtype or a.shape != b.shape:
                yield f"{key}: asyncflow {a.dtype}{list(a.shape)} vs TF1 {b.dtype}{list(b.shape)}"
            elif dtype.kind == "i" and not np.array_equal(a, b):
                yield f"{key}: asyncflow {a.ravel()[:8]} vs TF1 {b.ravel()[:8]}"
            elif dtype.kind == "f" and not np.allclose(a, b, rtol=TOLERANCES[dtype.name],
                                                      atol=0, equal_nan=True):
                yield f"{key}: asyncflow {a.ravel()[:8]} vs TF1 {b.ravel()[:8]}"


def _fuzz(tmp_path, cases, arrays):
    source = f"CASES = {cases!r}\n" + DRIVER
    theirs = tf1_run(source, tmp_path, **arrays)
    ours = compat_run(source, arrays)
    report = []
    for i, case in enumerate(cases):
        dtype = arrays[f"c{i}_v"].dtype
        for problem in _compare(ours, theirs, i, dtype):
            shapes = {k[len(f"c{i}_"):]: f"{v.dtype}{list(v.shape)}" for k, v in arrays.items()
                      if k.startswith(f"c{i}_")}
            report.append(f"case {i} {case} {shapes}: {problem}")
    assert not report, f"{len(report)} differences from TF1:\n" + "\n".join(report)


def test_variable_updates_agree_with_tf1(tmp_path):
    _fuzz(tmp_path, *_draw(seed=0, count=80))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_variable_updates_agree_with_tf1_long(tmp_path, seed):
    _fuzz(tmp_path, *_draw(seed=seed, count=300))
