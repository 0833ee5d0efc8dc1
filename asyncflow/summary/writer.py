"""``af.summary.FileWriter``: event files for TensorBoard, written by a background thread.

Theory of operation:
- The constructor creates ``<logdir>/events.out.tfevents.<time>.<host>`` (with a suffix on
  a name clash) and starts one daemon thread that owns the file. Every public call
  (``add_summary``, ``add_graph``, ``add_event``, ``flush``, ``close``) only puts a work item
  on an unbounded queue and returns, so it never stalls the trio event loop, whatever the
  disk does. Encoding the graph's GraphDef also happens on the thread.
- The first record is ``Event{file_version: "brain.Event:2"}``; each later record is one
  Event framed as a TFRecord (see ``proto.py``).
- The thread flushes the file every ``flush_secs``, after ``max_queue`` records, on
  ``flush()`` and on ``close()``. ``flush()`` and ``close()`` return a ``threading.Event``
  set once the data is on disk; ``await writer.aflush()`` / ``aclose()`` wait for it from
  trio on a worker thread. A failure of the thread is raised by the next call.
"""
from __future__ import annotations

import os
import queue
import socket
import threading
import time

import numpy as np

from asyncflow.graph.graph import Graph
from asyncflow.summary import proto

_CLOSE, _FLUSH, _RECORD, _GRAPH = "close", "flush", "record", "graph"


def _summary_bytes(summary):
    """Serialized Summary bytes from what ``sess.run`` returns for a summary tensor."""
    if hasattr(summary, "SerializeToString"):
        return summary.SerializeToString()
    if isinstance(summary, np.ndarray):
        summary = summary.reshape(()).item() if summary.size == 1 else None
    if isinstance(summary, (bytes, bytearray, memoryview)):
        return bytes(summary)
    raise TypeError(f"add_summary expects serialized Summary bytes (a summary tensor's value), "
                    f"got {type(summary).__name__}")


class FileWriter:
    """Writes Summary and graph events to an event file in ``logdir`` (TF1 ``FileWriter``).

    Args:
        logdir: the directory (created if missing).
        graph: a Graph to write first, as ``add_graph`` does.
        max_queue: flush after this many records are written.
        flush_secs: flush at least this often while records arrive.
        filename_suffix: appended to the event file name.
    """

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, filename_suffix=""):
        self._logdir = str(logdir)
        os.makedirs(self._logdir, exist_ok=True)
        base = os.path.join(self._logdir, f"events.out.tfevents.{int(time.time()):010d}."
                            f"{socket.gethostname()}{filename_suffix}")
        path, counter = base, 0
        while True:
            try:
                self._file = open(path, "xb")
                break
            except FileExistsError:
                counter += 1
                path = f"{base}.{os.getpid()}.{counter}"
        self._path = path
        self._max_queue = max(1, int(max_queue))
        self._flush_secs = float(flush_secs)
        self._queue = queue.SimpleQueue()
        self._closed = False
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"FileWriter {path}", daemon=True)
        self._queue.put((_RECORD, proto.event(time.time(), file_version=proto.FILE_VERSION)))
        self._thread.start()
        if graph is not None:
            self.add_graph(graph)

    # -- public calls (never block) -------------------------------------------------------
    def get_logdir(self):
        return self._logdir

    @property
    def path(self):
        """The event file's path."""
        return self._path

    def _put(self, item):
        if self._error is not None:
            raise RuntimeError(f"FileWriter for {self._path} failed: {self._error!r}") from self._error
        if self._closed:
            raise RuntimeError(f"FileWriter for {self._path} is closed")
        self._queue.put(item)

    def add_event(self, event_bytes):
        """Queue one serialized Event."""
        self._put((_RECORD, bytes(event_bytes)))

    def add_summary(self, summary, global_step=None, walltime=None):
        """Queue a serialized Summary (the value of a summary tensor) at ``global_step``.

        Raises:
            TypeError: if ``summary`` is not serialized Summary bytes.
        """
        data = _summary_bytes(summary)
        step = 0 if global_step is None else int(global_step)
        self.add_event(proto.event(walltime or time.time(), step, summary=data))

    def add_graph(self, graph=None, global_step=None):
        """Queue the graph (a Graph, default the default graph) for TensorBoard's Graphs tab."""
        if graph is None:
            from asyncflow.graph.graph import get_default_graph
            graph = get_default_graph()
        if not isinstance(graph, Graph):
            raise TypeError(f"add_graph expects an af.Graph, got {type(graph).__name__}")
        self._put((_GRAPH, graph.get_operations(), int(global_step or 0), time.time()))

    def flush(self):
        """Ask for everything queued so far to reach the disk.

        Returns:
            A ``threading.Event`` set when it has.
        """
        done = threading.Event()
        if self._closed:
            done.set()
            return done
        self._put((_FLUSH, done))
        return done

    def close(self):
        """Flush and close the file; later calls raise. Returns a ``threading.Event``."""
        done = threading.Event()
        if self._closed:
            done.set()
            return done
        self._put((_CLOSE, done))
        self._closed = True
        return done

    def reopen(self):
        raise NotImplementedError("a closed FileWriter is not reopened; create a new one")

    async def aflush(self):
        """``flush()`` and wait (from trio, on a worker thread) until the data is on disk."""
        await self._wait(self.flush())

    async def aclose(self):
        """``close()`` and wait until the file is closed."""
        await self._wait(self.close())

    async def _wait(self, done):
        import trio
        await trio.to_thread.run_sync(done.wait, abandon_on_cancel=True)
        if self._error is not None:
            raise RuntimeError(f"FileWriter for {self._path} failed: {self._error!r}") from self._error

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close().wait()

    # -- the writer thread ------------------------------------------------------------------
    def _write(self, data):
        self._file.write(proto.tfrecord(data))

    def _run(self):
        pending, last_flush = 0, time.monotonic()
        waiters = []
        try:
            while True:
                timeout = max(0.0, last_flush + self._flush_secs - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout if pending else None)
                except queue.Empty:
                    item = (_FLUSH, None)
                kind = item[0]
                if kind == _RECORD:
                    self._write(item[1])
                    pending += 1
                elif kind == _GRAPH:
                    _, ops, step, wall = item
                    self._write(proto.event(wall, step, graph_def=proto.graph_def_proto(ops)))
                    pending += 1
                elif item[1] is not None:
                    waiters.append(item[1])
                if kind in (_FLUSH, _CLOSE) or pending >= self._max_queue:
                    self._file.flush()
                    pending, last_flush = 0, time.monotonic()
                    for waiter in waiters:
                        waiter.set()
                    waiters.clear()
                if kind == _CLOSE:
                    self._file.close()
                    return
        except BaseException as exc:  # reported by the next public call
            self._error = exc
            for waiter in waiters:
                waiter.set()
            try:
                self._file.close()
            finally:
                self._drain_waiters()

    def _drain_waiters(self):
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item[0] in (_FLUSH, _CLOSE):
                item[1].set()
