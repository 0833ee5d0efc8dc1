"""TF1's synchronous ``tf.Session``: the async ``af.Session`` driven from plain calls.

Theory of operation:
- A ``Session`` wraps one ``af.Session``, opened by a parked task of the process's background
  loop (``compat/background_loop.py``), so it opens and closes in one trio task.
- ``run`` prepares the step in the calling thread (fetches, feeds, the compiled run). A step
  that needs no trio scheduling (``PreparedRun.loop_free``: one static plan on a CPU device,
  no trace, no deadline) runs right there, in the calling thread, as ``asyncflow.aio`` runs
  such steps on asyncio: its coroutine never suspends, so one ``send`` drives it to the end.
  Any other step (queues, control flow, several devices, clusters, deadlines) runs as a task
  on the background loop while the caller waits.
- Several threads may call ``run`` at once (hogwild training, feeding threads): each step has
  its own slots, variables are shared, and steps on the loop run concurrently there.
- Ctrl-C during ``run``: a step in the calling thread stops where the interrupt lands; one on
  the loop is cancelled there. Either way ``KeyboardInterrupt`` reaches the caller and the
  session stays usable.
- The same session is awaitable from async code (``await sess.run_async(...)``, trio or
  asyncio), and its graph is the graph of ``import asyncflow as af``: build once, run steps
  both ways.
"""
from __future__ import annotations

import asyncio
import threading

import sniffio
import trio

from asyncflow import session as _session
from asyncflow.compat.background_loop import LOOP
from asyncflow.graph import default_session as _graph
from asyncflow.exec import timeslice as _timeslice


async def _offload_inline(node, args):
    """A large kernel of a step run in the calling thread: that thread is its worker."""
    return node.fn(node.ctx, *args)


async def _no_pause():
    """A step in the calling thread shares no event loop: the end of a slice is no event."""
    _timeslice.restart()


