"""asyncflow: the 2015 TensorFlow paper's dataflow system as an async executor on trio.

``import asyncflow as af`` gives the TF1-style API described in README.md: build a graph with
ops, then ``async with af.Session() as sess: await sess.run(fetches, feed_dict)``.
"""
from asyncflow import dtypes, errors  # noqa: F401
from asyncflow import kernels as _kernels  # noqa: F401  (registers kernels)
from asyncflow.dtypes import (  # noqa: F401
    DType, as_dtype, bfloat16, bool, double, float16, float32, float64, half, int8, int16,
    int32, int64, string, uint8, uint16, uint32, uint64,
)
from asyncflow.device_names import DeviceSpec  # noqa: F401
from asyncflow.graph import (  # noqa: F401
    Graph, GraphKeys, Operation, Tensor, TensorShape, get_default_graph, reset_default_graph,
)
from asyncflow.graph.conversion import convert_to_tensor  # noqa: F401
from asyncflow.graph.gradients import (  # noqa: F401
    AggregationMethod, UnconnectedGradients, gradients,
)
from asyncflow.graph.importer import import_graph_def  # noqa: F401
from asyncflow.ops.array import identity, rank, reshape, shape, size, stop_gradient  # noqa: F401
from asyncflow.ops.embedding import (  # noqa: F401
    dynamic_partition, dynamic_stitch, embedding_lookup,
)
from asyncflow.ops.indexing import (  # noqa: F401
    gather, gather_nd, segment_sum, unsorted_segment_sum,
)
from asyncflow.ops.slicing import slice, strided_slice  # noqa: F401
from asyncflow.ops.segment import (  # noqa: F401
    segment_max, segment_mean, segment_min, segment_prod, sparse_segment_mean,
    sparse_segment_sqrt_n, sparse_segment_sum, unsorted_segment_max, unsorted_segment_mean,
    unsorted_segment_min, unsorted_segment_prod, unsorted_segment_sqrt_n,
)
from asyncflow.ops.layout import (  # noqa: F401
    concat, expand_dims, invert_permutation, split, squeeze, stack, transpose, unstack,
)
from asyncflow.ops.numerics import (  # noqa: F401
    check_numerics, clip_by_global_norm, clip_by_norm, clip_by_value, global_norm,
)
from asyncflow.ops.tiling import one_hot, pad, tile  # noqa: F401
from asyncflow.ops.script import py_func  # noqa: F401
from asyncflow.ops.control import control_dependencies, group, no_op, tuple  # noqa: F401
from asyncflow.ops.math import (  # noqa: F401
    abs, add, add_n, argmax, argmin, cast, ceil, cos, div, divide, equal, exp, floor, floordiv,
    floormod, greater, greater_equal, is_finite, is_nan, less, less_equal, log, log1p,
    logical_and, logical_not, logical_or, logical_xor, matmul, maximum, minimum, mod,
    multiply, negative, not_equal, pow, reciprocal, reduce_all, reduce_any, reduce_max,
    reduce_mean, reduce_min, reduce_prod, reduce_sum, round, rsqrt, sigmoid, sign, sin, sqrt,
    square, squared_difference, subtract, tanh, to_float, truediv, where,
)
from asyncflow.ops.sources import (  # noqa: F401
    constant, fill, ones, ones_like, placeholder, placeholder_with_default, random_normal,
    random_uniform, range, truncated_normal, zeros, zeros_like,
)
from asyncflow.ops.state import (  # noqa: F401
    Variable, assign, assign_add, assign_sub, global_variables, global_variables_initializer,
    is_variable_initialized, local_variables, local_variables_initializer,
    report_uninitialized_variables, scatter_add, scatter_sub, scatter_update,
    trainable_variables, variables_initializer,
)
from asyncflow.ops.state import (  # noqa: F401,E402  (sparse updates)
    scatter_div, scatter_max, scatter_min, scatter_mul,
)
from asyncflow.graph.indexed_slices import IndexedSlices  # noqa: F401,E402
from asyncflow.ops.sparse_ops import (  # noqa: F401,E402
    SparseTensor, SparseTensorValue, sparse_add, sparse_concat, sparse_placeholder,
    sparse_reduce_sum, sparse_reorder, sparse_reshape, sparse_retain,
    sparse_tensor_dense_matmul, sparse_tensor_to_dense, sparse_to_dense,
)
from asyncflow import sparse  # noqa: F401,E402  (af.sparse.to_indicator ...)
from asyncflow.ops.partitioned_variables import (  # noqa: F401,E402
    PartitionedVariable, fixed_size_partitioner, min_max_variable_partitioner,
    variable_axis_size_partitioner,
)
from asyncflow.exec.options import ConfigProto, RunMetadata, RunOptions, SessionConfig  # noqa: F401
from asyncflow.session import Session  # noqa: F401
from asyncflow.cluster import ClusterSpec, Server  # noqa: F401,E402
from asyncflow.ops.control_flow import case, cond  # noqa: F401,E402
from asyncflow.ops.while_loop import while_loop  # noqa: F401,E402
from asyncflow.ops.data_flow import (  # noqa: F401,E402  (queues)
    FIFOQueue, PaddingFIFOQueue, QueueBase, RandomShuffleQueue, count_up_to, random_shuffle,
)
from asyncflow.ops.io import NumpyRecordReader, ReaderBase, TextLineReader  # noqa: F401,E402
# Namespaces: af.train, af.summary, af.nn, af.initializers, af.timeline, af.serving.
from asyncflow import initializers, layers, nn, serving, summary, timeline, train  # noqa: F401,E402
from asyncflow import distribute  # noqa: F401,E402  (af.distribute.cluster_resolver)
from asyncflow import image  # noqa: F401,E402  (af.image: decode_jpeg, resize_images)
from asyncflow.ops.init_ops import (  # noqa: F401,E402
    Constant as constant_initializer, GlorotNormal as glorot_normal_initializer,
    GlorotUniform as glorot_uniform_initializer, Ones as ones_initializer,
    RandomNormal as random_normal_initializer, RandomUniform as random_uniform_initializer,
    TruncatedNormal as truncated_normal_initializer, VarianceScaling as variance_scaling_initializer,
    Zeros as zeros_initializer,
)
from asyncflow.ops.linalg import einsum, tensordot  # noqa: F401,E402
from asyncflow.ops.logging_ops import Print  # noqa: F401,E402
from asyncflow.ops.tensor_array import TensorArray  # noqa: F401,E402
from asyncflow.ops.functional_ops import foldl, foldr, hessians, map_fn, scan  # noqa: F401,E402
from asyncflow.ops.variable_scope import (  # noqa: F401,E402
    AUTO_REUSE, VariableScope, get_variable, get_variable_scope, variable_scope,
)
# Issue 36 (TF1 names: math, linalg, array): af.math, af.linalg and the names below.
from asyncflow import linalg, math  # noqa: F401,E402  (af.math.softplus, af.linalg.norm ...)
from asyncflow.ops.cumulative import cumprod, cumsum  # noqa: F401,E402
from asyncflow.ops.numerics import norm, reduce_logsumexp  # noqa: F401,E402
from asyncflow.ops.sorting import argsort, sort  # noqa: F401,E402
from asyncflow.ops.trigonometric import (  # noqa: F401,E402
    acos, acosh, asin, asinh, atan, atan2, atanh, cosh, expm1, is_inf, rint, sinh, tan,
)
from asyncflow.ops.numerics import div_no_nan, scalar_mul  # noqa: F401,E402
from asyncflow.ops.linalg import matrix_transpose  # noqa: F401,E402
from asyncflow.ops.diagonal import (  # noqa: F401,E402
    diag, diag_part, eye, matrix_band_part, matrix_diag, matrix_diag_part, matrix_set_diag, trace,
)
from asyncflow.ops.layout import reverse  # noqa: F401,E402
from asyncflow.ops.scatter_nd import (  # noqa: F401,E402
    scatter_nd, scatter_nd_add, scatter_nd_sub, scatter_nd_update, tensor_scatter_nd_add,
    tensor_scatter_nd_max, tensor_scatter_nd_min, tensor_scatter_nd_sub, tensor_scatter_nd_update,
)
from asyncflow.ops.unique import bincount, setdiff1d, unique, unique_with_counts  # noqa: F401,E402
from asyncflow.ops.special import digamma, erf, lgamma  # noqa: F401,E402
from asyncflow.ops.matrix_linalg import (  # noqa: F401,E402
    cholesky, matrix_determinant, matrix_inverse, qr, svd,
)

