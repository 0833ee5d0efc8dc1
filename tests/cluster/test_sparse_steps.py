"""A sparse training step on a parameter server moves the touched rows, never the table.

An embedding table lives on the ps, the worker looks up a batch of ids and the optimizer's
update runs on the ps with the gradient's rows and ids (an IndexedSlices). The bytes each
task sends and receives per step (its own counters, which count every tensor of a RunGraph
and of a pull) must follow the batch: the same for a 500-row and a 100,000-row table, and far
below the table's size.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.kernels.checkpoint import index_path, read_index

BATCH, WIDTH = 64, 32
STEPS = 3


def _model(rows, optimizer):
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            table = af.get_variable("table", [rows, WIDTH],
                                    initializer=af.initializers.random_uniform(-1.0, 1.0))
            weights = af.get_variable("weights", [WIDTH, 4])
        with af.device("/job:worker/task:0"):
            ids = af.placeholder(af.int32, [BATCH], name="ids")
            labels = af.placeholder(af.int32, [BATCH], name="labels")
            logits = af.matmul(af.nn.embedding_lookup(table, ids), weights)
            loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            train = optimizer.minimize(loss)
        init = af.global_variables_initializer()
    return graph, table, ids, labels, train, init


def _moved(servers):
    return {name: (s.service.statistics().bytes_sent, s.service.statistics().bytes_received)
            for name, s in servers.items()}


async def _bytes_per_step(cluster, servers, rows, optimizer):
    graph, table, ids, labels, train, init = _model(rows, optimizer)
    rng = np.random.default_rng(rows)
    feeds = {ids: rng.integers(0, rows, BATCH).astype(np.int32),
             labels: rng.integers(0, 4, BATCH).astype(np.int32)}
    feeds[ids][:4] = feeds[ids][0]  # repeated ids are summed, not sent twice as a table
    async with af.Session(cluster=cluster, graph=graph) as sess:
        await sess.run(init)
        before_value = await sess.run(table)
        await sess.run(train, feeds)  # the first step registers the graphs
        before = _moved(servers)
        for _ in range(STEPS):
            await sess.run(train, feeds)
        after = _moved(servers)
        after_value = await sess.run(table)
    touched = np.unique(feeds[ids])
    untouched = np.setdiff1d(np.arange(rows), touched)
    assert not np.allclose(after_value[touched], before_value[touched])
    np.testing.assert_array_equal(after_value[untouched], before_value[untouched])
    per_step = {name: ((after[name][0] - before[name][0]) // STEPS,
                       (after[name][1] - before[name][1]) // STEPS) for name in after}
    await af.Session.reset(cluster)
    return per_step


@pytest.mark.parametrize("make_optimizer", [lambda: af.train.GradientDescentOptimizer(0.5),
                                            lambda: af.train.AdagradOptimizer(0.5)],
                         ids=["sgd", "adagrad"])
async def test_a_sparse_step_moves_rows_not_the_table(cluster, make_optimizer):
    spec, servers = cluster
    small = await _bytes_per_step(spec, servers, 500, make_optimizer())
    large = await _bytes_per_step(spec, servers, 100_000, make_optimizer())
    assert small == large, (small, large)
    rows_bytes = BATCH * WIDTH * 4
    ps_sent, ps_received = large["ps:0"]
    # The ps sends the looked-up rows and receives their gradient (plus ids and scalars).
    assert rows_bytes <= ps_sent < 2 * rows_bytes, large
    assert rows_bytes <= ps_received < 2 * rows_bytes, large
    assert ps_sent + ps_received < 100_000 * WIDTH * 4 // 100


@pytest.mark.parametrize("sharded", [False, True], ids=["one_file", "sharded"])
async def test_a_partitioned_table_saves_on_two_ps_and_restores_into_three_parts(
        tmp_path, sharded):
    """Parts on two ps tasks; the checkpoint restores into three parts on a worker."""
    spec = af.ClusterSpec({"ps": ["inprocess:31001", "inprocess:31002"],
                           "worker": ["inprocess:31003"]})
    async with trio.open_nursery() as nursery:
        for job, index, _ in spec.tasks():
            await nursery.start(af.Server(spec, job, index, data_dir=str(tmp_path)).serve)
        graph = af.Graph()
        with graph.as_default(), af.device(af.train.replica_device_setter(cluster=spec)):
            table = af.get_variable("table", [10, 3], partitioner=af.fixed_size_partitioner(2))
            saver = af.train.Saver(sharded=sharded)
            whole = af.convert_to_tensor(table)
            init = af.global_variables_initializer()
        assert [v.device for v in table] == ["/job:ps/task:0", "/job:ps/task:1"]
        async with af.Session(cluster=spec, graph=graph) as sess:
            await sess.run(init)
            expected = await sess.run(whole)
            path = await saver.save(sess, str(tmp_path / "model"))
        if sharded:  # each ps wrote the slice of its own part, under the logical name
            where = read_index(index_path(path + ".safetensors"))
            assert sorted(where) == ["table|10 3 0,5:0,3", "table|10 3 5,5:0,3"]
            assert len(set(where.values())) == 2
        await af.Session.reset(spec)
        graph = af.Graph()
        with graph.as_default():
            with af.device("/job:worker/task:0"):
                table = af.get_variable("table", [10, 3],
                                        partitioner=af.fixed_size_partitioner(3))
            saver = af.train.Saver(sharded=sharded)
            whole = af.convert_to_tensor(table)
        async with af.Session(cluster=spec, graph=graph) as sess:
            await saver.restore(sess, path)
            np.testing.assert_array_equal(await sess.run(whole), expected)
        nursery.cancel_scope.cancel()
