"""The learning-rate schedules of ``tf.train`` against TF1's (exponential, natural exp, inverse
time, polynomial, cosine, linear cosine, cosine with restarts, piecewise constant), at random
hyperparameters: each
case builds one schedule of a global step fed as int64, int32 or float32, and both sides
evaluate it at steps 0-12, 20, 99 and 1000 (the same program, ``DRIVER``, under TF1 with
``tf1_run``, which skips without TensorFlow, and here with ``compat_run``). Both must agree on
whether it builds, on the rate's tensor name, on the dtype and, to ``rtol 2e-5`` in float32 (``pow`` with exponents up to
~1000 and TF1's ``exp(y log x)`` form: a few ulps times the exponent) and ``1e-12`` in float64,
on every value (values below the smallest normal number are TF1's flushed subnormals:
docs/porting.md).
``natural_exp_decay`` takes ``2e-7 (1 + 1000 / decay_steps)``: TF1 rounds ``exp(-decay_rate)``
to float32, where its ``exp`` and numpy's may differ by an ulp, and the step's power
multiplies that. Not drawn: ``cosine_decay``, ``linear_cosine_decay`` and
``cosine_decay_restarts`` of a float64 rate and ``polynomial_decay(cycle=True)`` of one,
which TF1 refuses (a float32 constant inside meets the float64 rate: TypeError) and asyncflow
computes (docs/porting.md); ``polynomial_decay`` with ``power < 1``: TF1's ``decay_steps /
decay_steps`` is one ulp below 1 (a multiply by the reciprocal), which ``power=0.5`` makes
1e-8 (float64) or 1e-4 (float32) past the end, where asyncflow gives the end rate exactly.
``linear_cosine_decay`` and ``cosine_decay_restarts`` take an absolute tolerance of 1e-5 of
the case's largest value: near a period's end ``1 + cos(pi f)`` cancels, and TF1's ``f`` and
ours differ by an ulp. ``noisy_linear_cosine_decay`` draws other numbers than TF1's: its values
are compared with ``initial_variance=0`` (as linear cosine decay's), its noise by its
statistics on both sides against the schedule's variance."""
import numpy as np
import pytest

from tf1_reference import compat_run, tf1_run

STEPS = list(range(13)) + [20, 99, 1000]

DRIVER = """
for _i, (_expr, _step_dtype) in enumerate(CASES):
    try:
        with tf.Graph().as_default():
            step = tf.placeholder(getattr(tf, _step_dtype), [])
            _rate = eval(_expr, {"tf": tf, "np": np, "step": step})
            outputs[f"c{_i}_name"] = np.array(_rate.name)
            with tf.Session() as _sess:
                _values = [_sess.run(_rate, {step: _s}) for _s in STEPS]
        outputs[f"c{_i}"] = np.array(_values)
    except Exception as _e:
        outputs[f"c{_i}_err"] = np.array(f"{type(_e).__name__}: {_e}"[:300])
"""


def _number(rng, low, high, integer=False):
    value = rng.uniform(low, high)
    return int(round(value)) if integer else round(float(value), 3)


def _rate(rng):
    """The learning rate: a Python float, or a float32 or float64 constant."""
    value = _number(rng, 0.01, 1.0)
    form = rng.integers(4)
    if form == 0:
        return f"tf.constant({value}, tf.float64)"
    if form == 1:
        return f"tf.constant({value})"
    return repr(value)