from asyncflow.version import __version__  # noqa: F401,E402


def name_scope(name, default_name=None, values=None):
    """Prefix names of ops created inside with ``name/`` (in the default graph)."""
    from asyncflow.ops.construct import graph_of
    graph = graph_of(values or ())
    return graph.name_scope(name or default_name)


def device(spec):
    """Request a device for ops created inside (partial specs merge; callables accepted)."""
    return get_default_graph().device(spec)


def colocate_with(op, ignore_existing=False):
    """Ops created inside share a device with ``op``."""
    return get_default_graph().colocate_with(op, ignore_existing)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key):
    return get_default_graph().get_collection_ref(key)


def set_random_seed(seed):
    """The graph-level seed, combined with per-op seeds as in TF1."""
    get_default_graph().seed = seed


from asyncflow import random  # noqa: F401,E402  (af.random: TF1's tf.random)
from asyncflow.ops.sources import multinomial  # noqa: F401,E402
from asyncflow.ops.sources import linspace  # noqa: F401,E402
from asyncflow.ops.tiling import broadcast_to, meshgrid  # noqa: F401,E402

# TF1's tf.losses and tf.metrics (issue 36)
from asyncflow import losses  # noqa: F401,E402  (af.losses: TF1's tf.losses, issue 36)
from asyncflow import metrics  # noqa: F401,E402  (af.metrics: TF1's tf.metrics, issue 36)

