"""Kernels that cut a tensor into rows of zero elements: scatter_nd, the tensor_scatter_nd
family, dynamic_partition and dynamic_stitch reshaped them with -1, which numpy cannot resolve
when a row holds a 0 dim (TF1 gives empty results); a non-empty scatter into an empty output
is refused by name, as TF1's kernel ("Indices and updates specified for empty output shape")."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors


async def test_partition_stitch_and_empty_scatter_of_zero_element_rows():
    with af.Graph().as_default():
        parts = af.dynamic_partition(np.zeros([3, 0], np.float32), [0, 1, 0], 2)
        stitched = af.dynamic_stitch([[0, 2], [1]], [np.zeros([2, 0], np.float32),
                                                     np.zeros([1, 0], np.float32)])
        scattered = af.scatter_nd(np.zeros([0, 1], np.int32), np.zeros([0, 0, 3], np.float32),
                                  [4, 0, 3])
        async with af.Session() as sess:
            got = await sess.run([parts[0], parts[1], stitched, scattered])
    assert [g.shape for g in got] == [(2, 0), (1, 0), (3, 0), (4, 0, 3)]


@pytest.mark.parametrize("form", ["scatter_nd", "tensor_scatter_nd_add"])
async def test_updates_into_an_empty_output_are_refused_by_name(form):
    with af.Graph().as_default():
        shape = af.placeholder(af.int32, [3])
        indices, updates = [[0], [2]], np.zeros([2, 0, 3], np.float32)
        if form == "scatter_nd":
            out = af.scatter_nd(indices, updates, shape)
        else:
            out = af.tensor_scatter_nd_add(af.zeros(shape), indices, updates)
        async with af.Session() as sess:
            with pytest.raises(errors.InvalidArgumentError, match="empty output shape"):
                await sess.run(out, {shape: [4, 0, 3]})
