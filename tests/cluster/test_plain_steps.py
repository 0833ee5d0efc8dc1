"""A worker's plain steps (``worker_step._run_plain``): the RunGraph of a partition of one plan
without Sends or Recvs, untraced, runs without a ``StepRendezvous`` and without the full path's
levels, and answers every step as the full path does: the same reply frames, the same errors
(an op's, its deadline's, an AbortStep's, a client that leaves, a step id used again), the
same counters and tombstones. Each case runs on both paths (the full one by the registered
graph's ``plain`` turned off) and, over the bare same-host protocol, with the call's scope lent
and with a scope of the step's own (as over HTTP). Real servers on loopback ports, in this
process."""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.rendezvous_keys import make_key
from cyclic_garbage import failures_garbage
from hand_registration import register_partitions
from loopback_ports import free_ports
from transports import frame_templates, wire
from transports.messages import (
    AbortStep, RecvTensors, RemoteCallError, Reset, RunGraph, TensorEntry,
)


@pytest.fixture(params=["lent", "own"])
async def worker(request):
    """(spec, WorkerService, scopes lent to ``run_graph_in_scope``) of one worker on
    loopback; ``own``: the handler given no scope."""
    lend = request.param == "lent"
    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    lent = []
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0).serve)
        service = server.service
        original = service.run_graph_in_scope

        async def in_scope(request, scope):
            lent.append(scope)
            return await original(request, scope if lend else None)

        service.run_graph_in_scope = in_scope
        yield spec, service, lent
        nursery.cancel_scope.cancel()


def _graph():
    """``x * 2 + 1`` and its int64 cast, a reshape to a fed shape, a dequeue that waits."""
    graph = af.Graph()
    with graph.as_default():  # (on the CPU: with a GPU its host-memory ops make two plans)
        with af.device("/job:worker/task:0/device:CPU:0"):
            x = af.placeholder(af.float32, [None], name="x")
            shape = af.placeholder(af.int32, [1], name="shape")
            y = af.add(af.multiply(x, 2.0), 1.0, name="y")
            count = af.cast(y, af.int64, name="count")
            reshaped = af.reshape(x, shape, name="bad")
            waits = af.FIFOQueue(2, [af.float32], shapes=[[]]).dequeue(name="waits")
    return graph, (x, shape), (y, count, reshaped, waits)


async def _registered(spec, fetches=(0, 1)):
    graph, feeds, outputs = _graph()
    fed = feeds if 2 in fetches else feeds[:1]
    channel, handle, options = (await register_partitions(
        spec, graph, fed, [outputs[i] for i in fetches]))["worker"]
    return channel, handle, options


async def _until_running(service, step_id):
    """Until the worker runs step ``step_id`` (polled: its RunGraph comes over a socket)."""
    while step_id not in service._steps or not service._steps[step_id].running:
        await trio.sleep(0.001)


def _request(handle, options, step_id, values, request_id=None, **kwargs):
    return RunGraph(handle, step_id, [TensorEntry(name, value) for name, value in zip(
        options.feeds, values)], list(options.fetches), request_id=request_id or step_id,
        **kwargs)


def _frame(message):
    return b"".join(bytes(b) for b in wire.encode(message, checksums=True))


