"""Higher-order functions over the first axis: ``map_fn``, ``scan``, ``foldl``, ``foldr``;
and ``hessians``, TF1's loop of second gradients.

As in TF1 each is a ``while_loop`` that reads slice ``i`` of every input from a TensorArray
(``unstack``) and, for ``map_fn``/``scan``, writes each result into an output TensorArray
that is stacked after the loop; gradients therefore flow through the loop's gradient and the
TensorArrays' gradient arrays. Inputs and outputs may be nested structures (lists, tuples,
namedtuples, dicts) of tensors.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph.gradients import gradients
from asyncflow.graph.graph import Tensor
from asyncflow.ops import control_flow as cf
from asyncflow.ops.array import reshape, shape, size
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.control_flow_structure import find_composite
from asyncflow.ops.indexing import gather
from asyncflow.ops.layout import concat
from asyncflow.ops.slicing import strided_slice
from asyncflow.ops.sources import range as range_
from asyncflow.ops.tensor_array import TensorArray
from asyncflow.ops.while_loop import while_loop


def _leaves(elems, what):
    composite = find_composite(elems)
    if composite is not None:
        raise TypeError(f"{what}: elems holds a composite value ({type(composite).__name__}); "
                        f"{what} takes tensors (as TF1's): map over its values or densify it "
                        "first")
    flat = [as_tensor(e) for e in cf.flatten(elems)]
    if not flat:
        raise ValueError(f"{what}: elems must hold at least one tensor")
    for tensor in flat:
        if tensor.shape.ndims == 0:
            raise ValueError(f"{what}: elements in elems must be 1+ dimensional, got {tensor.name} "
                             "with shape []")
    return flat


def _length(flat):
    first = flat[0]
    dims = first.shape.as_list() if first.shape.ndims is not None else None
    if dims and dims[0] is not None:
        return as_tensor(dims[0], dtype=dtypes.int32), dims[0]
    return strided_slice(shape(first), [0], [1], shrink_axis_mask=1), None


def _input_arrays(flat, count, reverse=False):
    arrays = []
    for tensor in flat:
        element = tensor.shape.as_list()[1:] if tensor.shape.ndims is not None else None
        source = reverse_first(tensor) if reverse else tensor
        arrays.append(TensorArray(tensor.dtype, size=count, element_shape=element,
                                  infer_shape=True).unstack(source))
    return arrays


def reverse_first(tensor):
    """``tensor`` with its first axis reversed (a gather of ``n-1 .. 0``)."""
    count, _ = _length([tensor])
    return gather(tensor, range_(count - 1, -1, -1))


def _as_structure(structure, flat_values):
    return cf.pack_as(structure, flat_values)


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True,
           swap_memory=False, infer_shape=True, name=None):
    """``fn`` applied to each slice ``elems[i]`` (nested structures allowed), stacked (TF1).

    Args:
        fn: callable taking one slice (in ``elems``' structure), returning a structure of
            tensors (``dtype``'s structure, when given).
        elems: a tensor or a nested structure of tensors, all with the same first dim.
        dtype: the output's dtype structure when it differs from ``elems``'.
        parallel_iterations: iterations that may run at once (default 10).
        back_prop: whether gradients flow through.
        swap_memory, infer_shape: accepted for TF1 compatibility.
        name: name scope.
    """
    parallel_iterations = parallel_iterations or 10
    graph = graph_of(cf.flatten(elems))
    with graph.name_scope(name or "map"):
        flat = _leaves(elems, "map_fn")
        count, static_count = _length(flat)
        inputs = _input_arrays(flat, count)
        out_structure = dtype if dtype is not None else elems
        out_dtypes = [dtypes.as_dtype(d) for d in cf.flatten(dtype)] if dtype is not None \
            else [t.dtype for t in flat]
        outputs = [TensorArray(d, size=count, infer_shape=infer_shape) for d in out_dtypes]

        def body(i, *arrays):
            piece = _as_structure(elems, [ta.read(i) for ta in inputs])
            result = cf.flatten(fn(piece))
            if len(result) != len(arrays):
                raise ValueError(f"map_fn: fn returned {len(result)} tensors but the output "
                                 f"structure has {len(arrays)} (pass dtype=)")
            return (i + 1,) + tuple(ta.write(i, value) for ta, value in zip(arrays, result))

        results = while_loop(lambda i, *_: i < count, body,
                                (as_tensor(0),) + tuple(outputs),
                                parallel_iterations=parallel_iterations, back_prop=back_prop)
        stacked = [_stack(ta, static_count) for ta in results[1:]]
    return _as_structure(out_structure, stacked)


def _stack(array, static_count):
    value = array.stack()
    if static_count is not None and value.shape.ndims is not None:
        value.set_shape([static_count] + value.shape.as_list()[1:])
    return value


def _scan_like(fn, elems, initializer, parallel_iterations, back_prop, reverse, collect, what,
               name):
    graph = graph_of(cf.flatten(elems))
    with graph.name_scope(name or what):
        flat = _leaves(elems, what)
        count, static_count = _length(flat)
        inputs = _input_arrays(flat, count, reverse=reverse)
        if initializer is None:
            start = as_tensor(1)
            init_structure = elems
            init = [ta.read(0) for ta in _input_arrays(flat, count, reverse=reverse)]
        else:
            start = as_tensor(0)
            init_structure = initializer
            init = [as_tensor(v) for v in cf.flatten(initializer)]
        outputs = [TensorArray(t.dtype, size=count, infer_shape=True) for t in init] \
            if collect else []
        if collect and initializer is None:
            outputs = [ta.write(0, value) for ta, value in zip(outputs, init)]
        n_acc = len(init)

        def body(i, *state):
            accs, arrays = list(state[:n_acc]), list(state[n_acc:])
            piece = _as_structure(elems, [ta.read(i) for ta in inputs])
            result = cf.flatten(fn(_as_structure(init_structure, accs), piece))
            if len(result) != n_acc:
                raise ValueError(f"{what}: fn returned {len(result)} tensors but the "
                                 f"accumulator has {n_acc}")
            result = [as_tensor(r, dtype=a.dtype) if not isinstance(r, Tensor) else r
                      for r, a in zip(result, accs)]
            arrays = [ta.write(i, value) for ta, value in zip(arrays, result)]
            return (i + 1,) + tuple(result) + tuple(arrays)

        loop = while_loop(lambda i, *_: i < count, body,
                             (start,) + tuple(init) + tuple(outputs),
                             parallel_iterations=parallel_iterations, back_prop=back_prop)
        finals, arrays = list(loop[1:1 + n_acc]), list(loop[1 + n_acc:])
        if not collect:
            return _as_structure(init_structure, finals)
        stacked = [_stack(ta, static_count) for ta in arrays]
        if reverse:
            stacked = [reverse_first(value) for value in stacked]
        return _as_structure(init_structure, stacked)


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
         swap_memory=False, infer_shape=True, reverse=False, name=None):
    """Every accumulator of ``acc = fn(acc, elems[i])``, stacked (TF1 ``tf.scan``).

    Without ``initializer`` the first slice is the initial accumulator (and the first output).
    ``reverse=True`` scans from the last slice; outputs keep the input's order.
    """
    return _scan_like(fn, elems, initializer, parallel_iterations, back_prop, reverse, True,
                      "scan", name)


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """The final accumulator of ``acc = fn(acc, elems[i])`` from the first slice on."""
    return _scan_like(fn, elems, initializer, parallel_iterations, back_prop, False, False,
                      "foldl", name)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """The final accumulator of ``acc = fn(acc, elems[i])`` from the last slice back."""
    return _scan_like(fn, elems, initializer, parallel_iterations, back_prop, True, False,
                      "foldr", name)


__all__ = ["foldl", "foldr", "map_fn", "scan"]


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """TF1's ``tf.hessians``: for each ``x`` in ``xs``, the Hessian of ``sum(ys)`` with
    respect to ``x``, shaped ``shape(x) + shape(x)``.

    As TF1's, one ``while_loop`` per ``x`` over the ``size(x)`` entries of the flattened
    gradient, each iteration writing ``gradients(gradient[j], x)`` into a TensorArray that is
    stacked and reshaped after the loop; the ops sit where TF1's do (``name`` is accepted and,
    as in TF1, unused), so an ``x`` of fed shape works.

    Raises:
        ValueError: for an ``x`` that ``ys`` does not depend on, or whose gradient does not
            depend on it (``ys`` linear in ``x``), naming ``x``: TF1 fails there too, with
            "None values not supported".
        LookupError: for an op on a path whose gradient has no gradient (naming it).
    """
    xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
    kwargs = {"colocate_gradients_with_ops": colocate_gradients_with_ops,
              "gate_gradients": gate_gradients, "aggregation_method": aggregation_method}
    firsts = gradients(ys, xs, **kwargs)
    out = []
    for gradient, x in zip(firsts, xs):
        x = as_tensor(x)
        if gradient is None:
            raise ValueError(f"hessians: ys does not depend on {x.name} (through "
                             "differentiable floating-point paths): it has no Hessian")
        gradient = reshape(gradient, [-1])
        count = size(x)

        def body(j, result, gradient=gradient, x=x):
            second = gradients(gradient[j], x, **kwargs)[0]
            if second is None:
                raise ValueError(f"hessians: the gradient of ys with respect to {x.name} "
                                 "does not depend on it (ys is linear in it)")
            return j + 1, result.write(j, second)

        _, hessian = while_loop(lambda j, _: j < count, body,
                                [as_tensor(0, dtype=dtypes.int32), TensorArray(x.dtype, count)])
        x_shape = shape(x)
        result = reshape(hessian.stack(), concat((x_shape, x_shape), 0))
        if x.shape.ndims is not None:  # (TF1's constant folding knows x's whole shape)
            result.set_shape(x.shape.dims + x.shape.dims)
        out.append(result)
    return out
