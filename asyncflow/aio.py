"""asyncio embedding: ``aio.Session`` and ``aio.Batcher`` for asyncio applications.

Theory of operation:
- trio runs as a *guest* of the caller's asyncio loop (``trio.lowlevel.start_guest_run``):
  trio's scheduler steps run as callbacks on the asyncio thread, so no second event-loop
  thread is started and asyncio objects may be touched from trio tasks directly.
- One guest run per asyncio loop (``_Guest``), started on first use and kept in a weak map
  keyed by the loop. Each aio object holds a use; when the last one closes, the guest's main
  task is told to stop and the close waits until the guest run has finished, so the loop can
  end cleanly.
- A call from asyncio (``_Guest.call``) hops into trio with the run's token, runs the trio
  coroutine as a task in the guest's nursery under its own cancel scope, and completes an
  asyncio future with the result or the exception (the same ``af.errors`` classes).
  Cancelling the awaiting asyncio task cancels that scope, which cancels the step.
- ``aio.Session.run`` crosses into trio only when it must. A step that needs no trio
  scheduling (one static plan on a CPU device, no trace, no deadline) is awaited right on the
  asyncio loop: its generated step function awaits nothing but the offload of a large kernel,
  which goes to the device's worker threads through ``loop.run_in_executor``, and, once per
  time slice, ``asyncio.sleep(0)`` (``_pause``: cancelling the task stops it there). Other steps
  (waiting kernels, queues, control flow, several devices, clusters) run in the guest.
- ``aio.Batcher`` keeps its queue and serving task on asyncio (futures, no trio hop per
  request); each batch is one ``aio.Session.run``.
- ``aio.Server`` runs a worker server as a long-lived task of the guest: its trio HTTP server
  (``transports.http.server``) serves in the guest run, on the caller's loop (no thread of its
  own), and hands each request to the worker service in that same run.
"""
from __future__ import annotations

import asyncio
import functools
import threading
import weakref

import trio

from asyncflow import serving as _serving
from asyncflow import session as _session
from asyncflow.cluster import server as _server
from asyncflow.exec import timeslice as _timeslice

_GUESTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Guest]" = weakref.WeakKeyDictionary()


class _Guest:
    """One trio guest run hosted by one asyncio loop."""

    def __init__(self, loop):
        self.loop = loop
        self.users = 0
        self.stopping = False
        self.token = None
        self.nursery = None
        self._stop = None
        self._ready = loop.create_future()
        self._finished = loop.create_future()
        self.calls = 0

    def start(self):
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self.loop.call_soon,
            done_callback=self._on_done,
            host_uses_signal_set_wakeup_fd=threading.current_thread() is threading.main_thread(),
        )

    async def _main(self):
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set_result(None)
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _on_done(self, outcome):
        if not self._ready.done():
            self._ready.set_exception(RuntimeError(f"the trio guest run ended early: {outcome!r}"))
        if not self._finished.done():
            self._finished.set_result(outcome)

    @property
    def finished(self):
        return self._finished.done()

    async def call(self, async_fn, *args):
        """Run ``await async_fn(*args)`` in trio; return or raise its outcome in asyncio."""
        await self._ready
        result = self.loop.create_future()
        holder = {}
        self.calls += 1

        async def runner():
            try:
                with trio.CancelScope() as scope:
                    holder["scope"] = scope
                    if holder.get("cancelled"):
                        scope.cancel()
                    value = await async_fn(*args)
                    if not result.done():
                        result.set_result(value)
            except trio.Cancelled:
                raise
            except BaseException as exc:  # handed to the asyncio caller
                if not result.done():
                    result.set_exception(exc)
            finally:
                if not result.done():
                    result.cancel()

        self.token.run_sync_soon(self.nursery.start_soon, runner)
        try:
            return await result
        except asyncio.CancelledError:
            def cancel():
                scope = holder.get("scope")
                if scope is None:
                    holder["cancelled"] = True
                else:
                    scope.cancel()
            if not self.finished:
                self.token.run_sync_soon(cancel)
            raise

    async def start_service(self, serve):
        """Start ``serve(task_status=...)`` as a long-lived task; returns its cancel scope."""
        async def start():
            scope = trio.CancelScope()

            async def scoped(task_status=trio.TASK_STATUS_IGNORED):
                with scope:
                    await serve(task_status=task_status)
            await self.nursery.start(scoped)
            return scope
        return await self.call(start)

    async def stop(self):
        """Ask the guest to stop and wait until its run has finished."""
        if self.finished:
            return
        self.stopping = True
        await self._ready
        self.token.run_sync_soon(self._stop.set)
        await asyncio.shield(self._finished)


