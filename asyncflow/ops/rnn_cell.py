"""RNN cells of TF1 (``tf.nn.rnn_cell``): same variable names, initializers and numerics.

A cell is called as ``output, new_state = cell(inputs, state)``. Its variables are created
on the first call, through ``get_variable`` in a variable scope named after the cell
(``basic_lstm_cell``, ``lstm_cell``, ``gru_cell``, ``basic_rnn_cell``, ``multi_rnn_cell``),
opened under the caller's scope, so ``dynamic_rnn`` gives TF1's names
(``rnn/basic_lstm_cell/kernel``, ``rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias``...)
and checkpoints of TF1 models map name for name. Later calls reuse them. Kernels default to
``get_variable``'s glorot_uniform, biases to zeros (the GRU's gate bias to ones), as in TF1.
"""
from __future__ import annotations

import collections
import re

from asyncflow import dtypes
from asyncflow.graph.graph import Tensor, get_default_graph
from asyncflow.ops import layout, math, nn
from asyncflow.ops import control_flow as cf
from asyncflow.ops.construct import as_tensor
from asyncflow.ops.indexing import slice as slice_op
from asyncflow.ops.init_ops import Constant, Zeros
from asyncflow.ops.lstm_ops import fused_lstm_cell
from asyncflow.ops.nn import dropout
from asyncflow.ops.numerics import clip_by_value
from asyncflow.ops.partitioned_variables import fixed_size_partitioner
from asyncflow.ops.array import shape as array_shape
from asyncflow.ops.sources import zeros
from asyncflow.ops.variable_scope import AUTO_REUSE, get_variable, variable_scope


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """``(c, h)``: the LSTM's cell state and output (TF1)."""

    __slots__ = ()

    @property
    def dtype(self):
        return self.c.dtype


class RNNCell:
    """Base class: ``state_size``, ``output_size``, ``zero_state`` and the variable scope.

    A cell of the user's own subclasses it as in TF1: overriding ``__call__`` (variables by
    ``get_variable``), or ``call`` with ``build(inputs_shape)`` creating the variables by
    ``add_variable``/``add_weight`` before the first call. Its scope is named after the class
    in snake case (``MyCell``: ``my_cell``), as TF1's layers.
    """

    built = False

    def __init__(self, name=None, dtype=None, reuse=None):
        self._name = name
        self._dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self._reuse = reuse
        self._scope = None  # the VariableScope of the first call

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        """``zero_state`` of the inputs' batch size and dtype, or of those given (TF1)."""
        if inputs is not None:
            inputs = cf.flatten(inputs)[0]
            static = inputs.shape.as_list()[0] if inputs.shape.ndims else None
            if batch_size is not None and not isinstance(batch_size, Tensor) \
                    and static != batch_size:  # TF1's refusals
                raise ValueError(f"{type(self).__name__}.get_initial_state: batch size from "
                                 "input tensor is different from the input param. Input "
                                 f"tensor batch: {static}, batch_size: {batch_size}")
            if dtype is not None and dtypes.as_dtype(dtype) is not inputs.dtype:
                raise ValueError(f"{type(self).__name__}.get_initial_state: dtype from input "
                                 "tensor is different from the input param. Input tensor "
                                 f"dtype: {inputs.dtype.name}, dtype: "
                                 f"{dtypes.as_dtype(dtype).name}")
            batch_size = static if static is not None else layout.unstack(
                array_shape(inputs), num=inputs.shape.ndims)[0]
            dtype = inputs.dtype
        return self.zero_state(batch_size, dtype)

    def zero_state(self, batch_size, dtype):
        """Zeros in ``state_size``'s structure, ``[batch_size, size]`` each."""
        static_batch = None if isinstance(batch_size, Tensor) else batch_size
        leaves = []
        for size in cf.flatten(_size_leaves(self.state_size)):
            leaf = zeros(_batch_shape(batch_size, size), dtype=dtype)
            leaf.set_shape([static_batch, size])
            leaves.append(leaf)
        return cf.pack_as(_size_leaves(self.state_size), leaves)

    def __call__(self, inputs, state, scope=None):
        if self._scope is None:
            with variable_scope(scope or self._name, default_name=_snake_case(type(self).__name__),
                                reuse=self._reuse) as opened:
                self._scope = opened
                self._build_once(inputs)
                return self.call(inputs, state)
        # TF1's Layer: later calls re-enter the first call's name scope
        with variable_scope(self._scope, reuse=AUTO_REUSE, auxiliary_name_scope=False):
            with get_default_graph().name_scope(self._scope.original_name_scope):
                return self.call(inputs, state)

    def call(self, inputs, state):
        raise NotImplementedError

    def build(self, inputs_shape):
        """Create the variables (TF1's ``Layer.build``), given the inputs' static shape."""

    def _build_once(self, inputs):
        if not self.built:
            leaves = cf.flatten(inputs)
            self._input_dtype = leaves[0].dtype if leaves else None
            self.build(cf.pack_as(inputs, [leaf.shape for leaf in leaves]))
            self.built = True

    def add_variable(self, name, shape, dtype=None, initializer=None, regularizer=None,
                     trainable=True, **kwargs):
        """A variable of the cell's scope (TF1's ``Layer.add_variable``), of the inputs'
        dtype unless given."""
        dtype = dtype or self._dtype or getattr(self, "_input_dtype", None) or dtypes.float32
        return get_variable(name, shape=shape, dtype=dtype, initializer=initializer,
                            regularizer=regularizer, trainable=trainable, **kwargs)

    add_weight = add_variable

    def _variable(self, name, shape, dtype, initializer=None, shards=None):
        partitioner = None if shards is None else fixed_size_partitioner(shards)
        return get_variable(name, shape=shape, dtype=dtype, initializer=initializer,
                            partitioner=partitioner)


