"""Recurrent networks of TF1: ``dynamic_rnn``, ``static_rnn``, ``bidirectional_dynamic_rnn``.

``dynamic_rnn`` is TF1's loop: inputs are made time-major and unstacked into a TensorArray,
a ``while_loop`` calls the cell once per step and writes each output into another
TensorArray, which is stacked (and made batch-major again) after the loop. With
``sequence_length``, a batch entry past its length outputs zeros and keeps its state (TF1's
``_rnn_step`` copy-through), so the final state is each sequence's last valid one.
Gradients flow through the loop's gradient and the TensorArrays' gradient arrays.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.ops import array, layout, math
from asyncflow.ops import control_flow as cf
from asyncflow.ops.construct import as_tensor
from asyncflow.ops.functional_ops import reverse_first
from asyncflow.ops.indexing import gather, strided_slice
from asyncflow.ops.sources import range as range_, zeros_like
from asyncflow.ops.tensor_array import TensorArray
from asyncflow.ops.variable_scope import variable_scope
from asyncflow.ops.while_loop import while_loop


def _transpose_batch_time(x):
    rank = x.shape.ndims
    if rank is None or rank < 2:
        raise ValueError(f"dynamic_rnn: inputs must be at least rank 2 [batch, time, ...], got "
                         f"shape {x.shape}")
    return layout.transpose(x, [1, 0] + list(range(2, rank)))


def _dim(x, axis):
    static = x.shape.as_list()[axis] if x.shape.ndims is not None else None
    if static is not None:
        return as_tensor(static, dtype=dtypes.int32), static
    return strided_slice(array.shape(x), [axis], [axis + 1], shrink_axis_mask=1), None


def _check_cell(cell, name, caller):
    """TF1's refusal of what is not a cell (a TypeError naming what it lacks)."""
    def has(attr):  # on the class: a base cell's property may raise NotImplementedError
        return hasattr(type(cell), attr) or attr in getattr(cell, "__dict__", {})
    missing = [f"'{attr}' property is missing" for attr in ("output_size", "state_size")
               if not has(attr)]
    if not (has("zero_state") or has("get_initial_state")):
        missing.append("either 'zero_state' or 'get_initial_state' method is required")
    if not callable(cell):
        missing.append("is not callable")
    if missing:
        raise TypeError(f"{caller}: the argument '{name}' ({cell!r:.80}) is not an RNNCell: "
                        + ", ".join(missing))


def _lengths(sequence_length, caller):
    """``sequence_length`` as an int32 vector; TF1 refuses one of another known rank."""
    lengths = as_tensor(sequence_length)
    if lengths.shape.ndims not in (None, 1):
        raise ValueError(f"{caller}: sequence_length must be a vector of length batch_size, "
                         f"got shape {lengths.shape}")
    return lengths if lengths.dtype is dtypes.int32 else math.cast(lengths, dtypes.int32)


def _float_inputs(x, caller):
    if not x.dtype.is_floating:
        raise ValueError(f"{caller}: an RNN cell only takes floating point inputs, got "
                         f"{x.dtype.name} ({x.name})")
    return x


def _input_list(inputs, caller):
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"{caller}: inputs must be a sequence (a list of [batch, depth] "
                        f"tensors), got {type(inputs).__name__}")
    if not inputs:
        raise ValueError(f"{caller}: inputs must not be empty")
    return [cf.pack_as(x, [_float_inputs(as_tensor(leaf), caller) for leaf in cf.flatten(x)])
            for x in inputs]  # each step's input may be a nest, as TF1's


