"""Variable scopes and ``get_variable`` with TF1's sharing rules.

Theory of operation:
- Each graph has one ``_VariableStore`` (``graph.extensions["variable_store"]``, created on
  first use). It maps full variable names (``"layer1/w"``) to the ``Variable`` that
  ``get_variable`` created, counts how often each variable-scope name was opened (to
  uniquify ``default_name`` scopes as TF1 does), and holds the current ``VariableScope`` in
  a ContextVar, so trio tasks building in the same graph each see their own scope stack.
- ``variable_scope(name)`` pushes a scope named ``parent/name`` and opens a name scope of the
  same name (uniquified for ops, so re-entering gives ``name_1/`` op names while variables keep
  ``name/``). Passing a ``VariableScope`` object jumps to that scope (not nested) and opens a
  fresh name scope named after its last component (TF1's), keeping its original name scope.
- Reuse: ``True`` is inherited by sub-scopes and requires the variable to exist; ``None`` (and
  ``False``, treated as None as in TF1) forbids re-creation; ``AUTO_REUSE`` creates or returns.
- Variable names ignore name scopes: ``get_variable("w")`` in ``variable_scope("a")`` is
  ``a/w`` even inside ``name_scope("b")``. The initializer's ops go under ``a/w/Initializer/``.
"""
from __future__ import annotations

import contextlib
import contextvars
import enum
import inspect

from asyncflow import dtypes
from asyncflow.graph.graph import Tensor, get_default_graph
from asyncflow.graph.keys import GraphKeys
from asyncflow.ops import init_ops
from asyncflow.ops import partitioned_variables as partitioned
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.ops.state import Variable


class _ReuseMode(enum.Enum):
    AUTO_REUSE = 1


AUTO_REUSE = _ReuseMode.AUTO_REUSE


class VariableScope:
    """A variable scope's settings: name, reuse, default initializer and dtype."""

    def __init__(self, reuse, name="", initializer=None, dtype=dtypes.float32,
                 name_scope="", regularizer=None, partitioner=None):
        self._partitioner = partitioner
        self._reuse = reuse
        self._name = name
        self._initializer = initializer
        self._dtype = dtypes.as_dtype(dtype)
        self._name_scope = name_scope
        self._regularizer = regularizer

    name = property(lambda self: self._name)
    reuse = property(lambda self: self._reuse)
    initializer = property(lambda self: self._initializer)
    dtype = property(lambda self: self._dtype)
    regularizer = property(lambda self: self._regularizer)
    partitioner = property(lambda self: self._partitioner)

    def set_partitioner(self, partitioner):
        self._partitioner = partitioner
    original_name_scope = property(lambda self: self._name_scope)

    def reuse_variables(self):
        """Switch this scope (and scopes nested in it afterwards) to reuse mode."""
        self._reuse = True

    def set_initializer(self, initializer):
        self._initializer = initializer

    def set_dtype(self, dtype):
        self._dtype = dtypes.as_dtype(dtype)

    def get_variable(self, name, *args, **kwargs):
        """``af.get_variable`` in this scope (even when it is not the current one)."""
        store = _store(get_default_graph())
        token = store.current.set(self)
        try:
            return get_variable(name, *args, **kwargs)
        finally:
            store.current.reset(token)

    def __repr__(self):
        return f"<af.VariableScope {self._name!r} reuse={self._reuse}>"


class _VariableStore:
    """Per-graph state of ``get_variable``: created variables, scope counts, current scope."""

    def __init__(self, graph_id):
        self.variables = {}
        self.scope_counts = {}
        self.current = contextvars.ContextVar(f"asyncflow_variable_scope_{graph_id}",
                                              default=VariableScope(False))

    def open_scope(self, name):
        self.scope_counts[name] = self.scope_counts.get(name, 0) + 1

    def close_subscopes(self, name):
        for key in self.scope_counts:
            if not name or key.startswith(name + "/"):
                self.scope_counts[key] = 0

    def unique_scope_name(self, parent, prefix):
        full = f"{parent}/{prefix}" if parent else prefix
        if not self.scope_counts.get(full):
            return prefix
        index = 1
        while self.scope_counts.get(f"{full}_{index}"):
            index += 1
        return f"{prefix}_{index}"


