"""The bare server's read of a request frame just over its first 64 KiB read: streamed through
the decoder (``body.read_frame``, before) against read whole and decoded in one pass
(``bare_io.read_whole`` + ``decode_repeated``, the frame's template learned), in one process.

The frame is the PS MLP step's worker RunGraph (a 256 x 64 float32 feed and 256 int32 labels,
checksums on, its step and request ids changing). Each read: the frame's bytes written to a Unix socket
pair, the first 64 KiB taken as the call's first read (``conn.pending``), then the form reads
the rest and decodes. Blocks of ``--reads`` reads alternate between the forms; per block the
median read (wall) and the CPU a read (``time.process_time``); the summary gives the medians
over the blocks and whole / streamed (lower is better).

Run: ``.venv/bin/python bench/bench_read_whole.py [--blocks 10] [--reads 500]``.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import numpy as np
import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from transports.http import bare_io  # noqa: E402
from transports.http.body import read_frame  # noqa: E402
from transports.messages import RunGraph, TensorEntry  # noqa: E402
from transports.wire import Decoder, Limits, decode_repeated, encode  # noqa: E402

LIMITS = Limits()


def _frame(step):
    rng = np.random.default_rng(0)
    feeds = [TensorEntry("x", rng.random((256, 64), dtype=np.float32)),
             TensorEntry("y", rng.integers(0, 10, 256).astype(np.int32))]
    # (ids as a master's: unique in the header, so the decoder proves the frame's template)
    message = RunGraph("g", (1 << 40) + step, feeds, ["loss"], request_id=(1 << 20) + step)
    return b"".join(bytes(b) for b in encode(message, LIMITS, checksums=True))


async def _block(form, reads, ours, theirs, conn, step):
    times, limiter = [], trio.CapacityLimiter(1)
    frames = [_frame(step + 1 + i) for i in range(reads)]
    cpu = time.process_time()
    for data in frames:
        step += 1
        theirs.sendall(data)
        start = time.perf_counter()
        conn.pending = await ours.recv(bare_io.RECV)
        if form == "whole":
            view = await bare_io.read_whole(conn, len(data), 20)
            message = decode_repeated(view, LIMITS)
            if message is None:  # (as the server: the decoder, once, then the template)
                decoder = Decoder(LIMITS)
                decoder.receive_data(view)
                decoder.receive_data(b"")
                message = decoder.next_event()
        else:
            message = await read_frame(bare_io.RequestBody(conn, len(data), 20), LIMITS,
                                       limiter, lambda n: None)
        times.append(time.perf_counter() - start)
        assert message is not None and message.step_id == (1 << 40) + step
    return statistics.median(times) * 1e6, (time.process_time() - cpu) / reads * 1e6, step


async def main(blocks, reads):
    ours, theirs = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs = socket.socket(fileno=theirs.detach())
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    conn = bare_io.ServerConnection(trio.SocketStream(ours), trio.current_time())
    runs, step = {"streamed": [], "whole": []}, 0
    for form in ("streamed", "whole"):  # warm-up: templates learned, code warm
        step = (await _block(form, 50, ours, theirs, conn, step))[2]
    for block in range(blocks):
        for form in (("streamed", "whole") if block % 2 == 0 else ("whole", "streamed")):
            wall, cpu, step = await _block(form, reads, ours, theirs, conn, step)
            runs[form].append((wall, cpu))
            print(f"{form:<9} read {wall:6.1f} us, CPU {cpu:6.1f} us a read "
                  f"(its write included), load {open('/proc/loadavg').read().split()[0]}",
                  flush=True)
    for column, name in enumerate(("read (wall)", "CPU a read")):
        base = statistics.median(r[column] for r in runs["streamed"])
        this = statistics.median(r[column] for r in runs["whole"])
        wins = sum(w[column] < s[column] for w, s in zip(runs["whole"], runs["streamed"]))
        print(f"{name:<12} streamed {base:6.1f} us  whole {this:6.1f} us  ratio "
              f"{this / base:5.3f}  whole lower in {wins} of {blocks} blocks")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--reads", type=int, default=500)
    args = parser.parse_args()
    trio.run(main, args.blocks, args.reads)
