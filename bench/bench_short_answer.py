"""A short step's answer alone, in-process: the reply's frame from the fetched values and its
write, as the bare server's ``_serve_call`` makes them, in two forms alternated in one process.

* ``pieces`` (the path before the one-buffer answer): ``bare_calls.step_reply`` (the values
  written into a copy of the last reply's frame), then a ``_send`` coroutine: ``frame_size``,
  ``REPLY.pack``, ``small_pieces`` and ``write_now`` (one ``writev`` of head and frame);
* ``whole`` (``_serve_call`` now): ``bare_calls.step_answer`` (the frame after room for the
  head), ``REPLY.pack_into`` and ``write_one`` (one ``write``).

Each answer goes to a Unix socket pair whose other end is drained after every write (the same
``read`` in both forms); the fetched values are a float32 scalar (the trivial step's) or
``--elements`` float32s. Each round times ``--calls`` answers of each form, in the order
pieces, whole, whole, pieces (A/A beside A/B), and prints the per-answer microseconds; the
summary is the median over the rounds of each form and whole/pieces.

Run: ``.venv/bin/python bench/bench_short_answer.py [--rounds 15] [--calls 20000]
[--elements 0]``.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from types import SimpleNamespace

import numpy as np

from transports import checksum, wire
from transports.wire import frame_size
from transports.http import bare, bare_calls, bare_io
from transports.messages import RunGraphReply, TensorEntry

LIMITS = wire.DEFAULT_LIMITS


def _taken(values: list) -> tuple:
    """A step's ``take_step`` tuple whose last reply is of ``values``' signature (learnt)."""
    keys = [f"y{i}:0" for i in range(len(values))]
    prepared = None
    for _ in range(3):  # (the first two frames teach the templates)
        _, prepared = wire.encode_prepared(prepared, RunGraphReply(
            [TensorEntry(k, v) for k, v in zip(keys, values)]), LIMITS, defer_checksums=True)
    assert prepared is not None
    return SimpleNamespace(reply=prepared, step=SimpleNamespace(fetch_keys=keys)), (), ()


async def _send(sock, call_id: int, buffers: list) -> None:
    size = frame_size(buffers)
    head = bare.REPLY.pack(size, call_id, bare.FRAME, 0)
    pieces = bare_io.small_pieces(head, buffers)
    assert bare_io.write_now(sock, pieces) == b""


async def pieces(sock, taken: tuple, values: list, call_id: int) -> None:
    await _send(sock, call_id, bare_calls.step_reply(None, taken, values, LIMITS))


async def whole(sock, taken: tuple, values: list, call_id: int) -> None:
    frame = bare_calls.step_answer(taken, values, bare.REPLY.size)
    bare.REPLY.pack_into(frame, 0, len(frame) - bare.REPLY.size, call_id, bare.FRAME, 0)
    assert bare_io.write_one(sock, frame) == b""


def _time(form, sock, peer: int, taken: tuple, values: list, calls: int) -> float:
    read = os.read
    start = time.perf_counter_ns()
    for call_id in range(calls):
        coro = form(sock, taken, values, call_id)
        try:
            coro.send(None)
        except StopIteration:
            pass
        read(peer, 1 << 16)
    return (time.perf_counter_ns() - start) / calls / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--elements", type=int, default=0, help="0: a scalar")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    value = np.asarray(rng.standard_normal(args.elements or None), np.float32)
    values, taken = [value], _taken([value])
    a, b = socket.socketpair()
    a.setblocking(False)
    got = {"pieces": [], "whole": []}
    sent = []  # the same bytes from both forms (checksums as the process has them)
    for form in (pieces, whole):
        coro = form(a, taken, values, 7)
        try:
            coro.send(None)
        except StopIteration:
            pass
        sent.append(os.read(b.fileno(), 1 << 16))
    assert sent[0] == sent[1], "the two forms' answers differ"
    print(f"checksums {checksum.enabled()}, answer of {value.nbytes} value bytes")
    for r in range(args.rounds):
        line = []
        for form in (pieces, whole, whole, pieces):
            us = _time(form, a, b.fileno(), taken, values, args.calls)
            got[form.__name__].append(us)
            line.append(f"{form.__name__} {us:.3f}")
        print(f"round {r + 1}: " + ", ".join(line) + " us", flush=True)
    a.close()
    b.close()
    med = {k: statistics.median(v) for k, v in got.items()}
    aa = {k: statistics.median(abs(x - y) / min(x, y) for x, y in zip(v[::2], v[1::2]))
          for k, v in got.items()}
    print(f"median us an answer: pieces {med['pieces']:.3f}, whole {med['whole']:.3f}; "
          f"whole - pieces {med['whole'] - med['pieces']:+.3f} us, whole/pieces "
          f"{med['whole'] / med['pieces']:.3f}; A/A (a form's two runs a round, median "
          f"spread): pieces {aa['pieces']:.3f}, whole {aa['whole']:.3f}")


if __name__ == "__main__":
    main()
