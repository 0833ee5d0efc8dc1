"""Session semantics on a cluster, over the in-process and the HTTP transport.

Every test runs twice (``cluster`` fixture): against in-process services and against HTTP
servers on loopback ports, so both transports carry the same graph-level behaviour.
"""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster.remote_rendezvous import is_derived
from transports.messages import DeregisterGraph
from autojump import still
from device_kinds import placed_kind, task_devices

W0, W1, PS = "/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:0"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)


def _model():
    with af.device(PS):
        w = af.Variable(np.full((3, 2), 0.5, np.float32), name="w")
    with af.device(W0):
        x = af.placeholder(af.float32, [None, 3], name="x")
        h = af.matmul(x, w, name="h")
    with af.device(W1):
        y = af.reduce_sum(af.nn.relu(h), axis=1, name="y")
    return w, x, h, y


async def test_feeds_and_fetches_across_workers(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        w, x, h, y = _model()
        async with af.Session(graph=graph, cluster=spec) as sess:
            assert set(sess.list_devices()) == {
                *task_devices("/job:ps/replica:0/task:0"),
                *task_devices("/job:worker/replica:0/task:0"),
                *task_devices("/job:worker/replica:0/task:1")}
            await sess.run(w.initializer, options=TIMEOUT)
            batch = np.arange(6, dtype=np.float32).reshape(2, 3)
            out = await sess.run({"h": h, "y": [y, y], "op": w.initializer},
                                 feed_dict={x: batch}, options=TIMEOUT)
            np.testing.assert_allclose(out["h"], batch @ np.full((3, 2), 0.5))
            np.testing.assert_allclose(out["y"][0], (batch @ np.full((3, 2), 0.5)).sum(1))
            assert out["op"] is None
            # Feeding an intermediate tensor cuts the part that produced it.
            fed = await sess.run(y, {h: -np.ones((1, 2), np.float32)}, options=TIMEOUT)
            np.testing.assert_array_equal(fed, [0.0])


async def test_variables_on_ps_outlive_sessions_until_reset(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            counter = af.Variable(0, name="counter")
        with af.device(W1):
            bump = counter.assign_add(1)
    async with af.Session(graph=graph, cluster=spec) as first:
        await first.run(counter.initializer)
        await first.run(bump)
    async with af.Session(graph=graph, cluster=spec) as second, \
            af.Session(graph=graph, cluster=spec) as third:
        await second.run(bump)
        await third.run(bump)
        assert await second.run(counter) == 3
    await af.Session.reset(spec)
    async with af.Session(graph=graph, cluster=spec) as fourth:
        with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized"):
            await fourth.run(counter)


async def test_errors_name_the_op_and_its_worker_device(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            x = af.placeholder(af.float32, None, name="x")
            doubled = x * 2.0
        with af.device(W1):
            bad = af.reshape(doubled, [5], name="bad_reshape")
        with af.device(W0):
            out = bad + 1.0
    async with af.Session(graph=graph, cluster=spec) as sess:
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await sess.run(out, {x: np.ones(4, np.float32)}, options=TIMEOUT)
        assert info.value.op is graph.get_operation_by_name("bad_reshape")
        assert f"/job:worker/replica:0/task:1/device:{placed_kind()}:0" in info.value.message
        # The root cause, not task 0's echo of it (its pull of bad_reshape's output failed).
        assert not is_derived(info.value) and "RecvTensors" not in info.value.message
        # The session stays usable after a failed step.
        np.testing.assert_array_equal(await sess.run(out, {x: np.ones(5, np.float32)},
                                                     options=TIMEOUT), np.full(5, 3.0))


async def test_cancelling_a_blocked_step_frees_it_everywhere(cluster):
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(W1):
            queue = af.FIFOQueue(2, [af.float32], shapes=[[]], name="q")
            item = queue.dequeue()
            put = queue.enqueue([3.0])
        with af.device(W0):
            out = item * 2.0
    async with af.Session(graph=graph, cluster=spec) as sess:
        with trio.move_on_after(1.0) as scope:
            await sess.run(out)
        assert scope.cancelled_caught
        with pytest.raises(af.errors.DeadlineExceededError):
            await sess.run(out, options=af.RunOptions(timeout_in_ms=300))
        await sess.run(put, options=TIMEOUT)
        assert await sess.run(out, options=TIMEOUT) == 6.0
    with trio.fail_after(10):
        while any(s.service.statistics().steps_held for s in servers.values()):
            await trio.sleep(0.05)


async def test_a_stopped_worker_is_unavailable_and_a_restarted_one_is_used_again(cluster):
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            a = af.constant(2.0) * 3.0
        with af.device(W1):
            b = a + 1.0
    config = af.SessionConfig(health_check_interval_s=0.0)
    async with trio.open_nursery() as nursery:
        async with af.Session(graph=graph, cluster=spec, config=config) as sess:
            assert await sess.run(b, options=TIMEOUT) == 7.0
            old = servers["worker:1"]
            old_incarnation = old.service.incarnation
            # Stop worker 1 (its serve task ends) and check the failure is Unavailable.
            await old.stop()
            with trio.fail_after(15):
                with pytest.raises(af.errors.UnavailableError, match="task:1"):
                    await sess.run(b, options=TIMEOUT)
            port = None if old.address.startswith("inprocess") else old.port
            new = await nursery.start(af.Server(spec, "worker", 1, port=port).serve)
            assert new.service.incarnation != old_incarnation
            assert await sess.run(b, options=TIMEOUT) == 7.0
            assert new.service.statistics().graphs == 1
        nursery.cancel_scope.cancel()



async def test_pulls_of_one_step_from_one_peer_share_a_request(cluster, pulls_only):
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            params = [af.Variable(np.full(2, i, np.float32), name=f"p{i}") for i in range(5)]
        with af.device(W0):
            total = af.add_n([af.identity(p) for p in params])
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        before = servers["worker:0"].service.statistics()
        np.testing.assert_array_equal(await sess.run(total, options=TIMEOUT), [10.0, 10.0])
        after = servers["worker:0"].service.statistics()
    assert after.tensors_pulled - before.tensors_pulled == 5
    assert after.pull_requests - before.pull_requests == 1


async def test_ping_pong_between_workers_does_not_deadlock(cluster):
    # w1's second value depends on what w0 sends it, so it must not share a pull with the first.
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W1):
            first = af.constant(1.0) + 0.0
        with af.device(W0):
            echoed = first * 10.0
        with af.device(W1):
            second = echoed + 5.0
        with af.device(W0):
            out = af.add_n([first, second])
    async with af.Session(graph=graph, cluster=spec) as sess:
        with trio.fail_after(15):
            assert await sess.run(out, options=TIMEOUT) == 16.0


async def test_workers_exchanging_values_crosswise_do_not_deadlock(cluster):
    # w0 pulls b and f(a) from w1 while w1 pulls a and g(b) from w0. Had each worker put both
    # of its pulls in one request, each request would wait for the other: f(a) needs w1's
    # request answered, g(b) needs w0's. Batching by level sends each pair as two requests.
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            a = af.add(af.constant(1.0), 0.0, name="a")
        with af.device(W1):
            b = af.add(af.constant(2.0), 0.0, name="b")
            f_of_a = af.multiply(a, 10.0, name="f_of_a")
        with af.device(W0):
            g_of_b = af.multiply(b, 100.0, name="g_of_b")
            out0 = af.add(f_of_a, g_of_b, name="out0")
        with af.device(W1):
            out1 = af.add(g_of_b, b, name="out1")
    async with af.Session(graph=graph, cluster=spec) as sess:
        with trio.fail_after(15):
            assert await sess.run([out0, out1], options=TIMEOUT) == [210.0, 202.0]


async def test_a_parameter_server_step_pulls_once_per_peer_and_level(cluster, pulls_only):
    # The worker pulls the parameters (one request), the ps the gradients (one request). The
    # train op's four "update done" control edges are not carried at all (control_edges.py):
    # the step ends when the ps's RunGraph has applied the updates.
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            params = [af.Variable(np.full((2, 2), i + 1.0, np.float32), name=f"p{i}")
                      for i in range(4)]
        with af.device(W0):
            x = af.placeholder(af.float32, [None, 2], name="x")
            loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
            train = af.train.GradientDescentOptimizer(0.5).minimize(loss)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        await sess.run(train, {x: np.ones((1, 2), np.float32)}, options=TIMEOUT)
        before = {name: servers[name].service.statistics() for name in ("ps:0", "worker:0")}
        await sess.run(train, {x: np.ones((1, 2), np.float32)}, options=TIMEOUT)
        after = {name: servers[name].service.statistics() for name in ("ps:0", "worker:0")}
        values = await sess.run(params, options=TIMEOUT)
    for i, value in enumerate(values):  # two steps of -0.5 * d(sum(x @ p))/dp = -0.5 * 1
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 1.0))
    requests = {name: after[name].pull_requests - before[name].pull_requests
                for name in after}
    pulled = {name: after[name].tensors_pulled - before[name].tensors_pulled
              for name in after}
    assert pulled == {"worker:0": 4, "ps:0": 4}
    assert requests == {"worker:0": 1, "ps:0": 1}


