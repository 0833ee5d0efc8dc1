"""The memory cost of glibc's malloc settings (``exec/malloc_settings.py``) in a long-lived
process: ``--threads`` threads at once (each its own glibc arena, as an embedding service's
threads are) run one step of ``--step-mib`` MiB (1 MiB blocks, written, freed); then one thread
runs smaller steps; then ``malloc_trim(0)``. Resident memory above the start after each phase,
in a fresh process with ``ASYNCFLOW_MALLOC=as-is`` and one with the settings (the first CPU
device sets them, as in the product). Memory, not time: no A/A needed, the figures are pages.

    .venv/bin/python bench/bench_malloc_rss.py [--threads 8] [--step-mib 200]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import ctypes, sys, threading
from asyncflow.exec import devices, malloc_settings
threads, step_mib = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
MIB = 1 << 20
def rss():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) // 1024 for l in status if l.startswith("VmRSS"))
devices.make_local_devices()
base = rss()
libc.free(libc.malloc(2 * MIB))  # glibc's dynamic threshold risen, as in a numpy process
def step(mib):
    blocks = [libc.malloc(MIB) for _ in range(mib)]
    for block in blocks:
        ctypes.memset(block, 1, MIB)
    for block in blocks:
        libc.free(block)
barrier = threading.Barrier(threads)
def worker():
    barrier.wait()  # all alive at once: one arena each
    step(step_mib)
    barrier.wait()
pool = [threading.Thread(target=worker) for _ in range(threads)]
for thread in pool:
    thread.start()
for thread in pool:
    thread.join()
after = rss() - base
for mib in (5, 10, 20):
    thread = threading.Thread(target=step, args=(mib,))
    thread.start()
    thread.join()
small = rss() - base
libc.malloc_trim(0)
print(malloc_settings.APPLIED, after, small, rss() - base)
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step-mib", type=int, default=200)
    args = parser.parse_args(argv)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"{args.threads} threads at once, a {args.step_mib} MiB step each; RSS MiB above the "
          "start: after them / after smaller steps / after malloc_trim(0)")
    for label, switch in (("as-is", "as-is"), ("settings", "steady")):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
        env.update(ASYNCFLOW_MALLOC=switch,
                   PYTHONPATH=repo + os.pathsep + env.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.threads),
                              str(args.step_mib)], env=env, capture_output=True, text=True,
                             timeout=300, check=True).stdout.split()
        applied, (after, small, trimmed) = " ".join(out[:-3]), out[-3:]
        print(f"  {label:>8}: {after:>6} / {small:>6} / {trimmed:>6}   applied {applied}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
