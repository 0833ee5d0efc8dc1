"""Variables and their ops: VariableV2, Assign, AssignAdd, AssignSub, scatter updates.

A ``VariableV2`` op outputs a *reference* to a buffer held in the session's (or worker's)
resource manager. Ops that take a reference (``ref_inputs``: Assign and friends) receive it
as is; any other consumer receives the value as it is at the moment that consumer runs, as
with TF1's ref dtypes. ``Variable`` bundles the op with its initializer (an Assign) and its
snapshot (``name/read``, an Identity), all colocated.
"""
from __future__ import annotations

import sys

from asyncflow import dtypes
from asyncflow.graph import GraphKeys, register_op, not_differentiable
from asyncflow.graph.graph import Tensor, OPERATOR_NAMES, get_default_graph
from asyncflow.graph.default_session import get_default_session
from asyncflow.graph.indexed_slices import IndexedSlices
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor, make, make_op
from asyncflow.ops.control import group, no_op
from asyncflow.ops.control_flow import cond
from asyncflow.ops.math import cast
from asyncflow.pending import PendingCall


def _infer_variable(op):
    return [(op.get_attr("dtype"), op.get_attr("shape"))]


register_op("VariableV2", infer=_infer_variable, stateful=True, ref_outputs=(0,))


def _infer_assign(op):
    ref, value = op.inputs
    if not ref.is_ref:
        raise TypeError(f"input 0 must be a variable reference, got {ref.name}")
    if ref.dtype is not value.dtype:
        raise TypeError(f"variable {ref.op.name} has dtype {ref.dtype.name} but the value has "
                        f"{value.dtype.name}")
    if op.get_attr("validate_shape") and not ref.shape.is_compatible_with(value.shape):
        raise ValueError(f"Shapes {ref.shape} and {value.shape} are incompatible "
                         f"(assigning to variable {ref.op.name})")
    shape = value.shape if op.type == "Assign" and not op.get_attr("validate_shape") else ref.shape
    return [(ref.dtype, shape)]


for _type in ("Assign", "AssignAdd", "AssignSub"):
    register_op(_type, infer=_infer_assign, stateful=True, ref_inputs=(0,))


def _infer_scatter(op):
    ref, indices, updates = op.inputs
    if not indices.dtype.is_integer:
        raise TypeError(f"indices must be integers, got {indices.dtype.name}")
    if ref.dtype is not updates.dtype:
        raise TypeError(f"updates have dtype {updates.dtype.name}, variable has {ref.dtype.name}")
    return [(ref.dtype, ref.shape)]


SCATTER_OPS = ("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv",
               "ScatterMin", "ScatterMax")
for _type in SCATTER_OPS:
    register_op(_type, infer=_infer_scatter, stateful=True, ref_inputs=(0,))


def _infer_is_initialized(op):
    return [(dtypes.bool, TensorShape([]))]


register_op("IsVariableInitialized", infer=_infer_is_initialized, stateful=True, ref_inputs=(0,))


def _infer_report(op):
    return [(dtypes.string, TensorShape([None]))]


register_op("ReportUninitializedVariables", infer=_infer_report, stateful=True,
            ref_inputs="all")
not_differentiable("Assign", "AssignAdd", "AssignSub", *SCATTER_OPS, "IsVariableInitialized",
                   "ReportUninitializedVariables")


def _assign_op(op_type, ref, value, use_locking, name, validate_shape=True):
    value = as_tensor(value, dtype=ref.dtype)
    graph = ref.graph
    with graph.colocate_with(ref.op):
        return make(op_type, (ref, value), {"validate_shape": validate_shape,
                                            "use_locking": bool(use_locking)},
                    name, op_type)


