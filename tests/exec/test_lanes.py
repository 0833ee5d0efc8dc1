"""A static schedule in two lanes (issue 37, ``exec/lanes.py``): the same bits as one lane
over training steps (lane 1 on a pool thread, or taken over by lane 0 when no thread is free),
a variable's reads and writes in their one-lane order, an error in either lane named and the
step ended with nothing of it still running, cancellation while lane 0 waits, and the event
loop given back while it waits."""
import dataclasses
import threading

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import errors
from asyncflow.compile import group_applies
from asyncflow.exec import intra_op, lanes, timeslice
from asyncflow.kernels import registry

pytestmark = pytest.mark.usefixtures("cpu_only")


@pytest.fixture
def laned(monkeypatch):
    """Every two-lane plan compiled: ``(plan, order, lane_of)``; and every step's LaneRun."""
    seen = {"plans": [], "runs": []}
    generate, init = lanes._generate, lanes.LaneRun.__init__

    def spy(plan, order, lane_of, deps, pool):
        seen["plans"].append((plan, order, dict(lane_of)))
        return generate(plan, order, lane_of, deps, pool)

    def spy_init(self, *args):
        init(self, *args)
        seen["runs"].append(self)
    monkeypatch.setattr(lanes, "_generate", spy)
    monkeypatch.setattr(lanes.LaneRun, "__init__", spy_init)
    monkeypatch.setattr(lanes.Cores, "MIN_CPU_WALL", 0.0)  # always two lanes (see below)
    # The optimizer's small applies stay separate ApplyRMSProp nodes, which the tests below
    # find in a lane (compile/group_applies.py would make them one node).
    monkeypatch.setattr(group_applies, "ENABLED", False)
    # The MLP's and the autoencoder's steps too: one lane predicted with every kernel whole
    # (as though none split over the pool), the MLP's step 0.41 ms (18%) shorter in two.
    monkeypatch.setattr(lanes, "one_lane_seconds", lambda node, threads: lanes.seconds(node))
    monkeypatch.setattr(lanes, "MIN_GAIN_S", 100e-6)
    monkeypatch.setattr(lanes, "MIN_GAIN_SHARE", 0.0)
    return seen


@pytest.fixture
def on_the_worker(monkeypatch):
    """Lane 0 never takes lane 1 over once handed to the pool: it waits for the thread."""
    monkeypatch.setattr(lanes.LaneRun, "steal", False)


def lane_of_op(seen):
    """``{op name: lane}`` of the training plan (the largest two-lane plan compiled)."""
    plan, order, lane_of = max(seen["plans"], key=lambda entry: len(entry[1]))
    return {node.op.name: lane_of[node.index] for node in order}


def build(model):
    """A training step of ``model`` (the MLP or the autoencoder of bench_models.py, seeded
    dropout); returns ``(x, y, loss, train, variables)``."""
    rng = np.random.default_rng(0)
    af.set_random_seed(5)

    def dense(n_in, n_out):
        w = (rng.standard_normal((n_in, n_out)) * np.sqrt(2 / (n_in + n_out))).astype(np.float32)
        return af.Variable(w), af.Variable(np.zeros(n_out, np.float32))
    x = af.placeholder(af.float32, [None, 784])
    y = af.placeholder(af.float32, [None, 10])
    if model == "mlp":
        (w1, b1), (w2, b2), (w3, b3) = dense(784, 256), dense(256, 256), dense(256, 10)
        h = af.nn.dropout(af.nn.relu(af.matmul(x, w1) + b1), rate=0.25, seed=1)
        h = af.nn.dropout(af.nn.relu(af.matmul(h, w2) + b2), rate=0.25, seed=2)
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(
            labels=y, logits=af.matmul(h, w3) + b3))
        variables = [w1, b1, w2, b2, w3, b3]
    else:
        h, variables = x, []
        for n_in, n_out in ((784, 256), (256, 128), (128, 256), (256, 784)):
            w, b = dense(n_in, n_out)
            variables += [w, b]
            h = af.nn.sigmoid(af.matmul(h, w) + b)
        loss = af.reduce_mean(af.square(h - x))
    train = af.train.RMSPropOptimizer(0.01).minimize(loss)
    return x, y, loss, train, variables


