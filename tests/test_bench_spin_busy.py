"""bench/bench_spin_busy.py's own process handling: the workers it signals are its own
children only, and a daemon load without a C compiler is refused with a clear error before
any cluster starts."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import bench_spin_busy  # noqa: E402

_SPEC = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}


def test_only_this_process_s_children_are_taken_for_the_cluster():
    # a child serving the spec as "ps" starts a grandchild with the same spec as "worker":
    # the grandchild (not this process's) is never taken, so never sent SIGUSR1
    spec = json.dumps(_SPEC)
    code = ("import subprocess, sys\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()', "
            f"'--cluster', {spec!r}, '--job', 'worker'], stdin=subprocess.PIPE)\n"
            "print(g.pid, flush=True)\n"
            "sys.stdin.read()\n"
            "g.stdin.close(); g.wait()\n")
    child = subprocess.Popen([sys.executable, "-c", code, "--cluster", spec, "--job", "ps"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert bench_spin_busy._parent(grandchild) == child.pid
        assert bench_spin_busy.cluster_pids(_SPEC) == {"ps": child.pid}
    finally:
        child.stdin.close()  # (the child ends its grandchild, then itself)
        assert child.wait(timeout=30) == 0


def test_a_daemon_load_without_a_compiler_is_refused_before_the_clusters(monkeypatch, capsys):
    monkeypatch.setattr(bench_spin_busy.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="no cc is on the PATH"):
        with bench_spin_busy.background("daemon:1:1000:40", "unused"):
            pass
    started = []
    import local_cluster
    monkeypatch.setattr(local_cluster, "local_cluster", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit):
        bench_spin_busy.main(["--loads", "quiet,daemon:1:1000:40"])
    assert "no cc is on the PATH" in capsys.readouterr().err and not started
