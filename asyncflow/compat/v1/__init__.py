"""``import asyncflow.compat.v1 as tf``: TF1's API, synchronous, so TF1 scripts run unchanged.

The graph API is ``asyncflow``'s own (the same ``Graph``, ops and variables: a program may
build once and run some steps here and others with ``await`` on ``af.Session``). What differs
is how things run: ``tf.Session`` and the blocking names of ``tf.train`` run their steps on an
event loop of their own (one per process, on a background thread, started on first use and
stopped at exit: ``asyncflow/compat/background_loop.py``), and ``tf.nn.dropout`` takes TF1's
``keep_prob``. TF1's ``tf.app``, ``tf.flags``, ``tf.logging`` and ``tf.gfile`` are here too.
"""
from asyncflow import *  # noqa: F401,F403  (the graph API, ops, dtypes, errors, ...)
from asyncflow import summary  # noqa: F401
# ``import`` (not ``from ... import``): the star import above bound ``train`` and ``nn`` to
# af's modules, and ``from package import name`` would return those; importing the submodules
# rebinds the names to this package's own.
import asyncflow.compat.v1.app  # noqa: F401,E402
import asyncflow.compat.v1.debugging  # noqa: F401,E402
import asyncflow.compat.v1.flags  # noqa: F401,E402
import asyncflow.compat.v1.gfile  # noqa: F401,E402
import asyncflow.compat.v1.manip  # noqa: F401,E402
import asyncflow.compat.v1.nn  # noqa: F401,E402
import asyncflow.compat.v1.test  # noqa: F401,E402
import asyncflow.compat.v1.train  # noqa: F401,E402
from asyncflow.compat.v1 import tf_logging as logging  # noqa: F401
from asyncflow.compat.v1.config import ConfigProto, GPUOptions  # noqa: F401
from asyncflow.compat.v1.session import InteractiveSession, Session  # noqa: F401
from asyncflow.ops.indexing import batch_gather, boolean_mask  # noqa: F401
from asyncflow.ops.io import read_file, write_file  # noqa: F401
from asyncflow.ops.logging_ops import (  # noqa: F401
    Assert, assert_equal, assert_greater, assert_greater_equal, assert_integer, assert_less,
    assert_less_equal, assert_negative, assert_non_negative, assert_non_positive,
    assert_none_equal, assert_positive, assert_rank, assert_rank_at_least, assert_scalar,
    assert_type, assert_near, assert_proper_iterable, assert_rank_in, assert_same_float_dtype,
    is_non_decreasing, is_numeric_tensor, is_strictly_increasing,
)
from asyncflow.ops.numerics import verify_tensor_all_finite  # noqa: F401
from asyncflow.ops.tiling import sequence_mask  # noqa: F401
from asyncflow.ops.image import random_crop  # noqa: F401,E402  (tf.random_crop, issue 36)
from asyncflow.graph.default_session import get_default_session  # noqa: F401
from asyncflow.graph.registry import RegisterGradient  # noqa: F401
from asyncflow.graph.shape import Dimension, dimension_value  # noqa: F401
# Issue 36: TF1 spellings of names af has (tf.log_sigmoid is tf.math.log_sigmoid).
from asyncflow.ops.nn import log_sigmoid  # noqa: F401,E402
from asyncflow.ops.numerics import count_nonzero  # noqa: F401,E402
from asyncflow.ops.layout import reverse as reverse_v2  # noqa: F401,E402
from asyncflow.ops.scatter_nd import (  # noqa: F401,E402
    tensor_scatter_nd_update as tensor_scatter_update, tensor_scatter_nd_add as tensor_scatter_add,
    tensor_scatter_nd_sub as tensor_scatter_sub,
)

from asyncflow.ops.state import (  # noqa: F401,E402  (TF1's deprecated spellings)
    global_variables as all_variables,
    global_variables_initializer as initialize_all_variables,
    local_variables_initializer as initialize_local_variables,
    variables_initializer as initialize_variables,
)
from asyncflow.ops.math import argmax as _argmax, argmin as _argmin, cast as _cast  # noqa: E402
from asyncflow import dtypes as _dtypes  # noqa: E402

from asyncflow.ops.sources import linspace as lin_space  # noqa: F401,E402
from asyncflow.ops.template import make_template  # noqa: F401,E402
from asyncflow.ops.custom_gradient import custom_gradient  # noqa: F401,E402
from asyncflow.ops.matrix_solve import (  # noqa: F401,E402
    cholesky_solve, matrix_solve, matrix_triangular_solve,
)
from asyncflow.ops.init_ops import Orthogonal as orthogonal_initializer  # noqa: F401,E402
from asyncflow.ops.static_values import get_static_value, is_tensor  # noqa: F401,E402
from asyncflow.ops.variable_scope import get_local_variable  # noqa: F401,E402
from asyncflow.graph.registry import (  # noqa: F401,E402
    no_gradient, no_gradient as NoGradient, no_gradient as NotDifferentiable,
)

newaxis = None  # tf.newaxis: ``x[:, tf.newaxis]`` adds an axis, as numpy's


def disable_v2_behavior():
    """TF's switch to TF1 behaviour: asyncflow.compat.v1 always behaves as TF1 (a no-op)."""


def disable_eager_execution():
    """A no-op: asyncflow always builds graphs, as TF1."""


def executing_eagerly():
    return False


def arg_max(input, dimension, name=None, output_type=_dtypes.int64):  # noqa: A002 (TF1's)
    """TF1's ``tf.arg_max``: ``tf.argmax`` with the axis named ``dimension``."""
    return _argmax(input, dimension, name=name, output_type=output_type)


def arg_min(input, dimension, name=None, output_type=_dtypes.int64):  # noqa: A002 (TF1's)
    """TF1's ``tf.arg_min``: ``tf.argmin`` with the axis named ``dimension``."""
    return _argmin(input, dimension, name=name, output_type=output_type)


def to_int32(x, name="ToInt32"):
    """TF1's ``tf.to_int32``: ``tf.cast(x, tf.int32)``."""
    return _cast(x, _dtypes.int32, name)


def to_int64(x, name="ToInt64"):
    """TF1's ``tf.to_int64``: ``tf.cast(x, tf.int64)``."""
    return _cast(x, _dtypes.int64, name)


def to_double(x, name="ToDouble"):
    """TF1's ``tf.to_double``: ``tf.cast(x, tf.float64)``."""
    return _cast(x, _dtypes.float64, name)


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None,  # noqa: A002
                     seq_dim=None, batch_dim=None):
    """TF1's ``tf.reverse_sequence`` (``seq_dim``/``batch_dim`` its older spellings): the
    first ``seq_lengths[b]`` steps of each batch row reversed, for ``(seq_axis, batch_axis)``
    of ``(1, 0)`` or ``(0, 1)`` (others raise NotImplementedError: docs/porting.md)."""
    from asyncflow.ops.rnn import reverse_sequence as _reverse_sequence
    seq_axis = seq_dim if seq_axis is None else seq_axis
    batch_axis = batch_dim if batch_axis is None else batch_axis
    if seq_axis is None:
        raise ValueError("reverse_sequence: seq_axis is required (TF1's)")
    return _reverse_sequence(input, seq_lengths, int(seq_axis),
                             0 if batch_axis is None else int(batch_axis), name)


def moving_average_variables(scope=None):
    """TF1's ``tf.moving_average_variables``: the variables ``ExponentialMovingAverage.apply``
    averaged (the ``MOVING_AVERAGE_VARIABLES`` collection), of ``scope`` when given."""
    from asyncflow.graph import GraphKeys, get_default_graph
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)
