"""The step loop that the fused weight-gradient apply's and the grouped applies' tests compare
their forms with (test_matmul_apply.py, test_apply_group.py): the same graph trained a few
steps, every value recorded, then one traced step naming the op types that ran."""
import numpy as np

import asyncflow as af


async def traced_steps(build, images, labels, steps, config=None):
    """``build()`` (in a new graph: ``(x, y, loss, train)``) trained ``steps`` steps on
    ``images`` and ``labels`` in a session of ``config``: ``([the loss and every variable
    after each step, then every variable after one more, traced step], {the op types that
    traced step ran})``."""
    with af.Graph().as_default():
        x, y, loss, train = build()
        feed = {x: images, y: labels}
        async with af.Session(config=config) as session:
            await session.run(af.global_variables_initializer())
            out = []
            for _ in range(steps):
                out.append((await session.run([loss, train], feed))[0])
                out.extend(await session.run(af.global_variables()))
            metadata = af.RunMetadata()
            await session.run(train, feed, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            out.extend(await session.run(af.global_variables()))
    return [np.asarray(v) for v in out], {s.op_type for s in metadata.step_stats}