def _snake_case(name):
    """TF1's layer names: ``BasicLSTMCell`` -> ``basic_lstm_cell``."""
    name = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()
    return name if not name.startswith("_") else "private" + name


def _size_leaves(size):
    return size


def _batch_shape(batch_size, size):
    if isinstance(batch_size, Tensor):
        return layout.stack([batch_size, as_tensor(size, dtype=batch_size.dtype)])
    return [batch_size, size]


def _depth(inputs, cell_name):
    depth = inputs.shape.as_list()[-1] if inputs.shape.ndims is not None else None
    if depth is None:
        raise ValueError(f"{cell_name}: the last dimension of the inputs must be known, got "
                         f"shape {inputs.shape}")
    return depth


def _linear(cell, args, units, bias_initializer=None, kernel_name="kernel", bias_name="bias"):
    """``concat(args, 1) @ kernel + bias``, creating ``kernel`` and ``bias`` (TF1's names)."""
    depth = sum(_depth(a, type(cell).__name__) for a in args)
    dtype = args[0].dtype
    kernel = cell._variable(kernel_name, [depth, units], dtype)
    bias = cell._variable(bias_name, [units], dtype, bias_initializer or Zeros())
    joined = args[0] if len(args) == 1 else layout.concat(list(args), 1)
    return nn.bias_add(math.matmul(joined, kernel), bias)


def _lstm_state(state, cell_name):
    """``(c, h)`` of a tuple state; TF1 refuses a single tensor with a TypeError."""
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(f"{cell_name}: with state_is_tuple=True the state must be an "
                        f"LSTMStateTuple (c, h), got {type(state).__name__} {state!r:.80}")
    return state


def _fused_step(cell, inputs, c, h, forget_bias, initializer):
    """``(new_c, new_h)`` by ``FusedLSTMCell``, with the cell's ``kernel`` and ``bias``."""
    units, dtype = cell._num_units, inputs.dtype
    depth = _depth(inputs, type(cell).__name__) + _depth(h, type(cell).__name__)
    kernel = cell._variable("kernel", [depth, 4 * units], dtype, initializer)
    bias = cell._variable("bias", [4 * units], dtype, Zeros())
    return fused_lstm_cell(inputs, c, h, kernel, bias, forget_bias)


class BasicRNNCell(RNNCell):
    """``h' = activation(W [x, h] + b)`` (TF1's ``BasicRNNCell``; activation tanh)."""

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units = num_units
        self._activation = activation

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def call(self, inputs, state):
        activation = self._activation or math.tanh
        output = activation(_linear(self, [inputs, state], self._num_units))
        return output, output


