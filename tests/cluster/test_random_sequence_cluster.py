"""A seeded stateful random op on a worker keeps one sequence per master session, as TF1's
worker keeps the op's kernel (and the generator in it) in the session's OpSegment, shared by
every graph the session registers: a run of other fetches continues the sequence, a second
session starts it over, two sessions never share one, and a worker serving many sessions keeps
no generator past a session's last graph (closed or reset; expired: a lease later, so that a
session idle past its lease goes on with its sequence)."""
import numpy as np
import trio

import asyncflow as af
from asyncflow.cluster.master import Master
from cluster_processes import loopback_spec
from transports.messages import Reset, RunGraph

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)
_next_address = iter(range(7300, 7400))
# Fetch lists by op name: the second and third runs' signatures differ from the first's.
MIXED = [["u", "v"], ["u"], ["v", "u", "w"], ["u"]]


def _graph(u_device=W0, v_device=W1):
    graph = af.Graph()
    with graph.as_default():
        af.set_random_seed(7)
        with af.device(u_device):
            u = af.random_uniform([4], name="u")
        with af.device(v_device):
            v = af.random_normal([3], name="v")
            w = af.nn.dropout(af.ones([64]), keep_prob=0.5, name="w")
    return graph, {"u": u, "v": v, "w": w}


async def _run_all(sess, ops, fetch_lists):
    return [await sess.run([ops[name] for name in names], options=TIMEOUT)
            for names in fetch_lists]


async def _local(fetch_lists):
    graph, ops = _graph("", "")
    async with af.Session(graph=graph) as sess:
        return await _run_all(sess, ops, fetch_lists)


def _by_op(results, fetch_lists):
    """{op name: [its draws in order]} of a session's runs."""
    draws = {}
    for names, values in zip(fetch_lists, results):
        for name, value in zip(names, values):
            draws.setdefault(name, []).append(value)
    return draws


def _assert_same_draws(got, want):
    assert got.keys() == want.keys()
    for name in got:
        assert len(got[name]) == len(want[name])
        for a, b in zip(got[name], want[name]):
            np.testing.assert_array_equal(a, b)


def _generator_sessions(servers):
    return {name: server.service.resources.sessions_with_generators()
            for name, server in servers.items()}


async def test_a_run_of_other_fetches_continues_the_sequence_on_workers(cluster):
    spec, servers = cluster
    alone = {name: (await _local([[name]] * 4)) for name in ("u", "v", "w")}
    want = {name: [run[0] for run in runs] for name, runs in alone.items()}
    graph, ops = _graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        draws = _by_op(await _run_all(sess, ops, MIXED), MIXED)
        # One session: its handle keeps the generators on the workers that run random ops.
        held = _generator_sessions(servers)
        assert held["ps:0"] == [] and len(held["worker:0"]) == 1
        assert held["worker:0"] == held["worker:1"]
    # u ran 4 times, v twice, w once, each over graphs of different signatures: the draws
    # a local session (one generator per op and session) gives those counts of lone runs.
    _assert_same_draws(draws, {"u": want["u"], "v": want["v"][:2], "w": want["w"][:1]})
    assert not np.array_equal(want["u"][0], want["u"][1])
    assert _generator_sessions(servers) == {"ps:0": [], "worker:0": [], "worker:1": []}


async def test_a_second_session_starts_over_and_two_sessions_never_share(cluster):
    spec, servers = cluster
    graph, ops = _graph()
    async with af.Session(graph=graph, cluster=spec) as first:
        before = _by_op(await _run_all(first, ops, MIXED[:2]), MIXED[:2])
        async with af.Session(graph=graph, cluster=spec) as second:
            # Interleaved with the first session, the second starts from the first draw.
            again = _by_op(await _run_all(second, ops, MIXED[:2]), MIXED[:2])
            assert len(_generator_sessions(servers)["worker:0"]) == 2
            after = _by_op(await _run_all(first, ops, [["u"]]), [["u"]])
        assert len(_generator_sessions(servers)["worker:0"]) == 1
    _assert_same_draws(again, before)
    third = await _local([["u"], ["u"], ["u"]])
    np.testing.assert_array_equal(after["u"][0], third[2][0])  # the first went on, untouched