def _drive(coro):
    """Run a coroutine that never suspends to its end, in this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("internal error: a loop-free step suspended outside an event loop")


# target ("grpc://host:port") -> ClusterSpec of the Servers this process started: a session
# on one of them is the master of that server's whole cluster, as TF1's is.
_LOCAL_SERVERS = {}


def cluster_of_target(target):
    """The ClusterSpec of the Server of this process at ``target``, or None."""
    return _LOCAL_SERVERS.get(target)


def refuse_inside_event_loop(what):
    """Raise a RuntimeError naming the async form if an event loop runs in this thread."""
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            f"{what} is the synchronous form and would block this trio event loop: in async "
            "code use `async with af.Session() as sess:` and `await sess.run(...)` (or, on "
            "this synchronous session, `await sess.run_async(...)`)")
    if asyncio._get_running_loop() is not None and not _interactive_shell():
        raise RuntimeError(
            f"{what} is the synchronous form and would block this asyncio event loop: use "
            "`asyncflow.aio.Session` and `await sess.run(...)` (or, on this synchronous "
            "session, `await sess.run_async(...)`)")


def _interactive_shell():
    """Jupyter/IPython runs cells inside its asyncio loop; there a blocking run is the point."""
    import sys
    return "ipykernel" in sys.modules


class Session:
    """TF1's ``tf.Session(target='', graph=None, config=None)``, synchronous.

    Args:
        target: ``""`` for this process, or a worker's ``"host:port"`` (``grpc://`` and
            ``http://`` prefixes accepted, e.g. ``tf.train.Server(...).target``).
        graph: the graph to run (default: the default graph).
        config: a ConfigProto/SessionConfig.
        cluster: a ClusterSpec to run as the master of a cluster (as ``af.Session``).

    Raises:
        RuntimeError: when created inside a running event loop (use ``af.Session`` there).
    """

    def __init__(self, target="", graph=None, config=None, cluster=None):
        refuse_inside_event_loop("tf.Session()")
        if target and cluster is None:
            cluster = cluster_of_target(target)  # a tf.train.Server of this process
            target = "" if cluster is not None else target
        self._session = _session.Session(target, graph=graph, config=config, cluster=cluster)
        self._prepare_lock = threading.Lock()
        self._default = None
        self._graph_default = None
        self._held = LOOP.hold(self._session)

    @property
    def graph(self):
        return self._session.graph

    @property
    def graph_def(self):
        return self._session.graph.as_graph_def()

    @property
    def sess_str(self):
        return getattr(self._session._target, "target", "") or ""

    @property
    def async_session(self):
        """The ``af.Session`` this drives (its tasks live on the background loop)."""
        return self._session

    @property
    def closed(self):
        return self._session.closed

    def list_devices(self):
        return self._session.list_devices()

    def statistics(self):
        return self._session.statistics()

    def _prepare(self, fetches, feed_dict, options, run_metadata):
        if LOOP.closed:
            LOOP.refuse()
        with self._prepare_lock:
            return self._session.prepare(fetches, feed_dict, options, run_metadata)

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run the ops needed for ``fetches``; returns their values in the same structure.

        Safe to call from several threads at once; Ctrl-C cancels the step and raises
        KeyboardInterrupt, leaving the session usable.

        Raises:
            OpError: the failing op's error, as ``af.Session.run``.
            RuntimeError: after ``close()``, after the interpreter began to exit, or when
                called inside a running event loop (the message names the async form).
        """
        refuse_inside_event_loop("Session.run")
        session = self._session
        request = self._prepare(fetches, feed_dict, options, run_metadata)
        if request.loop_free:
            return _drive(session.run_loop_free(request, _offload_inline, _no_pause))
        return LOOP.call(session.run_prepared, request)

    async def run_async(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``run`` for async code (trio or asyncio): awaits the step without blocking the
        caller's loop; cancelling the caller cancels the step."""
        request = self._prepare(fetches, feed_dict, options, run_metadata)
        call = LOOP.submit(self._session.run_prepared, request)
        try:
            if sniffio.current_async_library() == "trio":
                await trio.to_thread.run_sync(call.done.wait, abandon_on_cancel=True)
            else:
                await asyncio.get_running_loop().run_in_executor(None, call.done.wait)
        except BaseException:
            LOOP.cancel_soon(call)
            raise
        return call.outcome()

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        """TF1's ``make_callable``: a function of the fed values that runs ``fetches``."""
        feed_list = list(feed_list or ())

        def call(*values, options=None, run_metadata=None):
            if len(values) != len(feed_list):
                raise ValueError(f"make_callable: expected {len(feed_list)} feed values, "
                                 f"got {len(values)}")
            return self.run(fetches, dict(zip(feed_list, values)), options, run_metadata)
        return call

    def close(self):
        """Close the session (its variables go with it); later runs raise RuntimeError."""
        self._held.release()

    def __del__(self):
        # TF1 closes a session that is garbage collected; here its loop task is told to close
        # it, without waiting (a finalizer may run in any thread, or during exit).
        held = getattr(self, "_held", None)
        if held is not None:
            held.release_soon()

    def as_default(self):
        """``with sess.as_default():`` makes ``t.eval()``/``op.run()`` use this session."""
        return _graph.default_session(self)

    def __enter__(self):
        self._graph_default = self.graph.as_default()
        self._graph_default.__enter__()
        self._default = self.as_default()
        self._default.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self._default.__exit__(exc_type, exc, tb)
            self._graph_default.__exit__(exc_type, exc, tb)
        finally:
            self.close()
        return False

    @staticmethod
    def reset(target, containers=None, config=None):
        """Clear resource containers of a local process or a cluster (TF1's Session.reset)."""
        refuse_inside_event_loop("Session.reset")
        LOOP.call(_session.Session.reset, target, containers)


class InteractiveSession(Session):
    """TF1's ``tf.InteractiveSession()``: a Session that makes itself the default at once,
    for shells and notebooks (``t.eval()`` without a ``with`` block)."""

    def __init__(self, target="", graph=None, config=None, cluster=None):
        super().__init__(target, graph=graph, config=config, cluster=cluster)
        _graph.push_default_session(self)

    def close(self):
        _graph.remove_default_session(self)
        super().close()
