"""``af.Server``: one task of a cluster, serving the worker service on a transport.

``async with af.Server(cluster, "worker", 0) as server:`` serves until the block ends;
``await nursery.start(server.serve)`` serves until cancelled and returns once listening.
The address comes from the ClusterSpec (its port; the host binds 127.0.0.1 unless ``host``
says otherwise), or ``port=`` overrides it (``0`` picks a free port: read ``server.address``).
An address with the host ``inprocess`` serves in this process without a socket (tests).
``token`` (default ``ASYNCFLOW_TOKEN``) is required on every request when set.
Over HTTP the same port serves the status page (``/status``, ``status_page.py``): this task
and, gathered from every task of the cluster, the cluster's live view.

When the job is done, ``await shutdown_cluster(cluster, jobs=["ps"])`` (the chief) sends each
task a Shutdown request; a server with a token honours it, so ``await server.join()`` and
``serve`` return and the task's process can exit (TF1's parameter servers never did).
"""
from __future__ import annotations

import contextlib
import logging
import os

import trio

from asyncflow import errors
from asyncflow.cluster import channels as _channels
from asyncflow.cluster import status as _status
from asyncflow.cluster.spec import ClusterSpec, health_cluster, task_name
from asyncflow.cluster.status_page import StatusPages
from asyncflow.cluster.worker import WorkerService
from transports.messages import RemoteCallError, Shutdown
from transports.service import TransportError

_log = logging.getLogger("asyncflow.worker")
# A stopping server's bound on each part of its shielded cleanup (the status page's watcher,
# the channels to peers): a dead or silent peer is not waited for. Leaving the HTTP server
# still waits for a kernel running on a thread (it cannot be interrupted), so ``asyncflow
# worker`` exits within ``cli.STOP_DEADLINE_S`` of a signal or of a Shutdown in any case.
CLEANUP_S = 1.0


