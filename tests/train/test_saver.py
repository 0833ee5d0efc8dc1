"""Saver: save/restore round trips, state file, max_to_keep, errors, crash safety, meta graphs."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import checkpoint as ckpt_io
from asyncflow.train import saver as saver_module


def _model():
    w = af.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
    b = af.Variable(np.array([1, 2], dtype=af.bfloat16.np), name="b")
    step = af.Variable(np.int64(0), name="global_step", trainable=False)
    return w, b, step


async def test_save_restore_into_fresh_session_without_initializer(tmp_path):
    with af.Graph().as_default():
        w, b, step = _model()
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            await sess.run([w.assign(w * 2.0), step.assign(7)])
            path = await saver.save(sess, str(tmp_path / "model"), global_step=step)
            expected = await sess.run([w, b, step])
        assert path == str(tmp_path / "model-7")
        assert af.train.latest_checkpoint(str(tmp_path)) == path
        async with af.Session() as sess:
            await saver.restore(sess, path)
            got = await sess.run([w, b, step])
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)
    assert got[1].dtype == af.bfloat16.np


async def test_file_is_safetensors_with_metadata(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open
    with af.Graph().as_default():
        w, b, step = _model()
        saver = af.train.Saver({"weights": w, "step": step})
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "m"), global_step=3)
    data_file = path + ".safetensors"
    loaded = safetensors_numpy.load_file(data_file)
    assert sorted(loaded) == ["step", "weights"]
    np.testing.assert_array_equal(loaded["weights"], np.arange(6).reshape(2, 3))
    with safe_open(data_file, framework="np") as handle:
        meta = handle.metadata()
    assert meta["global_step"] == "3" and meta["format_version"] == ckpt_io.FORMAT_VERSION
    # Files written by the safetensors package restore too; BF16 is spelled per the spec.
    ckpt_io.write_safetensors(str(tmp_path / "bf.safetensors"),
                              {"x": np.array([1.5, -2], dtype=af.bfloat16.np)})
    raw = (tmp_path / "bf.safetensors").read_bytes()
    assert b'"dtype":"BF16"' in raw
    safetensors_numpy.save_file({"weights": np.ones((2, 3), np.float32),
                                 "step": np.array(9, np.int64)}, str(tmp_path / "ext.safetensors"))
    with af.Graph().as_default():
        w, b, step = _model()
        saver = af.train.Saver({"weights": w, "step": step})
        async with af.Session() as sess:
            await saver.restore(sess, str(tmp_path / "ext"))
            assert await sess.run(step) == 9
            np.testing.assert_array_equal(await sess.run(w), np.ones((2, 3)))


async def test_state_file_and_max_to_keep(tmp_path):
    with af.Graph().as_default():
        w, _, _ = _model()
        saver = af.train.Saver([w], max_to_keep=2)
        async with af.Session() as sess:
            await sess.run(w.initializer)
            paths = [await saver.save(sess, str(tmp_path / "ck"), global_step=i) for i in range(4)]
    assert saver.last_checkpoints == paths[2:]
    for old in paths[:2]:
        assert not os.path.exists(old + ".safetensors")
    state = af.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == paths[3]
    assert state.all_model_checkpoint_paths == paths[2:]
    text = (tmp_path / "checkpoint").read_text()
    assert text.splitlines()[0] == 'model_checkpoint_path: "ck-3"'
    assert 'all_model_checkpoint_paths: "ck-2"' in text
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert af.train.latest_checkpoint(str(tmp_path / "nowhere")) is None


def test_state_file_quoting_round_trips(tmp_path):
    odd = str(tmp_path / 'we"ird\\dir é') + "/m-1"
    saver_module._write_state(str(tmp_path), odd, [odd])
    state = af.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == odd
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: unquoted\n")
    with pytest.warns(UserWarning, match="ignored"):
        assert af.train.get_checkpoint_state(str(tmp_path)) is None


async def test_mismatches_are_all_listed(tmp_path):
    with af.Graph().as_default():
        a = af.Variable(np.zeros(3, np.float32), name="a")
        b = af.Variable(np.zeros(2, np.float32), name="b")
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            path = await saver.save(sess, str(tmp_path / "m"))
    with af.Graph().as_default():
        af.Variable(np.zeros(4, np.float32), name="a")
        af.Variable(np.zeros(2, np.int32), name="b")
        af.Variable(np.zeros(1, np.float32), name="c")
        af.Variable(np.zeros(1, np.float32), name="d")
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.NotFoundError) as info:
                await saver.restore(sess, path)
    message = str(info.value)
    assert "c, d" in message and "a: shape [3]" in message and "b: dtype float32" in message
    with af.Graph().as_default():
        af.Variable(np.zeros(4, np.float32), name="a")
        af.Variable(np.zeros(2, np.float32), name="b")
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match=r"a: shape \[3\]"):
                await saver.restore(sess, path)
            with pytest.raises(af.errors.NotFoundError, match="Failed to find"):
                await saver.restore(sess, str(tmp_path / "absent"))


async def test_corrupt_file_is_data_loss(tmp_path):
    with af.Graph().as_default():
        a = af.Variable(np.zeros(3, np.float32), name="a")
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(a.initializer)
            path = await saver.save(sess, str(tmp_path / "m"))
            raw = (tmp_path / "m.safetensors").read_bytes()
            (tmp_path / "m.safetensors").write_bytes(raw[:-4])
            with pytest.raises(af.errors.DataLossError, match="not fully covered"):
                await saver.restore(sess, path)
            (tmp_path / "m.safetensors").write_bytes(b"\xff" * 8 + raw[8:])
            with pytest.raises(af.errors.DataLossError, match="header too large"):
                await saver.restore(sess, path)


async def test_saving_uninitialized_fails_and_no_variables_is_an_error(tmp_path):
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="No variables"):
            af.train.Saver()
        a = af.Variable(1.0, name="a")
        with pytest.raises(ValueError, match="same name"):
            af.train.Saver({"x": a, "y": a}.values())
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await saver.save(sess, str(tmp_path / "m"))
    assert af.train.latest_checkpoint(str(tmp_path)) is None


_CHILD = textwrap.dedent("""
    import sys, numpy as np, trio, asyncflow as af
    async def main(directory):
        big = af.Variable(np.zeros(1 << 20, np.float32), name="big")
        step = af.Variable(np.int64(0), name="step")
        fill = big.assign(af.fill([1 << 20], af.cast(step, af.float32) + 1.0))
        bump = step.assign_add(1)
        saver = af.train.Saver(max_to_keep=2)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            for i in range(10_000):
                await sess.run(bump)
                await sess.run(fill)
                await saver.save(sess, directory + "/model", global_step=step)
                if i == 0:
                    print("ready", flush=True)
    trio.run(main, sys.argv[1])
