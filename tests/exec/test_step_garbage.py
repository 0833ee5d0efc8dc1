"""A step with control flow is freed when it ends, not by the cyclic GC.

The frames propagator keeps closures (its hot paths) and own entries that refer back to it,
and its root frame and iteration refer to each other; ``core.Run.close`` releases them, so a
step's whole state goes with its last reference (``Frames.release``).
"""
import numpy as np

import asyncflow as af
from cyclic_garbage import cyclic_garbage

STEP_STATE = {"Frames", "_Frame", "_Iteration", "Step", "Run", "Own", "FrameStatistics"}


async def test_steps_with_a_loop_or_a_cond_leave_nothing_for_the_cyclic_gc(cpu_only):
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [4], name="x")
        scaled = x * 3.0
        _, total = af.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v + scaled[0]),
                                 [af.constant(0), af.constant(0.0)])
        chosen = af.cond(x[0] > 0, lambda: x * 2.0, lambda: x * 3.0)
    feed = {x: np.ones(4, np.float32)}
    async with af.Session(graph=graph) as sess:
        for fetch, expected in ((total, 9.0), (chosen, np.full(4, 2.0, np.float32))):
            await sess.run(fetch, feed)
            with cyclic_garbage() as garbage:
                for _ in range(5):
                    np.testing.assert_allclose(await sess.run(fetch, feed), expected)
            assert not STEP_STATE & set(garbage), sorted(set(garbage))
