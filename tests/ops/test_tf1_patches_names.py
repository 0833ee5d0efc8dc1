"""TF1's ``tf.extract_image_patches`` (``tf.image.extract_image_patches``,
``tf.image.extract_patches``), which porting.md listed as not provided: values against a
numpy loop (always) and TF1 (when TensorFlow is installed), static shapes and op names as
TF1's, the gradient (and the gradient's gradient) against finite differences, bad input
named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

RNG = np.random.default_rng(3)
IMAGES = RNG.standard_normal((2, 5, 6, 3))


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _patches(x, ksizes, strides, rates, padding):
    """The patches by a loop over output positions and window cells (the reference)."""
    (_, kr, kc, _), (_, sr, sc, _), (_, rr, rc, _) = ksizes, strides, rates
    b, h, w, d = x.shape
    spans = [k + (k - 1) * (r - 1) for k, r in ((kr, rr), (kc, rc))]
    if padding == "VALID":
        rows, cols = (h - spans[0]) // sr + 1, (w - spans[1]) // sc + 1
        top = left = 0
    else:
        rows, cols = -(-h // sr), -(-w // sc)
        top = max((rows - 1) * sr + spans[0] - h, 0) // 2
        left = max((cols - 1) * sc + spans[1] - w, 0) // 2
    out = np.zeros((b, rows, cols, kr * kc * d), x.dtype)
    for i in range(rows):
        for j in range(cols):
            for a in range(kr):
                for c in range(kc):
                    y, z = i * sr + a * rr - top, j * sc + c * rc - left
                    if 0 <= y < h and 0 <= z < w:
                        start = (a * kc + c) * d
                        out[:, i, j, start:start + d] = x[:, y, z, :]
    return out


CASES = [([1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID"),
         ([1, 2, 3, 1], [1, 2, 2, 1], [1, 2, 1, 1], "SAME"),
         ([1, 3, 2, 1], [1, 1, 3, 1], [1, 1, 2, 1], "SAME"),
         ([1, 1, 1, 1], [1, 3, 1, 1], [1, 1, 1, 1], "VALID"),
         ([1, 5, 6, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"),
         ([1, 2, 2, 1], [1, 4, 4, 1], [1, 3, 3, 1], "SAME")]


async def test_values_shapes_and_names():
    with af.Graph().as_default():
        fed = af.placeholder(af.float64, [None, None, 6, 3])
        outs = [tf.extract_image_patches(IMAGES, *case) for case in CASES]
        outs.append(tf.image.extract_image_patches(fed, sizes=[1, 2, 3, 1], strides=[1, 2, 2, 1],
                                                   rates=[1, 1, 1, 1], padding="VALID"))
        outs.append(tf.image.extract_patches(IMAGES.astype(np.int32), [1, 2, 2, 1],
                                             [1, 1, 1, 1], [1, 1, 1, 1], "SAME"))
        assert [o.name for o in outs[:2]] == ["ExtractImagePatches:0", "ExtractImagePatches_1:0"]
        assert [o.shape.as_list() for o in outs] == [
            [2, 2, 2, 18], [2, 3, 3, 18], [2, 5, 2, 18], [2, 2, 6, 3], [2, 1, 1, 90],
            [2, 2, 2, 12], [None, None, 2, 18], [2, 5, 6, 12]]
        values = await _run(outs, {fed: IMAGES})
    for value, case in zip(values, CASES):
        np.testing.assert_array_equal(value, _patches(IMAGES, *case))
    np.testing.assert_array_equal(values[-2], values[0])
    assert values[-1].dtype == np.int32
    np.testing.assert_array_equal(values[-1], _patches(IMAGES.astype(np.int32), [1, 2, 2, 1],
                                                       [1, 1, 1, 1], [1, 1, 1, 1], "SAME"))


async def test_empty_outputs():
    with af.Graph().as_default():
        outs = [tf.extract_image_patches(IMAGES, [1, 6, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1],
                                         "VALID"),
                tf.extract_image_patches(IMAGES, [1, 0, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1],
                                         "VALID")]
        assert [o.shape.as_list() for o in outs] == [[2, 0, 2, 54], [2, 3, 2, 0]]  # TF1's
        values = await _run(outs)
    assert [v.shape for v in values] == [(2, 0, 2, 54), (2, 3, 2, 0)]


@pytest.mark.parametrize("case", CASES[:4] + CASES[5:], ids=[c[3] + str(i) for i, c in
                                                             enumerate(CASES[:4] + CASES[5:])])
async def test_gradient(case):
    await check_gradients(lambda x: tf.extract_image_patches(x, *case), [IMAGES[:, :4, :5]])


async def test_gradient_of_the_gradient():
    case = CASES[1]

    def build(x, g):
        grad = af.gradients(tf.extract_image_patches(x, *case), x, grad_ys=g)[0]
        return grad * grad

    x = IMAGES[:1, :4, :5, :2]
    await check_gradients(build, [x, RNG.standard_normal((1, 2, 3, 12))])


def test_bad_input_is_named():
    with af.Graph().as_default():
        x = af.constant(IMAGES)
        with pytest.raises(ValueError, match="Only support ksizes across space"):
            tf.extract_image_patches(x, [2, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="Only support strides across space"):
            tf.extract_image_patches(x, [1, 2, 3, 1], [1, 2, 2, 2], [1, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="Only support rates across space"):
            tf.extract_image_patches(x, [1, 2, 3, 1], [1, 2, 2, 1], [2, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="ksizes must be a list of 4 ints"):
            tf.extract_image_patches(x, [2, 3], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="strides must be positive"):
            tf.extract_image_patches(x, [1, 2, 3, 1], [1, 0, 2, 1], [1, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="padding must be 'SAME' or 'VALID', got 'FULL'"):
            tf.extract_image_patches(x, [1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "FULL")
        with pytest.raises(ValueError, match="ExtractImagePatches.*rank 4 but is rank 3"):
            tf.extract_image_patches(x[0], [1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
        with pytest.raises(ValueError, match="Computed output size would be negative"):
            tf.extract_image_patches(x, [1, 5, 1, 1], [1, 1, 1, 1], [1, 2, 1, 1], "VALID")
        with pytest.raises(TypeError, match="ExtractImagePatches: value passed to images has "
                                            "dtype bool"):
            tf.extract_image_patches(af.ones([1, 3, 3, 1], af.bool), [1, 2, 2, 1],
                                     [1, 1, 1, 1], [1, 1, 1, 1], "VALID")


async def test_run_time_errors_name_the_op():
    with af.Graph().as_default():
        fed = af.placeholder(af.float64)
        out = tf.extract_image_patches(fed, [1, 5, 1, 1], [1, 1, 1, 1], [1, 2, 1, 1], "VALID",
                                       name="patches")
        for value, message in [(IMAGES, "'patches'.*Computed output size would be negative"),
                               (IMAGES[0], "'patches'.*input must be 4-dimensional")]:
            with pytest.raises(af.errors.InvalidArgumentError, match=message):
                await _run(out, {fed: value})


TF_SNIPPET = """
x = tf.constant(inputs["x"])
outs = [tf.extract_image_patches(x, [1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID"),
        tf.extract_image_patches(x, [1, 2, 3, 1], [1, 2, 2, 1], [1, 2, 1, 1], "SAME"),
        tf.image.extract_image_patches(x, sizes=[1, 3, 2, 1], strides=[1, 1, 3, 1],
                                       rates=[1, 1, 2, 1], padding="SAME"),
        tf.image.extract_patches(tf.sin(x), [1, 2, 2, 1], [1, 4, 4, 1], [1, 3, 3, 1], "SAME"),
        tf.extract_image_patches(x, [1, 5, 6, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID")]
ints = [tf.extract_image_patches(tf.cast(x * 10, tf.int32), [1, 2, 2, 1], [1, 1, 2, 1],
                                 [1, 1, 1, 1], "SAME")]
weights = tf.constant(np.linspace(-1.0, 1.0, 2 * 3 * 3 * 18).reshape(2, 3, 3, 18))
grads = [tf.gradients(tf.reduce_sum(tf.sin(o)), x)[0] for o in outs] + [
    tf.gradients(tf.reduce_sum(outs[1] * weights), x)[0]]
with tf.Session() as sess:
    outputs["outs"], outputs["ints"], outputs["grads"] = sess.run([outs, ints, grads])
outputs["static"] = np.array([str(o.shape) for o in outs + ints])
outputs["names"] = np.array([t.name for t in outs + ints])
"""


async def test_against_tf1(tmp_path):
    inputs = {"x": IMAGES}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["ints"], g["grads"]])
        static = [str(o.shape) for o in g["outs"] + g["ints"]]
        names = [t.name for t in g["outs"] + g["ints"]]
    assert static == theirs["static"].tolist()
    assert names == theirs["names"].tolist()
    compare_groups(values, theirs, ("outs", "ints", "grads"), rtol=1e-12, atol=1e-14)
