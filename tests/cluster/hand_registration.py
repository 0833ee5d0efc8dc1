"""Tests' by-hand registration of a graph's partitions: a master compiles the run, each task's
partition is registered over its own channel, and the master goes, leaving the test to call
RunGraph itself (tests of the worker's step protocol below the session)."""

from asyncflow import SessionConfig
from asyncflow.cluster import channels
from asyncflow.cluster.master import Master
from transports.messages import RegisterGraph


async def register_partitions(spec, graph, feeds, fetches):
    """``{job: (channel, graph handle, options)}`` for ``graph``'s run of ``feeds`` to
    ``fetches``, each job's task 0 holding its partition."""
    master = Master(spec, SessionConfig())
    await master.open()
    run = master.compile(graph, tuple(feeds), tuple(fetches), ())
    handles = {}
    for tg in run.task_graphs:
        job = tg.task.split("/")[1][4:]
        channel = channels.connect(spec.task_address(job, 0))
        reply = await channel.register_graph(RegisterGraph(tg.graph_def, "test", tg.options))
        handles[job] = (channel, reply.graph_handle, tg.options)
    await master.close()
    return handles
