"""Hostile input against a real worker process, on every HTTP route.

A worker runs as ``asyncflow worker`` in a child process. Setup registers a graph on it (a
variable ``v`` set to 5 and ``y = x * v``) through the master, and keeps its handle. The tests
then send raw HTTP requests over plain sockets: random bytes, damaged and truncated frames,
oversized shape headers, deeply nested payloads, forbidden dtypes, replayed steps, duplicate and
foreign rendezvous keys, unknown step ids and graph handles, absurd Content-Lengths. Every
answer must be a 4xx (or, for the few requests that stay valid, a 200), never a 5xx or a dead
server. The last test checks that the worker's memory stayed bounded, that its incarnation did
not change (no crash), that its step state is bounded, and that the registered graph still runs
with the variable's value intact.

The tests share one worker, so what one test's hostile input does must not decide whether a
later test passes. Fuzzed valid frames (``_valid_frames``, damaged or not) go to a graph
registered for them alone (replay windows are per graph handle) with step and request ids
below 65,536; the runs that must succeed use the other handle and ids from 2**20 up, which
no damaged byte of a fuzzed frame can reach (msgpack keeps the smaller ids in 16 bits, and a
step id in a body must match its path). Hypothesis examples are derandomized, so every run
sends the same input: a failure here fails every time, and can be debugged.
"""
from __future__ import annotations

import socket
import struct

import msgpack
import numpy as np
import pytest
import trio
from hypothesis import given
from hypothesis import settings as _settings
from hypothesis import strategies as st

import asyncflow as af
from asyncflow.cluster.spec import ClusterSpec
from asyncflow.cluster.master import Master
from transports import wire
from transports.messages import (
    AbortStep, CleanupStep, DeregisterGraph, ErrorReply, GraphOptions, HealthReply, NodeExecStats,
    RecvTensors, RegisterGraph, Reset, RunGraph, RunGraphReply, StepStats, TensorEntry,
    WorkerStatistics,
)
from killable_workers import WorkerProcess

TASK = "/job:worker/replica:0/task:0"
OK_OR_CLIENT_ERROR = {200, 400, 401, 404, 405, 409, 413, 429}
CLIENT_ERROR = OK_OR_CLIENT_ERROR - {200}
RSS_GROWTH_LIMIT = 150 << 20
FUZZ_IDS = range(10_000, 60_000)  # fuzzed frames' step and request ids (16 bits in msgpack)
RUN_IDS = range(1 << 20, 1 << 30)  # runs that must succeed: out of one flipped byte's reach


def settings(**kwargs):
    """Hypothesis settings for this module: the same examples every run (see the docstring)."""
    return _settings(derandomize=True, database=None, **kwargs)


# -- raw HTTP ----------------------------------------------------------------------------------
def http(address, method, path, body=b"", *, content_length=None, half_close=False,
         headers=(), timeout=20.0):
    """Send one HTTP/1.1 request on a fresh connection; return ``(status or None, body)``.

    ``content_length`` may lie about the body; ``half_close`` shuts our side after sending.
    """
    host, port = address.rsplit(":", 1)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {address}", "Connection: close",
             f"Content-Type: {'application/x-asyncflow-frame'}", *headers]
    if body or content_length is not None or method == "POST":
        lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + bytes(body)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        try:
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (e.g. 413) and closed before reading everything
        raw = b""
        try:
            while chunk := sock.recv(65536):
                raw += chunk
                if _complete(raw):  # don't wait for aiohttp's lingering close
                    break
        except ConnectionResetError:
            pass
    if not raw:
        return None, b""
    head, _, rest = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def _complete(raw):
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(rest) >= int(value)
    return False


def frame(message):
    return b"".join(bytes(b) for b in wire.encode(message))


def raw_frame(header, raw=b""):
    """A frame around an arbitrary header object (msgpack), padding raw bytes to 64."""
    packed = msgpack.packb(header, use_bin_type=True)
    out = wire.MAGIC + struct.pack("<I", len(packed)) + packed
    if raw:
        out += bytes(-len(out) % 64) + raw
    return out


