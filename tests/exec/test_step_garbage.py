"""A step's state is freed by reference counting when it ends, not left to the cyclic GC.

A step that leaves its propagator in reference cycles makes every step garbage for the
cyclic collector: a generation-0 collection every few steps and, every few thousand, a full
collection of tens of ms in the middle of a step.
"""
import dataclasses
import traceback

import numpy as np
import pytest

import asyncflow as af
from cyclic_garbage import cyclic_garbage, failures_garbage

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


# A failed step: its located error's tracebacks hold the step's frames, which hold its runs,
# rendezvous and values; nothing of the step may hold the error back (Run.failure, the
# rendezvous' abort, a frame's local, trio's outcome of an offloaded kernel), or the whole
# step waits for a collection. The error the caller gets stays located, its cause's traceback
# reaching the failing kernel.
FAILED_STEP = STEP_STATE | {"frame", "traceback", "InvalidArgumentError", "Flat", "PreparedRun"}


def _bad_reshape():
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None], name="x")
        y = af.reshape(x, [3], name="bad") * 2.0
    return graph, x, y, np.zeros(2, np.float32), "_reshape"


def _bad_reshape_in_a_loop():
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None], name="x")
        _, y = af.while_loop(lambda i, a: i < 3, lambda i, a: (
            i + 1, a + af.reduce_sum(af.reshape(x, [3], name="bad"))),
            [af.constant(0), af.constant(0.0)])
    return graph, x, y, np.zeros(2, np.float32), "_reshape"


def _bad_reshape_across_devices():
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/cpu:1"):
            y = af.reshape(x, [3], name="bad") * 2.0
        with af.device("/cpu:0"):
            z = y + 1.0
    return graph, x, z, np.zeros(2, np.float32), "_reshape"


def _bad_offloaded_matmul():  # large enough to run on a worker thread (trio.to_thread)
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None, None], name="x")
        y = af.matmul(x, af.ones([512, 512]), name="bad") + 1.0
    return graph, x, y, np.zeros((512, 511), np.float32), "_matmul"


@pytest.mark.parametrize("build", [_bad_reshape, _bad_reshape_in_a_loop,
                                   _bad_reshape_across_devices, _bad_offloaded_matmul],
                         ids=["static", "loop", "partitions", "offloaded"])
@pytest.mark.parametrize("traced", [False, True], ids=["plain", "traced"])
async def test_a_failed_step_leaves_no_cyclic_garbage(build, traced, cpu_only):
    graph, x, fetch, value, kernel = build()
    config = af.SessionConfig(device_count={"CPU": 2})
    options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE) if traced else None
    async with af.Session(graph=graph, config=config) as sess:
        with pytest.raises(af.errors.InvalidArgumentError):  # (compiles the plans)
            await sess.run(fetch, {x: value}, options=options)
        garbage, error = await failures_garbage(
            lambda: sess.run(fetch, {x: value}, options=options), af.errors.InvalidArgumentError)
    assert not FAILED_STEP & set(garbage), sorted(set(garbage))
    assert "bad' on " in error.message and "CPU:" in error.message
    assert error.op.name.endswith("bad")
    assert traceback.extract_tb(error.__cause__.__traceback__)[-1].name == kernel


async def test_a_failed_step_on_a_worker_thread_leaves_no_cyclic_garbage(cpu_only):
    # A heavy static plan's step runs whole on a worker thread (exec/thread_step.py).
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None, None], name="x")
        shape = af.placeholder(af.int32, [2], name="shape")
        y = af.reshape(af.matmul(af.matmul(x, x), x), shape, name="bad") + 1.0
    value = np.ones((512, 512), np.float32)
    async with af.Session(graph=graph) as sess:
        for _ in range(2):
            await sess.run(y, {x: value, shape: [512, 512]})
        (compiled,) = sess._target.cache.values()
        assert compiled.plans[0].thread_form.heavy  # the next step runs on a thread
        garbage, error = await failures_garbage(
            lambda: sess.run(y, {x: value, shape: [3, 3]}), af.errors.InvalidArgumentError)
        assert compiled.plans[0].thread_form.thread_steps >= 1
    assert not FAILED_STEP & set(garbage), sorted(set(garbage))
    assert error.op.name == "bad"
    assert traceback.extract_tb(error.__cause__.__traceback__)[-1].name == "_reshape"
