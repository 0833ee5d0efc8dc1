"""Pushed transfers: a producer sends a small tensor to its consumer's task as soon as it exists.

The master marks the cross-task transfers of known small size outside loops as *pushed*
(``compile/transfer_order.pushed_transfers``); the producer's ``StepRendezvous`` sends them in
one ``PushTensors`` per peer and scheduling round, and the consumer's worker deposits them in
the step's rendezvous, where its Recvs find them without asking. The tests drive RunGraphs by
hand (in-process servers, or HTTP on loopback where a peer must stay silent) and read the
workers' own counters and step state.
"""
import contextlib

import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.cluster.master import Master
from asyncflow.compile import transfer_order
from cluster_processes import loopback_spec
from cyclic_garbage import cyclic_garbage
from instruments import installed, long_time_slice  # noqa: F401 (a fixture)
from transports.messages import (
    AbortStep, PushTensors, RegisterGraph, RemoteCallError, RunGraph, TensorEntry,
)

pytestmark = pytest.mark.usefixtures("long_time_slice")  # every test: one long slice

PS, W0 = "/job:ps/task:0", "/job:worker/task:0"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)


class _Spawned(trio.abc.Instrument):
    def __init__(self):
        self.spawned = 0
        self.pushes = set()  # living push tasks

    def task_spawned(self, task):
        self.spawned += 1
        if task.name.endswith("StepRendezvous._push"):
            self.pushes.add(task)

    def task_exited(self, task):
        self.pushes.discard(task)


def counting_tasks():
    return installed(_Spawned())


@contextlib.asynccontextmanager
async def _ps_and_worker(spec):
    """Serves ``spec``'s ps and worker (task 0 each) in this trio run; yields (spec, {job:
    WorkerService})."""
    services = {}
    async with trio.open_nursery() as nursery:
        for job in ("ps", "worker"):
            server = await nursery.start(af.Server(spec, job, 0).serve)
            services[job] = server.service
        yield spec, services
        nursery.cancel_scope.cancel()


@pytest.fixture
async def two_tasks():
    """ps and worker (one CPU each) in process; yields (spec, {job: WorkerService})."""
    async with _ps_and_worker(af.ClusterSpec({"ps": ["inprocess:711"],
                                              "worker": ["inprocess:712"]})) as tasks:
        yield tasks


def _scaled_parts(count=4, size=3):
    """``x`` fed on the ps, ``count`` multiples of it sent to the worker, summed there."""
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            x = af.placeholder(af.float32, [size], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(count)]
        with af.device(W0):
            total = af.add_n(parts, name="total")
    return graph, x, total


async def _registered_scaled_parts(spec, peers=None):
    """``_scaled_parts``' graphs registered on ``spec``'s tasks by ``_registered`` (``peers``
    as there): {job: (channel, handle, options)}."""
    graph, x, total = _scaled_parts()
    return await _registered(spec, graph, (x,), (total,), peers=peers)


def _silent(address):
    """``peers`` for ``_registered``: the worker's address replaced by ``address`` (a
    ``silent_peer``'s, which never answers)."""
    return {"/job:worker/replica:0/task:0": address}


async def _registered(spec, graph, feeds, fetches, peers=None):
    """Compile with a master and register each task's graph by hand; ``peers`` overrides the
    peers' addresses in every task's options. Returns {job: (channel, handle, options)}."""
    import dataclasses
    master = Master(spec, af.SessionConfig())
    await master.open()
    run = master.compile(graph, feeds, fetches, ())
    handles = {}
    for tg in run.task_graphs:
        job = tg.task.split("/")[1][4:]
        options = tg.options if peers is None else dataclasses.replace(
            tg.options, peers={**tg.options.peers, **peers})
        channel = channels.connect(spec.task_address(job, 0))
        reply = await channel.register_graph(RegisterGraph(tg.graph_def, "test", options))
        handles[job] = (channel, reply.graph_handle, options)
    await master.close()
    return handles


def _ps_training_graph(shape=(2, 2), count=4):
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            params = [af.Variable(np.full(shape, i + 1.0, np.float32), name=f"p{i}")
                      for i in range(count)]
        with af.device(W0):
            x = af.placeholder(af.float32, [None, shape[0]], name="x")
            loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
            train = af.train.GradientDescentOptimizer(0.5).minimize(loss)
    return graph, params, x, loss, train


