"""Which pushes a worker accepts (``cluster/push_acceptance.py``): a pushed key must be the key
of a pushed Recv of a graph registered there (of the step's own graph once its RunGraph
started), from a task of the cluster, for a plausible step; a refused push names the key,
leaves no state and loses nothing stored; pushes for steps not yet run park within limits.

The graphs are the ones of ``test_pushes.py`` (its helpers), registered by hand on in-process
servers, or on servers over HTTP on loopback where the status code on the wire matters.
"""
import contextlib

import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster import channels
from cluster_processes import loopback_spec
from test_pushes import (  # noqa: F401 (fixtures)
    PS, TIMEOUT, W0, _registered, _registered_scaled_parts, ps_over_http, two_tasks,
)
from transports.messages import (
    AbortStep, DeregisterGraph, PushTensors, RemoteCallError, RunGraph, TensorEntry,
)

VALUE = np.ones(3, np.float32)  # what a pushed part of ``_scaled_parts`` holds


async def _registered_parts(tasks):
    """``_scaled_parts``' graphs registered on ``tasks`` (a fixture's ``(spec, services)``);
    returns (the worker's service, {job: (channel, handle, options)}, the four keys the
    worker's graph accepts, sorted)."""
    spec, services = tasks
    handles = await _registered_scaled_parts(spec)
    worker = services["worker"]
    return worker, handles, _keys(worker, handles["worker"][1])


@contextlib.asynccontextmanager
async def _worker_step_waiting(handles, step_id, replies):
    """The worker's RunGraph of ``step_id`` (its graph of ``handles``) started and waiting for
    its pushes while the body runs (within 20 s); its reply appended to ``replies``."""
    channel, w_handle, w_options = handles["worker"]

    async def worker_step():
        replies.append(await channel.run_graph(RunGraph(w_handle, step_id, [],
                                                          list(w_options.fetches),
                                                          request_id=step_id)))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker_step)
            await trio.testing.wait_all_tasks_blocked()
            yield


NO_WATCHDOG = af.SessionConfig(health_check_interval_s=60.0)  # (no Health during the steps)


def _pushed_variable():
    """``(graph, v, total)``: a variable ``v`` of [0, 1, 2, 3] on the ps, whose double the worker
    sums (12.0): ``v`` crosses to the worker in the step, pushed by the ps."""
    with af.Graph().as_default() as graph:
        with af.device(PS):
            v = af.Variable(np.arange(4, dtype=np.float32), name="v")
        with af.device(W0):
            total = af.reduce_sum(v * 2.0)
    return graph, v, total


def _keys(service, handle):
    return sorted(service._graphs[handle].binding.pushed_keys)


