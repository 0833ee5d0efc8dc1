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
    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP, grad_loss=None,
                          stop_gradients=None):
        """Gradients of ``loss`` for the variables in ``var_list``.

        Args:
            loss: a scalar Tensor to minimize.
            var_list: Variables to differentiate; default: the graph's trainable variables.
            gate_gradients: ``GATE_GRAPH`` makes every gradient wait for all of them
                (``af.tuple``); the other values leave them independent.
            grad_loss: the initial gradient of ``loss`` (default: ones).
            stop_gradients: tensors held constant.

        Returns:
            A list of ``(gradient or None, variable)`` pairs.

        Raises:
            ValueError: if there are no variables to optimize.
            TypeError: if ``loss`` is not a Tensor or a variable is not floating.
        """
        if not isinstance(loss, Tensor):
            raise TypeError(f"Optimizer {self._name}: loss must be a Tensor, got {loss!r}")
        if var_list is None:
            var_list = loss.graph.get_collection(GraphKeys.TRAINABLE_VARIABLES)
        var_list = list(var_list)
        if not var_list:
            raise ValueError(f"Optimizer {self._name}: no variables to optimize")
        for var in var_list:
            if not var.dtype.is_floating:
                raise TypeError(f"Optimizer {self._name}: variable {var.name} has dtype "
                                f"{var.dtype.name}; only floating variables can be optimized")
        grads = gradients(loss, var_list, grad_ys=None if grad_loss is None else [grad_loss],
                          stop_gradients=stop_gradients)
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
                pairs whose gradient is None are skipped.
            global_step: an integer Variable incremented by one after the updates, or None.
            name: the name of the returned op (default: the optimizer's name).

        Returns:
            An Operation that runs every update (and the global step increment).

        Raises:
            ValueError: if no pair has a gradient, naming the variables.
            TypeError: if a gradient is not a Tensor.
        """
        grads_and_vars = list(grads_and_vars)
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            names = [getattr(v, "name", str(v)) for _, v in grads_and_vars]
            raise ValueError(f"No gradients provided for any variable, check your graph for ops "
                             f"that do not support gradients, between variables {names} and "
                             "the loss.")
        for grad, var in pairs:
            if not isinstance(grad, (Tensor, IndexedSlices)):
                raise TypeError(f"Gradient for {var.name} must be a Tensor or IndexedSlices, "
                                f"got {grad!r}")
        graph = pairs[0][1].graph
        var_list = [v for _, v in pairs]
        with graph.as_default():
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
            return self._apply_dense(cast(grad, var.dtype), var)
        # Built where the variable lives: only the rows and their indices cross the wire.
        with var.graph.colocate_with(var.op):
            grad = IndexedSlices(cast(grad.values, var.dtype), grad.indices, grad.dense_shape)
            return self._apply_sparse_duplicate_indices(grad, var)

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
                 name=None, grad_loss=None):
        """``apply_gradients(compute_gradients(loss, var_list), global_step)``.

        Raises:
            ValueError: if no variable in ``var_list`` receives a gradient from ``loss``.
        """
        grads_and_vars = self.compute_gradients(loss, var_list, gate_gradients, grad_loss)
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
        """The optimizer's slot and non-slot variables."""
        found = [v for slots in self._slots.values() for v in slots.values()]
        return found + list(self._non_slots.values())

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
        """Get or create a per-optimizer, per-graph variable (e.g. Adam's beta powers)."""
        graph = colocate_with.graph
        key = (name, graph)
        if key not in self._non_slots:
            with graph.colocate_with(colocate_with.op):
                self._non_slots[key] = Variable(
                    np.asarray(initial_value, dtype=colocate_with.dtype.np), trainable=False,
                    name=name)
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
                tensor = constant(value, dtype=dtype, name=name)
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


def _key(var):
    """Slots are keyed by the variable's op, so a Variable and its reference agree."""
    return var.op
