"""The seam between a Session and where its steps run (``exec/local_target.py``).

A Session prepares a request and hands it to its target, a LocalTarget or a ClusterTarget,
without asking which; the compiled run says which path a step takes. ``asyncflow.aio``
drives a Session through the same public seam (``prepare``, ``run_prepared``,
``run_loop_free``).
"""
import ast
import asyncio
import inspect
import pathlib

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster.cluster_target import ClusterTarget
from asyncflow.exec.local_target import LocalTarget

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _const():
    return af.identity(af.constant(np.float32(2.0))), {}, 2.0


def _queue():
    q = af.FIFOQueue(4, [af.float32], shapes=[[]])
    # The dequeue may wait: the plan stays static but it is not loop-free.
    return q.dequeue() * 2.0, q.enqueue([af.constant(np.float32(3.0))]), 6.0


def _loop():
    return af.while_loop(lambda i: i < 5, lambda i: i + 1, [af.constant(0)]), {}, 5


def _two_devices():
    with af.device("/device:CPU:1"):
        x = af.constant(np.float32(1.0)) + 1.0
    with af.device("/device:CPU:0"):
        y = x * 3.0
    return y, {}, 6.0


TRACE = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE)
DEADLINE = af.RunOptions(timeout_in_ms=60_000)


@pytest.mark.parametrize("build, options, inline, loop_free", [
    (_const, None, True, True),
    (_const, TRACE, False, False),      # tracing takes the step machinery
    (_const, DEADLINE, False, False),   # so does a deadline (its cancel scope)
    (_queue, None, True, False),        # inline in trio, but it may wait on trio
    (_loop, None, False, False),        # control flow: the frame-aware path
    (_two_devices, None, False, False),  # several partitions: the partition runner
], ids=["const", "traced", "deadline", "queue", "loop", "two-devices"])
async def test_a_prepared_run_says_which_path_it_takes(build, options, inline, loop_free,
                                                      cpu_only):
    config = af.SessionConfig(device_count={"CPU": 2})
    with af.Graph().as_default():
        fetch, setup, want = build()
        async with af.Session(config=config) as sess:
            if setup:
                await sess.run(setup)
            request = sess.prepare(fetch, options=options)
            assert (request.inline, request.loop_free) == (inline, loop_free)
            assert await sess.run_prepared(request) == want
            # The same signature reuses its compiled run.
            assert sess.prepare(fetch, options=options).compiled is request.compiled


async def test_a_traced_prepared_run_fills_its_run_metadata():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2], name="x")
        y = af.multiply(x, 2.0, name="twice")
        async with af.Session() as sess:
            metadata = af.RunMetadata()
            request = sess.prepare(y, {x: np.ones(2, np.float32)}, TRACE, metadata)
            np.testing.assert_array_equal(await sess.run_prepared(request), [2.0, 2.0])
    assert "twice" in [s.node_name for s in metadata.step_stats]


async def test_a_closed_session_prepares_nothing():
    with af.Graph().as_default():
        c = af.constant(1.0)
        sess = af.Session()
        await sess.close()
        with pytest.raises(RuntimeError, match="closed Session"):
            sess.prepare(c)


async def test_closing_the_session_cancels_an_inline_run_that_waits(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        y = q.dequeue()
        async with af.Session() as sess:
            request = sess.prepare(y)
            assert request.inline  # waits in place, inside the session's cancel scope
            async with trio.open_nursery() as nursery:
                failures = []

                async def run():
                    with pytest.raises(af.errors.CancelledError, match="closed") as info:
                        await sess.run_prepared(request)
                    failures.append(info.value)
                nursery.start_soon(run)
                await trio.testing.wait_all_tasks_blocked()
                assert sess.statistics().runs_in_flight == 1
                await sess.close()
            assert len(failures) == 1
            assert sess.statistics().runs_in_flight == 0


def test_a_loop_free_run_runs_under_asyncio_without_trio(cpu_only):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [3])
        y = af.reduce_sum(x * x)
        sess = af.Session()

        async def pause():  # asyncio's checkpoint, as asyncflow.aio passes it
            await asyncio.sleep(0)

        async def offload(node, args):
            return node.fn(node.ctx, *args)

        async def main():
            request = sess.prepare(y, {x: np.arange(3, dtype=np.float32)})
            assert request.loop_free
            return await sess.run_loop_free(request, offload, pause)

        assert asyncio.run(main()) == 5.0


async def test_cluster_runs_go_through_the_cluster_target(cpu_only):
    spec = af.ClusterSpec({"worker": ["inprocess:201"]})
    async with trio.open_nursery() as nursery:
        await nursery.start(af.Server(spec, "worker", 0).serve)
        with af.Graph().as_default():
            with af.device("/job:worker/task:0"):
                x = af.placeholder(af.float32, [2])
                y = x + 1.0
            async with af.Session(cluster=spec) as sess:
                assert sess.list_devices() == ["/job:worker/replica:0/task:0/device:CPU:0"]
                request = sess.prepare(y, {x: np.zeros(2, np.float32)})
                assert not request.inline and not request.loop_free  # every step crosses
                np.testing.assert_array_equal(await sess.run_prepared(request), [1.0, 1.0])
                assert sess.statistics().cached_plans == 1
            assert sess.statistics().cached_plans == 0  # closing forgets the graphs
        nursery.cancel_scope.cancel()


