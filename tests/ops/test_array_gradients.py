"""Gradients of the array family vs central finite differences (float64, hypothesis shapes).

Each op is checked with static shapes and, where its gradient has a computed-shape path, with
shapes hidden behind ``placeholder_with_default`` so that path runs too.
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af
from gradcheck import check_gradients

SETTINGS = settings(max_examples=10, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)


def arrays(shape, low=-2.0, high=2.0):
    return hnp.arrays(np.float64, shape, elements=st.floats(low, high, width=64))


def hide_shape(t):
    """The same value with every dim unknown at build time (exercises dynamic gradients)."""
    return af.placeholder_with_default(t, [None] * t.shape.ndims)


def hide_rank(t):
    """The same value with even its rank unknown at build time."""
    return af.placeholder_with_default(t, None)


def hide_int(values):
    """An int32 vector whose value shape inference cannot read."""
    values = np.asarray(values, np.int32)
    return af.placeholder_with_default(af.constant(values), [None] * values.ndim)


@SETTINGS
@given(st.data())
async def test_transpose_grad(data):
    x = data.draw(arrays(data.draw(shapes)))
    perm = data.draw(st.permutations(range(x.ndim)))
    await check_gradients(lambda t: af.transpose(t, perm), [x])
    await check_gradients(lambda t: af.transpose(t, hide_int(perm)), [x])


@SETTINGS
@given(st.data())
async def test_concat_grad(data):
    base = data.draw(nonscalar_shapes)
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    pieces = []
    for _ in range(data.draw(st.integers(2, 3))):
        shape = list(base)
        shape[axis] = data.draw(st.integers(1, 3))
        pieces.append(data.draw(arrays(tuple(shape))))
    await check_gradients(lambda *ts: af.concat(list(ts), axis), pieces)
    await check_gradients(lambda *ts: af.concat([hide_shape(t) for t in ts], axis), pieces)
    await check_gradients(lambda *ts: af.concat([hide_rank(t) for t in ts], axis), pieces)


@SETTINGS
@given(st.data())
async def test_stack_unstack_grad(data):
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))
    await check_gradients(lambda a, b: af.stack([a, b * b], axis=axis), [x, y])
    z = data.draw(arrays(data.draw(nonscalar_shapes)))
    unstack_axis = data.draw(st.integers(-z.ndim, z.ndim - 1))
    # Only the first piece is used: the others' gradients are zero-filled.
    await check_gradients(lambda t: af.unstack(t, axis=unstack_axis)[0] * 3.0, [z])


@SETTINGS
@given(st.data())
async def test_split_grad(data):
    shape = list(data.draw(nonscalar_shapes))
    axis = data.draw(st.integers(0, len(shape) - 1))
    shape[axis] = 2 * data.draw(st.integers(1, 2))
    x = data.draw(arrays(tuple(shape)))
    await check_gradients(lambda t: af.split(t, 2, axis)[1] * 2.0, [x])
    sizes = [1, -1] if shape[axis] > 1 else [-1]
    await check_gradients(lambda t: af.concat(af.split(t, sizes, axis)[::-1], axis), [x])


@SETTINGS
@given(st.data())
async def test_slice_grad(data):
    x = data.draw(arrays(data.draw(shapes)))
    begin = [data.draw(st.integers(0, d - 1)) for d in x.shape]
    size = [data.draw(st.sampled_from([-1, d - b])) for b, d in zip(begin, x.shape)]
    await check_gradients(lambda t: af.slice(t, begin, size), [x])
    await check_gradients(lambda t: af.slice(hide_shape(t), hide_int(begin), size), [x])


@SETTINGS
@given(st.data())
async def test_strided_slice_grad(data):
    x = data.draw(arrays(data.draw(shapes)))
    index = data.draw(hnp.basic_indices(x.shape, allow_newaxis=True, allow_ellipsis=True))
    await check_gradients(lambda t: t[index] * 1.0, [x])


async def test_strided_slice_grad_with_tensor_index():
    x = np.arange(12.0).reshape(4, 3)

    def build(t):
        i = af.placeholder_with_default(af.constant(-2), [])
        return t[i, ::-1]
    await check_gradients(build, [x])


@SETTINGS
@given(st.data())
async def test_gather_grad(data):
    batch_dims = data.draw(st.integers(0, 1))
    params = data.draw(arrays(data.draw(hnp.array_shapes(min_dims=batch_dims + 1, max_dims=3,
                                                         min_side=1, max_side=3))))
    axis = data.draw(st.integers(batch_dims, params.ndim - 1))
    index_shape = params.shape[:batch_dims] + data.draw(
        hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    indices = data.draw(hnp.arrays(np.int32, index_shape,
                                   elements=st.integers(0, params.shape[axis] - 1)))
    await check_gradients(lambda p: af.gather(p, indices, axis=axis, batch_dims=batch_dims),
                          [params])
    await check_gradients(
        lambda p: af.gather(hide_shape(p), hide_shape(af.constant(indices)), axis=axis,
                            batch_dims=batch_dims), [params])
    # params of unknown rank (TF1 computes every dim when the gradient runs), the axis
    # negative or not, resolved then
    loose_axis = axis - params.ndim if data.draw(st.booleans()) else axis
    await check_gradients(
        lambda p: af.gather(hide_rank(p), indices, axis=loose_axis, batch_dims=batch_dims),
        [params])


@SETTINGS
@given(st.data())
async def test_gather_nd_grad_with_params_of_unknown_rank(data):
    params = data.draw(arrays(data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1,
                                                         max_side=3))))
    depth = data.draw(st.integers(1, params.ndim))
    lead = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=3))
    indices = np.stack([data.draw(hnp.arrays(np.int32, lead, elements=st.integers(0, d - 1)))
                        for d in params.shape[:depth]], axis=-1)
    await check_gradients(lambda p: af.gather_nd(p, indices), [params])
    await check_gradients(lambda p: af.gather_nd(hide_rank(p), indices), [params])


@SETTINGS
@given(st.data())
async def test_expand_dims_squeeze_grad(data):
    x = data.draw(arrays(data.draw(shapes)))
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    await check_gradients(lambda t: af.expand_dims(t, axis) * 2.0, [x])
    await check_gradients(lambda t: af.squeeze(af.expand_dims(t, axis), [axis]) * 2.0, [x])
    await check_gradients(lambda t: af.squeeze(hide_shape(af.expand_dims(t, 0))), [x])


@SETTINGS
@given(st.data())
async def test_tile_grad(data):
    x = data.draw(arrays(data.draw(shapes)))
    multiples = data.draw(st.lists(st.integers(1, 3), min_size=x.ndim, max_size=x.ndim))
    await check_gradients(lambda t: af.tile(t, multiples), [x])
    if x.ndim:
        await check_gradients(lambda t: af.tile(hide_shape(t), hide_int(multiples)), [x])


@SETTINGS
@given(st.data())
async def test_pad_grad(data):
    x = data.draw(arrays(data.draw(nonscalar_shapes)))
    mode = data.draw(st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC"]))
    paddings = []
    for d in x.shape:
        top = {"CONSTANT": 2, "REFLECT": d - 1, "SYMMETRIC": d}[mode]
        paddings.append([data.draw(st.integers(0, top)), data.draw(st.integers(0, top))])
    await check_gradients(lambda t: af.pad(t, paddings, mode=mode), [x])
    if mode == "CONSTANT":
        await check_gradients(lambda t: af.pad(hide_shape(t), hide_int(paddings)), [x])


async def test_unsorted_segment_sum_and_stitch_partition_grads():
    data = np.arange(8.0).reshape(4, 2) / 3.0
    ids = np.array([2, -1, 2, 0], np.int32)
    await check_gradients(lambda d: af.unsorted_segment_sum(d, ids, 3) ** 2, [data])
    await check_gradients(
        lambda d: af.dynamic_partition(d, [1, 0, 1, 1], 2)[1] * 2.0, [data])
    await check_gradients(
        lambda a, b: af.dynamic_stitch([af.constant([1, 3]), af.constant([0, 2])], [a, b]) ** 2,
        [data[:2], data[2:]])


@SETTINGS
@given(st.data())
async def test_embedding_lookup_grad(data):
    count = data.draw(st.integers(1, 3))
    strategy = data.draw(st.sampled_from(["mod", "div"]))
    shards = [data.draw(arrays((data.draw(st.integers(2, 3)), 2))) for _ in range(count)]
    if strategy == "mod":
        rows = min(len(s) for s in shards) * count
    else:
        shards = [s[:2] for s in shards]
        rows = 2 * count
    ids = data.draw(hnp.arrays(np.int64, (data.draw(st.integers(1, 4)),),
                               elements=st.integers(0, rows - 1)))
    await check_gradients(
        lambda *ps: af.embedding_lookup(list(ps), ids, partition_strategy=strategy), shards)


async def test_check_numerics_grad_passes_through():
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    await check_gradients(lambda t: af.check_numerics(t * t, "fine"), [x])


@SETTINGS
@given(st.data())
async def test_clip_grads(data):
    x = data.draw(arrays(data.draw(shapes)))
    # Finite differences need points away from the kinks of clip_by_value.
    x = np.where(np.abs(np.abs(x) - 1.0) < 1e-3, x + 0.01, x)
    await check_gradients(lambda t: af.clip_by_value(t, -1.0, 1.0), [x])
    norm = float(np.sqrt(np.sum(x * x)))
    clip = data.draw(st.floats(0.1, 5.0))
    if abs(norm - clip) > 1e-3 and norm > 1e-3:
        await check_gradients(lambda t: af.clip_by_norm(t, clip), [x])
        y = data.draw(arrays(x.shape))
        total = float(np.sqrt(np.sum(x * x) + np.sum(y * y)))
        if abs(total - clip) > 1e-3:
            await check_gradients(
                lambda a, b: af.concat([af.reshape(c, [-1]) for c in
                                        af.clip_by_global_norm([a, b], clip)[0]], 0), [x, y])


async def test_gather_gradient_reaches_a_variable_sparsely_with_repeats_added():
    with af.Graph().as_default():
        v = af.Variable(np.arange(10.0).reshape(5, 2))
        ids = af.placeholder(af.int32, [None])
        sparse, = af.gradients(af.reduce_sum(af.gather(v, ids) * 2.0), [v])
        assert isinstance(sparse, af.IndexedSlices)  # TF1: rows and ids, not the table
        grad = af.convert_to_tensor(sparse)
        assert grad.shape.as_list() == [5, 2]
        async with af.Session() as sess:
            await sess.run(v.initializer)
            value = await sess.run(grad, {ids: [1, 1, 3]})
    expected = np.zeros((5, 2))
    expected[1], expected[3] = 4.0, 2.0
    np.testing.assert_array_equal(value, expected)


async def test_second_order_through_strided_slice_and_mirror_pad():
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])

    def sliced(t):
        return af.gradients(af.reduce_sum(t[:, ::-2] ** 3), [t])[0]

    def mirrored(t):
        return af.gradients(af.reduce_sum(af.pad(t, [[1, 1], [2, 0]], mode="REFLECT") ** 3),
                            [t])[0]
    await check_gradients(sliced, [x])
    await check_gradients(mirrored, [x])
