"""bench_vs_tf1's verdict over issue 34's four targets: the worst round decides, unrounded;
the Ray target on the interleaved ratio (bench_trivial_vs_ray), its chunk protocol and figures.
(The PS MLP target's interleaved series against TF1: tests/test_bench_ps_vs_tf1.py.)"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "bench"))
bench_vs_tf1 = pytest.importorskip("bench_vs_tf1")
trivial_vs_ray = pytest.importorskip("bench_trivial_vs_ray")


def _round(trivial=0.2, over_ray=1.2, mlp=2.0, pull=5000.0, tf_trivial=0.8, tf_mlp=3.2,
           tf_pull=1000.0, sequential_over_ray=2.5, mlp_over_tf1_il=0.6):
    return ({"trivial_ms": trivial, "trivial_over_ray_il": over_ray, "mlp_ms": mlp,
             "pull_mib_s": pull, "trivial_over_ray": sequential_over_ray,
             "ps_mlp_over_tf1_il": mlp_over_tf1_il},
            {"trivial_ms": tf_trivial, "mlp_ms": tf_mlp, "pull_mib_s": tf_pull})


def test_a_round_just_over_a_limit_is_not_met_though_it_prints_as_the_limit():
    verdicts = {name: (value, met) for name, value, _, met in
                bench_vs_tf1.target_verdicts([_round(), _round(mlp_over_tf1_il=2.21 / 3.14)])}
    value, met = verdicts["ps_mlp_over_tf1_il"]
    assert f"{value:.2f}" == "0.70" and value > 0.7 and not met
    assert verdicts["trivial_ms / TF1"] == (pytest.approx(0.25), True)
    assert verdicts["trivial_over_ray_il"] == (pytest.approx(1.2), True)
    assert verdicts["pull_mib_s / TF1"] == (pytest.approx(5.0), True)


def test_the_worst_round_decides_each_target():
    rounds = [_round(), _round(over_ray=1.6), _round(pull=2900.0)]
    met = {name: ok for name, _, _, ok in bench_vs_tf1.target_verdicts(rounds)}
    assert met == {"trivial_ms / TF1": True, "trivial_over_ray_il": False,
                   "ps_mlp_over_tf1_il": True, "pull_mib_s / TF1": False}


def test_the_ray_target_reads_the_interleaved_ratio_not_the_sequential_one():
    verdicts = bench_vs_tf1.target_verdicts([_round(over_ray=1.4, sequential_over_ray=2.9)])
    assert [(name, value, met) for name, value, _, met in verdicts
            if "ray" in name] == [("trivial_over_ray_il", pytest.approx(1.4), True)]
    # A round without the interleaved series (its Ray child failed) leaves the target unjudged.
    ours, theirs = _round()
    del ours["trivial_over_ray_il"]
    assert "trivial_over_ray_il" not in [v[0] for v in bench_vs_tf1.target_verdicts(
        [_round(), (ours, theirs)])]


def test_without_tf_only_the_ray_target_is_judged():
    ours, _ = _round()
    del ours["ps_mlp_over_tf1_il"]  # (the interleaved series against TF1 needs TF)
    assert [name for name, *_ in bench_vs_tf1.target_verdicts([(ours, None)])] == [
        "trivial_over_ray_il"]
    assert bench_vs_tf1.target_verdicts([({"trivial_ms": 0.2}, None)]) == []


def test_the_ray_child_parses_its_commands():
    parse = trivial_vs_ray.parse_command
    assert parse("chunk 100 30\n") == ("chunk", (100, 30))
    assert parse("chunk 5 0") == ("chunk", (5, 0))
    assert parse("idle 0.5\n") == ("idle", (0.5,))
    assert parse("quit\n") == ("quit", ())


@pytest.mark.parametrize("line", ["", "\n", "chunk", "chunk 100", "chunk 0 30", "chunk 100 -1",
                                  "chunk ten 30", "chunk 100 30 7", "idle", "idle 0",
                                  "idle 11", "idle x", "quit now", "CHUNK 100 30"])
def test_a_bad_command_line_is_refused_naming_it(line):
    with pytest.raises(ValueError, match="Ray child: bad command") as info:
        trivial_vs_ray.parse_command(line)
    assert repr(line.strip()) in str(info.value)


def test_a_reply_is_parsed_or_refused_naming_the_command():
    parse = trivial_vs_ray.parse_reply
    reply = parse('{"times": [1e-4, 2e-4], "compile_s": 0.08, "teardown_s": 0.006}\n',
                  "chunk 2 0")
    assert reply["times"] == [1e-4, 2e-4]
    assert parse('{"compiled_cpu_s": 0.5}', "idle 0.5") == {"compiled_cpu_s": 0.5}
    for line, says in (("", "no reply to 'chunk 2 0' (it ended)"),
                       ("2020-01-01 ray log line\n", "is not a JSON object: '2020-01-01"),
                       ("[1, 2]\n", "is not a JSON object"),
                       ('{"error": "bad command"}\n', "'chunk 2 0' failed: bad command"),
                       ('{"times": []}\n', "has no step times"),
                       ('{"compile_s": 0.1}\n', "has no step times")):
        with pytest.raises(RuntimeError) as info:
            parse(line, "chunk 2 0")
        assert says in str(info.value)


def test_the_interleaved_figures_pool_each_sides_chunks():
    ours = [[1e-4] * 3, [3e-4] * 3, [1e-4] * 3, [3e-4] * 3]  # odd chunks 3x the even ones
    theirs = [[2e-4] * 5, [2e-4] * 5, [2e-4] * 5, [2e-4] * 5]
    out = trivial_vs_ray.summarize(ours, theirs, [0.08, 0.09, 0.07, 0.1], [0.006] * 4)
    assert out["trivial_il_ms"] == pytest.approx(0.2)  # the median of all 12 steps
    assert out["ray_trivial_il_ms"] == pytest.approx(0.2)
    assert out["trivial_over_ray_il"] == pytest.approx(1.0)
    assert out["il_aa_ours"] == pytest.approx(3.0) and out["il_aa_ray"] == pytest.approx(1.0)
    assert out["ray_compile_ms"] == pytest.approx(85.0)
    assert out["ray_teardown_ms"] == pytest.approx(6.0)
    assert out["best_chunk_ms"] == pytest.approx(0.1)
    assert out["ray_best_chunk_ms"] == pytest.approx(0.2)
    assert out["best_over_ray_best_il"] == pytest.approx(0.5)
    one = trivial_vs_ray.summarize([[1e-4]], [[2e-4], [5e-5, 5e-5, 1e-3]])
    assert one == {"trivial_il_ms": pytest.approx(0.1), "ray_trivial_il_ms": pytest.approx(0.125),
                   "trivial_over_ray_il": pytest.approx(0.8), "best_chunk_ms": pytest.approx(0.1),
                   "ray_best_chunk_ms": pytest.approx(0.05),
                   "best_over_ray_best_il": pytest.approx(2.0)}


# A child speaking the Ray child's protocol without Ray: it starts a process that outlives it
# in its session (as a Ray process that did not exit would), answers "chunk", dies on "die".
_CHILD = r"""
import json, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    if line.split() == ["quit"]:
        break
    if line.split() == ["die"]:
        sys.stderr.write("boom: the child failed\n")
        sys.exit(3)
    if line.split() == ["hang"]:
        continue
    print(json.dumps({"times": [1e-4], "compile_s": 0.0, "teardown_s": 0.0}), flush=True)