def _store(graph):
    store = graph.extensions.get("variable_store")
    if store is None:
        store = graph.extensions["variable_store"] = _VariableStore(graph.id)
    return store


def unique_variable_scope_name(prefix):
    """``prefix``, or ``prefix_N``, unique among the current variable scope's sub-scopes (as
    ``default_name`` scopes are uniquified; TF1's ``_get_unique_variable_scope``)."""
    store = _store(get_default_graph())
    return store.unique_scope_name(store.current.get().name, prefix)


def get_variable_scope():
    """The current ``VariableScope`` of the default graph (the root scope has name ``""``)."""
    return _store(get_default_graph()).current.get()


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None,
                   regularizer=None, reuse=None, dtype=None, auxiliary_name_scope=True,
                   partitioner=None):
    """Open a variable scope (and a name scope of the same name) for ``get_variable``.

    Args:
        name_or_scope: a name (nested under the current scope) or a ``VariableScope`` (entered
            as is).
        default_name: used, uniquified (``dense``, ``dense_1``...), when ``name_or_scope`` is
            None.
        values: tensors whose graph to use (default: the default graph).
        initializer: the default initializer for variables created inside.
        reuse: True, ``AUTO_REUSE`` or None/False (inherit; True is inherited by sub-scopes).
        dtype: the default dtype for variables created inside.
        partitioner: the default partitioner for variables created inside.

    Yields:
        The new ``VariableScope``.

    Raises:
        TypeError: if both ``name_or_scope`` and ``default_name`` are None.
        ValueError: if ``reuse=True`` is used with ``default_name`` only.
    """
    if name_or_scope is None and default_name is None:
        raise TypeError("If default_name is None then name_or_scope is required")
    if reuse is False:
        reuse = None  # TF1: non-inheriting scopes are not allowed; False means "inherit".
    if name_or_scope is None and reuse:
        raise ValueError("reuse=True cannot be used without a name_or_scope")
    graph = graph_of(values or ())
    store = _store(graph)
    old = store.current.get()
    if isinstance(name_or_scope, VariableScope):
        new_name = name_or_scope.name
        new_reuse = reuse if reuse else name_or_scope.reuse
        # TF1's: a fresh name scope named after the scope's last component (``name_1/`` ops
        # when ``name/`` was used); the scope keeps its original name scope.
        name_scope_name = name_or_scope.name.split("/")[-1] or None
        template = name_or_scope
    else:
        local = name_or_scope if name_or_scope is not None else \
            store.unique_scope_name(old.name, default_name)
        new_name = f"{old.name}/{local}" if old.name else local
        new_reuse = reuse or old.reuse
        # TF1's: a default_name scope's name scope is ``default_name`` uniquified among name
        # scopes (``dense_2/`` ops for variable scope ``dense_1`` where ``dense_1/`` was used).
        name_scope_name = name_or_scope if name_or_scope is not None else default_name
        template = old
    with contextlib.ExitStack() as stack:
        if auxiliary_name_scope:
            opened = stack.enter_context(graph.name_scope(name_scope_name))
            if isinstance(name_or_scope, VariableScope):
                opened = name_or_scope.original_name_scope
        else:
            opened = template.original_name_scope
        scope = VariableScope(
            new_reuse, new_name,
            initializer if initializer is not None else template.initializer,
            dtype if dtype is not None else template.dtype, opened,
            regularizer if regularizer is not None else template.regularizer,
            partitioner if partitioner is not None else template.partitioner)
        saved_counts = dict(store.scope_counts) if isinstance(name_or_scope, VariableScope) \
            else None
        store.open_scope(new_name)
        token = store.current.set(scope)
        try:
            yield scope
        finally:
            store.current.reset(token)
            if saved_counts is not None:
                store.scope_counts = saved_counts
            else:
                store.close_subscopes(new_name)


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None,
                 trainable=True, collections=None, validate_shape=True, partitioner=None,
                 **unsupported):
    """Create a variable ``scope/name``, or return it when the scope reuses variables.

    Args:
        name: the variable's name within the current variable scope.
        shape: its shape (fully defined when creating, unless ``initializer`` is a value).
        dtype: its dtype (default: the scope's, float32).
        initializer: an initializer (``init(shape, dtype)``), a Tensor or a numpy-convertible
            value; default: the scope's, else glorot_uniform (floats) or zeros (ints, bools).
        regularizer: ``fn(variable) -> Tensor`` added to the ``regularization_losses``
            collection.
        trainable: also add it to ``TRAINABLE_VARIABLES``.
        collections: collections to add it to (default ``[GLOBAL_VARIABLES]``).
        partitioner: ``fn(shape=, dtype=) -> partitions per dim`` (default: the scope's); when
            it cuts the variable, its parts ``name/part_i`` are created and a
            ``PartitionedVariable`` is returned (see ops/partitioned_variables.py).

    Returns:
        An ``af.Variable``, or a ``PartitionedVariable``.

    Raises:
        ValueError: "Variable ... already exists, disallowed" when re-created without reuse;
            "Variable ... does not exist" under ``reuse=True``; shape or dtype mismatches when
            sharing; a shape that is not fully defined.
        TypeError: for an unsupported keyword (custom_getter, ...).
    """
    if unsupported:
        raise TypeError(f"get_variable: unsupported arguments {sorted(unsupported)}")
    graph = get_default_graph()
    store = _store(graph)
    scope = store.current.get()
    full_name = f"{scope.name}/{name}" if scope.name else name
    requested_dtype = dtypes.as_dtype(dtype) if dtype is not None else None
    existing = store.variables.get(full_name)
    if existing is not None:
        if scope.reuse is not True and scope.reuse is not AUTO_REUSE:
            site = (existing[0] if hasattr(existing, "_get_variable_list") else existing) \
                .op.creation_site()
            raise ValueError(f"Variable {full_name} already exists, disallowed. Did you mean to "
                             f"set reuse=True or reuse=af.AUTO_REUSE in VarScope? Originally "
                             f"defined at:\n\n  {site}")
        return _check_shared(existing, full_name, shape, requested_dtype)
    if scope.reuse is True:
        raise ValueError(f"Variable {full_name} does not exist, or was not created with "
                         f"af.get_variable(). Did you mean to set reuse=af.AUTO_REUSE in "
                         f"VarScope?")
    if initializer is None:
        initializer = scope.initializer
    partitioner = partitioner if partitioner is not None else scope.partitioner
    if partitioner is not None and (initializer is None or callable(initializer)):
        variable = _create_partitioned(graph, full_name, shape, requested_dtype or scope.dtype,
                                       initializer, partitioner, trainable, collections)
    else:
        variable = _create(graph, full_name, shape, requested_dtype, scope.dtype, initializer,
                           trainable, collections, validate_shape)
    store.variables[full_name] = variable
    regularizer = regularizer if regularizer is not None else scope.regularizer
    if regularizer is not None:
        with graph.name_scope(full_name + "/Regularizer/"):
            loss = regularizer(variable)
        if loss is not None:
            graph.add_to_collection("regularization_losses", loss)
    return variable


