"""Session.run semantics: fetch structures, feeds, pruning, caching, errors, concurrency."""
import collections
import dataclasses
import itertools

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.exec import timeslice
from instruments import installed


@pytest.fixture
def graph():
    with af.Graph().as_default() as g:
        yield g


async def test_fetch_structures(graph):
    a = af.constant(1.0, name="a")
    b = af.constant([2, 3], name="b")
    Pair = collections.namedtuple("Pair", "x y")
    async with af.Session() as sess:
        out = await sess.run({"a": a, "nested": [b, (a, "b:0")], "pair": Pair(a, b), "op": b.op})
    assert out["a"] == 1.0 and isinstance(out["a"], np.float32)
    np.testing.assert_array_equal(out["nested"][0], [2, 3])
    assert isinstance(out["nested"][1], tuple)
    assert out["nested"][1][0] == 1.0
    np.testing.assert_array_equal(out["nested"][1][1], [2, 3])
    assert isinstance(out["pair"], Pair) and out["pair"].x == 1.0
    assert out["op"] is None


async def test_single_fetch_and_op_fetch(graph):
    c = af.constant([[1.0]])
    async with af.Session() as sess:
        assert (await sess.run(c)).shape == (1, 1)
        assert await sess.run(c.op) is None
        assert await sess.run([]) == []


async def test_a_repeated_lone_fetch_runs_again_each_time(graph):
    """A lone fetch's flattening is kept by the session; its values are not: each run
    computes afresh, and a fetch refused once is refused every time (nothing kept for it)."""
    counter = af.Variable(0, name="counter")
    bump = counter.assign_add(1)
    x = af.placeholder(af.int32, [])
    doubled = x * 2
    loop = af.while_loop(lambda i: i < 3, lambda i: i + 1, [af.constant(0)])
    inside = [op for op in graph.get_operations() if op.type == "Add" and
              op.control_flow_context is not None][0].outputs[0]
    async with af.Session() as sess:
        await sess.run(counter.initializer)
        assert [await sess.run(bump) for _ in range(3)] == [1, 2, 3]
        await sess.run(bump.op)
        assert await sess.run(counter) == 4
        assert [await sess.run(doubled, {x: v}) for v in (1, 5)] == [2, 10]
        assert await sess.run(loop) == 3
        for _ in range(2):
            with pytest.raises(ValueError, match="fetch"):
                await sess.run(inside)
        # the initializer, bump, its op, doubled and loop (a Variable is flattened each time)
        assert len(sess._single_fetches) == 5


async def test_a_repeated_flat_list_fetch_keeps_its_shape_and_feeds(graph):
    """A flat list or tuple of tensors and ops is flattened once per session, and its routes
    once per feed signature: each run still computes afresh, returns the caller's container
    type, a fed and fetched tensor its fed value, and a new feed signature its own routes."""
    counter = af.Variable(0, name="counter")
    bump = counter.assign_add(1)
    x = af.placeholder(af.int32, [])
    doubled = x * 2
    async with af.Session() as sess:
        await sess.run(counter.initializer)
        assert [await sess.run([bump, bump.op]) for _ in range(2)] == [[1, None], [2, None]]
        assert await sess.run((doubled, x, bump), {x: 3}) == (6, 3, 3)
        assert await sess.run((doubled, x, bump), {x: 4, doubled: 10}) == (10, 4, 4)
        assert await sess.run((doubled, x, bump), {x: 5}) == (10, 5, 5)
        assert await sess.run([doubled, doubled], {x: 7}) == [14, 14]
        assert len(sess._flat_fetches) == 3
        nested = [doubled, [x]]  # not flat: flattened each time, not kept
        assert await sess.run(nested, {x: 1}) == [2, [1]]
        with pytest.raises(TypeError, match="None"):
            await sess.run([doubled, None], {x: 1})
        assert len(sess._flat_fetches) == 3