def _refusals(key):
    """``(step id, entries, code, what the message says)`` for pushes the worker must refuse;
    ``key`` is a key its graph accepts."""
    src, incarnation, dst, tensor, frame = key.split(";")
    evil = "/job:evil/replica:0/task:9/device:CPU:0"
    own = "/job:worker/replica:0/task:0/device:CPU:7"
    return [
        (30, [], "INVALID_ARGUMENT", "carries no tensors"),
        (31, [TensorEntry("not a key", VALUE)], "INVALID_ARGUMENT", "malformed rendezvous key"),
        (32, [TensorEntry(f"{dst};{incarnation};{dst};{tensor};{frame}", VALUE)],
         "INVALID_ARGUMENT", "source device of this worker"),
        (33, [TensorEntry(f"{src};{incarnation};{src};{tensor};{frame}", VALUE)],
         "INVALID_ARGUMENT", "not a device of this worker"),
        (34, [TensorEntry(key, None)], "INVALID_ARGUMENT", "carries no value"),
        (35, [TensorEntry(key, VALUE), TensorEntry(key, VALUE)], "INVALID_ARGUMENT",
         "given twice"),
        (36, [TensorEntry(f"{src};{incarnation};{dst};{tensor};77:1", VALUE)],
         "INVALID_ARGUMENT", "never in a loop"),
        (29, [TensorEntry(key, np.zeros(1 << 18, np.float32))], "INVALID_ARGUMENT",
         "carries 1048576 bytes, but pushed transfers are under 1048576"),
        (0, [TensorEntry(key, VALUE)], "INVALID_ARGUMENT", "step 0, which no master draws"),
        (-5, [TensorEntry(key, VALUE)], "INVALID_ARGUMENT", "which no master draws"),
        (1 << 63, [TensorEntry(key, VALUE)], "INVALID_ARGUMENT", "which no master draws"),
        # A task the cluster does not have, and this worker's own task (another device).
        (37, [TensorEntry(key, VALUE), TensorEntry(f"{evil};{incarnation};{dst};{tensor};"
                                                   f"{frame}", VALUE)],
         "INVALID_ARGUMENT", "source task /job:evil/replica:0/task:9, which is not a peer"),
        (38, [TensorEntry(f"{own};{incarnation};{dst};{tensor};{frame}", VALUE)],
         "INVALID_ARGUMENT", "source task /job:worker/replica:0/task:0, which is not a peer"),
        # The cluster's ps, but no Recv of a graph here: another incarnation, another tensor.
        (39, [TensorEntry(f"{src};{'1' * 16};{dst};{tensor};{frame}", VALUE)], "ABORTED",
         "names no pushed Recv of a graph registered on /job:worker/replica:0/task:0"),
        (40, [TensorEntry(f"{src};{incarnation};{dst};{tensor}x;{frame}", VALUE)], "ABORTED",
         "names no pushed Recv of a graph registered"),
    ]


async def test_a_push_must_name_a_pushed_recv_of_a_graph_registered_here(two_tasks):
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    assert len(keys) == 4 and all(k.startswith("/job:ps/replica:0/task:0/") for k in keys)
    for step_id, entries, code, message in _refusals(keys[0]):
        with pytest.raises(RemoteCallError, match=message) as info:
            await channel.push_tensors(PushTensors(step_id, entries))
        assert info.value.code == code, (step_id, info.value)
        if entries and entries[-1].key.count(";") == 4 and "master draws" not in message:
            assert entries[-1].key in info.value.message  # the refusal names the key
    # Nothing was created or counted for any of them, and the worker still serves.
    assert not worker._steps and (await channel.health()).stats.steps_held == 0
    assert worker.statistics().bytes_received == 0 and worker.status.peers == {}
    # The graph's own keys are accepted: the step's state holds them until its RunGraph.
    await channel.push_tensors(PushTensors(41, [TensorEntry(k, VALUE) for k in keys]))
    assert worker._steps[41].rendezvous.statistics().pending_sends == 4
    assert set(worker.status.peers) == {"/job:ps/replica:0/task:0"}


async def test_a_refused_push_over_http_is_a_400_and_the_worker_keeps_serving(ps_over_http):
    worker, handles, (key, other, *_) = await _registered_parts(ps_over_http)
    channel = handles["worker"][0]
    made_up = "/job:ghost/replica:0/task:0/device:CPU:0" + key[key.index(";"):]
    with trio.fail_after(20):
        for _ in range(3):  # (a made-up task per push once grew the status page's peer table)
            # Beside a key of the graph: not a task of that graph's master's cluster.
            with pytest.raises(RemoteCallError, match="which is not a peer task") as info:
                await channel.push_tensors(PushTensors(51, [TensorEntry(other, VALUE),
                                                            TensorEntry(made_up, VALUE)]))
            assert info.value.code == "INVALID_ARGUMENT" and made_up in info.value.message
            # Alone: no graph here names it, which is what a lost graph's pushes meet (409),
            # whichever cluster it is from; the message says no cluster known here has it.
            with pytest.raises(RemoteCallError, match="ghost.* is in no cluster") as info:
                await channel.push_tensors(PushTensors(51, [TensorEntry(made_up, VALUE)]))
            assert info.value.code == "ABORTED" and made_up in info.value.message
        await channel.push_tensors(PushTensors(51, [TensorEntry(key, VALUE)]))
        assert (await channel.health()).stats.steps_held == 1
    assert set(worker.status.peers) == {"/job:ps/replica:0/task:0"}