"""


def _wait_for(condition, what):
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_child_session_is_frozen_thawed_and_reaped_whole():
    child = trivial_vs_ray.ChildSession([sys.executable, "-c", _CHILD])
    try:
        assert child.ready == {"ready": True}
        assert child.ask("chunk 1 0")["times"] == [1e-4]
        pids = trivial_vs_ray._session_pids(child.proc.pid)
        assert child.proc.pid in pids and len(pids) == 2
        assert child.freeze() == 2
        assert {trivial_vs_ray._state(pid) for pid in pids} <= {"T", "t"}
        child.thaw()
        _wait_for(lambda: not {trivial_vs_ray._state(pid) for pid in pids} & {"T", "t"},
                  "a thawed process stayed stopped")
        assert child.ask("chunk 1 0")["times"] == [1e-4]
    finally:
        killed = child.close(deadline_s=0.5)
    assert killed == 1  # the process left behind, killed by its PID
    assert trivial_vs_ray._session_pids(child.proc.pid) == []


def test_a_child_that_ends_or_hangs_is_reported_with_its_stderr():
    child = trivial_vs_ray.ChildSession([sys.executable, "-c", _CHILD])
    try:
        with pytest.raises(RuntimeError, match="no reply to 'hang' within 0.2 s"):
            child.ask("hang", deadline_s=0.2)
        with pytest.raises(RuntimeError) as info:
            child.ask("die")
        assert "no reply to 'die' (it ended)" in str(info.value)
        assert "boom: the child failed" in str(info.value)
    finally:
        child.close(deadline_s=0.5)
    assert trivial_vs_ray._session_pids(child.proc.pid) == []


def test_the_kept_graph_commands_parse_and_replies_need_their_figure():
    parse = trivial_vs_ray.parse_command
    assert parse("compile\n") == ("compile", ())
    assert parse("run 100 30\n") == ("run", (100, 30))
    assert parse("teardown") == ("teardown", ())
    for line in ("run", "run 0 30", "run 100 -1", "compile now", "teardown 1"):
        with pytest.raises(ValueError, match="Ray child: bad command"):
            parse(line)
    reply = trivial_vs_ray.parse_reply
    assert reply('{"compile_s": 0.07}', "compile") == {"compile_s": 0.07}
    assert reply('{"times": [5e-5]}', "run 1 0") == {"times": [5e-5]}
    for line, command, says in (('{"times": []}', "run 1 0", "has no step times"),
                                ('{"ready": true}', "compile", "has no 'compile_s'"),
                                ('{"compile_s": "x"}', "compile", "has no 'compile_s'"),
                                ('{}', "teardown", "has no 'teardown_s'")):
        with pytest.raises(RuntimeError, match=says):
            reply(line, command)


# Answers every command of the protocol with the figures its reply needs; its second process
# (a stand-in for Ray's raylet and actor) lives in its session until the child ends it.
_PROTOCOL_CHILD = r"""
import json, subprocess, sys
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    name = line.split()[0]
    if name == "quit":
        helper.kill()
        helper.wait()
        break
    print(json.dumps({"compile": {"compile_s": 0.07}, "teardown": {"teardown_s": 0.004},
                      "idle": {"compiled_cpu_s": 0.5, "torn_down_cpu_s": 0.0,
                               "tree_cpu_s": 0.01}}.get(
        name, {"times": [5e-5], "compile_s": 0.07, "teardown_s": 0.004})), flush=True)
