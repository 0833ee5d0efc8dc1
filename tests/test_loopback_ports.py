"""The tests' loopback ports (``tests/loopback_ports.py``): a port handed out is reserved for the
process that drew it, so no two servers of concurrently running tests are given one port.

Before the reservations, each draw was a random port checked free by a bind and released at
once: two draws in one process named the same port in about 1 of 4,500 three-task specs (the
``cluster`` fixture's; its second server then failed with EADDRINUSE), and another test process
(pytest-xdist, a second suite) could draw a port between its draw and the bind of the worker
process meant for it, or while a restarted worker was down.
"""
import os
import select
import subprocess
import sys
import warnings

import pytest

from loopback_ports import bindable, consecutive_ports, free_ports, lock_path, reserve, scope

_LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"),
                            reason="abstract Unix socket names are Linux's")
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


def _reserving_by(how, monkeypatch, tmp_path):
    """This process reserving as a process does where ``how`` is all it can use: "names" (the
    lock file's directory is missing), "lock file" (binding an abstract name fails: the name is
    over the kernel's 108 bytes), or both, as on Linux ("machine")."""
    if how == "machine":
        return
    ports = _fresh_state(monkeypatch)
    if how == "names":
        monkeypatch.setattr(ports, "lock_path", lambda: str(tmp_path / "missing" / "ports.lock"))
    else:
        monkeypatch.setattr(ports, "PREFIX", "x" * 200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reached = scope()
    assert reached == {"names": "machine", "lock file": "user"}[how]
    if how == "lock file" and ports.ABSTRACT:  # (on Linux the fallback says so)
        assert [w.category for w in caught] == [ports.ScopeWarning]
        assert "this user's processes only" in str(caught[0].message)


@pytest.mark.parametrize("how", [
    "machine", pytest.param("names", marks=_LINUX), "lock file"])
@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_a_port_another_process_reserved_is_skipped_until_that_process_ends(
        ending, how, monkeypatch, tmp_path):
    # The holder reserves as every process on Linux does (an abstract name and a byte of its
    # user's lock file): either one alone keeps this process out.
    _reserving_by(how, monkeypatch, tmp_path)
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


def _fresh_state(monkeypatch):
    """This module's reservation state as a new process has it: nothing held, nothing probed
    (the ports held so far stay held, by descriptors and locks this test no longer knows)."""
    import transports.loopback_ports as ports
    monkeypatch.setattr(ports, "_lock", {"fd": None, "pid": None})
    monkeypatch.setattr(ports, "_machine", {"pid": None, "ok": False, "why": "", "floor": None,
                                            "budget": 0})
    monkeypatch.setattr(ports, "_held", set())
    monkeypatch.setattr(ports, "_names", {})
    return ports


@pytest.fixture
def no_locks(monkeypatch):
    """A platform without ``fcntl`` nor abstract socket names (or a temp dir that takes no
    locks), with fresh state: reservations then hold within the process only."""
    ports = _fresh_state(monkeypatch)
    monkeypatch.setattr(ports, "fcntl", None)
    monkeypatch.setattr(ports, "ABSTRACT", False)
    assert scope() == "process"


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


@_LINUX
def test_on_linux_a_reservation_is_a_name_every_process_sees_held_out_of_selects_way():
    import transports.loopback_ports as ports
    assert scope() == "machine"
    mine = free_ports(3)
    assert all(port in ports._names for port in mine)
    if ports._soft_fd_limit() > 4096:  # (select() takes descriptors below 1024 only)
        assert min(ports._names[port] for port in mine) >= 1024


_NOBODY = 65534


def _as_nobody(parents, lock_file_only, go, out):
    """The forked child: drops to uid ``nobody``, forgets this process's holds (closing its
    copies of their names), tries to reserve ``parents``, draws five ports of its own, reports
    and holds them until ``go`` says so."""
    import transports.loopback_ports as ports
    for fd in ports._names.values():  # (left: the parent's own holds on the names)
        os.close(fd)
    ports._names.clear()
    ports._held.clear()
    if lock_file_only:  # (as where abstract names fail, or the earlier form of the module)
        warnings.simplefilter("ignore")
        ports.PREFIX = "x" * 200
    os.setgroups([])
    os.setgid(_NOBODY)
    os.setuid(_NOBODY)
    taken = sum(ports.reserve(port) for port in parents)
    theirs = ports.free_ports(5)
    os.write(out, f"{os.getuid()} {ports.scope()} {taken} {' '.join(map(str, theirs))}\n"
             .encode())
    os.read(go, 1)
    return 0


@_LINUX
@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="needs root: another user's process is a forked child that drops to "
                           "uid 65534 (nobody), which only root may do")
