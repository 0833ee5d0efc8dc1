"""``af.sparse``: TF1's ``tf.sparse`` namespace (the ops live in asyncflow/ops/sparse_ops.py)."""
from asyncflow.ops.sparse_ops import (  # noqa: F401
    SparseTensor, SparseTensorValue, sparse_placeholder as placeholder, sparse_add as add,
    sparse_concat as concat, sparse_reduce_sum as reduce_sum, sparse_reorder as reorder,
    sparse_reshape as reshape, sparse_retain as retain, sparse_tensor_dense_matmul as matmul,
    sparse_tensor_to_dense as to_dense, to_indicator,
)
from asyncflow.ops.segment import (  # noqa: F401
    sparse_segment_mean as segment_mean, sparse_segment_sqrt_n as segment_sqrt_n,
    sparse_segment_sum as segment_sum,
)
