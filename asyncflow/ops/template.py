"""TF1's ``tf.make_template``: a function whose variables are created on its first call and
shared by every later one.

Theory of operation (TF1's ``Template``, graph mode):
- The first call opens ``variable_scope(unique_name_, default_name=name_)`` (so two templates
  named alike get ``name``, ``name_1``) without reuse and calls the function; the scope is kept.
- Later calls re-enter that scope with ``reuse=True`` under a fresh name scope named after its
  last component (TF1's: ops of the second call go under ``name_1/``), so ``get_variable``
  returns the first call's variables; a trainable variable created by a later call (a
  ``tf.Variable`` where ``get_variable`` was meant) is refused with TF1's ValueError.
- ``create_scope_now_=True`` takes the (uniquified) variable scope at construction, without
  a name scope; every call then enters it (the first without reuse), so the first call's
  ops are already ``name_1/...`` as TF1's.
"""
from __future__ import annotations

import functools

from asyncflow.graph import GraphKeys
from asyncflow.graph.graph import get_default_graph
from asyncflow.ops import variable_scope as vs


def make_template(name_, func_, create_scope_now_=False, unique_name_=None,
                  custom_getter_=None, **kwargs):
    """TF1's ``tf.make_template``: ``func_`` (with ``kwargs`` bound) wrapped in a ``Template``
    that shares its ``get_variable`` variables across calls.

    Raises:
        ValueError: if ``name_`` is None.
        NotImplementedError: for ``custom_getter_`` (asyncflow's variable scopes have none).
    """
    if kwargs:
        func_ = functools.partial(func_, **kwargs)
    return Template(name_, func_, create_scope_now=create_scope_now_, unique_name=unique_name_,
                    custom_getter=custom_getter_)


class Template:
    """A function wrapped to create its variables once (see ``make_template``)."""

    def __init__(self, name, func, create_scope_now=False, unique_name=None,
                 custom_getter=None):
        if name is None:
            raise ValueError("name cannot be None.")
        if custom_getter is not None:
            raise NotImplementedError("make_template: custom_getter_ is not provided "
                                      "(asyncflow's variable scopes have no custom getters)")
        self._func = func
        self._name = name
        self._unique_name = unique_name
        self._variable_scope = None
        if create_scope_now:
            local = unique_name or vs.unique_variable_scope_name(name)
            with vs.variable_scope(local, auxiliary_name_scope=False) as scope:
                self._variable_scope = scope
        self._variables_created = False

    def __call__(self, *args, **kwargs):
        if self._variable_scope is None:
            with vs.variable_scope(self._unique_name, self._name) as scope:
                self._variable_scope = scope
                return self._call_func(args, kwargs)
        graph = get_default_graph()
        with graph.name_scope(self._variable_scope.name.split("/")[-1]):
            with vs.variable_scope(self._variable_scope, reuse=self._variables_created or None,
                                   auxiliary_name_scope=False):
                return self._call_func(args, kwargs)

    def _call_func(self, args, kwargs):
        if not self._variables_created:
            result = self._func(*args, **kwargs)
            self._variables_created = True
            return result
        trainable = get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES)
        at_start = len(trainable)
        result = self._func(*args, **kwargs)
        trainable = get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES)
        if len(trainable) != at_start:
            raise ValueError(f"Trainable variable created when calling a template after the "
                             f"first time, perhaps you used tf.Variable when you meant "
                             f"tf.get_variable: {trainable[at_start:]}")
        return result

    name = property(lambda self: self._name)
    func = property(lambda self: self._func)
    variable_scope = property(lambda self: self._variable_scope)
    var_scope = variable_scope

    @property
    def variable_scope_name(self):
        """The scope's name with a trailing ``/`` (TF1's; None before the scope exists)."""
        if self._variable_scope is None:
            return None
        name = self._variable_scope.name
        return name + "/" if name else name

    def _collection(self, key):
        if not self._variables_created:
            return []
        return get_default_graph().get_collection(key, self.variable_scope_name)

    global_variables = property(lambda self: self._collection(GraphKeys.GLOBAL_VARIABLES))
    trainable_variables = property(
        lambda self: self._collection(GraphKeys.TRAINABLE_VARIABLES))
    local_variables = property(lambda self: self._collection(GraphKeys.LOCAL_VARIABLES))
    variables = property(lambda self: self.global_variables + self.local_variables)
    non_trainable_variables = property(lambda self: [
        v for v in self.global_variables if v not in self.trainable_variables])
    weights = variables
    trainable_weights = trainable_variables
    non_trainable_weights = non_trainable_variables
