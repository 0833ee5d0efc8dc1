"""Partitions on local CPU devices drain each other inline (``core.drive``).

A Send run inside one partition's drain that feeds a subscribed Recv of another CPU partition
completes that Recv at once and drains the other partition right there, in the same task
(a trampoline: drains never nest). The other partition's task is woken only to start kernels
that must run as tasks, to fail, or to finish. Covered here: results equal one device's,
errors keep their op and device, a 200-edge ping-pong keeps a flat stack and needs no task
switch per edge, traces name each node's own device, waiting kernels still start as tasks,
and a failure aborts every partition.
"""
import inspect

import numpy as np
import pytest
import trio

import asyncflow as af
from partition_graphs import (
    THREE_CPUS, TWO_CPUS, counting_tasks, later, mixed_graph, long_time_slice)

# These tests count tasks and task steps: one long time slice keeps them deterministic.
pytestmark = pytest.mark.usefixtures("long_time_slice")


def _ping_pong(x, edges, op=af.identity, name="hop"):
    """``edges`` ops alternating CPU:1, CPU:0, ...: ``{name}_{i}`` sits on CPU:(i+1)%2."""
    y = x
    for i in range(edges):
        with af.device(f"/device:CPU:{(i + 1) % 2}"):
            y = op(y, name=f"{name}_{i}")
    return y


async def _pause(v):
    """An async py_func: its partition's task waits (autojump clock) until every other
    partition has started and parked, so the next Send finds a subscribed Recv."""
    await trio.sleep(1)
    return v


async def test_results_match_one_device():
    feed = np.array([1.0, -2.0, 3.5], np.float32)
    with af.Graph().as_default():
        x, fetches = mixed_graph(None)
        async with af.Session() as sess:
            expected = await sess.run(fetches, {x: feed})
    with af.Graph().as_default():
        x, fetches = mixed_graph(3)
        async with af.Session(config=THREE_CPUS) as sess:
            for _ in range(3):  # the plans are reused: every run starts from fresh queues
                got = await sess.run(fetches, {x: feed})
                for want, have in zip(expected, got):
                    np.testing.assert_allclose(have, want, rtol=1e-6)


async def test_ping_pong_of_200_edges_keeps_a_flat_stack_and_one_task_step_per_partition():
    depths, tasks = [], []

    def depth(v):
        depths.append(len(inspect.stack(0)))
        tasks.append(trio.lowlevel.current_task())
        return v

    def probe(t, name):
        return af.py_func(depth, [t], af.float32, name=name) + 1.0

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = _ping_pong(x, 200, op=probe)
        async with af.Session(config=TWO_CPUS) as sess:
            assert await sess.run(y, {x: 0.0}) == 200.0
            depths.clear()
            tasks.clear()
            with counting_tasks() as counter:
                assert await sess.run(y, {x: 1.0}) == 201.0
    assert len(depths) == 200
    assert max(depths) == min(depths)  # the 200th hop runs as deep as the 1st
    # Once both partitions started, one task drains both to the end (the first hop may run
    # in its partition's first drain, before the other partition's task started).
    assert len(set(tasks[1:])) == 1
    # Before inline draining each edge cost a task step of the receiving partition (200).
    assert counter.steps < 40


async def test_kernel_failing_in_a_partition_drained_by_the_other_task_is_located(
        autojump_clock):
    ran_in = {}

    def recorder(key):
        def record(v):
            ran_in[key] = trio.lowlevel.current_task()
            return v
        return record

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/device:CPU:0"):
            first = af.py_func(_pause, [x], af.float32) * 2.0
        with af.device("/device:CPU:1"):
            af.py_func(recorder("own"), [af.constant(np.float32(0.0))], af.float32,
                       name="own")
            seen = af.py_func(recorder("inline"), [af.identity(first)], af.float32)
            bad = af.reshape(seen, [3], name="bad_reshape")
        with af.device("/device:CPU:0"):
            out = af.identity(bad) + 1.0
        async with af.Session(config=TWO_CPUS) as sess:
            with trio.fail_after(10):
                with pytest.raises(af.errors.InvalidArgumentError) as info:
                    await sess.run([out, "own:0"], {x: np.ones(4, np.float32)})
            assert info.value.op.name == "bad_reshape"
            assert "Reshape 'bad_reshape' on /job:localhost/replica:0/task:0/device:CPU:1" \
                in info.value.message
            # CPU:1's nodes after the Recv ran in CPU:0's task, which drained CPU:1 inline.
            assert ran_in["inline"] is not ran_in["own"]
            got = await sess.run(out, {x: np.ones(3, np.float32)})
            np.testing.assert_array_equal(got, np.full(3, 3.0))


