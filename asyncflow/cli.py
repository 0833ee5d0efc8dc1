"""The ``asyncflow`` command line.

``asyncflow worker --cluster FILE_OR_JSON --job NAME --task N [--host H] [--port P]`` serves
one task of a cluster until interrupted (``ASYNCFLOW_CONFIG`` may stand in for ``--cluster``,
``--job`` and ``--task``; ``ASYNCFLOW_TOKEN`` sets the shared secret). Once serving it prints
``asyncflow worker /job:NAME/task:N listening on HOST:PORT`` on stdout.

Exit status: 0 when stopped by SIGTERM, 130 (128 + SIGINT, as shells report it) when stopped
with Ctrl-C, 1 when it cannot listen (one line naming the address), 2 for bad arguments.
File ops of the graphs it runs are confined to ``--data-dir`` (default: the directory it was
started in); see docs/security.md.
"""
from __future__ import annotations

import argparse
import errno
import signal
import sys


def build_parser():
    parser = argparse.ArgumentParser(prog="asyncflow", description="asyncflow dataflow runtime")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    worker = commands.add_parser("worker", help="serve one task of a cluster")
    worker.add_argument("--cluster", help="cluster spec: a JSON string or a JSON file")
    worker.add_argument("--job", help="this task's job name")
    worker.add_argument("--task", type=int, help="this task's index in its job")
    worker.add_argument("--host", default=None, help="interface to bind (default 127.0.0.1)")
    worker.add_argument("--port", type=int, default=None,
                        help="port to bind (default: the cluster's; 0 picks a free one)")
    worker.add_argument("--cpus", type=int, default=1, help="logical CPU devices")
    worker.add_argument("--data-dir", default=None,
                        help="directory that Save, Restore and readers may touch (default: the "
                             "current directory); paths outside it are refused")
    worker.add_argument("--graph-lease-s", type=float, default=600.0,
                        help="seconds a registered graph lives without being used (default 600)")
    worker.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def _worker_spec(args):
    from asyncflow.distributed.cluster import CONFIG_ENV, ClusterSpec, config_from_env
    from_env = config_from_env()
    if args.cluster:
        cluster = ClusterSpec.from_json(args.cluster)
    elif from_env is not None:
        cluster = from_env[0]
    else:
        raise ValueError(f"give --cluster or set {CONFIG_ENV}")
    job = args.job if args.job is not None else (from_env[1] if from_env else None)
    task = args.task if args.task is not None else (from_env[2] if from_env else None)
    if job is None or task is None:
        raise ValueError(f"give --job and --task (or a \"task\" in {CONFIG_ENV})")
    return cluster, job, task


def run_worker(args):
    """Serve one task until interrupted; returns the exit status."""
    import logging

    import trio

    from asyncflow.distributed.server import Server
    from asyncflow.runtime.options import SessionConfig
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cluster, job, task = _worker_spec(args)
        server = Server(cluster, job, task, host=args.host, port=args.port,
                        config=SessionConfig(device_count={"CPU": args.cpus}),
                        data_dir=args.data_dir, graph_lease_s=args.graph_lease_s)
    except (ValueError, TypeError) as exc:
        print(f"asyncflow worker: {exc}", file=sys.stderr)
        return 2
    from transports.http import rate_limit_logs
    rate_limit_logs("asyncflow.worker")

    async def serve():
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with server:
                print(f"asyncflow worker /job:{job}/task:{task} listening on {server.address}",
                      flush=True)
                async for _ in signals:
                    return

    try:
        trio.run(serve)
    except BaseException as exc:  # noqa: BLE001 -- sorted out below, re-raised if unknown
        return _exit_status(exc, f"{server.host}:{server.port}")
    return 0


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


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version or args.command is None:
        from asyncflow import __version__
        print(f"asyncflow {__version__}")
        return 0
    if args.command == "worker":
        try:
            return run_worker(args)
        except KeyboardInterrupt:  # Ctrl-C while starting (imports, before trio runs)
            print("asyncflow worker: interrupted, stopped", file=sys.stderr)
            return 130
    parser.print_help(sys.stderr)
    return 2
