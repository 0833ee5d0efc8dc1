"""How op builders add ops: operand conversion and the one call into ``Graph.create_op``.

Every family module builds through these few functions, so the rules for Python scalars
(they take the other operand's dtype, as in TF1), graph selection and default names live in
one place.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes
from asyncflow.graph.conversion import convert_to_tensor
from asyncflow.graph.graph import Tensor, get_default_graph


def is_tensor_like(value):
    return isinstance(value, Tensor) or hasattr(value, "_as_tensor")


def graph_of(values):
    """The graph of the first tensor among ``values``, else the default graph."""
    for value in values:
        if isinstance(value, Tensor):
            return value.graph
        if hasattr(value, "_as_tensor"):
            return value.graph  # not _as_tensor(): in a loop or cond that builds a read
    return get_default_graph()


def as_tensor(value, dtype=None, name=None):
    return convert_to_tensor(value, dtype=dtype, name=name)


def operands(values, name="op"):
    """Convert values to tensors: Python values take the first tensor's dtype (TF1).

    Two tensors of different dtypes are left alone: the op's inference then raises a
    TypeError that names the op (no implicit promotion, as in TF1).
    """
    dtype = None
    for value in values:
        if is_tensor_like(value):
            if dtype is None:
                dtype = value.dtype  # mismatched tensor dtypes fail in the op's inference
    if dtype is None:
        return [convert_to_tensor(v) for v in _promote_python(values)]
    return [convert_to_tensor(v) if is_tensor_like(v) else convert_to_tensor(v, dtype=dtype)
            for v in values]


def _promote_python(values):
    """Plain Python operands on both sides: a float anywhere makes them all float32.

    A numpy float array (or scalar) keeps its dtype and lends it to the Python values, as
    ``tf.convert_to_tensor`` does: ``add(np.ones(2), np.ones(2))`` is float64 in TF1.
    """
    typed = next((v.dtype for v in values
                  if isinstance(v, (np.ndarray, np.generic)) and v.dtype.kind == "f"), None)
    if typed is not None:
        return [v if isinstance(v, (np.ndarray, np.generic)) else np.asarray(v, dtype=typed)
                for v in values]
    if any(isinstance(v, float) or (isinstance(v, (list, tuple)) and v and
                                    np.asarray(v).dtype.kind == "f") for v in values):
        return [np.asarray(v, dtype=np.float32) if not isinstance(v, Tensor) else v for v in values]
    return values


def make_op(op_type, inputs=(), attrs=None, name=None, default_name=None, graph=None,
            control_inputs=()):
    """Create an op in the inputs' graph (or the default graph)."""
    graph = graph or graph_of(inputs)
    return graph.create_op(op_type, inputs, attrs, name=name or default_name or op_type,
                           control_inputs=control_inputs)


def make(op_type, inputs=(), attrs=None, name=None, default_name=None, graph=None):
    """Create a one-output op and return its output tensor."""
    return make_op(op_type, inputs, attrs, name, default_name, graph).outputs[0]


def seeds(seed, graph=None):
    """TF1's (graph seed, op seed) pair for a random op: the graph's seed and ``seed``, a
    fixed graph seed when only ``seed`` is set, the graph's next op seed when only the
    graph's is."""
    graph = graph or get_default_graph()
    if graph.seed is None and seed is None:
        return None, None
    if graph.seed is None:
        return 87654321, int(seed)
    if seed is None:
        seed = graph.next_op_seed()
    return graph.seed, int(seed)


def static_value(tensor):
    """The constant value of ``tensor`` when it is a Const (for shape inference), else None."""
    if isinstance(tensor, Tensor) and tensor.op.type == "Const":
        return tensor.op.get_attr("value")
    return None


def check_dtype(op_name, tensor, allowed, what="x"):
    """Raise TypeError unless ``tensor.dtype`` passes ``allowed`` (a predicate on DType)."""
    if not allowed(tensor.dtype):
        raise TypeError(f"{op_name}: value passed to {what} has dtype {tensor.dtype.name}, "
                        "which is not allowed here")


FLOATING = lambda d: d.is_floating  # noqa: E731
NUMERIC = lambda d: d.is_numeric  # noqa: E731
BOOL = lambda d: d.is_bool  # noqa: E731
INTEGER = lambda d: d.is_integer  # noqa: E731
SIGNED_NUMERIC = lambda d: d.is_floating or (d.is_integer and not d.is_unsigned)  # noqa: E731
ANY = lambda d: True  # noqa: E731
__all__ = ["dtypes"]