def decoded(body):
    try:
        return wire.decode(body)
    except wire.WireError:
        return None


def descriptor(key="x", dtype="float32", shape=(3,), nbytes=12):
    return {"key": key, "dtype": dtype, "shape": list(shape) if shape is not None else None,
            "nbytes": nbytes, "dead": False, "error": None, "strings": None}


def run_header(handle, step_id, descriptors, fetch_keys):
    return {"version": wire.FORMAT_VERSION, "kind": "run_graph",
            "payload": {"graph_handle": handle, "step_id": step_id, "fetch_keys": fetch_keys},
            "tensors": descriptors}


# -- the worker and its registered graph --------------------------------------------------------
class Target:
    """The worker process plus what setup registered on it."""

    def __init__(self, worker):
        self.worker = worker
        self.address = worker.address
        self.handle = self.feed = self.fetches = None
        self.fuzz_handle = self.fuzz_feed = self.fuzz_fetches = None  # for ``_valid_frames``
        self.incarnation = None
        self.devices = None
        self.step_ids = iter(RUN_IDS)
        self.fuzz_ids = iter(FUZZ_IDS)

    def health(self):
        status, body = http(self.address, "GET", "/v1/health")
        assert status == 200
        reply = wire.decode(body)
        assert isinstance(reply, HealthReply)
        return reply

    def run(self, x, step_id=None):
        """RunGraph on the registered handle; returns (status, decoded reply)."""
        step_id = next(self.step_ids) if step_id is None else step_id
        request = RunGraph(self.handle, step_id, [TensorEntry(self.feed, np.asarray(x, np.float32))],
                           list(self.fetches), request_id=step_id)
        status, body = http(self.address, "POST", f"/v1/steps/{step_id}/run", frame(request))
        return status, decoded(body)


async def _register(address):
    """Register ``y = x * v`` (v = 5 on the worker) through the master; keep the handle."""
    graph = af.Graph()
    with graph.as_default(), af.device(TASK):
        x = af.placeholder(af.float32, [None], name="x")
        v = af.Variable(np.float32(2.0), name="v")
        y = x * v
        set_v = v.assign(5.0)
    cluster = {"worker": [address]}
    async with af.Session(graph=graph, cluster=cluster) as sess:
        await sess.run(v.initializer)
        await sess.run(set_v)
    master = Master(ClusterSpec(cluster), af.SessionConfig())
    await master.open()
    run = master.compile(graph, (x,), (y,), ())
    await master._register(run)  # left registered on purpose: the tests must not disturb it
    (task_graph,) = run.task_graphs
    for task in master.tasks.values():
        await task.channel.aclose()
    return task_graph.handle, task_graph.options.feeds[0], task_graph.options.fetches


@pytest.fixture(scope="module")
def target():
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    try:
        state = Target(worker)
        state.handle, state.feed, state.fetches = trio.run(_register, worker.address)
        state.fuzz_handle, state.fuzz_feed, state.fuzz_fetches = trio.run(_register,
                                                                         worker.address)
        assert state.fuzz_handle != state.handle
        reply = state.health()
        state.incarnation, state.devices = reply.incarnation, list(reply.devices)
        status, reply = state.run([1.0, 2.0, 3.0])
        assert status == 200 and isinstance(reply, RunGraphReply)
        np.testing.assert_array_equal(reply.tensors[0].value, [5.0, 10.0, 15.0])
        for _ in range(20):  # warm up allocators before the memory baseline
            state.run(np.ones(1000))
        state.rss_baseline = worker.rss_bytes()
        yield state
    finally:
        worker.kill()


def _key(target, incarnation=None, src=None, name="edge"):
    return (f"{src or target.devices[0]};{incarnation or target.incarnation:x};"
            f"/job:client/replica:0/task:0/device:CPU:0;{name};0:0")