async def test_same_tensor_fetched_twice_is_computed_once(graph):
    counter = af.Variable(0, name="counter")
    bump = counter.assign_add(1)
    async with af.Session() as sess:
        await sess.run(counter.initializer)
        first, second = await sess.run([bump, bump])
        assert first == second == 1
        assert await sess.run(counter) == 1


async def test_feeding_any_tensor_cuts_its_producer(graph):
    x = af.placeholder(af.float32, [2], name="x")
    y = x * 2.0
    z = y + 1.0
    async with af.Session() as sess:
        # x is never fed: feeding y cuts it off.
        np.testing.assert_array_equal(await sess.run(z, {y: [10.0, 20.0]}), [11.0, 21.0])
        # A fed and fetched tensor returns the fed value.
        np.testing.assert_array_equal(await sess.run(y, {y: [5.0, 6.0]}), [5.0, 6.0])
        # Constants can be fed too.
        c = af.constant(3.0)
        assert await sess.run(c * 2.0, {c: 4.0}) == 8.0


async def test_feed_by_name_and_pruning(graph):
    x = af.placeholder(af.float32, [], name="x")
    unused = af.placeholder(af.float32, [], name="unused")
    _ = unused * 3.0
    y = x + 1.0
    async with af.Session() as sess:
        assert await sess.run("add:0", {"x:0": 1.0}) == 2.0
        assert await sess.run(y, {x: 2.0}) == 3.0


async def test_feed_validation(graph):
    x = af.placeholder(af.float32, [None, 2], name="x")
    i = af.placeholder(af.int32, [2], name="i")
    y = x * 2.0
    async with af.Session() as sess:
        with pytest.raises(af.errors.InvalidArgumentError, match=r"shape \(3,\).*x:0"):
            await sess.run(y, {x: np.ones(3)})
        with pytest.raises(af.errors.InvalidArgumentError, match="dtype float64.*i:0"):
            await sess.run(i + 1, {i: np.array([1.5, 2.5])})
        # Python values of a compatible kind are converted.
        np.testing.assert_array_equal(await sess.run(y, {x: [[1, 2]]}), [[2.0, 4.0]])
        with pytest.raises(af.errors.InvalidArgumentError, match="fed twice"):
            await sess.run(y, {x: [[1, 2]], "x:0": [[1, 2]]})


async def test_feeds_resolved_before_are_still_checked_every_run(graph):
    """A Tensor key fed before skips resolving (kept per session); its value is checked each
    run, and keys that are not such a Tensor are resolved and checked as always."""
    x = af.placeholder(af.float32, [2], name="x")
    loop = af.while_loop(lambda i: i < 3, lambda i: i + 1, [af.constant(0)])
    enter = [op for op in graph.get_operations() if op.type == "Enter"][0].outputs[0]
    with af.Graph().as_default():
        other = af.placeholder(af.float32, [2], name="x")
    async with af.Session() as sess:
        for _ in range(2):
            np.testing.assert_array_equal(await sess.run(x * 2.0, {x: [1.0, 2.0]}), [2, 4])
            assert x in sess._feedable
            with pytest.raises(af.errors.InvalidArgumentError, match=r"shape \(3,\).*x:0"):
                await sess.run(x * 2.0, {x: np.ones(3, np.float32)})
            with pytest.raises(af.errors.InvalidArgumentError, match="fed twice"):
                await sess.run(x * 2.0, {x: [1.0, 2.0], "x:0": [1.0, 2.0]})
            with pytest.raises((TypeError, ValueError)):
                await sess.run(x * 2.0, {x: [1.0, 2.0], other: [1.0, 2.0]})
            with pytest.raises(ValueError, match="may not be fed"):
                await sess.run(loop, {enter: 1})
        assert enter not in sess._feedable and other not in sess._feedable


