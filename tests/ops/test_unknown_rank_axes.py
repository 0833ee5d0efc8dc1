"""Negative axes on inputs of unknown rank, as TF1: the op builds and resolves the axes when
it runs, against the fed value's rank (an axis out of range or named twice is an
InvalidArgumentError naming the op then). asyncflow refused the reductions while building
("negative axes need a known rank") and ``gather`` ("a negative axis needs the rank of
params"; its gradient, and gather_nd's, needed that rank, which TF1's compute when they run);
concat, split, expand_dims, argmax, squeeze, stack, reverse, cumsum and softmax already took
them. TF1's answers (2.21's ``tf.compat.v1``, v2
behaviour off) were checked by hand; on random shapes and dtypes:
tests/ops/test_tf1_math_fuzz.py."""
import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from tf1_reference import compat_run, tf1_run

VALUE = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4) - 5.0

REDUCTIONS = [
    (lambda x: tf.reduce_sum(x, -1), lambda v: v.sum(-1)),
    (lambda x: tf.reduce_sum(x, [-1, -2]), lambda v: v.sum((-1, -2))),
    (lambda x: tf.reduce_sum(x, [0, -1]), lambda v: v.sum((0, -1))),
    (lambda x: tf.reduce_max(x, [-1, -3]), lambda v: v.max((-1, -3))),
    (lambda x: tf.reduce_min(x, [-1]), lambda v: v.min(-1)),
    (lambda x: tf.reduce_mean(x, -2, keepdims=True), lambda v: v.mean(-2, keepdims=True)),
    (lambda x: tf.reduce_prod(x, -1), lambda v: v.prod(-1)),
    (lambda x: tf.reduce_any(x > 3, -1), lambda v: (v > 3).any(-1)),
    (lambda x: tf.reduce_all(x > 3, [-2]), lambda v: (v > 3).all(-2)),
    (lambda x: tf.nn.l2_normalize(x, -1),
     lambda v: v / np.sqrt((v * v).sum(-1, keepdims=True))),
    (lambda x: tf.count_nonzero(x, -1), lambda v: (v != 0).sum(-1)),
]


@pytest.mark.parametrize("index", range(len(REDUCTIONS)))
def test_reductions_resolve_negative_axes_when_they_run(index):
    build, expected = REDUCTIONS[index]
    x = tf.placeholder(tf.float32)
    y = build(x)
    assert y.shape.ndims is None
    np.testing.assert_allclose(session_run(y, {x: VALUE}), expected(VALUE), rtol=1e-6)


@pytest.mark.parametrize("reduce", [tf.reduce_sum, tf.reduce_mean, tf.reduce_max,
                                    tf.reduce_prod])
def test_gradients_through_negative_axes_of_an_unknown_rank(reduce):
    # d/dx sum(reduce(x, [-1, -3]) ** 2), against the same graph on a known shape.
    x, known = tf.placeholder(tf.float32), tf.placeholder(tf.float32, VALUE.shape)
    grads = [tf.gradients(tf.reduce_sum(reduce(t, [-1, -3]) ** 2), t)[0] for t in (x, known)]
    got, want = session_run(grads, {x: VALUE, known: VALUE})
    assert got.shape == VALUE.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)



@pytest.mark.parametrize("reduce", [tf.reduce_max, tf.reduce_min, tf.reduce_prod])
def test_gradients_of_negative_axes_after_the_rank_became_known(reduce):
    # Built on an unknown rank, the op keeps its axes negative; set_shape then tells the
    # input's rank. The Max/Min/Prod gradients reshaped to the input's shape with 1s at the
    # axes read from the op, and matched no negative axis: "Input to reshape is a tensor with
    # 6 values, but the requested shape has 24" (TF1 gives the gradient).
    x, known = tf.placeholder(tf.float32), tf.placeholder(tf.float32, VALUE.shape)
    ys = [reduce(t, [-1, 0]) for t in (x, known)]
    x.set_shape(VALUE.shape)
    grads = [tf.gradients(tf.reduce_sum(y ** 2), t)[0] for y, t in zip(ys, (x, known))]
    got, want = session_run(grads, {x: VALUE, known: VALUE})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    loose = tf.placeholder(tf.float32)  # two dims still unknown: reshaped when it runs
    y = reduce(loose, -2)
    loose.set_shape([None, None, 4])
    grads = [tf.gradients(tf.reduce_sum(z ** 2), t)[0] for z, t in
             [(y, loose), (reduce(known, 1), known)]]
    got, want = session_run(grads, {loose: VALUE, known: VALUE})
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_axis_out_of_range_or_twice_fails_when_the_op_runs():
    x = tf.placeholder(tf.float32)
    with pytest.raises(af.errors.InvalidArgumentError,
                       match=r"Sum .*Invalid reduction dimension \(-4 for input with 3"):
        session_run(tf.reduce_sum(x, -4), {x: VALUE})
    with pytest.raises(af.errors.InvalidArgumentError,
                       match="Max .*Axes contains duplicate dimension: 2"):
        session_run(tf.reduce_max(x, [-1, 2]), {x: VALUE})
    with pytest.raises(af.errors.InvalidArgumentError, match="Invalid reduction dimension"):
        session_run(tf.reduce_sum(x, -1), {x: np.float32(3.0)})
    with pytest.raises(ValueError, match="names an axis twice"):  # the same number: at once
        tf.reduce_sum(x, [-1, -1])