@pytest.mark.parametrize("child_reserves_by", ["name", "lock file only"])
def test_a_process_of_another_user_is_kept_out_by_the_names(child_reserves_by):
    # CI runs as root, a developer's own runs as themselves: the lock file is per user (a
    # shared one would be another user's to replace), so only the names keep them apart.
    mine = free_ports(5)
    go_read, go_write = os.pipe()
    out_read, out_write = os.pipe()
    child = os.fork()
    if child == 0:  # (the child: its verdict is its report and exit status, nothing else runs)
        code = 2
        try:
            os.close(go_write)
            os.close(out_read)
            code = _as_nobody(mine, child_reserves_by == "lock file only", go_read, out_write)
        finally:
            os._exit(code)
    os.close(go_read)
    os.close(out_write)
    try:
        ready, _, _ = select.select([out_read], [], [], 60)
        assert ready, "the child reported nothing in 60 s"
        uid, reach, taken, *theirs = os.read(out_read, 4096).decode().split()
        theirs = [int(port) for port in theirs]
        assert uid == str(_NOBODY) and len(theirs) == 5
        if child_reserves_by == "name":
            assert reach == "machine"
            assert taken == "0", "another user's process reserved ports this one holds"
            assert not any(reserve(port) for port in theirs)  # another user's
        else:  # (what the per-user lock file alone left: both may take one port)
            assert reach == "user"
            assert taken == "5"
        os.close(go_write)
        go_write = None
        _, status = os.waitpid(child, 0)
        child = None
        assert os.waitstatus_to_exitcode(status) == 0
        if child_reserves_by == "name":
            assert all(reserve(port) for port in theirs)  # the kernel dropped the names
    finally:
        os.close(out_read)
        if go_write is not None:
            os.close(go_write)
        if child is not None:
            os.kill(child, 9)
            os.waitpid(child, 0)


def test_where_neither_can_be_used_reservations_hold_in_the_process_and_say_so(
        monkeypatch, tmp_path):
    ports = _fresh_state(monkeypatch)
    monkeypatch.setattr(ports, "lock_path", lambda: str(tmp_path / "missing" / "ports.lock"))
    monkeypatch.setattr(ports, "PREFIX", "x" * 200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = free_ports(5)
    assert scope() == "process"
    if ports.ABSTRACT:
        assert [w.category for w in caught] == [ports.ScopeWarning]
        assert "this process only" in str(caught[0].message)
    assert not any(reserve(port) for port in drawn)
    assert not set(drawn) & set(free_ports(50))


@_LINUX
def test_past_a_quarter_of_the_descriptor_limit_ports_are_reserved_by_the_lock_file(
        monkeypatch):
    ports = _fresh_state(monkeypatch)
    monkeypatch.setattr(ports, "_soft_fd_limit", lambda: 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = free_ports(6)
    assert len(ports._names) == 4  # 16 // 4
    assert [w.category for w in caught] == [ports.ScopeWarning]
    assert not any(reserve(port) for port in drawn)


def test_a_benchmark_reserves_through_the_same_helper_without_this_tree_installed():
    # A benchmark's process may import no asyncflow at all (TensorFlow's Python: here one
    # without site-packages) or another tree's: bench/reserved_ports.py loads this tree's
    # helper by its path, and the ports it draws are kept from the tests.
    bench = os.path.join(os.path.dirname(_TESTS), "bench")
    script = (f"import sys; sys.path.insert(0, {bench!r})\n"
              "from reserved_ports import free_ports\n"
              "assert 'transports' not in sys.modules\n"
              "print(*free_ports(3), flush=True)\n"
              "sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-S", "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        held = [int(port) for port in holder.stdout.readline().split()]
        assert len(held) == 3, "the benchmark's process printed no ports"
        assert not any(reserve(port) for port in held)
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        assert all(reserve(port) for port in held)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=60)
