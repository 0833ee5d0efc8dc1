"""Where a Session's steps run: the seam between local and cluster, and the local target.

A Session compiles and runs through one *target* and never asks which kind it holds. Two
kinds implement the same interface:
- ``LocalTarget`` (here): this process's devices. It compiles with ``compiled_run.compile_run``
  and runs the plans with the executor, in the calling task.
- ``ClusterTarget`` (``cluster/cluster_target.py``): a cluster's workers, through the master,
  which compiles with the same ``compiled_run.partition_run`` and ships each task its share.

The interface (what ``session.py`` uses, and nothing else):
- ``cache``: signature ``(feeds, fetches, targets)`` -> compiled run, filled by ``prepare``.
- ``await open()``, ``await close()`` (close drops the cache and what the target holds:
  a local target's resources, a cluster session's graphs on the workers).
- ``device_names()``: full names of the devices steps may run on.
- ``prepare(feeds, fetches, targets)``: the compiled run of a signature, compiled once.
  Every compiled run holds its step runner, chosen once when it was compiled
  (``exec/runner.py``; a cluster's in ``cluster/master.py``): ``runner.inline``
  says a step may run straight in the caller's task, ``runner.loop_free`` that it also never
  waits on trio (any event loop may await it, see ``asyncflow.aio``), and
  ``await runner.run(feed_values, step)`` runs one step, whichever way.
- ``await run_inline(compiled, feed_values, offload, pause, park)``: a step of an ``inline``
  run; ``offload``/``pause`` are the awaiting loop's (None: trio's).
- ``await run(compiled, feed_values, trace, timeout_ms, parked)``: any other step; returns
  the fetched values in fetch order. ``parked()`` is the session's close-cancellable scope:
  the target enters it around the whole step, or lets the executor enter it only while the
  step waits (``Step.park``).

Deadlines (``RunOptions.timeout_in_ms``), fetch structures, feeds and the close-cancellable
scopes stay in the Session: they are the same for every target.
"""
from __future__ import annotations

import itertools
import secrets

from asyncflow import errors
from asyncflow.exec import compiled_run
from asyncflow.exec import devices as _device
from asyncflow.exec.resources import ResourceManager
from asyncflow.exec.step import Step, preload

# Step ids of local steps, unique in the process (a session's steps share its rendezvous
# keys' namespace with every other local session's).
_STEP_IDS = itertools.count(secrets.randbits(40) << 8)


class LocalTarget:
    """This process's devices (``SessionConfig.device_count``) and a fresh ResourceManager.

    Args:
        graph: the session's Graph.
        config: the SessionConfig.
    """

    def __init__(self, graph, config):
        self.graph = graph
        self.config = config
        self.resources = ResourceManager(local=True)
        self.devices = _device.make_local_devices(
            config.device_count, intra_op_threads=config.intra_op_parallelism_threads)
        self.cache = {}
        self.name = f"session-{secrets.token_hex(4)} in this process"  # (in its errors)
        self.closed = False  # (a run prepared before the close is refused after it)
        self._state = None  # incarnations and pinned placements, made by the first compile

    async def open(self):
        pass

    async def close(self):
        self.closed = True
        self.resources.reset()
        self.cache.clear()

    def device_names(self):
        return [d.name for d in self.devices]

    def prepare(self, feeds, fetches, targets):
        """The CompiledRun of ``(feeds, fetches, targets)`` (tuples), compiled once."""
        key = (feeds, fetches, targets)
        compiled = self.cache.get(key)
        if compiled is None:
            if self._state is None:
                self._state = compiled_run.DeviceState.local(self.devices)
            compiled = self.cache[key] = compiled_run.compile_run(
                self.graph, feeds, fetches, targets, self._state, self.config, self.resources)
        return compiled

    def run_inline(self, compiled, feed_values, offload=None, pause=None, park=None):
        """One step of an ``inline`` runner's plan in the calling task, under whatever loop
        awaits this: no rendezvous, no deadline scope, no partition runner.

        ``offload(node, args)`` runs a large kernel on that loop's worker threads (default:
        trio's, under the device's limiter); ``pause()`` is that loop's checkpoint, awaited
        once per time slice (default: trio's); ``park`` the session's close-cancellable
        scope, entered only if the plan waits (or does a blocking read).
        """
        if self.closed:
            raise errors.closed_session(self.name)
        runner = compiled.runner
        plan = runner.plan
        step = Step(next(_STEP_IDS), offload=offload, pause=pause,
                    park=park if plan.waits or not plan.static or plan.blocking_reads
                    else None)
        if compiled.preloading:  # the first step: its one-time loads first, on a worker thread
            return self._preloaded(compiled, offload, runner.run, feed_values, step)
        # The runner's coroutine itself, for the caller to await: no frame of ours between.
        return runner.run(feed_values, step)

    @staticmethod
    async def _preloaded(compiled, offload, run, *args):
        await preload(compiled, offload)
        return await run(*args)

    async def run(self, compiled, feed_values, trace, timeout_ms, parked):
        """One step of ``compiled`` (any number of plans) in the calling task's trio run.

        ``timeout_ms`` is the session's business here (its cancel scope bounds the step).
        """
        # The executor enters ``parked`` only when the step really waits (or yields at the
        # end of a slice), so steps that finish inline, nearly all of them, pay for no cancel
        # scope (~10 us of a small run).
        if self.closed:
            raise errors.closed_session(self.name)
        step = Step(next(_STEP_IDS), trace=trace, park=parked)
        if compiled.preloading:  # the first step: its one-time loads first, on a worker thread
            await preload(compiled)
        return await compiled.runner.run(feed_values, step)
