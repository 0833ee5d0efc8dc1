"""The distributed step's messages: which cross-task edges travel, and in how many requests.

The compile-side tests check ``control_edges.py`` on placed node graphs; the others run real
``asyncflow worker`` processes on loopback ports and read the workers' own counters (Health's
``pull_requests`` / ``tensors_pulled`` / ``push_requests`` / ``tensors_pushed``) before and
after a step. Every wait has a deadline.

What the counts may say of pushes: the Sends of one scheduling round for one peer share a
request (``cluster/remote_rendezvous.py``), and a time-slice checkpoint (``exec/timeslice.py``,
wall-clock) ends a round. The ps's Sends of its parameters stand together at the head of its
static schedule with no slice check between them: one request a step, whatever the clock. The
worker's Sends of the gradients are spread over its backward pass, with a check after each
offloadable kernel between them: one request a step only while no slice ends between two of
them, which a loaded machine (the process descheduled for a millisecond) does not promise.
``test_a_slice_ending_between_the_workers_sends_splits_only_its_push`` pins both with a
stepped clock.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.compile.control_edges import drop_remote_controls_of_sinks, sink_groups
from asyncflow.compile import prune
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.exec import timeslice

PS, W0, W1 = "/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)
DEVICES = {task: f"{task.replace('/task', '/replica:0/task')}/device:CPU:0"
           for task in (PS, W0, W1)}


def _node_graph(fetches, targets):
    ops = prune.prune(fetches, targets, [])
    placement = {op: DEVICES[op.device.split("/device")[0]] for op in ops}
    return NodeGraph.from_ops(ops, [], fetches, targets, placement)


def _ps_training_graph(cpu=""):
    """``cpu="/device:CPU:0"`` pins every op to the tasks' CPUs (the worker processes may see
    a GPU: under ``make test-gpu`` a Send that waits for its device pushes when its value is
    on the host, which can take one request per Send instead of one per round)."""
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS + cpu):
            params = [af.Variable(np.full((2, 2), i + 1.0, np.float32), name=f"proto_p{i}")
                      for i in range(3)]
        with af.device(W0 + cpu):
            x = af.placeholder(af.float32, [None, 2], name="x")
            loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
            train = af.train.GradientDescentOptimizer(0.5).minimize(loss)
    return graph, params, x, loss, train


def test_a_train_ops_control_edges_from_the_ps_are_dropped():
    graph, params, x, loss, train = _ps_training_graph()
    node_graph = _node_graph([loss], [train])
    (train_node,) = [n for n in node_graph.nodes if n.name == train.name]
    assert {c.device for c in train_node.control_inputs} == {DEVICES[PS]}
    assert train_node in sink_groups(node_graph)
    assert drop_remote_controls_of_sinks(node_graph) == 3
    assert train_node.control_inputs == [] and node_graph.changed
    # The updates stay in the run (targets on the ps once shipped).
    assert sum(n.type == "ApplyGradientDescent" for n in node_graph.nodes) == 3


def test_control_edges_into_ops_with_effects_or_readers_are_kept():
    with af.Graph().as_default():
        with af.device(PS):
            v = af.Variable(1.0, name="v")
            bump = v.assign_add(1.0, name="bump")
        with af.device(W0):
            w = af.Variable(0.0, name="w")
            with af.control_dependencies([bump]):
                copy = w.assign(3.0, name="copy")        # stateful: must wait for bump
            group = af.group(bump, name="group")          # a NoOp, but read below
            with af.control_dependencies([group]):
                read = af.identity(af.constant(2.0), name="read")
            outer = af.group(af.group(bump, name="inner"), name="outer")  # groups of groups
    node_graph = _node_graph([read], [copy.op, outer])
    nodes = {n.name: n for n in node_graph.nodes}
    assert drop_remote_controls_of_sinks(node_graph) == 1
    assert [c.name for c in nodes["copy"].control_inputs] == ["bump"]
    assert [c.name for c in nodes["group"].control_inputs] == ["bump"]
    assert nodes["inner"].control_inputs == []
    assert {n.name for n in sink_groups(node_graph)} == {"inner", "outer"}


async def _pull_counters(spec):
    out = {}
    for job, addresses in spec.items():
        for index, address in enumerate(addresses):
            async with channels.connect(address) as channel:
                stats = (await channel.health(timeout=10)).stats
            out[f"{job}:{index}"] = (stats.pull_requests, stats.tensors_pulled,
                                     stats.push_requests, stats.tensors_pushed)
    return out


def _delta(before, after):
    return {task: tuple(a - b for a, b in zip(after[task], before[task]))
            for task in after if after[task] != before[task]}


async def test_a_training_step_across_processes_pushes_each_way_once_a_round(process_cluster):
    spec, _ = process_cluster
    graph, params, x, loss, train = _ps_training_graph("/device:CPU:0")
    feed = {x: np.ones((1, 2), np.float32)}
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        await sess.run([loss, train], feed, options=TIMEOUT)   # registers the graphs
        before = await _pull_counters(spec)
        with trio.fail_after(30):
            await sess.run([loss, train], feed, options=TIMEOUT)
        after = await _pull_counters(spec)
        # The updates of both steps were applied when run returned: -0.5 per step.
        values = await sess.run(params, options=TIMEOUT)
    for i, value in enumerate(values):
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 1.0))
    # ps: one push of the three parameters; worker: of the three gradients, one a round; no pull
    # at all, and nothing for the train op's "updates done" control edges. (pulls, pulled
    # tensors, pushes, pushed tensors); with the step's two RunGraphs: four calls a step
    # (the worker's gradients: one request a round, see the module docstring).
    _assert_pushes(_delta(before, after), steps=1, tensors=3)


def _assert_pushes(delta, steps, tensors, worker_split=None):
    """The counts of ``steps`` steps pushing ``tensors`` tensors each way, nothing pulled: the
    ps one request a step; the worker one a step and round, so between one a step and one a
    tensor (``worker_split``: True more than one a step, False exactly one: a known clock)."""
    assert set(delta) == {"worker:0", "ps:0"}, delta
    assert delta["ps:0"] == (0, 0, steps, steps * tensors), delta
    pulls, pulled, requests, pushed = delta["worker:0"]
    assert (pulls, pulled, pushed) == (0, 0, steps * tensors), delta
    assert steps <= requests <= steps * tensors, delta
    if worker_split is not None:
        assert (requests > steps) == worker_split, delta


def _mlp(rng):
    """bench_vs_tf1.py's MLP (64-128-10, batch 256, SGD; parameters on the ps, on the CPUs:
    see _ps_training_graph): (graph, params, loss, train, feed)."""
    with af.Graph().as_default() as graph:
        with af.device(PS + "/device:CPU:0"):
            params = [af.Variable(rng.standard_normal(shape).astype(np.float32) * 0.1, name=n)
                      for shape, n in (((64, 128), "mlp_w1"), ((128,), "mlp_b1"),
                                       ((128, 10), "mlp_w2"), ((10,), "mlp_b2"))]
        with af.device(W0 + "/device:CPU:0"):
            x = af.placeholder(af.float32, [None, 64], name="x")
            y = af.placeholder(af.int32, [None], name="y")
            w1, b1, w2, b2 = params
            logits = af.matmul(af.nn.relu(af.matmul(x, w1) + b1), w2) + b2
            loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            train = af.train.GradientDescentOptimizer(0.01).minimize(loss)
    feed = {x: rng.standard_normal((256, 64)).astype(np.float32),
            y: rng.integers(0, 10, 256).astype(np.int32)}
    return graph, params, loss, train, feed


async def _mlp_steps(spec, steps=3):
    """Initialize, one step (registers the graphs), then ``steps`` counted: (first loss,
    last loss, the counters' delta)."""
    graph, params, loss, train, feed = _mlp(np.random.default_rng(0))
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params], options=TIMEOUT)
        first = await sess.run([loss, train], feed, options=TIMEOUT)
        before = await _pull_counters(spec)
        with trio.fail_after(30):
            for _ in range(steps):
                last = await sess.run([loss, train], feed, options=TIMEOUT)
        after = await _pull_counters(spec)
    return first[0], last[0], _delta(before, after)