class Server:
    """A worker task of a cluster.

    Args:
        cluster: a ClusterSpec (or dict) naming this task's address.
        job_name: this task's job.
        task_index: this task's index in the job.
        host: interface to bind (default 127.0.0.1).
        port: port to bind (default: the cluster's; 0: any free port).
        token: shared secret required on every request (default ``ASYNCFLOW_TOKEN``).
        config: a SessionConfig for the worker's devices (``device_count``).
        data_dir: the directory the worker's file ops (Save, Restore, readers) are confined
            to; default: the current directory. Requests from other processes never touch
            files outside it.
        graph_lease_s: seconds a registered graph lives past its last use (default 600).
        status_trace_every: while someone watches the status page, trace 1 step in this
            many (default 8; 0: never), for the page's timeline.

    Raises:
        ValueError: if the cluster has no such task, the token is unusable or ``data_dir``
            is not a directory.
    """

    def __init__(self, cluster, job_name, task_index=0, host=None, port=None, token=None,
                 config=None, data_dir=None, graph_lease_s=600.0,
                 status_trace_every=_status.DEFAULT_TRACE_EVERY):
        self.cluster = ClusterSpec(cluster)
        self.job_name = job_name
        self.task_index = int(task_index)
        spec_address = self.cluster.task_address(job_name, self.task_index)
        spec_host, _, spec_port = spec_address.rpartition(":")
        self._inprocess = spec_host == _channels.INPROCESS_HOST
        self.host = host or "127.0.0.1"
        self.port = int(spec_port) if port is None else int(port)
        self.token = _channels.check_token(
            token if token is not None else (os.environ.get(_channels.TOKEN_ENV) or None))
        self.service = WorkerService(job_name, self.task_index, self._connect, config=config,
                                     data_dir=os.getcwd() if data_dir is None else data_dir,
                                     graph_lease_s=graph_lease_s,
                                     status_trace_every=status_trace_every)
        self.address = spec_address if self._inprocess else None
        self._cm = None
        self._scope = None
        self._stopped = trio.Event()
        self._shutdown = trio.Event()
        if self.token:
            self.service.on_shutdown = self._shutdown.set
        self.http = None  # the running transports.http.server.HttpServer, while serving HTTP

    @property
    def target(self):
        return self.service.task

    def _connect(self, address):
        return _channels.connect(address, token=self.token)

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        """Serve until cancelled or stopped; ``task_status.started(self)`` once listening."""
        try:
            with trio.CancelScope() as self._scope:
                async with self._serving():
                    task_status.started(self)
                    await self._shutdown.wait()
        finally:
            self._stopped.set()

    async def join(self):
        """Wait until a Shutdown request arrives (TF's ``server.join()``, which can end)."""
        await self._shutdown.wait()

    async def stop(self):
        """Stop a server started with ``serve`` and wait until it no longer listens."""
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()

    @contextlib.asynccontextmanager
    async def _serving(self):
        # Idle graphs of vanished clients expire even when no request arrives. A system task
        # (not a nursery around the yield) so the errors of the block keep their types.
        expiry = trio.CancelScope()

        async def expire():
            with expiry:
                await self.service.expire_idle_graphs()
        trio.lowlevel.spawn_system_task(expire)
        try:
            if self._inprocess:
                _channels.register_inprocess(self.address, self.service)
                try:
                    yield self
                finally:
                    _channels.unregister_inprocess(self.address, self.service)
                return
            from transports.http.server import open_http_server
            pages = StatusPages(self.service, self.cluster, self._connect)
            try:
                async with open_http_server(self.service, self.host, self.port,
                                            token=self.token, pages=pages) as http:
                    self.http = http
                    self.service.transport_statistics = http.statistics
                    self.address = http.address
                    self.port = http.port
                    self.service.cluster = health_cluster(self.cluster, self.service.task,
                                                          http.address)
                    # DEBUG: ``asyncflow worker`` prints the same event on stdout.
                    _log.debug("%s listening on %s", self.service.task, http.address)
                    yield self
            finally:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + CLEANUP_S):
                    await pages.aclose()
        finally:
            expiry.cancel()
            with trio.CancelScope(shield=True, deadline=trio.current_time() + CLEANUP_S):
                await self.service.aclose()

    async def __aenter__(self):
        self._cm = self._serving()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc_info):
        cm, self._cm = self._cm, None
        return await cm.__aexit__(*exc_info)


async def shutdown_cluster(cluster, jobs=None, token=None, timeout=10.0):
    """Ask tasks of a cluster to stop serving: the "job done" signal, sent by the chief.

    Args:
        cluster: a ClusterSpec, dict or resolver.
        jobs: the jobs to stop (default: every job).
        token: the shared secret (default ``ASYNCFLOW_TOKEN``); workers without a token
            refuse Shutdown.
        timeout: seconds per task.

    Returns:
        ``{task name: "stopped" | "unreachable"}`` (an unreachable task has already gone).

    Raises:
        FailedPreconditionError and other OpErrors: a task refused (naming it).
    """
    spec = ClusterSpec(cluster)
    jobs = spec.jobs if jobs is None else list(jobs)
    for job in jobs:
        spec.num_tasks(job)  # names an unknown job
    outcome, refusals = {}, []

    async def stop_one(job, index, address):
        name = task_name(job, index)
        channel = _channels.connect(address, token=token)
        try:
            await channel.shutdown(Shutdown(task=name, reason="the job is done"),
                                   timeout=timeout)
            outcome[name] = "stopped"
        except TransportError as exc:
            _log.info("Shutdown: %s at %s is unreachable (%s)", name, address, exc)
            outcome[name] = "unreachable"
        except RemoteCallError as exc:
            refusals.append(errors.from_code(exc.code, f"Shutdown of {name} at {address}: "
                                             f"{exc.message}"))
        finally:
            await channel.aclose()

    async with trio.open_nursery() as nursery:
        for job, index, address in spec.tasks():
            if job in jobs:
                nursery.start_soon(stop_one, job, index, address)
    if refusals:
        raise refusals[0]
    return dict(sorted(outcome.items()))