def batch_of(rows=128):
    """The tests' seeded batch for ``build``'s models: ``[x, y]`` (digits-sized inputs and
    one-hot labels)."""
    rng = np.random.default_rng(1)
    return [rng.random((rows, 784), dtype=np.float32),
            np.eye(10, dtype=np.float32)[rng.integers(0, 10, size=rows)]]


async def train_steps(model, steps, enabled, monkeypatch, batch=128):
    """Losses of ``steps`` training steps and the variables after them."""
    monkeypatch.setattr(lanes, "ENABLED", enabled)
    feed_x, feed_y = batch_of(batch)
    with af.Graph().as_default():
        x, y, loss, train, variables = build(model)
        config = af.ConfigProto(intra_op_parallelism_threads=2)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            losses = [(await session.run([loss, train], {x: feed_x, y: feed_y}))[0]
                      for _ in range(steps)]
            return losses, await session.run(variables)


def assert_same_bits(one, two):
    (losses_1, values_1), (losses_2, values_2) = one, two
    assert np.array(losses_1).tobytes() == np.array(losses_2).tobytes()
    for a, b in zip(values_1, values_2):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("model", ["mlp", "autoencoder"])
async def test_two_lanes_give_the_bits_of_one_on_the_pool_thread(model, laned, on_the_worker,
                                                                  monkeypatch):
    one = await train_steps(model, 4, False, monkeypatch)
    assert laned["plans"] == []
    two = await train_steps(model, 4, True, monkeypatch)
    where = lane_of_op(laned)
    # The weight gradients and updates beside the backward pass, as the scheduler chose.
    assert any(lane == 1 and "ApplyRMSProp" in name for name, lane in where.items())
    assert all(run.future is not None and not run.stolen for run in laned["runs"])
    assert all(run.done for run in laned["runs"])
    assert_same_bits(one, two)


async def test_lane_0_runs_lane_1_when_no_pool_thread_is_free(laned, monkeypatch):
    one = await train_steps("mlp", 3, False, monkeypatch)
    pool = intra_op.shared_pool(2)
    busy, release = threading.Event(), threading.Event()

    def hold():  # the pool's lane thread is taken for the whole run: no free core
        busy.set()
        release.wait(30)
    held = pool.submit(hold)
    assert busy.wait(30)
    try:
        two = await train_steps("mlp", 3, True, monkeypatch)
    finally:
        release.set()
        held.result(30)
    steps = [run for run in laned["runs"] if run.stolen]
    assert len(steps) >= 3 and all(run.done for run in laned["runs"])
    assert_same_bits(one, two)