def _valid_frames(target):
    """Valid requests per route (none that would change the registered state), on the fuzz
    handle and ids: damaged, they cannot touch the state the other tests rely on."""
    step = next(target.fuzz_ids)
    next(target.fuzz_ids), next(target.fuzz_ids)  # step + 1 and + 2 are used below
    return [
        ("POST", f"/v1/steps/{step}/run", frame(RunGraph(
            target.fuzz_handle, step, [TensorEntry(target.fuzz_feed, np.ones(3, np.float32))],
            list(target.fuzz_fetches), request_id=step))),
        ("POST", f"/v1/steps/{step + 1}/recv", frame(RecvTensors(step + 1, [_key(target)]))),
        ("POST", f"/v1/steps/{step + 2}/abort", frame(AbortStep(step + 2, "CANCELLED", "x"))),
        ("POST", "/v1/graphs", frame(RegisterGraph({"node": []}, "fuzz", GraphOptions(
            peers={"/job:worker/replica:0/task:9": "127.0.0.1:1"}, batchable={"t:0": 1})))),
    ]


ROUTES = [("GET", "/v1/health"), ("GET", "/v1/devices"), ("GET", "/metrics"),
          ("POST", "/v1/graphs"), ("DELETE", "/v1/graphs/nope"), ("POST", "/v1/steps/7/run"),
          ("POST", "/v1/steps/7/recv"), ("POST", "/v1/steps/7/abort"), ("DELETE", "/v1/steps/7"),
          ("POST", "/v1/reset"), ("GET", "/v1/nothing"), ("PUT", "/v1/graphs"),
          ("POST", "/v1/steps/abc/run"), ("POST", "/v1/steps/-1/run")]


# -- fuzz ---------------------------------------------------------------------------------------
@settings(max_examples=60)
@given(route=st.sampled_from(ROUTES), body=st.binary(min_size=1, max_size=300))
def test_random_bytes_on_every_route_get_4xx(target, route, body):
    status, _ = http(target.address, *route, body)
    # /metrics is Prometheus text, not a frame route: it ignores a body.
    assert status in (OK_OR_CLIENT_ERROR if route[1] == "/metrics" else CLIENT_ERROR), \
        (route, status)


@settings(max_examples=60)
@given(data=st.data())
def test_damaged_valid_frames_get_4xx_or_stay_valid(target, data):
    method, path, body = data.draw(st.sampled_from(_valid_frames(target)))
    damage = data.draw(st.sampled_from(["truncate", "flip", "junk"]))
    if damage == "truncate":  # (empty bodies: test_empty_bodies_do_not_wedge_the_server)
        body = body[:data.draw(st.integers(1, len(body) - 1))]
    elif damage == "flip":
        index = data.draw(st.integers(0, len(body) - 1))
        body = body[:index] + bytes([body[index] ^ data.draw(st.integers(1, 255))]) + \
            body[index + 1:]
    else:
        body = body + data.draw(st.binary(min_size=1, max_size=64))
    # A recv for a valid key of a step that never runs waits; the short timeout bounds it.
    try:
        status, _ = http(target.address, method, path, body, timeout=3.0)
    except socket.timeout:
        assert path.endswith("/recv")
        return
    assert status in OK_OR_CLIENT_ERROR, (path, damage, status)


@settings(max_examples=40)
@given(shape=st.lists(st.integers(0, 2**62), min_size=1, max_size=40),
       nbytes=st.one_of(st.integers(0, 2**63 - 1), st.just(None)))
def test_oversized_shape_headers_are_refused_before_allocating(target, shape, nbytes):
    total = int(np.prod([float(s) for s in shape])) * 4
    nbytes = min(total, 2**64 - 1) if nbytes is None else nbytes
    header = run_header(target.handle, 11, [descriptor(target.feed, "float32", shape, nbytes)],
                        list(target.fetches))
    status, body = http(target.address, "POST", "/v1/steps/11/run", raw_frame(header))
    if status == 200:  # only a shape that really is tiny and matches can pass, e.g. [3]
        assert total <= 64 and nbytes == total
        return
    assert status in CLIENT_ERROR