def _draw(seed, count):
    rng = np.random.default_rng([seed, 13])
    cases, rtols, atols = [], [], []
    for _ in range(count):
        rtol = None
        atols.append(0.0)  # times the largest value of the case
        kind = rng.choice(["exponential", "inverse_time", "polynomial", "cosine", "piecewise",
                           "natural_exp", "linear_cosine", "restarts"])
        steps = _number(rng, 1, 12, integer=bool(rng.integers(2)))
        stair = bool(rng.integers(2))
        if kind == "exponential":
            expr = (f"tf.train.exponential_decay({_rate(rng)}, step, {steps}, "
                    f"{_number(rng, 0.1, 1.5)}, staircase={stair})")
        elif kind == "inverse_time":
            expr = (f"tf.train.inverse_time_decay({_rate(rng)}, step, {steps}, "
                    f"{_number(rng, 0.0, 2.0)}, staircase={stair})")
        elif kind == "polynomial":
            rate, cycle = _rate(rng), bool(rng.integers(2))
            wide = "float64" in rate  # see the module's docstring
            expr = (f"tf.train.polynomial_decay({rate}, step, {steps}, "
                    f"end_learning_rate={_number(rng, 0.0, 0.01)}, "
                    f"power={rng.choice([1.0, 2.0, 3.0])}, "
                    f"cycle={cycle and not wide})")
        elif kind == "natural_exp":
            expr = (f"tf.train.natural_exp_decay({_rate(rng)}, step, {steps}, "
                    f"{_number(rng, 0.0, 1.5)}, staircase={stair})")
            # exp(-decay_rate) in float32: TF1's exp and numpy's may differ by an ulp, which
            # the power step / decay_steps multiplies.
            rtol = 2e-7 * (1 + max(STEPS) / steps)
        elif kind == "linear_cosine":
            atols[-1] = 1e-5  # as cosine_decay_restarts' below
            expr = (f"tf.train.linear_cosine_decay({_rate(rng).replace('tf.float64', 'tf.float32')}, "
                    f"step, {steps}, "
                    f"num_periods={rng.choice([0.5, 1.0, 2.5])}, alpha={rng.choice([0.0, 0.1])}, "
                    f"beta={rng.choice([0.0, 0.001, 0.1])})")
        elif kind == "restarts":
            # Near the end of a period 1 + cos(pi f) cancels: TF1's f (a multiply by the
            # reciprocal) and ours differ by an ulp, which becomes 1e-4 of the value there.
            atols[-1] = 1e-5
            expr = (f"tf.train.cosine_decay_restarts("
                    f"{_rate(rng).replace('tf.float64', 'tf.float32')}, step, {steps}, "
                    f"t_mul={rng.choice([1.0, 1.5, 2.0])}, m_mul={rng.choice([1.0, 0.5])}, "
                    f"alpha={rng.choice([0.0, 0.1])})")
        elif kind == "cosine":
            expr = (f"tf.train.cosine_decay({_rate(rng).replace('tf.float64', 'tf.float32')}, "
                    f"step, {steps}, "
                    f"alpha={rng.choice([0.0, 0.1, 0.5])})")
        else:
            bounds = sorted({int(b) for b in rng.integers(0, 30, size=rng.integers(1, 4))})
            kind_values = rng.integers(3)
            if kind_values == 0:
                values = [_number(rng, 0.0, 1.0) for _ in range(len(bounds) + 1)]
            elif kind_values == 1:
                values = [int(v) for v in rng.integers(0, 9, size=len(bounds) + 1)]
            else:
                values = [f"tf.constant({_number(rng, 0.0, 1.0)}, tf.float64)"
                          for _ in range(len(bounds) + 1)]
            values_text = "[" + ", ".join(str(v) for v in values) + "]"
            if rng.integers(8) == 0:  # a length that does not fit: both refuse
                values_text = values_text[:-1] + ", 0.5]"
            expr = f"tf.train.piecewise_constant(step, {bounds}, {values_text})"
        step_dtype = str(rng.choice(["int64", "int64", "int32", "float32"]))
        if kind == "piecewise" and step_dtype == "float32":
            step_dtype = "int64"  # TF1's boundaries are ints: a float step is refused (both)
        cases.append((expr, step_dtype))
        rtols.append(rtol)
    return cases, rtols, atols