class Variable:
    """A TF1-style variable: ``af.Variable(initial_value, name=None, trainable=True, dtype=None)``.

    Converts to its snapshot tensor wherever a Tensor is expected.
    """

    def __init__(self, initial_value=None, trainable=True, collections=None, validate_shape=True,
                 name=None, dtype=None, expected_shape=None, shared_name=None):
        if initial_value is None:
            raise ValueError("Variable: initial_value must be given")
        graph = _graph_for(initial_value)
        if isinstance(initial_value, Tensor) and initial_value.op.control_flow_context is not None:
            raise ValueError(
                f"Initializer for variable {name or 'Variable'} is from inside a control-flow "
                "construct, such as a loop or conditional. When creating a variable inside a "
                "loop or conditional, use a lambda as the initializer.")
        # TF1's init_scope: a variable made inside a cond branch or loop body lives outside
        # it, so its initializer runs on its own (no predicate, no frame).
        with graph.push_scopes(control_flow_context=None), graph.control_dependencies(None), \
                graph.name_scope(name or "Variable") as scope:
            if callable(initial_value):
                initial_value = initial_value()
            init_tensor = initial_value if isinstance(initial_value, Tensor) else \
                as_tensor(initial_value, dtype=dtype, name="initial_value")
            if dtype is not None and init_tensor.dtype is not dtypes.as_dtype(dtype):
                init_tensor = cast(init_tensor, dtype)
            shape = init_tensor.shape if validate_shape else TensorShape(None)
            if validate_shape and not shape.is_fully_defined():
                raise ValueError(f"Variable {scope.rstrip('/')}: initial value must have a fully "
                                 f"defined shape, got {shape}; pass validate_shape=False")
            self._variable = make("VariableV2", (), {
                "dtype": init_tensor.dtype, "shape": shape, "container": "",
                "shared_name": shared_name or ""}, name=scope, graph=graph)
            self._initial_value = init_tensor
            with graph.colocate_with(self._variable.op):
                self._initializer_op = make_op(
                    "Assign", (self._variable, init_tensor),
                    {"validate_shape": validate_shape, "use_locking": False}, name="Assign",
                    graph=graph)
                self._snapshot = identity(self._variable, name="read")
        self._trainable = trainable
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        collections = list(collections)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        graph.add_to_collections(collections, self)

    @classmethod
    def _from_ops(cls, variable_op, initializer_op, snapshot, initial_value=None,
                  trainable=True):
        """A Variable around existing ops (an imported meta graph); adds to no collection.

        Args:
            variable_op: the VariableV2 Operation.
            initializer_op: its initializing Assign Operation.
            snapshot: the ``read`` Identity tensor.
            initial_value: the initial value tensor, when known.
            trainable: whether optimizers should update it.
        """
        if variable_op.type != "VariableV2":
            raise TypeError(f"{variable_op.name} is a {variable_op.type}, not a VariableV2")
        self = cls.__new__(cls)
        self._variable = variable_op.outputs[0]
        self._initializer_op = initializer_op
        self._snapshot = snapshot
        self._initial_value = initial_value
        self._trainable = bool(trainable)
        return self

    # -- conversion ------------------------------------------------------------------------
    def _as_tensor(self):
        """The snapshot; inside a cond branch or loop body, a fresh read made there.

        TF1's reads alias the variable's buffer, so a read inside a loop or branch sees the
        assignments made there (``assign_add(b, a)`` after ``assign_add(a, 1)`` in a body
        adds the new ``a`` each iteration). Here the read is an Identity built in the
        context: its input, the reference, enters through RefEnter/RefSwitch, and it reads
        the value when it runs, ordered by the enclosing control dependencies.
        """
        if self._variable.graph.current_scopes().control_flow_context is None:
            return self._snapshot
        with self.graph.colocate_with(self._variable.op):
            return identity(self._variable, name="read")

    def _as_graph_element(self):
        return self._variable

    def _ref(self):
        return self._variable

    def value(self):
        return self._snapshot

    def read_value(self):
        """A fresh read (an Identity), ordered by the enclosing control dependencies."""
        with self.graph.colocate_with(self._variable.op):
            return identity(self._variable, name="read")

    # -- properties -------------------------------------------------------------------------
    name = property(lambda self: self._variable.name)
    op = property(lambda self: self._variable.op)
    dtype = property(lambda self: self._variable.dtype)
    graph = property(lambda self: self._variable.graph)
    device = property(lambda self: self._variable.op.device)
    initializer = property(lambda self: self._initializer_op)
    initial_value = property(lambda self: self._initial_value)
    trainable = property(lambda self: self._trainable)

    @property
    def shape(self):
        return self._variable.shape

    def get_shape(self):
        return self._variable.shape

    # -- updates ------------------------------------------------------------------------------
    def assign(self, value, use_locking=False, name=None, read_value=True):
        return _assign_op("Assign", self._variable, value, use_locking, name)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return _assign_op("AssignAdd", self._variable, delta, use_locking, name)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return _assign_op("AssignSub", self._variable, delta, use_locking, name)

    def scatter_update(self, indices, updates=None, name=None):
        """``scatter_update(IndexedSlices)`` as in TF1, or ``scatter_update(indices, updates)``."""
        return _scatter_method(scatter_update, self, indices, updates, name)

    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        """Add an ``IndexedSlices`` to the rows it names (TF1's ``Variable.scatter_add``)."""
        return _scatter_method(scatter_add, self, sparse_delta, None, name)

    def scatter_sub(self, sparse_delta, use_locking=False, name=None):
        """Subtract an ``IndexedSlices`` from the rows it names."""
        return _scatter_method(scatter_sub, self, sparse_delta, None, name)

    def scatter_mul(self, sparse_delta, use_locking=False, name=None):
        return _scatter_method(scatter_mul, self, sparse_delta, None, name)

    def scatter_div(self, sparse_delta, use_locking=False, name=None):
        return _scatter_method(scatter_div, self, sparse_delta, None, name)

    def scatter_min(self, sparse_delta, use_locking=False, name=None):
        return _scatter_method(scatter_min, self, sparse_delta, None, name)

    def scatter_max(self, sparse_delta, use_locking=False, name=None):
        return _scatter_method(scatter_max, self, sparse_delta, None, name)

    def is_variable_initialized(self):
        return is_variable_initialized(self)

    def __iter__(self):
        raise TypeError("'Variable' object is not iterable.")

    def initialized_value(self):
        """The variable's value, or its initial value while it is uninitialized (TF1): use it
        to initialize another variable from this one without ordering the initializers."""
        if self._initial_value is None:
            raise ValueError(f"Variable {self.name}: its initial value is not known "
                             "(an imported variable); read it with read_value()")
        with self.graph.control_dependencies(None):
            return cond(is_variable_initialized(self), self.read_value,
                        lambda: self._initial_value)

    def eval(self, session=None):
        """TF1's ``v.eval()``: the value in ``session`` or the default (synchronous) session."""
        return self._as_tensor().eval(session=session)

    def load(self, value, session=None):
        """Assign ``value`` (numpy-convertible) to the variable in ``session`` (TF1's
        ``Variable.load``): runs the initializer with its initial value fed.

        With a synchronous session (``asyncflow.compat.v1``'s, or the default one) it runs
        at once and returns None, as TF1's; with an ``af.Session`` it returns the run, to
        ``await`` (``await v.load(value, sess)``).
        """
        if self._initial_value is None:
            raise ValueError(f"Variable {self.name}: load needs the initial value tensor")
        if session is None:
            session = get_default_session()
            if session is None:
                raise ValueError(f"Variable {self.name}: load needs a session, or a default "
                                 "session (`with sess.as_default():`)")
        result = session.run(self._initializer_op, feed_dict={self._initial_value: value})
        if not hasattr(result, "__await__"):
            return None
        caller = sys._getframe(1)
        return _PendingLoad(result, caller.f_code.co_filename, caller.f_lineno)

    def __repr__(self):
        return f"<af.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


