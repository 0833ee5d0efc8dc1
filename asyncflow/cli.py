"""The ``asyncflow`` command line.

``asyncflow worker --cluster FILE_OR_JSON --job NAME --task N [--host H] [--port P]`` serves
one task of a cluster until interrupted (``ASYNCFLOW_CONFIG`` may stand in for ``--cluster``,
``--job`` and ``--task``; ``ASYNCFLOW_TOKEN`` sets the shared secret). Once serving it prints
``asyncflow worker /job:NAME/task:N listening on HOST:PORT`` on stdout.

Without ``--cluster`` the worker resolves its cluster and task from the environment
(``ASYNCFLOW_CONFIG``, else ``TF_CONFIG``), or with ``--resolver tf_config|slurm|kubernetes``
(``asyncflow.distribute.cluster_resolver``). ``--bind HOST`` is the listen address; the
address peers dial is the one the cluster spec advertises. A worker started with a token exits
(status 0) when the chief sends Shutdown: ``asyncflow shutdown --job ps``.
``asyncflow status`` shows every task of a running cluster (``cluster/status_cli.py``).

``asyncflow checkpoint verify PATH...`` reads every tensor of a checkpoint (a prefix, a file, a
sharded checkpoint's index, or a directory's listed checkpoints) and compares it with its
stored CRC32C, without a graph: one line per file, exit status 1 if one is corrupt or missing.

``asyncflow`` with no command prints the help on stdout and exits 0 (as pip and kubectl do);
a usage error (an unknown command or option) exits 2, as argparse does.

Exit status: 0 when stopped by SIGTERM, 130 (128 + SIGINT, as shells report it) when stopped
with Ctrl-C, 1 when it cannot listen (one line naming the address), 2 for bad arguments.
A stopped worker exits within ``STOP_DEADLINE_S`` of the signal (or of the chief's Shutdown,
with status 0) whatever it was doing: a kernel that cannot be interrupted (a long matmul on a
thread), cleanup that waits on a silent peer, or an event loop blocked writing a log line to
a pipe nobody reads are cut off then (``os._exit`` with the same status); a second signal
exits at once.
File ops of the graphs it runs are confined to ``--data-dir`` (default: ``ASYNCFLOW_DATA_DIR``,
else the directory it was started in); see docs/security.md.
"""
from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import sys
import threading
import time

DATA_DIR_ENV = "ASYNCFLOW_DATA_DIR"
# Seconds from SIGTERM/SIGINT or Shutdown to the worker's exit at the latest (the orderly stop
# takes well under 0.5 s; the rest is slack for a loaded machine before the cleanup is cut off).
STOP_DEADLINE_S = 2.0

