"""A worker's step spawns no task per edge, and edges between its own devices stay off the wire.

The worker's ``StepRendezvous`` has the local rendezvous's ``subscribe`` contract: a Recv
whose value is there completes inline, a Send completes without a task, and remote keys join
one pull per peer and level, whose task calls every Recv back. The tests count trio tasks
with an instrument while the worker runs its RunGraph (the in-process transport runs the
peer's RecvTensors handler in the pulling task, so the count is the worker's alone).
"""

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.cluster.master import Master
from asyncflow.cluster.worker import WorkerService
from instruments import installed, long_time_slice  # noqa: F401 (a fixture)
from transports.messages import RegisterGraph, RunGraph, TensorEntry

pytestmark = pytest.mark.usefixtures("long_time_slice")  # every test: one long slice

EDGES = 8


class _Spawned(trio.abc.Instrument):
    def __init__(self):
        self.spawned = 0

    def task_spawned(self, task):
        self.spawned += 1


def counting_tasks():
    return installed(_Spawned())


@pytest.fixture
async def two_workers():
    """ps (one CPU) and worker (two CPUs) in process; yields (spec, {job: WorkerService})."""
    spec = af.ClusterSpec({"ps": ["inprocess:611"], "worker": ["inprocess:612"]})
    services = {}
    async with trio.open_nursery() as nursery:
        for job, cpus in (("ps", 1), ("worker", 2)):
            config = af.SessionConfig(device_count={"CPU": cpus})
            server = await nursery.start(af.Server(spec, job, 0, config=config).serve)
            services[job] = server.service
        yield spec, services
        nursery.cancel_scope.cancel()


async def _registered(spec, graph, feeds, fetches):
    master = Master(spec, af.SessionConfig())
    await master.open()
    run = master.compile(graph, feeds, fetches, ())
    handles = {}
    for tg in run.task_graphs:
        channel = channels.connect(spec.task_address(tg.task.split("/")[1][4:], 0))
        reply = await channel.register_graph(RegisterGraph(tg.graph_def, "test", tg.options))
        handles[tg.task.split("/")[1][4:]] = (channel, reply.graph_handle, tg.options)
    return handles


