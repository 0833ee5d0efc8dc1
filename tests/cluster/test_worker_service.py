"""The worker service through the in-process transport: registration, steps, pulls, limits.

Graph partitions come from the master's compile (a two-worker cluster), then the test drives
each worker's RPCs itself, so the order of RunGraph and RecvTensors is the test's choice.
"""
import dataclasses
import struct

import msgpack
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.cluster.master import Master
from asyncflow.cluster.worker import WorkerService
from transports.messages import (
    AbortStep, CleanupStep, DeregisterGraph, GraphOptions, RecvTensors, RegisterGraph,
    RemoteCallError, Reset, RunGraph, TensorEntry,
)
from transports.wire import MAGIC, RemoteProtocolError, decode
from device_kinds import task_devices

# These tests drive pulls (RecvTensors) by hand: every edge is pulled, as for a large tensor
# (the pushed edges have their own tests, test_pushes.py).
pytestmark = pytest.mark.usefixtures("pulls_only")


@pytest.fixture
async def cluster():
    """Two in-process workers; yields (ClusterSpec, {task index: WorkerService})."""
    spec = af.ClusterSpec({"worker": ["inprocess:101", "inprocess:102"]})
    services = {}
    async with trio.open_nursery() as nursery:
        for index in range(2):
            server = await nursery.start(af.Server(spec, "worker", index).serve)
            services[index] = server.service
        yield spec, services
        nursery.cancel_scope.cancel()


async def _compiled_pair(spec):
    """A feed on task 0, x*2 sent to task 1, +1 fetched there; returns (graph, run, master)."""
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [3], name="x")
            doubled = af.multiply(x, 2.0, name="doubled")
        with af.device("/job:worker/task:1"):
            out = af.add(doubled, 1.0, name="out")
    master = Master(spec, af.SessionConfig())
    await master.open()
    run = master.compile(graph, (x,), (out,), ())
    return graph, run, master


def _by_task(run):
    return {tg.task.rsplit(":", 1)[-1]: tg for tg in run.task_graphs}


async def _register(channel, tg):
    reply = await channel.register_graph(RegisterGraph(tg.graph_def, "test", tg.options))
    return reply.graph_handle


async def test_recv_before_run_finds_the_step_and_waits(cluster, autojump_clock):
    spec, services = cluster
    _, run, master = await _compiled_pair(spec)
    tgs = _by_task(run)
    w0, w1 = channels.connect("inprocess:101"), channels.connect("inprocess:102")
    h0, h1 = await _register(w0, tgs["0"]), await _register(w1, tgs["1"])
    step_id = 77
    results = {}

    async def run_task1():
        results[1] = await w1.run_graph(RunGraph(h1, step_id, [], tgs["1"].options.fetches,
                                                 request_id=1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_task1)          # pulls from task 0 before task 0 runs the step
        await trio.testing.wait_all_tasks_blocked()
        assert services[0].statistics().steps_held == 1
        feed = TensorEntry(tgs["0"].options.feeds[0], np.arange(3, dtype=np.float32))
        await w0.run_graph(RunGraph(h0, step_id, [feed], [], request_id=1))
    np.testing.assert_array_equal(results[1].tensors[0].value, [1.0, 3.0, 5.0])
    # Both sides dropped the finished step; a late pull fails fast instead of creating state.
    assert services[0].statistics().steps_held == 0
    assert services[1].statistics().steps_held == 0
    key = next(iter(services[1]._graphs.values())).binding.declarations
    assert key  # task 1 declares the remote Recv it pulls
    with pytest.raises(RemoteCallError, match="ABORTED.*already finished"):
        await w0.recv_tensors(RecvTensors(step_id, [_any_key(services[0])]))
    await master.close()


async def test_errors_travel_with_the_op_and_derived_as_fields(cluster, autojump_clock):
    """Task 0's op fails: its reply names the op in ``op``; task 1, whose pull the failure
    aborted, answers ``derived``. Neither message carries a marker to parse."""
    spec, _ = cluster
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [None], name="x")
            bad = af.reshape(x, [5], name="bad_reshape")
        with af.device("/job:worker/task:1"):
            out = af.add(bad, 1.0, name="out")
    master = Master(spec, af.SessionConfig())
    await master.open()
    tgs = _by_task(master.compile(graph, (x,), (out,), ()))
    w0, w1 = channels.connect("inprocess:101"), channels.connect("inprocess:102")
    h0, h1 = await _register(w0, tgs["0"]), await _register(w1, tgs["1"])
    failures = {}

    async def run(task, channel, request):
        with pytest.raises(RemoteCallError) as caught:
            await channel.run_graph(request)
        failures[task] = caught.value

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, 1, w1, RunGraph(h1, 5, [], tgs["1"].options.fetches,
                                                request_id=1))
        await trio.testing.wait_all_tasks_blocked()
        feed = TensorEntry(tgs["0"].options.feeds[0], np.ones(4, np.float32))
        nursery.start_soon(run, 0, w0, RunGraph(h0, 5, [feed], [], request_id=1))
    root, echo = failures[0], failures[1]
    assert (root.code, root.op, root.derived) == ("INVALID_ARGUMENT", "bad_reshape", False)
    assert root.message.startswith("Reshape 'bad_reshape' on /job:worker/replica:0/task:0")
    assert echo.derived and echo.op == "" and echo.code == "INVALID_ARGUMENT"
    assert "RecvTensors from /job:worker/replica:0/task:0" in echo.message
    assert not any(e.message.startswith("[") for e in (root, echo))
    await master.close()