def big(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


async def test_a_variables_updates_and_reads_keep_their_one_lane_order(laned, on_the_worker,
                                                                       monkeypatch):
    """Two updates of one variable, each after its own large GEMM (one per lane), and a read
    after them: the same values as one lane, step after step."""
    rng = np.random.default_rng(3)
    a, b, c, d = big(rng, 256, 512), big(rng, 512, 256), big(rng, 256, 512), big(rng, 512, 256)

    async def steps(enabled):
        monkeypatch.setattr(lanes, "ENABLED", enabled)
        with af.Graph().as_default():
            v = af.Variable(np.full((256, 256), 0.1, np.float32), name="v")
            fed = [af.placeholder(af.float32, value.shape) for value in (a, b, c, d)]
            first = af.assign_add(v, af.matmul(fed[0], fed[1], name="first_gemm"),
                                  name="first_update")
            second = af.assign(v, v * 0.5 + af.matmul(fed[2], fed[3], name="second_gemm"),
                               name="second_update")
            with af.control_dependencies([second]):
                read = af.identity(v.read_value() * 1.0, name="read_after")
            config = af.ConfigProto(intra_op_parallelism_threads=2)
            async with af.Session(config=config) as session:
                await session.run(v.initializer)
                feed = dict(zip(fed, (a, b, c, d)))
                return [await session.run([read, first, second], feed) for _ in range(3)]

    one = await steps(False)
    two = await steps(True)
    for got, want in zip(two, one):
        for g, w in zip(got, want):
            assert g.tobytes() == w.tobytes()
    plan, order, lane_of = laned["plans"][-1]
    assert {lane_of[n.index] for n in order if "gemm" in n.op.name} == {0, 1}
    # Every node touching ``v`` (a ref in or out) in the schedule's order, whatever its lane.
    touching = [n for n in plan.schedule if n in order and (
        any(producer.out_spec(i)[2] for producer, i in n.op.inputs)
        or any(spec[2] for spec in n.op.out_specs))]
    assert len(touching) >= 5  # v, its read, two updates, the read after them
    assert [n.index for n in order if n in touching] == [n.index for n in touching]


def failing(monkeypatch, op_type, name, error=ValueError("broken on purpose")):
    kernel = registry._KERNELS[(op_type, registry.ANY)]

    def fn(ctx, *args, _fn=kernel.fn):
        if ctx.name == name:
            raise error
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, (op_type, registry.ANY),
                        dataclasses.replace(kernel, fn=fn))


async def test_without_a_second_core_steps_go_back_to_one_lane_for_a_while(laned,
                                                                          monkeypatch):
    """Where two-lane steps ran at CPU/wall under ``MIN_CPU_WALL`` (here: any, the bar set
    out of reach), the next ``SKIP_STEPS`` steps run the one-lane schedule, then lanes are
    tried again; the bits stay those of one lane throughout."""
    monkeypatch.setattr(lanes.Cores, "MIN_CPU_WALL", 1e9)
    monkeypatch.setattr(lanes.Cores, "SKIP_STEPS", 3)
    monkeypatch.setattr(lanes.Cores, "PROBE_STEPS", 2)
    one = await train_steps("mlp", 9, False, monkeypatch)
    laned["runs"].clear()
    two = await train_steps("mlp", 9, True, monkeypatch)
    assert_same_bits(one, two)
    # The init run (its own plan, one step) and the training plan's steps 1-2, 6-7: two
    # lanes; 3-5 and 8-9 in one lane.
    assert len(laned["runs"]) == 1 + 4


@pytest.mark.parametrize("lane, op_type", [(1, "ApplyRMSProp"), (0, "MatMul")])
async def test_an_error_in_either_lane_names_its_op_and_ends_the_step(lane, op_type, laned,
                                                                      on_the_worker, monkeypatch):
    await train_steps("mlp", 1, True, monkeypatch)  # which op runs where
    plan, order, lane_of = max(laned["plans"], key=lambda entry: len(entry[1]))
    name = next(n.op.name for n in order if lane_of[n.index] == lane and n.op.type == op_type)
    failing(monkeypatch, op_type, name)
    laned["runs"].clear()
    with pytest.raises(errors.OpError) as caught:
        await train_steps("mlp", 2, True, monkeypatch)
    assert name in str(caught.value) and "broken on purpose" in str(caught.value)
    assert laned["runs"] and all(run.done for run in laned["runs"])