class _PendingLoad(PendingCall):
    """``Variable.load``'s run on an async session, to await. Dropped without being awaited
    it loads nothing and warns with the line that called ``load``: the session's own warning
    would name this module's line and a ``Session.run`` the program never wrote."""

    __slots__ = ()

    def never_awaited(self):
        return (f"v.load(...) at {self._filename}:{self._lineno} was never awaited, so "
                "nothing was loaded: with an af.Session write `await v.load(value, sess)` (a "
                "synchronous `asyncflow.compat.v1` session loads at once)")


def _install_variable_operators():
    """Arithmetic, comparison and slicing on a Variable work on its snapshot."""
    for name in OPERATOR_NAMES:
        def forward(self, *args, _name=name):
            return getattr(self._as_tensor(), _name)(*args)
        setattr(Variable, name, forward)


def _graph_for(value):
    if isinstance(value, Tensor):
        return value.graph
    return get_default_graph()


def _ref_of(variable):
    if isinstance(variable, Variable):
        return variable._variable
    if isinstance(variable, Tensor) and variable.is_ref:
        return variable
    raise TypeError(f"Expected a Variable, got {variable!r}")


def assign(ref, value, validate_shape=True, use_locking=False, name=None):
    return _assign_op("Assign", _ref_of(ref), value, use_locking, name, validate_shape)


