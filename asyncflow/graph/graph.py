"""Graph, Operation and Tensor: the dataflow graph that users build.

Theory of operation:
- A ``Graph`` is an append-only list of ``Operation``s. Each op has a unique name, a type
  string (a key of the op registry), attrs, ordered data inputs (``Tensor``s), control inputs
  (``Operation``s) and a requested device spec. Its outputs are ``Tensor``s ``"name:i"``.
- Shape and dtype inference run when the op is created (``Graph.create_op``), through the
  registry's ``infer`` function; a failure raises ValueError/TypeError naming the op.
- Build-time scopes (name scope, control dependencies, device, colocation) live in a per-graph
  ``ContextVar`` holding an immutable ``_Scopes`` record, so two trio tasks (or threads) may
  build in the same or in different graphs without seeing each other's scopes.
- The default graph is context-local too (``as_default``), over one process-wide fallback.
- Every op remembers where it was created (the first frame outside asyncflow), for errors.

This module never imports trio or anything of the runtime.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import operator
import os
import re
import sys
import types

from asyncflow import device_names as _devices
from asyncflow.graph import graph_def, registry
from asyncflow.graph.default_session import run_in_session as _run_in_session
from asyncflow.graph.keys import GraphKeys  # noqa: F401  (its home for the graph's users)
from asyncflow.graph.shape import as_shape

_VALID_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")
_VALID_SCOPE_NAME = re.compile(r"^[A-Za-z0-9_.\-/>]*$")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_graph_ids = itertools.count()
# A property's getter reading one private field, in C (accessors are on hot paths: a fetch's
# checks, the compile passes): as cheap as reading the field itself.
_field = operator.attrgetter


def _creation_site():
    """``(filename, lineno, function)`` of the first frame outside the asyncflow package."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, "<unknown>")
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


@dataclasses.dataclass(frozen=True, slots=True)
class _Scopes:
    """Build-time scope state of one graph in one context. Immutable: scopes push a new one."""

    name_scope: str = ""
    control_inputs: tuple = ()
    device_stack: tuple = ()          # strings or callables, outermost first
    colocate_with: object = None      # an Operation or None
    control_flow_context: object = None
    gradient_overrides: tuple = ()    # (op type, registered gradient name) pairs


class Tensor:
    """One output of an ``Operation``: a symbolic handle to a value computed in a run."""

    __slots__ = ("_op", "_value_index", "_dtype", "_shape", "_consumers", "_is_ref", "__weakref__")
    # numpy scalars defer to our reflected operators (np.float32(2) * t builds an op).
    __array_priority__ = 100

    def __init__(self, op, value_index, dtype, shape, is_ref=False):
        self._op = op
        self._value_index = value_index
        self._dtype = dtype
        self._shape = as_shape(shape)
        self._consumers = []
        self._is_ref = is_ref

    op = property(_field("_op"))
    value_index = property(_field("_value_index"))
    dtype = property(_field("_dtype"))
    graph = property(_field("_op._graph"))
    is_ref = property(_field("_is_ref"),
                      doc="True for a reference output (a Variable's, read by assigning ops).")
    device = property(_field("_op._device"))

    @property
    def name(self):
        return f"{self._op.name}:{self._value_index}"

    def eval(self, feed_dict=None, session=None):
        """TF1's ``t.eval()``: this tensor's value, computed by ``session`` or the default
        session (a synchronous one, ``asyncflow.compat.v1.Session``)."""
        return _run_in_session(self, "eval()", feed_dict, session)

    shape = property(_field("_shape"))

    def get_shape(self):
        return self._shape

    def set_shape(self, shape):
        """Merge ``shape`` into this tensor's static shape.

        Raises:
            ValueError: if the shapes are incompatible.
        """
        try:
            self._shape = self._shape.merge_with(shape)
        except ValueError as exc:
            raise ValueError(f"Tensor {self.name}: cannot set shape {as_shape(shape)}: {exc}") from None

    def consumers(self):
        """The ops reading this tensor (a new list, as TF1's)."""
        return list(self._consumers)

    def relax_shape(self, shape):
        """Replace the static shape with ``shape``, which may be less specific than the
        inferred one (a loop variable's shape invariant); ``set_shape`` only narrows."""
        self._shape = as_shape(shape)

    def __repr__(self):
        return f"<af.Tensor '{self.name}' shape={self._shape} dtype={self._dtype.name}>"

    def __bool__(self):
        raise TypeError("Using an af.Tensor as a Python bool is not allowed: the value is only "
                        "known when the graph runs. Use af.cond(pred, true_fn, false_fn) to "
                        "branch in the graph.")

    def __iter__(self):
        dims = self._shape.dims
        if dims is None or not dims or dims[0] is None:
            raise TypeError(f"Tensor {self.name} is not iterable: its first dimension is not "
                            "statically known. Use af.unstack with num=.")
        return (self[i] for i in range(dims[0]))

    def __len__(self):
        dims = self._shape.dims
        if dims is None or not dims or dims[0] is None:
            raise TypeError(f"len() of tensor {self.name} is unknown at graph-build time")
        return dims[0]

    # __eq__/__ne__ are deliberately not overloaded: tensors are hashable feed_dict keys.
    __hash__ = object.__hash__


