"""One core for every plan without a compiled form (``exec/core.py``), over two propagators.

What the single core gives that separate paths did not: a partition with control flow tries
its waiting kernels' synchronous twins and subscriptions like any other (no task for a Recv
that a Send of the same step delivers), a traced static run takes the static path, and a
long loop started inline is still cancelled when its session closes.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import errors
from partition_graphs import TWO_CPUS, counting_tasks, long_time_slice  # noqa: F401
import loop_modes

TRACE = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)


def plans_of(sess, fetches, feeds=None):
    return sess.prepare(fetches, feeds).compiled.plans


@pytest.mark.usefixtures("long_time_slice")
async def test_a_recv_in_a_control_flow_partition_completes_inline():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        with af.device("/device:CPU:1"):
            far = x * 3.0
        with af.device("/device:CPU:0"):
            out = af.cond(x > 0.0, lambda: far + 1.0, lambda: far - 1.0)
        async with af.Session(config=TWO_CPUS) as sess:
            assert await sess.run(out, {x: 1.0}) == 4.0
            assert any(plan.control_flow for plan in plans_of(sess, out, {x: 1.0}))
            for value, want in ((2.0, 7.0), (-1.0, -4.0)):
                with counting_tasks() as tasks:
                    assert await sess.run(out, {x: value}) == want
                # Its Recvs subscribe and the Sends of the other partition deliver inline:
                # as for a partition without control flow, no task, no nursery.
                assert tasks.spawned == 0


@pytest.mark.usefixtures("long_time_slice")
async def test_a_loop_across_devices_needs_no_task_per_iteration():
    with af.Graph().as_default():
        def body(i):
            with af.device("/device:CPU:1"):
                return i + 1.0

        with af.device("/device:CPU:0"):
            result = af.while_loop(lambda i: i < 50.0, body, [af.constant(0.0)])
        async with af.Session(config=TWO_CPUS) as sess:
            assert await sess.run(result) == 50.0
            with counting_tasks() as tasks:
                assert await sess.run(result) == 50.0
            assert tasks.spawned == 0


async def test_a_traced_static_run_takes_the_static_path():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2], name="x")
        y = af.add(af.multiply(x, 2.0, name="twice"), 1.0, name="plus_one")
        feeds = {x: np.ones(2, np.float32)}
        metadata = af.RunMetadata()
        async with af.Session() as sess:
            got = await sess.run(y, feeds, options=TRACE, run_metadata=metadata)
            (plan,) = plans_of(sess, y, feeds)
    np.testing.assert_array_equal(got, [3.0, 3.0])
    assert plan.static and plan.traced_fn.compiled  # the step function's traced twin
    # One record per node of the schedule, constants included, in the schedule's order.
    assert [s.node_name for s in metadata.step_stats] == [n.op.name for n in plan.schedule]
    assert all(s.start_us <= s.end_us for s in metadata.step_stats)


async def test_a_traced_loop_records_every_node_it_ran(loop_mode):
    with af.Graph().as_default():
        result = af.while_loop(lambda i: i < 3, lambda i: i + 1, [af.constant(0)])
        metadata = af.RunMetadata()
        async with af.Session(config=loop_modes.config()) as sess:
            assert await sess.run(result, options=TRACE, run_metadata=metadata) == 3
    names = [s.node_name for s in metadata.step_stats]
    assert "while/Enter" in names
    if loop_mode == "dynamic":  # (a compiled loop runs as one unit: its nodes do not show)
        # The body ran three times; the Exit ran once live (dead nodes run no kernel).
        assert names.count("while/add") == 3 and names.count("while/Exit") == 1


@pytest.fixture(params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


@pytest.mark.parametrize("config", [af.SessionConfig(), TWO_CPUS], ids=["one", "two"])
async def test_closing_the_session_stops_a_loop_that_never_ends(config, loop_mode):
    with af.Graph().as_default():
        def body(i):
            with af.device("/device:CPU:1" if config.device_count else None):
                return i + 1.0

        result = af.while_loop(lambda i: i > -1.0, body, [af.constant(0.0)])
        sess = await af.Session(config=loop_modes.config(config)).__aenter__()
        failures = []

        async def step():
            try:
                await sess.run(result)
            except errors.CancelledError as exc:
                failures.append(exc)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(step)
                for _ in range(50):  # the step runs slice after slice in between
                    await trio.lowlevel.checkpoint()
                await sess.close()
    assert len(failures) == 1 and "closed" in str(failures[0])
