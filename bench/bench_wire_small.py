"""The codec's cost on a trivial remote step's two frames, in this process, no sockets.

A trivial step (``p * 2.0`` on one worker) sends one RunGraph (a scalar float32 feed, one
fetch key, a fresh step id and request id each step, so its header is never byte-identical
to an earlier one) and gets one RunGraphReply (a scalar float32; its header repeats step
after step). Each side encodes one and decodes the other, with checksums on (the default).
Reported: microseconds per call, the best of ``--repeat`` timings of ``--number`` calls
each (the least disturbed by other programs), for the four calls and their sum.

Usage: ``.venv/bin/python bench/bench_wire_small.py [--number 20000] [--repeat 5]``.
"""
from __future__ import annotations

import argparse
import itertools
import os
import timeit

import numpy as np

from transports import wire


def calls():
    feed = np.asarray(np.float32(1.0))
    ids = itertools.count(1 << 40)

    def request():
        return wire.RunGraph("g/1", next(ids), [wire.TensorEntry("p:0", feed)], ["mul:0"],
                             request_id=next(ids))

    def reply():
        return wire.RunGraphReply([wire.TensorEntry("mul:0", feed)])

    def decode_request():
        decoder = wire.Decoder()
        decoder.receive_data(b"".join(wire.encode(request())))
        return decoder.next_event()

    reply_bytes = b"".join(wire.encode(reply()))

    def decode_reply():
        decoder = wire.Decoder()
        decoder.receive_data(reply_bytes)
        return decoder.next_event()

    def build_and_join_request():  # what decode_request spends before decoding
        return b"".join(wire.encode(request()))

    return {"encode RunGraph": lambda: wire.encode(request()),
            "decode RunGraph": (decode_request, build_and_join_request),
            "encode RunGraphReply": lambda: wire.encode(reply()),
            "decode RunGraphReply": decode_reply}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings (the best is shown)")
    args = parser.parse_args()
    total = 0.0
    for name, call in calls().items():
        if isinstance(call, tuple):  # timed with its own encoding, which is then subtracted
            call, overhead = call
            us = (min(timeit.repeat(call, number=args.number, repeat=args.repeat))
                  - min(timeit.repeat(overhead, number=args.number, repeat=args.repeat)))
        else:
            us = min(timeit.repeat(call, number=args.number, repeat=args.repeat))
        us = us / args.number * 1e6
        total += us
        print(f"{name:<22} {us:7.2f} us")
    print(f"{'the four, a step':<22} {total:7.2f} us   (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