async def test_plain_and_full_steps_give_the_same_replies_and_the_plain_one_is_counted(worker):
    spec, service, lent = worker
    with trio.fail_after(30):
        channel, handle, options = await _registered(spec)
        wg = service._graphs[handle]
        assert wg.plain
        values = [np.array([0.5, -3.0, 7.25], np.float32)]
        replies, decoded = {}, frame_templates.statistics()["decoded"]
        for path, first in (("plain", 1), ("full", 11)):
            wg.plain = path == "plain"
            plain, run = service.plain_steps, service.counters.steps_run
            replies[path] = [await channel.run_graph(_request(handle, options, step_id, values))
                             for step_id in range(first, first + 3)]
            assert service.plain_steps - plain == (3 if path == "plain" else 0)
            assert service.counters.steps_run - run == 3
            assert not service._steps and all(service._tombstones[step_id] == "finished"
                                              for step_id in range(first, first + 3))
        assert [_frame(r) for r in replies["plain"]] == [_frame(r) for r in replies["full"]]
        np.testing.assert_array_equal(replies["plain"][0].tensors[0].value, [2, -5, 15.5])
        assert replies["plain"][0].tensors[1].value.dtype == np.int64
        assert channel.bare_calls > 0 and len(lent) == 6
        # the RunGraphs and replies after each signature's first two: read by offsets
        assert frame_templates.statistics()["decoded"] - decoded >= 6


async def test_a_traced_step_takes_the_full_path(worker):
    spec, service, lent = worker
    with trio.fail_after(30):
        channel, handle, options = await _registered(spec)
        values = [np.ones(3, np.float32)]
        reply = await channel.run_graph(_request(handle, options, 1, values, trace=True))
        assert service.plain_steps == 0 and reply.step_stats.nodes
        await channel.run_graph(_request(handle, options, 2, values))
        assert service.plain_steps == 1


async def test_partitions_with_transfers_take_the_full_path():
    ps_port, worker_port = free_ports(2)
    spec = af.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                           "worker": [f"127.0.0.1:{worker_port}"]})
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            x = af.placeholder(af.float32, [], name="x")
            doubled = af.multiply(x, 2.0, name="doubled")
        with af.device("/job:worker/task:0"):
            y = af.add(doubled, 1.0, name="y")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            services = [(await nursery.start(af.Server(spec, job, 0).serve)).service
                        for job in ("ps", "worker")]
            async with af.Session(graph=graph, cluster=spec) as sess:
                for step in range(3):
                    assert await sess.run(y, {x: float(step)}) == 2.0 * step + 1.0
            assert all(s.counters.steps_run == 3 and s.plain_steps == 0 for s in services)
            nursery.cancel_scope.cancel()


async def _outcome(channel, request):
    try:
        await channel.run_graph(request)
    except RemoteCallError as exc:
        return exc.code, exc.message, exc.derived
    return None


async def _outcome_interrupted(channel, service, request, interrupt):
    """``request``'s outcome when ``interrupt()`` is awaited while its step runs."""
    outcome = {}
    async with trio.open_nursery() as nursery:
        async def run():
            outcome["value"] = await _outcome(channel, request)

        nursery.start_soon(run)
        await _until_running(service, request.step_id)
        await interrupt()
    return outcome["value"]


@pytest.mark.parametrize("path", ["plain", "full"])
async def test_failures_answer_as_the_full_path_does(worker, path):
    spec, service, lent = worker
    with trio.fail_after(30):
        channel, handle, options = await _registered(spec, (2, 3))
        wg = service._graphs[handle]
        assert wg.plain
        wg.plain = path == "plain"
        x, shape = np.arange(3, dtype=np.float32), np.array([3], np.int32)
        outcomes = {}
        # An op's error: the reshape to a fed shape of another size.
        outcomes["op"] = await _outcome(channel, _request(handle, options, 1, [
            x, np.array([4], np.int32)]))
        # Its deadline: the dequeue waits.
        outcomes["deadline"] = await _outcome(channel, _request(handle, options, 2, [x, shape],
                                                                timeout_ms=200))
        # An AbortStep while it runs.
        outcomes["abort"] = await _outcome_interrupted(
            channel, service, _request(handle, options, 3, [x, shape]),
            lambda: channel.abort_step(AbortStep(3, "CANCELLED", "the client went away")))
        # A step id used again.
        outcomes["again"] = await _outcome(channel, _request(handle, options, 1, [x, shape],
                                                             request_id=50))
        # A client that leaves.
        with trio.CancelScope() as gone:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(channel.run_graph, _request(handle, options, 4, [x, shape]))
                while 4 not in service._steps:
                    await trio.sleep(0.001)
                gone.cancel()
        while service._steps or service.counters.steps_failed != 4:
            await trio.sleep(0.001)
    assert service.plain_steps == (4 if path == "plain" else 0)
    worker_task = "/job:worker/replica:0/task:0"
    code, message, derived = outcomes["op"]
    assert code == "INVALID_ARGUMENT" and not derived and "'bad'" in message
    assert outcomes["deadline"] == ("DEADLINE_EXCEEDED", f"step 2 ran past its 200 ms deadline "
                                    f"on {worker_task}", False)
    assert outcomes["abort"] == ("ABORTED", f"step 3 was aborted on {worker_task}", True)
    assert outcomes["again"] == ("ABORTED", f"step 1 was already failed on {worker_task}",
                                 False)
    assert [service._tombstones[i] for i in (1, 2, 3, 4)] == ["failed"] * 4
    assert service.counters.steps_run == 0


