"""SparseTensor, sparse_placeholder and the sparse_* ops against TF1 (values and gradients)."""
import inspect

import numpy as np
import pytest

import asyncflow as af
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from tests.tf1_reference import tf1_run

INDICES = np.array([[0, 1], [0, 3], [2, 0], [2, 2]], np.int64)
VALUES = np.array([1.5, -2.0, 3.0, 0.5], np.float32)
SHAPE = np.array([3, 4], np.int64)
TABLE = np.linspace(-1.0, 1.0, 6 * 3).reshape(6, 3).astype(np.float32)
DENSE = np.linspace(0.5, 3.0, 8).reshape(4, 2).astype(np.float32)


def _sparse_graph(tf, indices, values, shape, table, dense):
    sp = tf.SparseTensor(tf.constant(indices), tf.constant(values), tf.constant(shape))
    b = tf.constant(dense)
    params = tf.Variable(table)
    ids = tf.SparseTensor(tf.constant(indices), tf.constant([1, 5, 1, 0], tf.int64),
                          tf.constant(shape))
    weights = tf.SparseTensor(tf.constant(indices), tf.constant(values), tf.constant(shape))
    other = tf.SparseTensor(tf.constant([[0, 1], [1, 1]], tf.int64),
                            tf.constant([-1.5, 4.0]), tf.constant(shape))
    unsorted = tf.SparseTensor(tf.constant(indices[::-1].copy()), tf.constant(values[::-1].copy()),
                               tf.constant(shape))
    concat = tf.sparse_concat(1, [sp, other])
    reshaped = tf.sparse_reshape(sp, [2, -1])
    reordered = tf.sparse_reorder(unsorted)
    retained = tf.sparse_retain(sp, tf.constant([True, False, True, True]))
    added = tf.sparse_add(sp, other)
    lookups = [tf.nn.embedding_lookup_sparse(params, ids, None, combiner=c)
               for c in ("sum", "mean", "sqrtn")]
    lookups += [tf.nn.embedding_lookup_sparse(params, ids, weights, combiner=c)
                for c in ("sum", "mean", "sqrtn")]
    products = [tf.sparse_tensor_dense_matmul(sp, b),
                tf.sparse_tensor_dense_matmul(sp, tf.transpose(b), adjoint_b=True),
                tf.sparse_tensor_dense_matmul(sp, tf.constant(dense[:3]), adjoint_a=True)]
    scalar = (tf.reduce_sum(products[0] * 2.0) + tf.sparse_reduce_sum(sp) +
              tf.reduce_sum(tf.sparse_reduce_sum(sp, axis=0) * tf.constant([1.0, 2, 3, 4])) +
              sum(tf.reduce_sum(tf.where(tf.is_nan(x), tf.zeros_like(x), x)) for x in lookups))
    grads = tf.gradients(scalar, [params, b])
    fetches = [tf.sparse_tensor_to_dense(sp), tf.sparse.to_indicator(ids, 6),
               tf.sparse_to_dense(tf.constant([1, 3]), [5], tf.constant([7.0, 8.0]), 0.5),
               tf.sparse_reduce_sum(sp, axis=1), tf.sparse_reduce_sum(sp, axis=0, keepdims=True),
               concat.indices, concat.values, concat.dense_shape,
               reshaped.indices, reshaped.dense_shape, reordered.indices, reordered.values,
               retained.indices, retained.values, added.indices, added.values, added.dense_shape,
               tf.sparse_add(sp, tf.constant(np.ones((3, 4), np.float32)))]
    return fetches + lookups + products + [tf.convert_to_tensor(g) for g in grads]


async def test_sparse_ops_match_tf1(tmp_path):
    args = (INDICES, VALUES, SHAPE, TABLE, DENSE)
    with af.Graph().as_default():
        fetches = _sparse_graph(af, *args)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            ours = await sess.run(fetches)
    theirs = tf1_run(inspect.getsource(_sparse_graph) + """
fetches = _sparse_graph(tf, inputs["i"], inputs["v"], inputs["s"], inputs["t"], inputs["d"])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["values"] = sess.run(fetches)
""", tmp_path, i=INDICES, v=VALUES, s=SHAPE, t=TABLE, d=DENSE)
    assert len(ours) == len(theirs["values"])
    for index, (mine, reference) in enumerate(zip(ours, theirs["values"])):
        assert np.shape(mine) == np.shape(reference), index
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6, err_msg=str(index))


