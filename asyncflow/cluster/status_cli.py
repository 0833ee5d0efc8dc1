"""``asyncflow status``: a running cluster's tasks and rates in a terminal.

It gathers the same view as the workers' status page (``cluster/status.py``'s
``gather_cluster``: every task's ``GET /v1/status``, each within ``--timeout``) and prints it:
a ``rich`` table on a terminal when rich is installed, plain text otherwise (a pipe, a log),
or with ``--json`` the view itself, one JSON document per line, for scripts. ``--watch``
prints it again every ``--interval`` seconds (``--count`` times, or until Ctrl-C).

Exit status: 0 when every task answered, 1 when a task is down (or the cluster cannot be
read), 2 for a usage error; with ``--watch``, the last gather's.
"""
from __future__ import annotations

import datetime
import json
import sys

STATUS_EPILOG = """\
examples:
  asyncflow status --cluster cluster.json
  asyncflow status --cluster cluster.json --watch --interval 5
  asyncflow status --cluster cluster.json --json | jq '.tasks[] | {task, up}'

environment:
  ASYNCFLOW_TOKEN   the workers' shared secret, sent as a bearer token (or --token,
                    --token-file)
  ASYNCFLOW_CONFIG, TF_CONFIG   stand in for --cluster

Exit status 1 when a task is down. The same view is on every worker's page:
http://HOST:PORT/status (docs/distributed.md, "Watching a cluster").
"""

COLUMNS = ("task", "address", "incarnation", "state", "heard", "steps", "steps/s", "p50",
           "p99", "in flight", "graphs", "RSS")


def add_parser(commands, add_resolver_options):
    """The ``status`` subcommand's options (``cli.build_parser`` calls it)."""
    import argparse
    status = commands.add_parser(
        "status", help="show a running cluster's tasks, rates and errors",
        description="Show every task of a cluster: up or down, incarnation, steps per second, "
                    "step latency, memory; exit 1 when a task is down.",
        epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("--cluster", help="cluster spec: a JSON string or a JSON file")
    add_resolver_options(status)
    status.add_argument("--json", action="store_true",
                        help="print the view as JSON (one document per line with --watch)")
    status.add_argument("--watch", action="store_true", help="print it again every --interval s")
    status.add_argument("--interval", type=float, default=2.0,
                        help="seconds between two gathers with --watch (default 2)")
    status.add_argument("--count", type=int, default=0,
                        help="with --watch, stop after this many gathers (default: until Ctrl-C)")
    status.add_argument("--timeout", type=float, default=3.0,
                        help="seconds each task has to answer (default 3)")
    return status


def _seconds(value):
    if value is None:
        return ""
    if value < 1e-3:
        return f"{value * 1e6:.0f} us"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def rows(view):
    """The table's rows (lists of strings, in :data:`COLUMNS` order) for a cluster view."""
    table = []
    for row in view["tasks"]:
        status = row.get("status") or {}
        minute = (status.get("rates") or {}).get("last_minute") or {}
        stats = status.get("stats") or {}
        heard = row.get("last_heartbeat")
        up = row["up"]
        table.append([
            row["task"], row["address"], row.get("incarnation") or "",
            "up" if up else "DOWN", "now" if up else (
                f"{view['time'] - heard:.0f} s ago" if heard else "never"),
            str(stats.get("steps_run", "")) if up else "",
            f"{minute.get('steps_per_s', 0):.2f}" if up else "",
            _seconds(minute.get("p50_s")), _seconds(minute.get("p99_s")),
            str(stats.get("steps_in_flight", "")) if up else "",
            str(len(status.get("graphs") or ())) if up else "",
            f"{status['rss_mib']:.0f} MiB" if status.get("rss_mib") else ""])
    return table


def _notes(view):
    """Lines under the table: why tasks are down, the last errors."""
    lines = [f"{row['task']} at {row['address']} is down: {row.get('error', '')}"
             for row in view["tasks"] if not row["up"]]
    errors = sorted((error["time"], row["task"], error) for row in view["tasks"] if row["up"]
                    for error in row["status"].get("errors") or ())
    for when, task, error in errors[-5:]:
        stamp = datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%H:%M:%S")
        op = f" op {error['op']!r}" if error.get("op") else ""
        lines.append(f"{stamp} {task} step {error['step_id']}: {error['code']}{op}: "
                     f"{error['message']}")
    return lines


def _title(view):
    down = sum(not row["up"] for row in view["tasks"])
    stamp = datetime.datetime.fromtimestamp(view["time"], datetime.timezone.utc)
    return (f"asyncflow cluster: {len(view['tasks'])} tasks, {len(view['tasks']) - down} up"
            + (f", {down} DOWN" if down else "") + f"  ({stamp:%Y-%m-%d %H:%M:%S} UTC)")


def plain_text(view):
    """The view as aligned plain text (what a pipe or a log gets)."""
    table = [list(COLUMNS)] + rows(view)
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [_title(view)]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
              for line in table]
    return "\n".join(lines + _notes(view)) + "\n"


def _print_rich(view, console):
    from rich.table import Table
    table = Table(title=_title(view), title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in (
            "steps", "steps/s", "p50", "p99", "in flight", "graphs", "RSS") else "left")
    for line in rows(view):
        style = None if line[3] == "up" else "bold red"
        table.add_row(*line, style=style)
    console.print(table)
    for note in _notes(view):
        console.print(note, style="red", highlight=False)


def _printer(as_json, watch):
    """``print(view)`` for the chosen output."""
    if as_json:
        return lambda view: print(json.dumps(view, default=str), flush=True)
    if sys.stdout.isatty():
        try:
            from rich.console import Console
        except ImportError:
            pass
        else:
            console = Console()

            def show(view):
                if watch:
                    console.clear()
                _print_rich(view, console)
            return show
    return lambda view: print(plain_text(view), flush=True)


def run(args, cluster, token=None):
    """Gather and print (repeatedly with ``--watch``); returns the exit status. ``token``: the
    workers' shared secret (None: ``ASYNCFLOW_TOKEN``)."""
    import functools

    import trio

    from asyncflow.cluster import channels
    from asyncflow.cluster.status import ClusterWatcher
    show = _printer(args.json, args.watch)
    last = [1]

    async def main():
        watcher = ClusterWatcher(cluster, functools.partial(channels.connect, token=token),
                                 timeout=args.timeout, cache_s=0.0)
        try:
            gathers = 0
            while True:
                view = await watcher.view()
                show(view)
                last[0] = 0 if all(row["up"] for row in view["tasks"]) else 1
                gathers += 1
                if not args.watch or (args.count and gathers >= args.count):
                    return
                await trio.sleep(args.interval)
        finally:
            with trio.CancelScope(shield=True):
                await watcher.aclose()

    try:
        trio.run(main)
    except KeyboardInterrupt:
        pass  # --watch ends with Ctrl-C: the last gather's status
    return last[0]
