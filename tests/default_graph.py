"""Each test on a fresh default graph, and one Session run on it.

``fresh_graph`` is an autouse fixture: a test module that imports it
(``from default_graph import fresh_graph  # noqa: F401 (autouse fixture)``) starts every one of
its tests on a new empty default graph, so names (``add``, ``add_1``, ...) and collections never
carry over from an earlier test, and leaves another one behind it: a later module's test that
builds on the default graph never finds it finalized (a ``MonitoredTrainingSession`` finalizes
its graph, as TF1's does) or full. ``session_run(fetches, feed_dict)`` runs ``fetches`` once in a
new ``tf.Session`` on that graph; ``initialize=True`` runs ``tf.global_variables_initializer()``
first.

Import from tests as ``from default_graph import fresh_graph, session_run`` (pytest puts the
tests directory on ``sys.path``).
"""
from __future__ import annotations

import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    af.reset_default_graph()
    yield
    af.reset_default_graph()


def session_run(fetches, feed_dict=None, *, initialize=False):
    """``fetches``' values from one run of a new Session on the default graph."""
    with tf.Session() as session:
        if initialize:
            session.run(tf.global_variables_initializer())
        return session.run(fetches, feed_dict)