def test_huge_declared_lengths_get_413_without_allocation(target):
    status, body = http(target.address, "POST", "/v1/steps/12/run", b"AFWF",
                        content_length=1 << 40)
    assert status == 413 and b"exceeds the limit" in body
    # A 1.5 GiB tensor within the limits, declared but never sent: the reader gives up when the
    # connection ends, and the (untouched) buffer never becomes resident.
    header = run_header(target.handle, 13, [descriptor(target.feed, "float32", [3 << 27],
                                                       3 << 29)], list(target.fetches))
    start = raw_frame(header)
    status, _ = http(target.address, "POST", "/v1/steps/13/run", start + bytes(64),
                     content_length=len(start) + (3 << 29) + 64, half_close=True)
    assert status in (None, 400)
    assert target.worker.rss_bytes() - target.rss_baseline < RSS_GROWTH_LIMIT


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deeply_nested_payloads_get_400(target, depth):
    nested = []
    for _ in range(min(depth, 1000)):
        nested = [nested]
    if depth > 1000:  # beyond msgpack's own stack: hand-made bytes, 0x91 = array of one item
        assert wire.FORMAT_VERSION == 1
        header = (b"\x84\xa7version\x01\xa4kind\xaeregister_graph\xa7tensors\x90"
                  b"\xa7payload\x82\xaesession_handle\xa1s\xa5graph" + b"\x91" * depth + b"\x90")
        body = wire.MAGIC + struct.pack("<I", len(header)) + header
    else:
        body = raw_frame({"version": wire.FORMAT_VERSION, "kind": "register_graph",
                          "payload": {"graph": {"node": nested}, "session_handle": "s"},
                          "tensors": []})
    status, text = http(target.address, "POST", "/v1/graphs", body)
    assert status == 400, text[:200]


@pytest.mark.parametrize("dtype", ["object", "O", "|O", "complex64", "<U4", "V8", "float128",
                                   "datetime64", ">f4", "int128", "", 5, None])
def test_forbidden_dtypes_get_400(target, dtype):
    header = run_header(target.handle, 14, [descriptor(target.feed, dtype, [3], 12)],
                        list(target.fetches))
    status, _ = http(target.address, "POST", "/v1/steps/14/run", raw_frame(header, bytes(12)))
    assert status == 400


def test_feed_of_a_wrong_dtype_or_shape_is_a_typed_error(target):
    for value, needle in [(np.ones(3, np.float64), "dtype"), (np.ones((2, 2), np.float32), "shape"),
                          (np.array([b"a", b"b"], dtype=object), "dtype")]:
        step = next(target.step_ids)
        request = RunGraph(target.handle, step, [TensorEntry(target.feed, value)],
                           list(target.fetches), request_id=step)
        status, body = http(target.address, "POST", f"/v1/steps/{step}/run", frame(request))
        reply = decoded(body)
        assert status == 400 and isinstance(reply, ErrorReply), body[:200]
        assert reply.code == "INVALID_ARGUMENT" and needle in reply.message


@settings(max_examples=30)
@given(cut=st.floats(0.0, 0.99))
def test_truncated_bodies_with_honest_length_then_eof(target, cut):
    (_, path, body), *_ = _valid_frames(target)
    status, _ = http(target.address, "POST", path, body[:int(len(body) * cut)],
                     content_length=len(body), half_close=True)
    assert status in (None, 400)


