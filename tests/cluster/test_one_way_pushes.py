"""One-way pushes: over the bare same-host protocol a PushTensors is written and not answered.

A parameter-server step is then six messages, not eight (its two pushes have no Ack), and a
push its receiver refuses (a key no Recv of the step names, a malformed request, bytes damaged
in transit) fails the step on the receiver, by the push's error naming the key: the master,
which waits for every worker's RunGraph, reports it. A receiver killed mid-step is found by
the master's RunGraph to it. The servers here serve on loopback in this trio run (the bare
protocol between them), or as real processes where one is killed.
"""
import contextlib
import time

import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster import channels
from cluster_processes import loopback_spec
from hand_registration import register_partitions
from transports.http import bare
from transports.messages import PushTensors, RemoteCallError, RunGraph, \
    TensorEntry
from transports.service import RPCS
from transports.wire import encode

PS, W0 = "/job:ps/task:0", "/job:worker/task:0"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)
VALUE = np.arange(3, dtype=np.float32)


@contextlib.asynccontextmanager
async def _loopback_ps_and_worker():
    """A ps and a worker served on loopback (HTTP and the bare same-host protocol) in this trio
    run; yields (spec, {job: af.Server})."""
    spec = af.ClusterSpec(loopback_spec({"ps": 1, "worker": 1}))
    servers = {}
    async with trio.open_nursery() as nursery:
        for job in ("ps", "worker"):
            servers[job] = await nursery.start(af.Server(spec, job, 0).serve)
        yield spec, servers
        nursery.cancel_scope.cancel()


async def _registered_parts(spec):
    """``x`` (3 floats) fed on the ps, four multiples of it pushed to the worker and summed
    there, registered by hand: {job: (channel, handle, options)}."""
    with af.Graph().as_default() as graph:
        with af.device(PS):
            x = af.placeholder(af.float32, [3], name="x")
            parts = [af.multiply(x, float(i), name=f"part{i}") for i in range(4)]
        with af.device(W0):
            total = af.add_n(parts, name="total")
    return await register_partitions(spec, graph, (x,), (total,))


def _one_way_channel(address):
    channel = channels.connect(address)
    channel.one_way = frozenset({"push_tensors"})
    return channel


async def test_a_parameter_server_step_is_six_messages_its_pushes_unanswered(cpu_only):
    # Per step: the client's two RunGraphs and their replies, the ps's push of the four
    # parameters, the worker's push of the four gradients: 4 calls, 2 of them unanswered.
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            params = [af.Variable(np.full((2, 2), i + 1.0, np.float32), name=f"p{i}")
                      for i in range(4)]
        with af.device(W0):
            x = af.placeholder(af.float32, [None, 2], name="x")
            loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
            train = af.train.GradientDescentOptimizer(0.5).minimize(loss)
    feed = {x: np.ones((1, 2), np.float32)}
    async with _loopback_ps_and_worker() as (spec, servers):
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run([p.initializer for p in params], options=TIMEOUT)
            await sess.run([loss, train], feed, options=TIMEOUT)

            def counts():
                stats = [servers[job].http.statistics() for job in ("ps", "worker")]
                return (sum(s.same_host_calls for s in stats),
                        sum(s.one_way_calls for s in stats),
                        sum(servers[job].service.statistics().tensors_pushed
                            for job in ("ps", "worker")))

            before = counts()
            for _ in range(5):
                await sess.run([loss, train], feed, options=TIMEOUT)
            calls, one_way, pushed = (a - b for a, b in zip(counts(), before))
            values = await sess.run(params, options=TIMEOUT)
    assert (calls, one_way, pushed) == (5 * 4, 5 * 2, 5 * 8)
    assert 2 * calls - one_way == 5 * 6  # messages: a call and its answer, or the call alone
    for i, value in enumerate(values):  # six steps of -0.5 * d(sum(x @ p))/dp = -0.5 * 1
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 3.0))


