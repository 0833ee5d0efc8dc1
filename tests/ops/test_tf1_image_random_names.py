"""TF1's ``tf.image`` adjustments and orientations (``adjust_brightness``/``contrast``, their
random forms, ``grayscale_to_rgb``, ``rot90``, ``transpose_image``), ``tf.multinomial`` /
``tf.random.categorical`` and the ``tf.random`` namespace: values against numpy without
TensorFlow, seeded draws checked by their frequencies (a fixed seed: the same numbers every
run), refusals, and the deterministic ones against TF1 (``run_fuzz``; skips without
TensorFlow: ``ASYNCFLOW_TF_PYTHON``).
"""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (autouse fixture)
from gradcheck import assert_close, check_gradients
from test_tf1_array_fuzz import _compare, run_fuzz

RNG = np.random.default_rng(7)
PIXELS = RNG.integers(0, 256, size=(2, 3, 4, 3)).astype(np.uint8)
FLOATS = RNG.random((3, 4, 2)).astype(np.float32)


def _contrast(x, factor):
    mean = x.mean(axis=(-3, -2), keepdims=True)
    return (x - mean) * factor + mean


def test_brightness_and_contrast_values():
    got = session_run([tf.image.adjust_brightness(FLOATS, 0.5),
                       tf.image.adjust_brightness(PIXELS, -0.25),
                       tf.image.adjust_contrast(FLOATS, 1.7),
                       tf.image.adjust_contrast(PIXELS, 0.4)])
    assert_close(got[0], FLOATS + 0.5, rtol=1e-6)  # floats: not clipped
    assert got[1].dtype == np.uint8 and got[3].dtype == np.uint8
    want = np.clip(PIXELS / 255.0 - 0.25, 0, None) * 255  # back with saturation
    assert np.abs(got[1].astype(int) - want).max() <= 1
    assert_close(got[2], _contrast(FLOATS, 1.7), rtol=1e-5, atol=1e-6)
    want = np.clip(_contrast(PIXELS / 255.0, 0.4), 0, 1) * 255
    assert np.abs(got[3].astype(int) - want).max() <= 1


def test_random_brightness_and_contrast_stay_in_their_ranges():
    tf.set_random_seed(5)
    bright = tf.image.random_brightness(FLOATS, 0.3)
    contrast = tf.image.random_contrast(FLOATS, 0.5, 0.8)
    with tf.Session() as session:
        for _ in range(5):
            b, c = session.run([bright, contrast])
            delta = b - FLOATS
            assert np.ptp(delta) < 1e-6 and -0.3 <= delta.flat[0] < 0.3
            centered = FLOATS - FLOATS.mean(axis=(0, 1))
            factor = ((c - FLOATS.mean(axis=(0, 1))) / centered).mean()
            assert 0.5 - 1e-4 <= factor < 0.8 + 1e-4
    with pytest.raises(ValueError, match="max_delta must be non-negative"):
        tf.image.random_brightness(FLOATS, -0.1)
    with pytest.raises(ValueError, match="upper must be > lower"):
        tf.image.random_contrast(FLOATS, 0.5, 0.5)
    with pytest.raises(ValueError, match="lower must be non-negative"):
        tf.image.random_contrast(FLOATS, -0.5, 0.5)


async def test_contrast_gradient():
    await check_gradients(lambda t: af.image.adjust_contrast(t, 1.5), [FLOATS.astype(float)])


