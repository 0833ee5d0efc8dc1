"""Moving a 64 MiB tensor to another process on this host: Unix socket against shared memory.

The question behind it (issue 34): should same-host pulls go through shared memory instead of
the same-host Unix socket (``transports/http/same_host.py``)? Each way moves the same float32
array from a sender process to a receiver process that ends up holding it as an array and
reads it once (a sum, as the pull benchmark's ``reduce_sum`` does), per round:

* ``unix``: ``sendall`` on a Unix stream socket, ``recv_into`` a fresh array (what a pull
  does: the received tensor is a new array);
* ``shm_fresh``: the sender creates a ``/dev/shm`` file, writes the array into it and passes
  its name; the receiver opens it, maps it (``MAP_POPULATE``), unlinks it and uses the
  mapping as the array (zero copies on the receiving side);
* ``shm_warm``: one segment made once and kept mapped by both (pages already backed): the
  sender copies into it, the receiver copies out into a fresh array (it cannot keep the
  segment's view: the next transfer reuses the segment).

Figures: MiB/s from the send's start to the receiver's sum, median of the rounds, and each
shared-memory way over ``unix`` in the same run. Linux only (``/dev/shm``, ``AF_UNIX``).

Run: ``.venv/bin/python bench/bench_shared_memory.py [--rounds 7] [--runs 3]``.
"""
from __future__ import annotations

import argparse
import mmap
import multiprocessing
import os
import secrets
import socket
import statistics
import tempfile
import time

import numpy as np

MIB = 1 << 20
SIZE = 64 * MIB


def _recv_exact(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("sender went away")
        got += n


def _recv_text(sock, size):
    buffer = bytearray(size)
    _recv_exact(sock, memoryview(buffer))
    return buffer.decode().strip()


def _receiver(path, rounds):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        warm_fd = None
        for _ in range(rounds * 3):
            kind = _recv_text(sock, 16)
            if kind == "unix":
                array = np.empty(SIZE // 4, np.float32)
                _recv_exact(sock, memoryview(array).cast("B"))
                total = array.sum()
            elif kind == "shm_fresh":
                name = _recv_text(sock, 64)
                fd = os.open(name, os.O_RDWR)
                os.unlink(name)
                mapping = mmap.mmap(fd, SIZE, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
                os.close(fd)
                total = np.frombuffer(mapping, np.float32).sum()
            else:
                name = _recv_text(sock, 64)
                if warm_fd is None:
                    warm_fd = os.open(name, os.O_RDWR)
                    warm = np.frombuffer(mmap.mmap(warm_fd, SIZE), np.float32)
                total = warm.copy().sum()
            sock.sendall(b"k" if total >= 0 else b"?")  # (the sum is read, not trusted)


def _measure(rounds):
    data = np.ones(SIZE // 4, np.float32)
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "bench.sock")
    warm_name = f"/dev/shm/asyncflow-bench-{secrets.token_hex(6)}"
    warm_fd = os.open(warm_name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(warm_fd, SIZE)
    warm = np.frombuffer(mmap.mmap(warm_fd, SIZE), np.float32)
    warm[:] = 0
    times = {"unix": [], "shm_fresh": [], "shm_warm": []}
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        receiver = multiprocessing.get_context("spawn").Process(target=_receiver,
                                                                args=(path, rounds))
        receiver.start()
        conn, _ = server.accept()
        try:
            for _ in range(rounds):
                for kind in ("unix", "shm_fresh", "shm_warm"):
                    start = time.perf_counter()
                    conn.sendall(kind.ljust(16).encode())
                    if kind == "unix":
                        conn.sendall(memoryview(data).cast("B"))
                    elif kind == "shm_fresh":
                        name = f"/dev/shm/asyncflow-bench-{secrets.token_hex(6)}"
                        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                        view, written = memoryview(data).cast("B"), 0
                        os.ftruncate(fd, SIZE)
                        while written < SIZE:
                            written += os.pwrite(fd, view[written:], written)
                        os.close(fd)
                        conn.sendall(name.ljust(64).encode())
                    else:
                        np.copyto(warm, data)
                        conn.sendall(warm_name.ljust(64).encode())
                    conn.recv(1)
                    times[kind].append(time.perf_counter() - start)
        finally:
            conn.close()
            receiver.join(30)
            os.close(warm_fd)
            os.unlink(warm_name)
            os.unlink(path)
            os.rmdir(folder)
    return {kind: SIZE / MIB / statistics.median(t) for kind, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="transfers per way and run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        figures = _measure(args.rounds)
        runs.append(figures)
        print(f"run {run + 1}: " + "  ".join(f"{k} {v:,.0f} MiB/s" for k, v in figures.items())
              + f"  (shm_fresh/unix {figures['shm_fresh'] / figures['unix']:.2f}, "
              f"shm_warm/unix {figures['shm_warm'] / figures['unix']:.2f}; load "
              f"{os.getloadavg()[0]:.1f})", flush=True)
    for kind in ("shm_fresh", "shm_warm"):
        ratios = [r[kind] / r["unix"] for r in runs]
        print(f"{kind} / unix: median {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
