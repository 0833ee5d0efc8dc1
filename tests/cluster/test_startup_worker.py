"""A worker started from the CLI serves its first step, bfloat16 included.

The worker process imports ml_dtypes only when a bfloat16 first reaches it (asyncflow/dtypes.py,
transports/schema.py; ``tests/test_startup.py`` checks what a bare import loads): here its
first step receives a bfloat16 feed, casts it, and sends bfloat16 back over the wire.
"""
import ml_dtypes
import numpy as np

import asyncflow as af

from cluster_processes import loopback_spec

TIMEOUT = af.RunOptions(timeout_in_ms=20000)


async def test_a_cli_worker_serves_a_first_step_with_bfloat16(worker_processes):
    spec = loopback_spec({"worker": 1})
    worker_processes.start(spec, [("worker", 0)])
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        x = af.placeholder(af.bfloat16, [3], name="x")
        doubled = af.cast(x, af.float32) * 2.0
        back = af.cast(doubled + 0.00390625, af.bfloat16)  # under half an ulp: rounds back
    feed = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    async with af.Session(graph=graph, cluster=spec) as sess:
        got_doubled, got_back = await sess.run([doubled, back], {x: feed}, options=TIMEOUT)
        again = await sess.run(back, {x: feed[::-1].copy()}, options=TIMEOUT)
    assert got_doubled.dtype == np.float32 and got_doubled.tolist() == [3.0, -4.5, 6.0]
    assert got_back.dtype == np.dtype(ml_dtypes.bfloat16)
    assert got_back.astype(np.float32).tolist() == [3.0, -4.5, 6.0]
    assert again.astype(np.float32).tolist() == [6.0, -4.5, 3.0]
