"""The tests' loopback ports (``tests/loopback_ports.py``): a port handed out is reserved for the
process that drew it, so no two servers of concurrently running tests are given one port.

Before the reservations, each draw was a random port checked free by a bind and released at
once: two draws in one process named the same port in about 1 of 4,500 three-task specs (the
``cluster`` fixture's; its second server then failed with EADDRINUSE), and another test process
(pytest-xdist, a second suite) could draw a port between its draw and the bind of the worker
process meant for it, or while a restarted worker was down.
"""
import os
import subprocess
import sys

import pytest

from loopback_ports import bindable, consecutive_ports, free_ports, lock_path, reserve

_TESTS = os.path.dirname(os.path.abspath(__file__))
_HOLDER = f"""
import sys
sys.path.insert(0, {_TESTS!r})
from loopback_ports import free_ports
print(*free_ports(5), flush=True)
sys.stdin.readline()  # holds them until told to go
"""


def test_ports_drawn_in_one_process_are_never_handed_out_twice():
    # 300 random draws from the ~22,000 ports below the ephemeral range: without the
    # reservations two of them would coincide in about 6 runs of 7.
    ports = [port for _ in range(100) for port in free_ports(1)]
    ports += [port for _ in range(100) for port in free_ports(2)]
    assert len(set(ports)) == len(ports) == 300
    assert all(bindable(port) for port in ports[:20])  # reserved, not bound: a server can
    assert not any(reserve(port) for port in ports)


def test_consecutive_ports_are_all_reserved_and_free():
    # (Slurm numbers its tasks' ports from a base: each of them must be free, not the first.)
    base = consecutive_ports(4)
    run = range(base, base + 4)
    assert all(bindable(port) for port in run)
    assert not any(reserve(port) for port in run)
    assert not set(run) & set(free_ports(50))


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_a_port_another_process_reserved_is_skipped_until_that_process_ends(ending):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = [int(port) for port in holder.stdout.readline().split()]
        assert len(held) == 5, "the holder printed no ports"
        assert os.path.exists(lock_path())
        assert not any(reserve(port) for port in held)  # this process may not have them
        if ending == "exit":
            holder.stdin.close()
        else:
            holder.kill()  # (SIGKILL: the kernel drops its locks all the same)
        holder.wait(timeout=60)
        assert all(reserve(port) for port in held)  # now ours
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=60)


@pytest.fixture
def no_locks(monkeypatch):
    """A platform without ``fcntl`` (or a temp dir that takes no locks), with fresh state:
    reservations then hold within the process only."""
    import loopback_ports
    monkeypatch.setattr(loopback_ports, "fcntl", None)
    monkeypatch.setattr(loopback_ports, "_lock", {"fd": None, "pid": None})
    monkeypatch.setattr(loopback_ports, "_held", set())


def test_without_locks_a_process_still_never_hands_out_a_port_twice(no_locks):
    ports = free_ports(5)
    assert not any(reserve(port) for port in ports)
    assert not set(ports) & set(free_ports(50))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("locks", ["lockf", "none"])
def test_a_forked_child_never_hands_out_its_parents_ports(locks, request):
    # lockf locks are per process: the child holds none of its parent's, and without locks
    # only the memory it inherited says which ports its parent was given.
    if locks == "none":
        request.getfixturevalue("no_locks")
    ports = free_ports(3)
    child = os.fork()
    if child == 0:  # (the child: its verdict is its exit status, nothing else runs here)
        code = 2
        try:
            code = 1 if any(reserve(port) for port in ports) else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child was handed its parent's ports"