def _transfers(stats):
    return (stats.pull_requests, stats.tensors_pulled, stats.push_requests,
            stats.tensors_pushed)


async def test_a_parameter_server_step_pushes_once_each_way_and_pulls_nothing(cluster, cpu_only):
    # The ps pushes the four parameters to the worker as its RunGraph starts (one request),
    # the worker pushes the four gradients to the ps once the backward pass made them (one
    # request): no RecvTensors round trip on the step's critical path. (On CPUs: a Send that
    # waits for a GPU pushes once its value is on the host, possibly in a request of its own.)
    spec, servers = cluster
    graph, params, x, loss, train = _ps_training_graph()
    feed = {x: np.ones((1, 2), np.float32)}
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        await sess.run([loss, train], feed, options=TIMEOUT)
        before = {name: _transfers(servers[name].service.statistics())
                  for name in ("ps:0", "worker:0")}
        await sess.run([loss, train], feed, options=TIMEOUT)
        after = {name: _transfers(servers[name].service.statistics())
                 for name in ("ps:0", "worker:0")}
        values = await sess.run(params, options=TIMEOUT)
    for i, value in enumerate(values):  # two steps of -0.5 * d(sum(x @ p))/dp = -0.5 * 1
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 1.0))
    delta = {name: tuple(a - b for a, b in zip(after[name], before[name])) for name in after}
    assert delta == {"worker:0": (0, 0, 1, 4), "ps:0": (0, 0, 1, 4)}
    for server in servers.values():
        assert not server.service._steps  # every step's state dropped once done


async def test_a_pushed_steps_state_is_freed_when_it_ends_not_by_the_cyclic_gc(cluster,
                                                                              cpu_only):
    # A pushed value's checked delivery lets go of its rendezvous once called: before, it
    # stayed in the rendezvous' table of waiters, and every step's state (rendezvous, step,
    # runs, their values) was left in reference cycles for the cyclic GC, ~76 objects a
    # parameter-server step on each of its two tasks.
    spec, servers = cluster
    graph, params, x, loss, train = _ps_training_graph()
    feed = {x: np.ones((1, 2), np.float32)}
    step_state = {"StepRendezvous", "LocalRendezvous", "Step", "Run", "_CheckedDelivery"}
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        await sess.run([loss, train], feed, options=TIMEOUT)
        with cyclic_garbage() as garbage:
            for _ in range(5):
                await sess.run([loss, train], feed, options=TIMEOUT)
    assert not step_state & set(garbage), sorted(set(garbage))
    assert sum(server.service.statistics().tensors_pushed for server in servers.values()) >= 40


async def test_a_push_that_arrives_before_the_consumers_run_graph_is_waiting_for_it(two_tasks,
                                                                                   cpu_only):
    spec, services = two_tasks
    handles = await _registered_scaled_parts(spec)
    ps_channel, ps_handle, ps_options = handles["ps"]
    w_channel, w_handle, w_options = handles["worker"]
    assert len(ps_options.pushed) == 4 and ps_options.pushed == w_options.pushed
    feed = TensorEntry(ps_options.feeds[0], np.arange(3, dtype=np.float32))
    worker = services["worker"]
    for step_id in (5, 6):  # the second step counts: the first one warms the caches
        # The ps's RunGraph answers once its push landed: the worker holds the step's state
        # (made by the push) with the four values deposited before its own RunGraph.
        await ps_channel.run_graph(RunGraph(ps_handle, step_id, [feed], [], request_id=step_id))
        state = worker._steps[step_id]
        assert not state.ran and state.rendezvous.statistics().pending_sends == 4
        with counting_tasks() as counter:
            reply = await w_channel.run_graph(RunGraph(w_handle, step_id, [],
                                                       list(w_options.fetches),
                                                       request_id=step_id))
        np.testing.assert_allclose(reply.tensors[0].value,
                                   np.arange(3, dtype=np.float32) * sum(range(4)))
        # Every Recv found its value: no pull, no task, and the step's state is gone.
        assert counter.spawned == 0 and step_id not in worker._steps
    assert _transfers(worker.statistics()) == (0, 0, 0, 0)
    assert _transfers(services["ps"].statistics()) == (0, 0, 2, 8)


