"""The ``asyncflow`` command line.

``asyncflow worker --cluster FILE_OR_JSON --job NAME --task N [--host H] [--port P]`` serves
one task of a cluster until interrupted (``ASYNCFLOW_CONFIG`` may stand in for ``--cluster``,
``--job`` and ``--task``; ``ASYNCFLOW_TOKEN`` sets the shared secret). Once serving it prints
``asyncflow worker /job:NAME/task:N listening on HOST:PORT`` on stdout.

``asyncflow`` with no command prints the help on stdout and exits 0 (as pip and kubectl do);
a usage error (an unknown command or option) exits 2, as argparse does.
"""
from __future__ import annotations

import argparse
import sys


WORKER_EPILOG = """\
examples:
  asyncflow worker --cluster cluster.json --job ps --task 0
  asyncflow worker --cluster '{"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}' \\
      --job worker --task 0
  asyncflow worker --cluster cluster.json --job worker --task 1 --host 0.0.0.0 --cpus 2
  ASYNCFLOW_CONFIG='{"cluster": {"worker": ["127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}}' \\
      asyncflow worker

environment:
  ASYNCFLOW_CONFIG  TF_CONFIG-shaped JSON that stands in for --cluster, --job and --task
  ASYNCFLOW_TOKEN   shared secret: when set, every request must carry it as a bearer token
                    (sessions and the other workers send the same variable)

Once serving, the worker prints "asyncflow worker /job:JOB/task:N listening on HOST:PORT".
Ctrl-C stops it. See docs/distributed.md.
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
    worker.add_argument("--host", default=None, help="interface to bind (default 127.0.0.1)")
    worker.add_argument("--port", type=int, default=None,
                        help="port to bind (default: the cluster's; 0 picks a free one)")
    worker.add_argument("--cpus", type=int, default=1, help="logical CPU devices")
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
                        config=SessionConfig(device_count={"CPU": args.cpus}))
    except (ValueError, TypeError) as exc:
        print(f"asyncflow worker: {exc}", file=sys.stderr)
        return 2

    async def serve():
        async with server:
            print(f"asyncflow worker /job:{job}/task:{task} listening on {server.address}",
                  flush=True)
            await trio.sleep_forever()

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"asyncflow worker: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from asyncflow import __version__
        print(f"asyncflow {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "worker":
        return run_worker(args)
    parser.print_help(sys.stderr)
    return 2