""")


async def _check_latest_restorable(directory):
    latest = af.train.latest_checkpoint(directory)
    if latest is None:
        return None
    with af.Graph().as_default():
        big = af.Variable(np.zeros(1 << 20, np.float32), name="big")
        step = af.Variable(np.int64(0), name="step")
        saver = af.train.Saver()
        async with af.Session() as sess:
            await saver.restore(sess, latest)
            values, count = await sess.run([big, step])
    assert latest.endswith(f"-{count}")
    assert np.all(values == count + 1) or np.all(values == count)
    return count


async def _kill_loop(tmp_path, rounds):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    directory = str(tmp_path / "ckpt")
    os.makedirs(directory)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(af.__file__)))
    last = 0
    rng = random.Random(1234)
    for _ in range(rounds):
        child = subprocess.Popen([sys.executable, str(script), directory], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = child.stdout.readline()
            assert line.strip() == b"ready", child.stderr.read().decode()[-2000:]
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
            child.stderr.close()
        count = await _check_latest_restorable(directory)
        assert count is not None and count >= 1
        last = count
    return last


async def test_sigkill_mid_save_never_leaves_a_broken_latest(tmp_path):
    assert await _kill_loop(tmp_path, rounds=3) >= 1


@pytest.mark.slow
async def test_sigkill_mid_save_soak(tmp_path):
    assert await _kill_loop(tmp_path, rounds=25) >= 1


def _train_linear_model():
    """A linear regression trained by explicit gradient steps; returns names to serve."""
    rng = np.random.default_rng(0)
    x_data = rng.normal(size=(32, 3)).astype(np.float32)
    y_data = x_data @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.25
    x = af.placeholder(af.float32, [None, 3], name="x")
    y = af.placeholder(af.float32, [None, 1], name="y")
    with af.name_scope("dense"):
        w = af.Variable(np.zeros((3, 1), np.float32), name="w")
        b = af.Variable(np.zeros((1,), np.float32), name="b")
        pred = af.add(af.matmul(x, w), b, name="pred")
    err = pred - y
    grad_w = af.matmul(x, err, transpose_a=True) * (2.0 / 32)
    grad_b = af.reduce_mean(err, axis=0) * 2.0
    train = af.group(w.assign_sub(0.1 * grad_w), b.assign_sub(0.1 * grad_b), name="train")
    af.add_to_collection(af.GraphKeys.TRAIN_OP, train)
    af.add_to_collection("outputs", pred)
    af.add_to_collection("notes", "linear model")
    return x, y, pred, train, x_data, y_data


async def test_meta_graph_serves_without_the_building_code(tmp_path):
    with af.Graph().as_default():
        x, y, pred, train, x_data, y_data = _train_linear_model()
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            for _ in range(20):
                await sess.run(train, {x: x_data, y: y_data})
            expected = await sess.run(pred, {x: x_data})
            path = await saver.save(sess, str(tmp_path / "model"), global_step=20,
                                    write_meta_graph=True)
    assert os.path.exists(path + ".meta")
    with af.Graph().as_default() as g:
        restored_saver = af.train.import_meta_graph(path + ".meta")
        assert isinstance(restored_saver, af.train.Saver)
        pred2 = af.get_collection("outputs")[0]
        assert af.get_collection("notes") == ["linear model"]
        variables = af.trainable_variables()
        assert [v.name for v in variables] == ["dense/w:0", "dense/b:0"]
        assert variables[0] is af.global_variables()[0]
        async with af.Session() as sess:
            await restored_saver.restore(sess, path)
            got = await sess.run(pred2, {"x:0": x_data})
            np.testing.assert_array_equal(got, expected)
            # The rebuilt Variables are real: new ops on them and their initializers work.
            bump = variables[1].assign_add([1.0])
            await sess.run(bump)
            np.testing.assert_allclose(await sess.run(pred2, {"x:0": x_data}), expected + 1.0,
                                       rtol=1e-5, atol=1e-6)
            await sess.run(af.global_variables_initializer())
            assert not (await sess.run(variables[0])).any()
            train2 = af.get_collection(af.GraphKeys.TRAIN_OP)[0]
            await sess.run(train2, {"x:0": x_data, "y:0": y_data})
        assert g.get_operation_by_name("train") is train2


async def test_export_import_meta_graph_helpers(tmp_path):
    with af.Graph().as_default() as g:
        _train_linear_model()
        af.train.Saver()
        meta = af.train.export_meta_graph(str(tmp_path / "m.meta"))
        assert meta["saver_def"]["restore_op_name"] == "save/restore_all"
        text_path = af.train.write_graph(g, str(tmp_path / "logs"), "graph.json", as_text=True)
        bin_path = af.train.write_graph(g.as_graph_def(add_shapes=True), str(tmp_path / "logs"),
                                        "graph.msgpack")
    assert af.train.read_graph(text_path) == af.train.read_graph(bin_path)
    with af.Graph().as_default() as g2:
        af.import_graph_def(af.train.read_graph(bin_path), name="")
        assert g2.get_operation_by_name("dense/pred").type == "Add"
    with af.Graph().as_default():
        saver = af.train.import_meta_graph(str(tmp_path / "m.meta"), import_scope="served")
        assert saver.as_saver_def()["restore_op_name"] == "served/save/restore_all"
        assert af.trainable_variables()[0].name == "served/dense/w:0"
        (tmp_path / "bad.meta").write_bytes(b"\x93garbage")
        with pytest.raises(ValueError):
            af.train.import_meta_graph(str(tmp_path / "bad.meta"))


async def test_keep_checkpoint_every_n_hours_keeps_files_past_max_to_keep(tmp_path):
    with af.Graph().as_default():
        a = af.Variable(1.0, name="a")
        saver = af.train.Saver(max_to_keep=1, keep_checkpoint_every_n_hours=0.0)
        async with af.Session() as sess:
            await sess.run(a.initializer)
            paths = [await saver.save(sess, str(tmp_path / "k"), global_step=i) for i in range(3)]
    assert saver.last_checkpoints == paths[-1:]
    assert all(af.train.checkpoint_exists(p) for p in paths)
    assert af.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == paths[-1:]


async def test_sharded_saver_writes_a_shard_per_device_group_and_an_index(tmp_path):
    """Local sessions name no tasks: one shard. Old sharded checkpoints are deleted whole."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    with af.Graph().as_default():
        w, b, step = _model()
        sharded = af.train.Saver(sharded=True, max_to_keep=1)
        plain = af.train.Saver(max_to_keep=1)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            first = await sharded.save(sess, str(tmp_path / "model"), global_step=1)
            await sess.run(w.assign(w + 1.0))
            path = await sharded.save(sess, str(tmp_path / "model"), global_step=2)
            expected = await sess.run([w, b, step])
        assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2-00000-of-00001.safetensors",
                                                "model-2.meta", "model-2.safetensors.index.json"]
        assert not saver_module.checkpoint_exists(first) and saver_module.checkpoint_exists(path)
        shard = safetensors_numpy.load_file(str(tmp_path / "model-2-00000-of-00001.safetensors"))
        assert sorted(shard) == ["b", "global_step", "w"]
        for restorer in (sharded, plain):  # either Saver reads either kind of checkpoint
            async with af.Session() as sess:
                await restorer.restore(sess, af.train.latest_checkpoint(str(tmp_path)))
                for e, g in zip(expected, await sess.run([w, b, step])):
                    np.testing.assert_array_equal(e, g)


async def test_sharded_index_is_validated(tmp_path):
    with af.Graph().as_default():
        a = af.Variable(np.arange(3, dtype=np.float32), name="a")
        saver = af.train.Saver(sharded=True)
        async with af.Session() as sess:
            await sess.run(a.initializer)
            path = await saver.save(sess, str(tmp_path / "m"))
            index = tmp_path / "m.safetensors.index.json"
            good = index.read_text()
            for weight_map, match in [({"a": "../m-00000-of-00001.safetensors"}, "not a file name"),
                                      ({"a": "/etc/passwd"}, "not a file name"),
                                      ({}, "not found in the checkpoint")]:
                index.write_text(json.dumps({"weight_map": weight_map}))
                error = af.errors.NotFoundError if not weight_map else af.errors.DataLossError
                with pytest.raises(error, match=match):
                    await saver.restore(sess, path)
            index.write_text("{not json")
            with pytest.raises(af.errors.DataLossError, match="not JSON"):
                await saver.restore(sess, path)
            index.write_text(good)
            (tmp_path / "m-00000-of-00001.safetensors").unlink()
            with pytest.raises(af.errors.NotFoundError, match="m-00000-of-00001"):
                await saver.restore(sess, path)