async def test_cancelled_while_lane_0_waits_lane_1_stops_at_its_next_kernel(
        laned, on_the_worker, monkeypatch):
    await train_steps("mlp", 1, True, monkeypatch)
    where = lane_of_op(laned)
    blocked = sorted(n for n, l in where.items() if l == 1 and n.endswith("ApplyRMSProp"))[0]
    entered, release, ran = threading.Event(), threading.Event(), []
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]

    def fn(ctx, *args, _fn=kernel.fn):
        ran.append(ctx.name)
        if ctx.name == blocked and release is not None:
            entered.set()
            release.wait(30)  # until the test cancelled the step
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                        dataclasses.replace(kernel, fn=fn))
    stop = lanes.LaneRun.stop

    def stopping(self):  # lane 0 stops lane 1 (cancelled): let the blocked kernel end
        if not self.done and release is not None:
            self.abort = True
            release.set()
        stop(self)
    monkeypatch.setattr(lanes.LaneRun, "stop", stopping)
    laned["runs"].clear()
    monkeypatch.setattr(lanes, "ENABLED", True)
    feed = batch_of()
    with af.Graph().as_default():
        x, y, loss, train, _ = build("mlp")
        async with af.Session(config=af.ConfigProto(intra_op_parallelism_threads=2)) as session:
            await session.run(af.global_variables_initializer())
            turns = []

            async def canceller(scope):
                while not entered.is_set():  # lane 0 waits for lane 1 with checkpoints
                    turns.append(None)
                    await trio.sleep(0)
                scope.cancel()  # (the kernel goes on once lane 0 stops lane 1, below)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(canceller, scope)
                    await session.run([loss, train], dict(zip((x, y), feed)))
            assert scope.cancelled_caught
            run = laned["runs"][-1]
            assert run.done and run.abort
            after = [n for n in ran[ran.index(blocked) + 1:] if where[n] == 1]
            assert not after  # nothing of lane 1 after the kernel that was running
            # The session goes on: the next step runs both lanes to the end.
            release = None
            await session.run([loss, train], dict(zip((x, y), feed)))
            assert laned["runs"][-1].done and not laned["runs"][-1].abort


async def test_lane_0_gives_the_loop_back_while_it_waits(laned, on_the_worker, monkeypatch):
    """Lane 1 holds a kernel until another task of the loop has run three times: the step
    ends only if lane 0's wait awaits checkpoints (a blocking wait would hang it)."""
    await train_steps("mlp", 1, True, monkeypatch)
    where = lane_of_op(laned)
    blocked = sorted(n for n, l in where.items() if l == 1 and n.endswith("ApplyRMSProp"))[0]
    turns, go = [], threading.Event()
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]

    def fn(ctx, *args, _fn=kernel.fn):
        if ctx.name == blocked:
            assert go.wait(30), "no other task ran while lane 0 waited"
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                        dataclasses.replace(kernel, fn=fn))

    async def ticker():
        while len(turns) < 3:
            # Lane 0's kernels run whole while lane 1 is live; another task's, in lane 0's
            # pauses, split as usual: the loop thread's flag is lane 0's only.
            turns.append(getattr(intra_op.whole, "active", False))
            await trio.sleep(0)
        go.set()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await train_steps("mlp", 1, True, monkeypatch)
    assert go.is_set() and turns == [False] * 3
    assert not getattr(intra_op.whole, "active", False)  # reset when the step ended


async def test_lane_0_kernels_run_whole_while_lane_1_is_live(laned, on_the_worker, monkeypatch):
    """From lane 1's start to the step's end a kernel of lane 0 does not split (the two
    lanes take the two threads); before lanes start and after the step it may."""
    await train_steps("mlp", 1, True, monkeypatch)
    where = lane_of_op(laned)
    seen = {}
    kernel = registry._KERNELS[("ApplyRMSProp", registry.ANY)]

    def fn(ctx, *args, _fn=kernel.fn):
        if where.get(ctx.name) == 0:
            seen[ctx.name] = getattr(intra_op.whole, "active", False)
        return _fn(ctx, *args)
    monkeypatch.setitem(registry._KERNELS, ("ApplyRMSProp", registry.ANY),
                        dataclasses.replace(kernel, fn=fn))
    await train_steps("mlp", 1, True, monkeypatch)
    assert seen and all(seen.values())  # (lane 0's applies run after lane 1 started)
    assert not getattr(intra_op.whole, "active", False)