def _any_key(service):
    return f"{service.device_names[0]};{service.incarnation:016x};x;edge;0:0"


async def test_unknown_handles_steps_and_bad_keys_are_typed_errors(cluster, autojump_clock):
    spec, services = cluster
    w0 = channels.connect("inprocess:101")
    with pytest.raises(RemoteCallError, match="NOT_FOUND.*no graph with handle"):
        await w0.run_graph(RunGraph("nope", 1, [], []))
    with pytest.raises(RemoteCallError, match="NOT_FOUND"):
        await w0.deregister_graph(DeregisterGraph("nope"))
    with pytest.raises(RemoteCallError, match="NOT_FOUND.*no step 5"):
        await w0.cleanup_step(CleanupStep(5))
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*malformed rendezvous key"):
        await w0.recv_tensors(RecvTensors(1, ["garbage"]))
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*not on"):
        await w0.recv_tensors(RecvTensors(1, [_any_key(services[1])]))
    stale = f"{services[0].device_names[0]};{services[0].incarnation ^ 1:016x};x;e;0:0"
    with pytest.raises(RemoteCallError, match="ABORTED.*different device incarnation"):
        await w0.recv_tensors(RecvTensors(1, [stale]))
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*malformed graph"):
        await w0.register_graph(RegisterGraph({"node": [{"name": "a", "op": "NoSuchOp",
                                                         "input": [], "attr": {}}]}, "t"))
    assert services[0].statistics().steps_held == 0


async def test_feeds_are_checked_against_their_placeholders(cluster, autojump_clock):
    spec, services = cluster
    _, run, master = await _compiled_pair(spec)
    tg = _by_task(run)["0"]
    w0 = channels.connect("inprocess:101")
    handle = await _register(w0, tg)
    name = tg.options.feeds[0]
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*dtype int32.*float32"):
        await w0.run_graph(RunGraph(handle, 1, [TensorEntry(name, np.zeros(3, np.int32))], [],
                                    request_id=1))
    with pytest.raises(RemoteCallError, match=r"INVALID_ARGUMENT.*shape \[4\]"):
        await w0.run_graph(RunGraph(handle, 2, [TensorEntry(name, np.zeros(4, np.float32))], [],
                                    request_id=2))
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*missing"):
        await w0.run_graph(RunGraph(handle, 3, [], [], request_id=3))
    good = TensorEntry(name, np.zeros(3, np.float32))
    with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*given twice"):
        await w0.run_graph(RunGraph(handle, 4, [good, good], [], request_id=4))
    with pytest.raises(RemoteCallError, match=r"INVALID_ARGUMENT.*unknown \['other:0'\]"):
        await w0.run_graph(RunGraph(handle, 5, [good, TensorEntry("other:0", np.zeros(1))], [],
                                    request_id=5))
    # Registered state survives bad requests.
    assert services[0].statistics().graphs == 1
    await master.close()


