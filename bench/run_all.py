"""``make bench``: run every benchmark in its own process and print its figures.

Each benchmark measures its own baseline in the same run (plain numpy, a raw socket, ...)
and prints ratios, because the machines these run on are shared and noisy. ``bench_vs_tf1.py``
compares with TensorFlow's runtime when ``ASYNCFLOW_TF_PYTHON`` names a Python that can import
``tensorflow`` (asyncflow's figures only otherwise), and with Ray's Compiled Graphs when
``ASYNCFLOW_RAY_PYTHON`` names a Python that can import ``ray``. Record notable
results in bench/RESULTS.md with the date, the command and the machine.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ORDER = ["bench_foundation.py", "bench_training.py", "bench_devices.py", "bench_while.py",
         "bench_queues.py", "bench_serving.py", "bench_transport.py", "bench_distributed.py",
         "bench_vs_tf1.py", "gpu_check.py"]


def main(argv):
    wanted = argv[1:] or [name for name in ORDER if (HERE / name).exists()]
    extra = sorted(p.name for p in HERE.glob("bench_*.py") if p.name not in ORDER)
    failed = []
    for name in wanted + ([] if argv[1:] else extra):
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(HERE / name)], cwd=HERE.parent)
        print(f"--- {name}: exit {result.returncode}, {time.perf_counter() - start:.1f} s", flush=True)
        if result.returncode:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
