"""Devices of one process: CPU devices (numpy) and, when CuPy finds CUDA, GPU devices.

This is the only module that imports CuPy, and only lazily. A device offers its array module
(``xp``), moves arrays onto and off itself, and owns a ``CapacityLimiter`` for kernels that
run on worker threads, so each device uses at most its share of cores. A CPU device also has
an intra-op pool (``intra_op``, ``runtime/intra_op.py``) over which large kernels split their
work.
"""
from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import trio

from asyncflow import devices as _names
from asyncflow.runtime import intra_op as _intra_op


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
    try:
        import cupy  # noqa: F401  (optional dependency)
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, CUDARuntimeError: no usable GPU
        return 0


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
        from asyncflow.runtime.gpu import GpuDevice
        out += [GpuDevice(_names.local_device_name("GPU", i, job, replica, task), i)
                for i in range(n_gpu)]
    return out