async def test_a_running_steps_push_must_name_a_recv_of_its_own_graph(two_tasks):
    # Once a step's RunGraph bound it to its graph, a key of another graph registered on the
    # same worker is refused (INVALID_ARGUMENT), and the step still runs on its own pushes.
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    with af.Graph().as_default() as graph:  # a second graph, with a transfer of its own
        with af.device(PS):
            y = af.placeholder(af.float32, [5], name="y")
            doubled = af.multiply(y, 2.0, name="doubled")
        with af.device(W0):
            total = af.reduce_sum(doubled)
    second = await _registered(two_tasks[0], graph, (y,), (total,))
    foreign = _keys(worker, second["worker"][1])[0]
    assert foreign not in keys
    # A step not yet run here may take keys of either graph (each a pushed Recv registered).
    await channel.push_tensors(PushTensors(62, [TensorEntry(keys[0], VALUE), TensorEntry(
        foreign, np.ones(5, np.float32))]))
    assert worker._steps[62].rendezvous.statistics().pending_sends == 2
    ps_channel, ps_handle, ps_options = handles["ps"]
    replies = []
    async with _worker_step_waiting(handles, 61, replies):
        assert worker._steps[61].rendezvous.binding is not None  # it waits for its pushes
        with pytest.raises(RemoteCallError, match="no pushed Recv of the step's graph") \
                as info:
            await channel.push_tensors(PushTensors(61, [TensorEntry(foreign, np.ones(
                5, np.float32))]))
        assert info.value.code == "INVALID_ARGUMENT" and foreign in info.value.message
        await ps_channel.run_graph(RunGraph(ps_handle, 61, [TensorEntry(
            ps_options.feeds[0], np.arange(3, dtype=np.float32))], [], request_id=61))
    np.testing.assert_allclose(replies[0].tensors[0].value, np.arange(3) * sum(range(4)))
    assert 61 not in worker._steps  # done: nothing of the refused push was left
    assert set(worker._parked) == {62} and worker._parked_bytes == VALUE.nbytes + 5 * 4


async def test_a_key_pushed_again_is_refused_and_what_was_stored_stays(two_tasks):
    worker, handles, keys = await _registered_parts(two_tasks)
    channel, w_handle, w_options = handles["worker"]
    values = [np.full(3, float(i + 1), np.float32) for i in range(4)]
    await channel.push_tensors(PushTensors(71, [TensorEntry(keys[0], values[0]),
                                                TensorEntry(keys[1], values[1])]))
    # keys[2] is new, keys[0] is not: the whole push is refused, keys[2] is not deposited.
    with pytest.raises(RemoteCallError, match="Duplicated send") as info:
        await channel.push_tensors(PushTensors(71, [TensorEntry(keys[2], values[2]),
                                                    TensorEntry(keys[0], -values[0])]))
    assert info.value.code == "ALREADY_EXISTS" and keys[0] in info.value.message
    assert worker._steps[71].rendezvous.statistics().pending_sends == 2
    await channel.push_tensors(PushTensors(71, [TensorEntry(keys[2], values[2]),
                                                TensorEntry(keys[3], values[3])]))
    with trio.fail_after(20):
        reply = await channel.run_graph(RunGraph(w_handle, 71, [], list(w_options.fetches),
                                                   request_id=71))
    np.testing.assert_allclose(reply.tensors[0].value, sum(values))  # the first values
    assert 71 not in worker._steps


