"""A VariableV2 node finds its resource once per resource-manager epoch (``exec/context.py``):
a reset container still gives later steps a fresh, uninitialized variable, and the node does
not keep the reset variable's buffer alive."""
import gc
import weakref

import numpy as np
import pytest

import asyncflow as af
from asyncflow.exec.resources import ResourceManager, VariableResource, process_resources
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import make
from one_device import plan_of_ops


@pytest.fixture
def graph():
    with af.Graph().as_default() as g:
        yield g


async def test_a_shared_variable_reset_between_steps_is_found_afresh(graph):
    v = af.Variable(np.arange(3.0, dtype=np.float32), shared_name="r37entry_reset_v")
    bump = v.assign_add(np.ones(3, np.float32))
    async with af.Session() as sess:
        await sess.run(v.initializer)
        np.testing.assert_array_equal(await sess.run(bump), [1.0, 2.0, 3.0])
        old = weakref.ref(process_resources().lookup("", "r37entry_reset_v"))
        await af.Session.reset()  # the process-wide containers, where shared names live
        gc.disable()
        try:
            assert old() is None  # freed by reference counting: no node keeps it
        finally:
            gc.enable()
        with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized"):
            await sess.run(bump)
        await sess.run(v.initializer)
        np.testing.assert_array_equal(await sess.run(bump), [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(await sess.run(v), [1.0, 2.0, 3.0])
        assert process_resources().lookup("", "r37entry_reset_v") is not old()
    await af.Session.reset()


async def test_each_session_finds_its_own_variable(graph):
    v = af.Variable(1.0)
    bump = v.assign_add(1.0)
    for _ in range(2):  # a fresh session: a fresh manager, the same graph's node names
        async with af.Session() as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(bump)
            await sess.run(v.initializer)
            assert [await sess.run(bump) for _ in range(3)] == [2.0, 3.0, 4.0]


async def test_a_reset_variable_still_held_elsewhere_is_not_used_again(graph):
    """Something else (here the test) holding the reset resource: the node still looks up
    the fresh one, by the manager's epoch."""
    v = af.Variable(5.0, shared_name="r37entry_held_v")
    async with af.Session() as sess:
        await sess.run(v.initializer)
        assert await sess.run(v) == 5.0
        held = process_resources().lookup("", "r37entry_held_v")
        await af.Session.reset()
        with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized"):
            await sess.run(v)
        assert held.value == 5.0  # the old resource, untouched
        await sess.run(v.initializer)
        assert await sess.run(v) == 5.0
    await af.Session.reset()


class _LooksUpWhileReset:
    """A resource whose ``close_for_reset`` looks the variable up: the lookup another thread
    (a step's VariableV2 on a worker thread, ``exec/thread_step.py``, or a ``compat.v1``
    caller's loop-free step) may make while the loop thread is in the middle of a reset."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.seen = None

    def close_for_reset(self):
        self.seen = self.ctx.variable_resource()


def test_a_lookup_made_while_a_reset_runs_is_not_kept_past_it(graph):
    """The reset drops container "a" (whose resource looks the variable up meanwhile) before
    container "b", where the variable lives: that lookup still finds the old variable, and
    must not be kept once the reset has dropped it too."""
    var = make("VariableV2", (), {"dtype": af.float32, "shape": TensorShape([2]),
                                  "container": "b", "shared_name": ""}, name="v")
    plan = plan_of_ops([var.op], [], [var])
    ctx = next(node.ctx for node in plan.nodes if node.op.type == "VariableV2")
    manager = ctx.resources
    looker = manager.lookup_or_create("a", "looker", lambda: _LooksUpWhileReset(ctx))
    old = ctx.variable_resource()
    assert manager.containers() == ["a", "b"]
    manager.reset()
    assert looker.seen is old  # the lookup ran while "b" was still there
    fresh = ctx.variable_resource()  # ``old`` is still alive (held here)
    assert fresh is not old
    assert manager.lookup("b", "v") is fresh


def test_two_lookups_creating_one_variable_at_once_get_the_same_one():
    """Two threads' first steps creating one variable at once (hogwild ``compat.v1`` callers
    before anything initialized it): the one that stores second must take the first one's
    resource, not replace it (the first would go on updating a variable no manager holds).
    The competing creation runs inside the first's factory, as a thread switch there would."""
    manager = ResourceManager(local=True)
    inner = []

    def first():
        inner.append(manager.lookup_or_create("", "v", lambda: VariableResource("v", None, None)))
        return VariableResource("v", None, None)

    outer = manager.lookup_or_create("", "v", first)
    assert outer is inner[0]
    assert manager.lookup("", "v") is outer