async def _worker_step_fails(handles, worker, step_id, push):
    """Run the worker's RunGraph of ``step_id``, call ``push()`` once it waits for its pushed
    values, and return the RemoteCallError the RunGraph fails with."""
    channel, handle, options = handles["worker"]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            outcome = {}

            async def run():
                try:
                    await channel.run_graph(RunGraph(handle, step_id, [], list(options.fetches),
                                                     request_id=step_id))
                except RemoteCallError as exc:
                    outcome["error"] = exc

            nursery.start_soon(run)
            while step_id not in worker._steps or not worker._steps[step_id].running:
                await trio.testing.wait_all_tasks_blocked()
            await push()
    assert step_id not in worker._steps
    return outcome["error"]


async def test_a_refused_one_way_push_fails_the_step_on_its_receiver_by_the_key(cpu_only):
    async with _loopback_ps_and_worker() as (spec, servers):
        handles = await _registered_parts(spec)
        worker = servers["worker"].service
        keys = sorted(worker._graphs[handles["worker"][1]].binding.pushed_keys)
        address = spec.task_address("worker", 0)
        rogue = _one_way_channel(address)
        bad = keys[0].replace("part0", "nopart")  # (well formed: no Recv of the graph)

        async def push_unknown_key():  # answered by nobody: the call returns at once
            await rogue.push_tensors(PushTensors(31, [TensorEntry(bad, VALUE)]))

        error = await _worker_step_fails(handles, worker, 31, push_unknown_key)
        assert error.code == "INVALID_ARGUMENT" and not error.derived, error
        assert bad in error.message and "PushTensors" in error.message, error.message
        # Before the step's RunGraph: no state is made for it; the RunGraph fails when it
        # comes, naming the key.
        await rogue.push_tensors(PushTensors(32, [TensorEntry(keys[0], VALUE)] * 2))
        await trio.testing.wait_all_tasks_blocked()
        assert 32 not in worker._steps
        channel, handle, options = handles["worker"]
        with pytest.raises(RemoteCallError) as info:
            await channel.run_graph(RunGraph(handle, 32, [], list(options.fetches),
                                             request_id=32))
        assert info.value.code == "ABORTED" and keys[0] in info.value.message
        assert "is given twice" in info.value.message
        # A push the receiver accepts: the step runs on it (the ps never ran these steps).
        parts = [TensorEntry(key, VALUE * i) for i, key in enumerate(keys)]
        await rogue.push_tensors(PushTensors(33, parts))
        reply = await channel.run_graph(RunGraph(handle, 33, [], list(options.fetches),
                                                 request_id=33))
        np.testing.assert_allclose(reply.tensors[0].value, VALUE * 6)
        assert servers["worker"].http.statistics().one_way_calls == 3
        await rogue.aclose()


async def test_a_push_refused_after_its_steps_recvs_took_their_values_still_fails_it(cpu_only):
    # A one-way push refused while the step runs, after each of its Recvs took its value (a
    # key pushed twice): no Recv waits to see the step's error, so its RunGraph fails by it
    # at its end (an answered push failed its sender's step so).
    async with _loopback_ps_and_worker() as (spec, servers):
        handles = await _registered_parts(spec)
        worker = servers["worker"].service
        channel, handle, options = handles["worker"]
        keys = sorted(worker._graphs[handle].binding.pushed_keys)
        rogue = _one_way_channel(spec.task_address("worker", 0))
        parts = [TensorEntry(key, VALUE * i) for i, key in enumerate(keys)]
        await rogue.push_tensors(PushTensors(36, parts))
        run = worker._run_step

        async def run_then_pushed_again(state, wg, feed_values, step):
            values = await run(state, wg, feed_values, step)  # (every Recv took its value)
            await rogue.push_tensors(PushTensors(36, parts[:1]))  # refused: ALREADY_EXISTS
            await trio.testing.wait_all_tasks_blocked()
            return values

        worker._run_step = run_then_pushed_again
        with pytest.raises(RemoteCallError) as info:
            await channel.run_graph(RunGraph(handle, 36, [], list(options.fetches),
                                             request_id=36))
        assert info.value.code == "ALREADY_EXISTS" and keys[0] in info.value.message
        assert "PushTensors" in info.value.message and 36 not in worker._steps
        await rogue.aclose()