async def test_a_float_fed_again_to_a_scalar_is_what_the_full_check_makes_of_it(graph):
    """A Python float fed to a Tensor fed before takes the scalar float case decided once per
    Tensor (``_float_scalar``): the same array (dtype, rank 0) as the full check makes, and
    every other key, value or shape still the full check's, with its errors."""
    f32 = af.placeholder(af.float32, [], name="f32")
    f64 = af.placeholder(af.float64, [], name="f64")
    bf16 = af.placeholder(af.bfloat16, [], name="bf16")
    i32 = af.placeholder(af.int32, [], name="i32")
    loose = af.placeholder(af.float32, None, name="loose")
    async with af.Session() as sess:
        for _ in range(2):  # (the second time each key is known)
            got = sess.prepare([f32, f64, bf16, loose], {f32: 1.5, f64: 2.5, bf16: 0.5,
                                                         loose: 3.0}).feed_values
            want = [np.asarray(1.5, np.float32), np.asarray(2.5, np.float64),
                    np.asarray(0.5, bf16.dtype.np), np.asarray(3.0, np.float32)]
            assert [(v.dtype, v.shape, v.item()) for v in got] == \
                [(w.dtype, w.shape, w.item()) for w in want]
            assert await sess.run(f32 * 2.0, {f32: 1.5}) == np.float32(3.0)
            assert await sess.run(f32 * 2.0, {f32: np.float32(2.0)}) == np.float32(4.0)
            with pytest.raises(af.errors.InvalidArgumentError, match="dtype float64.*i32:0"):
                await sess.run(i32 + 1, {i32: 1.5})
            with pytest.raises(af.errors.InvalidArgumentError, match=r"shape \(2,\).*f32:0"):
                await sess.run(f32 * 2.0, {f32: [1.0, 2.0]})
        assert sess._feedable[f32] == np.float32 and sess._feedable[i32] is None
        assert sess._feedable[loose] is None  # (its shape may be set later: checked each run)
        loose.set_shape([2])
        with pytest.raises(af.errors.InvalidArgumentError, match=r"shape \(\).*loose:0"):
            await sess.run(loose * 2.0, {loose: 3.0})


async def test_unfed_placeholder_error_names_it(graph):
    x = af.placeholder(af.float32, [2], name="needs_feed")
    async with af.Session() as sess:
        with pytest.raises(af.errors.InvalidArgumentError, match="must feed a value.*needs_feed") as info:
            await sess.run(x + 1.0)
    assert info.value.op.name == "needs_feed"


async def test_bad_fetches(graph):
    async with af.Session() as sess:
        with pytest.raises(TypeError):
            await sess.run(None)
        with pytest.raises(ValueError, match="nope"):  # as TF1's Session
            await sess.run("nope:0")
        with af.Graph().as_default():
            other = af.constant(1.0)
        with pytest.raises(ValueError, match="not an element of this graph"):
            await sess.run(other)


async def test_plan_cache(graph):
    x = af.placeholder(af.float32, [])
    y = x + 1.0
    async with af.Session() as sess:
        for value in range(3):
            assert await sess.run(y, {x: value}) == value + 1
        assert sess.statistics().cached_plans == 1
        await sess.run([y, y * 2.0], {x: 1.0})
        stats = sess.statistics()
        assert (stats.cached_plans, stats.runs_in_flight) == (2, 0)
        assert stats.devices == tuple(sess.list_devices())
        with pytest.raises(dataclasses.FrozenInstanceError):
            stats.cached_plans = 0


async def test_variables_start_uninitialized_in_each_session(graph):
    v = af.Variable(np.arange(3, dtype=np.float32), name="weights")
    async with af.Session() as sess:
        with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized value weights"):
            await sess.run(v)
        await sess.run(af.global_variables_initializer())
        np.testing.assert_array_equal(await sess.run(v), [0, 1, 2])
        await sess.run(v.assign([5.0, 6.0, 7.0]))
        np.testing.assert_array_equal(await sess.run(v), [5, 6, 7])
        assert list(await sess.run(af.report_uninitialized_variables())) == []
    async with af.Session() as sess:
        assert list(await sess.run(af.report_uninitialized_variables())) == [b"weights"]
        assert not await sess.run(af.is_variable_initialized(v))