# TF1 names from porting.md's "Not provided" list (shapes and layout)
from asyncflow.ops.array import (  # noqa: F401,E402
    broadcast_dynamic_shape, broadcast_static_shape, ensure_shape, identity_n, shape_n,
    unravel_index,
)
from asyncflow.ops.math import where_v2  # noqa: F401,E402
from asyncflow.ops.roll import roll  # noqa: F401,E402
from asyncflow.ops.roll import repeat  # noqa: F401,E402
from asyncflow.ops.space_batch import (  # noqa: F401,E402
    batch_to_space, batch_to_space_nd, depth_to_space, space_to_batch, space_to_batch_nd,
    space_to_depth,
)
# TF1 names from porting.md's "Not provided" list (math)
from asyncflow.ops.confusion_matrix import confusion_matrix  # noqa: F401,E402
from asyncflow.ops.math import (  # noqa: F401,E402
    accumulate_n, floor_div, realdiv, truncatediv, truncatemod,
)
from asyncflow.ops.numerics import clip_by_average_norm, saturate_cast  # noqa: F401,E402
from asyncflow.ops.sorting import searchsorted  # noqa: F401,E402
from asyncflow.ops.special import erfc  # noqa: F401,E402
from asyncflow.ops.bitcast import bitcast  # noqa: F401,E402
from asyncflow.ops.cross import cross  # noqa: F401,E402
from asyncflow.ops.histogram import (  # noqa: F401,E402
    histogram_fixed_width, histogram_fixed_width_bins,
)
from asyncflow.ops.parallel_concat import parallel_stack  # noqa: F401,E402
from asyncflow.ops.space_batch import required_space_to_batch_paddings  # noqa: F401,E402
from asyncflow.ops.image_patches import extract_image_patches  # noqa: F401,E402
from asyncflow.ops.edit_distance import edit_distance  # noqa: F401,E402
from asyncflow.ops.special import igamma, igammac  # noqa: F401,E402