async def test_sparse_placeholder_feeds_and_fetches_sparse_values():
    with af.Graph().as_default():
        sp = af.sparse_placeholder(af.float32, [3, None], name="sp")
        dense = af.sparse_tensor_to_dense(sp)
        value = af.SparseTensorValue(INDICES, VALUES, [3, 5])
        async with af.Session() as sess:
            got = await sess.run(dense, {sp: value})
            fetched = await sess.run(sp, {sp: tuple(value)})
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"sp/values: values must be a vector of the 4 entries"):
                await sess.run(dense, {sp: (INDICES, VALUES[:3], [3, 5])})
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"dense_shape must have rank 2 entries"):
                await sess.run(dense, {sp: (INDICES, VALUES, [3, 5, 1])})
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"indices\[1\] = \[0, 3\] is out of bounds"):
                await sess.run(dense, {sp: (INDICES, VALUES, [3, 3])})
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"indices\[1\] = \[0,1\] is out of order"):
                await sess.run(dense, {sp: (INDICES[[1, 0, 2, 3]], VALUES, [3, 5])})
            with pytest.raises(TypeError, match="SparseTensorValue or an"):
                await sess.run(dense, {sp: 3.0})
    assert got.shape == (3, 5) and got[0, 3] == -2.0
    assert isinstance(fetched, af.SparseTensorValue)
    np.testing.assert_array_equal(fetched.indices, INDICES)
    np.testing.assert_array_equal(fetched.values, VALUES)


async def test_a_fetched_indexed_slices_is_a_value_of_three_arrays():
    with af.Graph().as_default():
        table = af.Variable(TABLE)
        grad, = af.gradients(af.reduce_sum(af.gather(table, [4, 1])), [table])
        async with af.Session() as sess:
            await sess.run(table.initializer)
            value = await sess.run(grad)
    assert value.indices.tolist() == [4, 1] and value.values.shape == (2, 3)
    assert value.dense_shape.tolist() == [6, 3]


async def test_sparse_to_dense_is_differentiable_in_its_values():
    from gradcheck import check_gradients
    indices = np.array([[0, 1], [1, 0], [2, 3]], np.int64)
    await check_gradients(
        lambda v: af.sparse_to_dense(indices, [3, 4], v, default_value=0.5) ** 2,
        [np.array([0.5, -1.5, 2.0])])
    await check_gradients(
        lambda v: af.sparse_to_dense(np.array([1, 4]), [6], v) * np.arange(6.0),
        [np.array([1.0, 2.0])])


async def test_sparse_reorder_sends_each_gradient_back_to_its_entry():
    from gradcheck import check_gradients
    unsorted = np.array([[2, 0], [0, 3], [1, 1], [0, 1]], np.int64)

    def build(v):
        ordered = af.sparse_reorder(af.SparseTensor(unsorted, v, [3, 4]))
        return ordered.values * np.array([1.0, 2.0, 3.0, 4.0])
    grads = await check_gradients(build, [np.array([0.5, -1.0, 2.0, 3.0])])
    np.testing.assert_allclose(grads[0] != 0, True)


async def test_sparse_add_sends_the_sum_gradient_to_both_operands():
    from gradcheck import check_gradients
    a_indices = np.array([[0, 1], [1, 2], [2, 0]], np.int64)
    b_indices = np.array([[0, 1], [2, 3]], np.int64)

    def build(a, b):
        total = af.sparse_add(af.SparseTensor(a_indices, a, [3, 4]),
                              af.SparseTensor(b_indices, b, [3, 4]))
        return af.sparse_tensor_to_dense(total) * np.arange(12.0).reshape(3, 4)
    await check_gradients(build, [np.array([0.5, -1.0, 2.0]), np.array([1.5, 3.0])])


def _unsorted_lookups(tf, table, indices):
    """embedding_lookup_sparse with every combiner, without and with weights, over ``indices``
    (ids 3, 5, 1, 0); then a sorted segment sum and its gradient. An entry that fails is the
    first line of the error saying why ('segment ids ...')."""
    params = tf.constant(table)
    out = []
    for combiner in ("sum", "mean", "sqrtn"):
        for weighted in (False, True):
            ids = tf.SparseTensor(tf.constant(indices), tf.constant([3, 5, 1, 0], tf.int64),
                                  [3, 4])
            weights = tf.SparseTensor(tf.constant(indices), tf.constant([1.0, 2.0, 0.5, 4.0]),
                                      [3, 4]) if weighted else None
            out.append(tf.nn.embedding_lookup_sparse(params, ids, weights, combiner=combiner))
    data = tf.constant(table[:4])
    summed = tf.segment_sum(data, tf.constant([0, 0, 2, 2]))
    out += [summed, tf.gradients(tf.reduce_sum(summed * summed), data)[0]]
    return out