async def test_pulled_state_expires_and_abort_wakes_waiters(cluster, autojump_clock):
    spec, services = cluster
    w0 = channels.connect("inprocess:101")
    key = f"{services[0].device_names[0]};{services[0].incarnation:016x};x;edge;0:0"

    async def pull():
        with pytest.raises(RemoteCallError, match="ABORTED.*boom") as caught:
            await w0.recv_tensors(RecvTensors(9, [key]))
        assert caught.value.derived and caught.value.message == "boom"  # the abort's own text

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pull)
        await trio.testing.wait_all_tasks_blocked()
        assert services[0].statistics().steps_held == 1
        await w0.abort_step(AbortStep(9, "ABORTED", "boom"))
    assert services[0].statistics().steps_held == 0
    # A pull for a step that never starts holds state only until the TTL passes.
    services[0]._step_ttl = 5.0
    with trio.move_on_after(1):
        await w0.recv_tensors(RecvTensors(10, [key]))
    assert services[0].statistics().steps_held == 1
    await trio.sleep(10)
    with trio.move_on_after(1):
        await w0.recv_tensors(RecvTensors(11, [key]))
    assert sorted(services[0]._steps) == [11]


async def test_health_metrics_and_reset(cluster):
    spec, services = cluster
    w0 = channels.connect("inprocess:101")
    health = await w0.health()
    assert health.task == "/job:worker/replica:0/task:0"
    assert health.incarnation == services[0].incarnation
    assert health.devices == task_devices("/job:worker/replica:0/task:0")
    assert health.stats.steps_run == 0
    assert health.stats == dataclasses.replace(services[0].statistics(),
                                               max_rss_mib=health.stats.max_rss_mib)
    assert health.stats.graph_lease_s == 600.0 and health.stats.as_dict()["graphs"] == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        health.stats.graphs = 1
    text = await w0.metrics_text()
    assert 'asyncflow_worker_steps_total{task="/job:worker/replica:0/task:0"} 0' in text
    assert "asyncflow_worker_tensor_bytes_sent_total" in text
    services[0].resources.lookup_or_create("c", "v", object)
    assert services[0].resources.statistics().as_dict() == {"c": 1}
    await w0.reset(Reset(["c"]))
    assert services[0].resources.containers() == []
    assert services[0].resources.statistics().containers == ()


def test_worker_service_names_its_devices():
    service = WorkerService("ps", 2, channels.connect, af.SessionConfig(device_count={"CPU": 2}))
    assert service.device_names == task_devices("/job:ps/replica:0/task:2", cpus=2)


def test_pulled_values_must_match_the_recv_declaration():
    from asyncflow.cluster.remote_rendezvous import RecvDeclaration, StepRendezvous
    from asyncflow.graph.shape import TensorShape
    rendezvous = StepRendezvous(1, ["/job:w/replica:0/task:0/device:CPU:0"])
    declaration = RecvDeclaration("edge_0/_Recv", af.float32, TensorShape([2]))
    good = TensorEntry("k", np.zeros(2, np.float32))
    assert rendezvous._checked(good, declaration, "k")[0] is good.value
    with pytest.raises(af.errors.InvalidArgumentError, match="received dtype int32"):
        rendezvous._checked(TensorEntry("k", np.zeros(2, np.int32)), declaration, "k")
    with pytest.raises(af.errors.InvalidArgumentError, match=r"received shape \[3\]"):
        rendezvous._checked(TensorEntry("k", np.zeros(3, np.float32)), declaration, "k")
    dead = rendezvous._checked(TensorEntry("k", None, is_dead=True), declaration, "k")
    assert dead == (None, True)
    # A shape equal to the declared one is taken at once; partly known and unknown shapes
    # are compared dimension by dimension, as before.
    partial = RecvDeclaration("edge_1/_Recv", af.float32, TensorShape([None, 3]))
    assert rendezvous._checked(TensorEntry("k", np.zeros((5, 3), np.float32)), partial,
                               "k")[0].shape == (5, 3)
    for wrong in (np.zeros((5, 4), np.float32), np.zeros(3, np.float32),
                  np.zeros((1, 5, 3), np.float32)):
        with pytest.raises(af.errors.InvalidArgumentError, match="received shape"):
            rendezvous._checked(TensorEntry("k", wrong), partial, "k")
    with pytest.raises(af.errors.InvalidArgumentError, match=r"received shape \[\]"):
        rendezvous._checked(TensorEntry("k", np.zeros((), np.float32)), declaration, "k")
    unknown = RecvDeclaration("edge_2/_Recv", af.float32, TensorShape(None))
    assert rendezvous._checked(TensorEntry("k", np.zeros((2, 2), np.float32)), unknown,
                               "k")[1] is False