async def test_fetched_values_are_private_copies(graph):
    c = af.constant([1.0, 2.0])
    v = af.Variable([1.0, 2.0])
    async with af.Session() as sess:
        await sess.run(v.initializer)
        got_c, got_v = await sess.run([c, v])
        got_c[0] = 100.0
        got_v[0] = 100.0
        np.testing.assert_array_equal(await sess.run(c), [1.0, 2.0])
        np.testing.assert_array_equal(await sess.run(v), [1.0, 2.0])


async def test_read_value_respects_control_dependencies(graph):
    v = af.Variable(1.0)
    update = v.assign(5.0)
    with af.control_dependencies([update]):
        after = v.read_value()
    async with af.Session() as sess:
        await sess.run(v.initializer)
        assert await sess.run(after) == 5.0


async def test_concurrent_runs_share_variables(graph):
    counter = af.Variable(0, name="counter")
    bump = counter.assign_add(1)
    async with af.Session() as sess:
        await sess.run(counter.initializer)
        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(sess.run, bump)
        assert await sess.run(counter) == 50


async def test_closed_session_refuses_runs(graph):
    c = af.constant(1.0)
    sess = af.Session()
    assert await sess.run(c) == 1.0
    await sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        await sess.run(c)


async def test_list_devices(graph):
    async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
        names = sess.list_devices()
    assert names[:2] == ["/job:localhost/replica:0/task:0/device:CPU:0",
                         "/job:localhost/replica:0/task:0/device:CPU:1"]
    assert names[0].device_type == "CPU"


async def test_runtime_error_is_one_op_error(graph):
    x = af.placeholder(af.float32, [None])
    y = af.reshape(x, [3], name="bad_reshape")
    async with af.Session() as sess:
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await sess.run(y, {x: np.ones(4)})
        err = info.value
        assert err.op.name == "bad_reshape"
        device = "GPU" if any("GPU" in d for d in sess.list_devices()) else "CPU"  # placed
        assert f"Reshape 'bad_reshape' on /job:localhost/replica:0/task:0/device:{device}:0" \
            in err.message
        assert "test_session.py" in err.message  # where the op was created
        # The session stays usable.
        np.testing.assert_array_equal(await sess.run(y, {x: np.ones(3)}), np.ones(3))


async def test_a_tensor_as_a_feed_value_is_refused_naming_it(graph):
    x = af.placeholder(af.float32, [])
    other = af.constant(1.0, name="other")
    async with af.Session() as sess:
        with pytest.raises(TypeError, match=r"feed cannot be an af.Tensor \(other:0\)"):
            await sess.run(x + 1.0, {x: other})


async def test_string_tensors(graph):
    s = af.constant([b"a", "b"])
    p = af.placeholder(af.string, [None])
    async with af.Session() as sess:
        assert list(await sess.run(s)) == [b"a", b"b"]
        assert list(await sess.run(af.identity(p), {p: ["x", b"y"]})) == [b"x", b"y"]


async def test_fetching_tensors_merged_by_cse(graph):
    x = af.placeholder(af.float32, [])
    a = x + 1.0
    b = x + 1.0
    async with af.Session() as sess:
        assert await sess.run([a, b, a], {x: 1.0}) == [2.0, 2.0, 2.0]


