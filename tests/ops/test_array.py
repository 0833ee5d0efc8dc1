"""Array family vs numpy: layout, tiling, indexing, embeddings, clipping, check_numerics."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af

SETTINGS = settings(max_examples=25, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4)


def arrays(shape, dtype=np.float32):
    elements = st.floats(-10, 10, width=32) if np.dtype(dtype).kind == "f" else \
        st.integers(-10, 10)
    return hnp.arrays(dtype, shape, elements=elements)


async def run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


async def check(tensor, expected, feed_dict=None):
    """Run ``tensor``; compare value, dtype, and the static shape where it is known."""
    expected = np.asarray(expected)
    assert tensor.shape.is_compatible_with(expected.shape), (tensor.shape, expected.shape)
    value = await run(tensor, feed_dict)
    np.testing.assert_array_equal(value, expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)


# -- layout ------------------------------------------------------------------------------------
@SETTINGS
@given(st.data())
async def test_transpose_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes)))
    perm = data.draw(st.permutations(range(x.ndim)))
    with af.Graph().as_default():
        t = af.constant(x)
        out = af.transpose(t, perm)
        assert out.shape.as_list() == list(np.transpose(x, perm).shape)
        await check(out, np.transpose(x, perm))
        await check(af.transpose(t), x.T)


async def test_transpose_unknown_rank_reverses_at_run_time():
    with af.Graph().as_default():
        p = af.placeholder(af.float32)
        out = af.transpose(p)
        x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
        np.testing.assert_array_equal(await run(out, {p: x}), x.T)


def test_transpose_bad_perm_names_op():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Transpose.*permutation"):
            af.transpose(af.zeros([2, 3]), [0, 0])
        with pytest.raises(ValueError, match="Transpose.*rank 2"):
            af.transpose(af.zeros([2, 3]), [0, 1, 2])


@SETTINGS
@given(st.data())
async def test_concat_matches_numpy(data):
    base = data.draw(nonscalar_shapes)
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    pieces = []
    for _ in range(data.draw(st.integers(1, 3))):
        shape = list(base)
        shape[axis] = data.draw(st.integers(0, 3))
        pieces.append(data.draw(arrays(tuple(shape))))
    with af.Graph().as_default():
        await check(af.concat([af.constant(p) for p in pieces], axis), np.concatenate(pieces, axis))


async def test_concat_partial_shapes_and_runtime_mismatch():
    with af.Graph().as_default():
        a = af.placeholder(af.float32, [None, 3])
        b = af.placeholder(af.float32, [2, None])
        out = af.concat([a, b], 0)
        assert out.shape.as_list() == [None, 3]
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await run(out, {a: np.zeros((1, 3)), b: np.zeros((2, 4))})
        assert info.value.op.name == out.op.name


def test_concat_build_errors_name_op():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="ConcatV2.*axis 2"):
            af.concat([af.zeros([2, 3]), af.zeros([2, 3])], 2)
        with pytest.raises(ValueError, match="ConcatV2"):
            af.concat([af.zeros([2, 3]), af.zeros([3, 3])], 1)
        with pytest.raises(TypeError, match="ConcatV2"):
            af.concat([af.zeros([2]), af.zeros([2], dtype=af.int32)], 0)
        with pytest.raises(ValueError, match="scalars"):
            af.concat([af.constant(1.0), af.constant(2.0)], 0)


@SETTINGS
@given(st.data())
async def test_stack_unstack_match_numpy(data):
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    values = [data.draw(arrays(shape)) for _ in range(data.draw(st.integers(1, 3)))]
    with af.Graph().as_default():
        stacked = af.stack([af.constant(v) for v in values], axis=axis)
        expected = np.stack(values, axis)
        await check(stacked, expected)
        pieces = af.unstack(af.constant(expected), axis=axis)
        assert len(pieces) == len(values)
        for piece, value in zip(pieces, values):
            await check(piece, value)


async def test_stack_mixes_python_values_and_tensors():
    with af.Graph().as_default():
        n = af.placeholder(af.int32, [])
        await check(af.stack([n, 2, 3]), np.array([5, 2, 3], np.int32), {n: 5})


def test_unstack_needs_num_for_unknown_dim():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Unpack.*num"):
            af.unstack(af.placeholder(af.float32, [None, 2]))
        assert len(af.unstack(af.placeholder(af.float32, [None, 2]), num=3)) == 3


@SETTINGS
@given(st.data())
async def test_split_matches_numpy(data):
    shape = list(data.draw(nonscalar_shapes))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    count = data.draw(st.integers(1, 3))
    shape[axis] = count * data.draw(st.integers(0, 2))
    x = data.draw(arrays(tuple(shape)))
    sizes = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=3))
    sized_shape = list(shape)
    sized_shape[axis] = sum(sizes)
    y = data.draw(arrays(tuple(sized_shape)))
    rest = data.draw(st.integers(0, len(sizes) - 1))
    with_rest = [-1 if i == rest else s for i, s in enumerate(sizes)]
    with af.Graph().as_default():
        for got, want in zip(af.split(af.constant(x), count, axis), np.split(x, count, axis)):
            await check(got, want)
        expected = np.split(y, np.cumsum(sizes)[:-1], axis)
        for got, want in zip(af.split(af.constant(y), with_rest, axis), expected):
            await check(got, want)


def test_split_build_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Split.*divisible"):
            af.split(af.zeros([5]), 2)
        with pytest.raises(ValueError, match="SplitV.*add up"):
            af.split(af.zeros([5]), [1, 2])
        with pytest.raises(ValueError, match="SplitV.*-1"):
            af.split(af.zeros([5]), [-1, -1])


async def test_split_runtime_sizes_checked():
    with af.Graph().as_default():
        p = af.placeholder(af.float32, [None])
        parts = af.split(p, [2, -1])
        assert parts[0].shape.as_list() == [2]
        with pytest.raises(af.errors.InvalidArgumentError, match="size_splits"):
            await run(parts, {p: np.zeros(1)})


@SETTINGS
@given(st.data())
async def test_expand_dims_and_squeeze_match_numpy(data):
    x = data.draw(arrays(data.draw(shapes)))
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    with af.Graph().as_default():
        t = af.constant(x)
        expanded = af.expand_dims(t, axis)
        await check(expanded, np.expand_dims(x, axis))
        await check(af.squeeze(expanded, [axis]), x)
        await check(af.squeeze(expanded), np.squeeze(np.expand_dims(x, axis)))


async def test_squeeze_errors_and_unknown_dims():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Squeeze.*dim\\[1\\]"):
            af.squeeze(af.zeros([1, 2]), [1])
        with pytest.raises(ValueError, match="Squeeze.*out of range"):
            af.squeeze(af.zeros([1, 2]), [2])
        p = af.placeholder(af.float32, [None, 1])
        assert af.squeeze(p).shape.ndims is None
        out = af.squeeze(p, [0])
        assert out.shape.as_list() == [1]
        with pytest.raises(af.errors.InvalidArgumentError, match="squeeze dim\\[0\\]"):
            await run(out, {p: np.zeros((3, 1))})


@SETTINGS
@given(st.data())
async def test_tile_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes)))
    multiples = data.draw(st.lists(st.integers(0, 3), min_size=x.ndim, max_size=x.ndim))
    with af.Graph().as_default():
        await check(af.tile(af.constant(x), multiples),
                    np.tile(x, multiples) if x.ndim else x)


def test_tile_bad_multiples():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Tile.*one entry"):
            af.tile(af.zeros([2]), [1, 2])


@SETTINGS
@given(st.data())
async def test_pad_matches_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    x = data.draw(arrays(shape))
    mode = data.draw(st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC"]))
    limit = {"CONSTANT": 3, "REFLECT": None, "SYMMETRIC": None}[mode]
    paddings = []
    for d in shape:
        top = limit if limit is not None else (d - 1 if mode == "REFLECT" else d)
        paddings.append([data.draw(st.integers(0, top)), data.draw(st.integers(0, top))])
    with af.Graph().as_default():
        if mode == "CONSTANT":
            out = af.pad(af.constant(x), paddings, constant_values=2.5)
            expected = np.pad(x, paddings, constant_values=2.5) if x.ndim else x
        else:
            out = af.pad(af.constant(x), paddings, mode=mode.lower())
            expected = np.pad(x, paddings, mode=mode.lower()) if x.ndim else x
        await check(out, expected)


def test_pad_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="MirrorPad.*at most 1"):
            af.pad(af.zeros([2]), [[2, 0]], mode="REFLECT")
        with pytest.raises(ValueError, match="PadV2.*shape \\[rank, 2\\]"):
            af.pad(af.zeros([2, 2]), [[1, 1]])
        with pytest.raises(ValueError, match="mode"):
            af.pad(af.zeros([2]), [[1, 1]], mode="WRAP")


@SETTINGS
@given(st.data())
async def test_one_hot_matches_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    depth = data.draw(st.integers(0, 4))
    indices = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(-1, 5)))
    axis = data.draw(st.sampled_from([-1] + list(range(len(shape) + 1))))
    expected = np.where(indices[..., None] == np.arange(depth), 5.0, -1.0).astype(np.float32)
    if axis != -1:
        expected = np.moveaxis(expected, -1, axis)
    with af.Graph().as_default():
        out = af.one_hot(af.constant(indices), depth, on_value=5.0, off_value=-1.0, axis=axis)
        await check(out, expected)
        plain = af.one_hot(af.constant(indices), depth, dtype=af.int64)
        await check(plain, (indices[..., None] == np.arange(depth)).astype(np.int64))


# -- slicing and indexing ----------------------------------------------------------------------
@SETTINGS
@given(st.data())
async def test_slice_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes)))
    begin = [data.draw(st.integers(0, d)) for d in x.shape]
    size = [data.draw(st.sampled_from([-1, data.draw(st.integers(0, d - b))]))
            for b, d in zip(begin, x.shape)]
    expected = x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]
    with af.Graph().as_default():
        await check(af.slice(af.constant(x), begin, size), expected)


async def test_slice_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Slice.*exceeds"):
            af.slice(af.zeros([3]), [2], [2])
        b = af.placeholder(af.int32, [1])
        out = af.slice(af.zeros([3]), b, [2])
        assert out.shape.as_list() == [2]
        with pytest.raises(af.errors.InvalidArgumentError, match="begin"):
            await run(out, {b: [2]})


@SETTINGS
@given(st.data())
async def test_getitem_matches_numpy_basic_indexing(data):
    x = data.draw(arrays(data.draw(shapes)))
    index = data.draw(hnp.basic_indices(x.shape, allow_newaxis=True, allow_ellipsis=True))
    with af.Graph().as_default():
        await check(af.constant(x)[index], x[index])


@SETTINGS
@given(st.data())
async def test_getitem_with_scalar_tensor_indices(data):
    x = data.draw(arrays(data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1,
                                                    max_side=4))))
    i = data.draw(st.integers(-x.shape[0], x.shape[0] - 1))
    start = data.draw(st.integers(-4, 4))
    dtype = data.draw(st.sampled_from([af.int32, af.int64]))
    with af.Graph().as_default():
        ti = af.placeholder(dtype, [])
        ts = af.placeholder(af.int32, [])
        t = af.constant(x)
        out = t[ti, ...]
        assert out.shape.as_list() == list(x.shape[1:])
        await check(out, x[i, ...], {ti: i})
        ranged = t[ts:, None]
        assert ranged.shape.as_list() == [None, 1] + list(x.shape[1:])
        await check(ranged, x[start:, None], {ts: start})


async def test_iterating_a_tensor_indexes_its_rows():
    x = np.arange(6, dtype=np.int32).reshape(3, 2)
    with af.Graph().as_default():
        rows = list(af.constant(x))
        assert len(rows) == 3 and rows[0].shape.as_list() == [2]
        for got, want in zip(await run(rows), x):
            np.testing.assert_array_equal(got, want)


async def test_getitem_errors():
    with af.Graph().as_default():
        t = af.zeros([2, 3])
        with pytest.raises(ValueError, match="StridedSlice.*out of bounds"):
            t[5]
        with pytest.raises(ValueError, match="StridedSlice.*too many"):
            t[0, 0, 0]
        with pytest.raises(ValueError, match="single ellipsis"):
            t[..., ...]
        with pytest.raises(ValueError, match="non-zero"):
            t[::0]
        with pytest.raises(TypeError, match="gather"):
            t[[0, 1]]
        with pytest.raises(TypeError, match="bool"):
            t[True]
        i = af.placeholder(af.int32, [])
        out = t[i]
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await run(out, {i: 7})
        assert info.value.op.name == out.op.name


def _gather_reference(params, indices, axis, batch_dims):
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    return np.stack([_gather_reference(p, i, axis - 1, batch_dims - 1)
                     for p, i in zip(params, indices)])


@SETTINGS
@given(st.data())
async def test_gather_matches_numpy(data):
    batch_dims = data.draw(st.integers(0, 2))
    batch = data.draw(hnp.array_shapes(min_dims=batch_dims, max_dims=batch_dims, min_side=1,
                                       max_side=3))
    rest = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3))
    params = data.draw(arrays(batch + rest))
    axis = data.draw(st.integers(batch_dims, params.ndim - 1))
    index_shape = batch + data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0,
                                                     max_side=3))
    limit = params.shape[axis]
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    indices = data.draw(hnp.arrays(dtype, index_shape, elements=st.integers(0, max(limit - 1, 0))))
    if limit == 0 and indices.size:
        return
    negative_axis = data.draw(st.booleans())
    with af.Graph().as_default():
        out = af.gather(af.constant(params), af.constant(indices),
                        axis=axis - params.ndim if negative_axis else axis, batch_dims=batch_dims)
        await check(out, _gather_reference(params, indices, axis, batch_dims))


async def test_gather_out_of_range_is_invalid_argument_naming_op():
    with af.Graph().as_default():
        ids = af.placeholder(af.int32, [None])
        out = af.gather(af.constant(np.arange(6.0).reshape(3, 2)), ids, name="pick")
        assert out.shape.as_list() == [None, 2]
        for bad in ([0, 3], [-1]):
            with pytest.raises(af.errors.InvalidArgumentError, match="not in \\[0, 3\\)") as info:
                await run(out, {ids: bad})
            assert info.value.op.name == "pick"
            assert "pick" in str(info.value)


def test_gather_build_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="GatherV2.*axis 2"):
            af.gather(af.zeros([2, 2]), [0], axis=2)
        with pytest.raises(ValueError, match="batch_dims"):
            af.gather(af.zeros([2, 2]), af.zeros([2, 1], dtype=af.int32), axis=0, batch_dims=1)
        with pytest.raises(TypeError, match="GatherV2.*indices"):
            af.gather(af.zeros([2, 2]), [0.5])


async def test_unsorted_segment_sum_partition_stitch():
    data = np.arange(12.0).reshape(4, 3)
    ids = np.array([2, -1, 2, 0], np.int32)
    expected = np.zeros((3, 3))
    np.add.at(expected, ids[ids >= 0], data[ids >= 0])
    with af.Graph().as_default():
        await check(af.unsorted_segment_sum(af.constant(data), ids, 3), expected)
        parts = af.dynamic_partition(af.constant(data), [1, 0, 1, 1], 2)
        await check(parts[0], data[[1]])
        await check(parts[1], data[[0, 2, 3]])
        stitched = af.dynamic_stitch([af.constant([1, 3]), af.constant([0, 2])],
                                     [af.constant(data[:2]), af.constant(data[2:])])
        await check(stitched, data[[2, 0, 3, 1]])
        with pytest.raises(af.errors.InvalidArgumentError, match="segment_ids"):
            await run(af.unsorted_segment_sum(af.constant(data), ids, 2))


@SETTINGS
@given(st.data())
async def test_embedding_lookup_matches_table(data):
    rows = data.draw(st.integers(1, 9))
    table = data.draw(arrays((rows, 2)))
    shards_count = data.draw(st.integers(1, 3))
    strategy = data.draw(st.sampled_from(["mod", "div"]))
    ids = data.draw(hnp.arrays(np.int64, data.draw(hnp.array_shapes(min_dims=0, max_dims=2,
                                                                    max_side=3)),
                               elements=st.integers(0, rows - 1)))
    if strategy == "mod":
        shards = [table[p::shards_count] for p in range(shards_count)]
    else:
        bounds = np.cumsum([0] + [rows // shards_count + (p < rows % shards_count)
                                  for p in range(shards_count)])
        shards = [table[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    if any(len(s) == 0 for s in shards):
        return
    with af.Graph().as_default():
        params = [af.Variable(s) for s in shards] if shards_count > 1 else af.constant(table)
        out = af.embedding_lookup(params, af.constant(ids), partition_strategy=strategy)
        assert out.shape.as_list() == list(ids.shape) + [2]
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            np.testing.assert_array_equal(await sess.run(out), table[ids])


async def test_embedding_lookup_max_norm_and_nn_alias():
    table = np.array([[3.0, 4.0], [0.3, 0.4]], np.float32)
    with af.Graph().as_default():
        out = af.embedding_lookup(af.constant(table), [0, 1], max_norm=1.0)
        np.testing.assert_allclose(await run(out), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    assert af.nn.embedding_lookup is af.embedding_lookup


# -- clipping and numerics ---------------------------------------------------------------------
@SETTINGS
@given(st.data())
async def test_clip_by_value_and_norm_match_numpy(data):
    x = data.draw(arrays(data.draw(shapes), np.float64))
    low, high = sorted(data.draw(st.lists(st.floats(-5, 5), min_size=2, max_size=2)))
    clip = data.draw(st.floats(0.1, 20))
    axes = data.draw(st.none() | st.lists(st.integers(0, max(x.ndim - 1, 0)), unique=True,
                                          max_size=x.ndim)) if x.ndim else None
    norm = np.sqrt(np.sum(x * x, axis=None if axes is None else tuple(axes), keepdims=True))
    with af.Graph().as_default():
        t = af.constant(x)
        await check(af.clip_by_value(t, low, high), np.clip(x, low, high))
        out = af.clip_by_norm(t, clip, axes=axes)
        assert out.shape.as_list() == list(x.shape)
        np.testing.assert_allclose(await run(out), x * clip / np.maximum(norm, clip),
                                   rtol=1e-12, atol=1e-12)


async def test_clip_by_value_rejects_broadcasting_input():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="clip_by_value"):
            af.clip_by_value(af.zeros([2]), af.zeros([3, 2]), 1.0)


@SETTINGS
@given(st.lists(st.one_of(st.none(), arrays(hnp.array_shapes(max_dims=2, max_side=3),
                                             np.float64)), min_size=1, max_size=3),
       st.floats(0.1, 10))
async def test_clip_by_global_norm_matches_numpy(values, clip):
    # Distinct inputs: fetching two tensors that CSE merges is a separate Session concern.
    values = [None if v is None else v + 0.25 * i for i, v in enumerate(values)]
    present = [v for v in values if v is not None]
    if not present:
        return
    norm = np.sqrt(sum(np.sum(v * v) for v in present))
    with af.Graph().as_default():
        tensors = [None if v is None else af.constant(v) for v in values]
        clipped, global_norm = af.clip_by_global_norm(tensors, clip)
        assert [c is None for c in clipped] == [v is None for v in values]
        got_norm, got = await run([global_norm, [c for c in clipped if c is not None]])
        np.testing.assert_allclose(got_norm, norm, rtol=1e-12)
        for g, v in zip(got, present):
            np.testing.assert_allclose(g, v * clip / max(norm, clip), rtol=1e-12, atol=1e-300)
        with pytest.raises(TypeError, match="list"):
            af.clip_by_global_norm(af.constant(present[0]), clip)


async def test_check_numerics_passes_and_fails_naming_op_and_message():
    with af.Graph().as_default():
        p = af.placeholder(af.float32, [2])
        out = af.check_numerics(p, "activations went bad", name="guard")
        np.testing.assert_array_equal(await run(out, {p: [1.0, 2.0]}), [1.0, 2.0])
        for value, kind in (([np.nan, 1.0], "NaN"), ([np.inf, 1.0], "Inf")):
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=f"activations went bad.*{kind}") as info:
                await run(out, {p: value})
            assert info.value.op.name == "guard"
        with pytest.raises(TypeError, match="CheckNumerics"):
            af.check_numerics(af.constant([1, 2]), "ints")