def test_replayed_steps_and_duplicate_or_foreign_keys_get_typed_errors(target):
    step = next(target.step_ids)
    assert target.run([1.0], step_id=step)[0] == 200
    status, reply = target.run([1.0], step_id=step)  # a replay of a finished step
    assert status == 409 and reply.code in ("ABORTED", "ALREADY_EXISTS")
    cases = [
        ([_key(target, incarnation=target.incarnation ^ 0xFF)], 409, "ABORTED"),  # old worker
        ([_key(target, src="/job:ps/replica:0/task:0/device:CPU:0")], 400, "INVALID_ARGUMENT"),
        (["not;a;key"], 400, "INVALID_ARGUMENT"),
        ([_key(target).replace(f"{target.incarnation:x}", "zz")], 400, "INVALID_ARGUMENT"),
        ([], 400, "INVALID_ARGUMENT"),
    ]
    for keys, expected_status, code in cases:
        step = next(target.step_ids)
        status, body = http(target.address, "POST", f"/v1/steps/{step}/recv",
                            frame(RecvTensors(step, keys)))
        reply = decoded(body)
        assert (status, reply.code) == (expected_status, code), (keys, body[:200])
    # The same key twice in one pull, for a step that already finished: fails fast.
    step = next(target.step_ids)
    assert target.run([1.0], step_id=step)[0] == 200
    status, body = http(target.address, "POST", f"/v1/steps/{step}/recv",
                        frame(RecvTensors(step, [_key(target), _key(target)])))
    assert status == 409 and decoded(body).code == "ABORTED"


def test_unknown_step_ids_and_graph_handles_get_typed_errors(target):
    status, reply = decoded_status(target, "POST", "/v1/steps/77/run", frame(RunGraph(
        "no/such/handle", 77, [TensorEntry(target.feed, np.ones(3, np.float32))],
        list(target.fetches))))
    assert status == 404 and reply.code == "NOT_FOUND" and "no graph with handle" in reply.message
    status, reply = decoded_status(target, "DELETE", "/v1/graphs/no%2Fsuch", b"")
    assert status == 404 and reply.code == "NOT_FOUND"
    status, reply = decoded_status(target, "DELETE", "/v1/steps/123456789", b"")
    assert status == 404 and reply.code == "NOT_FOUND"
    status, _ = decoded_status(target, "POST", "/v1/steps/78/run",
                               frame(CleanupStep(79)))  # the wrong kind for the route
    assert status == 400
    status, _ = decoded_status(target, "POST", "/v1/steps/80/abort",
                               frame(AbortStep(81, "CANCELLED", "path/body mismatch")))
    assert status == 400
    unknown_code = {"version": wire.FORMAT_VERSION, "kind": "abort_step",
                    "payload": {"step_id": 82, "code": "NO_SUCH_CODE", "message": "?"},
                    "tensors": []}
    status, reply = decoded_status(target, "POST", "/v1/steps/82/abort", raw_frame(unknown_code))
    assert status in (200, 400), reply
    # Aborting a step id nobody ran is idempotent and leaves only a bounded tombstone.
    status, _ = decoded_status(target, "POST", "/v1/steps/83/abort",
                               frame(AbortStep(83, "CANCELLED", "unknown step")))
    assert status == 200
    assert target.run([1.0], step_id=83)[0] == 409  # ... so a late RunGraph fails fast


def decoded_status(target, method, path, body):
    status, raw = http(target.address, method, path, body)
    return status, decoded(raw)


def test_bodies_on_bodiless_routes_and_wrong_methods(target):
    for method, path in [("GET", "/v1/health"), ("DELETE", "/v1/steps/5"),
                         ("DELETE", "/v1/graphs/x")]:
        status, _ = http(target.address, method, path, frame(Reset(None)))
        assert status == 400
    assert http(target.address, "PATCH", "/v1/graphs")[0] == 405
    status, _ = http(target.address, "POST", "/v1/steps/99999999999999999999999999/run",
                     frame(DeregisterGraph("x")))
    assert status in (400, 404)


# -- the server is still whole ------------------------------------------------------------------
def test_server_still_serves_with_state_intact_and_bounded_memory(target):
    health = target.health()
    assert health.incarnation == target.incarnation  # never crashed or restarted
    assert health.stats.graphs >= 1
    assert health.stats.steps_in_flight == 0
    assert health.stats.steps_held < 4096
    status, reply = target.run([1.0, 2.0, 3.0])
    assert status == 200
    np.testing.assert_array_equal(reply.tensors[0].value, [5.0, 10.0, 15.0])
    growth = target.worker.rss_bytes() - target.rss_baseline
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 2**20:.1f} MiB"


