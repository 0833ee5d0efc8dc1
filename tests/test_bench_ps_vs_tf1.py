"""bench_vs_tf1's PS MLP target on the interleaved series against TF1 (bench_ps_tf1_rounds):
the verdict's key, the TF1 child's line protocol and its replies' reads under their deadline,
and a series that ends, fails or is cancelled leaving no process of its child's session. The child here speaks the real protocol
(``serve_commands``) without TensorFlow: its step does nothing."""
import contextlib
import io
import json
import os
import signal
import sys
import time

import pytest

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "bench"))
bench_vs_tf1 = pytest.importorskip("bench_vs_tf1")
ps_tf1 = pytest.importorskip("bench_ps_tf1_rounds")
trivial_vs_ray = pytest.importorskip("bench_trivial_vs_ray")


def _round(sequential_mlp=2.5, interleaved=0.6):
    return ({"trivial_ms": 0.2, "trivial_over_ray_il": 1.2, "mlp_ms": sequential_mlp,
             "pull_mib_s": 5000.0, "ps_mlp_over_tf1_il": interleaved},
            {"trivial_ms": 0.8, "mlp_ms": 3.0, "pull_mib_s": 1000.0})


def test_the_ps_mlp_target_reads_the_interleaved_ratio_not_the_sequential_one():
    # The sequential ratio 2.5 / 3.0 = 0.83 is printed, not judged; the interleaved one is.
    verdicts = {name: (value, met) for name, value, _, met in
                bench_vs_tf1.target_verdicts([_round(), _round(interleaved=0.65)])}
    assert verdicts["ps_mlp_over_tf1_il"] == (pytest.approx(0.65), True)
    assert not any(name.startswith("mlp_ms") for name in verdicts)
    worst = bench_vs_tf1.target_verdicts([_round(sequential_mlp=1.0, interleaved=0.7001)])
    assert [(v, met) for name, v, _, met in worst if name == "ps_mlp_over_tf1_il"] == [
        (pytest.approx(0.7001), False)]


def test_a_round_without_the_interleaved_series_leaves_the_ps_mlp_target_unjudged():
    ours, theirs = _round()
    del ours["ps_mlp_over_tf1_il"]  # its TF1 child failed: the series printed why
    names = [v[0] for v in bench_vs_tf1.target_verdicts([_round(), (ours, theirs)])]
    assert "ps_mlp_over_tf1_il" not in names and "trivial_over_ray_il" in names


def test_the_tf1_child_parses_its_commands():
    assert ps_tf1.parse_command("run 30 5\n") == ("run", (30, 5))
    assert ps_tf1.parse_command("run 1 0") == ("run", (1, 0))
    assert ps_tf1.parse_command("quit\n") == ("quit", ())


@pytest.mark.parametrize("line", ["", "\n", "run", "run 30", "run 0 5", "run 30 -1",
                                  "run thirty 5", "run 30 5 1", "30", "quit now", "RUN 30 5",
                                  "chunk 30 5", "idle 0.5"])
def test_a_bad_command_line_is_refused_naming_it(line):
    with pytest.raises(ValueError, match="TF1 child: bad command") as info:
        ps_tf1.parse_command(line)
    assert repr(line.strip()) in str(info.value)


def test_the_child_loop_answers_a_bad_line_with_an_error_and_goes_on():
    steps = []
    stdin = io.StringIO("run 3 2\nrun three 2\n\nrun 1 0\nquit\nrun 5 0\n")
    stdout = io.StringIO()
    ps_tf1.serve_commands(stdin, stdout, lambda: steps.append(1))
    replies = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [sorted(r) for r in replies] == [["times"], ["error"], ["error"], ["times"]]
    assert len(replies[0]["times"]) == 3 and len(replies[3]["times"]) == 1
    assert "'run three 2'" in replies[1]["error"]
    assert len(steps) == 3 + 2 + 1  # untimed and timed steps; nothing after "quit"
    assert trivial_vs_ray.parse_reply(json.dumps(replies[0]), "run 3 2",
                                      "TF1 child")["times"] == replies[0]["times"]
    with pytest.raises(RuntimeError, match="TF1 child: 'run three 2' failed: TF1 child: bad"):
        trivial_vs_ray.parse_reply(json.dumps(replies[1]), "run three 2", "TF1 child")


# A TF1 child without TensorFlow: the real command loop over a step that does nothing, and a
# second process in its session (a stand-in for the TF1 servers) that it ends on "quit" only.
_CHILD = r"""
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import bench_ps_tf1_rounds as r
server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(json.dumps({"ready": True, "servers": [server.pid]}), flush=True)
r.serve_commands(sys.stdin, sys.stdout, lambda: None)
server.kill()
server.wait()
"""


def _fake_child(monkeypatch, started, log=None):
    bench = os.path.dirname(ps_tf1.__file__)

    def start(tf_python):
        child = trivial_vs_ray.ChildSession([sys.executable, "-c", _CHILD, bench],
                                            who="TF1 child")
        started.append(child)
        if log is not None:  # each command the series sends, in order with our steps
            ask = child.ask
            child.ask = lambda command, *args: (log.append(command), ask(command, *args))[1]
        return child

    monkeypatch.setattr(ps_tf1, "start_tf_child", start)


