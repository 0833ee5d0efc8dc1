"""while_loops whose frames span workers (issue 8, "Across devices and workers").

The master partitions per device, so ``compile/partition_loops.py`` adds the per-(loop, device)
control loops there; each task's share travels as a graph_def and every Recv inside a frame
pulls with a ``frame_id:iteration`` key. Every cluster test runs over the in-process and the
HTTP transport (``cluster`` fixture), under a deadline so a hang fails instead of stalling.
"""
import numpy as np
import pytest
import trio

import asyncflow as af

W0, W1, PS = "/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:0"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)
DEADLINE_S = 20


async def _run_twice(spec, graph, fetches, feed_dict=None, init=None):
    """Run ``fetches`` twice in one session (the second step reuses the registered graphs)."""
    async with af.Session(graph=graph, cluster=spec) as sess:
        with trio.fail_after(DEADLINE_S):
            if init is not None:
                await sess.run(init, options=TIMEOUT)
            first = await sess.run(fetches, feed_dict, options=TIMEOUT)
            second = await sess.run(fetches, feed_dict, options=TIMEOUT)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    return first


async def _steps_drained(servers):
    """Every worker drops the step once its sends were pulled (none waits for its TTL)."""
    with trio.fail_after(5):
        while any(s.service.statistics().steps_held for s in servers.values()):
            await trio.sleep(0.01)


async def test_loop_body_on_another_worker_runs_every_iteration(cluster):
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            n = af.constant(5)

        def body(i, acc):
            with af.device(W1):
                doubled = acc * 2.0
            return i + 1, doubled

        with af.device(W0):
            i, acc = af.while_loop(lambda i, acc: i < n, body,
                                   [af.constant(0), af.constant(1.0)])
    assert await _run_twice(spec, graph, [i, acc]) == [5, 32.0]
    await _steps_drained(servers)


async def test_body_on_another_worker_reads_loop_invariants_and_a_ps_variable(cluster):
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            v = af.Variable(0.5, name="v")
        with af.device(W0):
            bound = af.placeholder(af.int32, [], name="bound")
            scale = af.add(af.constant(3.0), 0.0, name="scale")

        def body(i, acc, total):
            entered = af.identity(scale)          # the invariant's Enter on w0, read on w1
            with af.device(W1):
                acc2 = acc * scale                # the invariant's Enter on w1
                total2 = total + acc2 * entered * v
            return i + 1, acc2, total2

        with af.device(W0):
            i, acc, total = af.while_loop(lambda i, acc, total: i < bound, body,
                                          [af.constant(0), af.constant(1.0), af.constant(0.0)])
    out = await _run_twice(spec, graph, [i, acc, total], {bound: 4}, init=v.initializer)
    assert out[:2] == [4, 81.0]
    np.testing.assert_allclose(out[2], sum(3.0 ** k * 3.0 * 0.5 for k in range(1, 5)))
    await _steps_drained(servers)


async def test_cond_and_nested_loop_inside_a_loop_across_workers(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            n = af.constant(5)

        def body(i, acc, steps):
            with af.device(W1):
                acc2 = af.cond(af.equal(i % 2, 0), lambda: acc * 2.0, lambda: acc + 1.0)
            # The inner loop's condition on w0, its body on w1: three frames, two workers.
            _, steps2 = af.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, _on_w1(s)),
                                      [af.constant(0), steps])
            return i + 1, acc2, steps2

        def _on_w1(s):
            with af.device(W1):
                return s + 1.0

        with af.device(W0):
            out = af.while_loop(lambda i, acc, steps: i < n, body,
                                [af.constant(0), af.constant(1.0), af.constant(0.0)])
    # acc: 1 -> 2 -> 3 -> 6 -> 7 -> 14; the inner loop runs 0 + 1 + 2 + 3 + 4 times.
    assert await _run_twice(spec, graph, list(out)) == [5, 14.0, 10.0]


@pytest.mark.filterwarnings("ignore:divide by zero")
async def test_an_error_inside_a_cross_worker_loop_fails_the_step_naming_the_op(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            n = af.constant(10)

        def body(i, acc):
            with af.device(W1):
                checked = af.check_numerics(acc / af.cast(4 - i, af.float32), "blew up")
            return i + 1, checked

        with af.device(W0):
            _, acc = af.while_loop(lambda i, acc: i < n, body, [af.constant(0), af.constant(1.0)])
    async with af.Session(graph=graph, cluster=spec) as sess:
        with trio.fail_after(DEADLINE_S):
            with pytest.raises(af.errors.InvalidArgumentError, match="blew up") as info:
                await sess.run(acc, options=TIMEOUT)
    assert "task:1" in str(info.value)


async def test_loop_spanning_two_devices_of_a_remote_worker():
    cluster = af.ClusterSpec({"worker": ["inprocess:9871", "inprocess:9872"]})
    two_cpus = af.SessionConfig(device_count={"CPU": 2})
    async with af.Server(cluster, "worker", 0), af.Server(cluster, "worker", 1, config=two_cpus):
        with af.Graph().as_default() as graph:
            def body(i, acc):
                with af.device(W1 + "/device:CPU:1"):
                    doubled = acc * 2.0
                with af.device(W1 + "/device:CPU:0"):
                    moved = doubled + 0.0
                return i + 1, moved

            with af.device(W0):
                i, acc = af.while_loop(lambda i, acc: i < 5, body,
                                       [af.constant(0), af.constant(1.0)])
        assert await _run_twice(cluster, graph, [i, acc]) == [5, 32.0]


def test_transfers_inside_a_loop_are_never_batched():
    from asyncflow.compile.transfer_order import transfer_levels
    from asyncflow.compile import partition, prune
    from asyncflow.compile.node_graph import NodeGraph
    from asyncflow.ops.control_flow import is_loop_back_edge
    with af.Graph().as_default():
        with af.device(W0):
            before = af.add(af.constant(1.0), 0.0, name="before")
            side = af.add(af.constant(2.0), 0.0, name="side")

        def body(i, acc):
            with af.device(W1):
                doubled = acc * 2.0
            return i + 1, doubled

        with af.device(W0):
            _, acc = af.while_loop(lambda i, acc: i < 5, body, [af.constant(0), before])
        with af.device(W1):
            after = af.add(acc, side, name="after")
    devices = [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in (0, 1)]
    ops = prune.prune([after], [], [], skip_edge=is_loop_back_edge)
    placement = {op: devices[int(op.device.endswith("task:1"))] for op in ops}
    parts = partition.partition(NodeGraph.from_ops(ops, [], [after], [], placement),
                                devices, {d: 1 for d in devices})
    recvs = [n for p in parts.partitions for n in p.nodes if n.type == "_Recv"
             and n.attrs["send_device"] != n.device]
    in_loop = {n.attrs["tensor_name"] for n in recvs if n.control_flow_context is not None}
    outside = {n.attrs["tensor_name"] for n in recvs} - in_loop
    by_producer = {name.split("_", 2)[2].rsplit("_", 1)[0]: name for name in outside}
    assert in_loop and set(by_producer) == {"side", "while/Exit_1"}
    names = set(transfer_levels(parts.partitions))   # terminates on the loop's cycles
    assert not names & in_loop
    # The loop's result waits on w1's pulls inside the loop; "side" waits on nothing of w1.
    assert names == {by_producer["side"]}