def test_empty_bodies_do_not_wedge_the_server():
    """Repeated empty POST bodies (Content-Length: 0) get 400 each, and the server stays up."""
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0).start()
    try:
        for path in ["/v1/steps/5/run", "/v1/graphs", "/v1/steps/5/recv", "/v1/steps/5/run"]:
            status, body = http(worker.address, "POST", path, b"", content_length=0, timeout=5)
            assert status == 400 and b"empty body" in body, (path, status, body)
        assert http(worker.address, "GET", "/v1/health", timeout=5)[0] == 200
    finally:
        worker.kill()


def test_token_is_required_on_every_route_when_set():
    worker = WorkerProcess({"worker": ["127.0.0.1:0"]}, "worker", 0, port=0,
                           env={"ASYNCFLOW_TOKEN": "s3cret"}).start()
    try:
        for method, path in ROUTES[:10]:
            status, _ = http(worker.address, method, path, b"")
            assert status == 401, (method, path)
            status, _ = http(worker.address, method, path, b"",
                             headers=["Authorization: Bearer wrong"])
            assert status == 401
        status, _ = http(worker.address, "GET", "/v1/health",
                         headers=["Authorization: Bearer s3cret"])
        assert status == 200
    finally:
        worker.kill()


ATHERIS_TARGET = '''
import sys
import atheris
import ml_dtypes, msgpack, numpy  # imported first: only transports gets instrumented
with atheris.instrument_imports():
    from transports import wire
    from transports.wire import Limits

SMALL = Limits(max_header_bytes=4096, max_tensor_bytes=1 << 16, max_body_bytes=1 << 17,
               max_tensors=64, max_rank=8, max_depth=16)


def one(data):
    try:
        message = wire.decode(data, SMALL)
    except wire.WireError:
        return
    wire.decode(b"".join(bytes(b) for b in wire.encode(message, SMALL)), SMALL)


atheris.Setup(sys.argv, one)
atheris.Fuzz()
'''


def test_atheris_coverage_guided_fuzz_of_the_wire_decoder(tmp_path):
    """libFuzzer (atheris, when installed) mutates valid frames of every kind; the decoder may
    only raise WireError, and whatever it accepts re-encodes and decodes again."""
    pytest.importorskip("atheris")
    import subprocess
    import sys
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = [RunGraph("g/1/ab", 5, [TensorEntry("x:0", np.arange(6, dtype=np.float32).reshape(2, 3)),
                                    TensorEntry("s:0", np.array([b"a", b"bc"], dtype=object))],
                      ["y:0"]),
             RecvTensors(5, ["a;1f;b;t;0:0", "c;2;d;u;0:0"]), AbortStep(5, "CANCELLED", "x"),
             CleanupStep(5), RegisterGraph({"node": [{"name": "a", "attr": {"i": 1}}]}, "s",
                                           GraphOptions(["x:0"], ["y:0"], {"t": "h:1"}, {"e": 1})),
             DeregisterGraph("g"), Reset(["c"]), ErrorReply("ABORTED", "no", "op", True),
             HealthReply(1, "t", ["d"], WorkerStatistics(graphs=1, max_rss_mib=2.5)),
             RunGraphReply([], StepStats([NodeExecStats("n", "Add", "d", 1, 2)]))]
    for index, message in enumerate(seeds):
        (corpus / f"seed{index}").write_bytes(frame(message))
    script = tmp_path / "fuzz_wire.py"
    script.write_text(ATHERIS_TARGET)
    result = subprocess.run([sys.executable, str(script), str(corpus), "-runs=4000",
                             "-max_total_time=30", "-timeout=10", "-rss_limit_mb=1024"],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr
