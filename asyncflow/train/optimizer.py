"""The optimizer base class: gradients, slot variables and one fused update op per variable.

Theory of operation (TF1's ``tf.train.Optimizer``):
- ``compute_gradients(loss, var_list)`` calls ``af.gradients`` and pairs each gradient with
  its variable (None where the loss does not depend on it).
- ``apply_gradients(grads_and_vars, global_step)`` skips pairs without a gradient, creates the
  optimizer's *slot* variables (per-variable state such as Momentum's accumulator) and its
  *non-slot* variables (per-optimizer state such as Adam's beta powers), then builds one fused
  ``Apply*`` op per variable (``ops/training.py``) under ``<name>/update_<var>``. ``_finish``
  runs after all updates (Adam advances its beta powers there), and the global step is
  incremented after everything else, so a fetched global step counts completed updates.
- Slots are ordinary non-trainable variables named ``<var>/<optimizer name>`` (``_1``, ``_2``
  for further slots), colocated with their variable and in ``GLOBAL_VARIABLES``, so
  ``global_variables_initializer()`` and savers cover them. They are created at the root name
  scope and outside any control dependencies, whatever the caller's scopes.

Subclasses implement ``_create_slots(var_list)``, ``_prepare()``, ``_apply_dense(grad, var)``
and ``_apply_sparse(grad, var)``, and may override ``_finish(update_ops, name)``.

A sparse gradient (``IndexedSlices``, the gradient of a gather or embedding lookup) passes
through ``compute_gradients`` as is and is applied by ``_apply_sparse`` under
``colocate_with(var)``: the update runs where the variable lives, so a step moves the touched
rows and their indices, never the table.
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph import GraphKeys
from asyncflow.graph.gradients import gradients
from asyncflow.graph.graph import Tensor
from asyncflow.graph.indexed_slices import IndexedSlices
from asyncflow.ops.construct import as_tensor
from asyncflow.ops.control import group
from asyncflow.ops.control import tuple as tuple_  # noqa: A004
from asyncflow.ops.math import cast
from asyncflow.ops.sources import constant, fill, zeros_like
from asyncflow.ops.state import Variable, assign_add


# A slot up to this size starts as a constant in the graph; a larger one is filled on its device.
SMALL_SLOT_BYTES = 1 << 16


class Optimizer:
    """Base class of optimizers: ``minimize(loss)`` = ``compute_gradients`` + ``apply_gradients``.

    Args:
        use_locking: accepted for TF1 compatibility (updates are always atomic per kernel).
        name: the name scope of the update ops and the suffix of slot variable names.
    """

    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    def __init__(self, use_locking, name):
        if not name:
            raise ValueError("Optimizer: name must be a non-empty string")
        self._use_locking = use_locking
        self._name = name
        self._slots = {}       # slot name -> {variable op: slot Variable}
        self._non_slots = {}   # (name, graph) -> Variable
        self._hyper_cache = {}

    def get_name(self):
        return self._name

    # -- the public steps --------------------------------------------------------------------
    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None, stop_gradients=None):
        """Gradients of ``loss`` for the variables in ``var_list`` (TF1's arguments, in order).

        Args:
            loss: a scalar floating Tensor to minimize.
            var_list: Variables to differentiate; default: the graph's trainable variables.
            gate_gradients: ``GATE_GRAPH`` makes every gradient wait for all of them
                (``af.tuple``); ``GATE_NONE`` and ``GATE_OP`` leave them independent.
            aggregation_method, colocate_gradients_with_ops: as ``af.gradients`` (accepted,
                no value changes).
            grad_loss: the initial gradient of ``loss`` (default: ones).
            stop_gradients: tensors held constant.

        Returns:
            A list of ``(gradient or None, variable)`` pairs. A variable that gets no gradient
            (an integer counter among the trainable variables) is paired with None.

        Raises:
            ValueError: if there are no variables to optimize, ``gate_gradients`` is not one
                of the three, or ``loss`` (or a variable that gets a gradient) is not of a
                floating dtype (float16, bfloat16, float32, float64), as TF1.
            TypeError: if ``loss`` is not a Tensor.
        """
        if not isinstance(loss, Tensor):
            raise TypeError(f"Optimizer {self._name}: loss must be a Tensor, got {loss!r}")
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise ValueError("gate_gradients must be one of: Optimizer.GATE_NONE, "
                             f"Optimizer.GATE_OP, Optimizer.GATE_GRAPH.  Not {gate_gradients}")
        _check_floating([loss], self._name)
        if var_list is None:
            var_list = loss.graph.get_collection(GraphKeys.TRAINABLE_VARIABLES)
        var_list = list(var_list)
        if not var_list:
            raise ValueError(f"Optimizer {self._name}: No variables to optimize.")
        grads = gradients(loss, var_list, grad_ys=None if grad_loss is None else [grad_loss],
                          aggregation_method=aggregation_method, stop_gradients=stop_gradients)
        _check_floating([v for g, v in zip(grads, var_list) if g is not None], self._name)
        if gate_gradients == self.GATE_GRAPH and any(g is not None for g in grads):
            parts = [t for g in grads if g is not None
                     for t in ((g.values, g.indices) if isinstance(g, IndexedSlices) else (g,))]
            gated = iter(tuple_(parts))
            grads = [None if g is None else
                     IndexedSlices(next(gated), next(gated), g.dense_shape)
                     if isinstance(g, IndexedSlices) else next(gated) for g in grads]
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """An op that applies the gradients to their variables (then bumps ``global_step``).

        Args:
            grads_and_vars: ``(gradient, variable)`` pairs, e.g. from ``compute_gradients``;
                pairs whose gradient is None are skipped. A gradient that is not a Tensor
                or ``IndexedSlices`` is converted (a list of numbers, a numpy array), as TF1.
            global_step: an integer Variable incremented by one after the updates, or None.
            name: the name of the returned op (default: the optimizer's name).

        Returns:
            An Operation that runs every update (and the global step increment).

        Raises:
            ValueError: if there are no pairs, or no pair has a gradient (naming the
                variables).
            TypeError: if a gradient cannot be converted to a Tensor, or its dtype is not its
                variable's (TF1 refuses it when the update op is built; nothing is cast).
        """
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            raise ValueError("No variables provided.")
        pairs = []
        for grad, var in grads_and_vars:
            if grad is None:
                continue
            if not isinstance(grad, (Tensor, IndexedSlices)):
                try:
                    grad = as_tensor(grad)
                except (TypeError, ValueError) as error:
                    raise TypeError(f"Gradient for {var.name} must be convertible to a Tensor "
                                    f"or IndexedSlices, or None: {grad!r} ({error})") from None
            values = grad.values if isinstance(grad, IndexedSlices) else grad
            if values.dtype.base_dtype is not var.dtype.base_dtype:
                raise TypeError(f"Optimizer {self._name}: the gradient {values.name} of "
                                f"{var.name} has dtype {values.dtype.name}, the variable "
                                f"{var.dtype.name}")
            pairs.append((grad, var))
        if not pairs:
            names = [getattr(v, "name", str(v)) for _, v in grads_and_vars]
            raise ValueError(f"No gradients provided for any variable: {names}.")
        graph = pairs[0][1].graph
        var_list = [v for _, v in pairs]
        with graph.as_default():
            # Non-slot variables (Adam's beta powers) take the caller's name scope, as TF1's.
            self._outer_scope = graph.get_name_scope()
            with graph.control_dependencies(None), graph.name_scope(""):
                self._create_slots(var_list)
            with graph.name_scope(name or self._name) as scope:
                self._hyper_cache = {}
                self._prepare()
                updates = []
                for grad, var in pairs:
                    with graph.name_scope("update_" + var.op.name):
                        updates.append(self._apply_one(grad, var))
                # A name ending in "/" names the op exactly: the step op is "<scope>".
                apply_op = self._finish(updates, scope if global_step is None else "update")
            if global_step is not None:
                with graph.control_dependencies([apply_op]):
                    apply_op = assign_add(global_step, 1, name=scope).op
        graph.add_to_collection(GraphKeys.TRAIN_OP, apply_op)
        return apply_op

    def _apply_one(self, grad, var):
        if not isinstance(grad, IndexedSlices):
            return self._apply_dense(grad, var)
        # Built where the variable lives: only the rows and their indices cross the wire.
        with var.graph.colocate_with(var.op):
            return self._apply_sparse_duplicate_indices(grad, var)

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        """``apply_gradients(compute_gradients(loss, var_list, ...), global_step, name)``
        (TF1's arguments, in order).

        Raises:
            ValueError: if no variable in ``var_list`` receives a gradient from ``loss``.
        """
        grads_and_vars = self.compute_gradients(
            loss, var_list, gate_gradients, aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if all(g is None for g, _ in grads_and_vars):
            names = [v.name for _, v in grads_and_vars]
            raise ValueError(f"No gradients provided for any variable, check your graph for ops "
                             f"that do not support gradients, between variables {names} and "
                             f"loss {loss.name}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    # -- slots -------------------------------------------------------------------------------
    def get_slot_names(self):
        """The names of the slots this optimizer creates, sorted."""
        return sorted(self._slots)

    def get_slot(self, var, name):
        """The slot variable ``name`` of ``var``, or None if it has none."""
        return self._slots.get(name, {}).get(_key(var))

    def variables(self):
        """The optimizer's slot and non-slot variables, sorted by name (as TF1's)."""
        found = [v for slots in self._slots.values() for v in slots.values()]
        return sorted(found + list(self._non_slots.values()), key=lambda v: v.name)

    def _slot(self, var, name, initial_value=0.0):
        """Get or create slot ``name`` of ``var``, filled with ``initial_value``."""
        slots = self._slots.setdefault(name, {})
        key = _key(var)
        if key not in slots:
            graph = var.graph
            with graph.colocate_with(var.op):
                if not var.shape.is_fully_defined():
                    value = zeros_like(var.initial_value) + initial_value
                elif var.shape.num_elements() * var.dtype.size <= SMALL_SLOT_BYTES:
                    value = np.full(var.shape.as_list(), initial_value, var.dtype.np)
                else:
                    # Filled where the variable lives: a big table's slot never travels
                    # inside the graph that a worker registers.
                    value = fill(var.shape.as_list(), constant(initial_value, var.dtype))
                slots[key] = Variable(value, trainable=False, name=f"{var.op.name}/{self._name}",
                                      dtype=var.dtype, validate_shape=var.shape.is_fully_defined())
        return slots[key]

    def _non_slot(self, name, initial_value, colocate_with):
        """Get or create a per-optimizer, per-graph variable (e.g. Adam's beta powers).

        As in TF1 its dtype is ``initial_value``'s: a Python number makes a float32 variable
        whatever the variables' dtype (the updates cast it), so a float64 or float16 model's
        checkpoint holds the same non-slot variables as TF1's."""
        graph = colocate_with.graph
        key = (name, graph)
        if key not in self._non_slots:
            outer = getattr(self, "_outer_scope", "")
            with graph.colocate_with(colocate_with.op), graph.name_scope(outer and outer + "/"):
                if not isinstance(initial_value, (Tensor, Variable)):
                    initial_value = _tf1_number(initial_value)
                self._non_slots[key] = Variable(initial_value, trainable=False, name=name)
        return self._non_slots[key]

    # -- hyperparameters -------------------------------------------------------------------------
    def _hyper(self, value, dtype, name):
        """``value`` (a number, Tensor or callable) as a scalar tensor of ``dtype``."""
        key = (name, dtype)
        if key not in self._hyper_cache:
            if callable(value):
                value = value()
            if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
                tensor = as_tensor(value)
                tensor = tensor if tensor.dtype is dtype else cast(tensor, dtype)
            else:
                # TF1 converts a Python number to a tensor of its own dtype (float32 for a
                # float) and casts that to the variable's: a float64 variable trained with
                # ``0.1`` steps with float32's 0.10000000149.
                tensor = constant(_tf1_number(value).astype(dtype.np), dtype=dtype, name=name)
            self._hyper_cache[key] = tensor
        return self._hyper_cache[key]

    # -- subclass hooks --------------------------------------------------------------------------
    def _create_slots(self, var_list):
        """Create the slots of every variable in ``var_list`` (root scope, no control deps)."""

    def _prepare(self):
        """Convert hyperparameters to tensors, once per ``apply_gradients``."""

    def _apply_dense(self, grad, var):
        raise NotImplementedError(f"{type(self).__name__} must implement _apply_dense")

    def _apply_sparse_duplicate_indices(self, grad, var):
        """Apply an ``IndexedSlices`` gradient whose indices may repeat (repeats add up).

        The ``SparseApply*`` kernels sum repeated rows themselves, so by default this is
        ``_apply_sparse``; an optimizer whose update adds up repeats anyway (plain gradient
        descent's ``scatter_sub``) may override it.
        """
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad, var):
        raise NotImplementedError(f"{type(self).__name__} has no sparse update for "
                                  f"{var.name}: implement _apply_sparse, or densify the gradient "
                                  "with af.convert_to_tensor before apply_gradients")

    def _finish(self, update_ops, name):
        """The op that completes a step once all ``update_ops`` (Tensors) have run."""
        return group(*[t.op for t in update_ops], name=name)


_FLOATING = ("float16", "bfloat16", "float32", "float64")


def _check_floating(tensors, optimizer):
    """TF1's ``_assert_valid_dtypes``: the loss and the variables that get a gradient."""
    for tensor in tensors:
        dtype = tensor.dtype.base_dtype
        if dtype.name not in _FLOATING:
            raise ValueError(f"Optimizer {optimizer}: invalid type {dtype.name} for "
                             f"{tensor.name}, expected one of {list(_FLOATING)}")


def _tf1_number(value):
    """A hyperparameter given as a number, as the array TF1 converts it to (a float to float32,
    an int to int32, or int64 when it does not fit; numpy values keep their dtype)."""
    if type(value) is float:  # not numpy's float64, a float subclass
        return np.asarray(value, np.float32)
    if type(value) is int:
        small = np.iinfo(np.int32).min <= value <= np.iinfo(np.int32).max
        return np.asarray(value, np.int32 if small else np.int64)
    return np.asarray(value)


def _key(var):
    """Slots are keyed by the variable's op, so a Variable and its reference agree."""
    return var.op