@pytest.mark.parametrize("reduce", [tf.reduce_sum, tf.reduce_max, tf.reduce_mean,
                                    tf.reduce_prod])
@pytest.mark.parametrize("axis", [3, [0, 5]])
def test_a_positive_axis_out_of_range_fails_with_tf1s_message_too(reduce, axis):
    # A positive axis past the fed rank got numpy's "AxisError: axis 3 is out of bounds" or
    # "IndexError: tuple index out of range", which names no reduction dimension; TF1 says
    # "Invalid reduction dimension (3 for input with 3 dimension(s)", as here for -4.
    x = tf.placeholder(tf.float32)
    with pytest.raises(af.errors.InvalidArgumentError,
                       match=r"Invalid reduction dimension \((3|5) for input with 3 dim"):
        session_run(reduce(x, axis), {x: VALUE})

def test_gather_resolves_a_negative_axis_when_it_runs():
    x = tf.placeholder(tf.float32)
    picked = tf.gather(x, [0, 2, 2], axis=-1)
    rows = tf.gather(x, [[1, 0], [2, 2]], axis=-2, batch_dims=1)
    values = session_run([picked, rows], {x: VALUE})
    np.testing.assert_array_equal(values[0], VALUE[..., [0, 2, 2]])
    np.testing.assert_array_equal(values[1], np.stack([VALUE[0, [1, 0]], VALUE[1, [2, 2]]]))
    with pytest.raises(af.errors.InvalidArgumentError,
                       match="GatherV2 .*axis -4 is out of range for params of rank 3"):
        session_run(tf.gather(x, [0], axis=-4), {x: VALUE})
    known = tf.placeholder(tf.float32, VALUE.shape)  # a known rank: as before
    grad = tf.gradients(tf.reduce_sum(tf.gather(known, [0, 2, 2], axis=-1)), known)[0]
    np.testing.assert_array_equal(session_run(grad, {known: VALUE})[0, 0], [1, 0, 2, 0])


GATHER_GRADIENTS = """
x = tf.placeholder(tf.float32)  # params of unknown rank
ys = [tf.gather(x, [1, 0, 1]), tf.gather(x, [2, 0, 2], axis=1), tf.gather(x, [0, 2, 2], axis=-1),
      tf.gather(x, [[1, 0], [2, 2]], axis=-2, batch_dims=1),
      tf.gather(x, [[1, 0], [2, 2]], axis=1, batch_dims=1),
      tf.gather(x, [[1, 0, 3], [2, 2, 1]], axis=2, batch_dims=1),
      tf.gather_nd(x, [[1, 0], [0, 2], [1, 0]]), tf.gather_nd(x, [[1], [1]])]
grads = [tf.gradients(tf.reduce_sum(y * y), x)[0] for y in ys]
outputs["sparse"] = np.array(isinstance(grads[0], tf.IndexedSlices))
with tf.Session() as sess:
    outputs["grads"] = sess.run([tf.convert_to_tensor(g) for g in grads], {x: inputs["x"]})
"""


def test_gather_gradients_on_params_of_unknown_rank_as_tf1(tmp_path):
    # asyncflow refused them ("its gradient needs the rank of params", "the rank of
    # Placeholder:0 must be known here"); TF1 computes the dims when the gradient runs, the
    # axis-0 gather's gradient an IndexedSlices whose dense shape is params' computed shape.
    ours = compat_run(GATHER_GRADIENTS, {"x": VALUE})
    assert ours["sparse"]
    expected = np.zeros_like(VALUE)
    np.add.at(expected, [1, 0, 1], 2 * VALUE[[1, 0, 1]])
    np.testing.assert_array_equal(ours["grads"][0], expected)
    theirs = tf1_run(GATHER_GRADIENTS, tmp_path, x=VALUE)
    assert bool(theirs["sparse"])
    for i, (got, want) in enumerate(zip(ours["grads"], theirs["grads"])):
        np.testing.assert_array_equal(got, want, err_msg=f"gradient {i}")
