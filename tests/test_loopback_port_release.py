"""Reserved loopback ports are given back when their user is done with them, not held for the
process's life: a long suite (or a benchmark that starts one cluster per model) draws thousands
of ports, each reservation a descriptor, and past a quarter of the descriptor limit the names
run out and reservations quietly keep out this user's processes only."""
import os
import subprocess
import sys

import pytest

import transports.loopback_ports as ports

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def local_cluster(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(_ROOT, "demos"))
    from local_cluster import local_cluster
    return local_cluster


def test_a_demo_cluster_gives_its_ports_back_when_it_ends(local_cluster):
    # A real worker binds its TCP port while this process holds the port's reservation (an
    # abstract Unix name: another namespace), and the reservation ends with the cluster.
    with local_cluster({"worker": 1}) as spec:
        port = int(spec["worker"][0].rsplit(":", 1)[1])
        assert port in ports.reserved()
        assert not ports.bindable(port)  # the worker listens on it
    assert port not in ports.reserved()
    assert ports.reserve(port)  # free for anyone again
    ports.release(port)


_SUITE = {
    "drawn.py": "PORTS = {}\n",
    "test_a.py": '''
import pytest
from drawn import PORTS
from transports.loopback_ports import free_ports, reserved

@pytest.fixture(scope="module")
def cluster_ports():
    PORTS["module"] = free_ports(2)
    yield PORTS["module"]

@pytest.fixture
def one_port():
    PORTS["function"] = free_ports(1)
    return PORTS["function"]

def test_one(cluster_ports, one_port):
    PORTS["call"] = free_ports(3)
    assert set(cluster_ports + one_port + PORTS["call"]) <= reserved()

def test_two(cluster_ports):
    assert set(cluster_ports) <= reserved()  # the module's fixture still uses them
    assert not set(PORTS["function"] + PORTS["call"]) & reserved()
''',
    "test_b.py": '''
from drawn import PORTS
from transports.loopback_ports import reserved

def test_three():
    assert len(PORTS["module"]) == 2
    assert not set(PORTS["module"]) & reserved()
''',
}


def test_a_tests_ports_are_given_back_when_its_teardown_ends(tmp_path):
    # A suite of its own, with this suite's hooks: the ports of a test's call and of its
    # function-scoped fixture are free for the next test, the module fixture's when the
    # module ends.
    for name, text in _SUITE.items():
        (tmp_path / name).write_text(text)
    tests = os.path.dirname(os.path.abspath(__file__))
    (tmp_path / "conftest.py").write_text(
        "from port_release import pytest_fixture_setup, pytest_runtest_call, "
        "pytest_runtest_teardown  # noqa: F401\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [tests, _ROOT, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", str(tmp_path)], capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=120)
    assert "3 passed" in result.stdout, result.stdout + result.stderr


def test_the_stress_script_refuses_another_churner_user_unless_it_is_root(monkeypatch, capsys):
    # Not root, each churner's setgroups fails in the forked child: the script used to wait
    # out the churners' time and a minute more, then die on an empty queue.
    monkeypatch.syspath_prepend(os.path.join(_ROOT, "bench"))
    import stress_ports
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["stress_ports.py", "--churner-uid", "65534",
                                      "--seconds", "120", "tests/test_layers.py"])
    monkeypatch.setattr(stress_ports.multiprocessing, "get_context", None)  # (never reached)
    with pytest.raises(SystemExit) as exit_:
        stress_ports.main()
    assert exit_.value.code == 2
    assert "--churner-uid needs root" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract names are Linux's")
def test_a_child_process_started_without_closing_descriptors_does_not_keep_a_name():
    # The names' sockets are close-on-exec: a worker started with close_fds=False (and
    # outliving the test) holds none of them once it runs. (Between its fork and its exec a
    # child holds copies of every descriptor: a moment.)
    port = ports.free_ports(1)[0]
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('running', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, close_fds=False)
    try:
        assert child.stdout.readline() == "running\n"
        ports.release(port)
        assert ports.reserve(port)  # the name was free again: no copy in the child
        ports.release(port)
    finally:
        child.stdin.close()
        child.wait(timeout=60)


_LIMITED = """
import os, resource, sys, warnings
sys.path.insert(0, {root!r})
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import transports.loopback_ports as ports
mine = os.open(os.devnull, os.O_RDONLY)
if {soft} > 4096:  # someone else's descriptor exactly where the names' start
    os.dup2(mine, {soft} // 2)
    os.close(mine)
    mine = {soft} // 2
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    drawn = ports.free_ports({count})
assert len(set(drawn)) == {count}, drawn
assert os.path.samestat(os.fstat(mine), os.stat(os.devnull)), "an fd was overwritten"
fds = sorted(ports._names.values())
print(len(fds), fds[0], fds[-1], [str(w.message) for w in caught])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract names are Linux's")
@pytest.mark.parametrize("soft, count, names, low", [(256, 100, 64, 3), (8192, 20, 20, 4097)])
def test_a_low_or_a_high_descriptor_limit(soft, count, names, low):
    # 256: a quarter (64) by name, the rest by the lock file, with a warning, descriptors left
    # where they are; 8192: from half the limit up, past a descriptor already there (F_DUPFD,
    # never dup2 over it).
    hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[1]
    if hard != -1 and hard < soft:
        pytest.skip(f"hard descriptor limit {hard}")
    script = _LIMITED.format(root=_ROOT, soft=soft, count=count)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    held, first, last, *_ = result.stdout.split(maxsplit=3)
    assert int(held) == names
    assert (int(first) < 256) if soft == 256 else (int(first) >= low and int(last) < soft)
    assert ("quarter of the descriptor limit" in result.stdout) == (count > names)
