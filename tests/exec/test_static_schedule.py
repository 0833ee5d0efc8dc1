"""The generated straight-line schedule (``codegen.compile_schedule``), run by hand.

The plan is compiled directly and its step function awaited with plain callables, so these
tests see the generated function itself: what it keeps per node (its size must not grow with
the graph: issue 18's per-op cost flat in graph size), when values die, and which node a
failure names.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import errors
from asyncflow.compile import prune
from asyncflow.exec.codegen import compile_schedule
from lifetimes import lifetimes_graph
from one_device import plan_of_ops


def static_plan(fetches, feeds):
    ops = prune.prune(list(fetches), [], list(feeds))
    plan = plan_of_ops(ops, feeds, fetches)
    assert plan.static
    return plan


async def run_by_hand(plan, feed_values):
    slots = [None] * (plan.num_slots + 1)
    slots[:len(feed_values)] = feed_values
    await compile_schedule(plan)(slots, None, None, trio.lowlevel.checkpoint)
    return [slots[slot] for slot in plan.fetch_slots]


def chain_plan(length):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1], name="x")
        y = x
        for _ in range(length):
            y = y + 1.0
    return static_plan([y], [x])


def test_what_the_schedule_keeps_per_node_does_not_grow_with_the_graph():
    small, large = (compile_schedule(chain_plan(n)) for n in (300, 3000))
    # One local per value alive at once (a chain holds one), not one per value ever made:
    # the frame, and its clearing at the end of every run, stays the same size.
    assert small.__code__.co_nlocals == large.__code__.co_nlocals <= 7  # (5 of them arguments)
    # One global per distinct kernel (plus the node's context), no constant per node.
    for fn in (small, large):
        assert sorted(name for name in fn.__globals__ if name.startswith("F")) == ["F_Add"]
    assert len(large.__code__.co_consts) == len(small.__code__.co_consts)
    # The code itself: the same bytes per node at either size.
    per_node = [len(fn.__code__.co_code) / n for fn, n in ((small, 300), (large, 3000))]
    assert per_node[1] == pytest.approx(per_node[0], rel=0.02)


async def test_a_chain_runs_by_hand_to_its_value():
    (value,) = await run_by_hand(chain_plan(300), [np.zeros([1], np.float32)])
    assert value.tolist() == [300.0]


async def test_a_value_dies_right_after_its_last_reader():
    # ``total`` is the last reader of both values: one takes its local, one is cleared.
    x, check, total = lifetimes_graph()
    plan = static_plan([check, total], [x])
    checked, summed = await run_by_hand(plan, [np.zeros([4], np.float32)])
    assert summed.tolist() == [3.0] * 4
    assert checked.tolist() == [False, False]


@pytest.mark.parametrize("position", [0, 37, 99])
async def test_a_failure_names_its_node_wherever_it_sits(position):
    def fail(x):
        raise ValueError("boom")

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1], name="x")
        y = x
        for index in range(100):
            if index == position:
                y = af.py_func(fail, [y], af.float32, name="the_failing_op")
            else:
                y = y + 1.0
    plan = static_plan([y], [x])
    with pytest.raises(errors.InvalidArgumentError, match="PyFunc 'the_failing_op'") as caught:
        await run_by_hand(plan, [np.zeros([1], np.float32)])
    assert caught.value.op.name == "the_failing_op"
    assert isinstance(caught.value.__cause__, ValueError)

    # and through a session, the error a user sees names the op
    with x.graph.as_default():
        async with af.Session() as sess:
            with pytest.raises(errors.OpError, match="the_failing_op"):
                await sess.run(y, {x: np.zeros([1], np.float32)})