async def test_the_benchmarks_mlp_step_makes_four_calls(process_cluster):
    """bench_vs_tf1.py's MLP: per step two RunGraphs, the ps's push of w1, b1, w2, b2 and the
    worker's push of their gradients (one a round: more where a slice ended between them)."""
    spec, _ = process_cluster
    first, last, delta = await _mlp_steps(spec)
    assert last < first  # the updates were applied
    _assert_pushes(delta, steps=3, tensors=4)


@pytest.mark.parametrize("slice_ends", [False, True])
async def test_a_slice_ending_between_the_workers_sends_splits_only_its_push(
        monkeypatch, slice_ends):
    # In process, one clock for both: an hour-long slice never ends mid-step (one request a
    # step each way); a clock that moves a slice per read ends one at every check, as a
    # loaded machine may: the worker's gradients then go in more requests (one a round),
    # the ps's parameters, with no check between their Sends, still in one.
    if slice_ends:
        reads = iter(range(1, 10**9))
        monkeypatch.setattr(timeslice, "clock", lambda: next(reads) * timeslice.TIME_SLICE_S)
    else:
        monkeypatch.setattr(timeslice, "TIME_SLICE_S", 3600.0)
    timeslice.restart()
    addresses = {"ps": ["inprocess:7501"], "worker": ["inprocess:7502"]}
    cluster = af.ClusterSpec(addresses)
    async with trio.open_nursery() as nursery:
        for job, index, _ in cluster.tasks():
            await nursery.start(af.Server(cluster, job, index).serve)
        first, last, delta = await _mlp_steps(addresses)
        nursery.cancel_scope.cancel()
    assert last < first
    _assert_pushes(delta, steps=3, tensors=4, worker_split=slice_ends)