def run_trio(async_fn, *args):
    """``trio.run(async_fn, *args)`` for the project's entry points (CLI, demos).

    Raises:
        RuntimeError: inside a running asyncio loop (a notebook, an asyncio app), where
            ``trio.run`` cannot start; the message names the two ways that work.
    """
    if asyncio._get_running_loop() is not None:
        raise RuntimeError(
            "trio.run cannot start inside a running asyncio event loop (a notebook, an asyncio "
            "application): use asyncflow.aio (`async with aio.Session() as sess: await "
            "sess.run(...)`, which runs trio as a guest of your loop), or the synchronous "
            "surface (`import asyncflow.compat.v1 as tf`, `tf.Session()`)")
    return trio.run(async_fn, *args)


async def _pause():
    """The asyncio loop's checkpoint, awaited by an inline step once per time slice; raises
    ``asyncio.CancelledError`` if the awaiting task was cancelled."""
    await asyncio.sleep(0)
    _timeslice.restart()


async def _offload(node, args):
    """Run a large kernel of an inline step on its device's worker threads. A blocking IO
    write (``blocking_io`` without ``abandon``: kernels/registry.py) is never abandoned: a
    cancelled step waits for it to finish before the cancellation goes on."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(node.ctx.device.thread_pool,
                                  functools.partial(node.fn, node.ctx, *args))
    if not node.blocking_io or node.abandon:
        return await future
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait((future,))
        raise


async def _acquire():
    loop = asyncio.get_running_loop()
    guest = _GUESTS.get(loop)
    if guest is not None and guest.stopping:
        # Only one guest run per loop: let the stopping one finish before starting anew.
        await asyncio.shield(guest._finished)
        guest = None
    if guest is None or guest.finished:
        guest = _GUESTS[loop] = _Guest(loop)
        guest.start()
    guest.users += 1
    return guest


async def _release(guest):
    guest.users -= 1
    if guest.users == 0:
        await guest.stop()


class Session:
    """``async with aio.Session(...) as sess: await sess.run(...)`` from asyncio code.

    Takes the same arguments as ``af.Session`` and offers the same methods; each call runs
    in the loop's trio guest.
    """

    def __init__(self, target="", graph=None, config=None, cluster=None):
        self._session = _session.Session(target, graph=graph, config=config, cluster=cluster)
        self._guest = None
        self._closed = False

    @property
    def graph(self):
        return self._session.graph

    @property
    def trio_session(self):
        """The ``af.Session`` this wraps (use it only from trio code, e.g. ``in_trio``)."""
        return self._session

    async def in_trio(self, async_fn, *args):
        """Run ``await async_fn(*args)`` in the loop's trio guest (for trio-only helpers such
        as ``Saver.save``); cancelling the asyncio caller cancels it there."""
        guest = await self._ensure_open()
        return await guest.call(async_fn, *args)

    async def _ensure_open(self):
        if self._closed:
            raise _session.closed_session_error(self._session)
        if self._guest is None:
            guest = await _acquire()
            try:
                await guest.call(self._session.__aenter__)  # a cluster session opens its master
            except BaseException:
                await _release(guest)
                raise
            self._guest = guest
        return self._guest

    async def __aenter__(self):
        await self._ensure_open()
        return self

    async def __aexit__(self, *exc_info):
        await self.close()

    async def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Same as ``af.Session.run``; cancelling the asyncio task cancels the step.

        A step that needs no trio scheduling (``PreparedRun.loop_free``: one static plan on a
        CPU device, no trace, no deadline) runs right here on the asyncio loop
        (``Session.run_loop_free``), large kernels on the device's worker threads; any other
        step runs in the loop's trio guest (``Session.run_prepared``).
        """
        guest = await self._ensure_open()
        session = self._session
        request = session.prepare(fetches, feed_dict, options, run_metadata)
        if not request.loop_free:
            return await guest.call(session.run_prepared, request)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            await asyncio.sleep(0)  # a cancelled caller never starts a step: raises here
        result = await session.run_loop_free(request, _offload, _pause)
        await self._share_the_loop()
        return result

    async def _share_the_loop(self):
        """Yield to the loop once per time slice of runs that finished without suspending
        (``Session._share_the_loop``'s rule, for the asyncio loop)."""
        if _timeslice.due():
            await asyncio.sleep(0)
            _timeslice.restart()

    def list_devices(self):
        return self._session.list_devices()

    def statistics(self):
        return self._session.statistics()

    async def close(self):
        """Close the session; the loop's trio guest stops when its last user closes."""
        if self._closed:
            return
        self._closed = True
        if self._guest is not None:
            guest, self._guest = self._guest, None
            try:
                await guest.call(self._session.close)
            finally:
                await _release(guest)

    @staticmethod
    async def reset(target=None, containers=None):
        guest = await _acquire()
        try:
            await guest.call(_session.Session.reset, target, containers)
        finally:
            await _release(guest)