WORKER_EPILOG = """\
examples:
  asyncflow worker --cluster cluster.json --job ps --task 0
  asyncflow worker --cluster '{"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}' \\
      --job worker --task 0
  asyncflow worker --cluster cluster.json --job worker --task 1 --host 0.0.0.0 --cpus 2
  ASYNCFLOW_CONFIG='{"cluster": {"worker": ["127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}}' \\
      asyncflow worker
  asyncflow worker --resolver slurm --jobs '{"ps": 1, "worker": 2}' --bind 0.0.0.0
  asyncflow worker --cluster cluster.json --job ps --task 0 --data-dir /srv/checkpoints

environment:
  ASYNCFLOW_CONFIG  TF_CONFIG-shaped JSON that stands in for --cluster, --job and --task
  TF_CONFIG         read when ASYNCFLOW_CONFIG is not set (Kubeflow's TFJob, Ray Train set it)
  ASYNCFLOW_DATA_DIR  stands in for --data-dir (e.g. the checkpoint volume every task mounts)
  ASYNCFLOW_TOKEN   shared secret: when set, every request must carry it as a bearer token
                    (sessions and the other workers send the same variable)

The status page is at http://HOST:PORT/status on the same port (log in with the token).

Once serving, the worker prints "asyncflow worker /job:JOB/task:N listening on HOST:PORT".
Ctrl-C stops it, and so does `asyncflow shutdown` when the worker has a token.
See docs/distributed.md and docs/deploy.md.
"""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="asyncflow", description="asyncflow dataflow runtime",
        epilog="Run 'asyncflow worker --help' for a worker's options, examples and environment.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", title="commands")
    worker = commands.add_parser(
        "worker", help="serve one task of a cluster",
        description="Serve one task of a cluster (the worker service) until interrupted.",
        epilog=WORKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    worker.add_argument("--cluster", help="cluster spec: a JSON string or a JSON file")
    worker.add_argument("--job", help="this task's job name")
    worker.add_argument("--task", type=int, help="this task's index in its job")
    worker.add_argument("--host", default=None, help="same as --bind")
    _add_resolver_options(worker)
    worker.add_argument("--bind", default=None, metavar="HOST",
                        help="listen address (default: the advertised host when it is a "
                             "loopback address, else 0.0.0.0)")
    worker.add_argument("--port", type=int, default=None,
                        help="port to bind (default: the cluster's; 0 picks a free one)")
    worker.add_argument("--cpus", type=int, default=1, help="logical CPU devices")
    worker.add_argument("--data-dir", default=None,
                        help="directory that Save, Restore and readers may touch (default: "
                             "ASYNCFLOW_DATA_DIR, else the current directory); paths outside "
                             "it are refused")
    worker.add_argument("--graph-lease-s", type=float, default=600.0,
                        help="seconds a registered graph lives without being used (default 600)")
    worker.add_argument("--status-trace-every", type=int, default=8, metavar="N",
                        help="while someone watches the status page, trace 1 step in N for "
                             "its timeline (default 8; 0: never)")
    worker.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    _add_token_options(worker)
    worker.set_defaults(command_parser=worker)
    shutdown = commands.add_parser(
        "shutdown", help="tell tasks of a cluster to exit (the job is done); needs the "
        "workers' ASYNCFLOW_TOKEN",
        description="Tell tasks of a cluster to stop serving (the job is done). Only workers "
                    "started with a token accept it, and the request must carry the same "
                    "token (ASYNCFLOW_TOKEN, --token or --token-file).",
        epilog=SHUTDOWN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    shutdown.add_argument("--cluster", help="cluster spec: a JSON string or a JSON file")
    _add_resolver_options(shutdown)
    shutdown.add_argument("--job", action="append", dest="jobs_to_stop", metavar="JOB",
                          help="a job to stop (repeatable; default: every job)")
    _add_token_options(shutdown)
    shutdown.set_defaults(command_parser=shutdown)
    _add_checkpoint_command(commands)
    from asyncflow.cluster import status_cli
    status = status_cli.add_parser(commands, _add_resolver_options)
    _add_token_options(status)
    status.set_defaults(command_parser=status)
    return parser


SHUTDOWN_EPILOG = """\
examples:
  asyncflow shutdown --cluster cluster.json
  asyncflow shutdown --cluster cluster.json --job ps --token-file token.txt

Prints each task's state ("stopping", or why it did not answer); exits 1 if one failed.
"""


def _add_token_options(command):
    group = command.add_mutually_exclusive_group()
    group.add_argument("--token", default=None,
                       help="shared secret of the cluster (default: ASYNCFLOW_TOKEN); visible "
                            "to other users in the process list, prefer --token-file")
    group.add_argument("--token-file", default=None, metavar="PATH",
                       help="read the shared secret from this file (surrounding whitespace "
                            "is stripped)")


def token_of(args):
    """The token the options name (--token, --token-file), else None (ASYNCFLOW_TOKEN then).

    Raises:
        ValueError: the token file cannot be read.
    """
    if getattr(args, "token", None):
        return args.token
    path = getattr(args, "token_file", None)
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise ValueError(f"--token-file {path}: {exc.strerror or exc}") from None
    return None


def _add_checkpoint_command(commands):
    checkpoint = commands.add_parser(
        "checkpoint", help="check checkpoint files without a graph",
        description="Tools for checkpoint files that need no graph.")
    actions = checkpoint.add_subparsers(dest="checkpoint_command", title="actions")
    verify = actions.add_parser(
        "verify", help="read every tensor and compare it with its stored CRC32C",
        description="Read every tensor of a checkpoint and compare its bytes with the CRC32C "
                    "stored beside it. Exit status 0 if every file checks out, 1 if one is "
                    "corrupt or missing; files written before checksums existed are "
                    "reported UNCHECKED and do not fail it.")
    verify.add_argument("paths", nargs="+", metavar="PATH",
                        help="a checkpoint prefix, a .safetensors file, a sharded "
                             "checkpoint's index, or a directory (every checkpoint its "
                             "'checkpoint' state file lists)")


def run_checkpoint(args, parser):
    """``asyncflow checkpoint verify PATH...``; returns the exit status."""
    if args.checkpoint_command != "verify":
        parser.parse_args(["checkpoint", "--help"])
        return 2
    from asyncflow.train import checkpoint_verify
    return checkpoint_verify.main(args.paths, sys.stdout)


RESOLVER_CHOICES = ("auto", "tf_config", "slurm", "kubernetes")


def _add_resolver_options(command):
    command.add_argument("--resolver", choices=RESOLVER_CHOICES, default=None,
                         help="where the cluster comes from without --cluster (default auto: "
                              "ASYNCFLOW_CONFIG, else TF_CONFIG)")
    command.add_argument("--jobs", default=None, metavar="JSON",
                         help='job sizes for --resolver slurm or kubernetes, such as '
                              '\'{"ps": 1, "worker": 2}\'')
    command.add_argument("--port-base", type=int, default=8888,
                         help="first port on each host for --resolver slurm (default 8888)")


def make_resolver(args):
    """The cluster resolver the options name (``auto``: ASYNCFLOW_CONFIG, else TF_CONFIG)."""
    import json
    import os

    from asyncflow.distribute import cluster_resolver as resolvers
    from asyncflow.cluster.spec import CONFIG_ENV
    name = args.resolver or "auto"
    jobs = None
    if args.jobs:
        try:
            jobs = json.loads(args.jobs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--jobs is not valid JSON: {exc}") from None
    if name == "slurm":
        return resolvers.SlurmClusterResolver(jobs=jobs, port_base=args.port_base)
    if name == "kubernetes":
        return resolvers.KubernetesClusterResolver(jobs=jobs)
    if name == "auto" and not os.environ.get(CONFIG_ENV) and not os.environ.get(
            resolvers.TF_CONFIG_ENV):
        raise ValueError(f"give --cluster, set {CONFIG_ENV} or {resolvers.TF_CONFIG_ENV}, or "
                         "name a --resolver (slurm, kubernetes)")
    variable = CONFIG_ENV if os.environ.get(CONFIG_ENV) else resolvers.TF_CONFIG_ENV
    return resolvers.TFConfigClusterResolver(variable=variable)


def _resolved_worker_spec(args):
    """``(cluster, job, task, default bind host)`` from a resolver."""
    from asyncflow.distribute.cluster_resolver import bind_host_for
    resolver = make_resolver(args)
    cluster = resolver.cluster_spec()
    job = args.job if args.job is not None else resolver.task_type
    task = args.task if args.task is not None else resolver.task_id
    if job is None or task is None:
        raise ValueError(f"{type(resolver).__name__} names no task for this process: give "
                         "--job and --task")
    if job not in cluster.jobs or task not in cluster.task_indices(job):
        raise ValueError(f"task {job}:{task} is not in the cluster {cluster.as_dict()} (an "
                         "evaluator is a client of the cluster, not a worker: run the "
                         "evaluation program itself)")
    return cluster, job, task, bind_host_for(cluster.task_address(job, task))


def _worker_spec(args):
    """``(cluster, job, task, default bind host)`` of this worker."""
    from asyncflow.distribute.cluster_resolver import bind_host_for
    from asyncflow.cluster.spec import ClusterSpec
    if not args.cluster:
        return _resolved_worker_spec(args)
    if args.resolver is not None:
        raise ValueError("give --cluster or --resolver, not both")
    cluster = ClusterSpec.from_json(args.cluster)
    job, task = args.job, args.task
    if job is None or task is None:  # the task may come from ASYNCFLOW_CONFIG / TF_CONFIG
        try:
            resolver = make_resolver(args)
        except ValueError:
            resolver = None
        job = job if job is not None or resolver is None else resolver.task_type
        task = task if task is not None or resolver is None else resolver.task_id
    if job is None or task is None:
        raise ValueError("give --job and --task (or a \"task\" in ASYNCFLOW_CONFIG)")
    return cluster, job, task, bind_host_for(cluster.task_address(job, task))


def run_worker(args):
    """Serve one task until interrupted; returns the exit status."""
    import trio

    from asyncflow import aio
    from asyncflow.cluster.server import Server
    from asyncflow.exec.options import SessionConfig
    flush_logs = _log_off_the_loop(args.log_level.upper())
    try:
        cluster, job, task, default_bind = _worker_spec(args)
        server = Server(cluster, job, task, host=args.bind or args.host or default_bind,
                        port=args.port, token=token_of(args),
                        config=SessionConfig(device_count={"CPU": args.cpus}),
                        data_dir=args.data_dir or os.environ.get(DATA_DIR_ENV) or None,
                        graph_lease_s=args.graph_lease_s,
                        status_trace_every=args.status_trace_every)
    except (ValueError, TypeError, RuntimeError) as exc:
        print(f"asyncflow worker: {exc}", file=sys.stderr)
        return 2
    from transports.allocation import keep_freed_memory
    from transports.http.guard import rate_limit_logs
    rate_limit_logs("asyncflow.worker")
    keep_freed_memory()  # received tensors reuse freed pages (transports/allocation.py)

    stopped_by = []  # the signal that stopped the server

    deadline = _StopDeadline(STOP_DEADLINE_S)

    async def serve():
        # SIGINT too: received here, Ctrl-C stops the server as SIGTERM does, through
        # cancellation, instead of a KeyboardInterrupt raised wherever the loop's thread is
        # (between a connection's handler coroutine being made and its task being scheduled,
        # it left the coroutine never awaited and a RuntimeWarning on stderr).
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals, deadline:
            async with server:
                print(f"asyncflow worker /job:{job}/task:{task} listening on {server.address}",
                      flush=True)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope,
                                       stopped_by)
                    await server.join()
                    deadline.arm()  # Shutdown stops the worker as SIGTERM does, as promptly
                    print(f"asyncflow worker /job:{job}/task:{task} stopped: Shutdown "
                          "received", flush=True)
                    nursery.cancel_scope.cancel()

    try:
        aio.run_trio(serve)
    except BaseException as exc:  # noqa: BLE001 -- sorted out below, re-raised if unknown
        deadline.outlast_trio()
        flush_logs()
        return _exit_status(exc, f"{server.host}:{server.port}")
    deadline.outlast_trio()
    flush_logs()
    if stopped_by == [signal.SIGINT]:
        return _exit_status(KeyboardInterrupt(), f"{server.host}:{server.port}")
    return 0


async def _stop_on_signal(signals, cancel_scope, stopped_by):
    """Cancel ``cancel_scope`` at the first signal ``signals`` receives, noted in
    ``stopped_by`` (SIGTERM: a clean exit; SIGINT: Ctrl-C, exit status 130)."""
    async for signum in signals:
        stopped_by.append(signum)
        cancel_scope.cancel()
        return


LOG_QUEUE_LINES = 10000  # log records waiting for stderr; more are dropped, not waited for
LOG_FLUSH_S = 0.5  # at exit, the wait for the waiting records to be written


def _log_off_the_loop(level):
    """Log to stderr from a thread of its own: a write to a pipe nobody reads blocks that
    thread, never the event loop (records past ``LOG_QUEUE_LINES`` are dropped). Returns a
    function that waits up to ``LOG_FLUSH_S`` for the waiting records to be written."""
    import logging
    import logging.handlers
    import queue

    class DropWhenFull(logging.handlers.QueueHandler):
        def enqueue(self, record):
            try:
                self.queue.put_nowait(record)
            except queue.Full:
                pass

    records = queue.Queue(maxsize=LOG_QUEUE_LINES)
    stream = logging.StreamHandler()
    stream.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.setLevel(level)
    root.addHandler(DropWhenFull(records))
    listener = logging.handlers.QueueListener(records, stream)  # a daemon thread
    listener.start()

    def flush():
        deadline = time.monotonic() + LOG_FLUSH_S
        while records.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
    return flush


class _StopDeadline:
    """Bound the time from SIGTERM/SIGINT (or ``arm()``: Shutdown) to the process's exit,
    whatever the loop does.

    Wraps the signal handlers trio installed: the wrapper runs on the main thread even while
    the event loop is blocked in a system call (a write to a full stderr pipe is interrupted,
    the handler runs, the write resumes) and arms a daemon thread that ends the process with
    ``os._exit`` ``deadline_s`` later unless it has exited by then. The orderly stop (trio's
    handler, the cancellation, the shielded cleanup) goes on meanwhile; after ``serve``
    (``outlast_trio``) the wrappers stay, so interpreter shutdown waiting on a kernel thread
    is cut off too.
    """

    def __init__(self, deadline_s):
        self.deadline_s = deadline_s
        self._armed = threading.Event()
        self._signum = None

    def __enter__(self):
        self._wrap_handlers()
        threading.Thread(target=self._watch, name="asyncflow-stop-deadline",
                         daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        # trio restores the handlers it replaced next; what stays armed keeps its deadline.
        return None

    def outlast_trio(self):
        """Wrap again the handlers trio put back as ``serve`` ended: a signal during the rest
        of the exit (the logs' flush, the interpreter's) exits as one during the stop does."""
        self._wrap_handlers()

    def _wrap_handlers(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._wrap(signal.getsignal(signum)))

    def arm(self):
        """Start the deadline without a signal (the chief's Shutdown): exit status 0."""
        self._armed.set()

    def _wrap(self, handler):
        def on_signal(signum, frame):
            if self._armed.is_set():  # a second signal (or one after Shutdown): at once
                os._exit(_signal_status(signum if self._signum is None else self._signum))
            self._signum = signum
            self._armed.set()
            if callable(handler):
                handler(signum, frame)
        return on_signal

    def _watch(self):
        self._armed.wait()
        # Still alive at the deadline: cut the cleanup off with the status the signal means.
        time.sleep(self.deadline_s)
        _say_nonblocking(f"asyncflow worker: stopped; cleanup cut off after {self.deadline_s:g} s"
                         " (a kernel or a peer did not finish)\n")
        os._exit(_signal_status(self._signum))


def _signal_status(signum):
    return 130 if signum == signal.SIGINT else 0


def _say_nonblocking(text):
    """Write ``text`` to stderr only if that cannot block (a full pipe nobody reads)."""
    try:
        _, writable, _ = select.select([], [2], [], 0)
        if writable:
            os.write(2, text.encode()[:512])  # at most PIPE_BUF: all or nothing, no wait
    except OSError:
        pass


def _exit_status(exc, address):
    """The exit status for what stopped the worker, with one line on stderr (no traceback)."""
    leaves = _leaves(exc)
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        print("asyncflow worker: interrupted, stopped", file=sys.stderr)
        return 130
    for leaf in leaves:
        if isinstance(leaf, OSError):
            reason = leaf.strerror or str(leaf)
            if leaf.errno == errno.EADDRINUSE:
                reason = "the port is already in use (another worker?)"
            print(f"asyncflow worker: cannot listen on {address}: {reason}", file=sys.stderr)
            return 1
    raise exc


def _leaves(exc):
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def run_shutdown(args):
    """Send Shutdown to the named jobs' tasks; returns the exit status."""
    from asyncflow import aio, errors
    from asyncflow.cluster.spec import ClusterSpec
    from asyncflow.cluster.server import shutdown_cluster
    try:
        cluster = (ClusterSpec.from_json(args.cluster) if args.cluster
                   else make_resolver(args).cluster_spec())
        result = aio.run_trio(shutdown_cluster, cluster, args.jobs_to_stop, token_of(args))
    except (ValueError, TypeError, RuntimeError, errors.OpError) as exc:
        print(f"asyncflow shutdown: {exc}", file=sys.stderr)
        return 1
    for task, state in result.items():
        print(f"{task}: {state}")
    return 0


def run_status(args):
    """Print the cluster's status (``asyncflow/cluster/status_cli.py``); returns the exit status."""
    from asyncflow.cluster import status_cli
    from asyncflow.cluster.spec import ClusterSpec
    try:
        cluster = (ClusterSpec.from_json(args.cluster) if args.cluster
                   else make_resolver(args).cluster_spec())
        token = token_of(args)
    except (ValueError, TypeError) as exc:
        print(f"asyncflow status: {exc}", file=sys.stderr)
        return 2
    return status_cli.run(args, cluster, token)


def main(argv=None):
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # a misspelt option: the command's own usage, not the top-level one
        (getattr(args, "command_parser", None) or parser).error(
            f"unrecognized arguments: {' '.join(extras)}")
    if args.version:
        from asyncflow import __version__
        print(f"asyncflow {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "worker":
        try:
            return run_worker(args)
        except KeyboardInterrupt:  # Ctrl-C while starting (imports, before trio runs)
            print("asyncflow worker: interrupted, stopped", file=sys.stderr)
            return 130
    if args.command == "shutdown":
        return run_shutdown(args)
    if args.command == "checkpoint":
        return run_checkpoint(args, parser)
    if args.command == "status":
        return run_status(args)
    parser.print_help(sys.stderr)
    return 2