async def test_small_plans_and_one_thread_stay_in_one_lane(monkeypatch):
    """Where the predicted saving is under ``MIN_GAIN_S`` or ``MIN_GAIN_SHARE`` of the
    one-lane step, or no second thread exists, the plan keeps the one-lane schedule
    (``compile_lanes`` answers None)."""
    async def form(threads, m, k, count=6):
        with af.Graph().as_default():
            a, b = af.placeholder(af.float32, [m, k]), af.placeholder(af.float32, [k, m])
            outs = [af.matmul(a * float(i + 1), b) for i in range(count)]
            config = af.ConfigProto(intra_op_parallelism_threads=threads)
            async with af.Session(config=config) as session:
                await session.run(outs, {a: np.ones((m, k), np.float32),
                                         b: np.ones((k, m), np.float32)})
                (compiled,) = session._cache.values()
                return compiled.plans[0].static_fn.__code__.co_filename
    assert "lane" not in await form(2, 8, 8)
    assert "lane" not in await form(1, 160, 512)
    # Six independent GEMMs under the split threshold (13 M multiply-adds each): one lane
    # runs them one after the other on one core, two lanes three a side.
    assert "lane 0" in await form(2, 160, 512)
    # Two GEMMs that each split over both threads in one lane (34 M multiply-adds): two
    # lanes would run them whole, side by side, for no predicted gain.
    assert "lane" not in await form(2, 256, 512, count=2)
    # A prediction of 10 ms in one lane: 1 ms saved (10%) stays in one lane, 3 ms in two.
    assign = lanes.assign
    for saved, laned in ((1e-3, False), (3e-3, True)):
        def predicted(plan, threads, saved=saved):
            order, lane_of, deps, _, _ = assign(plan, threads)
            return order, lane_of, deps, 10e-3 - saved, 10e-3
        monkeypatch.setattr(lanes, "assign", predicted)
        assert ("lane 0" in await form(2, 160, 512)) is laned


@pytest.mark.parametrize("static", [True, False])
async def test_the_convnets_training_step_stays_in_one_lane_whatever_its_reshape_knows(
        static, monkeypatch):
    """bench_models.py's convnet (batch 128): its large kernels (FFT convolutions, the
    dense layer's GEMMs, Adam's applies) split over both threads in one lane and run whole in
    two, where it ran 12-17% longer (bench/RESULTS.md). Its gradient reshapes the flattened
    [128, 3136] back with ``shape(pool)``: known statically ([?, 7, 7, 64], as TF1 infers it)
    or by rank only, the plan makes the same choice. With the rank only, the one-lane
    estimate used to guess 128 for each of the four unknown dims (a max pool gradient of
    128^4 elements, 89 ms): what kept this step in one lane was that wrong guess."""
    from asyncflow.ops import array
    if not static:
        monkeypatch.setattr(array, "_solved", lambda x_shape, target: af.TensorShape(
            None if target.ndims is None else [None] * target.ndims))
    rng = np.random.default_rng(0)
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 784])
        y = af.placeholder(af.float32, [None, 10])
        h = af.reshape(x, [-1, 28, 28, 1])
        for shape in ((5, 5, 1, 32), (5, 5, 32, 64)):
            kernel = af.Variable((rng.standard_normal(shape) * 0.05).astype(np.float32))
            bias = af.Variable(np.zeros(shape[-1], np.float32))
            h = af.nn.relu(af.nn.bias_add(af.nn.conv2d(h, kernel, [1, 1, 1, 1], "SAME"), bias))
            h = af.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        flat = af.reshape(h, [-1, 7 * 7 * 64])
        w1 = af.Variable((rng.standard_normal((3136, 1024)) * 0.02).astype(np.float32))
        w2 = af.Variable((rng.standard_normal((1024, 10)) * 0.03).astype(np.float32))
        logits = af.matmul(af.nn.relu(af.matmul(flat, w1)), w2)
        loss = af.reduce_mean(af.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = af.train.AdamOptimizer(1e-4).minimize(loss)
        (back,) = [op for op in af.get_default_graph().get_operations()
                   if op.type == "Reshape" and op.inputs[1].op.type == "Shape"
                   and op.inputs[1].op.inputs[0] is h]
        assert back.outputs[0].shape.as_list() == ([None, 7, 7, 64] if static
                                                   else [None] * 4)
        config = af.ConfigProto(intra_op_parallelism_threads=2)
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            feed = {x: rng.random((128, 784), dtype=np.float32),
                    y: np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]}
            await session.run([loss, train], feed)
            plan = max((c.plans[0] for c in session._cache.values()),
                       key=lambda p: len(p.schedule))  # (the training step's, not the init's)
            assert plan.static and "lane" not in plan.static_fn.__code__.co_filename
            # The estimates behind it: two lanes save less than ``MIN_GAIN_SHARE``.
            _, _, _, two, one = lanes.assign(plan, 2)
            print(f"two lanes {two * 1e3:.2f} ms, one {one * 1e3:.2f}")
            assert two > one * (1 - lanes.MIN_GAIN_SHARE)


