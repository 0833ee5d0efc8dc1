"""A partitioned variable in a checkpoint: saved as slices of its one logical name (TF1's
``save_slice_info``), each part from its own Save, and restored into any number of parts."""
import inspect

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import checkpoint as ckpt_io
from asyncflow.kernels.checkpoint_slices import checkpoint_keys, parse_spec, split_key
from tests.tf1_reference import tf1_run

TABLE = np.arange(10 * 4, dtype=np.float32).reshape(10, 4) / 7.0


def _table_variable(fw, parts, table, name="table"):
    """``name`` of ``table``'s shape in ``parts`` parts (1: unpartitioned; a negative count:
    cut along axis 1), each initialised with its region of ``table``."""
    def rows_of_table(shape, dtype=None, partition_info=None):
        start = partition_info.var_offset if partition_info is not None else [0, 0]
        return fw.constant(table[start[0]:start[0] + shape[0], start[1]:start[1] + shape[1]])

    partitioner = fw.fixed_size_partitioner(abs(parts), axis=int(parts < 0)) \
        if abs(parts) > 1 else None
    return fw.get_variable(name, shape=table.shape, initializer=rows_of_table,
                           partitioner=partitioner)


def _layouts(fw, table, saved_parts, restored_parts, directory):
    """Save ``table`` in ``saved_parts`` parts, restore into each of ``restored_parts`` with
    zeros first; return the specs saved and per layout the parts' values after restoring."""
    graph = fw.Graph()
    with graph.as_default():
        var = _table_variable(fw, saved_parts, table)
        saver = fw.train.Saver()
        specs = [v._save_slice_info.spec for v in var] if abs(saved_parts) > 1 else []
        with fw.Session(graph=graph) as sess:
            sess.run(fw.global_variables_initializer())
            path = saver.save(sess, directory + "/model")
    restored = []
    for parts in restored_parts:
        graph = fw.Graph()
        with graph.as_default():
            var = _table_variable(fw, parts, np.zeros_like(table))
            saver = fw.train.Saver()
            with fw.Session(graph=graph) as sess:
                sess.run(fw.global_variables_initializer())
                saver.restore(sess, path)
                restored.append([sess.run(v) for v in (var if abs(parts) > 1 else [var])])
    return specs, restored, path


async def _our_layouts(table, saved_parts, restored_parts, directory):
    graph = af.Graph()
    with graph.as_default():
        var = _table_variable(af, saved_parts, table)
        saver = af.train.Saver()
        specs = [v._save_slice_info.spec for v in var] if abs(saved_parts) > 1 else []
        async with af.Session(graph=graph) as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, directory + "/model")
    restored = []
    for parts in restored_parts:
        graph = af.Graph()
        with graph.as_default():
            var = _table_variable(af, parts, np.zeros_like(table))
            saver = af.train.Saver()
            async with af.Session(graph=graph) as sess:
                await sess.run(af.global_variables_initializer())
                await saver.restore(sess, path)
                restored.append([await sess.run(v) for v in (var if abs(parts) > 1 else [var])])
    return specs, restored, path


@pytest.mark.parametrize("saved, restored", [(4, (3, 1, 4)), (1, (4, 3)), (-3, (1, 2, -2))],
                         ids=["4_parts", "unpartitioned", "3_columns"])
async def test_layouts_restore_as_in_tf1(tmp_path, saved, restored):
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    specs, values, path = await _our_layouts(TABLE, saved, restored, str(ours_dir))
    theirs = tf1_run(inspect.getsource(_table_variable) + inspect.getsource(_layouts) + f"""
specs, restored, path = _layouts(tf, inputs["table"], {saved}, {restored!r}, {str(theirs_dir)!r})
outputs["specs"] = [np.array(s) for s in specs]
outputs["parts"] = [np.array(len(r)) for r in restored]
outputs["values"] = [v for r in restored for v in r]
outputs["listed"] = [np.array(f"{{n}} {{s}}") for n, s in tf.train.list_variables(path)]
""", tmp_path, table=TABLE)
    assert specs == [str(s) for s in theirs.get("specs", [])]
    assert [len(r) for r in values] == [int(n) for n in theirs["parts"]]
    flat = [v for r in values for v in r]
    assert len(flat) == len(theirs["values"])
    for mine, reference in zip(flat, theirs["values"]):
        np.testing.assert_array_equal(mine, reference)
    for parts, layout in zip(restored, values):  # every layout holds the whole table
        np.testing.assert_array_equal(np.concatenate(layout, axis=int(parts < 0)), TABLE)
    # One logical name with its full shape, as TF1's checkpoint lists it.
    listed = af.train.list_variables(path)
    assert [f"{n} {s}" for n, s in listed] == [str(s) for s in theirs["listed"]]
    np.testing.assert_array_equal(af.train.load_variable(path, "table"), TABLE)
    keys = checkpoint_keys(path + ".safetensors")
    if abs(saved) > 1:
        assert sorted(keys) == sorted(f"table|{s}" for s in specs)


