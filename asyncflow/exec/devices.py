"""Devices of one process: CPU devices (numpy) and, when CuPy finds CUDA, GPU devices.

This is the only module that imports CuPy, and only lazily; ``cuda_status`` says why no GPU
is there (CuPy missing or built for another CUDA than the driver), naming the extra to install. A device offers its array module
(``xp``), moves arrays onto and off itself, and owns a ``CapacityLimiter`` for kernels that
run on worker threads, so each device uses at most its share of cores. A CPU device also has
an intra-op pool (``intra_op``, ``exec/intra_op.py``) over which large kernels split their
work.
"""
from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import trio

from asyncflow import device_names as _names
from asyncflow.exec import intra_op as _intra_op
from asyncflow.exec import malloc_settings as _malloc


class Device:
    """A CPU device: numpy arrays in host memory."""

    kind = "CPU"

    def __init__(self, full_name, index, threads=None, intra_op_threads=None):
        self.name = full_name
        self.index = index
        self.spec = _names.DeviceSpec.from_string(full_name)
        self.xp = np
        self._threads = threads or max(1, os.cpu_count() or 1)
        self._limiter = None
        self._pool = None
        self.intra_op = _intra_op.shared_pool(intra_op_threads or self._threads)
        _intra_op.claim_blas()  # the intra-op pool splits large kernels; BLAS runs 1 thread
        _malloc.claim()  # glibc keeps a step's freed heap (exec/malloc_settings.py)

    @property
    def limiter(self):
        """The per-device limiter for offloaded kernels (created inside a trio run)."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self._threads)
        return self._limiter

    @property
    def thread_pool(self):
        """Worker threads for offloaded kernels of steps an asyncio loop runs inline: as
        many as the limiter lets trio use, so the device's share of cores is the same."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._threads, thread_name_prefix=f"asyncflow-CPU{self.index}")
        return self._pool

    def put(self, array):
        return array

    def constant(self, array):
        return array

    async def to_host(self, array):
        return array

    def __repr__(self):
        return f"<Device {self.name}>"


def cuda_device_count():
    """How many CUDA devices CuPy sees (0 when CuPy is missing or finds none)."""
    return cuda_status()[0]


# The extras that install CuPy, one per CUDA major version of the driver (pyproject.toml).
GPU_EXTRAS = {"12": "gpu-cuda12", "13": "gpu-cuda13"}
_CHOOSE = ("install the CuPy extra matching the CUDA version that `nvidia-smi` prints: "
           "pip install 'asyncflow-dataflow[gpu-cuda12]' for CUDA 12.x drivers, "
           "'asyncflow-dataflow[gpu-cuda13]' for CUDA 13.x (only one of the two)")


def cuda_status():
    """``(count, reason)``: the CUDA devices CuPy sees, and when there are none, why, naming
    the extra to install where CuPy is missing or does not match the driver."""
    try:
        import cupy  # noqa: F401  (optional dependency)
    except ImportError as exc:
        if getattr(exc, "name", None) == "cupy":
            return 0, f"CuPy is not installed: {_CHOOSE}"
        return 0, (f"CuPy is installed but does not load ({exc}): its CUDA libraries do not "
                   f"match this machine; {_CHOOSE}")
    except Exception as exc:  # noqa: BLE001 - a broken install must not stop a CPU session
        return 0, f"CuPy does not load ({type(exc).__name__}: {exc}); {_CHOOSE}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: no usable GPU
        text = f"{type(exc).__name__}: {exc}"
        if "InsufficientDriver" in text or "driver" in text.lower():
            built = _cuda_major(cupy)
            extra = next((e for major, e in GPU_EXTRAS.items() if major != built), None)
            hint = f"; install [{extra}] instead" if built and extra else ""
            return 0, (f"CuPy {getattr(cupy, '__version__', '?')} (built for CUDA "
                       f"{built or '?'}) does not match this machine's CUDA driver ({text}): "
                       f"{_CHOOSE}{hint}")
        return 0, f"CuPy finds no usable CUDA device ({text})"
    return count, None if count else "CuPy finds no CUDA device on this machine"


def _cuda_major(cupy):
    """The CUDA major version CuPy was built for ("12", "13"), or None."""
    try:
        return str(int(cupy.cuda.runtime.runtimeGetVersion()) // 1000)
    except Exception:  # noqa: BLE001 - older CuPy or a broken runtime
        return None


def make_local_devices(device_count=None, job="localhost", replica=0, task=0,
                       intra_op_threads=0):
    """The devices of one process: ``device_count={"CPU": n, "GPU": m}`` (GPUs capped by CUDA).

    ``intra_op_threads``: threads each CPU device's large kernels split over (0: its share of
    the cores, as ``inter_op`` threads are shared out).
    """
    if int(intra_op_threads or 0) < 0:
        raise ValueError(f"intra_op_parallelism_threads must be >= 0, got {intra_op_threads}")
    device_count = dict(device_count or {})
    n_cpu = int(device_count.get("CPU", 1))
    if n_cpu < 1:
        raise ValueError(f"device_count['CPU'] must be >= 1, got {n_cpu}")
    cores = max(1, os.cpu_count() or 1)
    per_device = max(1, cores // n_cpu)
    out = [Device(_names.local_device_name("CPU", i, job, replica, task), i, per_device,
                  int(intra_op_threads or 0) or per_device)
           for i in range(n_cpu)]
    n_gpu = min(int(device_count.get("GPU", 1 << 30)), cuda_device_count())
    if n_gpu:
        from asyncflow.exec.gpu import GpuDevice
        out += [GpuDevice(_names.local_device_name("GPU", i, job, replica, task), i)
                for i in range(n_gpu)]
    return out
