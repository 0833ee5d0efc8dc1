"""A worker's partition with Sends and Recvs runs as a static plan, not in the core.

``exec/plan.py`` gives a CPU partition whose only waiting kernels are Sends and Recvs the
static form (``plan.transfers``): a Send is a call to the step's rendezvous, a Recv
subscribes on its line and is taken on its first consumer's, awaited only if its value is not
there yet (``dispatch.Transfers``). The core's form (``plan.STATIC_TRANSFERS`` False) is the
reference: the tests compare the values bit for bit, count what the static form removes (runs
of the core, scheduler passes, tasks) and check the order rule that sends a partition back to
the core where awaiting in order could wait for a value the core would not.
"""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.cluster.master import Master
from asyncflow.exec import core, plan as plan_module
from instruments import installed, long_time_slice  # noqa: F401 (a fixture)
from transports.messages import RegisterGraph, RemoteCallError, RunGraph

pytestmark = pytest.mark.usefixtures("long_time_slice", "cpu_only")

PS, W0 = "/job:ps/task:0", "/job:worker/task:0"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)
_ports = iter(range(7300, 7400))


class _Counts(trio.abc.Instrument):
    def __init__(self):
        self.task_steps = 0
        self.spawned = 0

    def before_task_step(self, task):
        self.task_steps += 1

    def task_spawned(self, task):
        self.spawned += 1


async def _serving(nursery):
    spec = af.ClusterSpec({"ps": [f"inprocess:{next(_ports)}"],
                           "worker": [f"inprocess:{next(_ports)}"]})
    servers = {}
    for job in ("ps", "worker"):
        servers[job] = (await nursery.start(af.Server(spec, job, 0).serve)).service
    return spec, servers


def _mlp():
    """A parameter-server MLP: its parameters on the ps, its step on the worker."""
    rng = np.random.default_rng(3)
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            w1 = af.Variable(rng.standard_normal((8, 16)).astype(np.float32), name="w1")
            b1 = af.Variable(np.zeros(16, np.float32), name="b1")
            w2 = af.Variable(rng.standard_normal((16, 4)).astype(np.float32), name="w2")
        with af.device(W0):
            x = af.placeholder(af.float32, [None, 8], name="x")
            y = af.placeholder(af.int32, [None], name="y")
            logits = af.matmul(af.nn.relu(af.matmul(x, w1) + b1), w2)
            loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            train = af.train.GradientDescentOptimizer(0.1).minimize(loss)
    feeds = {x: rng.random((32, 8), dtype=np.float32), y: rng.integers(0, 4, 32).astype(np.int32)}
    return graph, [w1, b1, w2], loss, train, feeds


async def _train(static, monkeypatch, steps=3):
    """``steps`` MLP steps in a fresh ps and worker: (losses, parameters, the last step's
    counts: ops of the runs the core started, task steps and tasks spawned, the two
    partitions' plans)."""
    monkeypatch.setattr(plan_module, "STATIC_TRANSFERS", static)
    started = []
    start = core.start
    monkeypatch.setattr(core, "start", lambda plan, *rest: started.append(len(plan.nodes))
                        or start(plan, *rest))
    graph, params, loss, train, feeds = _mlp()
    async with trio.open_nursery() as nursery:
        spec, services = await _serving(nursery)
        async with af.Session(graph=graph, cluster=spec) as sess:
            await sess.run([p.initializer for p in params], options=TIMEOUT)
            losses = []
            for _ in range(steps):
                started.clear()
                with installed(_Counts()) as counts:
                    losses.append((await sess.run([loss, train], feeds, options=TIMEOUT))[0])
            values = await sess.run(params, options=TIMEOUT)
            plans = {job: [plan for wg in service._graphs.values() for plan in wg.compiled.plans
                           if plan.waits] for job, service in services.items()}
        nursery.cancel_scope.cancel()
    return losses, values, (sum(started), counts.task_steps, counts.spawned), plans