async def test_other_tasks_see_the_loop_threads_flag_unset_while_lane_0_awaits_an_offload(
        laned, on_the_worker, monkeypatch):
    """A kernel of lane 0 large enough to go to a worker thread (batch 1024: the first
    layer's GEMMs) is awaited: other tasks of the loop run meanwhile, and their kernels
    split as usual (the loop thread's flag is lane 0's only, as in lane 0's pauses)."""
    offloads = []
    generate = lanes._generate

    def counting(plan, order, lane_of, deps, pool):
        offloads.extend(n.op.name for n in order if lane_of[n.index] == 0 and n.offload)
        return generate(plan, order, lane_of, deps, pool)
    monkeypatch.setattr(lanes, "_generate", counting)
    turns, done = [], []

    async def ticker():
        while not done:
            turns.append(getattr(intra_op.whole, "active", False))
            await trio.sleep(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await train_steps("mlp", 2, True, monkeypatch, batch=1024)
        done.append(True)
    assert offloads and len(laned["runs"]) >= 2  # (lane 0 offloads in two-lane steps)
    assert turns and not any(turns)
    assert not getattr(intra_op.whole, "active", False)


async def test_lane_0_running_lane_1_offloads_the_kernels_one_lane_offloads(laned, monkeypatch):
    """With the lane thread taken, lane 0 runs lane 1's kernels; one that one lane would run
    on a worker thread (batch 1024: a weight gradient's GEMM at the offload threshold) goes
    to a worker thread from lane 0 too, not onto the event loop's thread."""
    where = []
    for op_type in ("MatMul", "_FusedMatMul"):
        kernel = registry._KERNELS[(op_type, registry.ANY)]

        def fn(ctx, *args, _fn=kernel.fn):
            where.append((ctx.name, threading.current_thread() is threading.main_thread()))
            return _fn(ctx, *args)
        monkeypatch.setitem(registry._KERNELS, (op_type, registry.ANY),
                            dataclasses.replace(kernel, fn=fn))
    one = await train_steps("mlp", 2, False, monkeypatch, batch=1024)
    offloaded = {name for name, on_loop in where if not on_loop}
    where.clear()
    pool = intra_op.shared_pool(2)
    busy, release = threading.Event(), threading.Event()

    def hold():  # the pool's lane thread is taken for the whole run: lane 0 runs lane 1
        busy.set()
        release.wait(30)
    held = pool.submit(hold)
    assert busy.wait(30)
    try:
        two = await train_steps("mlp", 2, True, monkeypatch, batch=1024)
    finally:
        release.set()
        held.result(30)
    assert_same_bits(one, two)
    trained = lane_of_op(laned)
    stolen = [run for run in laned["runs"] if run.stolen]
    assert stolen and all(run.done for run in laned["runs"])
    assert any(trained.get(name) == 1 for name in offloaded)  # (lane 1 holds one of them)
    assert offloaded and not {name for name, on_loop in where if on_loop} & offloaded
    # Such a kernel failing on its worker thread ends the step named by its op.
    name = next(name for name in sorted(offloaded) if trained.get(name) == 1)
    failing(monkeypatch, "MatMul", name)
    laned["runs"].clear()
    busy.clear()
    release.clear()
    held = pool.submit(hold)
    assert busy.wait(30)
    try:
        with pytest.raises(errors.OpError) as caught:
            await train_steps("mlp", 1, True, monkeypatch, batch=1024)
    finally:
        release.set()
        held.result(30)
    assert name in str(caught.value) and "broken on purpose" in str(caught.value)
    assert laned["runs"][-1].stolen and all(run.done for run in laned["runs"])


async def test_estimates_on_multiplied_guesses_keep_one_lane():
    """Two independent chains of elementwise kernels on a [4, 4, 32] feed. Known as [?, ?, 32]
    each kernel was estimated on 128 x 128 x 32 elements (``GUESS_DIM`` twice, 85 us) and the
    plan took two lanes, which ran the step 2.2x as long as one lane: an input with two
    unknown dims keeps the plan in one lane. One unknown dim (a batch) is guessed as before."""
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, None, 32])
        outs = []
        for c in range(2):
            h = x
            for _ in range(15):
                h = af.tanh(h * float(c + 2) + 0.5)
            outs.append(af.reduce_sum(h))
        total = outs[0] + outs[1]
        config = af.ConfigProto(intra_op_parallelism_threads=2)
        async with af.Session(config=config) as session:
            await session.run(total, {x: np.ones((4, 4, 32), np.float32)})
            (compiled,) = session._cache.values()
            assert "lane" not in compiled.plans[0].static_fn.__code__.co_filename