def _run_each(sess, fetches):
    results = []
    for fetch in fetches:
        try:
            results.append(sess.run(fetch))
        except Exception as exc:  # the error kind and TF1's reason, as text
            reason = [line for line in str(getattr(exc, "message", exc)).splitlines()
                      if "segment ids" in line][0]
            reason = reason[reason.index("segment ids"):][:30]
            results.append(np.array(f"{type(exc).__name__}: {reason}"))
    return results


@pytest.mark.parametrize("indices", [[[0, 3], [0, 1], [2, 0], [2, 2]],
                                     [[2, 0], [0, 1], [0, 3], [2, 2]],
                                     [[0, 1], [2, 0], [0, 3], [2, 2]]],
                         ids=["columns_unsorted", "rows_unsorted", "rows_interleaved"])
async def test_lookup_sparse_rows_out_of_order_fail_as_in_tf1(tmp_path, indices):
    indices = np.array(indices, np.int64)
    with af.Graph().as_default():
        fetches = _unsorted_lookups(af, TABLE, indices)
        async with af.Session() as sess:
            ours = []
            for fetch in fetches:
                try:
                    ours.append(await sess.run(fetch))
                except af.errors.InvalidArgumentError as exc:
                    assert "SegmentSum" in str(exc), exc  # names the op
                    reason = exc.message[exc.message.index("segment ids"):][:30]
                    ours.append(np.array(f"InvalidArgumentError: {reason}"))
    theirs = tf1_run(inspect.getsource(_unsorted_lookups) + inspect.getsource(_run_each) + """
with tf.Session() as sess:
    outputs["values"] = _run_each(sess, _unsorted_lookups(tf, inputs["t"], inputs["i"]))
""", tmp_path, t=TABLE, i=indices)
    assert len(ours) == len(theirs["values"]) == 8
    for index, (mine, reference) in enumerate(zip(ours, theirs["values"])):
        if reference.dtype.kind in "US":
            assert str(mine) == str(reference) == \
                "InvalidArgumentError: segment ids are not increasing", index
        else:
            np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6, err_msg=str(index))


def _values_gradients(tf, indices, values, shape, table, dense):
    """The gradient of each sparse op's result with respect to the sparse values (and the
    lookup weights), each through a weighted sum so that every entry counts differently."""
    v = tf.constant(values)
    w = tf.constant(values * 0.5 + 1.0)
    sp = tf.SparseTensor(tf.constant(indices), v, tf.constant(shape))
    other_values = tf.constant([-1.5, 4.0])
    other = tf.SparseTensor(tf.constant([[0, 1], [1, 1]], tf.int64), other_values,
                            tf.constant(shape))
    unsorted = tf.SparseTensor(tf.constant(indices[::-1].copy()), v, tf.constant(shape))
    ids = tf.SparseTensor(tf.constant(indices), tf.constant([1, 5, 1, 0], tf.int64),
                          tf.constant(shape))
    weights = tf.SparseTensor(tf.constant(indices), w, tf.constant(shape))
    scale = tf.constant(np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 4))

    def weighted(x):
        x = tf.reshape(x, [-1])
        return tf.reduce_sum(x * tf.cast(tf.range(tf.size(x)), tf.float32) / 7.0
                             + tf.square(x))

    added = tf.sparse_add(sp, other)
    results = [
        tf.reduce_sum(tf.sparse_tensor_to_dense(sp) * scale),
        tf.reduce_sum(tf.sparse_to_dense(tf.constant(indices), tf.constant(shape), v) * scale),
        weighted(tf.sparse_reduce_sum(sp, axis=1)),
        weighted(tf.sparse_tensor_dense_matmul(sp, tf.constant(dense))),
        weighted(tf.sparse_concat(1, [sp, other]).values),
        weighted(tf.sparse_reorder(unsorted).values),
        weighted(tf.sparse_retain(sp, tf.constant([True, False, True, True])).values),
        weighted(tf.sparse_reshape(sp, [2, -1]).values),
        weighted(added.values),
        weighted(tf.sparse_add(sp, tf.constant(dense.reshape(2, 4)[:, :4].repeat(2, 0)[:3]))),
    ]
    grads = [tf.gradients(r, v)[0] for r in results]
    grads.append(tf.gradients(weighted(added.values), other_values)[0])
    for combiner in ("sum", "mean", "sqrtn"):
        lookup = tf.nn.embedding_lookup_sparse(tf.constant(table), ids, weights,
                                               combiner=combiner)
        grads.append(tf.gradients(weighted(lookup), w)[0])
    # No gradient (TF1 has none for that op): an empty vector, told apart from any gradient.
    return [tf.zeros([0]) if g is None else tf.convert_to_tensor(g) for g in grads]