# Operators are installed by asyncflow.ops.math (the graph layer cannot import ops).
OPERATOR_NAMES = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
    "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__", "__lt__", "__le__",
    "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
    "__invert__", "__getitem__",
)


def register_tensor_operators(table):
    """Install operator overloads on Tensor: ``{"__add__": fn, ...}``."""
    for name, fn in table.items():
        if name not in OPERATOR_NAMES:
            raise KeyError(f"{name} is not an overloadable Tensor operator")
        setattr(Tensor, name, fn)


class Operation:
    """A node of the graph."""

    __slots__ = ("_graph", "_id", "_name", "_type", "_inputs", "_control_inputs", "_attrs",
                 "_device", "_outputs", "_op_def", "_traceback", "_colocation",
                 "_control_outputs", "_control_flow_context", "__weakref__")

    def __init__(self, graph, op_id, name, op_type, inputs, control_inputs, attrs, device,
                 op_def, traceback):
        self._graph = graph
        self._id = op_id
        self._name = name
        self._type = op_type
        self._inputs = tuple(inputs)
        self._control_inputs = list(control_inputs)
        self._attrs = attrs
        self._device = device
        self._op_def = op_def
        self._traceback = traceback
        self._outputs = ()
        self._colocation = ()
        self._control_outputs = []
        self._control_flow_context = None

    name = property(_field("_name"))
    type = property(_field("_type"))
    graph = property(_field("_graph"))
    # The op's own tuples: reading them copies nothing (the graph's passes read them per op).
    outputs = property(_field("_outputs"), doc="The output tensors (a tuple).")
    control_inputs = property(lambda self: list(self._control_inputs))
    op_def = property(_field("_op_def"))
    traceback = property(_field("_traceback"),
                         doc="``(filename, lineno, function)`` where the user created the op.")
    seq = property(_field("_id"),
                   doc="The op's creation index in its graph (a deterministic order key).")
    control_flow_context = property(_field("_control_flow_context"),
                                    doc="The cond branch or while loop it is in, or None.")
    attrs = property(lambda self: types.MappingProxyType(self._attrs),
                     doc="The attrs, name -> value: a read-only view (no copy).")

    def run(self, feed_dict=None, session=None):
        """TF1's ``op.run()``: run this op in ``session`` or the default (synchronous) session."""
        _run_in_session(self, "run()", feed_dict, session)

    inputs = property(_field("_inputs"), doc="The input tensors, in order (a tuple; TF1's "
                      "``_InputList`` is no list either).")
    device = property(_field("_device"))

    colocation_groups = property(_field("_colocation"), doc="Names of the ops this "
                                 "op must share a device with (``loc:@name`` in TF1), a tuple.")

    control_outputs = property(lambda self: tuple(self._control_outputs),
                               doc="The ops that have this op as a control input.")

    def set_creation_site(self, traceback, colocation=None):
        """Set where the user made the op (``traceback``) and its colocation (an import)."""
        self._traceback = traceback
        if colocation is not None:
            self._colocation = tuple(colocation)

    def get_attr(self, name):
        """The value of attr ``name``.

        Raises:
            ValueError: naming the op and the missing attr.
        """
        try:
            return self._attrs[name]
        except KeyError:
            raise ValueError(f"Operation '{self._name}' ({self._type}) has no attr named "
                             f"{name!r}; it has {sorted(self._attrs)}") from None

    def add_control_input(self, op):
        """Make ``op`` a control input of this op (once)."""
        if op not in self._control_inputs:
            self._control_inputs.append(op)
            op._control_outputs.append(self)

    def remove_control_input(self, op):
        """Drop ``op`` from this op's control inputs (control flow re-routes the edge)."""
        self._control_inputs.remove(op)
        op._control_outputs.remove(self)

    def update_input(self, index, tensor):
        """Rewire input ``index`` to ``tensor`` (a loop's back edge, patched once the body
        exists)."""
        old = self._inputs[index]
        old._consumers.remove(self)
        inputs = list(self._inputs)
        inputs[index] = tensor
        self._inputs = tuple(inputs)
        tensor._consumers.append(self)

    def creation_site(self):
        filename, lineno, function = self._traceback
        return f"{filename}:{lineno} in {function}"

    def __repr__(self):
        return f"<af.Operation '{self._name}' type={self._type}>"