class _Af:
    """Stands in for asyncflow: a session whose steps count, and cancel ``scope`` at the
    ``cancel_at``-th one."""

    def __init__(self, scope=None, cancel_at=None, log=None):
        self.scope, self.cancel_at, self.steps, self.log = scope, cancel_at, 0, log

    @contextlib.asynccontextmanager
    async def Session(self, graph, cluster):  # noqa: N802 (asyncflow's name)
        yield self

    async def run(self, fetch, feed=None):
        import trio
        self.steps += 1
        if self.log is not None:
            self.log.append("ours")
        if self.steps == self.cancel_at:
            self.scope.cancel()
        await trio.lowlevel.checkpoint()


_MLP = ("graph", "x", "y", "loss", "train", "init")


def _reap(started):
    for child in started:
        for pid in trivial_vs_ray._session_pids(child.proc.pid):
            os.kill(pid, signal.SIGKILL)


def test_a_series_alternates_chunks_and_ends_its_childs_session(monkeypatch):
    import trio
    started, detail, log = [], {}, []
    af = _Af(log=log)
    _fake_child(monkeypatch, started, log)
    try:
        out = trio.run(ps_tf1.mlp_interleaved, af, None, "unused", _MLP, 3, 4, 2, detail)
        assert trivial_vs_ray._session_pids(started[0].proc.pid) == []
    finally:
        _reap(started)
    # init and one step, then strict turns, ours first: 2 + 4 of ours, then TF1's "run 4 2"
    assert log == ["ours"] * 2 + (["ours"] * (2 + 4) + ["run 4 2"]) * 3
    assert len(detail["ours"]) == len(detail["tf1"]) == 3
    assert [len(c) for c in detail["ours_times"] + detail["tf1_times"]] == [4] * 6
    assert set(out) == {"mlp_il_ms", "tf1_mlp_il_ms", "ps_mlp_over_tf1_il", "il_aa_ours_mlp",
                        "il_aa_tf1_mlp", "il_tf1_idle_cpu", "il_ours_idle_cpu",
                        "tf1_left_killed"}
    assert out["ps_mlp_over_tf1_il"] == pytest.approx(out["mlp_il_ms"] / out["tf1_mlp_il_ms"])
    assert out["tf1_left_killed"] == 0 and out["il_tf1_idle_cpu"] >= 0


def test_a_cancelled_series_leaves_no_process_of_its_childs_session(monkeypatch):
    import trio
    started = []
    _fake_child(monkeypatch, started)

    async def series():
        with trio.CancelScope() as scope:
            await ps_tf1.mlp_interleaved(_Af(scope, cancel_at=5), None, "unused", _MLP, 3, 4, 2)
        return scope.cancelled_caught

    try:
        assert trio.run(series)
        assert started and trivial_vs_ray._session_pids(started[0].proc.pid) == []
    finally:
        _reap(started)


def test_a_child_that_fails_mid_series_is_reported_and_its_session_ended(monkeypatch):
    import trio
    started = []
    _fake_child(monkeypatch, started)
    real_interleaved = ps_tf1.interleaved

    async def failing(step, child, *args):  # the child and its "server" die before TF1's turn
        pids = trivial_vs_ray._session_pids(child.proc.pid)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        child.proc.wait()
        return await real_interleaved(step, child, *args)

    monkeypatch.setattr(ps_tf1, "interleaved", failing)
    try:
        with pytest.raises(RuntimeError, match=r"TF1 child: no reply to 'run 4 2' \(it ended\)"):
            trio.run(ps_tf1.mlp_interleaved, _Af(), None, "unused", _MLP, 3, 4, 2)
        assert trivial_vs_ray._session_pids(started[0].proc.pid) == []
    finally:
        _reap(started)


# A child that writes half a reply and then says nothing more (a process stalled mid-write, or
# one of its servers holding the pipe open): the read must still end at its deadline, not when
# the child does.
_HALF_LINE_CHILD = r"""
import select, sys
sys.stdout.write('{"ready": ')
sys.stdout.flush()
select.select([sys.stdin], [], [], 60)  # until its stdin ends (the session's close) or 60 s
"""


def test_a_reply_cut_off_mid_line_is_reported_at_the_deadline_not_when_the_child_ends():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"TF1 child: no reply to 'start' within 0.5 s"):
        trivial_vs_ray.ChildSession([sys.executable, "-c", _HALF_LINE_CHILD], 0.5,
                                    who="TF1 child")
    assert time.monotonic() - start < 30  # (it read on until the child's end, 60 s later)


# Two replies in one write: each ``ask`` gets its own, the second not lost in a buffer.
_TWO_LINES_CHILD = r"""
import json, sys
sys.stdout.write(json.dumps({"ready": True}) + "\n" + json.dumps({"times": [0.5]}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    if line.split() == ["quit"]:
        break
"""


def test_two_replies_that_arrive_together_are_each_read():
    child = trivial_vs_ray.ChildSession([sys.executable, "-c", _TWO_LINES_CHILD], 10.0,
                                        who="TF1 child")
    try:
        assert child.ready == {"ready": True}
        assert child.ask("run 1 0", 2.0) == {"times": [0.5]}
    finally:
        assert child.close(deadline_s=5.0) == 0
    assert trivial_vs_ray._session_pids(child.proc.pid) == []
