"""Stress run for the tests' loopback ports: tests run again and again while other processes
draw ports and serve on them the way concurrent test processes do, sped up.

A test that writes a port into a ClusterSpec and binds it later (a CLI worker a second or more
later, a worker restarted after a stop) loses when another process takes the port in between:
its server fails with EADDRINUSE. On a shared machine those are other suites and pytest-xdist
workers, each drawing a few ports a second; here ``--churners`` processes draw thousands
(``transports/loopback_ports.py``'s ``free_ports``, as the tests and benchmarks do), keep a
listener on each (the newest ``HOLD``) and give the oldest back, so a window of a second is hit
within a few runs. With ``--churner-uid UID`` (as root) the churners run as another user, as a
developer's runs beside CI's (root's) do.

    python bench/stress_ports.py --runs 30 --churners 2 tests/cluster/test_startup_worker.py
    python bench/stress_ports.py --runs 30 --churner-uid 65534 tests/cluster/test_startup_worker.py

prints the tests' passes and failures and how many failures were EADDRINUSE ("already in use").
Bounded: ``--seconds`` for the churners, the pytest run killed 60 s after them.
"""
from __future__ import annotations

import argparse
import codecs
import collections
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLD = 2000  # listeners each churner keeps open


def pytest_generate_tests(metafunc):
    """(As a pytest plugin, ``-p stress_ports``: every test ``STRESS_RUNS`` times.)"""
    runs = int(os.environ.get("STRESS_RUNS", "1"))
    if runs > 1:
        metafunc.fixturenames.append("_stress_run")
        metafunc.parametrize("_stress_run", range(runs), ids=lambda i: f"run{i}")


def _helper():
    """The reservation helper of this tree (``tests/loopback_ports.py`` in a tree before it
    moved to ``transports``), imported before the churners fork: one dropping to another user
    may not read this user's files."""
    sys.path.insert(0, os.path.join(_ROOT, "tests"))
    import loopback_ports
    return loopback_ports


def _churn(seconds, counts, uid):
    loopback_ports = _helper()
    release = getattr(loopback_ports, "release", getattr(loopback_ports, "_release", None))
    # (None: a tree before the reservations)
    if uid is not None:
        codecs.lookup("ascii")  # (the helper reads /proc in ascii: this user's stdlib, now)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    end = time.monotonic() + seconds
    held = collections.deque()
    draws = 0
    while time.monotonic() < end:
        (port,) = loopback_ports.free_ports(1)
        draws += 1
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()
        if len(held) > HOLD:
            old = held.popleft()
            port = old.getsockname()[1]
            old.close()
            if release is not None:
                release(port)
        time.sleep(0.0005)
    counts.put(draws)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="pytest arguments: files or node ids")
    parser.add_argument("--runs", type=int, default=30, help="times each test runs")
    parser.add_argument("--churners", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=120.0, help="the churners' time")
    parser.add_argument("--churner-uid", type=int, default=None,
                        help="the churners' user (this process must be root's)")
    args = parser.parse_args()
    if args.churner_uid is not None and os.geteuid() != 0:  # (the churners' setuid would fail)
        parser.error("--churner-uid needs root (this process's effective uid is "
                     f"{os.geteuid()})")
    helper = _helper()
    context = multiprocessing.get_context("fork")  # (the helper already imported)
    counts = context.Queue()
    churners = [context.Process(target=_churn, args=(args.seconds, counts, args.churner_uid))
                for _ in range(args.churners)]
    for churner in churners:
        churner.start()
    churned = time.monotonic() + args.seconds  # (the churners' end: pytest may finish first)
    env = dict(os.environ, STRESS_RUNS=str(args.runs),
               PYTHONPATH=os.pathsep.join([os.path.join(_ROOT, "bench"),
                                           os.environ.get("PYTHONPATH", "")]))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "stress_ports",
             *args.tests], capture_output=True, text=True, env=env, cwd=_ROOT,
            timeout=args.seconds + 60)
        output = result.stdout + result.stderr
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() + "\n(pytest killed at its time limit)"
    draws = sum(counts.get(timeout=max(churned - time.monotonic(), 0) + 60) for _ in churners)
    for churner in churners:
        churner.join(timeout=60)
    summary = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$", output, re.M)
    failed = [line for line in output.splitlines() if line.startswith("FAILED ")]
    in_use = sum(1 for block in output.split("\n____") if "already in use" in block)
    print(f"{summary[-1] if summary else output[-2000:]}")
    scope = getattr(helper, "scope", lambda: "user")()  # (the earlier form: a per-user lock)
    uid = os.getuid() if args.churner_uid is None else args.churner_uid
    print(f"failures: {len(failed)}, of them EADDRINUSE: {min(in_use, len(failed))}; "
          f"churners (uid {uid}) drew {draws} ports; reservations' reach here: {scope}")


if __name__ == "__main__":
    main()