async def test_a_one_way_push_damaged_in_transit_fails_its_step_with_data_loss(cpu_only):
    # One bit of a pushed tensor flipped on its way (the frame's header intact): the worker's
    # server finds the checksum wrong, answers nothing, and the step the header names fails
    # with DATA_LOSS naming the key; the connection is closed, the worker serves on.
    async with _loopback_ps_and_worker() as (spec, servers):
        handles = await _registered_parts(spec)
        worker = servers["worker"].service
        keys = sorted(worker._graphs[handles["worker"][1]].binding.pushed_keys)
        stream = await trio.open_unix_socket(servers["worker"].http.bare_path)
        assert await bare.handshake(stream, None)
        frame = bytearray(b"".join(bytes(b) for b in encode(
            PushTensors(41, [TensorEntry(keys[1], VALUE)]))))
        frame[-8] ^= 0x10  # in the tensor's last bytes (before its 4-byte checksum)
        index = next(i for i, rpc in enumerate(RPCS) if rpc.method == "push_tensors")

        async def damaged_push():
            await stream.send_all(bare.REQUEST.pack(len(frame), 1, index, bare.ONE_WAY, 10.0)
                                  + bytes(frame))

        error = await _worker_step_fails(handles, worker, 41, damaged_push)
        assert error.code == "DATA_LOSS", error
        assert keys[1] in error.message and "Checksum does not match" in error.message
        assert await stream.receive_some(1024) == b""  # no answer: closed
        await stream.aclose()
        assert (await handles["worker"][0].health()).task == worker.task  # serving on


async def test_a_receiver_killed_mid_step_fails_the_step_before_its_deadline(worker_processes):
    # The ps pushes ``v`` one-way to the worker and its RunGraph ends; the worker waits on a
    # queue nothing feeds and is killed: the master's RunGraph to it fails, UNAVAILABLE, long
    # before the step's 60 s deadline (no wall-clock bound asserted: DeadlineExceededError
    # would say the kill was waited out).
    spec = loopback_spec({"ps": 1, "worker": 1})
    worker_processes.start(spec, [("ps", 0), ("worker", 0)])
    with af.Graph().as_default() as graph:
        with af.device(PS):
            v = af.Variable(np.arange(4, dtype=np.float32), name="v")
        with af.device(W0):
            queue = af.FIFOQueue(1, [af.float32], shapes=[[]], name="q")
            total = af.reduce_sum(v * 2.0) + queue.dequeue()
    probes = {job: channels.connect(spec[job][0]) for job in ("ps", "worker")}
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(v.initializer, options=TIMEOUT)
        async with trio.open_nursery() as nursery:
            outcome = {}

            async def blocked_step():
                started = time.monotonic()
                try:
                    await sess.run(total, options=af.RunOptions(timeout_in_ms=60000))
                except af.errors.OpError as exc:
                    outcome["error"] = exc
                outcome["seconds"] = time.monotonic() - started

            nursery.start_soon(blocked_step)
            with trio.fail_after(20):  # the push landed and the worker's step waits
                while (await probes["ps"].health(timeout=10)).stats.tensors_pushed == 0 or \
                        (await probes["worker"].health(timeout=10)).stats.steps_in_flight == 0:
                    await trio.sleep(0.05)
            worker_processes.kill("worker", 0)
    assert isinstance(outcome["error"], af.errors.UnavailableError), outcome
    assert "/job:worker" in outcome["error"].message
    for probe in probes.values():
        await probe.aclose()
