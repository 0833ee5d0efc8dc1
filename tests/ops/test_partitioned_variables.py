"""Partitioned variables: partitioners, parts, lookups over them, placement and checkpoints."""
import inspect

import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run

SHAPES = [([10, 4], "float32"), ([1000, 64], "float32"), ([3, 700000], "float32"),
          ([5_000_000, 8], "float64"), ([7], "int32")]


def _partitions(tf, shapes):
    """Each TF1 partitioner's answer for each shape (as lists)."""
    makers = [lambda: tf.fixed_size_partitioner(3),
              lambda: tf.fixed_size_partitioner(20),
              lambda: tf.variable_axis_size_partitioner(4096),
              lambda: tf.variable_axis_size_partitioner(1 << 20, max_shards=4),
              lambda: tf.min_max_variable_partitioner(max_partitions=8),
              lambda: tf.min_max_variable_partitioner(max_partitions=3, min_slice_size=1024)]
    out = []
    for shape, dtype in shapes:
        for make in makers:
            axis = 1 if shape[0] == 3 else 0
            partitioner = make()
            if axis:  # the same family along axis 1
                partitioner = tf.fixed_size_partitioner(3, axis=1)
            out.append(list(partitioner(tf.TensorShape(shape), dtype=tf.as_dtype(dtype))))
    return out


def _lookups(tf, table, ids):
    """Lookups through partitioned variables and lists of shards, with their gradients."""
    def rows_of_table(shape, dtype=None, partition_info=None):
        start = partition_info.var_offset[0]
        return tf.constant(table[start:start + shape[0]])

    with tf.variable_scope("p", partitioner=tf.fixed_size_partitioner(3)):
        part = tf.get_variable("t", initializer=rows_of_table, shape=table.shape)
    shards = [tf.Variable(table[i::3]) for i in range(3)]
    div = tf.nn.embedding_lookup(part, ids, partition_strategy="div")
    mod = tf.nn.embedding_lookup(shards, ids, partition_strategy="mod")
    clipped = tf.nn.embedding_lookup(part, ids, partition_strategy="div", max_norm=1.5)
    weights = tf.constant(np.arange(table.shape[1], dtype=np.float32))
    loss = tf.reduce_sum(div * weights) + tf.reduce_sum(tf.square(mod)) + tf.reduce_sum(clipped)
    grads = tf.gradients(loss, list(part) + shards)
    dense = [tf.convert_to_tensor(g) for g in grads]
    return [div, mod, clipped] + dense, [v.shape.as_list() for v in part]


def test_partitioners_match_tf1(tmp_path):
    ours = _partitions(af, SHAPES)
    theirs = tf1_run(inspect.getsource(_partitions) + """
outputs["partitions"] = [np.array(p) for p in _partitions(tf, inputs_shapes)]
""".replace("inputs_shapes", repr(SHAPES)), tmp_path)
    assert [list(p) for p in ours] == [p.tolist() for p in theirs["partitions"]]


async def test_lookups_over_parts_and_shards_match_tf1(tmp_path):
    table = np.linspace(-2.0, 2.0, 11 * 4).reshape(11, 4).astype(np.float32)
    ids = np.array([[0, 10, 4], [4, 7, 1]], np.int32)
    with af.Graph().as_default():
        fetches, part_shapes = _lookups(af, table, af.constant(ids))
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            ours = await sess.run(fetches)
    theirs = tf1_run(inspect.getsource(_lookups) + """
fetches, part_shapes = _lookups(tf, inputs["table"], tf.constant(inputs["ids"]))
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["values"] = sess.run(fetches)
outputs["part_shapes"] = [np.array(s) for s in part_shapes]
""", tmp_path, table=table, ids=ids)
    assert part_shapes == [s.tolist() for s in theirs["part_shapes"]] == [[4, 4], [4, 4], [3, 4]]
    for index, (mine, reference) in enumerate(zip(ours, theirs["values"])):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6, err_msg=str(index))