async def test_a_failing_update_still_fails_the_step(process_cluster):
    # The train op no longer waits for the ps's updates; the step still fails when one does.
    spec, _ = process_cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            v = af.Variable(np.ones(2, np.float32), name="proto_failing")
        with af.device(W0):
            x = af.placeholder(af.float32, [2], name="x")
            grad = v * x
        with af.device(PS):
            update = v.assign_sub(af.check_numerics(grad, "bad gradient"), name="update")
        with af.device(W0):
            train = af.group(update, name="train")
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(v.initializer, options=TIMEOUT)
        with trio.fail_after(30):
            await sess.run(train, {x: np.ones(2, np.float32)}, options=TIMEOUT)
            with pytest.raises(af.errors.InvalidArgumentError, match="bad gradient"):
                await sess.run(train, {x: np.array([np.nan, 1.0], np.float32)}, options=TIMEOUT)
        np.testing.assert_array_equal(await sess.run(v, options=TIMEOUT), [0.0, 0.0])


async def test_a_control_edge_into_a_stateful_op_still_travels(process_cluster):
    spec, _ = process_cluster
    with af.Graph().as_default() as graph:
        with af.device(PS):
            v = af.Variable(1.0, name="proto_bumped")
            bump = v.assign_add(1.0, name="bump")
        with af.device(W1):
            w = af.Variable(0.0, name="proto_marked")
            with af.control_dependencies([bump]):
                mark = w.assign_add(1.0, name="mark")
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([v.initializer, w.initializer], options=TIMEOUT)
        await sess.run(mark, options=TIMEOUT)
        before = await _pull_counters(spec)
        with trio.fail_after(30):
            await sess.run(mark, options=TIMEOUT)
        after = await _pull_counters(spec)
        assert await sess.run([v, w], options=TIMEOUT) == [3.0, 2.0]
    # The control edge travels: the ps pushes its one (small, known-size) signal to worker:1.
    assert _delta(before, after) == {"ps:0": (0, 0, 1, 1)}