def _copy_through(time, sequence_length, old, new):
    """``new`` where ``time < sequence_length`` (per batch row), else ``old``."""
    keep = math.less(time, sequence_length)  # [batch]
    rank = new.shape.ndims
    mask = keep if rank in (None, 1) else array.reshape(keep, [-1] + [1] * (rank - 1))
    condition = math.logical_and(mask, math.equal(zeros_like(new), zeros_like(new)))
    return math.where(condition, new, old)


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """Run ``cell`` over ``inputs`` with a while loop (TF1 ``tf.nn.dynamic_rnn``).

    Args:
        cell: an RNN cell (``af.nn.rnn_cell``).
        inputs: ``[batch, time, depth]`` (``[time, batch, depth]`` when ``time_major``).
        sequence_length: optional int ``[batch]``: steps past it output zeros and keep the
            state.
        initial_state: the cell's initial state (default: ``cell.zero_state``; then ``dtype``
            is required unless the inputs have one).
        dtype: the state's dtype when ``initial_state`` is None.
        parallel_iterations: loop iterations in flight (default 32, TF1's).
        swap_memory: accepted for TF1 compatibility.
        time_major: whether ``inputs`` and outputs are time-major.
        scope: variable scope (default ``"rnn"``).

    Returns:
        ``(outputs, final_state)``: outputs shaped like the inputs with ``cell.output_size``
        as depth; ``final_state`` in ``cell.state_size``'s structure.
    """
    _check_cell(cell, "cell", "dynamic_rnn")
    structure = inputs
    flat_inputs = [_float_inputs(as_tensor(x), "dynamic_rnn") for x in cf.flatten(inputs)]
    if not flat_inputs:
        raise ValueError("dynamic_rnn: inputs must not be empty")
    if initial_state is None and dtype is None:
        raise ValueError("dynamic_rnn: give an initial_state or the state's dtype")
    with variable_scope(scope or "rnn"):
        time_inputs = [x if time_major else _transpose_batch_time(x) for x in flat_inputs]
        steps, static_steps = _dim(time_inputs[0], 0)
        batch, static_batch = _dim(time_inputs[0], 1)
        if initial_state is not None:
            state = initial_state
        else:
            state = cell.zero_state(static_batch if static_batch is not None else batch, dtype)
        if sequence_length is not None:
            sequence_length = _lengths(sequence_length, "dynamic_rnn")
        input_tas = [TensorArray(x.dtype, size=steps, tensor_array_name="rnn/input",
                                 element_shape=x.shape.as_list()[1:] if x.shape.ndims else None
                                 ).unstack(x) for x in time_inputs]
        flat_state = cf.flatten(state)
        # each step's [batch, output_size] in the state's dtype, as TF1's: zero steps stack
        # to [0, batch, size]
        sizes = cf.flatten(cell.output_size)
        output_tas = tuple(TensorArray(dtype or flat_state[0].dtype, size=steps,
                                       tensor_array_name="rnn/output",
                                       element_shape=[static_batch, size]
                                       if isinstance(size, int) else None) for size in sizes)
        count = len(output_tas)

        def body(time, *carried):
            outputs, flat = carried[:count], carried[count:]
            current = cf.pack_as(state, list(flat))
            step_inputs = cf.pack_as(structure, [ta.read(time) for ta in input_tas])
            output, new_state = cell(step_inputs, current)
            flat_output, new_flat = cf.flatten(output), cf.flatten(new_state)
            if len(flat_output) != count:
                raise ValueError(f"dynamic_rnn: the cell returned {len(flat_output)} outputs "
                                 f"where its output_size {cell.output_size} has {count}")
            if sequence_length is not None:
                flat_output = [_copy_through(time, sequence_length, zeros_like(o), o)
                               for o in flat_output]
                new_flat = [_copy_through(time, sequence_length, old, new)
                            for old, new in zip(flat, new_flat)]
            written = tuple(ta.write(time, o) for ta, o in zip(outputs, flat_output))
            return (time + 1,) + written + tuple(new_flat)

        loop = while_loop(lambda time, *_: time < steps, body,
                          (as_tensor(0),) + output_tas + tuple(flat_state),
                          parallel_iterations=parallel_iterations or 32)
        flat_outputs = []
        for ta in loop[1:1 + count]:
            stacked = ta.stack()
            if static_steps is not None and stacked.shape.ndims is not None:
                stacked.set_shape([static_steps] + stacked.shape.as_list()[1:])
            flat_outputs.append(stacked if time_major else _transpose_batch_time(stacked))
        final_state = cf.pack_as(state, list(loop[1 + count:]))
        return cf.pack_as(cell.output_size, flat_outputs), final_state


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """Run ``cell`` over a Python list of ``[batch, depth]`` inputs (or nests of them),
    unrolled (TF1).

    Returns:
        ``(outputs, final_state)``: a list of outputs and the last state.
    """
    _check_cell(cell, "cell", "static_rnn")
    inputs = _input_list(inputs, "static_rnn")
    if initial_state is None and dtype is None:
        raise ValueError("static_rnn: give an initial_state or the state's dtype")
    with variable_scope(scope or "rnn"):
        if initial_state is not None:
            state = initial_state
        else:
            first = cf.flatten(inputs[0])[0]
            static = first.shape.as_list()[0] if first.shape.ndims else None
            batch = static if static is not None else _dim(first, 0)[0]
            state = cell.zero_state(batch, dtype)
        if sequence_length is not None:
            sequence_length = _lengths(sequence_length, "static_rnn")
        outputs = []
        for time, x in enumerate(inputs):
            output, new_state = cell(x, state)
            if sequence_length is not None:
                t = as_tensor(time)
                output = cf.pack_as(output, [_copy_through(t, sequence_length, zeros_like(o), o)
                                             for o in cf.flatten(output)])
                new_state = cf.pack_as(new_state, [
                    _copy_through(t, sequence_length, old, new)
                    for old, new in zip(cf.flatten(state), cf.flatten(new_state))])
            outputs.append(output)
            state = new_state
        return outputs, state


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None,
                             initial_state_bw=None, dtype=None, sequence_length=None,
                             scope=None):
    """A forward and a backward ``static_rnn`` over a list of inputs (TF1).

    The backward cell reads the list reversed (each row within its ``sequence_length`` when
    given); its outputs are put back in time order and each step's two outputs concatenated.

    Returns:
        ``(outputs, output_state_fw, output_state_bw)``: ``outputs[t]`` is
        ``[batch, fw_depth + bw_depth]``.
    """
    _check_cell(cell_fw, "cell_fw", "static_bidirectional_rnn")
    _check_cell(cell_bw, "cell_bw", "static_bidirectional_rnn")
    inputs = _input_list(inputs, "static_bidirectional_rnn")
    with variable_scope(scope or "bidirectional_rnn"):
        # each static_rnn in its direction's scope itself, as TF1's: bidirectional_rnn/fw/cell
        with variable_scope("fw") as fw_scope:
            outputs_fw, state_fw = static_rnn(cell_fw, inputs, initial_state_fw, dtype,
                                              sequence_length, scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            reversed_inputs = _reverse_list(inputs, sequence_length)
            outputs_bw, state_bw = static_rnn(cell_bw, reversed_inputs, initial_state_bw,
                                              dtype, sequence_length, scope=bw_scope)
            outputs_bw = _reverse_list(outputs_bw, sequence_length)
    outputs = [layout.concat([fw, bw], 1) if not isinstance(fw, (list, tuple)) else
               cf.pack_as(fw, [layout.concat([f, b], 1) for f, b in zip(cf.flatten(fw),
                                                                        cf.flatten(bw))])
               for fw, bw in zip(outputs_fw, outputs_bw)]
    return outputs, state_fw, state_bw


def _reverse_list(tensors, sequence_length):
    """The list reversed in time (within each row's length when lengths are given)."""
    if sequence_length is None:
        return list(reversed(tensors))
    columns = []  # each leaf of the steps' nests, reversed on its own
    for leaves in zip(*(cf.flatten(t) for t in tensors)):
        stacked = layout.stack(list(leaves), axis=1)                 # [B, T, ...]
        flipped = reverse_sequence(stacked, sequence_length, seq_axis=1, batch_axis=0)
        columns.append(layout.unstack(flipped, num=len(tensors), axis=1))
    return [cf.pack_as(tensors[0], list(step)) for step in zip(*columns)]


def reverse_sequence(input, seq_lengths, seq_axis=1, batch_axis=0, name=None):  # noqa: A002
    """Reverse the first ``seq_lengths[b]`` steps of each batch row (TF1, ``seq_axis=1``,
    ``batch_axis=0`` or the time-major transpose ``seq_axis=0``, ``batch_axis=1``)."""
    x = as_tensor(input)
    if (seq_axis, batch_axis) == (0, 1):
        return _transpose_batch_time(reverse_sequence(_transpose_batch_time(x), seq_lengths,
                                                      1, 0, name))
    if (seq_axis, batch_axis) != (1, 0):
        raise NotImplementedError("reverse_sequence: only (seq_axis, batch_axis) of (1, 0) or "
                                  "(0, 1) is supported")
    steps, _ = _dim(x, 1)
    lengths = math.cast(as_tensor(seq_lengths), dtypes.int32)
    time = array.reshape(range_(0, steps), [1, -1])                 # [1, T]
    lengths = array.reshape(lengths, [-1, 1])                       # [B, 1]
    source = math.where(math.less(time, lengths), lengths - 1 - time,
                        time + 0 * lengths)                         # [B, T]
    return gather(x, source, axis=1, batch_dims=1, name=name)


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None,
                              initial_state_fw=None, initial_state_bw=None, dtype=None,
                              parallel_iterations=None, swap_memory=False, time_major=False,
                              scope=None):
    """A forward and a backward ``dynamic_rnn`` over ``inputs`` (TF1).

    The backward pass reads each sequence reversed within its length and its outputs are
    reversed back. Variables live under ``bidirectional_rnn/fw/`` and ``.../bw/``.

    Returns:
        ``((output_fw, output_bw), (state_fw, state_bw))``.
    """
    _check_cell(cell_fw, "cell_fw", "bidirectional_dynamic_rnn")
    _check_cell(cell_bw, "cell_bw", "bidirectional_dynamic_rnn")
    inputs = cf.pack_as(inputs, [as_tensor(x) for x in cf.flatten(inputs)])
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            output_fw, state_fw = dynamic_rnn(cell_fw, inputs, sequence_length, initial_state_fw,
                                              dtype, parallel_iterations, swap_memory,
                                              time_major, scope=fw_scope)
        seq_axis, batch_axis = (0, 1) if time_major else (1, 0)

        def reverse(x):
            if sequence_length is not None:
                flipped = reverse_sequence(x, sequence_length, seq_axis, batch_axis)
            else:
                flipped = reverse_first(x) if time_major else \
                    _transpose_batch_time(reverse_first(_transpose_batch_time(x)))
            flipped.set_shape(x.shape)  # a reversal keeps the shape (TF1's static one too)
            return flipped

        def reverse_all(structure):  # inputs and outputs may be nested, as TF1's
            return cf.pack_as(structure, [reverse(x) for x in cf.flatten(structure)])
        with variable_scope("bw") as bw_scope:
            reversed_inputs = reverse_all(inputs)
            reversed_out, state_bw = dynamic_rnn(cell_bw, reversed_inputs, sequence_length,
                                                 initial_state_bw, dtype, parallel_iterations,
                                                 swap_memory, time_major, scope=bw_scope)
        output_bw = reverse_all(reversed_out)
    return (output_fw, output_bw), (state_fw, state_bw)


__all__ = ["bidirectional_dynamic_rnn", "dynamic_rnn", "reverse_sequence", "static_rnn"]