def get_local_variable(name, shape=None, dtype=None, initializer=None, regularizer=None,
                       trainable=False, collections=None, validate_shape=True, partitioner=None,
                       **unsupported):
    """TF1's ``tf.get_local_variable``: ``get_variable`` of a variable in ``LOCAL_VARIABLES``
    (and ``collections``), never trainable (``trainable`` is ignored, as TF1's)."""
    del trainable
    collections = list(collections or []) + [GraphKeys.LOCAL_VARIABLES]
    return get_variable(name, shape, dtype, initializer, regularizer, trainable=False,
                        collections=collections, validate_shape=validate_shape,
                        partitioner=partitioner, **unsupported)


def _check_shared(variable, full_name, shape, dtype):
    if shape is not None and not variable.shape.is_compatible_with(_as_dims(shape)):
        raise ValueError(f"Trying to share variable {full_name}, but specified shape "
                         f"{_as_dims(shape)} and found shape {variable.shape.as_list()}.")
    if dtype is not None and dtype is not variable.dtype:
        raise ValueError(f"Trying to share variable {full_name}, but specified dtype "
                         f"{dtype.name} and found dtype {variable.dtype.name}.")
    return variable


def _as_dims(shape):
    if hasattr(shape, "as_list"):
        return shape.as_list()
    return [shape] if isinstance(shape, int) else list(shape)