async def test_trace_names_each_nodes_own_device():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = _ping_pong(x, 6)
        async with af.Session(config=TWO_CPUS) as sess:
            metadata = af.RunMetadata()
            options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
            assert await sess.run(y, {x: 2.0}, options=options, run_metadata=metadata) == 2.0
    stats = metadata.step_stats
    assert {r.device.rsplit("/", 1)[-1] for r in stats} == {"device:CPU:0", "device:CPU:1"}
    hops = {r.node_name: r for r in stats if r.op_type == "Identity"}
    assert len(hops) == 6
    for i in range(6):
        assert hops[f"hop_{i}"].device.endswith(f"/device:CPU:{(i + 1) % 2}")
        assert not hops[f"hop_{i}"].waited
    recvs = [r for r in stats if r.op_type == "_Recv"]
    sends = [r for r in stats if r.op_type == "_Send"]
    assert len(recvs) == len(sends) >= 5  # the fed placeholder may sit on CPU:1
    assert all(r.end_us >= r.start_us for r in recvs)
    assert any(r.waited for r in recvs)  # subscribed, then completed by the Send
    assert not any(r.waited for r in sends)


async def test_waiting_kernel_in_an_inline_drained_partition_starts_as_its_task(
        autojump_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        with af.device("/device:CPU:0"):
            a = af.py_func(_pause, [x], af.float32) + 1.0
        with af.device("/device:CPU:1"):
            b = af.py_func(later, [af.identity(a)], af.float32)  # a task on CPU:1
            c = af.identity(b) * 2.0
        with af.device("/device:CPU:0"):
            d = _ping_pong(c, 10) - 1.0
        async with af.Session(config=TWO_CPUS) as sess:
            with trio.fail_after(10):
                for value in (0.0, 5.0):
                    assert await sess.run(d, {x: value}) == (value + 11.0) * 2.0 - 1.0


async def test_failure_aborts_partitions_parked_on_recvs_and_tasks(autojump_clock):
    async def wait_forever(v):
        await trio.sleep_forever()

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/device:CPU:2"):
            stuck = af.py_func(wait_forever, [af.constant(np.float32(1.0))], af.float32)
        with af.device("/device:CPU:0"):
            start = af.py_func(_pause, [x], af.float32)
        chain = _ping_pong(start, 8)  # CPU:0's task drains CPU:1 inline, hop after hop
        with af.device("/device:CPU:1"):
            bad = af.reshape(af.identity(chain), [3], name="late_bad")
        with af.device("/device:CPU:0"):
            out = [af.identity(bad), af.identity(stuck)]
        async with af.Session(config=THREE_CPUS) as sess:
            with trio.fail_after(5):
                with pytest.raises(af.errors.InvalidArgumentError) as info:
                    await sess.run(out, {x: np.ones(4, np.float32)})
            assert info.value.op.name == "late_bad"
            assert "device:CPU:1" in info.value.message
            with trio.fail_after(5):
                got = await sess.run(chain, {x: np.ones(2, np.float32)})
            np.testing.assert_array_equal(got, np.ones(2))


def test_only_cpu_partitions_of_a_multi_partition_step_share_its_runnable_list():
    import types

    from asyncflow.exec import core
    from asyncflow.exec.rendezvous import LocalRendezvous
    from asyncflow.exec.step import Step

    def run_on(kind, step):
        device = types.SimpleNamespace(kind=kind, name=f"/device:{kind}:0")
        plan = types.SimpleNamespace(nodes=[], slot_readers=[], fetched=frozenset(), roots=[],
                                     device=device)
        return core.Run(plan, core.Flat(plan, []), step)

    step = Step(1, rendezvous=LocalRendezvous())
    assert run_on("CPU", step).shares and run_on("CPU", step).shares
    assert not run_on("GPU", step).shares  # a GPU partition keeps to its own task and channel
    # A single-partition step (no rendezvous) never pays for the trampoline.
    assert not run_on("CPU", Step(3)).shares