@pytest.mark.parametrize("batchable", [["edge"], {"edge": "zero"}, {"edge": 1.5}, {"edge": -1}, 7])
async def test_batch_levels_that_are_not_integers_are_refused(batchable):
    service = WorkerService("worker", 0, connect=None)
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/replica:0/task:0/device:CPU:0"):
        out = af.add(af.constant(1.0), 1.0, name="out")
    header = {"version": 1, "kind": "register_graph", "tensors": [], "payload": {
        "graph": graph.as_graph_def(), "session_handle": "s",
        "options": {"fetches": [out.name], "batchable": batchable}}}
    packed = msgpack.packb(header, use_bin_type=True)
    with pytest.raises(RemoteProtocolError, match=r"register_graph\.options(\.batchable must be "
                                                  r"dict\[str, int\]|: .*levels must be >= 0)"):
        decode(MAGIC + struct.pack("<I", len(packed)) + packed)
    options = GraphOptions(fetches=[out.name], batchable={"edge": 2})
    reply = await service.register_graph(RegisterGraph(graph.as_graph_def(), "s", options))
    assert reply.graph_handle


async def _one_task_service(**options):
    """A WorkerService on inprocess:301 with ``x * 2`` registered; returns (service, channel,
    handle, feed name, fetch names)."""
    spec = af.ClusterSpec({"worker": ["inprocess:301"]})
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        x = af.placeholder(af.float32, [None], name="x")
        y = x * 2.0
    service = WorkerService("worker", 0, channels.connect, **options)
    channels.register_inprocess("inprocess:301", service)
    master = Master(spec, af.SessionConfig())
    await master.open()
    (tg,) = master.compile(graph, (x,), (y,), ()).task_graphs
    channel = channels.connect("inprocess:301")
    handle = await _register(channel, tg)
    return service, channel, handle, tg.options.feeds[0], tg.options.fetches


def _run(handle, feed, fetches, step_id, request_id):
    return RunGraph(handle, step_id, [TensorEntry(feed, np.ones(2, np.float32))], list(fetches),
                    request_id=request_id)


async def test_abort_floods_cannot_evict_tombstones_and_request_ids_run_once(autojump_clock):
    service, channel, handle, feed, fetches = await _one_task_service(max_steps=4)
    try:
        await channel.run_graph(_run(handle, feed, fetches, 7, 1))
        for step in range(1000, 1100):  # 25 times the abort marks' bound
            await channel.abort_step(AbortStep(step, "CANCELLED", "flood"))
        with pytest.raises(RemoteCallError, match="ABORTED.*step 7 was already finished"):
            await channel.run_graph(_run(handle, feed, fetches, 7, 2))
        with pytest.raises(RemoteCallError, match="ABORTED.*request_id 1 was already used"):
            await channel.run_graph(_run(handle, feed, fetches, 8, 1))
        with pytest.raises(RemoteCallError, match="INVALID_ARGUMENT.*needs a request_id"):
            await channel.run_graph(_run(handle, feed, fetches, 9, 0))
        for request_id in range(3, 3 + 4096 + 1):  # slide the window past id 2
            service._graphs[handle].replay.admit(request_id)
        with pytest.raises(RemoteCallError, match="ABORTED.*older than the last 4096"):
            await channel.run_graph(_run(handle, feed, fetches, 10, 2))
        reply = await channel.run_graph(_run(handle, feed, fetches, 11, 10**6))
        np.testing.assert_array_equal(reply.tensors[0].value, [2.0, 2.0])
    finally:
        channels.unregister_inprocess("inprocess:301", service)


async def test_idle_graphs_expire_after_their_lease(autojump_clock):
    service, channel, handle, feed, fetches = await _one_task_service(graph_lease_s=30)
    try:
        await trio.sleep(20)
        await channel.run_graph(_run(handle, feed, fetches, 1, 1))  # renews the lease
        await trio.sleep(20)
        assert (await channel.health()).stats.graphs == 1
        await trio.sleep(11)
        assert (await channel.health()).stats.graphs == 0
        with pytest.raises(RemoteCallError, match="NOT_FOUND"):
            await channel.run_graph(_run(handle, feed, fetches, 2, 2))
        assert service.statistics().graph_lease_s == 30  # what the master reads
    finally:
        channels.unregister_inprocess("inprocess:301", service)
