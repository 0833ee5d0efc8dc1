"""A save loop to be killed: ``python save_loop_child.py DIR`` restores the latest checkpoint
in DIR (if any), then saves a 4 MiB variable whose value is ``expected(step)`` at steps
``latest + 1, latest + 2, ...`` with ``max_to_keep=3``, printing ``saved STEP`` after each,
until killed. ``ready START`` is printed before the first save."""
import os
import sys

import numpy as np
import trio

import asyncflow as af

ELEMENTS = 1 << 20  # float32: 4 MiB


def expected(step):
    """The variable's value at ``step``: different at every step, cheap to recompute."""
    return (np.arange(ELEMENTS, dtype=np.float32) % 1009) + np.float32(step)


async def main(directory):
    with af.Graph().as_default():
        value = af.placeholder(af.float32, shape=[ELEMENTS])
        v = af.Variable(np.zeros(ELEMENTS, np.float32), name="v")
        step_var = af.Variable(np.int64(-1), name="global_step", trainable=False)
        step_in = af.placeholder(af.int64, shape=[])
        update = af.group(v.assign(value), step_var.assign(step_in))
        saver = af.train.Saver(max_to_keep=3)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            latest = af.train.latest_checkpoint(directory)
            start = 0
            if latest is not None:
                await saver.restore(sess, latest)
                start = int(await sess.run(step_var)) + 1
                state = af.train.get_checkpoint_state(directory)
                saver.recover_last_checkpoints(state.all_model_checkpoint_paths)
            print(f"ready {start}", flush=True)
            for step in range(start, start + 100_000):
                await sess.run(update, feed_dict={value: expected(step), step_in: step})
                await saver.save(sess, os.path.join(directory, "model"), global_step=step,
                                 write_meta_graph=step % 2 == 0)
                print(f"saved {step}", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
