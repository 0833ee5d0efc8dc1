"""Kernels: computation only, one module per op family, written once against ``ctx.xp``.

Family modules are imported explicitly (no directory scanning); importing this package
registers every kernel.
"""
from asyncflow.kernels import array, control, math, sources, state  # noqa: F401
from asyncflow.kernels import math_tf1  # noqa: F401,E402  (math kernels with TF1's answers)
from asyncflow.kernels import control_flow  # noqa: F401,E402  (Switch/Merge/Enter/Exit, stacks)
from asyncflow.kernels import checkpoint, checkpoint_slices, summary_ops  # noqa: F401,E402  (checkpoint and summary families)
from asyncflow.kernels import checkpoint_files  # noqa: F401,E402  (a checkpoint's meta graph and state file)
from asyncflow.kernels import image  # noqa: F401,E402  (tf.image: decoding, resizing)
from asyncflow.kernels import nn, nn_conv  # noqa: F401,E402  (nn family)
from asyncflow.kernels import nn_pool_taps  # noqa: F401,E402  (MaxPoolGrad by the forward's taps)
from asyncflow.kernels import embedding, indexing, layout, numerics, script, slicing, tiling  # noqa: F401,E402  (array family, py_func)
from asyncflow.kernels import segment  # noqa: F401,E402  (segment max/min/mean/prod)
from asyncflow.kernels import transfer  # noqa: F401,E402  (Send/Recv for partitions)
from asyncflow.kernels import data_flow, io  # noqa: F401,E402  (queues and readers)
from asyncflow.kernels import training  # noqa: F401,E402  (fused optimizer updates)
from asyncflow.kernels import training_proximal  # noqa: F401,E402  (Adadelta, proximal)
from asyncflow.kernels import linalg, logging_ops  # noqa: F401,E402  (einsum, Print)
from asyncflow.kernels import tensor_array  # noqa: F401,E402  (TensorArray)
from asyncflow.kernels import lstm_ops  # noqa: F401,E402  (fused LSTM step)
from asyncflow.kernels import candidate_sampling, sparse_ops  # noqa: F401,E402  (issue 31)
from asyncflow.kernels import selection  # noqa: F401,E402  (top_k, in_top_k)
from asyncflow.kernels import sorting  # noqa: F401,E402  (sort, argsort)
from asyncflow.kernels import trigonometric  # noqa: F401,E402  (tan, asin, ..., atan2)
from asyncflow.kernels import normalization  # noqa: F401,E402  (lrn, issue 36)
from asyncflow.kernels import cumulative  # noqa: F401,E402  (cumsum, cumprod: issue 36)
from asyncflow.kernels import diagonal  # noqa: F401,E402  (matrix_diag, band_part ...: issue 36)
from asyncflow.kernels import scatter_nd  # noqa: F401,E402  (tensor_scatter_nd_update: issue 36)
from asyncflow.kernels import unique  # noqa: F401,E402  (unique, setdiff1d, bincount: issue 36)
from asyncflow.kernels import matrix_linalg  # noqa: F401,E402  (matrix_inverse, svd ...: issue 36)
from asyncflow.kernels import special  # noqa: F401,E402  (erf, lgamma, digamma: issue 36)
from asyncflow.kernels import roll  # noqa: F401,E402  (tf.roll)
