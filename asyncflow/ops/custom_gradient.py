"""TF1's ``tf.custom_gradient`` in graph mode: a function's forward ops with a gradient the
user gives.

Theory of operation (TF1's ``_graph_mode_decorator``): the decorated ``f(*args)`` returns
``(result, grad_fn)``. The result's tensors, the (converted) arguments and the variables that
the forward ops read between the arguments and the result go through one ``IdentityN`` op,
built inside ``gradient_override_map({"IdentityN": "CustomGradient-N"})``, whose gradient
(registered under that name) calls ``grad_fn(*result_grads)`` and routes its answers to the
arguments (``tf.gradients`` then never looks inside ``f``'s ops); with variables,
``grad_fn(*result_grads, variables=[...])`` returns ``(input_grads, variable_grads)``. The
caller gets the IdentityN's outputs in the result's structure.

As TF1 with v2 behaviour off (its variables are not resource variables), a variable created
inside ``f`` is refused (TypeError), and a ``grad_fn`` without a ``variables`` argument is
refused when the forward ops read variables.
"""
from __future__ import annotations

import functools
import inspect
import itertools

from asyncflow.graph import GraphKeys
from asyncflow.graph.graph import get_default_graph
from asyncflow.graph.registry import RegisterGradient
from asyncflow.ops.array import identity, identity_n
from asyncflow.ops.construct import as_tensor

_UIDS = itertools.count(1)


def custom_gradient(f=None):
    """TF1's ``@tf.custom_gradient``: ``f(*args) -> (result, grad_fn)`` (see the module's
    docstring); usable as ``@custom_gradient`` or ``custom_gradient(f)``."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        return _graph_mode(f, args, kwargs)
    return decorated


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    return [value]


def _pack(structure, flat):
    if isinstance(structure, (list, tuple)):
        out = []
        for item in structure:
            packed, flat = _pack(item, flat)
            out.append(packed)
        return type(structure)(out) if isinstance(structure, list) else tuple(out), flat
    return flat[0], flat[1:]


def _all_variables(graph):
    return graph.get_collection(GraphKeys.GLOBAL_VARIABLES) + \
        graph.get_collection(GraphKeys.LOCAL_VARIABLES)


def _dependent_variables(graph, inputs, outputs):
    """The variables whose ops lie on the backward walk from ``outputs`` to ``inputs``."""
    stop = {id(t) for t in inputs}
    seen, stack, names = set(), [t.op for t in outputs], set()
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.type == "VariableV2":
            names.add(op.name)
        stack.extend(t.op for t in op.inputs if id(t) not in stop)
    return [v for v in _all_variables(graph) if v.op.name in names]


def _graph_mode(f, args, kwargs):
    name = f"CustomGradient-{next(_UIDS)}"
    args = [as_tensor(a) for a in args]
    graph = get_default_graph()
    before = {id(v) for v in _all_variables(graph)}
    result, grad_fn = f(*args, **kwargs)
    new = [v for v in _all_variables(graph) if id(v) not in before]
    if new:
        raise TypeError("All variables used by a function wrapped with @custom_gradient must "
                        "be `ResourceVariable`s. Ensure that no `variable_scope` is created "
                        f"with `use_resource=False`. (custom_gradient: {f.__name__} created "
                        f"{[v.name for v in new]})")
    flat_result = [as_tensor(t) for t in _flatten(result)]
    # TF1's walk starts from an Identity of each result (named as TF1's, never run)
    walk_from = [identity(t) for t in flat_result]
    variables = sorted(_dependent_variables(graph, args, walk_from), key=lambda v: v.name)
    spec = inspect.getfullargspec(grad_fn)
    takes_variables = "variables" in spec.args or "variables" in spec.kwonlyargs or spec.varkw
    if variables and not takes_variables:
        raise TypeError("@tf.custom_gradient grad_fn must accept keyword argument 'variables', "
                        f"since function uses variables: {variables}")
    count = len(flat_result)

    @RegisterGradient(name)
    def _grad(op, *result_grads):
        result_grads = result_grads[:count]
        if variables:
            input_grads, variable_grads = grad_fn(*result_grads, variables=variables)
            if len(variable_grads) != len(variables):
                raise ValueError("Must return gradient for each variable from "
                                 "@custom_gradient grad_fn.")
        else:
            input_grads, variable_grads = grad_fn(*result_grads), []
        input_grads = _flatten(input_grads)
        if len(input_grads) != len(args):
            raise ValueError(f"custom_gradient: {f.__name__}'s grad_fn returned "
                             f"{len(input_grads)} gradients for {len(args)} inputs")
        return [None] * count + list(input_grads) + list(variable_grads)

    with graph.gradient_override_map({"IdentityN": name}):
        outputs = identity_n(flat_result + args + variables)
    packed, _ = _pack(result, outputs[:count])
    return packed if isinstance(result, (list, tuple)) else outputs[0]



