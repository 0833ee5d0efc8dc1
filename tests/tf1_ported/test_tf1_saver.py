"""TensorFlow 1.x's ``python/training/saver_test.py``, ported to asyncflow (the single-task
cases; sharded and distributed checkpoints are tested in tests/train and tests/cluster).

Each test keeps TF's inputs, expected values and error classes; its docstring names the TF
method. Files go to pytest's ``tmp_path``.
"""
import os

import numpy as np
import pytest

import asyncflow as af


async def test_basic(tmp_path):
    """saver_test.py SaverTest.testBasic"""
    save_path = str(tmp_path / "basic_save")
    with af.Graph().as_default():
        v0 = af.Variable(10.0, name="v0")
        v1 = af.Variable(20.0, name="v1")
        save = af.train.Saver({"v0": v0, "v1": v1})
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run([v0, v1]) == [10.0, 20.0]
            val = await save.save(sess, save_path)
            assert isinstance(val, str) and val == save_path

    with af.Graph().as_default():
        v0 = af.Variable(-1.0, name="v0")
        v1 = af.Variable(-1.0, name="v1")
        save = af.train.Saver({"v0": v0, "v1": v1})
        async with af.Session() as sess:
            with pytest.raises(af.errors.FailedPreconditionError, match="v0"):
                await sess.run(v0)
            await save.restore(sess, save_path)
            assert await sess.run([v0, v1]) == [10.0, 20.0]

    with af.Graph().as_default():
        v0_2 = af.Variable(1000.0, name="v0")
        v1_2 = af.Variable(2000.0, name="v1")
        save2 = af.train.Saver({"v0": v0_2, "v1": v1_2})
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await sess.run([v0_2, v1_2]) == [1000.0, 2000.0]
            await save2.restore(sess, save_path)
            assert await sess.run([v0_2, v1_2]) == [10.0, 20.0]


async def test_int64(tmp_path):
    """saver_test.py SaverTest.testInt64"""
    save_path = str(tmp_path / "int64")
    with af.Graph().as_default():
        one = af.Variable(np.int64(15), name="one")
        save = af.train.Saver({"one": one})
        async with af.Session() as sess:
            await sess.run(one.initializer)
            await save.save(sess, save_path)
    with af.Graph().as_default():
        two = af.Variable(np.int64(-1), name="two")
        restore = af.train.Saver({"one": two})
        async with af.Session() as sess:
            await restore.restore(sess, save_path)
            value = await sess.run(two)
    assert value == 15 and value.dtype == np.int64


def test_same_name():
    """saver_test.py SaverTest.testSameName"""
    with af.Graph().as_default():
        v0 = af.Variable([10.0], name="v0")
        v1 = af.Variable([20.0], name="v1")
        with pytest.raises(ValueError, match="The same saveable will be restored with two "
                                             "names: v0"):
            af.train.Saver({"v0": v0, "v0too": v0})
        af.train.Saver({"v0": v0, "v1": v1})


async def test_basics_with_list_of_variables(tmp_path):
    """saver_test.py SaverTest.testBasicsWithListOfVariables"""
    save_path = str(tmp_path / "basics_with_list")
    with af.Graph().as_default():
        v0 = af.Variable(10.0, name="v0")
        v1 = af.Variable(20.0, name="v1")
        save = af.train.Saver([v0, v1])
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert await save.save(sess, save_path) == save_path
    with af.Graph().as_default():
        v0 = af.Variable(-1.0, name="v0")
        v1 = af.Variable(-1.0, name="v1")
        save = af.train.Saver([v0, v1])
        async with af.Session() as sess:
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v0)
            with pytest.raises(af.errors.FailedPreconditionError):
                await sess.run(v1)
            await save.restore(sess, save_path)
            assert await sess.run([v0, v1]) == [10.0, 20.0]


def test_some_errors():
    """saver_test.py SaverTest.testSomeErrors: a list holding one variable twice (here, as
    the Variable and as its reference) names it twice; distinct names work."""
    with af.Graph().as_default():
        with af.name_scope("a"):
            v0 = af.Variable([10.0], name="v")
        with af.name_scope("b"):
            v1 = af.Variable([20.0], name="v")
        with pytest.raises(ValueError, match="same name: a/v"):
            af.train.Saver([v0, v1, v0._ref()])
        af.train.Saver({"vee1": v0, "other": v1})


