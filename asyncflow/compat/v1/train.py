"""``tf.train`` of ``asyncflow.compat.v1``: ``af.train`` with TF1's synchronous calls.

Everything of ``af.train`` is here; the names whose TF1 form blocks (Saver's save/restore,
queue runners and the Coordinator's join, MonitoredTrainingSession, Server) are synchronous
wrappers that run the async forms on the background loop (``compat/background_loop.py``).
"""
from __future__ import annotations

import trio

from asyncflow import session as _session_module
from asyncflow import train as _train
from asyncflow.compat.background_loop import LOOP
from asyncflow.compat.v1.session import (
    _LOCAL_SERVERS, Session, cluster_of_target, refuse_inside_event_loop,
)
from asyncflow.cluster import ClusterSpec  # noqa: F401  (tf.train.ClusterSpec)
from asyncflow.cluster import server as _server
from asyncflow.graph import GraphKeys
from asyncflow.graph.default_session import get_default_session
from asyncflow.train import *  # noqa: F401,F403  (the rest of tf.train, unchanged)
from asyncflow.train import monitored_session as _monitored_session


def _async_session(sess, what):
    """The ``af.Session`` behind a synchronous session (or the default session)."""
    sess = sess if sess is not None else get_default_session()
    if sess is None:
        raise ValueError(f"{what} needs a session: pass sess=, or run it inside "
                         "`with tf.Session() as sess:`")
    if isinstance(sess, MonitoredTrainingSession):
        return sess._session.session
    if not isinstance(sess, Session):
        raise TypeError(f"{what} of asyncflow.compat.v1 takes a tf.Session (synchronous); "
                        f"got {type(sess).__name__}: with an af.Session use af.train's "
                        "async form and await it")
    return sess.async_session


def _is_async_use(sess):
    """An ``af.Session`` (not a synchronous one) used from trio code: the async form applies."""
    return isinstance(sess, _session_module.Session) and trio.lowlevel.in_trio_run()


class Saver(_train.Saver):
    """TF1's ``tf.train.Saver`` with synchronous ``save`` and ``restore``."""

    def save(self, sess, save_path, global_step=None, latest_filename=None,
             meta_graph_suffix="meta", write_meta_graph=True, write_state=True,
             strip_default_attrs=False):
        """Write a checkpoint; returns its path (see ``af.train.Saver.save``).

        Given an ``af.Session`` inside trio (a MonitoredTrainingSession's hooks on the loop,
        async code), it is the async form: the caller awaits what it returns.
        """
        if _is_async_use(sess):
            return super().save(sess, save_path, global_step, latest_filename,
                                meta_graph_suffix, write_meta_graph, write_state)
        refuse_inside_event_loop("Saver.save")
        return LOOP.call(super().save, _async_session(sess, "Saver.save"), save_path,
                         global_step, latest_filename, meta_graph_suffix, write_meta_graph,
                         write_state)

    def restore(self, sess, save_path):
        """Restore the variables from a checkpoint (see ``af.train.Saver.restore``); the
        async form for an ``af.Session`` inside trio, as ``save``."""
        if _is_async_use(sess):
            return super().restore(sess, save_path)
        refuse_inside_event_loop("Saver.restore")
        return LOOP.call(super().restore, _async_session(sess, "Saver.restore"), save_path)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """TF1's ``tf.train.latest_checkpoint``: the latest complete checkpoint's prefix, or None.

    Inside ``with tf.Session(target) as sess:`` on a cluster it is read where the graph's
    Saver writes: on the worker that runs its Save op, relative to that worker's data
    directory (see ``af.train.Saver.latest_checkpoint``); elsewhere from local files.
    """
    sess = get_default_session()
    savers = [] if sess is None else [
        s for s in sess.graph.get_collection(GraphKeys.SAVERS) if isinstance(s, _train.Saver)]
    if isinstance(sess, Session) and savers and savers[0]._on_cluster(sess.async_session):
        refuse_inside_event_loop("latest_checkpoint")
        return LOOP.call(savers[0].latest_checkpoint, sess.async_session, checkpoint_dir,
                         latest_filename)
    return _train.latest_checkpoint(checkpoint_dir, latest_filename)


def import_meta_graph(meta_graph_or_file, clear_devices=False, import_scope=None, **kwargs):
    """``af.train.import_meta_graph`` whose Saver saves and restores synchronously."""
    saver = _train.import_meta_graph(meta_graph_or_file, clear_devices=clear_devices,
                                     import_scope=import_scope)
    if saver is not None:
        saver.__class__ = Saver  # same state; only the two methods' calling form differs
    return saver


