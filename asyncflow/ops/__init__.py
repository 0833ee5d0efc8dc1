"""Op families: definition, builder, shape inference and gradient side by side.

Family modules are imported explicitly; importing this package registers every op type.
"""
from asyncflow.ops import array, control, math, math_grad, sources, state  # noqa: F401
from asyncflow.ops import control_flow, control_flow_grad  # noqa: F401,E402  (cond, case)
from asyncflow.ops import while_grad, while_loop  # noqa: F401,E402  (while_loop, its gradient)
from asyncflow.ops import checkpoint, summary_ops  # noqa: F401,E402  (checkpoint and summary families)
from asyncflow.ops import checkpoint_files  # noqa: F401,E402  (a checkpoint's meta graph and state file)
from asyncflow.ops import image  # noqa: F401,E402  (tf.image: decoding, resizing)
from asyncflow.ops import nn, nn_conv  # noqa: F401,E402  (nn family)
from asyncflow.ops import embedding, indexing, layout, numerics, script, slicing, tiling  # noqa: F401,E402  (array family, py_func)
from asyncflow.ops import segment  # noqa: F401,E402  (segment max/min/mean/prod)
from asyncflow.ops import transfer  # noqa: F401,E402  (Send/Recv for partitions)
from asyncflow.ops import data_flow, io  # noqa: F401,E402  (queues and readers)
from asyncflow.ops import training  # noqa: F401,E402  (fused optimizer updates)
from asyncflow.ops import linalg, logging_ops  # noqa: F401,E402  (einsum, Print)
from asyncflow.ops import tensor_array  # noqa: F401,E402  (TensorArray)
from asyncflow.ops import lstm_ops  # noqa: F401,E402  (fused LSTM step)
from asyncflow.ops import selection  # noqa: F401,E402  (top_k, in_top_k)
from asyncflow.ops import sorting  # noqa: F401,E402  (sort, argsort)
from asyncflow.ops import trigonometric  # noqa: F401,E402  (tan, asin, ..., atan2)
from asyncflow.ops import normalization  # noqa: F401,E402  (lrn, fused_batch_norm, issue 36)
from asyncflow.ops import cumulative  # noqa: F401,E402  (cumsum, cumprod: issue 36)
from asyncflow.ops import diagonal  # noqa: F401,E402  (matrix_diag, band_part ...: issue 36)
from asyncflow.ops import scatter_nd  # noqa: F401,E402  (tensor_scatter_nd_update ...: issue 36)
from asyncflow.ops import unique  # noqa: F401,E402  (unique, setdiff1d, bincount: issue 36)
from asyncflow.ops import matrix_linalg  # noqa: F401,E402  (matrix_inverse, svd ...: issue 36)
from asyncflow.ops import special  # noqa: F401,E402  (erf, lgamma, digamma: issue 36)