class BasicLSTMCell(RNNCell):
    """TF1's ``BasicLSTMCell``: gates ``i, j, f, o`` from one kernel, ``forget_bias`` added
    to ``f``; state ``LSTMStateTuple(c, h)``."""

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None,
                 reuse=None, name=None, dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units = num_units
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation

    @property
    def state_size(self):
        units = self._num_units
        return LSTMStateTuple(units, units) if self._state_is_tuple else 2 * units

    output_size = property(lambda self: self._num_units)

    def call(self, inputs, state):
        activation = self._activation or math.tanh
        if self._state_is_tuple:
            c, h = _lstm_state(state, "BasicLSTMCell")
        else:
            c, h = layout.split(state, 2, axis=1)
        if self._activation is None:  # TF1's math in one op (see ops/lstm_ops.py)
            new_c, new_h = _fused_step(self, inputs, c, h, self._forget_bias, None)
        else:
            gates = _linear(self, [inputs, h], 4 * self._num_units)
            i, j, f, o = layout.split(gates, 4, axis=1)
            forget = as_tensor(self._forget_bias, dtype=f.dtype)
            new_c = math.add(math.multiply(c, math.sigmoid(math.add(f, forget))),
                             math.multiply(math.sigmoid(i), activation(j)))
            new_h = math.multiply(activation(new_c), math.sigmoid(o))
        new_state = LSTMStateTuple(new_c, new_h) if self._state_is_tuple else \
            layout.concat([new_c, new_h], 1)
        return new_h, new_state


class LSTMCell(RNNCell):
    """TF1's ``LSTMCell``: optional peepholes, cell clipping and an output projection;
    ``num_unit_shards``/``num_proj_shards`` split the kernel/the projection into that many
    partitions (``kernel/part_0``...), as TF1's."""

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None,
                 num_proj=None, proj_clip=None, num_unit_shards=None, num_proj_shards=None,
                 forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_unit_shards = num_unit_shards
        self._num_proj_shards = num_proj_shards
        self._num_units = num_units
        self._use_peepholes = use_peepholes
        self._cell_clip = cell_clip
        self._initializer = initializer
        self._num_proj = num_proj
        self._proj_clip = proj_clip
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation

    @property
    def state_size(self):
        out = self._num_proj or self._num_units
        return LSTMStateTuple(self._num_units, out) if self._state_is_tuple else \
            self._num_units + out

    output_size = property(lambda self: self._num_proj or self._num_units)

    def call(self, inputs, state):
        activation = self._activation or math.tanh
        units = self._num_units
        if self._state_is_tuple:
            c_prev, m_prev = _lstm_state(state, "LSTMCell")
        else:
            c_prev = slice_op(state, [0, 0], [-1, units])
            m_prev = slice_op(state, [0, units], [-1, self._num_proj or units])
        dtype = inputs.dtype
        if not (self._use_peepholes or self._cell_clip is not None or self._num_proj is not None
                or self._activation is not None or self._num_unit_shards is not None):
            # a plain LSTM: TF1's math in one op
            c, m = _fused_step(self, inputs, c_prev, m_prev, self._forget_bias,
                               self._initializer)
            new_state = LSTMStateTuple(c, m) if self._state_is_tuple else \
                layout.concat([c, m], 1)
            return m, new_state
        depth = _depth(inputs, "LSTMCell") + (self._num_proj or units)
        kernel = self._variable("kernel", [depth, 4 * units], dtype, self._initializer,
                                self._num_unit_shards)
        bias = self._variable("bias", [4 * units], dtype, Zeros())
        lstm = nn.bias_add(math.matmul(layout.concat([inputs, m_prev], 1), kernel), bias)
        i, j, f, o = layout.split(lstm, 4, axis=1)
        forget = as_tensor(self._forget_bias, dtype=dtype)
        if self._use_peepholes:
            w_f = self._variable("w_f_diag", [units], dtype, self._initializer)
            w_i = self._variable("w_i_diag", [units], dtype, self._initializer)
            w_o = self._variable("w_o_diag", [units], dtype, self._initializer)
            c = math.add(math.multiply(math.sigmoid(f + forget + w_f * c_prev), c_prev),
                         math.multiply(math.sigmoid(i + w_i * c_prev), activation(j)))
        else:
            c = math.add(math.multiply(math.sigmoid(math.add(f, forget)), c_prev),
                         math.multiply(math.sigmoid(i), activation(j)))
        if self._cell_clip is not None:
            c = clip_by_value(c, -self._cell_clip, self._cell_clip)
        if self._use_peepholes:
            m = math.multiply(math.sigmoid(o + w_o * c), activation(c))
        else:
            m = math.multiply(math.sigmoid(o), activation(c))
        if self._num_proj is not None:
            with variable_scope("projection"):
                projection = self._variable("kernel", [units, self._num_proj], dtype,
                                            self._initializer, self._num_proj_shards)
            m = math.matmul(m, projection)
            if self._proj_clip is not None:
                m = clip_by_value(m, -self._proj_clip, self._proj_clip)
        new_state = LSTMStateTuple(c, m) if self._state_is_tuple else layout.concat([c, m], 1)
        return m, new_state