async def test_pushes_for_steps_not_yet_run_park_within_a_count_and_a_byte_limit(two_tasks):
    worker, handles, keys = await _registered_parts(two_tasks)
    channel, w_handle, w_options = handles["worker"]
    worker.max_parked_steps, worker.max_parked_bytes = 2, 5 * VALUE.nbytes

    async def push(step_id, *chosen):
        await channel.push_tensors(PushTensors(step_id, [TensorEntry(keys[i], VALUE)
                                                         for i in chosen]))

    await push(81, 0)
    await push(82, 0, 1)
    with pytest.raises(RemoteCallError, match="PushTensors of step 83: .* parks the pushed "
                       "values of 2 steps") as info:  # a third step: over the count
        await push(83, 0)
    assert info.value.code == "RESOURCE_EXHAUSTED" and 83 not in worker._steps
    await push(81, 1)  # a step already parked takes more, within the bytes: 4 of 5 values
    with pytest.raises(RemoteCallError, match="step 82: .*48 bytes.*24 bytes more") as info:
        await push(82, 2, 3)  # over the bytes: refused whole, nothing of it deposited
    assert info.value.code == "RESOURCE_EXHAUSTED"
    assert worker._steps[82].rendezvous.statistics().pending_sends == 2
    # A parked step leaves the account when it is dropped (here: aborted) ...
    await channel.abort_step(AbortStep(81, "CANCELLED", "the client went away"))
    await push(83, 0, 1)
    # ... or when its RunGraph starts: step 82 runs on its pushes; then 84 may park.
    await push(82, 2)
    with pytest.raises(RemoteCallError, match="step 84"):
        await push(84, 0, 1)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run_graph, RunGraph(w_handle, 82, [],
                                                             list(w_options.fetches),
                                                             request_id=82))
            await trio.testing.wait_all_tasks_blocked()
            await push(84, 0, 1)  # 82 is bound now: no longer parked
            await push(82, 3)     # and its last value is not counted as parked
    assert 82 not in worker._steps and set(worker._steps) == {83, 84}


def _ps_failed_derived(ps, messages=()):
    """The ps's step failed ABORTED and derived (its push was refused; a message of
    ``messages`` where given), or, its push one-way, ended well: never a root cause."""
    if not ps.status.errors:
        assert ps.statistics().steps_failed == 0
        return
    failed = ps.status.errors[-1]
    assert failed["code"] == "ABORTED" and failed["derived"], failed
    assert not messages or any(m in failed["message"] for m in messages), failed


async def test_a_push_to_a_worker_that_lost_its_graph_leaves_the_loss_as_the_root_cause(cluster):
    # The worker's registration is gone (as after an expired lease): the ps's push of ``v`` is
    # refused ABORTED (no graph here names its key), which the ps reports as derived, so the
    # step fails as a lost graph handle does, AbortedError (a recovery loop's error, never the
    # push's refusal), and the next run registers the graph again and pushes as before.
    spec, servers = cluster
    graph, v, total = _pushed_variable()
    options = af.RunOptions(timeout_in_ms=20000)
    async with af.Session(graph=graph, cluster=spec, config=NO_WATCHDOG) as sess:
        await sess.run(v.initializer, options=options)
        assert await sess.run(total, options=options) == 12.0
        worker = servers["worker:0"].service
        assert worker.statistics().tensors_pushed == 0 and len(worker._graphs) == 1
        for handle in list(worker._graphs):
            await worker.deregister_graph(DeregisterGraph(handle))
        with pytest.raises(af.errors.AbortedError, match="no graph with handle"):
            await sess.run(total, options=options)
        # The ps's step: its push refused (or, where its Send waits for a GPU, the step aborted
        # by the master first, with or without the worker's error as its reason): derived
        # either way; a one-way push (the bare same-host protocol) is refused by the worker
        # alone, and the ps's step ends well.
        _ps_failed_derived(servers["ps:0"].service, (
            "names no pushed Recv of a graph registered", "was aborted on /job:ps",
            "no graph with handle"))
        assert await sess.run(total, options=options) == 12.0


