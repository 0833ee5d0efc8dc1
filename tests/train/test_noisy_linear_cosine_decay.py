"""``noisy_linear_cosine_decay``: without variance it is ``linear_cosine_decay`` to the bit; with
it, the noise recovered from each run's rate (``rate / lr - beta) / cosine - alpha - linear``) is
a fresh normal draw of the schedule's variance ``initial_variance / (1 + step)^variance_decay``.
TF1's values and noise: tests/train/test_tf1_decay_fuzz.py."""
import math

import numpy as np
import pytest

import asyncflow as af

LR, STEPS, ALPHA, BETA, PERIODS = 0.5, 10, 0.1, 0.01, 0.5


def _parts(step):
    """The schedule's deterministic parts at ``step``: the linear and the cosine factors."""
    step = min(step, STEPS)
    return (STEPS - step) / STEPS, 0.5 * (1 + math.cos(math.pi * 2 * PERIODS * step / STEPS))


async def test_without_variance_it_is_linear_cosine_decay_exactly():
    with af.Graph().as_default():
        step = af.placeholder(af.int64, [])
        noisy = af.train.noisy_linear_cosine_decay(LR, step, STEPS, initial_variance=0.0,
                                                   num_periods=PERIODS, alpha=ALPHA, beta=BETA)
        plain = af.train.linear_cosine_decay(LR, step, STEPS, num_periods=PERIODS, alpha=ALPHA,
                                             beta=BETA)
        assert noisy.dtype is af.float32 and noisy.shape.as_list() == []
        async with af.Session() as sess:
            for value in [0, 1, 4, 9, 10, 25]:
                got, want = await sess.run([noisy, plain], {step: value})
                assert got == want, value
                linear, cosine = _parts(value)
                np.testing.assert_allclose(got, LR * ((ALPHA + linear) * cosine + BETA),
                                           rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [af.float32, af.float64])
async def test_the_noise_has_the_schedules_variance(dtype):
    draws, variance, decay = 2000, 0.5, 0.55
    with af.Graph().as_default():
        af.set_random_seed(7)
        step = af.placeholder(af.int64, [])
        rate = af.train.noisy_linear_cosine_decay(
            af.constant(LR, dtype), step, STEPS, initial_variance=variance,
            variance_decay=decay, num_periods=PERIODS, alpha=ALPHA, beta=BETA)
        assert rate.dtype is dtype
        async with af.Session() as sess:
            for at in (0, 3, 7):
                values = np.array([await sess.run(rate, {step: at}) for _ in range(draws)])
                linear, cosine = _parts(at)
                noise = (values.astype(np.float64) / LR - BETA) / cosine - ALPHA - linear
                std = math.sqrt(variance / (1 + at) ** decay)
                # Mean within 5 standard errors, deviation within 8% (its standard error is
                # 1.6% at 2000 draws); a fixed seed makes the draws, and so the test, fixed.
                assert abs(noise.mean()) < 5 * std / math.sqrt(draws), at
                assert abs(noise.std() / std - 1) < 0.08, (at, noise.std(), std)
                assert len(np.unique(values)) > draws // 2  # a new draw every run


def test_global_step_is_required():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="global_step is required for "
                                             "noisy_linear_cosine_decay"):
            af.train.noisy_linear_cosine_decay(0.1, None, 10)