def _create(graph, full_name, shape, requested_dtype, scope_dtype, initializer, trainable,
            collections, validate_shape):
    """A new Variable named exactly ``full_name``, outside name scopes and control deps."""
    from_value = initializer is not None and not callable(initializer)
    dtype = requested_dtype
    if from_value:
        if shape is not None:
            raise ValueError(f"Variable {full_name}: if initializer is a constant, do not "
                             "specify shape.")
        value = initializer

        def initial_value():
            return value if isinstance(value, Tensor) else as_tensor(value, dtype=dtype)
    else:
        dtype = dtype or scope_dtype
        dims = None if shape is None else _as_dims(shape)
        if dims is None or any(d is None for d in dims):
            raise ValueError(f"Shape of a new variable ({full_name}) must be fully defined, "
                             f"but instead was {dims}.")
        initializer = initializer or _default_initializer(full_name, dtype)

        def initial_value():
            with graph.name_scope("Initializer"):
                return _call_initializer(initializer, dims, dtype)
    # The variable's op names follow its variable scope, not the enclosing name scopes; its
    # initializer must not wait for the enclosing control dependencies, nor live in an
    # enclosing while loop or cond (TF1's init_scope: an RNN cell built in a loop body).
    with graph.name_scope(None), graph.control_dependencies(None), \
            graph.push_scopes(control_flow_context=None):
        return Variable(initial_value, trainable=trainable, collections=collections,
                        validate_shape=validate_shape, name=full_name + "/", dtype=dtype)


def _create_partitioned(graph, full_name, shape, dtype, initializer, partitioner, trainable,
                        collections):
    """``full_name/part_i`` Variables, each initialized with its PartitionInfo."""
    dims = None if shape is None else _as_dims(shape)
    if dims is None or any(d is None for d in dims):
        raise ValueError(f"Shape of a new partitioned variable ({full_name}) must be fully "
                         f"defined, but instead was {dims}.")
    partitions = partitioned.check_partitions(full_name, dims,
                                              partitioner(shape=dims, dtype=dtype))
    initializer = initializer or _default_initializer(full_name, dtype)
    parts = []
    for index, (offset, part_shape) in enumerate(partitioned.part_slices(dims, partitions)):
        info = partitioned.PartitionInfo(dims, offset)

        def initial_value(part_shape=part_shape, info=info):
            with graph.name_scope("Initializer"):
                return _call_initializer(initializer, part_shape, dtype, info)
        with graph.name_scope(None), graph.control_dependencies(None), \
                graph.push_scopes(control_flow_context=None):
            part = Variable(initial_value, trainable=trainable, collections=collections,
                            name=f"{full_name}/part_{index}/", dtype=dtype)
        part._save_slice_info = partitioned.SaveSliceInfo(full_name, dims, offset, part_shape)
        parts.append(part)
    return partitioned.PartitionedVariable(full_name, dims, dtype, parts, partitions)


def _default_initializer(full_name, dtype):
    if dtype.is_floating:
        return init_ops.GlorotUniform()
    if dtype.is_integer or dtype.is_bool:
        return init_ops.Zeros()
    raise ValueError(f"An initializer for variable {full_name} of {dtype.name} is required")


def _call_initializer(initializer, dims, dtype, partition_info=None):
    try:
        parameters = inspect.signature(initializer).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "partition_info" in parameters:
        return initializer(dims, dtype=dtype, partition_info=partition_info)
    return initializer(dims, dtype=dtype)