class GRUCell(RNNCell):
    """TF1's ``GRUCell``: ``gates/`` (reset, update; bias initialized to 1) and
    ``candidate/`` kernels; ``h' = u * h + (1 - u) * tanh(W [x, r * h] + b)``."""

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None,
                 bias_initializer=None, name=None, dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units = num_units
        self._activation = activation
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def call(self, inputs, state):
        activation = self._activation or math.tanh
        units, dtype = self._num_units, inputs.dtype
        depth = _depth(inputs, "GRUCell") + units
        with variable_scope("gates"):
            gate_kernel = self._variable("kernel", [depth, 2 * units], dtype,
                                         self._kernel_initializer)
            gate_bias = self._variable("bias", [2 * units], dtype,
                                       self._bias_initializer or Constant(1.0))
        with variable_scope("candidate"):
            cand_kernel = self._variable("kernel", [depth, units], dtype, self._kernel_initializer)
            cand_bias = self._variable("bias", [units], dtype, self._bias_initializer or Zeros())
        value = math.sigmoid(nn.bias_add(math.matmul(layout.concat([inputs, state], 1),
                                                     gate_kernel), gate_bias))
        r, u = layout.split(value, 2, axis=1)
        candidate = nn.bias_add(math.matmul(layout.concat([inputs, r * state], 1), cand_kernel),
                                cand_bias)
        c = activation(candidate)
        new_h = u * state + (1 - u) * c
        return new_h, new_h


class MultiRNNCell(RNNCell):
    """Cells stacked in layers (TF1): layer ``i``'s variables live under ``cell_<i>/``."""

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        if not cells:
            raise ValueError("Must specify at least one cell for MultiRNNCell.")
        self._cells = list(cells)
        self._state_is_tuple = state_is_tuple
        sizes = [cell.state_size for cell in self._cells]
        if not state_is_tuple and any(isinstance(size, tuple) for size in sizes):
            raise ValueError("MultiRNNCell: some cells return tuples of states, but the flag "
                             f"state_is_tuple is not set. State sizes are: {sizes}")

    @property
    def state_size(self):
        sizes = tuple(cell.state_size for cell in self._cells)
        return sizes if self._state_is_tuple else sum(sizes)

    output_size = property(lambda self: self._cells[-1].output_size)

    def zero_state(self, batch_size, dtype):
        if not self._state_is_tuple:  # one [batch, sum of sizes] matrix, as TF1's
            return super().zero_state(batch_size, dtype)
        return tuple(cell.zero_state(batch_size, dtype) for cell in self._cells)

    def call(self, inputs, state):
        """Each layer's state is ``state[i]``, or its columns of the concatenated state
        (``state_is_tuple=False``, TF1's layout: layer 0's first)."""
        current, new_states, column = inputs, [], 0
        for index, cell in enumerate(self._cells):
            with variable_scope(f"cell_{index}"):
                if self._state_is_tuple:
                    cell_state = state[index]
                else:
                    cell_state = slice_op(state, [0, column], [-1, cell.state_size])
                    column += cell.state_size
                current, new_state = cell(current, cell_state)
            new_states.append(new_state)
        if not self._state_is_tuple:
            return current, layout.concat(new_states, 1)
        return current, tuple(new_states)


def _keep_all_but_lstm_memory(substate):
    """TF1's default ``dropout_state_filter_visitor``: every state tensor but an LSTM's c."""
    if isinstance(substate, LSTMStateTuple):
        return LSTMStateTuple(c=False, h=True)
    return True


def _rebuilt(structure, children):
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*children)
    return type(structure)(children)


