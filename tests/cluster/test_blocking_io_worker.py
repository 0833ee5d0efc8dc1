"""A worker process whose step reads a FIFO nobody writes (a ReadFile: a blocking IO kernel,
always on a worker thread) keeps its event loop free: Health answers while the read waits,
the step ends with DeadlineExceededError at its ``timeout_in_ms``, and the worker serves the
next step. Real CLI worker process on loopback; every wait has a deadline."""
import os

import numpy as np
import trio

import asyncflow as af
from asyncflow.cluster import channels
from asyncflow.ops import io as io_ops

from cluster_processes import loopback_spec
from fifos import release_fifo


async def test_health_answers_while_a_worker_reads_a_fifo(worker_processes, tmp_path):
    fifo = str(tmp_path / "never-written")
    os.mkfifo(fifo)
    spec = loopback_spec({"worker": 1})
    worker_processes.start(spec, [("worker", 0)])
    with af.Graph().as_default() as graph:
        with af.device("/job:worker/task:0"):
            read = io_ops.read_file(fifo)
            quick = af.constant(np.float32(2.0)) + 1.0
    probe = channels.connect(spec["worker"][0])
    try:
        async with af.Session(graph=graph, cluster=spec) as sess:
            outcome, answers = {}, []

            async def blocked_step():
                try:
                    await sess.run(read, options=af.RunOptions(timeout_in_ms=4000))
                except af.errors.OpError as exc:
                    outcome["error"] = exc

            with trio.fail_after(60):  # guards against a hang only
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(blocked_step)
                    while "error" not in outcome and len(answers) < 1000:
                        health = await probe.health(timeout=2)
                        if health.stats.steps_in_flight:
                            answers.append(health)
                        await trio.sleep(0.05)
            # The worker answered Health while its step's read waited on the FIFO.
            assert answers, outcome
            assert isinstance(outcome["error"], af.errors.DeadlineExceededError), outcome
            assert await sess.run(quick, options=af.RunOptions(timeout_in_ms=20000)) == 3.0
    finally:
        release_fifo(fifo)
        await probe.aclose()