async def test_a_failed_plain_step_leaves_no_cyclic_garbage(worker):
    spec, service, _ = worker
    graph, (x, shape), outputs = _graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        good = await sess.run(outputs[2], {x: np.zeros(3, np.float32), shape: [3]})
        assert good.tolist() == [0.0, 0.0, 0.0] and service.plain_steps == 1
        garbage, error = await failures_garbage(
            lambda: sess.run(outputs[2], {x: np.zeros(2, np.float32), shape: [3]}),
            af.errors.InvalidArgumentError)
    assert service.plain_steps == 4
    assert not {"frame", "traceback", "InvalidArgumentError", "RemoteCallError", "Step",
                "Run", "_StepState", "StepDriver", "RunGraph"} & set(garbage), sorted(
                    set(garbage))
    assert "Reshape 'bad' on /job:worker/replica:0/task:0/device:CPU:0" in error.message


@pytest.mark.parametrize("path", ["plain", "full"])
async def test_a_pull_during_the_step_and_a_reset_answer_as_the_full_path_does(worker, path):
    """A pull of a plain step's id while it runs makes its rendezvous (the pull fails with the
    step's error, derived); a Reset while a step runs aborts it by the Reset's own error."""
    spec, service, _ = worker
    outcomes = {}
    with trio.fail_after(30):
        channel, handle, options = await _registered(spec, (2, 3))
        wg = service._graphs[handle]
        wg.plain = path == "plain"
        x, shape = np.arange(3, dtype=np.float32), np.array([3], np.int32)
        device = service.device_names[0]
        key = make_key(device, service.incarnation, device, "edge")
        async with trio.open_nursery() as nursery:
            async def run():
                outcomes["run"] = await _outcome(channel, _request(
                    handle, options, 7, [x, shape], timeout_ms=300))

            async def pull():
                try:
                    await channel.recv_tensors(RecvTensors(7, [key]))
                except RemoteCallError as exc:
                    outcomes["pull"] = exc.code, exc.message, exc.derived

            nursery.start_soon(run)
            await _until_running(service, 7)
            nursery.start_soon(pull)
        outcomes["reset"] = await _outcome_interrupted(
            channel, service, _request(handle, options, 8, [x, shape]),
            lambda: channel.reset(Reset()))
    worker_task = "/job:worker/replica:0/task:0"
    deadline = ("DEADLINE_EXCEEDED", f"step 7 ran past its 300 ms deadline on {worker_task}")
    assert outcomes["run"] == (*deadline, False) and outcomes["pull"] == (*deadline, True)
    assert outcomes["reset"] == ("ABORTED", f"step 8 was aborted by a Reset of {worker_task}",
                                 False)
    assert not service._steps and [service._tombstones[i] for i in (7, 8)] == ["failed"] * 2
    assert service.plain_steps == (2 if path == "plain" else 0)
    assert service.counters.steps_failed == 2 and service.counters.steps_run == 0
