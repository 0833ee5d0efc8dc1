"""Loops whose structure ops a placement splits across devices (``partition_loops``).

A loop variable's ``NextIteration -> Merge`` back edge, or its non-constant ``Enter ->
Merge`` edge, used to cross devices whenever the builder did not colocate them (a
gradient's iteration counter placed away from its predicate): the Merge's control-looped
Recv waited on an iteration no Send ever served, and the step hung without an error. The
partitioner now moves such a NextIteration or Enter onto its Merge's device. Covered here:
hand-built counters split every way, the nested-loop gradient whose counters are not
colocated, the partitioned graph itself, the error for an Enter that feeds two devices,
and that a cross-device loop which cannot finish still ends in DeadlineExceededError.
Every run is bounded by a RunOptions deadline and a trio deadline, so a hang fails fast.
"""
import contextlib

import pytest
import trio

import asyncflow as af
from asyncflow import errors
from asyncflow.compile import partition as partition_module
from asyncflow.ops import control_flow as cf
from asyncflow.ops import while_loop
from gradcheck import nested_loops_across_devices
import loop_modes

TWO_CPUS = af.SessionConfig(device_count={"CPU": 2})
TIMEOUT = af.RunOptions(timeout_in_ms=5000)
DEADLINE_S = 10


@pytest.fixture(autouse=True, params=["compiled", "dynamic"])
def loop_mode(request):
    loop_modes.use(request.param)
    yield request.param
    loop_modes.use("compiled")


async def run_twice(fetches, feed_dict=None):
    """Run ``fetches`` twice in one two-CPU session (the second step reuses the plans)."""
    async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
        with trio.fail_after(DEADLINE_S):
            first = await sess.run(fetches, feed_dict, options=TIMEOUT)
            assert await sess.run(fetches, feed_dict, options=TIMEOUT) == first
    return first


def loop_with_counter(pred_device, enter_device, merge_device, add_device, next_device,
                      limit=3):
    """``i < limit`` on ``pred_device``, plus a hand-built counter split as asked.

    Returns ``(loop result, counter exit)``; both equal ``limit``.
    """
    graph = af.get_default_graph()
    with af.device(pred_device):
        result = af.while_loop(lambda i: i < limit, lambda i: i + 1, [af.constant(0)],
                               name="loop")
    ctx = next(iter(while_loop.loops(graph).values()))
    with graph.push_scopes(control_flow_context=ctx.outer), af.device(enter_device):
        enter = cf.enter_frame(af.constant(0), ctx.frame_name, False, ctx.parallel_iterations)
    with ctx.entered():
        with af.device(merge_device):
            merge = cf.merge([enter, enter], name="counter")[0]
            done, going = cf.switch(merge, ctx.pivot)
            count = cf.exit_frame(done)
        with af.device(add_device):
            increment = af.identity(going) + 1
        with af.device(next_device):
            merge.op.update_input(1, cf.next_iteration(increment))
    return result, count


@pytest.mark.parametrize("split", [
    # pred, enter, merge, add, next_iteration
    ("/cpu:0", "/cpu:1", "/cpu:1", "/cpu:0", "/cpu:0"),   # back edge CPU:0 -> CPU:1
    ("/cpu:0", "/cpu:0", "/cpu:0", "/cpu:1", "/cpu:1"),   # back edge CPU:1 -> CPU:0
    ("/cpu:0", "/cpu:1", "/cpu:1", "/cpu:1", "/cpu:0"),   # only the NextIteration elsewhere
    ("/cpu:0", "/cpu:0", "/cpu:1", "/cpu:1", "/cpu:1"),   # Enter -> Merge crosses
    ("/cpu:1", "/cpu:0", "/cpu:1", "/cpu:0", "/cpu:0"),   # both cross, pred with the Merge
])
async def test_a_counter_split_across_devices_counts_every_iteration(split):
    with af.Graph().as_default():
        result, count = loop_with_counter(*split)
        assert await run_twice([result, count]) == [3, 3]


async def test_the_split_counter_runs_zero_iterations_too():
    with af.Graph().as_default():
        result, count = loop_with_counter("/cpu:0", "/cpu:0", "/cpu:1", "/cpu:0", "/cpu:0",
                                          limit=0)
        assert await run_twice([result, count]) == [0, 0]


async def test_partitioning_moves_the_next_iteration_and_enter_to_their_merge(monkeypatch):
    seen = []
    real = partition_module.partition

    def recording(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]
    monkeypatch.setattr(partition_module, "partition", recording)
    with af.Graph().as_default():
        result, count = loop_with_counter("/cpu:0", "/cpu:0", "/cpu:1", "/cpu:0", "/cpu:0")
        assert await run_twice([result, count]) == [3, 3]
    nodes = seen[0].graph.nodes
    merge = next(n for n in nodes if n.name == "counter")
    enter, following = (p for p, _ in merge.inputs)
    assert (enter.type, following.type) == ("Enter", "NextIteration")
    assert enter.device == following.device == merge.device
    assert merge.device.endswith("CPU:1")
    sent = [p for n in nodes if n.type == "_Send" for p, _ in n.inputs]
    assert not [p for p in sent if p.type in ("NextIteration", "Enter")]


