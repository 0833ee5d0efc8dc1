"""``af.TensorArray``: TF1's per-step list of tensors, written and read inside while loops.

A TensorArray is a resource handle plus a *flow*: a float32 scalar that each write returns
and each later read takes as input. The flow carries no data; it orders the ops (a read runs
after the writes it must see) and, being a float, rides through a ``while_loop`` as a loop
variable and through gradients like any other value. Kernels (kernels/tensor_array.py) keep
the elements as a Python list of arrays, so a write in iteration ``t`` stores one element:
O(element), never a copy of the whole array.

Ops (TF1's V3 names): ``TensorArrayV3(size) -> (handle, flow)``, ``TensorArrayWriteV3``,
``TensorArrayReadV3``, ``TensorArrayGatherV3``, ``TensorArrayScatterV3``,
``TensorArrayConcatV3``, ``TensorArraySplitV3``, ``TensorArraySizeV3``, ``TensorArrayGradV3``.

Gradients follow TF's ``tensor_array_grad``: the gradient of a TensorArray is another
TensorArray of the same size (``TensorArrayGradV3``, looked up or created on the forward
array, one per ``af.gradients`` call: the *source* is the ``gradients`` name-scope prefix).
Reading index ``i`` has the gradient "write ``i`` of the gradient array" (writes to one index
add up), writing index ``i`` has the gradient "read ``i`` of the gradient array" (zeros when
nothing was written there), gather/scatter and concat/split likewise. Inside a while loop
the forward index is saved for the gradient loop like any body value, and the flows make the
gradient loop's reads wait for the writes of the ops after the loop.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_gradient, register_op
from asyncflow.graph.graph import Tensor
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops import control_flow as cf
from asyncflow.ops.array import identity, shape
from asyncflow.ops.construct import as_tensor, graph_of, make_op
from asyncflow.ops.control import no_op
from asyncflow.ops.slicing import strided_slice
from asyncflow.ops.sources import range as range_
from asyncflow.ops.while_frame import call_unpacked

_FLOW = (dtypes.float32, TensorShape([]))
_HANDLE = (dtypes.string, TensorShape([]))


def _element_shape(op):
    return as_shape(op.get_attr("element_shape"))


def _infer_create(op):
    size = op.inputs[0]
    if not size.dtype.is_integer or size.shape.ndims not in (None, 0):
        raise TypeError(f"TensorArray size must be a scalar integer, got {size.dtype.name} "
                        f"{size.shape}")
    return [_HANDLE, _FLOW]


def _infer_write(op):
    value, element = op.inputs[2], _element_shape(op)
    if value.dtype is not op.get_attr("dtype"):
        raise TypeError(f"TensorArray has dtype {op.get_attr('dtype').name} but the value "
                        f"written has {value.dtype.name}")
    if not element.is_compatible_with(value.shape):
        raise ValueError(f"Could not write to TensorArray: the element shape {element} is not "
                         f"compatible with the value's shape {value.shape}")
    return [_FLOW]


def _infer_read(op):
    return [(op.get_attr("dtype"), _element_shape(op))]


def _infer_gather(op):
    indices, element = op.inputs[1], _element_shape(op)
    count = indices.shape.as_list()[0] if indices.shape.ndims == 1 else None
    shape = TensorShape([count]).concatenate(element) if element.dims is not None else \
        TensorShape(None)
    return [(op.get_attr("dtype"), shape)]


def _infer_scatter(op):
    value, element = op.inputs[2], _element_shape(op)
    if value.dtype is not op.get_attr("dtype"):
        raise TypeError(f"TensorArray has dtype {op.get_attr('dtype').name} but the value "
                        f"scattered has {value.dtype.name}")
    if value.shape.ndims is not None and element.dims is not None and \
            not element.is_compatible_with(TensorShape(value.shape.dims[1:])):
        raise ValueError(f"Could not scatter to TensorArray: the element shape {element} is not "
                         f"compatible with the value's shape {value.shape}")
    return [_FLOW]


def _infer_concat(op):
    element = _element_shape(op)
    shape = TensorShape([None] + list(element.dims[1:])) \
        if element.dims else TensorShape(None)
    return [(op.get_attr("dtype"), shape), (dtypes.int64, TensorShape([None]))]


def _infer_size(op):
    return [(dtypes.int32, TensorShape([]))]


def _infer_grad(op):
    return [_HANDLE, _FLOW]


register_op("TensorArrayV3", infer=_infer_create, stateful=True)
register_op("TensorArrayWriteV3", infer=_infer_write, stateful=True)
register_op("TensorArrayReadV3", infer=_infer_read, stateful=True)
register_op("TensorArrayGatherV3", infer=_infer_gather, stateful=True)
register_op("TensorArrayScatterV3", infer=_infer_scatter, stateful=True)
register_op("TensorArrayConcatV3", infer=_infer_concat, stateful=True)
register_op("TensorArraySplitV3", infer=lambda op: [_FLOW], stateful=True)
register_op("TensorArraySizeV3", infer=_infer_size, stateful=True)
register_op("TensorArrayGradV3", infer=_infer_grad, stateful=True)
not_differentiable("TensorArrayV3", "TensorArraySizeV3", "TensorArrayGradV3")


class TensorArray:
    """A list of same-dtype tensors with one slot per index (TF1 ``tf.TensorArray``).

    Args:
        dtype: the elements' dtype.
        size: the number of elements (an int or scalar int tensor); 0 with
            ``dynamic_size=True`` to grow on writes.
        dynamic_size: writes past the end grow the array instead of failing.
        clear_after_read: a read frees its element (reading it again is an error).
        tensor_array_name: a name for error messages.
        handle, flow: wrap an existing handle/flow (what the gradient uses).
        infer_shape: learn the element shape from the first write (TF1's default).
        element_shape: the elements' shape, when known.
        colocate_with_first_write_call: accepted for TF1 compatibility (the ops are always
            colocated with the handle).
        name: name scope.

    Every method that changes the array returns a new TensorArray object carrying the new
    flow; use it, as in TF1 (``ta = ta.write(t, x)``).
    """

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None,
                 tensor_array_name=None, handle=None, flow=None, infer_shape=True,
                 element_shape=None, colocate_with_first_write_call=True, name=None):
        self._dtype = dtypes.as_dtype(dtype)
        self._dynamic_size = bool(dynamic_size)
        self._clear_after_read = True if clear_after_read is None else bool(clear_after_read)
        self._infer_shape = infer_shape
        self._element_shape = as_shape(element_shape) if element_shape is not None else \
            TensorShape(None)
        if handle is not None:
            if flow is None:
                raise ValueError("TensorArray: a handle needs its flow")
            self._handle, self._flow = handle, flow
            return
        if size is None:
            raise ValueError("TensorArray: size must be given (0 with dynamic_size=True)")
        size_tensor = as_tensor(size, dtype=dtypes.int32) if not isinstance(size, Tensor) \
            else size
        graph = graph_of([size_tensor])
        with graph.name_scope(name or "TensorArray") as scope:
            op = make_op("TensorArrayV3", (size_tensor,), {
                "dtype": self._dtype, "element_shape": self._element_shape,
                "dynamic_size": self._dynamic_size,
                "clear_after_read": self._clear_after_read,
                "tensor_array_name": tensor_array_name or scope.rstrip("/")},
                name="TensorArray", graph=graph)
        self._handle, self._flow = op.outputs

    # -- properties -------------------------------------------------------------------------
    dtype = property(lambda self: self._dtype)
    handle = property(lambda self: self._handle)
    flow = property(lambda self: self._flow)

    @property
    def element_shape(self):
        return self._element_shape

    def _attrs(self):
        return {"dtype": self._dtype, "element_shape": self._element_shape}

    def with_flow(self, flow):
        out = TensorArray(self._dtype, handle=self._handle, flow=flow,
                          infer_shape=self._infer_shape, element_shape=self._element_shape,
                          dynamic_size=self._dynamic_size,
                          clear_after_read=self._clear_after_read)
        return out

    def _merge_shape(self, shape):
        if not self._infer_shape:
            return
        if not self._element_shape.is_compatible_with(shape):
            raise ValueError(f"Inconsistent shapes: saw {shape} but expected "
                             f"{self._element_shape} (and infer_shape=True)")
        self._element_shape = self._element_shape.merge_with(shape)

    def _make(self, op_type, inputs, name, default, attrs=None):
        graph = self._handle.graph
        with graph.colocate_with(self._handle.op):
            return make_op(op_type, inputs, {**self._attrs(), **(attrs or {})}, name, default)

    # -- element access -----------------------------------------------------------------------
    def identity(self):
        """This array with its flow passed through an Identity (TF1)."""
        return self.with_flow(identity(self._flow))

    def read(self, index, name=None):
        """The element at ``index``."""
        index = as_tensor(index, dtype=dtypes.int32)
        value = self._make("TensorArrayReadV3", (self._handle, index, self._flow), name,
                           "TensorArrayReadV3").outputs[0]
        return value

    def write(self, index, value, name=None):
        """A TensorArray whose element ``index`` is ``value``."""
        index = as_tensor(index, dtype=dtypes.int32)
        value = as_tensor(value, dtype=self._dtype)
        self._merge_shape(value.shape)
        flow = self._make("TensorArrayWriteV3", (self._handle, index, value, self._flow), name,
                          "TensorArrayWrite").outputs[0]
        return self.with_flow(flow)

    def stack(self, name=None):
        """All elements stacked along a new first axis (``gather(range(size()))``)."""
        graph = self._handle.graph
        with graph.name_scope(name or "TensorArrayStack"):
            return self.gather(range_(0, self.size()), name="TensorArrayGatherV3")

    def gather(self, indices, name=None):
        """The elements at ``indices``, stacked."""
        indices = as_tensor(indices, dtype=dtypes.int32)
        return self._make("TensorArrayGatherV3", (self._handle, indices, self._flow), name,
                          "TensorArrayGatherV3").outputs[0]

    def concat(self, name=None):
        """All elements concatenated along their first axis."""
        return self._make("TensorArrayConcatV3", (self._handle, self._flow), name,
                          "TensorArrayConcatV3").outputs[0]

    def unstack(self, value, name=None):
        """A TensorArray holding ``value[i]`` at index ``i`` (``scatter(range(n), value)``)."""
        value = as_tensor(value, dtype=self._dtype)
        graph = self._handle.graph
        with graph.name_scope(name or "TensorArrayUnstack"):
            dims = value.shape.as_list() if value.shape.ndims is not None else None
            count = dims[0] if dims and dims[0] is not None else \
                strided_slice(shape(value), [0], [1], shrink_axis_mask=1)
            return self.scatter(range_(0, count), value, name="TensorArrayScatter")

    def scatter(self, indices, value, name=None):
        """A TensorArray whose elements ``indices[i]`` are ``value[i]``."""
        indices = as_tensor(indices, dtype=dtypes.int32)
        value = as_tensor(value, dtype=self._dtype)
        if value.shape.ndims:
            self._merge_shape(TensorShape(value.shape.dims[1:]))
        flow = self._make("TensorArrayScatterV3", (self._handle, indices, value, self._flow),
                          name, "TensorArrayScatter").outputs[0]
        return self.with_flow(flow)

    def split(self, value, lengths, name=None):
        """A TensorArray holding consecutive pieces of ``value`` of the given ``lengths``."""
        value = as_tensor(value, dtype=self._dtype)
        lengths = as_tensor(lengths, dtype=dtypes.int64) if not isinstance(lengths, Tensor) \
            else lengths
        if value.shape.ndims:
            self._merge_shape(TensorShape([None] + list(value.shape.dims[1:])))
        flow = self._make("TensorArraySplitV3", (self._handle, value, lengths, self._flow),
                          name, "TensorArraySplit").outputs[0]
        return self.with_flow(flow)

    def size(self, name=None):
        """The number of elements (a scalar int32)."""
        return self._make("TensorArraySizeV3", (self._handle, self._flow), name,
                          "TensorArraySizeV3").outputs[0]

    def grad(self, source, flow=None, name=None):
        """The gradient TensorArray of this one for the gradient computation ``source``."""
        flow = self._flow if flow is None else flow
        op = self._make("TensorArrayGradV3", (self._handle, flow), name, "TensorArrayGrad",
                        {"source": source})
        return TensorArray(self._dtype, handle=op.outputs[0], flow=op.outputs[1],
                           infer_shape=False, element_shape=self._element_shape)

    def close(self, name=None):
        """Accepted for TF1 compatibility: the array is freed with its step."""
        return no_op(name=name)


# -- gradients -------------------------------------------------------------------------------
def _grad_source(op):
    """The ``gradients`` name-scope prefix of the gradient being built (TF's
    ``_GetGradSource``): one gradient TensorArray per ``af.gradients`` call."""
    scope = op.graph.get_name_scope()
    parts = scope.split("/")
    for k, part in enumerate(parts):
        if part.startswith("gradients"):
            return "/".join(parts[:k + 1])
    return "gradients"


def _forward(op, flow):
    return TensorArray(op.get_attr("dtype"), handle=op.inputs[0], flow=flow,
                       element_shape=op.get_attr("element_shape"))


@register_gradient("TensorArrayReadV3")
def _read_grad(op, grad):
    handle, index, flow = op.inputs
    g = _forward(op, flow).grad(_grad_source(op), flow=flow)
    return [None, None, g.write(index, grad).flow]


@register_gradient("TensorArrayWriteV3")
def _write_grad(op, flow_grad):
    index = op.inputs[1]
    g = _forward(op, op.inputs[3]).grad(_grad_source(op), flow=flow_grad)
    return [None, None, g.read(index), flow_grad]


@register_gradient("TensorArrayGatherV3")
def _gather_grad(op, grad):
    handle, indices, flow = op.inputs
    g = _forward(op, flow).grad(_grad_source(op), flow=flow)
    return [None, None, g.scatter(indices, grad).flow]


@register_gradient("TensorArrayScatterV3")
def _scatter_grad(op, flow_grad):
    indices = op.inputs[1]
    g = _forward(op, op.inputs[3]).grad(_grad_source(op), flow=flow_grad)
    return [None, None, g.gather(indices), flow_grad]


@register_gradient("TensorArrayConcatV3")
def _concat_grad(op, grad, unused_lengths_grad):
    handle, flow = op.inputs
    g = _forward(op, flow).grad(_grad_source(op), flow=flow)
    return [None, g.split(grad, op.outputs[1]).flow]


@register_gradient("TensorArraySplitV3")
def _split_grad(op, flow_grad):
    g = _forward(op, op.inputs[3]).grad(_grad_source(op), flow=flow_grad)
    return [None, g.concat(), None, flow_grad]


__all__ = ["TensorArray", "adapt_loop"]


# -- while_loop support ---------------------------------------------------------------------------
class _LoopAdapter:
    """A while loop over TensorArrays runs over their flows (TF1's ``_convert_ta_to_flow``).

    ``while_loop`` hands ``cond``, ``body`` and ``loop_vars`` to ``adapt``; when any loop
    variable is a TensorArray, it gets back versions that see TensorArrays while the loop
    carries flows, and ``restore`` turns the loop's results back into TensorArrays.
    """

    def __init__(self, cond, body, loop_vars):
        self._structure = loop_vars
        self._templates = cf.flatten(loop_vars)
        self.loop_vars = self._to_flows(loop_vars)
        self._cond, self._body = cond, body

    def _to_flows(self, structure):
        return cf.pack_as(structure, [v.flow if isinstance(v, TensorArray) else v
                                      for v in cf.flatten(structure)])

    def _to_arrays(self, leaves):
        """Flat loop values arranged like ``loop_vars``, flows turned back into arrays."""
        return cf.pack_as(self._structure, [
            template.with_flow(leaf) if isinstance(template, TensorArray) else leaf
            for template, leaf in zip(self._templates, leaves)])

    def _args(self, args):
        structure = self._structure
        if isinstance(structure, (list, tuple)) and not cf.is_namedtuple(structure):
            return self._to_arrays(cf.flatten(list(args)))
        return self._to_arrays(cf.flatten(args[0]))

    def _call(self, fn, args):
        return call_unpacked(fn, self._args(args))

    def cond(self, *args):
        return self._call(self._cond, args)

    def body(self, *args):
        result = self._call(self._body, args)
        structure = self._structure
        if isinstance(structure, (list, tuple)) and not cf.is_namedtuple(structure) \
                and len(structure) == 1 and not isinstance(result, (list, tuple)):
            result = type(structure)([result])
        leaves = cf.flatten(result)
        if len(leaves) == len(self._templates):  # later arrays carry the inferred shapes
            self._templates = [leaf if isinstance(leaf, TensorArray) else template
                               for leaf, template in zip(leaves, self._templates)]
        return self._to_flows(result)

    def restore(self, results):
        if len(self._templates) == 1 and not isinstance(results, (list, tuple, dict)):
            template = self._templates[0]
            return template.with_flow(results) if isinstance(template, TensorArray) else results
        return self._to_arrays(cf.flatten(results))


def adapt_loop(cond, body, loop_vars):
    """A ``_LoopAdapter`` when ``loop_vars`` holds a TensorArray, else None."""
    if not any(isinstance(v, TensorArray) for v in cf.flatten(loop_vars)):
        return None
    return _LoopAdapter(cond, body, loop_vars)