async def test_traced_steps_report_every_workers_nodes_and_concurrent_steps_run(cluster):
    spec, _ = cluster
    with af.Graph().as_default() as graph:
        with af.device(W0):
            x = af.placeholder(af.float32, [], name="x")
            a = af.multiply(x, 2.0, name="a")
        with af.device(W1):
            b = af.add(a, 1.0, name="b")
    async with af.Session(graph=graph, cluster=spec) as sess:
        metadata = af.RunMetadata()
        await sess.run(b, {x: 1.0}, options=af.RunOptions(timeout_in_ms=20000,
                                                          trace_level=af.RunOptions.FULL_TRACE),
                       run_metadata=metadata)
        devices = {s.device for s in metadata.step_stats}
        assert {f"/job:worker/replica:0/task:0/device:{placed_kind()}:0",
                f"/job:worker/replica:0/task:1/device:{placed_kind()}:0"} <= devices
        assert {"_Send", "_Recv"} <= {s.op_type for s in metadata.step_stats}
        results = {}

        async def one(value):
            results[value] = await sess.run(b, {x: value}, options=TIMEOUT)

        async with trio.open_nursery() as nursery:
            for value in range(8):
                nursery.start_soon(one, float(value))
        assert results == {float(v): 2.0 * v + 1.0 for v in range(8)}