async def test_many_sessions_leave_no_generators_behind(cluster):
    spec, servers = cluster
    graph, ops = _graph()
    firsts = []
    for _ in range(12):
        async with af.Session(graph=graph, cluster=spec) as sess:
            firsts.append(await sess.run(ops["u"], options=TIMEOUT))
            await sess.run([ops["v"], ops["u"]], options=TIMEOUT)
        assert _generator_sessions(servers) == {"ps:0": [], "worker:0": [], "worker:1": []}
    for value in firsts[1:]:
        np.testing.assert_array_equal(value, firsts[0])
    # A Reset drops every graph, and with them every session's generators.
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run(ops["u"], options=TIMEOUT)
        await servers["worker:0"].service.reset(Reset())
        assert _generator_sessions(servers)["worker:0"] == []


async def test_a_vanished_clients_generators_go_with_its_expired_graphs(autojump_clock, cpu_only):
    spec = af.ClusterSpec({"worker": [f"inprocess:{next(_next_address)}"]})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0, graph_lease_s=5.0).serve)
        resources = server.service.resources
        graph, ops = _graph(W0, W0)
        for request_id in (1, 2):  # two clients that register, run and die (no deregister)
            master = Master(spec, af.SessionConfig())
            await master.open()
            run = master.compile(graph, (), (ops["u"],), ())
            await master._register(run)
            (tg,) = run.task_graphs
            channel = master.tasks[tg.task].channel
            await channel.run_graph(RunGraph(tg.handle, 10**9 + request_id, [],
                                             list(tg.options.fetches), request_id=1))
            for task in master.tasks.values():
                await task.channel.aclose()
        assert len(resources.sessions_with_generators()) == 2
        await trio.sleep(5.0 + server.service.lease_check_period_s + 0.01)
        assert server.service.statistics().graphs == 0
        # Kept a lease more (an idle session's master registers again and goes on), then gone.
        assert len(resources.sessions_with_generators()) == 2
        await trio.sleep(5.0 + server.service.lease_check_period_s)
        assert resources.sessions_with_generators() == []
        nursery.cancel_scope.cancel()


async def test_worker_processes_keep_one_sequence_per_session(worker_processes):
    spec = loopback_spec({"worker": 2})
    worker_processes.start(spec, [("worker", 0), ("worker", 1)])
    want = _by_op(await _local(MIXED), MIXED)
    graph, ops = _graph()
    for _ in range(2):  # the second session starts over
        async with af.Session(graph=graph, cluster=spec) as sess:
            _assert_same_draws(_by_op(await _run_all(sess, ops, MIXED), MIXED), want)


async def test_a_session_idle_past_its_lease_continues_its_sequence(autojump_clock, cpu_only):
    # The worker drops the idle session's graph at its lease; the master registers it again
    # at the next run. TF1's worker has no lease: the op goes on with its second draw, not the
    # first again. A vanished client's generators still go, a lease after its last graph.
    want = [run[0] for run in await _local([["u"], ["u"], ["u"]])]
    spec = af.ClusterSpec({"worker": [f"inprocess:{next(_next_address)}"]})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0, graph_lease_s=5.0).serve)
        service = server.service
        graph, ops = _graph(W0, W0)
        async with af.Session(graph=graph, cluster=spec) as sess:
            np.testing.assert_array_equal(await sess.run(ops["u"], options=TIMEOUT), want[0])
            await trio.sleep(5.0 + service.lease_check_period_s + 0.01)
            assert service.statistics().graphs == 0  # expired, its generators kept
            assert len(service.resources.sessions_with_generators()) == 1
            np.testing.assert_array_equal(await sess.run(ops["u"], options=TIMEOUT), want[1])
            assert service.statistics().graphs == 1
            await trio.sleep(2 * (5.0 + service.lease_check_period_s) + 0.01)
            # A lease after the last graph expired, no graph came: the generators went too.
            assert service.statistics().graphs == 0
            assert service.resources.sessions_with_generators() == []
            np.testing.assert_array_equal(await sess.run(ops["u"], options=TIMEOUT), want[0])
        nursery.cancel_scope.cancel()