def test_orientations():
    gray = PIXELS[..., :1]
    got = session_run([tf.image.grayscale_to_rgb(gray), tf.image.transpose_image(PIXELS),
                       tf.image.transpose_image(PIXELS[0])]
                      + [tf.image.rot90(PIXELS, k) for k in range(-1, 5)]
                      + [tf.image.rot90(PIXELS[0], tf.constant(3))])
    np.testing.assert_array_equal(got[0], np.repeat(gray, 3, axis=-1))
    np.testing.assert_array_equal(got[1], PIXELS.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(got[2], PIXELS[0].transpose(1, 0, 2))
    for k, value in zip(range(-1, 5), got[3:9]):
        np.testing.assert_array_equal(value, np.rot90(PIXELS, k, axes=(1, 2)))
    np.testing.assert_array_equal(got[9], np.rot90(PIXELS[0], 3))
    with pytest.raises(ValueError, match="grayscale_to_rgb: images must be"):
        tf.image.grayscale_to_rgb(PIXELS)
    with pytest.raises(ValueError, match="rot90: k must be a constant integer"):
        tf.image.rot90(PIXELS, tf.placeholder(tf.int32, []))


def test_multinomial_frequencies_shapes_and_refusals():
    probabilities = np.array([[0.1, 0.6, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25]])
    with np.errstate(divide="ignore"):
        logits = np.log(probabilities).astype(np.float32)
    draws = tf.multinomial(logits, 20000, seed=3)
    small = tf.random.categorical(logits, 5, dtype=tf.int32, seed=4)
    hidden = tf.multinomial(tf.placeholder_with_default(logits, [None, None]),
                            tf.placeholder_with_default(3, []))
    assert draws.dtype == tf.int64 and draws.shape.as_list() == [2, 20000]
    assert small.dtype == tf.int32 and hidden.shape.as_list() == [None, None]
    tf.set_random_seed(1)
    with tf.Session() as session:
        first, second, shaped = session.run([draws, small, hidden])
        again = session.run([draws, small, hidden])[0]
    for row in range(2):  # within 0.015 of each probability (a fixed seed: no flakiness)
        counts = np.bincount(first[row], minlength=4) / 20000
        assert np.abs(counts - probabilities[row]).max() < 0.015
    assert not (first[0] == 3).any()  # a -inf logit is never drawn
    assert second.shape == (2, 5) and shaped.shape == (2, 3)
    assert not np.array_equal(first, again)  # a new draw every run
    with pytest.raises(ValueError, match="Multinomial .* logits must be 2-D"):
        tf.multinomial(logits[0], 2)
    with pytest.raises(TypeError, match="Multinomial .* logits must be floating"):
        tf.multinomial(np.zeros((1, 2), np.int32), 2)
    negative = tf.multinomial(logits, tf.placeholder_with_default(-1, []))
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_samples should be "):
        session_run(negative)


def test_multinomial_samples_only_finite_logits():
    # TF1's kernel: the maximum and the running total over the finite logits only, so a NaN or
    # +inf logit neither wins nor turns the whole row into its last class
    logits = np.array([[np.nan, 5.0, 0.0], [np.inf, 5.0, 0.0], [0.0, -np.inf, np.nan]],
                      np.float32)
    draws = session_run(tf.multinomial(logits, 2000, seed=7))
    counts = [np.bincount(row, minlength=3) for row in draws]
    assert counts[0][0] == counts[1][0] == 0 and counts[0][1] > 1900 and counts[1][1] > 1900
    assert counts[0][2] > 0 and counts[1][2] > 0  # e**-5 of the draws
    assert list(counts[2]) == [2000, 0, 0]


def test_random_namespace():
    assert tf.random.normal is af.random_normal and tf.random.uniform is af.random_uniform
    assert tf.random.truncated_normal is af.truncated_normal
    assert tf.random.shuffle is af.random_shuffle
    assert tf.random.log_uniform_candidate_sampler is af.nn.log_uniform_candidate_sampler
    tf.random.set_random_seed(11)
    assert tf.get_default_graph().seed == 11
    x = session_run(tf.random.uniform([3], 2.0, 3.0, seed=1))
    assert ((2.0 <= x) & (x < 3.0)).all()


def test_adjustments_agree_with_tf1(tmp_path):
    floats = RNG.random((2, 3, 4, 3)).astype(np.float32)
    cases = [("tf.image.adjust_brightness(a, 0.3)", {"a": floats}),
             ("tf.image.adjust_brightness(a, -0.3)", {"a": PIXELS}),
             ("tf.image.adjust_brightness(a, 0.2)", {"a": PIXELS[0]}),
             ("tf.image.adjust_contrast(a, 1.8)", {"a": floats}),
             ("tf.image.adjust_contrast(a, 0.3)", {"a": PIXELS}),
             ("tf.image.adjust_contrast(a, 2.5)", {"a": PIXELS.astype(np.int32)}),
             ("tf.image.grayscale_to_rgb(a)", {"a": PIXELS[..., :1]}),
             ("tf.image.transpose_image(a)", {"a": PIXELS}),
             ("tf.image.rot90(a)", {"a": PIXELS}), ("tf.image.rot90(a, 2)", {"a": PIXELS[0]}),
             ("tf.image.rot90(a, -1)", {"a": floats})]
    # TF1 builds rot90 with a cond on k, which loses the height and width it knows; here k
    # is a constant and they stay known. (TF1's AdjustContrastv2 has no gradient; this
    # adjust_contrast, a composition, has one.)
    run_fuzz(tmp_path, cases, lambda ours, theirs, i, expr: [
        line for line in _compare(ours, theirs, i, expr)
        if not ("rot90" in expr and "static shape" in line)])