async def test_pushed_values_of_a_step_the_consumer_never_runs_expire(two_tasks, autojump_clock,
                                                                       cpu_only):
    # (cpu_only: a GPU Send waits for a host callback from another thread, and meanwhile the
    # autojump clock runs on through the worker's lease checks: its graph may expire, and a
    # push naming a Recv of no registered graph is refused.)
    spec, services = two_tasks
    handles = await _registered_scaled_parts(spec)
    ps_channel, ps_handle, ps_options = handles["ps"]
    feed = TensorEntry(ps_options.feeds[0], np.ones(3, np.float32))
    await ps_channel.run_graph(RunGraph(ps_handle, 7, [feed], [], request_id=1))
    worker = services["worker"]
    assert worker._steps[7].rendezvous.statistics().pending_sends == 4
    await trio.sleep(worker._step_ttl + 1)  # (virtual time) the worker's RunGraph never came
    await ps_channel.run_graph(RunGraph(ps_handle, 8, [feed], [], request_id=2))
    assert 7 not in worker._steps and worker._tombstones[7] == "expired"
    key = min(worker._graphs[handles["worker"][1]].binding.pushed_keys)
    with pytest.raises(RemoteCallError, match="ABORTED|already expired"):  # late: refused
        await channels.connect(spec.task_address("worker", 0)).push_tensors(
            PushTensors(7, [TensorEntry(key, np.ones(3, np.float32))]))


async def test_only_small_transfers_of_known_size_are_pushed(two_tasks):
    # A transfer of PUSH_MAX_BYTES or more stays pulled (a same-host reply lends its memory),
    # as do strings and tensors of unknown shape.
    spec, _ = two_tasks
    with af.Graph().as_default() as graph:
        with af.device(PS):
            big = af.Variable(np.zeros(transfer_order.PUSH_MAX_BYTES // 4, np.float32),
                              name="big")
            small = af.Variable(np.zeros(transfer_order.PUSH_MAX_BYTES // 4 - 1, np.float32),
                                name="small")
            unknown = af.identity(af.placeholder(af.float32, [None], name="unknown"))
            words = af.identity(af.placeholder(af.string, [2], name="words"))
        with af.device(W0):
            out = [af.reduce_sum(big), af.reduce_sum(small), af.reduce_sum(unknown),
                   af.identity(words)]
    master = Master(spec, af.SessionConfig())
    await master.open()
    run = master.compile(graph, (unknown.op.inputs[0], words.op.inputs[0]), out, ())
    await master.close()
    (pushed,) = {tuple(tg.options.pushed) for tg in run.task_graphs}
    assert len(pushed) == 1 and "small" in pushed[0]


@pytest.fixture
async def silent_peer():
    """A TCP listener on loopback that accepts and never answers; yields (address, accepted),
    ``accepted`` an Event set once a connection brought bytes."""
    accepted = trio.Event()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

        async def hold(stream):
            async with stream:
                while await stream.receive_some(65536):
                    accepted.set()

        await nursery.start(trio.serve_listeners, hold, listeners)
        port = listeners[0].socket.getsockname()[1]
        yield f"127.0.0.1:{port}", accepted
        nursery.cancel_scope.cancel()


@pytest.fixture
async def ps_over_http():
    """A ps and a worker served over HTTP on loopback; yields (spec, {job: WorkerService})."""
    async with _ps_and_worker(af.ClusterSpec(loopback_spec({"ps": 1, "worker": 1}))) as tasks:
        yield tasks


async def test_a_step_aborted_while_its_push_is_in_flight_leaves_no_state(cpu_only,
                                                                           ps_over_http,
                                                                           silent_peer):
    # (cpu_only: under a GPU the Send's value reaches the host on its own schedule and may
    # take a push request of its own: two push tasks, where the count below expects one.)
    spec, services = ps_over_http
    address, accepted = silent_peer
    ps_channel, ps_handle, ps_options = (await _registered_scaled_parts(
        spec, _silent(address)))["ps"]
    ps = services["ps"]
    outcome = {}

    async def ps_step():
        try:
            await ps_channel.run_graph(RunGraph(ps_handle, 11, [TensorEntry(
                ps_options.feeds[0], np.ones(3, np.float32))], [], request_id=1))
        except RemoteCallError as exc:
            outcome["error"] = exc

    with trio.fail_after(20), counting_tasks() as tasks:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ps_step)
            await accepted.wait()  # the push's request reached the peer, which never answers
            assert ps._steps[11].running and len(tasks.pushes) == 1
            await ps_channel.abort_step(AbortStep(11, "CANCELLED", "the client went away"))
    assert outcome["error"].code == "ABORTED" and outcome["error"].derived
    assert not ps._steps and 11 in ps._tombstones
    assert not tasks.pushes  # the push task ended with the step


async def test_a_push_to_a_peer_that_never_answers_fails_the_step_by_its_deadline(
        ps_over_http, silent_peer):
    spec, services = ps_over_http
    ps_channel, ps_handle, ps_options = (await _registered_scaled_parts(
        spec, _silent(silent_peer[0])))["ps"]
    with trio.fail_after(20), pytest.raises(RemoteCallError) as info:
        await ps_channel.run_graph(RunGraph(ps_handle, 12, [TensorEntry(
            ps_options.feeds[0], np.ones(3, np.float32))], [], request_id=1, timeout_ms=300))
    assert info.value.code == "DEADLINE_EXCEEDED"
    assert 12 not in services["ps"]._steps


@contextlib.asynccontextmanager
async def _worker_behind_a_bitflip_proxy():
    """A ps and a worker whose server sits behind a ``BitFlipProxy``, and a session whose
    step pushes the ps's ``v`` (1000 ones) to the worker: yields ``(proxy, sess, total)``
    with one intact step run (``total`` is 2000)."""
    from bitflip_proxy import BitFlipProxy
    from loopback_ports import free_ports
    proxy = BitFlipProxy()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        (ps_port,) = free_ports(1)
        spec = af.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                               "worker": [f"127.0.0.1:{proxy.port}"]})
        await nursery.start(af.Server(spec, "ps", 0, port=ps_port).serve)
        worker = await nursery.start(af.Server(spec, "worker", 0, port=0).serve)
        proxy.target = worker.address
        with af.Graph().as_default() as graph:
            with af.device(PS):
                v = af.Variable(af.ones([1000], af.float32), name="v")
            with af.device(W0):
                total = af.reduce_sum(v * 2.0)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run(v.initializer, options=TIMEOUT)
            assert await sess.run(total, options=TIMEOUT) == 2000.0
            yield proxy, sess, total
        nursery.cancel_scope.cancel()