def _fuzz(tmp_path, cases, rtols, atols):
    source = f"CASES = {cases!r}\nSTEPS = {STEPS!r}\n" + DRIVER
    theirs = tf1_run(source, tmp_path)
    ours = compat_run(source, {})
    report = []
    for i, case in enumerate(cases):
        key = f"c{i}"
        if (key + "_err" in ours) != (key + "_err" in theirs):
            report.append(f"{case}: asyncflow {ours.get(key + '_err', 'ran')}; "
                          f"TF1 {theirs.get(key + '_err', 'ran')}")
            continue
        if key + "_err" in ours:
            continue
        if str(ours[key + "_name"]) != str(theirs[key + "_name"]):
            report.append(f"{case}: asyncflow names it {ours[key + '_name']}, "
                          f"TF1 {theirs[key + '_name']}")
        a, b = np.asarray(ours[key]), np.asarray(theirs[key])
        rtol = rtols[i] or (1e-12 if b.dtype == np.float64 else 2e-5)
        if a.dtype != b.dtype:
            report.append(f"{case}: asyncflow {a.dtype} vs TF1 {b.dtype}")
        elif not np.allclose(a, b, rtol=rtol, equal_nan=True, atol=max(
                atols[i] * np.max(np.abs(b[np.isfinite(b)]), initial=0.0), 2.3e-308 if b.dtype == np.float64 else 1.2e-38)):
            report.append(f"{case}:\n  asyncflow {a.tolist()}\n  TF1       {b.tolist()}")
    assert not report, f"{len(report)} differences from TF1:\n" + "\n".join(report)


def test_decay_schedules_agree_with_tf1(tmp_path):
    _fuzz(tmp_path, *_draw(seed=0, count=40))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_decay_schedules_agree_with_tf1_long(tmp_path, seed):
    _fuzz(tmp_path, *_draw(seed=seed, count=150))


def _noisy_draw(seed, count):
    """``noisy_linear_cosine_decay`` without noise (its deterministic part)."""
    rng = np.random.default_rng([seed, 17])
    cases = []
    for _ in range(count):
        expr = (f"tf.train.noisy_linear_cosine_decay("
                f"{_rate(rng).replace('tf.float64', 'tf.float32')}, step, "
                f"{_number(rng, 1, 12, integer=bool(rng.integers(2)))}, initial_variance=0.0, "
                f"variance_decay={rng.choice([0.0, 0.55, 2.0])}, "
                f"num_periods={rng.choice([0.5, 1.0, 2.5])}, alpha={rng.choice([0.0, 0.1])}, "
                f"beta={rng.choice([0.0, 0.001, 0.1])})")
        cases.append((expr, str(rng.choice(["int64", "int32", "float32"]))))
    return cases, [None] * count, [1e-5] * count


def test_noisy_linear_cosine_decay_without_noise_agrees_with_tf1(tmp_path):
    _fuzz(tmp_path, *_noisy_draw(seed=0, count=20))


NOISE_DRIVER = """
for _i, (_variance, _decay, _at) in enumerate(CASES):
    with tf.Graph().as_default():
        tf.set_random_seed(11 + _i)
        step = tf.placeholder(tf.int64, [])
        _rate = tf.train.noisy_linear_cosine_decay(0.5, step, 10, initial_variance=_variance,
                                                   variance_decay=_decay, num_periods=0.5,
                                                   alpha=0.1, beta=0.01)
        with tf.Session() as _sess:
            outputs[f"c{_i}"] = np.array([_sess.run(_rate, {step: _at}) for _ in range(DRAWS)])
"""


def test_noisy_linear_cosine_decay_noise_agrees_with_tf1(tmp_path):
    """The noise recovered from each run's rate: mean within 5 standard errors of 0 and
    deviation within 8% of the schedule's, on both sides (2000 draws: its standard error is
    1.6%); each side's draws are fixed by its seed."""
    cases, draws = [(0.5, 0.55, 0), (0.5, 0.55, 3), (2.0, 1.5, 6), (1.0, 0.55, 8)], 2000
    source = f"CASES = {cases!r}\nDRAWS = {draws}\n" + NOISE_DRIVER
    sides = {"TF1": tf1_run(source, tmp_path), "asyncflow": compat_run(source, {})}
    for i, (variance, decay, at) in enumerate(cases):
        step = min(at, 10)
        linear = (10 - step) / 10
        cosine = 0.5 * (1 + np.cos(np.pi * step / 10))
        std = np.sqrt(variance / (1 + step) ** decay)
        for side, outputs in sides.items():
            values = outputs[f"c{i}"]
            assert values.dtype == np.float32, side
            noise = (values.astype(np.float64) / 0.5 - 0.01) / cosine - 0.1 - linear
            assert abs(noise.mean()) < 5 * std / np.sqrt(draws), (side, cases[i], noise.mean())
            assert abs(noise.std() / std - 1) < 0.08, (side, cases[i], noise.std(), std)