class Coordinator(_train.Coordinator):
    """TF1's ``tf.train.Coordinator`` for threads of a synchronous program.

    Its stop event lives on the background loop (queue runners wait for it there), so
    ``request_stop`` from a program thread is handed to the loop; ``join`` blocks.
    """

    def request_stop(self, ex=None):
        if LOOP.running and not LOOP.in_loop_thread():
            LOOP.call(self._request_stop_on_loop, ex)
        else:
            super().request_stop(ex)

    async def _request_stop_on_loop(self, ex):
        _train.Coordinator.request_stop(self, ex)

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Wait until every runner has ended, then raise the first error of one (once)."""
        refuse_inside_event_loop("Coordinator.join")
        if LOOP.running:
            LOOP.call(_train.Coordinator.join, self, threads, stop_grace_period_secs,
                      ignore_live_threads)
        else:
            self.raise_requested_exception()

    def wait_for_stop(self, timeout=None):
        if self.should_stop():
            return True
        return LOOP.call(_train.Coordinator.wait_for_stop, self, timeout)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True,
                        collection=GraphKeys.QUEUE_RUNNERS):
    """Start the graph's queue runners on the background loop; returns their "threads".

    They fill their queues while the program runs steps, until ``coord.request_stop()``
    (then ``coord.join(threads)``) or until the session closes.
    """
    refuse_inside_event_loop("start_queue_runners")
    session = _async_session(sess, "start_queue_runners")
    coord = coord if coord is not None else Coordinator()

    async def begin():
        return _train.start_queue_runners(sess=session, coord=coord, collection=collection)
    return LOOP.call(begin)


class MonitoredTrainingSession:
    """TF1's ``tf.train.MonitoredTrainingSession``, synchronous: ``with ... as sess:``,
    ``while not sess.should_stop(): sess.run(train_op)``. Arguments as
    ``af.train.MonitoredTrainingSession`` (``master`` may be ``server.target`` of this or
    another process, or ``"grpc://host:port"``); TF1's summary arguments are accepted and
    ignored. A master that cannot be reached fails after ``recovery_wait_secs`` (120 s, an
    asyncflow argument: TF1 waits forever) with ``UnavailableError`` naming its address."""

    def __init__(self, master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,
                 chief_only_hooks=None,
                 save_checkpoint_secs=_monitored_session.USE_DEFAULT,
                 save_summaries_steps=None, save_summaries_secs=None, config=None,
                 stop_grace_period_secs=120, log_step_count_steps=100, max_wait_secs=7200,
                 save_checkpoint_steps=_monitored_session.USE_DEFAULT, summary_dir=None,
                 cluster=None, graph=None, recovery_wait_secs=120.0):
        refuse_inside_event_loop("MonitoredTrainingSession")
        if master and cluster is None and cluster_of_target(master) is not None:
            master, cluster = "", cluster_of_target(master)  # a tf.train.Server of this process
        self._session = _train.MonitoredTrainingSession(
            master, is_chief, checkpoint_dir, scaffold=scaffold, hooks=hooks,
            chief_only_hooks=chief_only_hooks, save_checkpoint_secs=save_checkpoint_secs,
            save_checkpoint_steps=save_checkpoint_steps, config=config, cluster=cluster,
            graph=graph, log_step_count_steps=log_step_count_steps,
            max_wait_secs=float(max_wait_secs), recovery_wait_secs=float(recovery_wait_secs))
        self._held = None

    def __enter__(self):
        self._held = LOOP.hold(self._session)
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    @property
    def graph(self):
        return self._session.graph

    def should_stop(self):
        return self._session.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """One step through the hooks, with recovery (see ``af.train.MonitoredTrainingSession``)."""
        refuse_inside_event_loop("MonitoredTrainingSession.run")
        if self._held is None:
            raise RuntimeError("use MonitoredTrainingSession in a `with` block: "
                               "`with tf.train.MonitoredTrainingSession(...) as sess:`")
        return LOOP.call(self._session.run, fetches, feed_dict, options, run_metadata)

    def close(self):
        if self._held is not None:
            self._held.release()


class Server:
    """TF1's ``tf.train.Server(cluster, job_name, task_index)``: serves at once, on the
    background loop, until ``join()`` ends (a Shutdown request) or the program exits.

    ``server.target`` (``"grpc://host:port"``) is a session target:
    ``tf.Session(server.target)``, ``MonitoredTrainingSession(master=server.target)``.
    """

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None,
                 config=None, start=True, **kwargs):
        refuse_inside_event_loop("tf.train.Server")
        self._server = _server.Server(server_or_cluster_def, job_name,
                                      0 if task_index is None else task_index, config=config,
                                      **kwargs)
        self._held = None
        if start:
            self.start()

    def start(self):
        if self._held is None:
            self._held = LOOP.hold(self._server)
            _LOCAL_SERVERS[self.target] = self._bound_cluster()

    def _bound_cluster(self):
        """The cluster with this task at the address it bound (port 0 picks one)."""
        jobs = self._server.cluster.as_dict()
        job, index = self._server.job_name, self._server.task_index
        tasks = jobs[job]
        if isinstance(tasks, list):
            tasks = list(tasks)
        else:
            tasks = dict(tasks)
        tasks[index] = self._server.address
        jobs[job] = tasks
        return ClusterSpec(jobs)

    @property
    def target(self):
        """``"grpc://host:port"``: this server as a session target."""
        return f"grpc://{self._server.address}"

    @property
    def server(self):
        """The ``af.Server`` this runs."""
        return self._server

    def join(self):
        """Block until the server is told to shut down (Ctrl-C ends the wait)."""
        refuse_inside_event_loop("Server.join")
        LOOP.call(self._server.join)

    def stop(self):
        if self._held is not None:
            _LOCAL_SERVERS.pop(self.target, None)
            self._held.release()
            self._held = None

    @staticmethod
    def create_local_server(config=None, start=True):
        """A one-task server on a free loopback port (TF1's ``create_local_server``)."""
        return Server(ClusterSpec({"localhost": ["127.0.0.1:0"]}), "localhost", 0,
                      config=config, start=start, port=0)