class DropoutWrapper(RNNCell):
    """Dropout on a cell's inputs, outputs and state (keep probabilities, TF1); adds no
    variables and no scope of its own. Which parts of the state are dropped is
    ``dropout_state_filter_visitor``'s answer as in TF1 (a bool for a part, or a structure
    of bools for its children, asked again of each child marked True); by default every
    state tensor but the memory ``c`` of each LSTM, however deeply nested."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        super().__init__()
        if variational_recurrent:
            raise NotImplementedError("DropoutWrapper: variational_recurrent is not supported")
        visitor = dropout_state_filter_visitor
        if visitor is not None and not callable(visitor):
            raise TypeError("DropoutWrapper: dropout_state_filter_visitor must be callable. "
                            f"Received: {visitor!r:.80}")
        self._cell = cell
        self._input_keep_prob = input_keep_prob
        self._output_keep_prob = output_keep_prob
        self._state_keep_prob = state_keep_prob
        self._seed = seed
        self._state_filter = dropout_state_filter_visitor or _keep_all_but_lstm_memory

    state_size = property(lambda self: self._cell.state_size)
    output_size = property(lambda self: self._cell.output_size)
    wrapped_cell = property(lambda self: self._cell)

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    def _dropout(self, value, keep_prob, offset):
        if isinstance(keep_prob, (int, float)) and keep_prob == 1.0:
            return value
        seed = None if self._seed is None else self._seed + offset
        return dropout(value, keep_prob=keep_prob, seed=seed)

    def _dropout_all(self, structure, keep_prob, offset):
        return cf.pack_as(structure, [self._dropout(leaf, keep_prob, offset)
                                      for leaf in cf.flatten(structure)])

    def _dropout_state(self, state):
        verdict = self._state_filter(state)
        nested = isinstance(state, (tuple, list))
        if isinstance(verdict, bool):
            if not verdict:
                return state
            if not nested:
                return self._dropout(state, self._state_keep_prob, 1)
            verdict = [True] * len(state)
        elif not nested or len(verdict) != len(state):
            raise TypeError(f"DropoutWrapper: dropout_state_filter_visitor must return a bool "
                            f"or one bool per part of {state!r:.80}, got {verdict!r:.80}")
        return _rebuilt(state, [self._dropout_state(part) if flag else part
                                for flag, part in zip(verdict, state)])

    def __call__(self, inputs, state, scope=None):
        inputs = self._dropout_all(inputs, self._input_keep_prob, 0)
        output, new_state = self._cell(inputs, state, scope=scope)
        if not (isinstance(self._state_keep_prob, (int, float)) and self._state_keep_prob == 1.0):
            new_state = self._dropout_state(new_state)
        output = self._dropout_all(output, self._output_keep_prob, 2)
        return output, new_state


class ResidualWrapper(RNNCell):
    """The cell's output plus its input (TF1's ``ResidualWrapper``), or
    ``residual_fn(inputs, outputs)``; the state is the cell's. No variables or scope of its
    own. The default sum needs inputs and outputs of one static shape, as TF1's."""

    def __init__(self, cell, residual_fn=None):
        super().__init__()
        self._cell = cell
        self._residual_fn = residual_fn

    state_size = property(lambda self: self._cell.state_size)
    output_size = property(lambda self: self._cell.output_size)
    wrapped_cell = property(lambda self: self._cell)

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    def __call__(self, inputs, state, scope=None):
        output, new_state = self._cell(inputs, state, scope=scope)
        if self._residual_fn is not None:
            return self._residual_fn(inputs, output), new_state
        leaves_in, leaves_out = cf.flatten(inputs), cf.flatten(output)
        if len(leaves_in) != len(leaves_out):
            raise ValueError(f"ResidualWrapper: the inputs ({len(leaves_in)} tensors) and the "
                             f"cell's outputs ({len(leaves_out)}) differ in structure")
        for a, b in zip(leaves_in, leaves_out):
            if not a.shape.is_compatible_with(b.shape):
                raise ValueError(f"ResidualWrapper: the inputs' shape {a.shape} and the cell's "
                                 f"output shape {b.shape} are incompatible")
        return cf.pack_as(output, [math.add(a, b) for a, b in zip(leaves_in, leaves_out)]), \
            new_state


class DeviceWrapper(RNNCell):
    """The cell's ops and zero state on ``device`` (TF1's ``DeviceWrapper``); no variables
    or scope of its own."""

    def __init__(self, cell, device):
        super().__init__()
        self._cell = cell
        self._device = device

    state_size = property(lambda self: self._cell.state_size)
    output_size = property(lambda self: self._cell.output_size)
    wrapped_cell = property(lambda self: self._cell)

    def zero_state(self, batch_size, dtype):
        with get_default_graph().device(self._device):
            return self._cell.zero_state(batch_size, dtype)

    def __call__(self, inputs, state, scope=None):
        with get_default_graph().device(self._device):
            return self._cell(inputs, state, scope=scope)


__all__ = ["BasicLSTMCell", "BasicRNNCell", "DeviceWrapper", "DropoutWrapper", "GRUCell",
           "LSTMCell", "LSTMStateTuple", "MultiRNNCell", "RNNCell", "ResidualWrapper"]
