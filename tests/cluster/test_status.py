"""The workers' live status: the recorder's bookkeeping, ``GET /v1/status``, the status pages
with their login, the cluster view and ``asyncflow status``.

Servers run in the test's trio loop on loopback ports (real HTTP, real time, deadlines);
``asyncflow status`` runs as a real process against them.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster import status as _status
from transports.http.pages import COOKIE_NAME, LoginSessions, PageGate, login_token

from cluster_processes import loopback_spec

TOKEN = "status-test-token"
TIMEOUT = af.RunOptions(timeout_in_ms=20000)


# -- bookkeeping, no server -------------------------------------------------------------------

def test_rates_bucket_steps_and_read_percentiles_from_histograms():
    rates = _status.StepRates()
    start = 1000.0 * _status.BUCKET_S
    for i in range(99):
        rates.record(start + 0.01 * i, 0.001)      # 99 steps of 1 ms
    rates.record(start + 1.0, 0.5)                 # one of 500 ms
    rates.record(start + 1.1, 0.2, failed=True)    # a failure has no latency
    rates.record(start + _status.BUCKET_S, 0.002)  # the next bucket
    series = rates.series(start + _status.BUCKET_S)
    assert [b["t"] for b in series] == [start, start + _status.BUCKET_S]
    first = series[0]
    assert first["steps_per_s"] == 100 / _status.BUCKET_S and first["failed"] == 1
    # Histogram bins are 10 per decade: a bin's upper edge is within 26% of the value.
    assert 0.001 <= first["p50_s"] < 0.00126 and 0.001 <= first["p99_s"] < 0.00126
    summary = rates.summary(start + _status.BUCKET_S, window_s=60)
    assert summary["steps"] == 101 and summary["failed"] == 1
    assert rates.summary(start + 1e6)["steps"] == 0 and rates.summary(start + 1e6)["p50_s"] is None


def test_old_buckets_fall_out_of_the_window():
    rates = _status.StepRates()
    for i in range(_status.WINDOW_BUCKETS + 10):
        rates.record(i * _status.BUCKET_S, 0.001)
    assert len(rates.series((_status.WINDOW_BUCKETS + 10) * _status.BUCKET_S)) <= \
        _status.WINDOW_BUCKETS


def test_steps_are_traced_only_while_someone_looks_and_by_step_id():
    recorder = _status.StatusRecorder(trace_every=4)
    odd_ids = [(i * 0x5851F42D4C957F2D) % (1 << 62) | 1 for i in range(4000)]  # the master's
    assert not any(map(recorder.wants_trace, odd_ids))  # nobody looked yet: nothing is traced
    recorder.viewed()
    for ids in (odd_ids, range(4000)):  # random odd ids, and ids counting up
        assert 800 < sum(map(recorder.wants_trace, ids)) < 1200
    assert recorder.wants_trace(odd_ids[0]) == _status.sampled(odd_ids[0], 4)  # every task agrees
    assert not _status.StatusRecorder(trace_every=0).wants_trace(0)


def test_the_peer_table_is_bounded_whatever_task_names_arrive(monkeypatch):
    # Peers reach the table only from accepted pulls and pushes (a push from a task outside
    # the cluster is refused: test_push_acceptance.py); past MAX_PEERS tasks, any further one
    # is counted in one row, so a stream of new names cannot grow it.
    monkeypatch.setattr(_status, "MAX_PEERS", 3)
    recorder = _status.StatusRecorder()
    for i in range(100):
        recorder.pulled(f"/job:w/replica:0/task:{i}", 10)
    recorder.pulled("/job:w/replica:0/task:1", 5)  # a task with a row keeps counting in it
    peers = recorder.snapshot()["peers"]
    assert len(peers) == 4 and peers[_status.OTHER_PEERS] == {"bytes_pulled": 970,
                                                              "pull_requests": 97}
    assert peers["/job:w/replica:0/task:1"] == {"bytes_pulled": 15, "pull_requests": 2}


def test_merge_timeline_joins_one_step_across_tasks_with_send_recv_edges():
    ps_dev, w_dev = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
    ps = {"traces": [{"step_id": 5, "nodes": [["w", "VariableV2", ps_dev, 100, 110],
                                             ["edge_0_w/_Send", "_Send", ps_dev, 110, 112]]},
                     {"step_id": 6, "nodes": [["w", "VariableV2", ps_dev, 900, 901]]}]}
    worker = {"traces": [{"step_id": 5, "nodes": [["edge_0_w/_Recv", "_Recv", w_dev, 105, 130],
                                                 ["MatMul", "MatMul", w_dev, 131, 140]]}]}
    timeline = _status.merge_timeline([ps, worker])
    assert timeline["step_id"] == "5" and timeline["tasks"] == 2  # on both tasks, not step 6
    assert timeline["devices"] == [ps_dev, w_dev]
    assert timeline["ops"][0] == [0, "w", "VariableV2", 0, 10]
    names = [op[1] for op in timeline["ops"]]
    assert timeline["edges"] == [[names.index("edge_0_w/_Send"), names.index("edge_0_w/_Recv")]]
    assert _status.merge_timeline([{"traces": []}]) is None


def test_login_gate_admits_the_bearer_token_or_a_session_and_nothing_else():
    gate = PageGate(f"Bearer {TOKEN}".encode())
    assert gate.admits({"authorization": f"Bearer {TOKEN}"})
    assert not gate.admits({}) and not gate.admits({"authorization": "Bearer nope"})
    assert gate.login(b"token=nope") is None and gate.login(b"") is None
    assert gate.login(b"token=a&token=b") is None  # ambiguous forms are refused
    cookie = gate.login(f"token={TOKEN}".encode())
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    session = cookie.split(f"{COOKIE_NAME}=", 1)[1].split(";", 1)[0]
    assert gate.admits({"cookie": f"other=1; {COOKIE_NAME}={session}"})
    assert not gate.admits({"cookie": f"{COOKIE_NAME}=forged"})
    assert PageGate(None).admits({})  # a worker without a token shows its pages to all
    assert login_token(b"\xff\xfe") is None


def test_sessions_expire_and_are_bounded():
    now = [0.0]
    sessions = LoginSessions(clock=lambda: now[0])
    first = sessions.issue().split("=", 1)[1].split(";", 1)[0]
    assert sessions.valid(f"{COOKIE_NAME}={first}")
    now[0] += 13 * 3600
    assert not sessions.valid(f"{COOKIE_NAME}={first}")
    for _ in range(1000):
        sessions.issue()
    assert len(sessions) <= 256


# -- real HTTP ---------------------------------------------------------------------------------

async def _http(port, method, path, headers=None, body=b""):
    """One request on a fresh connection: (status, headers dict, body)."""
    with trio.fail_after(20):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
                     f"Content-Length: {len(body)}"]
            lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            data = b""
            while chunk := await stream.receive_some(1 << 16):
                data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    found = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        found.setdefault(name.strip().lower(), value.strip())
    return int(status_line.split()[1]), found, payload


def _training_graph():
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:ps/task:0"):
            w = af.Variable(np.ones((4, 1), np.float32), name="w")
            queue = af.FIFOQueue(5, [af.float32], shapes=[[]], name="inbox")
            enqueue = queue.enqueue([af.constant(1.0)])
        with af.device("/job:worker/task:0"):
            x = af.placeholder(af.float32, [None, 4], name="x")
            loss = af.reduce_mean(af.square(af.matmul(x, w)), name="loss")
            train = af.train.GradientDescentOptimizer(0.01).minimize(loss)
            checked = af.check_numerics(x, "bad input", name="checked")
    return graph, w, x, train, enqueue, checked


@pytest.fixture
async def status_cluster(monkeypatch):
    """A ps and a worker with a token, serving in this trio run; yields (spec, ports)."""
    monkeypatch.setenv("ASYNCFLOW_TOKEN", TOKEN)
    spec = loopback_spec({"ps": 1, "worker": 1})
    ports = [int(a.rsplit(":", 1)[1]) for a in spec["ps"] + spec["worker"]]
    async with af.Server(spec, "ps", 0, token=TOKEN, status_trace_every=1), \
            af.Server(spec, "worker", 0, token=TOKEN, status_trace_every=1):
        yield spec, ports


async def test_status_json_and_the_cluster_view_report_steps_bytes_queues_errors(status_cluster):
    spec, (ps_port, worker_port) = status_cluster
    status, _, _ = await _http(worker_port, "GET", "/v1/status")
    assert status == 401  # the protocol's token rule
    # Look at both tasks, so that they sample the steps that follow.
    for port in (ps_port, worker_port):
        status, headers, body = await _http(port, "GET", "/v1/status",
                                            {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body)["traces"] == []
    graph, w, x, train, enqueue, checked = _training_graph()
    async with af.Session(graph=graph, cluster=spec) as sess:
        await sess.run([w.initializer], options=TIMEOUT)
        await sess.run(enqueue, options=TIMEOUT)
        for _ in range(6):
            await sess.run(train, feed_dict={x: np.ones((2, 4), np.float32)}, options=TIMEOUT)
        with pytest.raises(af.errors.InvalidArgumentError):
            await sess.run(checked, feed_dict={x: np.full((1, 4), np.nan, np.float32)},
                           options=TIMEOUT)
        status, _, body = await _http(worker_port, "GET", "/status/api/cluster",
                                      {"Authorization": f"Bearer {TOKEN}"})
    view = json.loads(body)
    rows = {row["task"]: row for row in view["tasks"]}
    ps, worker = rows["/job:ps/replica:0/task:0"], rows["/job:worker/replica:0/task:0"]
    assert ps["up"] and worker["up"] and ps["address"] == spec["ps"][0]
    assert ps["last_heartbeat"] == pytest.approx(view["time"], abs=5)
    assert worker["status"]["stats"]["steps_run"] >= 6
    assert worker["status"]["rates"]["last_minute"]["steps"] >= 6
    assert worker["status"]["rates"]["last_minute"]["p99_s"] > 0
    # The worker pulled w (4 floats) from the ps per step, the ps the gradient back.
    assert worker["status"]["peers"]["/job:ps/replica:0/task:0"]["bytes_pulled"] >= 6 * 16
    assert ps["status"]["peers"]["/job:worker/replica:0/task:0"]["bytes_pulled"] >= 6 * 16
    assert [(q["name"], q["size"], q["capacity"]) for q in ps["status"]["queues"]] == \
        [("inbox", 1, 5)]
    assert ps["status"]["graphs"] and all(g["lease_left_s"] > 0 for g in ps["status"]["graphs"])
    assert worker["status"]["rss_mib"] > 0 and worker["status"]["connections"] >= 1
    [error] = worker["status"]["errors"]
    assert error["code"] == "INVALID_ARGUMENT" and error["op"] == "checked"
    assert "bad input" in error["message"]
    timeline = view["timeline"]
    assert timeline["tasks"] == 2 and len(timeline["devices"]) == 2
    assert timeline["edges"], "a traced ps step has Send->Recv edges"
    assert "traces" not in worker["status"]  # merged into the timeline, not repeated


async def test_pages_need_the_token_or_a_login_cookie(status_cluster):
    _, (_, port) = status_cluster
    status, headers, body = await _http(port, "GET", "/status")
    assert status == 401 and b'name="token"' in body and b"/job:" not in body
    status, _, body = await _http(port, "GET", "/status/api/cluster")
    assert status == 401 and b"/job:" not in body
    status, _, _ = await _http(port, "GET", f"/status/api/cluster?token={TOKEN}")
    assert status == 401  # a token in a URL is never accepted
    status, _, body = await _http(port, "POST", "/status/login",
                                  {"Content-Type": "application/x-www-form-urlencoded"},
                                  b"token=wrong")
    assert status == 401 and b"wrong token" in body and b"Set-Cookie" not in body
    status, headers, _ = await _http(port, "POST", "/status/login",
                                     {"Content-Type": "application/x-www-form-urlencoded"},
                                     f"token={TOKEN}".encode())
    assert status == 303 and headers["location"] == "/status"
    cookie = headers["set-cookie"].split(";", 1)[0]
    status, _, body = await _http(port, "GET", "/status", {"Cookie": cookie})
    assert status == 200 and b"/status/status.js" in body
    status, _, body = await _http(port, "GET", "/status/api/cluster", {"Cookie": cookie})
    assert status == 200 and json.loads(body)["tasks"]
    # The cookie opens pages only, never the protocol's routes.
    status, _, _ = await _http(port, "GET", "/v1/health", {"Cookie": cookie})
    assert status == 401
    # Assets hold no data and load before the login.
    status, headers, body = await _http(port, "GET", "/status/status.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert "default-src 'self'" in headers["content-security-policy"]


async def test_garbage_at_the_pages_is_4xx_and_the_worker_keeps_serving(status_cluster):
    _, (_, port) = status_cluster
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert (await _http(port, "POST", "/status/login", {}, b"x" * 10_000))[0] == 413
    assert (await _http(port, "GET", "/status/nothing", bearer))[0] == 404
    assert (await _http(port, "DELETE", "/status", bearer))[0] == 405
    assert (await _http(port, "GET", "/status", bearer, b"body"))[0] == 405
    assert (await _http(port, "POST", "/status/login", {}, b"\xff\x00=&&="))[0] == 401
    status, _, body = await _http(port, "GET", "/status/api/task", bearer)
    assert status == 200 and json.loads(body)["task"] == "/job:worker/replica:0/task:0"


async def _cli(*args, env=None):
    result = await trio.run_process(
        [sys.executable, "-m", "asyncflow", "status", *args], capture_stdout=True,
        capture_stderr=True, check=False, env=env)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_status_command_prints_the_table_and_json_and_exits_1_when_a_task_is_down(
        status_cluster):
    spec, _ = status_cluster
    with trio.fail_after(60):
        code, out, err = await _cli("--cluster", json.dumps(spec))
    assert code == 0, err
    assert "2 tasks, 2 up" in out and "/job:ps/replica:0/task:0" in out and spec["ps"][0] in out
    code, out, _ = await _cli("--cluster", json.dumps(spec), "--json", "--watch",
                              "--count", "2", "--interval", "0.1")
    views = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(views) == 2 and all(row["up"] for row in views[1]["tasks"])
    down = dict(spec, worker=spec["worker"] + [loopback_spec({"w": 1})["w"][0]])
    with trio.fail_after(60):
        code, out, _ = await _cli("--cluster", json.dumps(down), "--timeout", "5")
    assert code == 1 and "1 DOWN" in out and "/job:worker/replica:0/task:1 at" in out
    code, _, err = await _cli("--cluster", "{not json")
    assert code == 2 and "asyncflow status:" in err


async def test_status_command_takes_the_token_from_its_options(status_cluster, tmp_path):
    spec, _ = status_cluster
    env = {k: v for k, v in os.environ.items() if k != "ASYNCFLOW_TOKEN"}
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with trio.fail_after(60):
        code, out, err = await _cli("--cluster", json.dumps(spec), "--token-file",
                                    str(token_file), env=env)
        assert code == 0 and "2 tasks, 2 up" in out, out + err
        code, out, _ = await _cli("--cluster", json.dumps(spec), "--token", "not-it", env=env)
    assert code == 1 and "2 DOWN" in out, out
    code, _, err = await _cli("--cluster", json.dumps(spec), "--token", "a", "--token-file",
                              str(token_file), env=env)
    assert code == 2 and "not allowed with argument" in err, err


def test_the_table_renders_as_plain_text_and_as_a_rich_table():
    from asyncflow.cluster import status_cli
    now = 1_800_000_000.0
    view = {"time": now, "tasks": [
        {"task": "/job:ps/replica:0/task:0", "address": "127.0.0.1:1", "up": True,
         "incarnation": "ab12", "last_heartbeat": now,
         "status": {"rates": {"last_minute": {"steps_per_s": 3.5, "p50_s": 0.002,
                                              "p99_s": 0.0105}},
                    "stats": {"steps_run": 10, "steps_in_flight": 1}, "graphs": [{}],
                    "rss_mib": 50.2,
                    "errors": [{"time": now, "step_id": "5", "code": "INVALID_ARGUMENT",
                                "op": "dense/mm", "message": "inner dimensions differ"}]}},
        {"task": "/job:worker/replica:0/task:0", "address": "127.0.0.1:2", "up": False,
         "error": "connection refused", "last_heartbeat": now - 12}]}
    assert status_cli.rows(view) == [
        ["/job:ps/replica:0/task:0", "127.0.0.1:1", "ab12", "up", "now", "10", "3.50",
         "2.0 ms", "10.5 ms", "1", "1", "50 MiB"],
        ["/job:worker/replica:0/task:0", "127.0.0.1:2", "", "DOWN", "12 s ago", "", "", "",
         "", "", "", ""]]
    text = status_cli.plain_text(view)
    assert text.startswith("asyncflow cluster: 2 tasks, 1 up, 1 DOWN")
    assert "is down: connection refused" in text
    assert "step 5: INVALID_ARGUMENT op 'dense/mm': inner dimensions differ" in text
    rich_console = pytest.importorskip("rich.console", reason="rich is not installed")
    import io
    out = io.StringIO()
    status_cli._print_rich(view, rich_console.Console(file=out, width=200))
    assert "127.0.0.1:2" in out.getvalue() and "DOWN" in out.getvalue()