def test_local_and_cluster_targets_offer_one_interface():
    shared = ("open", "close", "device_names", "prepare", "run")
    for name in shared:
        local, cluster = getattr(LocalTarget, name), getattr(ClusterTarget, name)
        assert inspect.signature(local) == inspect.signature(cluster), name
        assert inspect.iscoroutinefunction(local) == inspect.iscoroutinefunction(cluster), name


def _private_uses(path, names):
    """``(line, attribute)`` of every ``x._attr`` in ``path`` where ``x`` is one of ``names``
    (a plain name, or ``self.<name>``)."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") \
                or node.attr.startswith("__"):
            continue
        value = node.value
        owner = value.id if isinstance(value, ast.Name) else \
            value.attr if isinstance(value, ast.Attribute) else None
        if owner in names:
            uses.append((node.lineno, node.attr))
    return uses


def test_aio_drives_a_session_through_its_public_seam():
    assert _private_uses(ROOT / "asyncflow" / "aio.py", {"session", "_session"}) == []


def test_the_session_does_not_ask_which_target_it_holds():
    source = (ROOT / "asyncflow" / "session.py").read_text()
    tree = ast.parse(source)
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not names & {"_master", "master"}, "session.py reaches past its target"
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == "isinstance"
                and "Target" in ast.unparse(n)]


async def test_session_master_and_workers_compile_through_one_pipeline(monkeypatch, cpu_only):
    from asyncflow.exec import compiled_run
    calls = []  # the device names each compile placed over
    original = compiled_run.partition_run

    def recording(graph, feeds, fetches, targets, state, config, *args, **kwargs):
        calls.append(list(state.names))
        return original(graph, feeds, fetches, targets, state, config, *args, **kwargs)
    monkeypatch.setattr(compiled_run, "partition_run", recording)

    spec = af.ClusterSpec({"worker": ["inprocess:211", "inprocess:212"]})
    task = "/job:worker/replica:0/task:{}/device:CPU:0".format
    async with trio.open_nursery() as nursery:
        for index in range(2):
            await nursery.start(af.Server(spec, "worker", index).serve)
        with af.Graph().as_default():
            with af.device("/job:worker/task:0"):
                x = af.placeholder(af.float32, [2])
                doubled = x * 2.0
            with af.device("/job:worker/task:1"):
                y = doubled + 1.0
            async with af.Session(cluster=spec) as sess:
                got = await sess.run(y, {x: np.ones(2, np.float32)})
        nursery.cancel_scope.cancel()
    np.testing.assert_array_equal(got, [3.0, 3.0])
    # The master over the cluster's devices, then each worker over its own, for its share.
    assert calls[0] == [task(0), task(1)]
    assert sorted(calls[1:]) == [[task(0)], [task(1)]]

    calls.clear()
    with af.Graph().as_default():
        c = af.constant(1.0) + 1.0
        async with af.Session() as sess:
            assert await sess.run(c) == 2.0
    assert calls == [["/job:localhost/replica:0/task:0/device:CPU:0"]]


async def test_a_closed_local_session_refuses_every_use_naming_itself():
    with af.Graph().as_default():
        c = af.constant(1.0)
        sess = af.Session()
        async with sess:
            assert await sess.run(c) == 1.0
        name = sess._target.name
        assert name.startswith("session-") and name.endswith(" in this process")
        with pytest.raises(RuntimeError, match=f"closed Session\\. \\({name}\\)") as refused:
            await sess.run(c)
        # TF1's sentence whole (code written for TF1 tests for it), the session's name after
        assert str(refused.value).startswith("Attempted to use a closed Session. ")
        with pytest.raises(RuntimeError, match=f"closed Session\\. \\({name}\\)"):
            async with sess:  # re-entered: refused, not silently reopened
                pass
        await sess.close()  # a second close is a no-op


async def test_a_local_run_prepared_before_the_close_is_refused_after_it(cpu_only):
    # (as on a cluster: not run against the reset variables, nor its value returned, e.g. by
    # a compat session's thread that prepared its step as another thread closed the session)
    # (cpu_only: the loop-free form is a CPU step's)
    with af.Graph().as_default():
        v = af.Variable(1.0)
        sess = af.Session()
        async with sess:
            await sess.run(v.initializer)
            prepared = sess.prepare(v.value())
            assert prepared.loop_free and await sess.run_prepared(prepared) == 1.0
        with pytest.raises(RuntimeError, match="closed Session\\. "):
            await sess.run_prepared(prepared)

        async def offload(node, args):
            return node.fn(node.ctx, *args)

        async def pause():
            pass
        with pytest.raises(RuntimeError, match="closed Session\\. "):
            await sess.run_loop_free(prepared, offload, pause)


async def test_a_run_prepared_before_the_close_never_waits_after_it(autojump_clock):
    with af.Graph().as_default():
        q = af.FIFOQueue(4, [af.float32], shapes=[[]])
        y = q.dequeue()
        sess = af.Session()
        async with sess:
            request = sess.prepare(y)
        with trio.fail_after(60):  # (the autojump clock: a wait would end here, not hang)
            with pytest.raises(RuntimeError, match="closed Session\\. "):  # refused as it starts
                await sess.run_prepared(request)
        assert sess.statistics().runs_in_flight == 0
