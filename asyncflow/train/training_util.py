"""The global step: one int64 variable per graph counting training steps (TF1's rules).

It lives in the ``GLOBAL_STEP`` collection (and ``GLOBAL_VARIABLES``, so the initializer and
savers cover it), is not trainable, and is created at the root name scope with no control
dependencies, whatever scope the caller is in.
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph import GraphKeys, get_default_graph
from asyncflow.ops.state import Variable


def get_global_step(graph=None):
    """The global step variable of ``graph`` (default: the default graph), or None.

    Raises:
        TypeError: if the ``GLOBAL_STEP`` collection holds more than one variable, or a
            variable that is not an integer scalar.
    """
    graph = graph or get_default_graph()
    items = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if not items:
        return None
    if len(items) > 1:
        raise TypeError(f"Multiple global steps in collection {GraphKeys.GLOBAL_STEP!r}: "
                        f"{[getattr(v, 'name', v) for v in items]}")
    step = items[0]
    if not step.dtype.is_integer or step.shape.ndims not in (None, 0):
        raise TypeError(f"Existing global step {step.name} must be an integer scalar, has "
                        f"dtype {step.dtype.name} and shape {step.shape}")
    return step


def create_global_step(graph=None):
    """Create the global step variable (int64, starting at 0) in ``graph``.

    Raises:
        ValueError: if the graph already has one.
    """
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError("global_step already exists.")
    with graph.as_default(), graph.name_scope(""), graph.control_dependencies(None):
        return Variable(np.int64(0), trainable=False, name="global_step",
                        collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph=None):
    """The global step variable of ``graph``, created if it does not exist yet."""
    graph = graph or get_default_graph()
    step = get_global_step(graph)
    return create_global_step(graph) if step is None else step
