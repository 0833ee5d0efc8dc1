"""Multi-partition local steps start every partition inline (``runner.run_partitions``).

Each CPU partition is first started in the calling task (``dispatch.start_plan``); a Send
completes a Recv of a partition started earlier and the step's driver drains it there. A
step whose partitions all finish that way spawns no task. Covered here: 2- and 3-partition
steps spawn nothing and match one device; static partitions; failures located and
the rendezvous aborted; partitions that need a task (async py_func, a queue fed later)
still finish; a cancelled waiting step leaves no task behind; traces keep each node's
device.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from partition_graphs import (
    THREE_CPUS, TWO_CPUS, counting_tasks, later, mixed_graph, long_time_slice)
from asyncflow.exec import runner

# These tests count tasks and task steps: one long time slice keeps them deterministic.
# Inline starts of CPU partitions: a GPU would take these ops off them (conftest.cpu_only).
pytestmark = pytest.mark.usefixtures("long_time_slice", "cpu_only")


async def _run_counting(sess, fetches, feeds=None, **kwargs):
    with counting_tasks() as tasks:
        return await sess.run(fetches, feeds, **kwargs), tasks


def _three_ops(devices):
    x = af.placeholder(af.float32, [], name="x")
    with af.device("/device:CPU:0" if devices else None):
        a = x * 2.0
    with af.device("/device:CPU:1" if devices else None):
        b = a + 1.0
    with af.device("/device:CPU:0" if devices else None):
        c = b * 3.0
    return x, c


async def test_two_partition_step_spawns_no_task():
    with af.Graph().as_default():
        x, c = _three_ops(devices=True)
        async with af.Session(config=TWO_CPUS) as sess:
            assert await sess.run(c, {x: 1.0}) == 9.0
            for value in (0.0, 2.5, -4.0):
                got, tasks = await _run_counting(sess, c, {x: value})
                assert got == (value * 2.0 + 1.0) * 3.0
                assert tasks.spawned == 0


@pytest.mark.parametrize("devices", [2, 3])
async def test_partitions_finishing_inline_match_one_device_without_tasks(devices):
    feed = np.array([1.0, -2.0, 3.5], np.float32)
    with af.Graph().as_default():
        x, fetches = mixed_graph(None)
        async with af.Session() as sess:
            expected = await sess.run(fetches, {x: feed})
    config = af.SessionConfig(device_count={"CPU": devices})
    with af.Graph().as_default():
        x, fetches = mixed_graph(devices)
        async with af.Session(config=config) as sess:
            for _ in range(3):  # the plans are reused: every run starts from fresh queues
                got, tasks = await _run_counting(sess, fetches, {x: feed})
                assert tasks.spawned == 0
                for want, have in zip(expected, got):
                    np.testing.assert_allclose(have, want, rtol=1e-6)
            placement = sess._cache  # the step really was split over the devices
            assert any(len(c.plans) == devices for c in placement.values())


async def test_static_partitions_run_inline():
    with af.Graph().as_default():
        with af.device("/device:CPU:1"):
            x = af.placeholder(af.float32, [2], name="x")
            y = af.reduce_sum(af.square(x) + 1.0)  # no Send, no Recv: a static plan
        with af.device("/device:CPU:0"):
            z = af.reduce_sum(x) * 2.0  # x is fed to both partitions: no Recv either
        async with af.Session(config=TWO_CPUS) as sess:
            await sess.run([y, z], {x: np.zeros(2, np.float32)})
            compiled = next(iter(sess._cache.values()))
            assert [p.static for p in compiled.plans] == [True, True]
            got, tasks = await _run_counting(sess, [y, z], {x: np.array([1.0, 2.0], np.float32)})
            assert got == [pytest.approx(7.0), pytest.approx(6.0)]
            assert tasks.spawned == 0


async def test_failure_while_starting_is_located_and_aborts_the_rendezvous(monkeypatch):
    steps = []
    original = runner._start_inline

    def spy(compiled, feed_values, step, runs):
        steps.append(step)
        return original(compiled, feed_values, step, runs)

    monkeypatch.setattr(runner, "_start_inline", spy)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/device:CPU:0"):
            a = x * 2.0
        with af.device("/device:CPU:1"):
            bad = af.reshape(a, [3], name="bad_reshape")
        with af.device("/device:CPU:2"):
            c = af.identity(bad) + 1.0
        with af.device("/device:CPU:0"):
            out = af.identity(c) * 3.0
        async with af.Session(config=THREE_CPUS) as sess:
            with pytest.raises(af.errors.InvalidArgumentError) as info:
                await _run_counting(sess, out, {x: np.ones(4, np.float32)})
            assert info.value.op is sess.graph.get_operation_by_name("bad_reshape")
            assert "Reshape 'bad_reshape' on /job:localhost/replica:0/task:0/device:CPU:1" \
                in info.value.message
            assert "created at" in info.value.message
            stats = steps[-1].rendezvous.statistics()
            assert stats.aborted and stats.waiting_recvs == 0
            got, tasks = await _run_counting(sess, out, {x: np.ones(3, np.float32)})
            np.testing.assert_array_equal(got, np.full(3, 9.0))
            assert tasks.spawned == 0


async def test_failure_while_starting_never_starts_partitions_that_must_wait(autojump_clock):
    started = []

    async def wait_forever(v):
        started.append(v)
        await trio.sleep_forever()

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None], name="x")
        with af.device("/device:CPU:2"):
            stuck = af.py_func(wait_forever, [af.identity(x)], af.float32)
        with af.device("/device:CPU:1"):
            bad = af.reshape(x * 2.0, [3], name="bad")
        with af.device("/device:CPU:0"):
            out = [af.identity(bad), af.identity(stuck)]
        async with af.Session(config=THREE_CPUS) as sess:
            with trio.fail_after(5):
                with pytest.raises(af.errors.InvalidArgumentError, match="bad"):
                    await sess.run(out, {x: np.ones(4, np.float32)})
    assert started == []


async def test_partition_with_an_async_py_func_finishes_in_its_task(autojump_clock):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        with af.device("/device:CPU:0"):
            a = x + 1.0
        with af.device("/device:CPU:1"):
            b = af.py_func(later, [a], af.float32)
            c = af.identity(b) * 2.0
        with af.device("/device:CPU:0"):
            d = af.identity(c) - 1.0
        async with af.Session(config=TWO_CPUS) as sess:
            with trio.fail_after(10):
                got, tasks = await _run_counting(sess, d, {x: 1.0})
    assert got == (1.0 + 1.0 + 10.0) * 2.0 - 1.0
    assert tasks.spawned >= 1 and tasks.exited == tasks.spawned


async def test_dequeue_on_another_device_waits_for_a_later_enqueue(autojump_clock):
    with af.Graph().as_default():
        with af.device("/device:CPU:1"):
            queue = af.FIFOQueue(2, [af.float32], shapes=[[]])
            item = queue.dequeue()
        with af.device("/device:CPU:0"):
            total = af.identity(item) * 2.0
        value = af.placeholder(af.float32, [], name="value")
        enqueue = queue.enqueue([value])
        async with af.Session(config=TWO_CPUS) as sess:
            got = []

            async def consume():
                got.append(await sess.run(total))

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    await trio.sleep(1)
                    assert got == []  # parked on the empty queue
                    await sess.run(enqueue, {value: 21.0})
    assert got == [42.0]


@pytest.mark.parametrize("how", ["cancel_scope", "close"])
async def test_cancelled_step_waiting_on_another_device_leaves_no_task(autojump_clock, how):
    with af.Graph().as_default():
        with af.device("/device:CPU:1"):
            queue = af.FIFOQueue(2, [af.float32], shapes=[[]])
            item = queue.dequeue()
        x = af.placeholder(af.float32, [], name="x")
        with af.device("/device:CPU:0"):
            total = af.identity(item) * x
        sess = af.Session(config=TWO_CPUS)
        with counting_tasks() as tasks:
            if how == "cancel_scope":
                with trio.move_on_after(1) as scope:
                    await sess.run(total, {x: 2.0})
                assert scope.cancelled_caught
            else:
                async with trio.open_nursery() as nursery:
                    async def run():
                        with pytest.raises(af.errors.CancelledError):
                            await sess.run(total, {x: 2.0})
                    nursery.start_soon(run)
                    await trio.sleep(1)
                    await sess.close()
        assert tasks.spawned >= 1 and tasks.exited == tasks.spawned
        if how == "cancel_scope":
            await sess.close()


async def test_trace_of_an_inline_step_names_each_nodes_device():
    with af.Graph().as_default():
        x, c = _three_ops(devices=True)
        async with af.Session(config=TWO_CPUS) as sess:
            metadata = af.RunMetadata()
            options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
            got, tasks = await _run_counting(sess, c, {x: 1.0}, options=options,
                                             run_metadata=metadata)
    assert got == 9.0 and tasks.spawned == 0
    by_name = {s.node_name: s for s in metadata.step_stats}
    assert by_name[c.op.name].device.endswith("/device:CPU:0")
    assert by_name[c.op.inputs[0].op.name].device.endswith("/device:CPU:1")
    recvs = [s for s in metadata.step_stats if s.op_type == "_Recv"]
    assert len(recvs) == 2 and all(s.end_us >= s.start_us for s in recvs)


async def test_large_kernel_started_inline_is_offloaded_in_a_task():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [512, 512], name="x")
        with af.device("/device:CPU:1"):
            big = af.matmul(x, x)  # ~134M multiply-adds: runs on a worker thread
        with af.device("/device:CPU:0"):
            total = af.reduce_sum(big) + af.reduce_sum(x)
        async with af.Session(config=TWO_CPUS) as sess:
            got, tasks = await _run_counting(sess, total, {x: a})
    np.testing.assert_allclose(got, (a @ a).sum() + a.sum(), rtol=1e-3)
    assert tasks.spawned >= 1 and tasks.exited == tasks.spawned
