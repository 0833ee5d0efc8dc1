"""A step's state is freed by reference counting when it ends, not left to the cyclic GC.

A step that leaves its propagator in reference cycles makes every step garbage for the
cyclic collector: a generation-0 collection every few steps and, every few thousand, a full
collection of tens of ms in the middle of a step.
"""
import dataclasses

import pytest

import asyncflow as af
from cyclic_garbage import cyclic_garbage

STEP_STATE = {"Frames", "_Frame", "_Iteration", "FrameStatistics", "Own", "Run", "Step",
              "LocalRendezvous"}


def _loop():
    """``(graph, x, total, expected at x = 2)``: a three-iteration while loop summing ``x``."""
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [], name="x")
        _, total = af.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc + x),
                                 [af.constant(0), af.constant(0.0)])
    return graph, x, total, 6.0


def _nested_loops_and_a_cond():
    """The same with a two-iteration loop inside each iteration, a cond after."""
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [], name="x")

        def outer(i, acc):
            _, inner = af.while_loop(lambda j, a: j < 2, lambda j, a: (j + 1, a + x),
                                     [af.constant(0), acc])
            return i + 1, inner

        _, total = af.while_loop(lambda i, acc: i < 3, outer, [af.constant(0), af.constant(0.0)])
        doubled = af.cond(x > 0, lambda: total * 2.0, lambda: total)
    return graph, x, doubled, 24.0


@pytest.mark.parametrize("build", [_loop, _nested_loops_and_a_cond], ids=["loop", "nested"])
@pytest.mark.parametrize("compile_loops", [True, False], ids=["compiled", "dynamic"])
async def test_a_control_flow_step_leaves_no_cyclic_garbage(build, compile_loops):
    graph, x, total, expected = build()
    config = dataclasses.replace(af.SessionConfig(), compile_loops=compile_loops)
    async with af.Session(graph=graph, config=config) as sess:
        assert await sess.run(total, {x: 2.0}) == expected
        with cyclic_garbage() as garbage:
            for _ in range(5):
                assert await sess.run(total, {x: 2.0}) == expected
    assert not STEP_STATE & set(garbage), sorted(set(garbage))