async def test_an_enter_feeding_two_devices_is_an_error():
    with af.Graph().as_default() as graph:
        with af.device("/cpu:0"):
            result = af.while_loop(lambda i: i < 3, lambda i: i + 1, [af.constant(0)])
        ctx = next(iter(while_loop.loops(graph).values()))
        with graph.push_scopes(control_flow_context=ctx.outer), af.device("/cpu:0"):
            enter = cf.enter_frame(af.constant(0), ctx.frame_name, False, ctx.parallel_iterations,
                              name="shared_enter")
        with ctx.entered():
            with af.device("/cpu:0"):
                merge = cf.merge([enter, enter])[0]
                done, going = cf.switch(merge, ctx.pivot)
                merge.op.update_input(1, cf.next_iteration(going + 1))
                count = cf.exit_frame(done)
            with af.device("/cpu:1"):
                merge_1 = cf.merge([enter, enter])[0]
                done_1, going_1 = cf.switch(merge_1, ctx.pivot)
                merge_1.op.update_input(1, cf.next_iteration(going_1 + 1))
                count_1 = cf.exit_frame(done_1)
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            with pytest.raises(errors.InvalidArgumentError, match="shared_enter.*several devices"):
                await sess.run([result, count, count_1], options=TIMEOUT)


async def test_nested_gradient_with_counters_not_colocated(monkeypatch, capsys, cpu_only):
    # The split across two CPU devices is the graph under test (a GPU would take it whole).
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float64, [])
        y = nested_loops_across_devices(x)
        with monkeypatch.context() as patch:  # the counters as placed before 945c9f5
            patch.setattr(af.Graph, "colocate_with",
                          lambda self, op, ignore_existing=False: contextlib.nullcontext())
            g, = af.gradients(y, x)
        counters = [op for op in graph.get_operations() if "/f_count" in op.name]
        assert counters and not any(op.colocation_groups for op in counters)
        config = af.SessionConfig(device_count={"CPU": 2}, log_device_placement=True)
        async with af.Session(config=loop_modes.config(config)) as sess:
            with trio.fail_after(DEADLINE_S):
                grad = await sess.run(g, {x: 0.7}, options=TIMEOUT)
                count = await sess.run(graph.get_tensor_by_name("while/f_count_exit:0"),
                                       {x: 0.7}, options=TIMEOUT)
                plus, minus = [await sess.run(y, {x: 0.7 + d}, options=TIMEOUT)
                               for d in (1e-6, -1e-6)]
        assert count == 3
        assert grad == pytest.approx((plus - minus) / 2e-6, rel=1e-5)
    placed = dict(line.split(": (", 1)[0:2] for line in capsys.readouterr().out.splitlines()
                  if ": (" in line)
    # The placer splits the outer counter's back edge (the graph this test must cover).
    merge, following = placed["while/f_count"], placed["while/NextIteration_2"]
    assert merge.rsplit(":", 1)[-1] != following.rsplit(":", 1)[-1]


async def test_a_stuck_cross_device_loop_ends_in_deadline_exceeded(monkeypatch):
    # Without the partitioner's fix the split back edge waits forever: the deadline must
    # still end the step, whether the partitions were drained inline or in tasks.
    monkeypatch.setattr(partition_module, "colocate_loop_edges", lambda nodes: 0)
    with af.Graph().as_default():
        result, count = loop_with_counter("/cpu:0", "/cpu:1", "/cpu:1", "/cpu:0", "/cpu:0")
        async with af.Session(config=loop_modes.config(TWO_CPUS)) as sess:
            with trio.fail_after(DEADLINE_S):
                with pytest.raises(errors.DeadlineExceededError):
                    await sess.run([result, count], options=af.RunOptions(timeout_in_ms=200))


@pytest.mark.parametrize("where", ["run_options", "session_config"])
async def test_an_endless_cross_device_loop_ends_in_deadline_exceeded(where):
    with af.Graph().as_default():
        def body(i, v):
            with af.device("/cpu:1"):
                return i + 1, v + 1.0
        with af.device("/cpu:0"):
            _, y = af.while_loop(lambda i, v: v >= 0.0, body, (af.constant(0), af.constant(1.0)))
        config, options = TWO_CPUS, af.RunOptions(timeout_in_ms=200)
        if where == "session_config":
            config = af.SessionConfig(device_count={"CPU": 2}, operation_timeout_in_ms=200)
            options = None
        async with af.Session(config=loop_modes.config(config)) as sess:
            with trio.fail_after(DEADLINE_S):
                with pytest.raises(errors.DeadlineExceededError):
                    await sess.run(y, options=options)
