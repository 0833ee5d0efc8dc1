"""A save loop killed with SIGKILL at random moments never leaves ``latest_checkpoint``
naming a checkpoint that does not restore, or one whose values are not its step's: the data
file, the meta graph and the state file are each written to a temporary, fsynced and renamed,
the state file last, and old checkpoints are deleted only after it is durable."""
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.kernels import checkpoint as ckpt_io
from asyncflow.train.saver import data_path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from save_loop_child import ELEMENTS, expected  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))


def _start(directory):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "save_loop_child.py"),
                             str(directory)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    line = proc.stdout.readline()  # bounded: the child prints it or exits (EOF)
    if not line.startswith("ready"):
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(f"the save loop did not start: {line!r} {proc.stderr.read()}")
    return proc, int(line.split()[1])


def _check_latest(directory):
    """latest_checkpoint restores, to its own step's values; returns that step (None: none)."""
    latest = af.train.latest_checkpoint(str(directory))
    if latest is None:
        return None
    step = int(latest.rsplit("-", 1)[1])
    tensors, metadata, _ = ckpt_io.read_safetensors(data_path(latest), ["v", "global_step"])
    assert metadata["global_step"] == str(step)
    assert int(tensors["global_step"]) == step
    np.testing.assert_array_equal(tensors["v"], expected(step))
    return step


def _kill_loop(tmp_path, kills, seed):
    rng = random.Random(seed)
    steps = []
    for _ in range(kills):
        proc, start = _start(tmp_path)
        try:
            assert start == (steps[-1] + 1 if steps and steps[-1] is not None else start)
            time.sleep(rng.uniform(0.0, 0.6))  # the random moment of the kill, not a wait
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        steps.append(_check_latest(tmp_path))
        seen = [s for s in steps[:-1] if s is not None]
        if seen:  # a kill never loses the latest checkpoint nor moves it back
            assert steps[-1] is not None and steps[-1] >= seen[-1], steps
    return steps


def _restore_in_a_session(directory):
    latest = af.train.latest_checkpoint(str(directory))
    with af.Graph().as_default():
        v = af.Variable(np.zeros(ELEMENTS, np.float32), name="v")
        step_var = af.Variable(np.int64(-1), name="global_step", trainable=False)
        saver = af.train.Saver()

        async def restore():
            async with af.Session() as sess:
                await saver.restore(sess, latest)
                return await sess.run([v, step_var])
        return trio.run(restore)


def _assert_survived(tmp_path, steps):
    assert any(s is not None for s in steps), "no save completed before any kill"
    value, step = _restore_in_a_session(tmp_path)
    assert step == steps[-1]
    np.testing.assert_array_equal(value, expected(step))
    # max_to_keep=3 over restarts: the state lists at most 3 checkpoints, all restorable.
    state = af.train.get_checkpoint_state(str(tmp_path))
    assert len(state.all_model_checkpoint_paths) <= 3
    for prefix in state.all_model_checkpoint_paths:
        ckpt_io.verify_file(data_path(prefix))


def test_a_save_loop_killed_three_times_leaves_a_latest_that_restores(tmp_path):
    steps = _kill_loop(tmp_path, kills=3, seed=38)
    _assert_survived(tmp_path, steps)


@pytest.mark.slow
def test_a_save_loop_killed_fifteen_times_leaves_a_latest_that_restores(tmp_path):
    steps = _kill_loop(tmp_path, kills=15, seed=15)
    _assert_survived(tmp_path, steps)


def test_stale_temporaries_of_killed_saves_are_removed_by_the_next_save(tmp_path):
    old = time.time() - ckpt_io.STALE_TEMPORARY_S - 5
    stale = [tmp_path / ".model-7.safetensors.k1ll3d.tmp", tmp_path / ".model-7.meta.x2.tmp",
             tmp_path / ".checkpoint.q9.tmp"]
    fresh = tmp_path / ".model-8.safetensors.alive.tmp"     # a writer still at work
    foreign = tmp_path / ".notes.txt.abc.tmp"               # not a checkpoint file
    for path in [*stale, fresh, foreign]:
        path.write_bytes(b"\0" * 64)
    for path in [*stale, foreign]:
        os.utime(path, (old, old))
    with af.Graph().as_default():
        af.Variable(np.zeros(3, np.float32), name="v")
        saver = af.train.Saver()

        async def save():
            async with af.Session() as sess:
                await sess.run(af.global_variables_initializer())
                await saver.save(sess, str(tmp_path / "model"), global_step=9)
        trio.run(save)
    assert not any(p.exists() for p in stale)
    assert fresh.exists() and foreign.exists()