async def _push_data_loss(proxy, sess, total):
    """The message of the DataLossError that fails a step of ``total`` whose push ``proxy``
    damaged once; it names the push."""
    with trio.fail_after(30), pytest.raises(af.errors.DataLossError) as info:
        await sess.run(total, options=TIMEOUT)
    assert proxy.flipped == 1
    message = str(info.value)
    assert "PushTensors to /job:worker/replica:0/task:0" in message, message
    return message


async def test_a_flipped_bit_in_a_pushed_tensor_fails_the_step():
    # The worker sits behind a proxy that damages one byte of the ps's PushTensors request:
    # the worker's server refuses the frame, the ps's push fails, and so does the step.
    async with _worker_behind_a_bitflip_proxy() as (proxy, sess, total):
        proxy.arm(-12, in_body=True, path="/push", requests=True)  # in the tensor's bytes
        # (A damaged push is DATA_LOSS, as a damaged pull is: the server answers 400 and
        # keeps serving, but its answer names the code, so the step does not report a
        # bit flip in transit as the user's invalid argument.)
        message = await _push_data_loss(proxy, sess, total)
        assert "edge_0_v" in message and "Checksum does not match" in message, message
        assert await sess.run(total, options=TIMEOUT) == 2000.0  # intact again


async def test_a_flipped_bit_in_a_pushs_answer_fails_the_step_with_data_loss():
    # The push's Ack comes back damaged: the pushing task's step fails with DataLossError
    # naming the push (as a damaged pull's reply does), not an internal error.
    async with _worker_behind_a_bitflip_proxy() as (proxy, sess, total):
        proxy.arm(8, in_body=True, path="/push")  # in the Ack's frame prefix
        await _push_data_loss(proxy, sess, total)
        assert await sess.run(total, options=TIMEOUT) == 2000.0  # intact again
