"""A client process that makes one cluster Session, then forks two children that each run
steps with it, one after the other (the second starts after the first has exited).

Usage: ``python forked_clients.py WORKER_ADDRESS``; prints one JSON line:
``{"children": [{"ok": bool, "error": str, "step_ids": [...]}, ...]}``.
A Session made before a fork is one a forked child may use: its master's state (the step
id generator among it) is copied into every child.
"""
import json
import os
import sys

import trio

import asyncflow as af


def _child(sess, doubled, p, write_fd):
    ids = []
    master = sess._target.master
    draw = master._step_bits

    def recorded(bits):
        value = draw(bits)
        ids.append(value | 1)
        return value

    master._step_bits = recorded

    async def main():
        with trio.fail_after(30):
            async with sess:
                for value in range(3):
                    assert await sess.run(doubled, {p: float(value)}) == 2.0 * value

    outcome = {"ok": True, "error": "", "step_ids": ids}
    try:
        trio.run(main)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        outcome.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    os.write(write_fd, json.dumps(outcome).encode() + b"\n")


def main(address):
    graph = af.Graph()
    with graph.as_default(), af.device("/job:worker/task:0"):
        p = af.placeholder(af.float32, [], name="p")
        doubled = p * 2.0
    sess = af.Session(graph=graph, cluster={"worker": [address]})
    children = []
    for _ in range(2):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                _child(sess, doubled, p, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as answer:
            line = answer.read()
        os.waitpid(pid, 0)
        children.append(json.loads(line) if line else {"ok": False, "error": "no answer",
                                                       "step_ids": []})
    print(json.dumps({"children": children}))


if __name__ == "__main__":
    main(sys.argv[1])