def test_run_graphs_go_out_in_a_fixed_order_producers_first():
    # The ps receives only the gradients (level 1); the worker the parameters (level 0) and
    # the second worker, which only feeds a value to the first, nothing: it goes first.
    from asyncflow.cluster.master import Master
    from asyncflow.exec.options import SessionConfig
    graph, params, x, loss, train = _ps_training_graph()
    with graph.as_default():
        with af.device(W1):
            offset = af.add(af.constant(1.0), 0.0, name="offset")
        with af.device(W0):
            shifted = af.add(loss, offset, name="shifted")
    master = Master(af.ClusterSpec({"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2",
                                                                        "127.0.0.1:3"]}),
                    SessionConfig())
    for name, task in master.tasks.items():
        task.devices, task.incarnation = [f"{name}/device:CPU:0"], 1
    run = master.compile(graph, [x], [shifted], [train])
    order = [run.task_graphs[i].task for i in run.start_order]
    assert order == ["/job:worker/replica:0/task:1", "/job:ps/replica:0/task:0",
                     "/job:worker/replica:0/task:0"]


def _global_step_graph(cpu=""):
    graph = af.Graph()
    with graph.as_default():
        with af.device(PS + cpu):  # (``cpu``: as _ps_training_graph's)
            params = [af.Variable(np.full((2, 2), i + 1.0, np.float32), name=f"proto_gs_p{i}")
                      for i in range(2)]
            step = af.Variable(0, dtype=af.int64, trainable=False, name="proto_global_step")
        with af.device(W0 + cpu):
            x = af.placeholder(af.float32, [None, 2], name="x")
            loss = af.add_n([af.reduce_sum(af.matmul(x, p)) for p in params])
            train = af.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
    return graph, params, step, x, loss, train


def test_the_global_steps_control_ping_pong_is_bypassed():
    # minimize(global_step=...) puts a NoOp "update" on the worker (after the ps's updates)
    # and the step counter's AssignAdd on the ps (after "update"): ps -> worker -> ps.
    from asyncflow.compile.control_edges import carry_fewer_control_edges
    graph, params, step, x, loss, train = _global_step_graph()
    node_graph = _node_graph([loss], [train])
    nodes = {n.name: n for n in node_graph.nodes}
    (noop,) = [c for c in nodes[train.name].control_inputs]
    assert noop.type == "NoOp" and noop.device == DEVICES[W0]
    assert carry_fewer_control_edges(node_graph) == (1, 2, 2)
    increment = nodes[train.name]
    assert {c.type for c in increment.control_inputs} == {"ApplyGradientDescent"}
    crossing = [(c.name, n.name) for n in node_graph.nodes for c in n.control_inputs
                if c.device.split("/device:")[0] != n.device.split("/device:")[0]]
    assert crossing == []


def test_a_noop_is_not_bypassed_when_that_would_carry_more():
    from asyncflow.compile.control_edges import bypass_remote_noops
    with af.Graph().as_default():
        with af.device(W0):
            parts = [af.constant(float(i), name=f"part{i}") for i in range(3)]
            gather = af.group(*parts, name="gather")      # three local inputs on w0
        with af.device(W1):
            with af.control_dependencies([gather]):
                after = af.identity(af.constant(1.0), name="after")
    node_graph = _node_graph([after], [])
    # Through "gather": one w0 -> w1 transfer; bypassed: three.
    assert bypass_remote_noops(node_graph) == 0
    assert [c.name for c in {n.name: n for n in node_graph.nodes}["after"].control_inputs] \
        == ["gather"]


async def test_a_global_step_training_step_carries_no_control_edge(process_cluster):
    spec, _ = process_cluster
    graph, params, step, x, loss, train = _global_step_graph("/device:CPU:0")
    feed = {x: np.ones((1, 2), np.float32)}
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([p.initializer for p in params] + [step.initializer], options=TIMEOUT)
        await sess.run([loss, train], feed, options=TIMEOUT)
        before = await _pull_counters(spec)
        with trio.fail_after(30):
            await sess.run([loss, train], feed, options=TIMEOUT)
        after = await _pull_counters(spec)
        values = await sess.run(params + [step], options=TIMEOUT)
    for i, value in enumerate(values[:2]):
        np.testing.assert_allclose(value, np.full((2, 2), i + 1.0 - 1.0))
    assert values[2] == 2
    # One push each way (the parameters, the gradients), no control signal, no pull.
    assert _delta(before, after) == {"worker:0": (0, 0, 1, 2), "ps:0": (0, 0, 1, 2)}