async def test_gradients_in_the_sparse_values_match_tf1(tmp_path):
    args = (INDICES, VALUES, SHAPE, TABLE, DENSE)
    with af.Graph().as_default():
        fetches = _values_gradients(af, *args)
        async with af.Session() as sess:
            ours = await sess.run(fetches)
    theirs = tf1_run(inspect.getsource(_values_gradients) + """
fetches = _values_gradients(tf, inputs["i"], inputs["v"], inputs["s"], inputs["t"], inputs["d"])
with tf.Session() as sess:
    outputs["values"] = sess.run(fetches)
""", tmp_path, i=INDICES, v=VALUES, s=SHAPE, t=TABLE, d=DENSE)
    assert len(ours) == len(theirs["values"]) == 14
    without = []
    for index, (mine, reference) in enumerate(zip(ours, theirs["values"])):
        if reference.size == 0 and mine.size:
            without.append(index)  # TF1 has no gradient there; asyncflow has one
            continue
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6, err_msg=str(index))
    # TF1 registers no gradient for SparseConcat; asyncflow's is each entry's own gradient
    # (position p of the row-major result gets p / 7 + 2 x): [3, 1/7 - 4, 4/7 + 6, 5/7 + 1].
    assert without == [4], without
    np.testing.assert_allclose(ours[4], [3.0, 1 / 7 - 4.0, 4 / 7 + 6.0, 5 / 7 + 1.0], rtol=1e-6)


STATIC_SHAPES = """
def known(shape):  # a TensorShape as numbers: -1 an unknown dim, [-2] an unknown rank
    return [-2] if shape.ndims is None else [-1 if d is None else int(d) for d in shape.as_list()]

i, v = tf.constant([[0, 1], [2, 3]], tf.int64), tf.constant([1.0, 2.0])
p, loose = tf.placeholder(tf.int64, [2]), tf.placeholder(tf.int64, [None])
d2, d3 = tf.placeholder(tf.float32, [5, None]), tf.placeholder(tf.float32, [5, None, 7])
shapes = [[3, 4], tf.constant([-1, 4], tf.int64), p, loose, tf.placeholder(tf.int64),
          tf.stack([tf.constant(3, tf.int64), p[0]]),
          tf.concat([tf.constant([3], tf.int64), p[:1]], 0),
          tf.shape(d3, out_type=tf.int64)[1:], tf.shape(d2, out_type=tf.int64),
          tf.cast(tf.shape(d2), tf.int64), tf.maximum(p, 1)]
sparse = [tf.SparseTensor(i, v, s) for s in shapes]
outputs["sparse"] = [np.array(known(sp.shape)) for sp in sparse]
outputs["dense"] = [np.array(known(tf.sparse_tensor_to_dense(sp, validate_indices=False).shape))
                    for sp in sparse]
refused = []
for s in [tf.shape(d3, out_type=tf.int64), tf.constant([3, 4, 5], tf.int64)]:
    try:
        tf.SparseTensor(i, v, s)
    except ValueError:
        refused.append(1)
outputs["refused"] = np.array(refused)
"""


def test_static_shape_of_a_computed_dense_shape_as_tf1(tmp_path):
    # A dense_shape that is no constant gave only its length ((?, ?) for all of these); TF1
    # reads what it can (constant_value_as_shape): the constant scalars of a stack, a concat's
    # pieces, a slice or cast of tf.shape(x) (x's static dims); SparseToDense's shape too.
    # Indices of 2 columns with a 3-long dense_shape were taken; TF1 refuses them.
    from tests.tf1_reference import compat_run
    ours = compat_run(STATIC_SHAPES, {})
    wanted = [[3, 4], [-1, 4], [-1, -1], [-2], [-2], [3, -1], [3, -1], [-1, 7], [5, -1],
              [5, -1], [-1, -1]]
    assert [s.tolist() for s in ours["sparse"]] == wanted
    assert [s.tolist() for s in ours["dense"]] == wanted
    assert ours["refused"].tolist() == [1, 1]
    theirs = tf1_run(STATIC_SHAPES, tmp_path)
    for key in ("sparse", "dense", "refused"):
        assert [np.asarray(s).tolist() for s in ours[key]] == \
            [np.asarray(s).tolist() for s in theirs[key]], key