async def test_lane_0s_tail_starts_after_the_last_value_lane_1_needs(laned, on_the_worker,
                                                                     monkeypatch):
    """The autoencoder's first-layer weight gradient follows the last value lane 1 needs (the
    first layer's SigmoidGrad, for its bias gradient): its GEMM may be joined by the lane
    thread (``LaneRun.tail``); the backward's first input gradient, before it, may not. The
    bits are one lane's, and the loop's thread keeps no tail flag after a step."""
    from asyncflow.kernels import intra_op as kernel_split
    seen, for_gemm = {}, kernel_split.for_gemm

    def spy(ctx, *args, **kwargs):
        seen.setdefault(ctx.name, []).append(getattr(intra_op.whole, "join", None) is not None)
        return for_gemm(ctx, *args, **kwargs)
    monkeypatch.setattr(kernel_split, "for_gemm", spy)
    one = await train_steps("autoencoder", 3, False, monkeypatch)
    seen.clear()
    two = await train_steps("autoencoder", 3, True, monkeypatch)
    assert_same_bits(one, two)
    where = lane_of_op(laned)
    # (the weight gradient runs in its apply's node: compile/fuse_matmul_apply.py)
    tail, before = "RMSProp/update_Variable/ApplyRMSProp", "gradients/MatMul_3_grad/MatMul"
    assert where[tail] == 0 and where[before] == 0
    assert seen[tail] == [True] * 3 and seen[before] == [False] * 3
    assert getattr(intra_op.whole, "join", None) is None


@pytest.mark.parametrize("model", ["mlp", "autoencoder"])
async def test_the_grouped_applies_in_two_lanes_give_the_bits_of_one(model, laned,
                                                                     on_the_worker, monkeypatch):
    """compile/group_applies.py's group node (the fixture turns the pass off) in a two-lane
    plan: the bits of one lane, grouped or not."""
    monkeypatch.setattr(group_applies, "ENABLED", True)
    one = await train_steps(model, 4, False, monkeypatch)
    two = await train_steps(model, 4, True, monkeypatch)
    where = lane_of_op(laned)
    assert any(name.endswith("/group") for name in where)
    assert all(run.done for run in laned["runs"])
    assert_same_bits(one, two)
    monkeypatch.setattr(group_applies, "ENABLED", False)
    assert_same_bits(one, await train_steps(model, 4, False, monkeypatch))