def test_transfer_levels_follow_dependencies_across_workers():
    from asyncflow.compile.transfer_order import transfer_levels
    from asyncflow.compile import partition, prune
    from asyncflow.compile.node_graph import NodeGraph
    with af.Graph().as_default() as graph:
        with af.device(PS):
            w = af.Variable(np.ones(2, np.float32), name="w")
        with af.device(W0):
            grad = af.multiply(w, 3.0, name="grad")        # needs w0's pull of w
        with af.device(PS):
            update = w.assign_sub(grad)                     # ps pulls grad: level 1
        with af.device(W1):
            first = af.add(af.constant(1.0), 0.0, name="first")
        with af.device(W0):
            echoed = af.multiply(first, 10.0, name="echoed")
        with af.device(W1):
            second = af.add(echoed, 5.0, name="second")     # needs w0's echo of first
        with af.device(W0):
            out = af.add(first, second, name="out")
    devices = [f"/job:{job}/replica:0/task:{i}/device:CPU:0" for job, i in
               [("ps", 0), ("worker", 0), ("worker", 1)]]
    ops = prune.prune([out, update], [], [])
    placement = {op: next(d for d in devices if op.device.split("/device")[0].replace(
        "/task", "/replica:0/task") in d) for op in ops}
    parts = partition.partition(NodeGraph.from_ops(ops, [], [out, update], [], placement),
                                devices, {d: 1 for d in devices})
    levels = transfer_levels(parts.partitions)
    by_producer = {n.attrs["tensor_name"].split("_", 2)[2].rsplit("_", 1)[0]: n.attrs["tensor_name"]
                   for p in parts.partitions for n in p.nodes if n.type == "_Send"}
    level_of = {producer: levels.get(name) for producer, name in by_producer.items()}
    # w0 pulls w and first (level 0: nothing pulled behind them), the ps pulls grad and w1
    # pulls echoed (behind one pull each), w0 pulls second (behind first -> echoed).
    assert level_of == {"w/read": 0, "first": 0, "grad": 1, "echoed": 1, "second": 2}