class Batcher:
    """``asyncflow.serving.Batcher`` for asyncio callers, served on the asyncio loop.

    Requests queue in the same ``serving.BatchQueue``; callers wait on asyncio futures and
    the serving task is an asyncio task, so a request never crosses into trio. Each batch
    is one ``aio.Session.run`` (inline on the loop when the step allows it).

    Args:
        session: an ``aio.Session``; the other arguments are ``serving.Batcher``'s.
    """

    def __init__(self, session, inputs, outputs, max_batch_size=64, max_wait_ms=2.0):
        self._aio_session = session
        self._queue = _serving.BatchQueue(session.graph, inputs, outputs, max_batch_size,
                                          _settle)
        self._max_wait = max_wait_ms / 1000.0
        self._server = None          # the future the serving task waits on, while it waits
        self._wake_on_first = False
        self._task = self._loop = None

    async def __aenter__(self):
        await self._aio_session._ensure_open()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._serve())
        return self

    async def __aexit__(self, *exc_info):
        task, self._task = self._task, None
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # our own caller is being cancelled too

    def statistics(self):
        return self._queue.statistics()

    async def run(self, feed_dict):
        """This caller's rows of the outputs (see ``serving.Batcher.run``)."""
        if self._task is None:
            raise RuntimeError("use `async with aio.Batcher(...)` before calling run")
        queue = self._queue
        future = self._loop.create_future()
        request = queue.request(feed_dict, future)
        queue.put(request, self._loop.time())
        server = self._server
        if server is not None and (self._wake_on_first or queue.full):
            self._server = None
            if not server.done():
                server.set_result(None)
        try:
            return await future
        except asyncio.CancelledError:
            request.abandoned = True
            raise

    async def _serve(self):
        queue, loop = self._queue, asyncio.get_running_loop()
        batch = []  # taken from the queue: failed if we are interrupted
        try:
            while True:
                batch = []
                if not queue.pending:
                    await self._park(loop, wake_on_first=True)
                if not queue.full and self._max_wait > 0:
                    deadline = queue.company_deadline(self._max_wait)
                    if deadline > loop.time():
                        timer = loop.call_at(deadline, self._wake)
                        try:
                            await self._park(loop, wake_on_first=False)
                        finally:
                            timer.cancel()
                batch = queue.take()
                if batch:
                    await queue.run_batch(self._aio_session.run, batch)
        finally:
            queue.fail(batch, _serving.stopped_error())
            queue.fail_queued(_serving.stopped_error())

    async def _park(self, loop, wake_on_first):
        self._server, self._wake_on_first = loop.create_future(), wake_on_first
        try:
            await self._server
        finally:
            self._server = None

    def _wake(self):
        server = self._server
        if server is not None and not server.done():
            server.set_result(None)


def _settle(future, result, error):
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class Server:
    """``async with aio.Server(cluster, job_name, task_index) as server:`` from asyncio code.

    Takes ``af.Server``'s arguments; the worker serves until the block exits: its HTTP
    server and the worker service in the loop's trio guest. ``server.address`` and
    ``server.target`` are known once it is entered.
    """

    def __init__(self, *args, **kwargs):
        self._server = _server.Server(*args, **kwargs)
        self._guest = None
        self._scope = None

    @property
    def address(self):
        return self._server.address

    @property
    def target(self):
        return self._server.target

    @property
    def port(self):
        return self._server.port

    async def __aenter__(self):
        self._guest = await _acquire()
        try:
            self._scope = await self._guest.start_service(self._server.serve)
        except BaseException:
            await _release(self._guest)
            raise
        return self

    async def __aexit__(self, *exc_info):
        await self.stop()

    async def stop(self):
        """Stop serving and wait until the server no longer listens."""
        if self._scope is None:
            return
        self._scope = None
        try:
            await self._guest.call(self._server.stop)
        finally:
            await _release(self._guest)
