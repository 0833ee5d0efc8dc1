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
import asyncflow.compat.v1.flags  # noqa: F401,E402
import asyncflow.compat.v1.gfile  # noqa: F401,E402
import asyncflow.compat.v1.nn  # noqa: F401,E402
import asyncflow.compat.v1.test  # noqa: F401,E402
import asyncflow.compat.v1.train  # noqa: F401,E402
from asyncflow.compat.v1 import tf_logging as logging  # noqa: F401
from asyncflow.compat.v1.config import ConfigProto, GPUOptions  # noqa: F401
from asyncflow.compat.v1.session import InteractiveSession, Session  # noqa: F401
from asyncflow.ops.indexing import boolean_mask  # noqa: F401
from asyncflow.ops.io import read_file, write_file  # noqa: F401
from asyncflow.ops.logging_ops import (  # noqa: F401
    Assert, assert_equal, assert_less, assert_less_equal,
)
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

newaxis = None  # tf.newaxis: ``x[:, tf.newaxis]`` adds an axis, as numpy's


def disable_v2_behavior():
    """TF's switch to TF1 behaviour: asyncflow.compat.v1 always behaves as TF1 (a no-op)."""


def disable_eager_execution():
    """A no-op: asyncflow always builds graphs, as TF1."""


def executing_eagerly():
    return False