async def test_a_push_for_a_step_that_already_ran_here_is_refused(two_tasks):
    # The worker's RunGraph ended (each Recv took its pushed value) while its state waits for
    # the ps to pull ``big`` (1 MiB: pulled, not pushed): a push naming one of its keys again
    # would never be read, so it is refused and nothing is deposited.
    spec, services = two_tasks
    with af.Graph().as_default() as graph:
        with af.device(PS):
            x = af.placeholder(af.float32, [3], name="x")
            part = af.multiply(x, 2.0, name="part")
        with af.device(W0):
            big = af.fill([1 << 18], af.reduce_sum(part))
        with af.device(PS):
            out = af.reduce_max(big)
    handles = await _registered(spec, graph, (x,), (out,))
    worker = services["worker"]
    channel, w_handle, w_options = handles["worker"]
    (key,) = _keys(worker, w_handle)
    await channel.push_tensors(PushTensors(91, [TensorEntry(key, VALUE)]))
    with trio.fail_after(20):
        await channel.run_graph(RunGraph(w_handle, 91, [], list(w_options.fetches),
                                         request_id=91))
    state = worker._steps[91]
    assert state.ran and state.rendezvous.statistics().pending_sends == 1  # big, for the ps
    with pytest.raises(RemoteCallError, match="step 91: the step already ran") as info:
        await channel.push_tensors(PushTensors(91, [TensorEntry(key, VALUE)]))
    assert info.value.code == "ABORTED"
    assert state.rendezvous.statistics().pending_sends == 1


# -- review (rrev34) ---------------------------------------------------------------------------

async def test_a_key_pushed_again_after_its_recv_took_it_is_refused_and_the_step_ends(
        two_tasks):
    # The step runs: its Recv took keys[0]'s value and waits for the others. keys[0] pushed
    # again is a key pushed twice (ALREADY_EXISTS), not a value deposited under a key nobody
    # will read again, which kept the finished step's state (and the value) until step_ttl.
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    values = [np.full(3, float(i + 1), np.float32) for i in range(4)]
    await channel.push_tensors(PushTensors(73, [TensorEntry(keys[0], values[0])]))
    replies = []
    async with _worker_step_waiting(handles, 73, replies):
        stats = worker._steps[73].rendezvous.statistics()
        assert stats.pending_sends == 0 and stats.recvs == 1  # keys[0] was taken
        with pytest.raises(RemoteCallError, match="Duplicated send") as info:
            await channel.push_tensors(PushTensors(73, [TensorEntry(keys[1], values[1]),
                                                        TensorEntry(keys[0], -values[0])]))
        assert info.value.code == "ALREADY_EXISTS" and keys[0] in info.value.message
        assert worker._steps[73].rendezvous.statistics().pending_sends == 0
        await channel.push_tensors(PushTensors(73, [TensorEntry(k, v) for k, v in
                                                    zip(keys[1:], values[1:])]))
    np.testing.assert_allclose(replies[0].tensors[0].value, sum(values))
    assert 73 not in worker._steps  # done at once: nothing stray was left in it


async def test_a_pushed_string_value_is_refused_so_parked_bytes_count_what_is_held(two_tasks):
    # Pushed transfers are never strings (transfer_order.pushed_transfers pulls them). A string
    # tensor's nbytes counts its pointers, not its bytes: accepted, it parked a megabyte as
    # eight bytes, past max_parked_bytes.
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    worker.max_parked_bytes = 1 << 16
    strings = np.array([b"x" * (1 << 20)], dtype=object)
    with pytest.raises(RemoteCallError, match="strings") as info:
        await channel.push_tensors(PushTensors(75, [TensorEntry(keys[0], strings)]))
    assert info.value.code == "INVALID_ARGUMENT" and keys[0] in info.value.message
    assert not worker._steps and not worker._parked and worker._parked_bytes == 0


async def test_a_parked_step_leaves_the_account_when_it_runs_or_aborts(cpu_only, two_tasks):
    # (cpu_only: under a GPU the Sends' values reach the host on their own schedule, so the
    # ps's pushes need not all have landed when its tasks block.)
    # The account held each parked step's state (and counted its bytes) until a later push
    # found a limit reached: a finished step's whole state lived on with no push to come.
    import gc
    import weakref
    worker, handles, keys = await _registered_parts(two_tasks)
    channel, w_handle, w_options = handles["worker"]
    ps_channel, ps_handle, ps_options = handles["ps"]
    # Runs: the ps pushes to the worker's step before (or after) its RunGraph: parked or not.
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ps_channel.run_graph, RunGraph(ps_handle, 101, [TensorEntry(
                ps_options.feeds[0], np.arange(3, dtype=np.float32))], [], request_id=1))
            await trio.testing.wait_all_tasks_blocked()
            assert set(worker._parked) == {101} and worker._parked_bytes == 4 * VALUE.nbytes
            state = weakref.ref(worker._steps[101].rendezvous)
            await channel.run_graph(RunGraph(w_handle, 101, [], list(w_options.fetches),
                                             request_id=1))
    assert 101 not in worker._steps and not worker._parked and worker._parked_bytes == 0
    gc.collect()
    assert state() is None
    # Aborts.
    await channel.push_tensors(PushTensors(102, [TensorEntry(keys[0], VALUE)]))
    await channel.abort_step(AbortStep(102, "CANCELLED", "the client went away"))
    assert not worker._parked and worker._parked_bytes == 0


async def test_a_parked_step_leaves_the_account_when_it_expires(two_tasks, autojump_clock):
    # (No RunGraph here: under the fake GPU a Send's host callback from a thread lets the
    # autojump clock run on to the graph's lease: test_pushes' expiry test says so.)
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    # Expires by step_ttl (dropped when the next step's state is made).
    await channel.push_tensors(PushTensors(103, [TensorEntry(keys[0], VALUE)]))
    await trio.sleep(worker._step_ttl + 1)
    await channel.push_tensors(PushTensors(104, [TensorEntry(keys[1], VALUE)]))
    assert 103 not in worker._steps and set(worker._parked) == {104}
    assert worker._parked_bytes == VALUE.nbytes


async def test_refusals_over_http_keep_their_codes_and_the_worker_keeps_serving(ps_over_http):
    # 409 (ALREADY_EXISTS, ABORTED) and 429 (RESOURCE_EXHAUSTED) on the wire, each naming the
    # key or step; the worker answers the next request as before.
    worker, handles, keys = await _registered_parts(ps_over_http)
    channel = handles["worker"][0]
    worker.max_parked_steps = 1
    with trio.fail_after(20):
        await channel.push_tensors(PushTensors(111, [TensorEntry(keys[0], VALUE)]))
        with pytest.raises(RemoteCallError, match=f"Duplicated send: {keys[0]}") as info:
            await channel.push_tensors(PushTensors(111, [TensorEntry(keys[0], VALUE)]))
        assert info.value.code == "ALREADY_EXISTS"
        with pytest.raises(RemoteCallError, match="PushTensors of step 112: ") as info:
            await channel.push_tensors(PushTensors(112, [TensorEntry(keys[0], VALUE)]))
        assert info.value.code == "RESOURCE_EXHAUSTED"
        await channel.abort_step(AbortStep(111, "CANCELLED", "gone"))
        with pytest.raises(RemoteCallError, match="step 111 was already aborted") as info:
            await channel.push_tensors(PushTensors(111, [TensorEntry(keys[1], VALUE)]))
        assert info.value.code == "ABORTED"
        await channel.push_tensors(PushTensors(112, [TensorEntry(keys[0], VALUE)]))
        assert (await channel.health()).stats.steps_held == 1
    assert set(worker._parked) == {112}


async def test_the_chain_workload_pushes_every_step_and_leaves_nothing_parked(ps_over_http):
    # bench_vs_tf1's chain: p * 2 on the worker, pushed to the ps, * 2 there, fetched. Every
    # step's push is accepted (parked when it beats the ps's RunGraph) and, the steps done,
    # neither task holds a step or a parked byte.
    spec, services = ps_over_http
    with af.Graph().as_default() as graph:
        p = af.placeholder(af.float32, [], name="p")
        with af.device(W0):
            once = p * 2.0
        with af.device(PS):
            twice = once * 2.0
    options = af.RunOptions(timeout_in_ms=20000)
    async with af.Session(graph=graph, cluster=spec) as sess:
        for i in range(30):
            assert await sess.run(twice, {p: float(i)}, options=options) == 4.0 * i
    ps = services["ps"]
    assert ps.statistics().tensors_pushed == 0 and services["worker"].statistics(
        ).tensors_pushed == 30
    for service in services.values():
        assert not service._steps and not service._parked and service._parked_bytes == 0


async def test_between_graph_replicas_push_to_one_ps_at_once(cluster):
    # Two clients (sessions), each with its own graph: parameters on the shared ps, the
    # forward and backward pass on its own worker; the ps holds both sessions' graphs, whose
    # pushed keys are the same tensor names from different workers. Steps of both run at
    # once; every push is accepted, and the shared parameters take every update.
    spec, servers = cluster

    def replica(worker):
        graph = af.Graph()
        with graph.as_default():
            with af.device(PS):
                params = [af.Variable(np.full((2, 2), i + 1.0, np.float32), name=f"p{i}")
                          for i in range(2)]
            with af.device(f"/job:worker/task:{worker}"):
                x = af.placeholder(af.float32, [1, 2], name="x")
                loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
                train = af.train.GradientDescentOptimizer(0.25).minimize(loss)
        return graph, params, x, train

    graphs = [replica(0), replica(1)]
    feed = np.ones((1, 2), np.float32)
    async with af.Session(graph=graphs[0][0], cluster=spec) as first, \
            af.Session(graph=graphs[1][0], cluster=spec) as second:
        await first.run([p.initializer for p in graphs[0][1]], options=TIMEOUT)

        async def steps(sess, graph, params, x, train):
            for _ in range(10):
                await sess.run(train, {x: feed}, options=TIMEOUT)

        async with trio.open_nursery() as nursery:
            for sess, replica_ in zip((first, second), graphs):
                nursery.start_soon(steps, sess, *replica_)
        values = await second.run(graphs[1][1], options=TIMEOUT)
    for i, value in enumerate(values):  # each step: d loss / d p = 1 everywhere
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 20 * 0.25))
    ps = servers["ps:0"].service
    assert not ps._steps and not ps._parked and ps._parked_bytes == 0
    assert ps.statistics().steps_failed == 0


async def test_a_push_parked_under_a_graph_registered_again_runs_under_the_new_handle(
        two_tasks):
    # The master registers a graph again when its lease runs low: the old handle may go while
    # a push for a step not yet run is parked; the step runs under the new handle on it.
    worker, handles, keys = await _registered_parts(two_tasks)
    await handles["worker"][0].push_tensors(PushTensors(121, [TensorEntry(k, VALUE)
                                                              for k in keys[:2]]))
    again = await _registered_scaled_parts(two_tasks[0])
    channel, w_handle, w_options = again["worker"]
    assert w_handle != handles["worker"][1] and _keys(worker, w_handle) == keys
    await channel.deregister_graph(DeregisterGraph(handles["worker"][1]))
    await channel.push_tensors(PushTensors(121, [TensorEntry(k, VALUE) for k in keys[2:]]))
    with trio.fail_after(20):
        reply = await channel.run_graph(RunGraph(w_handle, 121, [], list(w_options.fetches),
                                                 request_id=1))
    np.testing.assert_allclose(reply.tensors[0].value, 4 * VALUE)
    assert not worker._steps and not worker._parked and worker._parked_bytes == 0


async def test_a_push_refused_for_the_step_limit_leaves_no_state_and_no_account(two_tasks):
    worker, handles, keys = await _registered_parts(two_tasks)
    channel = handles["worker"][0]
    worker._max_steps = 1
    await channel.push_tensors(PushTensors(131, [TensorEntry(keys[0], VALUE)]))
    with pytest.raises(RemoteCallError, match="already holds 1 steps") as info:
        await channel.push_tensors(PushTensors(132, [TensorEntry(keys[0], VALUE)]))
    assert info.value.code == "RESOURCE_EXHAUSTED"
    assert set(worker._steps) == {131} and set(worker._parked) == {131}
    assert worker._parked_bytes == VALUE.nbytes


async def test_a_push_from_a_task_the_workers_own_cluster_spec_lacks_is_judged_by_the_master(
        cpu_only):
    # The worker was started with a ClusterSpec of its own job only (as a TF_CONFIG may give
    # it); the master's (the session's, TF's ClusterSpec propagation) has the ps too. Its
    # pushes are accepted while the worker's graph (whose peers are the master's tasks) is
    # registered; once the graph is lost, the ps's genuine push is refused ABORTED, as for a
    # worker whose spec lists the ps: the loss stays the step's root cause (AbortedError, which
    # recovery loops retry), never an INVALID_ARGUMENT from classifying the ps by the worker's
    # own spec, and the next run registers the graph again.
    full = af.ClusterSpec(loopback_spec({"ps": 1, "worker": 1}))
    own = af.ClusterSpec({"worker": full.job_tasks("worker")})
    graph, v, total = _pushed_variable()
    async with trio.open_nursery() as nursery:
        ps = await nursery.start(af.Server(full, "ps", 0).serve)
        worker = (await nursery.start(af.Server(own, "worker", 0).serve)).service
        async with af.Session(graph=graph, cluster=full) as sess:
            await sess.run(v.initializer, options=TIMEOUT)
            assert await sess.run(total, options=TIMEOUT) == 12.0
            assert worker.statistics().tensors_pushed == 0
            (handle, registered), = worker._graphs.items()
            key, = registered.binding.pushed_keys
            assert key.startswith("/job:ps/") and "/job:ps/replica:0/task:0" in registered.peers
            await worker.deregister_graph(DeregisterGraph(handle))
            with pytest.raises(RemoteCallError, match="no pushed Recv of a graph") as info:
                await channels.connect(own.task_address("worker", 0)).push_tensors(
                    PushTensors(91, [TensorEntry(key, np.arange(4, dtype=np.float32))]))
            assert info.value.code == "ABORTED" and "is in no cluster" in info.value.message
            with pytest.raises(af.errors.AbortedError, match="no graph with handle"):
                await sess.run(total, options=TIMEOUT)
            _ps_failed_derived(ps.service)
            assert await sess.run(total, options=TIMEOUT) == 12.0
        nursery.cancel_scope.cancel()


async def test_a_restarted_worker_process_with_its_own_jobs_spec_refuses_old_pushes_aborted(
        tmp_path):
    # The same with a real ``asyncflow worker`` process, started with its own job's
    # ClusterSpec and restarted on its port between steps: the ps's push of the next step
    # reaches a worker with no graph. Each restart surfaces as one AbortedError naming the
    # worker (never the push's refusal as InvalidArgumentError), the ps's failed step is
    # ABORTED and derived, and the run after it works again.
    from killable_workers import WorkerProcess
    full = af.ClusterSpec(loopback_spec({"ps": 1, "worker": 1}))
    process = WorkerProcess({"worker": full.job_tasks("worker")}, "worker", 0, cwd=tmp_path)
    graph, v, total = _pushed_variable()
    try:
        await trio.to_thread.run_sync(process.start)
        async with trio.open_nursery() as nursery:
            ps = (await nursery.start(af.Server(full, "ps", 0).serve)).service
            async with af.Session(graph=graph, cluster=full, config=NO_WATCHDOG) as sess:
                await sess.run(v.initializer, options=TIMEOUT)
                assert await sess.run(total, options=TIMEOUT) == 12.0
                for _ in range(2):
                    await trio.to_thread.run_sync(process.restart)
                    with pytest.raises(af.errors.AbortedError, match="/job:worker/.*restarted"):
                        await sess.run(total, options=TIMEOUT)
                    _ps_failed_derived(ps)
                    assert await sess.run(total, options=TIMEOUT) == 12.0
            nursery.cancel_scope.cancel()
    finally:
        process.kill()