async def test_steps_cancelled_while_registering_leave_no_graph_behind(cluster):
    # Each first run of a signature registers its partitions; cancelling it at any point of
    # that (here after k scheduler passes) must not leave a graph the closed session forgot.
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        w, x, h, y = _model()
        outs = [y + float(k) for k in range(40)]
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(w.initializer, options=TIMEOUT)
            batch = np.ones((1, 3), np.float32)
            for k, out in enumerate(outs):
                async with trio.open_nursery() as nursery:
                    scope = trio.CancelScope()

                    async def first_run(out=out, scope=scope):
                        with scope:
                            await sess.run(out, {x: batch}, options=TIMEOUT)
                    nursery.start_soon(first_run)
                    for _ in range(k):
                        await trio.lowlevel.checkpoint()
                    scope.cancel()
            assert await sess.run(y, {x: batch}, options=TIMEOUT) == 3.0
        graphs = {name: server.service.statistics().graphs for name, server in servers.items()}
    assert set(graphs.values()) == {0}, graphs


async def test_a_graph_handle_the_worker_lost_is_aborted_then_registered_again(cluster):
    """A registration removed on the worker (same incarnation, variables kept) is AbortedError,
    never NotFoundError, and the next run registers the graph again."""
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        w, x, h, y = _model()
    config = af.SessionConfig(health_check_interval_s=60.0)
    batch = np.ones((1, 3), np.float32)
    async with af.Session(graph=graph, cluster=spec, config=config) as sess:
        await sess.run(w.initializer, options=TIMEOUT)
        expected = await sess.run(y, {x: batch}, options=TIMEOUT)
        service = servers["worker:1"].service
        for handle in list(service._graphs):
            await service.deregister_graph(DeregisterGraph(handle))
        with pytest.raises(af.errors.AbortedError, match="no graph with handle"):
            await sess.run(y, {x: batch}, options=TIMEOUT)
        np.testing.assert_allclose(await sess.run(y, {x: batch}, options=TIMEOUT), expected)
        assert service.statistics().graphs == 1


@pytest.mark.parametrize("cluster", ["inprocess"], indirect=True)
async def test_a_step_retried_while_its_registration_is_under_way_joins_it(
        cluster, monkeypatch, autojump_clock):
    """A worker slower to register than the step's timeout: the retried step waits for the
    registration the first one began (it goes on past its caller's deadline), not a fresh one
    each time (RegisterGraphs piling up on the slow worker, each deregistered when it
    answers, no retry ever getting through). The registrations are held until the third try
    waits (not slept), and the third try runs with the clock still: the registrations it
    releases wait on threads (a worker's compile, MKL's first load, a Preload of the MatMul's),
    in real time, and the autojump clock took those milliseconds for idleness, jumping from
    lease check to lease check past the 600 s lease of the graphs registered first (a RunGraph
    then found its graph dropped, under load)."""
    spec, servers = cluster
    with af.Graph().as_default() as graph:
        w, x, h, y = _model()
    batch = np.ones((1, 3), np.float32)
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(w.initializer, options=TIMEOUT)
        sent, held = [], trio.Event()
        for task in sess._target.master.tasks.values():
            register = task.channel.register_graph

            async def slow(request, *, register=register, name=task.name, **kwargs):
                sent.append(name)
                await held.wait()
                return await register(request, **kwargs)
            monkeypatch.setattr(task.channel, "register_graph", slow)
        for _ in range(2):
            with pytest.raises(af.errors.DeadlineExceededError):
                await sess.run(y, {x: batch}, options=af.RunOptions(timeout_in_ms=1000))
        results = []

        async def third():
            results.append(await sess.run(y, {x: batch}))
        with still(autojump_clock):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(third)
                await trio.testing.wait_all_tasks_blocked()
                held.set()
        assert results == [3.0], results
        assert sent and sorted(sent) == sorted(set(sent)), sent  # one registration a task
    graphs = {name: server.service.statistics().graphs for name, server in servers.items()}
    assert set(graphs.values()) == {0}, graphs