def assign_add(ref, value, use_locking=False, name=None):
    return _assign_op("AssignAdd", _ref_of(ref), value, use_locking, name)


def assign_sub(ref, value, use_locking=False, name=None):
    return _assign_op("AssignSub", _ref_of(ref), value, use_locking, name)


def _scatter(op_type, ref, indices, updates, name):
    ref = _ref_of(ref)
    indices = as_tensor(indices)
    updates = as_tensor(updates, dtype=ref.dtype)
    with ref.graph.colocate_with(ref.op):
        return make(op_type, (ref, indices, updates), {"use_locking": False}, name, op_type)


def _scatter_method(builder, variable, indices, updates, name):
    if isinstance(indices, IndexedSlices):
        if updates is not None:
            raise TypeError(f"{builder.__name__}: pass an IndexedSlices or indices and updates, "
                            "not both")
        return builder(variable, indices.indices, indices.values, name=name)
    if updates is None:
        raise TypeError(f"{builder.__name__}: expected an IndexedSlices sparse_delta, got "
                        f"{indices!r}")
    return builder(variable, indices, updates, name=name)


def scatter_update(ref, indices, updates, use_locking=False, name=None):
    """Set rows ``indices`` of the variable to ``updates``."""
    return _scatter("ScatterUpdate", ref, indices, updates, name)


def scatter_add(ref, indices, updates, use_locking=False, name=None):
    """Add ``updates`` to rows ``indices`` of the variable (repeated indices accumulate)."""
    return _scatter("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref, indices, updates, use_locking=False, name=None):
    """Subtract ``updates`` from rows ``indices`` of the variable (repeats accumulate)."""
    return _scatter("ScatterSub", ref, indices, updates, name)


def scatter_mul(ref, indices, updates, use_locking=False, name=None):
    """Multiply rows ``indices`` of the variable by ``updates`` (repeats multiply)."""
    return _scatter("ScatterMul", ref, indices, updates, name)


def scatter_div(ref, indices, updates, use_locking=False, name=None):
    """Divide rows ``indices`` of the variable by ``updates`` (repeats divide)."""
    return _scatter("ScatterDiv", ref, indices, updates, name)


def scatter_min(ref, indices, updates, use_locking=False, name=None):
    """Rows ``indices`` of the variable become ``minimum(row, updates)``."""
    return _scatter("ScatterMin", ref, indices, updates, name)


def scatter_max(ref, indices, updates, use_locking=False, name=None):
    """Rows ``indices`` of the variable become ``maximum(row, updates)``."""
    return _scatter("ScatterMax", ref, indices, updates, name)


def is_variable_initialized(variable):
    ref = _ref_of(variable)
    with ref.graph.colocate_with(ref.op):
        return make("IsVariableInitialized", (ref,), None, None, "IsVariableInitialized")


# -- collections and initializers -------------------------------------------------------------
def global_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def local_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def trainable_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    """One op that runs the initializers of ``var_list``."""
    if not var_list:
        return no_op(name=name)
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    """A string tensor with the names of the uninitialized variables among ``var_list``."""
    if var_list is None:
        var_list = global_variables() + local_variables()
    graph = get_default_graph()
    refs = tuple(_ref_of(v) for v in var_list)
    return make("ReportUninitializedVariables", refs, None, name, graph=graph)


_install_variable_operators()
