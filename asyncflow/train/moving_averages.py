"""TF1's ``tf.train.ExponentialMovingAverage``: shadow variables that follow variables (or
tensors, such as a batch's mean) with ``shadow -= (1 - decay) * (shadow - value)``.

``apply(var_list)`` makes one shadow per value, once: a Variable's starts at the variable's
``initialized_value()`` and adds the variable to ``MOVING_AVERAGE_VARIABLES``; a tensor's starts
at zeros. Each shadow is a non-trainable global variable named ``<value's op name>/<name>``
(``w/ExponentialMovingAverage``), so a Saver built from ``variables_to_restore()`` loads the
averages in the variables' places, as TF1's. ``apply`` returns one op that updates them all,
with ``decay`` as given or, with ``num_updates``, ``min(decay, (1 + n) / (10 + n))``. TF1's
``zero_debias=True`` (for tensors) is not provided.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import GraphKeys, get_default_graph
from asyncflow.ops import math as math_ops
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.control import group
from asyncflow.ops.sources import zeros
from asyncflow.ops.state import Variable, assign_sub, global_variables, trainable_variables
from asyncflow.ops.variable_scope import get_variable_scope

_FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def _op_name(value):
    return value.op.name


class ExponentialMovingAverage:
    """Moving averages of variables and tensors (TF1's ``tf.train.ExponentialMovingAverage``).

    Args:
        decay: the decay, a float (0.999, 0.9999, ...).
        num_updates: optional count of updates made (a tensor, usually the global step):
            the decay is then ``min(decay, (1 + num_updates) / (10 + num_updates))``.
        zero_debias: must be False here (TF1's debiasing of tensors' averages is missing).
        name: the shadows' name suffix and the update op's name scope.

    Raises:
        NotImplementedError: for ``zero_debias=True``.
    """

    def __init__(self, decay, num_updates=None, zero_debias=False,
                 name="ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("ExponentialMovingAverage: zero_debias=True is not "
                                      "provided (docs/porting.md)")
        self._decay = decay
        self._num_updates = num_updates
        self._name = name
        self._averages = {}  # the averaged Variable or Tensor -> its shadow Variable

    @property
    def name(self):
        return self._name

    def apply(self, var_list=None):
        """Make the shadows of ``var_list`` (default: the trainable variables) not yet
        averaged, and return the op that updates every shadow of ``var_list`` once.

        Raises:
            TypeError: for a value that is not float16, bfloat16, float32 or float64.
        """
        var_list = trainable_variables() if var_list is None else list(var_list)
        for value in var_list:
            if value.dtype not in _FLOATS:
                raise TypeError(f"ExponentialMovingAverage: the variables must be half, float, "
                                f"or double: {value.name} is {value.dtype.name}")
        for value in var_list:
            if value not in self._averages:
                self._averages[value] = self._shadow(value)
        graph = graph_of([self._tensor(v) for v in var_list]) if var_list else \
            get_default_graph()
        with graph.name_scope(self._name) as scope:
            # (a float or a float32 tensor, such as a placeholder, as TF1's)
            decay = as_tensor(self._decay, dtypes.float32, name="decay")
            if self._num_updates is not None:
                count = math_ops.cast(self._num_updates, dtypes.float32, name="num_updates")
                decay = math_ops.minimum(decay, math_ops.divide(math_ops.add(1.0, count),
                                                                math_ops.add(10.0, count)))
            updates = [self._assign_moving_average(self._averages[v], v, decay)
                       for v in var_list]
            return group(*updates, name=scope)

    @staticmethod
    def _tensor(value):
        return value.value() if isinstance(value, Variable) else value

    def _shadow(self, value):
        graph = graph_of([self._tensor(value)])
        name = f"{_op_name(value)}/{self._name}"
        with graph.as_default():
            # TF1's slot naming: the enclosing variable scope, never the name scope of `apply`
            # (``w/ExponentialMovingAverage`` even under ``name_scope("averaging")``)
            prefix = get_variable_scope().name
        if prefix:
            name = f"{prefix}/{name}"
        with graph.as_default(), graph.control_dependencies(None), graph.name_scope(None):
            if isinstance(value, Variable):
                initial = value.initialized_value()
                graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, value)
            else:
                if not value.shape.is_fully_defined():
                    raise ValueError(f"ExponentialMovingAverage: the shape of {value.name} "
                                     f"must be known, got {value.shape}")
                initial = zeros(value.shape.as_list(), dtype=value.dtype)
            return Variable(initial, trainable=False, name=name)

    @staticmethod
    def _assign_moving_average(shadow, value, decay):
        graph = graph_of([shadow.value()])
        with graph.name_scope("AssignMovingAvg") as scope:
            one_minus_decay = math_ops.subtract(1.0, decay)
            if one_minus_decay.dtype is not shadow.dtype:
                one_minus_decay = math_ops.cast(one_minus_decay, shadow.dtype)
            # fresh reads, ordered by the enclosing control dependencies: TF1's example applies
            # inside ``control_dependencies([opt_op])`` and averages the updated variable
            if isinstance(value, Variable):
                value = value.read_value()
            step = math_ops.multiply(math_ops.subtract(shadow.read_value(), value),
                                     one_minus_decay)
            return assign_sub(shadow, step, name=scope)

    def average(self, var):
        """The shadow Variable of ``var``, or None when ``apply`` has not averaged it."""
        return self._averages.get(var)

    def average_name(self, var):
        """The name of ``var``'s shadow (what it would be before ``apply``)."""
        if var in self._averages:
            return _op_name(self._averages[var])
        return f"{_op_name(var)}/{self._name}"

    def variables_to_restore(self, moving_avg_variables=None):
        """A Saver's ``{name: variable}`` map that restores each average into its variable:
        the averaged variables (default: the trainable and ``MOVING_AVERAGE_VARIABLES``) by
        their shadows' names, every other global variable by its own name."""
        if moving_avg_variables is None:
            graph = get_default_graph()
            moving_avg_variables = trainable_variables() + list(
                graph.get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES))
        name_map = {}
        for variable in moving_avg_variables:
            name_map[self.average_name(variable)] = variable
        averaged = {v.name for v in moving_avg_variables}
        for variable in global_variables():
            if variable.name not in averaged and _op_name(variable) not in name_map:
                name_map[_op_name(variable)] = variable
        return name_map