async def test_variables_are_independent_of_the_graph_that_saved_them(tmp_path):
    """saver_test.py SaverTest.testVarListShouldBeEmptyInDeferredBuild's cousin
    testSaveRestoreWithDifferentGraphs (values only travel by name)."""
    save_path = str(tmp_path / "by_name")
    with af.Graph().as_default():
        w = af.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        save = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(w.initializer)
            await save.save(sess, save_path)
    with af.Graph().as_default():
        af.constant(0.0, name="unrelated")
        w = af.Variable(np.zeros((2, 3), np.float32), name="w")
        save = af.train.Saver()
        async with af.Session() as sess:
            await save.restore(sess, save_path)
            np.testing.assert_array_equal(await sess.run(w),
                                          np.arange(6, dtype=np.float32).reshape(2, 3))


async def test_max_to_keep(tmp_path):
    """saver_test.py MaxToKeepTest.testNonSharded: the kept-list bookkeeping of one Saver,
    of a second built from its saver_def and told its list by ``set_last_checkpoints``, and
    of a third built the same way that knows of no earlier checkpoint."""
    save_dir = tmp_path / "max_to_keep_non_sharded"
    save_dir.mkdir()
    exists = af.train.checkpoint_exists

    def state():
        ckpt = af.train.get_checkpoint_state(str(save_dir))
        return ckpt.model_checkpoint_path, list(ckpt.all_model_checkpoint_paths)

    with af.Graph().as_default():
        v = af.Variable(10.0, name="v")
        save = af.train.Saver({"v": v}, max_to_keep=2)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            assert save.last_checkpoints == []
            s1 = await save.save(sess, str(save_dir / "s1"))
            assert save.last_checkpoints == [s1]
            assert exists(s1)
            assert state() == (s1, [s1])
            s2 = await save.save(sess, str(save_dir / "s2"))
            assert save.last_checkpoints == [s1, s2]
            assert exists(s1) and exists(s2)
            assert state() == (s2, [s1, s2])
            s3 = await save.save(sess, str(save_dir / "s3"))
            assert save.last_checkpoints == [s2, s3]
            assert not exists(s1) and not os.path.exists(s1 + ".meta")
            assert exists(s2) and os.path.exists(s2 + ".meta")
            assert exists(s3) and os.path.exists(s3 + ".meta")
            assert state() == (s3, [s2, s3])

            # A second helper, identical to the first; a third that knows of nothing.
            save2 = af.train.Saver(saver_def=save.as_saver_def())
            save2.set_last_checkpoints(save.last_checkpoints)
            save3 = af.train.Saver(saver_def=save.as_saver_def())

            # The first helper: s2 again (the old s2 goes first, the new one is appended).
            s2 = await save.save(sess, str(save_dir / "s2"))
            assert save.last_checkpoints == [s3, s2]
            assert not exists(s1) and exists(s3) and exists(s2)
            assert state() == (s2, [s3, s2])
            # s1: s3 is the oldest of the list, so it is deleted.
            s1 = await save.save(sess, str(save_dir / "s1"))
            assert save.last_checkpoints == [s2, s1]
            assert not exists(s3) and not os.path.exists(s3 + ".meta")
            assert exists(s2) and exists(s1)
            assert state() == (s1, [s2, s1])

            # The second helper: its list is the one it was given ([s2, s3]).
            s2 = await save2.save(sess, str(save_dir / "s2"))
            assert save2.last_checkpoints == [s3, s2]
            assert exists(s1)  # made by the first helper
            assert not exists(s3)  # deleted by the first helper
            assert exists(s2)
            assert state() == (s2, [s3, s2])
            s1 = await save2.save(sess, str(save_dir / "s1"))
            assert save2.last_checkpoints == [s2, s1]
            assert not exists(s3) and exists(s2) and exists(s1)
            assert state() == (s1, [s2, s1])

            # The third helper knows of no earlier checkpoint: it deletes none of them.
            s2 = await save3.save(sess, str(save_dir / "s2"))
            assert save3.last_checkpoints == [s2]
            assert exists(s1) and exists(s2) and not exists(s3)
            assert state() == (s2, [s2])
            s1 = await save3.save(sess, str(save_dir / "s1"))
            assert save3.last_checkpoints == [s2, s1]
            assert exists(s2) and exists(s1)
            assert state() == (s1, [s2, s1])


async def test_restore_from_missing_path_is_an_error(tmp_path):
    """saver_test.py SaverTest.testSaveToNonexistingPath's restore half: restoring what was
    never written fails (NotFoundError or ValueError, as TF 1.x's checkpoint_exists check)."""
    with af.Graph().as_default():
        v = af.Variable(1.0, name="v")
        save = af.train.Saver({"v": v})
        async with af.Session() as sess:
            with pytest.raises((af.errors.NotFoundError, ValueError)):
                await save.restore(sess, str(tmp_path / "never_written"))