async def test_a_parameter_server_step_runs_both_partitions_static_with_the_cores_bits(
        monkeypatch):
    losses, values, counts, plans = await _train(True, monkeypatch)
    ref_losses, ref_values, ref_counts, ref_plans = await _train(False, monkeypatch)
    # The same values, bit for bit: the same kernels on the same inputs, in another order.
    assert [np.float32(v).tobytes() for v in losses] == \
        [np.float32(v).tobytes() for v in ref_losses]
    for value, ref in zip(values, ref_values):
        np.testing.assert_array_equal(value, ref)
    assert losses[-1] < losses[0]
    # Both partitions (the ps's reads, Sends, Recvs and applies; the worker's Recvs, passes
    # and Sends) hold transfers and run static; the reference runs them in the core.
    assert [p.transfers and p.static for job in ("ps", "worker") for p in plans[job]] == \
        [True, True]
    assert [p.static for job in ("ps", "worker") for p in ref_plans[job]] == [False, False]
    core_ops, task_steps, spawned = counts
    ref_core_ops, ref_task_steps, ref_spawned = ref_counts
    # Ops through the core a step: every op of both partitions before (38: the ps's reads,
    # Sends, Recvs and applies, the worker's Recvs, passes and Sends); none now.
    assert (core_ops, ref_core_ops) == (0, sum(len(p.nodes) for job in ("ps", "worker")
                                               for p in ref_plans[job]))
    assert ref_core_ops > 30
    # The same tasks (the push and pull tasks are the rendezvous') and scheduler passes:
    # in process every Recv's value is there when its partition starts, in both forms.
    assert (task_steps, spawned) == (ref_task_steps, ref_spawned)


async def test_a_partition_that_takes_a_recv_before_a_send_not_depending_on_it_runs_in_the_core():
    # The worker receives ``c`` and sends ``s2`` made from it, then receives ``a`` (made on
    # the ps from ``s2``) and sends ``s1`` made from ``a``. In its static order ``c`` is taken
    # before the Send of ``s1``, which does not depend on ``c``: had the ps made ``c`` from
    # ``s1``, awaiting ``c`` there would wait for the worker's own Send, where the core's
    # dataflow would send ``s1`` first. The rule cannot see the ps's graph: the worker's
    # partition stays in the core. The ps's (send ``c``, take ``s2``, send ``a`` made from
    # it, take ``s1``) passes and runs static. The step completes with the right value.
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            x = af.placeholder(af.float32, [3], name="x")
            c = af.add(x, 0.5, name="c")
        with af.device(W0):
            s2 = af.multiply(c, 3.0, name="s2")
        with af.device(PS):
            a = af.add(s2, 1.0, name="a")
        with af.device(W0):
            s1 = af.multiply(a, 2.0, name="s1")
        with af.device(PS):
            out = af.identity(s1, name="out")
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            spec, services = await _serving(nursery)
            async with af.Session(graph=graph, cluster=spec) as sess:
                for _ in range(2):
                    np.testing.assert_array_equal(
                        await sess.run(out, {x: np.full(3, 2.0, np.float32)}, options=TIMEOUT),
                        np.full(3, 17.0, np.float32))
                plans = {job: [p for wg in service._graphs.values()
                               for p in wg.compiled.plans] for job, service in services.items()}
            nursery.cancel_scope.cancel()
    ps_plan, = plans["ps"]
    worker_plan, = plans["worker"]
    assert (ps_plan.static, ps_plan.transfers) == (True, True)
    assert (worker_plan.static, worker_plan.transfers) == (False, False)