@pytest.fixture
def stepped_clock(monkeypatch):
    """The time-slice clock advances a quarter slice per read, so a slice ends after a fixed
    number of reads instead of at a wall-clock moment (deterministic on a loaded machine)."""
    reads = itertools.count()
    monkeypatch.setattr(timeslice, "clock",
                        lambda: next(reads) * timeslice.TIME_SLICE_S / 4)
    timeslice.restart()
    yield
    timeslice.restart()


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps of one task: each step after the first follows one of its yields."""

    def __init__(self, task):
        self.task = task
        self.steps = 0

    def before_task_step(self, task):
        if task is self.task:
            self.steps += 1


async def test_a_loop_of_quick_runs_lets_other_tasks_run(graph, stepped_clock, cpu_only):
    # Counted in checkpoints, never in time: the stepped clock ends a slice every 4 reads,
    # and a quick run reads it once or twice (``timeslice.begin`` and ``due`` as it ends).
    c = af.constant(1.0)
    ticks = 0

    async def other():
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    runs = 400
    async with af.Session() as sess:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.sleep(0)
            with installed(_TaskSteps(trio.lowlevel.current_task())) as steps:
                ticks = 0
                for _ in range(runs):
                    await sess.run(c)
            nursery.cancel_scope.cancel()
    # One yield per slice of runs: not one per run (a quick run finishes inline), not none.
    yields = steps.steps
    assert runs // 4 <= yields <= runs // 2 + 1, yields
    # The other task ran once per yield (trio runs each runnable task once per batch; which
    # of the two goes first in a batch is random, hence the one either way).
    assert abs(ticks - yields) <= 1, (ticks, yields)


async def test_a_cancelled_caller_does_not_start_the_step(graph):
    counter = af.Variable(0)
    bump = counter.assign_add(1)
    async with af.Session() as sess:
        await sess.run(counter.initializer)
        with trio.CancelScope() as scope:
            scope.cancel()
            await sess.run(bump)
        assert await sess.run(counter) == 0


async def test_an_unused_feed_does_not_shift_the_others_after_folding():
    """A folded (rewritten) signature's plan reads only the feeds it uses; an unused feed
    listed first must not hand its value to the next placeholder (fed SparseTensors leave
    some of their three parts unused)."""
    with af.Graph().as_default():
        unused = af.placeholder(af.float32, [None], name="unused")
        used = af.placeholder(af.float32, [None], name="used")
        out = used * (af.constant(2.0) + 1.0)  # constant folding rewrites the signature
        async with af.Session() as sess:
            for feeds in ({unused: [9.0, 9.0], used: [1.0, 2.0, 3.0]},
                          {used: [1.0, 2.0, 3.0], unused: [9.0, 9.0]}):
                np.testing.assert_array_equal(await sess.run(out, feeds), [3.0, 6.0, 9.0])


async def test_a_flat_list_fetch_fed_in_another_order_or_twice_over(graph):
    """A kept flat fetch's routes are per feed signature, the feeds' order included: the same
    feeds given in another order still route each fed value to its own place; one tensor fed
    under its name and as a Tensor is refused every time; a caller's change to a returned list
    is not seen by the next run."""
    x = af.placeholder(af.float32, [], name="x")
    y = af.placeholder(af.float32, [], name="y")
    diff = x - y
    async with af.Session() as sess:
        assert await sess.run([diff, x, y], {x: 5.0, y: 1.0}) == [4.0, 5.0, 1.0]
        assert await sess.run([diff, x, y], {y: 1.0, x: 5.0}) == [4.0, 5.0, 1.0]
        assert await sess.run([diff, y, x, diff], {y: 2.0, diff: 9.0, x: 7.0}) == \
            [9.0, 2.0, 7.0, 9.0]
        for feeds in ({x: 1.0, "x:0": 2.0, y: 0.0}, {"x:0": 2.0, x: 1.0, y: 0.0}):
            with pytest.raises(af.errors.InvalidArgumentError, match="x:0 is fed twice"):
                await sess.run([diff, x], feeds)
        returned = await sess.run((diff, diff.op, x), {x: 3.0, y: 1.0})
        assert returned == (2.0, None, 3.0)
        listed = await sess.run([diff, diff], {x: 1.0, y: 0.0})
        listed.append(3.0)
        assert await sess.run([diff, diff], {x: 1.0, y: 0.0}) == [1.0, 1.0]
