"""TF1's ``tf.space_to_depth``/``depth_to_space`` (NHWC and NCHW, also in ``tf.nn``),
``tf.space_to_batch_nd``/``batch_to_space_nd`` and ``tf.space_to_batch``/``batch_to_space``
(they were on porting.md's "Not provided" list): values against a numpy reference written
from TF1's definitions (always) and TF1 (when TensorFlow is installed), static shapes and op
names as TF1's, gradients against finite differences, and bad input named."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from gradcheck import check_gradients
from tf1_reference import compare_groups, tf1_run

X = np.arange(2 * 4 * 6 * 3, dtype=np.float64).reshape(2, 4, 6, 3)
D = np.arange(2 * 2 * 3 * 8, dtype=np.float64).reshape(2, 2, 3, 8)
B = np.arange(8 * 1 * 2 * 1, dtype=np.float64).reshape(8, 1, 2, 1)


async def _run(fetches, feed_dict=None):
    async with af.Session() as session:
        return await session.run(fetches, feed_dict)


def _space_to_depth_np(x, bs):
    """TF1's definition, element by element: out[b, i, j, (di*bs + dj)*c + k]."""
    b, h, w, c = x.shape
    out = np.empty((b, h // bs, w // bs, bs * bs * c), x.dtype)
    for i in range(h // bs):
        for j in range(w // bs):
            for di in range(bs):
                for dj in range(bs):
                    out[:, i, j, (di * bs + dj) * c:(di * bs + dj + 1) * c] = \
                        x[:, i * bs + di, j * bs + dj, :]
    return out


def _space_to_batch_np(x, block, pads):
    """TF1's definition: out[(o_0*b_1 + o_1)*batch + n, i_0, i_1, ...] = padded[n,
    i_0*b_0 + o_0, i_1*b_1 + o_1, ...] (block offsets major)."""
    padded = np.pad(x, [(0, 0)] + list(pads) + [(0, 0)] * (x.ndim - 1 - len(block)))
    batch = x.shape[0]
    inner = [d // b for d, b in zip(padded.shape[1:len(block) + 1], block)]
    out = np.empty([batch * int(np.prod(block))] + inner + list(x.shape[len(block) + 1:]),
                   x.dtype)
    for offset in np.ndindex(*block):
        k = int(np.ravel_multi_index(offset, block))
        index = tuple(slice(o, None, b) for o, b in zip(offset, block))
        out[k * batch:(k + 1) * batch] = padded[(slice(None),) + index]
    return out


async def test_values_shapes_and_names():
    with af.Graph().as_default():
        q = af.placeholder(af.float32, [None, 4, None, 3])
        nchw = np.ascontiguousarray(X.transpose(0, 3, 1, 2))
        outs = [tf.space_to_depth(X, 2), tf.depth_to_space(D, 2),
                tf.space_to_batch_nd(X, [2, 3], [[0, 0], [1, 2]]),
                tf.batch_to_space_nd(B, [2, 2], [[0, 1], [1, 0]]),
                tf.space_to_batch(X, [[0, 0], [0, 0]], 2), tf.batch_to_space(B, [[0, 0], [0, 0]], 2),
                tf.space_to_batch_nd(q, [2, 3], [[0, 0], [1, 2]]),
                tf.space_to_batch_nd(np.arange(6.0).reshape(1, 6), [3], [[0, 0]]),
                tf.nn.space_to_depth(nchw, 2, data_format="NCHW"),
                tf.nn.depth_to_space(np.ascontiguousarray(D.transpose(0, 3, 1, 2)), 2,
                                     data_format="NCHW"),
                tf.nn.space_to_batch(X, [[1, 1], [0, 2]], block_size=2)]
        assert [o.name for o in outs[:8]] == [  # TF1's
            "SpaceToDepth:0", "DepthToSpace:0", "SpaceToBatchND:0", "BatchToSpaceND:0",
            "SpaceToBatchND_1:0", "BatchToSpaceND_1:0", "SpaceToBatchND_2:0",
            "SpaceToBatchND_3:0"]
        assert [o.shape.as_list() for o in outs[:8]] == [  # TF1's
            [2, 2, 3, 12], [2, 4, 6, 2], [12, 2, 3, 3], [2, 1, 3, 1], [8, 2, 3, 3],
            [2, 2, 4, 1], [None, 2, None, 3], [3, 2]]
        assert outs[8].shape.as_list() == [2, 12, 2, 3] and outs[9].shape.as_list() == [2, 2, 4, 6]
        values = await _run(outs, {q: X.astype(np.float32)})
    depth = _space_to_depth_np(X, 2)
    flat = np.arange(6.0).reshape(1, 6)
    expected = [depth, D.reshape(2, 2, 3, 2, 2, 2).transpose(0, 1, 3, 2, 4, 5).reshape(2, 4, 6, 2),
                _space_to_batch_np(X, [2, 3], [(0, 0), (1, 2)]), None,
                _space_to_batch_np(X, [2, 2], [(0, 0), (0, 0)]), None,
                _space_to_batch_np(X, [2, 3], [(0, 0), (1, 2)]),
                _space_to_batch_np(flat, [3], [(0, 0)]), depth.transpose(0, 3, 1, 2),
                values[1].transpose(0, 3, 1, 2),
                _space_to_batch_np(X, [2, 2], [(1, 1), (0, 2)])]
    # batch_to_space_nd undoes space_to_batch_nd, then crops
    full = np.empty((2, 2, 4, 1))
    for k, offset in enumerate(np.ndindex(2, 2)):
        full[:, offset[0]::2, offset[1]::2] = B[2 * k:2 * k + 2]
    expected[3], expected[5] = full[:, 0:1, 1:4], full
    np.testing.assert_array_equal(values[7], [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]])  # TF1's
    np.testing.assert_array_equal(values[0][0, 0, 0], [0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23])
    for i, (value, want) in enumerate(zip(values, expected)):
        np.testing.assert_array_equal(value, want, err_msg=str(i))
    assert values[6].dtype == np.float32


async def test_round_trips_with_fed_arguments():
    with af.Graph().as_default():
        block = af.placeholder(af.int32, [2])
        pads = af.placeholder(af.int64, [2, 2])
        there = tf.space_to_batch_nd(X, block, pads)
        back = tf.batch_to_space_nd(there, block, pads)
        assert there.shape.as_list() == [None, None, None, 3]
        values = await _run([there, back, tf.depth_to_space(tf.space_to_depth(X, 2), 2)],
                            {block: [2, 2], pads: [[2, 0], [1, 1]]})
    np.testing.assert_array_equal(values[0], _space_to_batch_np(X, [2, 2], [(2, 0), (1, 1)]))
    np.testing.assert_array_equal(values[1], X)
    np.testing.assert_array_equal(values[2], X)


@pytest.mark.parametrize("build,shape", [
    (lambda x: tf.space_to_depth(x, 2), (2, 4, 2, 3)),
    (lambda x: tf.depth_to_space(x, 2), (1, 2, 3, 8)),
    (lambda x: tf.space_to_depth(x, 2, data_format="NCHW"), (1, 3, 4, 2)),
    (lambda x: tf.space_to_batch_nd(x, [2, 3], [[1, 1], [0, 1]]), (2, 2, 5, 2)),
    (lambda x: tf.batch_to_space_nd(x, [2, 1], [[1, 0], [0, 1]]), (4, 2, 3)),
    (lambda x: tf.space_to_batch(x, [[0, 2], [2, 0]], 2), (1, 2, 2, 1)),
], ids=["space_to_depth", "depth_to_space", "space_to_depth_nchw", "space_to_batch_nd",
        "batch_to_space_nd", "space_to_batch"])
async def test_gradients(build, shape):
    await check_gradients(build, [np.random.default_rng(2).standard_normal(shape)])


def test_bad_input_is_named_while_building():
    with af.Graph().as_default():
        x = af.constant(X)
        cases = [
            (lambda: tf.space_to_depth(x, 1), "Attr 'block_size' of 'SpaceToDepth' Op passed 1 "
                                              "less than minimum 2"),
            (lambda: tf.space_to_depth(x, 4), "SpaceToDepth.*evenly divisible by 4 but is 6"),
            (lambda: tf.depth_to_space(x, 2), "DepthToSpace.*evenly divisible by 4 but is 3"),
            (lambda: tf.space_to_depth(x, 2, data_format="NCHW"),
             "SpaceToDepth.*evenly divisible by 2 but is 3"),
            (lambda: tf.space_to_depth(np.ones((2, 3)), 2), "SpaceToDepth.*rank 4 but is rank 2"),
            (lambda: tf.space_to_batch_nd(x, [5, 2], [[0, 0], [0, 0]]),
             "SpaceToBatchND.*evenly divisible by 5 but is 4"),
            (lambda: tf.batch_to_space_nd(x, [3, 1], [[0, 0], [0, 0]]),
             "BatchToSpaceND.*evenly divisible by 3 but is 2"),
            (lambda: tf.batch_to_space_nd(x, [1, 1], [[3, 2], [0, 0]]),
             "BatchToSpaceND.*Negative dimension size caused by subtracting 5 from 4"),
            (lambda: tf.space_to_batch_nd(x, [2, 2], [[-1, 1], [0, 0]]),
             "SpaceToBatchND.*paddings cannot be negative"),
            (lambda: tf.space_to_batch_nd(x, [2, 2], [[0, 0]]), "SpaceToBatchND.*block_shape has "
                                                                "2 entries"),
            (lambda: tf.space_to_batch(np.ones((2, 4, 4)), [[0, 0], [0, 0]], 2),
             "space_to_batch: input must be 4-D"),
        ]
        for build, message in cases:
            with pytest.raises(ValueError, match=message):
                build()
        with pytest.raises(ValueError, match="data_format must be 'NHWC' or 'NCHW'"):
            tf.space_to_depth(x, 2, data_format="NDHWC")
        with pytest.raises(TypeError, match="SpaceToBatchND: value passed to block_shape has "
                                            "dtype float32"):
            tf.space_to_batch_nd(x, [2.0, 2.0], [[0, 0], [0, 0]])


async def test_bad_fed_input_fails_the_run_naming_the_op():
    with af.Graph().as_default():
        p = af.placeholder(af.float64)
        block = af.placeholder(af.int32, [None])
        outs = {"s2d": tf.space_to_depth(p, 2, name="s2d"),
                "s2b": tf.space_to_batch_nd(p, block, [[0, 0], [0, 0]], name="s2b"),
                "b2s": tf.batch_to_space_nd(p, block, [[0, 0], [0, 0]], name="b2s")}
        for key, feed, message in [
                ("s2d", {p: X[:, :3]}, "height 3 and width 6 must be divisible by block_size"),
                ("s2b", {p: X, block: [3, 2]}, r"padded_shape\[0\]=4 is not divisible"),
                ("b2s", {p: X, block: [2, 2]}, r"batch dimension \(2\) is not divisible"),
                ("b2s", {p: X, block: [0, 2]}, "block_shape values must be at least 1")]:
            with pytest.raises(af.errors.InvalidArgumentError, match=f"{key}.*{message}"):
                await _run(outs[key], feed)


TF_SNIPPET = """
x = tf.constant(inputs["x"])
d = tf.constant(inputs["d"])
b = tf.constant(inputs["b"])
outs = [tf.space_to_depth(x, 2), tf.depth_to_space(d, 2), tf.nn.space_to_depth(x[:, :, :4], 4),
        tf.space_to_batch_nd(x, [2, 3], [[0, 0], [1, 2]]),
        tf.batch_to_space_nd(b, [2, 2], [[0, 1], [1, 0]]),
        tf.space_to_batch(x, [[1, 1], [0, 2]], 2), tf.batch_to_space(b, [[0, 0], [1, 1]], 2),
        tf.nn.space_to_batch(x, [[0, 0], [0, 0]], block_size=2),
        tf.space_to_batch_nd(x[0], [3], [[2, 1]]), tf.batch_to_space_nd(d, [2], [[1, 0]]),
        tf.space_to_batch_nd(tf.cast(x, tf.int32), np.array([2, 1], np.int64), [[0, 0], [0, 0]])]
grads = [tf.gradients(tf.reduce_sum(tf.sin(o)), [x, d, b]) for o in outs[:-1]]
grads = [g for pair in grads for g in pair if g is not None]
with tf.Session() as sess:
    outputs["outs"], outputs["grads"] = sess.run([outs, grads])
outputs["static"] = np.array([str(o.shape) for o in outs])
"""


async def test_against_tf1(tmp_path):
    inputs = {"x": X, "d": D, "b": B}
    theirs = tf1_run(TF_SNIPPET, tmp_path, **inputs)
    with af.Graph().as_default():
        g = {"tf": tf, "np": np, "inputs": inputs}
        exec(TF_SNIPPET.split("with tf.Session()")[0], g)  # the same TF1 program, unchanged
        values = await _run([g["outs"], g["grads"]])
        assert [str(o.shape) for o in g["outs"]] == theirs["static"].tolist()
    compare_groups(values, theirs, ("outs", "grads"))