class Graph:
    """A dataflow graph: ops, collections and build-time scopes."""

    def __init__(self):
        self._id = next(_graph_ids)
        self._ops = []
        self._ops_by_name = {}
        self._names_in_use = {}
        self._collections = {}
        self._finalized = False
        self._scopes = contextvars.ContextVar(f"asyncflow_graph_scopes_{self._id}", default=_Scopes())
        self._seed = None
        self._last_op_seed = itertools.count()
        # Public: a dict where op families keep per-graph bookkeeping (control flow's loops,
        # the variable store), keyed by a name of their own, without a god object.
        self.extensions = {}

    id = property(_field("_id"), doc="A number unique to this graph in this process.")


    def find_operation(self, name):
        """The op named ``name``, or None (``get_operation_by_name`` raises instead)."""
        return self._ops_by_name.get(name)

    # -- defaults -----------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        """Make this graph the default in the current context."""
        token = _default_graph.set(self)
        try:
            yield self
        finally:
            _default_graph.reset(token)

    @property
    def finalized(self):
        return self._finalized

    def finalize(self):
        """Freeze the graph: adding an op afterwards raises RuntimeError."""
        self._finalized = True

    def next_op_seed(self):
        """The next op seed drawn for an op without one (TF1's per-graph counter)."""
        return next(self._last_op_seed)

    @property
    def seed(self):
        return self._seed

    @seed.setter
    def seed(self, value):
        self._seed = None if value is None else int(value)

    # -- lookups ------------------------------------------------------------------------
    def get_operations(self):
        return list(self._ops)

    def get_operation_by_name(self, name):
        """The op named ``name``.

        Raises:
            KeyError: if the graph has no such op.
        """
        if not isinstance(name, str):
            raise TypeError(f"Operation names are strings, not {type(name).__name__}")
        try:
            return self._ops_by_name[name]
        except KeyError:
            raise KeyError(f"The name {name!r} refers to an Operation not in the graph.") from None

    def get_tensor_by_name(self, name):
        """The tensor ``"op:i"``.

        Raises:
            ValueError: if ``name`` is not of the form ``op:i``.
            KeyError: if the op or the output does not exist.
        """
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise ValueError(f"The name {name!r} looks like an Operation name, not a Tensor name; "
                             "Tensor names have the form '<op_name>:<output_index>'.")
        op = self._ops_by_name.get(op_name)
        if op is None:
            raise KeyError(f"The name {name!r} refers to a Tensor which does not exist. "
                           f"The operation, {op_name!r}, does not exist in the graph.")
        index = int(index)
        if index >= len(op._outputs):
            raise KeyError(f"The name {name!r} refers to a Tensor which does not exist: "
                           f"operation {op_name!r} has {len(op._outputs)} outputs.")
        return op._outputs[index]

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """Resolve a Tensor, Operation, Variable-like or name into an element of this graph.

        Raises:
            TypeError: for an unsupported type.
            ValueError: if the element belongs to another graph.
        """
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, str):
            if ":" in obj and allow_tensor:
                return self.get_tensor_by_name(obj)
            if allow_operation:
                return self.get_operation_by_name(obj)
            raise ValueError(f"Name {obj!r} refers to an Operation, but a Tensor was expected")
        if isinstance(obj, Tensor) and allow_tensor:
            if obj.graph is not self:
                raise ValueError(f"Tensor {obj.name} is not an element of this graph.")
            return obj
        if isinstance(obj, Operation) and allow_operation:
            if obj.graph is not self:
                raise ValueError(f"Operation {obj.name} is not an element of this graph.")
            return obj
        raise TypeError(f"Can not convert a {type(obj).__name__} into a graph element "
                        "(expected a Tensor, Operation, Variable or name).")

    # -- collections --------------------------------------------------------------------
    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value):
        for name in ([names] if isinstance(names, str) else names):
            self.add_to_collection(name, value)

    def get_collection(self, name, scope=None):
        items = list(self._collections.get(name, ()))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [item for item in items if pattern.match(getattr(item, "name", ""))]

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])

    def get_all_collection_keys(self):
        return sorted(self._collections)

    def clear_collection(self, name):
        self._collections.pop(name, None)

    # -- names and scopes ---------------------------------------------------------------
    def current_scopes(self):
        """The build-time scopes of this context (an immutable ``_Scopes`` record: name
        scope, control inputs, device stack, colocation, control-flow context)."""
        return self._scopes.get()

    def gradient_override_map(self, op_type_map):
        """Ops of the mapped types created inside use the gradient registered under the new
        name (``RegisterGradient``) instead of their type's, as TF1's context manager."""
        pairs = dict(self.current_scopes().gradient_overrides)
        pairs.update(op_type_map)
        return self.push_scopes(gradient_overrides=tuple(pairs.items()))

    @contextlib.contextmanager
    def push_scopes(self, **changes):
        """Within the block, the build-time scopes with ``changes`` (fields of ``_Scopes``,
        e.g. ``control_flow_context=``): how control flow enters and leaves its contexts."""
        token = self._scopes.set(dataclasses.replace(self._scopes.get(), **changes))
        try:
            yield
        finally:
            self._scopes.reset(token)

    def get_name_scope(self):
        return self.current_scopes().name_scope.rstrip("/")

    def unique_name(self, name, mark_as_used=True):
        """``name`` under the current scope, suffixed ``_1``, ``_2``... until unused."""
        scope = self.current_scopes().name_scope
        if scope:
            name = scope + name
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base = name
            while name.lower() in self._names_in_use:
                name = f"{base}_{count}"
                count += 1
            if mark_as_used:
                self._names_in_use[name.lower()] = 1
        return name

    @contextlib.contextmanager
    def name_scope(self, name):
        """Prefix op names created inside with ``name/`` (uniquified like op names).

        A name ending in ``/`` re-enters that exact scope; ``None`` or ``""`` resets to the root.
        """
        if not name:
            new_scope = ""
        elif name.endswith("/"):
            if not _VALID_SCOPE_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid scope name")
            new_scope = name
        else:
            if not _VALID_SCOPE_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid scope name")
            new_scope = self.unique_name(name) + "/"
        with self.push_scopes(name_scope=new_scope):
            yield new_scope

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        """Ops created inside get ``control_inputs`` as control inputs; ``None`` clears."""
        if control_inputs is None:
            with self.push_scopes(control_inputs=()):
                yield
            return
        ops = []
        for item in control_inputs:
            if hasattr(item, "_as_graph_element"):
                item = item._as_graph_element()
            if hasattr(item, "op") and isinstance(getattr(item, "op"), Operation):
                item = item.op
            if not isinstance(item, Operation):
                raise TypeError(f"Control input must be an Operation or Tensor, got {item!r}")
            if item.graph is not self:
                raise ValueError(f"Control input {item.name} is from another graph")
            ops.append(item)
        current = self.current_scopes().control_inputs
        merged = current + tuple(op for op in ops if op not in current)
        with self.push_scopes(control_inputs=merged):
            yield

    @contextlib.contextmanager
    def device(self, spec):
        """Request a device for ops created inside; partial specs merge with outer scopes."""
        if spec is not None and not callable(spec):
            _devices.DeviceSpec.from_string(spec)  # validate now, name the bad spec
        stack = self.current_scopes().device_stack
        new_stack = () if spec is None else stack + (spec,)
        with self.push_scopes(device_stack=new_stack):
            yield

    @contextlib.contextmanager
    def colocate_with(self, op, ignore_existing=False):
        """Ops created inside share a device with ``op`` (a Tensor, Operation or Variable)."""
        if op is None:
            with self.push_scopes(colocate_with=None):
                yield
            return
        if hasattr(op, "_as_graph_element"):
            op = op._as_graph_element()
        if isinstance(op, Tensor):
            op = op.op
        with self.push_scopes(colocate_with=op):
            yield

    def _apply_device(self, op):
        spec = ""
        for entry in self.current_scopes().device_stack:
            requested = entry(op) if callable(entry) else entry
            if hasattr(requested, "to_string"):
                requested = requested.to_string()
            spec = _devices.merge(requested or "", spec)
        return spec

    # -- building -------------------------------------------------------------------------
    def create_op(self, op_type, inputs=(), attrs=None, name=None, control_inputs=(),
                  device=None):
        """Add an op: infer its output dtypes and shapes, and apply the current scopes.

        Args:
            op_type: a registered op type string.
            inputs: Tensors of this graph.
            attrs: a dict of plain values (ints, floats, strings, lists, numpy arrays, DTypes).
            name: a name (uniquified under the current name scope); defaults to ``op_type``.
            control_inputs: extra control dependencies.
            device: an explicit device spec for this op (merged over the scope's).

        Returns:
            The new Operation.

        Raises:
            RuntimeError: if the graph is finalized.
            ValueError/TypeError: from shape or dtype inference, naming the op.
        """
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified.")
        op_def = registry.get_op_def(op_type)
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TypeError(f"{op_type}: inputs must be Tensors, got {tensor!r}")
            if tensor.graph is not self:
                raise ValueError(f"{op_type} {name or ''}: input {tensor.name} is from a different "
                                 "graph; all inputs of an op must be in the same graph.")
        if name is not None and not _VALID_OP_NAME.match(name.split("/")[-1] or "x"):
            raise ValueError(f"{name!r} is not a valid op name: names match "
                             "[A-Za-z0-9.][A-Za-z0-9_.\\-/]*")
        scopes = self.current_scopes()
        if name is not None and name.endswith("/"):
            # TF1: a name scope string names the op exactly (``with name_scope(n) as scope``).
            unique = name[:-1]
            if unique in self._ops_by_name:
                raise ValueError(f"Duplicate node name in graph: {unique!r}")
            self._names_in_use.setdefault(unique.lower(), 1)
        else:
            unique = self.unique_name(name or op_type)
        input_ops = {t.op for t in inputs}
        controls = [c for c in scopes.control_inputs if c not in input_ops]
        for extra in control_inputs:
            extra = extra.op if isinstance(extra, Tensor) else extra
            if extra not in controls:
                controls.append(extra)
        op = Operation(self, len(self._ops), unique, op_type, inputs, controls, dict(attrs or {}),
                       "", op_def, _creation_site())
        try:
            specs = op_def.infer(op)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"{op_type} '{unique}': {exc}") from None
        op._outputs = tuple(Tensor(op, i, dtype, shape, is_ref=i in op_def.ref_outputs)
                            for i, (dtype, shape) in enumerate(specs))
        if scopes.colocate_with is not None:
            target = scopes.colocate_with
            op._colocation = target._colocation or (target.name,)
            op._device = target._device
        else:
            op._device = self._apply_device(op)
        if device is not None:
            op._device = _devices.merge(device, op._device)
        op._control_flow_context = scopes.control_flow_context
        if scopes.gradient_overrides:
            override = dict(scopes.gradient_overrides).get(op_type)
            if override is not None:
                op._attrs["_gradient_op_type"] = override  # TF1's attr for the override
        for tensor in inputs:
            tensor._consumers.append(op)
        for control in controls:
            control._control_outputs.append(op)
        self._ops.append(op)
        self._ops_by_name[unique] = op
        if scopes.control_flow_context is not None:
            scopes.control_flow_context.add_op(op)
        for tensor in op._inputs:  # a value computed in a loop must not escape it (TF1)
            source = tensor.op._control_flow_context
            if source is not None and source is not scopes.control_flow_context:
                source.check_use(tensor, op, scopes.control_flow_context)
        return op

    def as_graph_def(self, add_shapes=False):
        """This graph as plain, msgpack-ready data (see ``graph/graph_def.py``)."""
        return graph_def.as_graph_def(self, add_shapes=add_shapes)

    def __repr__(self):
        return f"<af.Graph #{self._id} with {len(self._ops)} ops>"


_global_default_graph = Graph()
_default_graph = contextvars.ContextVar("asyncflow_default_graph", default=None)


def get_default_graph():
    """The context's default graph (the process-wide one unless ``as_default`` is active)."""
    graph = _default_graph.get()
    return graph if graph is not None else _global_default_graph


def reset_default_graph():
    """Replace the process-wide default graph with a new, empty one.

    Raises:
        AssertionError-like RuntimeError: if called inside a ``with g.as_default()`` block.
    """
    global _global_default_graph
    if _default_graph.get() is not None:
        raise RuntimeError("Do not use reset_default_graph() to clear a graph that is the "
                           "default in a nested `with graph.as_default()` block.")
    _global_default_graph = Graph()