async def test_a_worker_step_spawns_one_task_per_pull_not_per_edge(two_workers, pulls_only):
    spec, services = two_workers
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [3], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(EDGES)]
        with af.device("/job:worker/task:0/device:CPU:0"):
            left = af.add_n(parts[:EDGES // 2], name="left")
        with af.device("/job:worker/task:0/device:CPU:1"):
            right = af.add_n(parts[EDGES // 2:], name="right")
            total = af.add(left, right, name="total")
    handles = await _registered(spec, graph, (x,), (total,))
    ps_channel, ps_handle, ps_options = handles["ps"]
    w_channel, w_handle, w_options = handles["worker"]
    feed = TensorEntry(ps_options.feeds[0], np.arange(3, dtype=np.float32))
    for step_id in (5, 6):  # the second step counts: the first one warms the caches
        await ps_channel.run_graph(RunGraph(ps_handle, step_id, [feed], [], request_id=step_id))
        with counting_tasks() as counter:
            reply = await w_channel.run_graph(RunGraph(w_handle, step_id, [],
                                                       list(w_options.fetches),
                                                       request_id=step_id))
    np.testing.assert_allclose(reply.tensors[0].value,
                               np.arange(3, dtype=np.float32) * sum(range(EDGES)))
    # Eight edges from the ps, one of level 0 each: one pull, one task; the edges between
    # the worker's two CPUs and its Sends need none (per-edge tasks would be 8 or more).
    assert counter.spawned == 1
    assert services["worker"].counters.pull_requests == 2  # one a step
    assert services["worker"].counters.tensors_pulled == 2 * EDGES


async def test_partitions_on_one_workers_devices_never_touch_the_wire(two_workers):
    spec, services = two_workers
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        x = af.placeholder(af.float32, [3], name="x")
        y = x
        for i in range(EDGES):
            with af.device(f"/job:worker/task:0/device:CPU:{i % 2}"):
                y = af.identity(y, name=f"hop{i}") + 1.0
    handles = await _registered(spec, graph, (x,), (y,))
    assert list(handles) == ["worker"]
    channel, handle, options = handles["worker"]
    service = services["worker"]
    opened = []
    service._connect = lambda address: opened.append(address)  # any pull would call it
    feed = TensorEntry(options.feeds[0], np.zeros(3, np.float32))
    for step_id in (1, 2):
        with counting_tasks() as counter:
            reply = await channel.run_graph(RunGraph(handle, step_id, [feed],
                                                     list(options.fetches), request_id=step_id))
        np.testing.assert_array_equal(reply.tensors[0].value, np.full(3, float(EDGES)))
    # The worker split the graph over its two CPUs (Send/Recv pairs between them), and the
    # values crossed inline: no connection, no pull, no task.
    assert {op.device for op in service._graphs[handle].graph.get_operations()} - {""} == {
        "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:1"}
    assert len(service._graphs[handle].compiled.plans) == 2
    assert opened == [] and service.counters.pull_requests == 0
    assert counter.spawned == 0


async def _ps_and_worker_graph(spec):
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [3], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(3)]
        with af.device("/job:worker/task:0"):
            total = af.add_n(parts, name="total")
    return await _registered(spec, graph, (x,), (total,))


async def test_a_pull_the_peer_aborts_fails_every_subscribed_recv(two_workers, pulls_only):
    from transports.messages import AbortStep, RemoteCallError
    spec, services = two_workers
    handles = await _ps_and_worker_graph(spec)
    ps_channel = handles["ps"][0]
    w_channel, w_handle, w_options = handles["worker"]
    outcome = {}

    async def worker_step():
        try:
            await w_channel.run_graph(RunGraph(w_handle, 9, [], list(w_options.fetches),
                                               request_id=1))
        except RemoteCallError as exc:
            outcome["error"] = exc

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_step)
            await trio.testing.wait_all_tasks_blocked()  # its one pull waits on the ps
            pending = services["worker"]._steps[9].rendezvous._subscribed
            assert len(pending) == 3 and len(set(map(id, pending.values()))) == 1
            await ps_channel.abort_step(AbortStep(9, "CANCELLED", "the client went away"))
    assert outcome["error"].code == "CANCELLED" and outcome["error"].derived
    assert services["worker"].counters.steps_failed == 1
    assert not services["worker"]._steps  # the step's state is gone, no Recv left waiting


async def test_a_worker_step_past_its_deadline_cancels_its_pull(two_workers, pulls_only,
                                                               autojump_clock):
    from transports.messages import RemoteCallError
    spec, services = two_workers
    handles = await _ps_and_worker_graph(spec)
    w_channel, w_handle, w_options = handles["worker"]
    with pytest.raises(RemoteCallError, match="DEADLINE_EXCEEDED|deadline"):
        await w_channel.run_graph(RunGraph(w_handle, 10, [], list(w_options.fetches),
                                           request_id=1, timeout_ms=500))
    # The ps saw the pull arrive and go away: no RecvTensors waits there any more.
    await trio.testing.wait_all_tasks_blocked()
    ps_steps = services["ps"]._steps
    assert all(s.rendezvous.statistics().waiting_recvs == 0 for s in ps_steps.values())


@pytest.mark.parametrize("iterations", [50, 150])
async def test_a_loop_across_workers_reuses_its_pull_tasks(iterations, cpu_only):
    """A Recv in a loop pulls once per iteration; a pull task that is done takes the next
    pull, so a step spawns as many as pulls are in flight at once (the loop's
    ``parallel_iterations`` window), not one per iteration (before: 4 per iteration).
    On CPUs only: a GPU there would add its own tasks (its streams' events), not pulls."""
    spec = af.ClusterSpec({"worker": [f"inprocess:{613 + i}" for i in range(2)]})
    async with trio.open_nursery() as nursery:
        for index in range(2):
            await nursery.start(af.Server(spec, "worker", index).serve)
        with af.Graph().as_default() as graph:
            with af.device("/job:worker/task:0"):
                n = af.constant(iterations)

            def body(i, acc):
                with af.device("/job:worker/task:1"):
                    scaled = acc * 1.001
                return i + 1, scaled

            with af.device("/job:worker/task:0"):
                i, acc = af.while_loop(lambda i, acc: i < n, body,
                                       [af.constant(0), af.constant(1.0)],
                                       parallel_iterations=10)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run([i, acc])
            with counting_tasks() as counter:
                got_i, got_acc = await sess.run([i, acc])
        nursery.cancel_scope.cancel()
    assert got_i == iterations
    np.testing.assert_allclose(got_acc, 1.001 ** iterations, rtol=1e-4)
    # Two workers, each with at most a window of pulls in flight: 22 here at 50 and at 150
    # iterations alike (one RunGraph task of the master's besides).
    assert counter.spawned <= 4 * 10 < iterations
