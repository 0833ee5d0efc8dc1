"""What HTTP/1.1 framing costs per message with each candidate parser, sans-IO (no socket).

The worker protocol's messages as they cross the wire: a request (``POST /v1/steps/run`` with a
bearer token and a small frame body, ``Content-Length``), its response, and the same request
with a chunked body. Each candidate parses them from bytes into (head fields, body bytes,
end of message), as the server and the client need them:

* **httptools** (llhttp, C, callbacks): one parser per connection, fed what arrives;
* **h11** (pure Python, the trio ecosystem's, events): one ``Connection`` per connection,
  ``start_next_cycle`` after each message;
* **hand-written** (the project's own parser before it was replaced; measured only when a
  checkout still has ``transports.http_head.parse_request_head``);
* **find-only**: ``bytes.find`` of the empty line and a split of the lines, the least any
  parser can cost: the same-run baseline every candidate is reported against.

Reported: microseconds per message (best of ``--repeat`` runs of ``--n`` messages) and the
ratio to find-only (to httptools for the chunked request, which find-only cannot read).

``--tree DIR`` (repeatable) measures whole round trips instead, server and client in one
process with each checkout's ``transports`` (a child process per round, trees alternating
round by round): the worker's HTTP server (a handler that answers at once) and the trio client
on loopback, ``--calls`` each of Health, ``AbortStep`` (a POST with a small frame body) and
``RunGraph`` with a 4 KiB tensor that comes back as the reply's; the figure is process CPU
time per call (user + system: both sides' framing, robust to a loaded machine, where wall time
is mostly waiting for a core), median over ``--rounds``.

Run: ``.venv/bin/python bench/bench_http_parser.py [--n 20000]`` or
``.venv/bin/python bench/bench_http_parser.py --tree OLD_CHECKOUT --tree . [--rounds 5]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

BODY = bytes(range(256)) + bytes(44)  # a small frame: 300 bytes
REQUEST = (b"POST /v1/steps/run HTTP/1.1\r\nHost: 127.0.0.1:40123\r\nAuthorization: Bearer "
           b"0123456789abcdef\r\nContent-Type: application/x-asyncflow-frame\r\n"
           b"Content-Length: 300\r\n\r\n" + BODY)
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-asyncflow-frame\r\n"
            b"Content-Length: 300\r\n\r\n" + BODY)
CHUNKED = (b"POST /v1/steps/run HTTP/1.1\r\nHost: 127.0.0.1:40123\r\nContent-Type: "
           b"application/x-asyncflow-frame\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"64\r\n" + BODY[:100] + b"\r\nc8\r\n" + BODY[100:] + b"\r\n0\r\n\r\n")


def find_only(data: bytes, n: int, server: bool) -> None:
    for _ in range(n):
        end = data.find(b"\r\n\r\n") + 4
        lines = data[:end - 4].split(b"\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.lower()] = value.strip()
        body = data[end:end + int(headers[b"content-length"])]
        assert len(body) == 300


def hand_written(data: bytes, n: int, server: bool) -> None:
    from transports.http_head import head_end, parse_request_head, parse_response_head
    parse = parse_request_head if server else parse_response_head
    for _ in range(n):
        end = head_end(data)
        head = parse(data[:end])
        headers = head.headers if server else head[1]
        body = data[end:end + int(headers["content-length"])]
        assert len(body) == 300


def with_h11(data: bytes, n: int, server: bool) -> None:
    import h11
    conn = h11.Connection(h11.SERVER if server else h11.CLIENT)
    for _ in range(n):
        if not server:  # a client must have sent a request before it reads a response
            conn.send(h11.Request(method="POST", target="/", headers=[("Host", "x"),
                                                                      ("Content-Length", "0")]))
            conn.send(h11.EndOfMessage())
        conn.receive_data(data)
        body = []
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                body.append(event.data)
        if server:
            conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            conn.send(h11.EndOfMessage())
        conn.start_next_cycle()
        assert sum(map(len, body)) == 300


class _Protocol:
    __slots__ = ("url", "headers", "body", "done")

    def __init__(self) -> None:
        self.url, self.headers, self.body, self.done = b"", [], [], False

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def with_httptools(data: bytes, n: int, server: bool) -> None:
    import httptools
    protocol = _Protocol()
    parser = (httptools.HttpRequestParser if server else httptools.HttpResponseParser)(protocol)
    for _ in range(n):
        protocol.headers, protocol.body, protocol.done = [], [], False
        parser.feed_data(data)
        assert protocol.done and sum(map(len, protocol.body)) == 300


def round_trips(calls: int) -> dict[str, float]:
    """CPU seconds per call of the server and client together (this process's transports)."""
    import numpy as np
    import trio

    from transports import wire
    from transports.http.client import TrioHttpChannel
    from transports.http.server import open_http_server

    class Handler:
        async def health(self, request):
            return wire.HealthReply(1, "/job:w/replica:0/task:0", ["CPU:0"])

        async def abort_step(self, request):
            return None

        async def run_graph(self, request):  # the feeds come back as the fetches
            return wire.RunGraphReply(list(request.feeds))

    async def main() -> dict[str, float]:
        out = {}
        async with open_http_server(Handler(), same_host=False) as server:
            async with TrioHttpChannel(server.address, same_host=False) as channel:
                run = wire.RunGraph("g", 1, [wire.TensorEntry("x", np.ones(1024, np.float32))],
                                    ["x"])
                for name, call in (("health", lambda: channel.health()),
                                   ("abort_post", lambda: channel.abort_step(
                                       wire.AbortStep(1, "CANCELLED", "x" * 200))),
                                   ("run_graph_4k", lambda: channel.run_graph(run))):
                    for _ in range(50):
                        await call()
                    start = time.process_time()
                    for _ in range(calls):
                        await call()
                    out[name + "_cpu_us"] = (time.process_time() - start) / calls * 1e6
        return out
    return trio.run(main)


def compare_trees(trees: list[str], rounds: int, calls: int) -> None:
    results: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for index in range(rounds):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                  "--calls", str(calls)], env=env, cwd=os.path.abspath(tree),
                                 capture_output=True, text=True, timeout=600, check=True)
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            results[tree].append(figures)
            print(json.dumps({"round": index, "tree": tree, **figures}), flush=True)
    print("\nmedian [min-max] CPU per call over rounds")
    for tree, rows in results.items():
        print(tree)
        for key in rows[0]:
            values = [row[key] for row in rows]
            print(f"  {key:<18} {statistics.median(values):8.1f} "
                  f"[{min(values):.1f}-{max(values):.1f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", action="append", default=None,
                        help="a checkout whose transports to measure round trips with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(round_trips(args.calls)))
        return
    if args.tree:
        compare_trees(args.tree, args.rounds, args.calls)
        return
    candidates = {"find-only": find_only, "hand-written": hand_written, "h11": with_h11,
                  "httptools": with_httptools}
    cases = {"request": (REQUEST, True), "response": (RESPONSE, False),
             "chunked request": (CHUNKED, True)}
    print(f"{'case':<16} {'candidate':<13} {'us/msg':>8} {'x find-only':>12}")
    for case, (data, server) in cases.items():
        results = {}
        for name, fn in candidates.items():
            try:
                fn(data, 10, server)
            except (AssertionError, KeyError, ValueError) as exc:  # cannot read this case
                print(f"{case:<16} {name:<13} {'n/a':>8}  ({type(exc).__name__}: {exc})")
                continue
            except ImportError:
                continue  # a checkout without this candidate
            results[name] = min(_timed(fn, data, args.n, server) for _ in range(args.repeat))
        # find-only cannot de-chunk: there the ratios are against httptools
        base = results.get("find-only") or results["httptools"]
        for name, best in results.items():
            print(f"{case:<16} {name:<13} {best * 1e6:8.2f} {best / base:12.2f}")

def _timed(fn, data: bytes, n: int, server: bool) -> float:
    start = time.perf_counter()
    fn(data, n, server)
    return (time.perf_counter() - start) / n


if __name__ == "__main__":
    main()