def test_the_order_rule_refuses_a_send_after_a_take_it_does_not_depend_on():
    import types

    def node(index, kind, consumers=()):
        return types.SimpleNamespace(index=index, op=types.SimpleNamespace(type=kind),
                                     consumers=tuple(consumers))

    rule = plan_module.transfers_in_order
    # recv0 -> f1 -> send2; recv3 -> g4 -> send5: whichever Recv is taken first, the other
    # Send comes after it without depending on it (that Recv's value might need it).
    nodes = [node(0, "_Recv", [1]), node(1, "Mul", [2]), node(2, "_Send"),
             node(3, "_Recv", [4]), node(4, "Mul", [5]), node(5, "_Send")]
    for order in ([0, 1, 2, 3, 4, 5], [0, 3, 4, 5, 1, 2]):
        order = [nodes[i] for i in order]
        assert not rule(nodes, order, [(n,) for n in order])
    # recv0 -> f1 -> send2; k3 -> send4 (no Recv): fine with send4 before recv0's take.
    nodes = [node(0, "_Recv", [1]), node(1, "Mul", [2]), node(2, "_Send"),
             node(3, "Const", [4]), node(4, "_Send")]
    order = [nodes[i] for i in (0, 3, 4, 1, 2)]
    assert rule(nodes, order, [(n,) for n in order])
    assert not rule(nodes, nodes, [(n,) for n in nodes])
    # A line running two nodes takes what both read before either runs (a pair's reads).
    order = [nodes[i] for i in (0, 1, 3, 4, 2)]
    assert rule(nodes, order, [(order[0],), (order[1],), (order[2],), (order[3],),
                               (order[4],)]) is False  # (send4 after f1's take)
    order = [nodes[i] for i in (0, 3, 1, 4, 2)]
    assert not rule(nodes, order, [(order[0],), (order[1],), (order[2], order[3]),
                                   (order[4],)])
    assert rule(nodes, order, [(order[0],), (order[1],), (order[3],), (order[2],),
                               (order[4],)])


async def test_a_static_partition_waiting_for_a_push_stops_at_its_deadline(autojump_clock):
    # The worker's RunGraph runs alone: the ps never pushes its parameters. Its static plan
    # waits at its first take, parked, until the step's deadline cancels it; the Recvs'
    # subscriptions are dropped and the step's state is gone.
    graph, params, loss, train, feeds = _mlp()
    async with trio.open_nursery() as nursery:
        spec, services = await _serving(nursery)
        master = Master(spec, af.SessionConfig())
        await master.open()
        run = master.compile(graph, list(feeds), [loss], [train])
        task_graph = next(tg for tg in run.task_graphs if "worker" in tg.task)
        channel = channels.connect(spec.task_address("worker", 0))
        reply = await channel.register_graph(RegisterGraph(task_graph.graph_def, "test",
                                                           task_graph.options))
        wg = services["worker"]._graphs[reply.graph_handle]
        assert all(p.transfers for p in wg.compiled.plans)
        from transports.messages import TensorEntry
        entries = [TensorEntry(name, value) for name, value in
                   zip(task_graph.options.feeds, feeds.values())]
        with pytest.raises(RemoteCallError) as info:
            await channel.run_graph(RunGraph(reply.graph_handle, 7, entries,
                                             list(task_graph.options.fetches),
                                             request_id=1, timeout_ms=500))
        assert info.value.code == "DEADLINE_EXCEEDED"
        assert 7 not in services["worker"]._steps
        await master.close()
        nursery.cancel_scope.cancel()


async def test_a_kernel_failing_in_a_static_partition_names_its_op_and_ends_both_steps():
    # The worker's matmul fails on a fed value of the wrong width after its Recvs
    # subscribed: the step fails with the op's located error, the subscriptions nothing took
    # are dropped, and neither task keeps the step's state.
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS):
            w = af.Variable(np.ones((4, 2), np.float32), name="w")
            b = af.Variable(np.zeros(2, np.float32), name="b")
        with af.device(W0):
            x = af.placeholder(af.float32, None, name="x")
            out = af.matmul(x, w, name="product") + b
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            spec, services = await _serving(nursery)
            async with af.Session(graph=graph, cluster=spec) as sess:
                await sess.run([w.initializer, b.initializer], options=TIMEOUT)
                good = await sess.run(out, {x: np.ones((3, 4), np.float32)}, options=TIMEOUT)
                np.testing.assert_array_equal(good, np.full((3, 2), 4.0, np.float32))
                with pytest.raises(af.errors.OpError, match="product"):
                    await sess.run(out, {x: np.ones((3, 5), np.float32)}, options=TIMEOUT)
                plans = [p for wg in services["worker"]._graphs.values()
                         for p in wg.compiled.plans if p.waits]
                assert plans and all(p.static and p.transfers for p in plans)
                np.testing.assert_array_equal(  # the next step runs as before
                    await sess.run(out, {x: np.ones((1, 4), np.float32)}, options=TIMEOUT),
                    np.full((1, 2), 4.0, np.float32))
            await trio.testing.wait_all_tasks_blocked()
            assert not services["worker"]._steps and not services["ps"]._steps
            nursery.cancel_scope.cancel()


async def test_a_local_runs_partitions_with_transfers_keep_the_core():
    # A Session over two CPUs starts both partitions in the core, which drains one into the
    # other (exec/runner.py): their plans get no static form for their Sends and Recvs.
    config = af.SessionConfig(device_count={"CPU": 2})
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2], name="x")
        with af.device("/device:CPU:1"):
            y = af.square(x, name="y")
        with af.device("/device:CPU:0"):
            z = af.reduce_sum(y, name="z")
        async with af.Session(config=config) as sess:
            assert await sess.run(z, {x: np.array([1.0, 2.0], np.float32)}) == 5.0
            compiled = next(iter(sess._cache.values()))
    assert len(compiled.plans) == 2 and all(p.waits for p in compiled.plans)
    assert [(p.static, p.transfers, p.static_fn) for p in compiled.plans] == \
        [(False, False, None)] * 2


async def test_a_taken_recvs_value_is_not_held_by_the_step_until_its_end():
    # The static form drops a Recv's value after its last reader (``h3 = None`` after the
    # take, its local after the reader), as the core frees its slot: ``Transfers`` must not
    # keep it until the step's end (a ps holding every gradient of the step at once), nor
    # in a cycle through the subscription. The three takes of the generated code: delivered
    # at the subscription, delivered before the take (``h.outputs``), and awaited.
    import gc
    import types
    import weakref

    from asyncflow.exec.dispatch import Transfers
    from asyncflow.exec.step import Step

    delivers, cancelled = {}, []

    class Subscription:  # (as ``kernels/transfer.py``'s: it holds its callback)
        def __init__(self, name, deliver):
            self.name, self.deliver = name, deliver

        def cancel(self):
            cancelled.append(self.name)

    def recv(name, value=None):
        def subscribe(ctx, deliver):
            if value is None:
                delivers[name] = deliver
            else:  # (the value was there: the rendezvous calls back at once)
                deliver((value,))
            return Subscription(name, deliver).cancel
        ctx = types.SimpleNamespace(name=name, type="_Recv", attrs={}, xp=np, device=None,
                                    output_dtypes=(), resources=None)
        return types.SimpleNamespace(ctx=ctx, subscribe=subscribe,
                                     op=types.SimpleNamespace(name=name, type="_Recv"))

    async def deliver_later(value):
        await trio.testing.wait_all_tasks_blocked()
        delivers.pop("later")((value,))

    transfers = Transfers(Step(1), None, "/device:CPU:0")
    values = [np.full(1000, float(k), np.float32) for k in range(3)]
    gone = [weakref.ref(value) for value in values]
    gc.disable()  # (freed when the last reference goes, not by the cycle collector)
    try:
        h_once = transfers.subscribe(recv("at once", values[0]))
        h_there, h_later, h_never = (transfers.subscribe(recv(name))
                                     for name in ("there", "later", "never"))
        delivers.pop("there")((values[1],))
        taken = [(h_once.outputs or await transfers.take(h_once))[0],
                 (h_there.outputs or await transfers.take(h_there))[0]]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deliver_later, values[2])
            values = None
            taken.append((h_later.outputs or await transfers.take(h_later))[0])
        h_once = h_there = h_later = None
        assert [value[0] for value in taken] == [0.0, 1.0, 2.0]
        taken = None
        assert [ref() for ref in gone] == [None] * 3
    finally:
        gc.enable()
    # The one subscription nothing took is dropped (the generated ``finally``), only it.
    transfers.close()
    assert cancelled == ["never"] and h_never.outputs is None