async def test_sharded_parts_are_saved_and_restored_by_their_own_tasks(tmp_path):
    """Sharded: each task's shard holds only the slices of its parts; each part restores with
    a Restore on its task that asks for its region; nothing concatenates the table."""
    cluster = af.ClusterSpec({"ps": ["127.0.0.1:1", "127.0.0.1:2"], "worker": ["127.0.0.1:3"]})
    graph = af.Graph()
    with graph.as_default():
        with af.device(af.train.replica_device_setter(cluster=cluster)):
            table = _table_variable(af, 4, TABLE)
        saver = af.train.Saver(sharded=True)
    ops = graph.get_operations()
    assert not [op for op in ops if op.type == "ConcatV2" or "ConcatPartitions" in op.name]
    saves = sorted((op for op in ops if op.type == "Save"), key=lambda op: op.name)
    assert [op.device for op in saves] == ["/job:ps/task:0/device:CPU:0",
                                           "/job:ps/task:1/device:CPU:0"]
    for save, task in zip(saves, (0, 1)):
        names = save.get_attr("tensor_names")
        assert [n.split("|")[0] for n in names] == ["table", "table"]
        assert [parse_spec(n.split("|")[1])[1][0] for n in names] == \
            [v._save_slice_info.var_offset[0] for v in table][task::2]
        assert {t.op.device for t in save.inputs[2:]} == {f"/job:ps/task:{task}"}
    restores = [op for op in ops if op.type == "Restore"]
    assert sorted(len(op.get_attr("shape_and_slices")) for op in restores) == [2, 2]

    # The same graph, run on one process: the sharded checkpoint restores into 3 parts.
    local = af.Graph()
    with local.as_default():
        table = _table_variable(af, 4, TABLE)
        saver = af.train.Saver(sharded=True)
        async with af.Session(graph=local) as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "model"))
    assert len(set(ckpt_io.read_index(ckpt_io.index_path(path + ".safetensors")).values())) == 1
    with af.Graph().as_default():
        table = _table_variable(af, 3, np.zeros_like(TABLE))
        saver = af.train.Saver(sharded=True)
        async with af.Session() as sess:
            await saver.restore(sess, path)
            np.testing.assert_array_equal(await sess.run(af.convert_to_tensor(table)), TABLE)


@pytest.mark.parametrize("parts", [3, 1], ids=["3_parts", "unpartitioned"])
async def test_another_full_shape_names_the_variable_and_both_shapes(tmp_path, parts):
    with af.Graph().as_default():
        _table_variable(af, 4, TABLE)
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "model"))
    with af.Graph().as_default():
        var = _table_variable(af, parts, np.zeros((12, 4), np.float32))
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"table: shape \[10, 4\] in the checkpoint \(saved in 4 "
                                     r"slices\), \[12, 4\] in the graph"):
                await saver.restore(sess, path)
            # Nothing was assigned.
            value = await sess.run(af.convert_to_tensor(var))
            np.testing.assert_array_equal(value, np.zeros((12, 4), np.float32))


async def test_slices_that_leave_a_hole_are_data_loss(tmp_path):
    """A checkpoint whose slices do not cover the table (a part's shard lost) is refused."""
    path = str(tmp_path / "model.safetensors")
    ckpt_io.write_safetensors(path, {"table|10 4 0,3:0,4": TABLE[:3],
                                     "table|10 4 5,5:0,4": TABLE[5:]})
    with af.Graph().as_default():
        _table_variable(af, 2, np.zeros_like(TABLE))
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.DataLossError,
                               match=r"slices of table cover 12 of the 20 elements of slice 10 4 0,5:0,4"):
                await saver.restore(sess, path[:-len(".safetensors")])


def test_slice_specs_parse_as_tf1_writes_them():
    assert parse_spec("10 4 0,5:0,4") == ((10, 4), (0, 0), (5, 4))
    assert parse_spec("10 4 5,5:-") == ((10, 4), (5, 0), (5, 4))
    for bad in ("10 4 0,5", "10 4 8,5:0,4", "ten 4 0,5:0,4"):
        with pytest.raises(ValueError, match="slice spec"):
            parse_spec(bad)
    assert split_key("table") is None and split_key("a|b") is None


async def test_an_imported_meta_graph_restores_its_parts(tmp_path):
    """The Restore ops' slice specs survive export_meta_graph/import_meta_graph."""
    with af.Graph().as_default():
        table = _table_variable(af, 3, TABLE)
        saver = af.train.Saver(sharded=True)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "model"))
    with af.Graph().as_default() as graph:
        saver = af.train.import_meta_graph(path + ".meta")
        parts = [graph.get_tensor_by_name(f"table/part_{i}:0") for i in range(3)]
        async with af.Session() as sess:
            await saver.restore(sess, path)
            np.testing.assert_array_equal(np.concatenate(await sess.run(parts)), TABLE)


async def test_another_dtype_of_a_sliced_variable_names_both(tmp_path):
    with af.Graph().as_default():
        _table_variable(af, 2, TABLE)
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "model"))
    with af.Graph().as_default():
        af.get_variable("table", [10, 4], dtype=af.float64,
                        partitioner=af.fixed_size_partitioner(3))
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match="table: dtype float32 in the checkpoint, float64 in the graph"):
                await saver.restore(sess, path)