"""


class _Recording:
    """A ChildSession whose commands are kept in order."""

    def __init__(self, child):
        self.child, self.commands = child, []

    def ask(self, command, deadline_s=trivial_vs_ray.REPLY_DEADLINE_S):
        self.commands.append(command)
        return self.child.ask(command, deadline_s)

    def __getattr__(self, name):
        return getattr(self.child, name)


@pytest.mark.parametrize("compile_once", [True, False])
def test_the_series_compiles_once_or_per_chunk_and_stops_ray_during_ours(compile_once):
    import trio
    child = trivial_vs_ray.ChildSession([sys.executable, "-c", _PROTOCOL_CHILD])
    recording, states = _Recording(child), []

    async def step():  # ours: every process of the child's session is stopped meanwhile
        states.append({trivial_vs_ray._state(pid)
                       for pid in trivial_vs_ray._session_pids(child.proc.pid)})

    try:
        out = trio.run(trivial_vs_ray.interleaved, step, recording, 3, 2, 1, None, True,
                       compile_once)
    finally:
        assert child.close() == 0
    run = "run 2 1" if compile_once else "chunk 2 1"
    assert recording.commands == (["compile"] if compile_once else []) + [run] * 3 + (
        ["teardown"] if compile_once else []) + ["idle 0.5"]
    assert len(states) == 3 * (2 + 1) and all(s and s <= {"T", "t"} for s in states)
    assert out["ray_trivial_il_ms"] == pytest.approx(0.05) and out["ray_fast_chunks"] == 1.0
    assert out["ray_compile_ms"] == pytest.approx(70.0)
    assert out["ray_teardown_ms"] == pytest.approx(4.0)
    assert out["ray_frozen_processes"] == 2


class _CancellingAf:
    """Stands in for asyncflow: its session's third step cancels the series' caller."""

    def __init__(self, scope):
        self.scope, self.steps = scope, 0

    @contextlib.asynccontextmanager
    async def Session(self, graph, cluster):  # noqa: N802 (asyncflow's name)
        yield self

    async def run(self, fetch, feed):
        import trio
        self.steps += 1
        if self.steps == 3:
            self.scope.cancel()
        await trio.lowlevel.checkpoint()


def test_a_cancelled_series_still_ends_every_process_of_the_ray_childs_session(monkeypatch):
    import trio
    started = []

    def start(ray_python):
        started.append(trivial_vs_ray.ChildSession([sys.executable, "-c", _PROTOCOL_CHILD]))
        return started[-1]

    monkeypatch.setattr(trivial_vs_ray, "start_ray_child", start)

    async def series():
        with trio.CancelScope() as scope:
            await trivial_vs_ray.trivial_interleaved(_CancellingAf(scope), None, "unused",
                                                     (None, "p", "doubled"), 2, 2, 1)
        return scope.cancelled_caught

    try:
        assert trio.run(series)
        assert trivial_vs_ray._session_pids(started[0].proc.pid) == []
    finally:
        for pid in trivial_vs_ray._session_pids(started[0].proc.pid):
            os.kill(pid, signal.SIGKILL)


_TERMINATED = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import bench_trivial_vs_ray as t
child = t.ChildSession([sys.executable, "-c", sys.argv[2]])
with t.thaw_on_sigterm(child):
    child.freeze()
    print(json.dumps(t._session_pids(child.proc.pid)), flush=True)
    time.sleep(60)
"""


def test_a_sigterm_during_our_chunk_leaves_no_ray_process_stopped():
    bench = os.path.dirname(trivial_vs_ray.__file__)
    proc = subprocess.Popen([sys.executable, "-c", _TERMINATED, bench, _CHILD],
                            stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 2 and {trivial_vs_ray._state(pid) for pid in pids} <= {"T", "t"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM  # it still ends as a SIGTERM ends it
        _wait_for(lambda: not {trivial_vs_ray._state(pid) for pid in pids} & {"T", "t"},
                  "a Ray process stayed stopped after our SIGTERM")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
