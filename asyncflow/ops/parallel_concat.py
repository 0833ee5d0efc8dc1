"""ParallelConcat: TF1's ``tf.parallel_stack``, tensors of one fully known shape stacked on a
new first axis by one ``ParallelConcat`` op (each input an ``ExpandDims`` of a value).

Theory of operation: TF1's op copies each input into a preallocated output as it arrives;
here the kernel runs once its inputs are all there (``ctx.xp.concatenate``), so the value is
``stack``'s. As TF1's, the output shape is an attribute that must be fully known when the
graph is built, and the op has no gradient (``gradients`` through it raises LookupError
naming it, as TF1's).
"""
from __future__ import annotations

from asyncflow.graph import register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, graph_of, make, operands
from asyncflow.ops.layout import expand_dims


def _infer_parallel_concat(op):
    shape = TensorShape(op.get_attr("shape"))
    first = op.inputs[0].dtype
    for i, value in enumerate(op.inputs):
        if value.dtype != first:
            raise TypeError(f"values[{i}] has dtype {value.dtype.name}, values[0] "
                            f"{first.name}")
        if not value.shape.is_compatible_with([1] + list(shape.dims[1:])):
            raise ValueError(f"values[{i}] has shape {value.shape[1:]}, the output's "
                             f"elements {shape[1:]}")
    return [(first, shape)]


register_op("ParallelConcat", infer=_infer_parallel_concat)


def parallel_stack(values, name="parallel_stack"):
    """TF1's ``tf.parallel_stack``: ``values`` (tensors of one fully known shape) stacked on
    a new first axis, in a scope ``name``.

    Raises:
        ValueError: for no values, or a first value whose shape is not fully known (TF1's
            "shape attr must be fully defined"); for values of other shapes.
        TypeError: for values of several dtypes.
    """
    if not values:
        raise ValueError("parallel_stack: needs at least one value")
    with graph_of(values).name_scope(name):
        values = operands(values)
        shape = TensorShape([len(values)]).concatenate(as_tensor(values[0]).shape)
        if not shape.is_fully_defined():
            raise ValueError(f"parallel_stack: shape attr must be fully defined, got {shape} "
                             f"(the values' shape, {values[0].shape}, must be known when the "
                             "graph is built)")
        expanded = [expand_dims(value, 0) for value in values]
        return make("ParallelConcat", tuple(expanded), {"shape": shape.as_list()}, None,
                    "ParallelConcat")