def test_parts_are_named_initialized_with_full_fans_and_placed_round_robin():
    cluster = af.ClusterSpec({"ps": ["127.0.0.1:1", "127.0.0.1:2"], "worker": ["127.0.0.1:3"]})
    with af.Graph().as_default():
        with af.device(af.train.replica_device_setter(cluster=cluster)):
            table = af.get_variable("emb", [1000, 16], partitioner=af.fixed_size_partitioner(4))
        assert isinstance(table, af.PartitionedVariable) and len(table) == 4
        assert [v.op.name for v in table] == [f"emb/part_{i}" for i in range(4)]
        assert [v.device for v in table] == ["/job:ps/task:0", "/job:ps/task:1"] * 2
        assert table[1]._save_slice_info.spec == "1000 16 250,250:0,16"
        assert af.convert_to_tensor(table).shape.as_list() == [1000, 16]
        assert [v.op.name for v in af.trainable_variables()] == [v.op.name for v in table]
        with af.variable_scope("", reuse=True):
            assert af.get_variable("emb", [1000, 16]) is table
        with pytest.raises(ValueError, match="already exists"):
            af.get_variable("emb", [1000, 16], partitioner=af.fixed_size_partitioner(4))


async def test_glorot_parts_are_scaled_by_the_whole_table():
    with af.Graph().as_default():
        table = af.get_variable("emb", [4000, 2], partitioner=af.fixed_size_partitioner(4))
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            value = await sess.run(af.convert_to_tensor(table))
    limit = np.sqrt(6.0 / (4000 + 2))
    assert np.abs(value).max() <= limit and np.abs(value).max() > 0.9 * limit


async def test_a_checkpoint_restores_into_another_number_of_parts(tmp_path):
    with af.Graph().as_default():
        table = af.get_variable("table", [10, 4], partitioner=af.fixed_size_partitioner(3))
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            full = await sess.run(af.convert_to_tensor(table))
            path = await saver.save(sess, str(tmp_path / "model"))
    for parts in (2, 1, 5):
        with af.Graph().as_default():
            partitioner = af.fixed_size_partitioner(parts) if parts > 1 else None
            table = af.get_variable("table", [10, 4], partitioner=partitioner)
            saver = af.train.Saver()
            async with af.Session() as sess:
                await saver.restore(sess, path)
                np.testing.assert_array_equal(await sess.run(af.convert_to_tensor(table)), full)


async def test_a_partitioned_variable_converts_outside_loops_and_conds():
    """As TF1's ``as_tensor`` (under ``control_dependencies(None)``): the parts are
    concatenated outside any while loop or cond, so the table converts in two loops, a cond
    and the top level alike (its concat was kept from the first loop that converted it, and
    any later use elsewhere failed to build)."""
    with af.Graph().as_default():
        table = af.get_variable("table", [5, 2], partitioner=af.fixed_size_partitioner(2),
                                initializer=af.constant_initializer(1.5))

        def total():
            return af.while_loop(lambda i, acc: i < 2,
                                 lambda i, acc: (i + 1, acc + af.reduce_sum(table)),
                                 (af.constant(0), af.constant(0.0)))[1]
        first, second = total(), total()
        branch = af.cond(af.constant(True), lambda: af.reduce_sum(table) * 2.0,
                         lambda: af.constant(0.0))
        whole = af.reduce_sum(af.convert_to_tensor(table))
        (grad,) = af.gradients(first + second, [table[0]])
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            values = await sess.run([first, second, branch, whole, grad])
    assert [float(v) for v in values[:4]] == [30.0, 30.0, 30.0, 15.0]
    np.testing.assert_array_equal(values[4], np.full([3, 2], 4.0))


def test_bad_partitions_name_the_variable():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="Variable two_axes: .*one dimension"):
            af.get_variable("two_axes", [4, 4], partitioner=lambda shape, dtype: [2, 2])
        with pytest.raises(ValueError, match="Variable short: .*one entry per dimension"):
            af.get_variable("short", [4, 4], partitioner=lambda shape, dtype: [2])
        with pytest.raises(ValueError, match="must be positive"):
            af.variable_axis_size_partitioner(0)
