"""GPU devices (CuPy): kernels on the device's stream, values awaited by events, never polled.

Theory of operation (reference §11, transport-spike "awaiting GPU work from trio"):
- Kernels are the same functions as on CPU, written against ``ctx.xp``; here ``xp`` is CuPy.
  ``bind_plan`` wraps every kernel of a compiled plan so it runs with this device current
  and this device's stream current: launches are asynchronous and ordered on the stream,
  so consecutive ops never wait for each other on the host.
- Values stay on the device while their consumers are there. A value *leaves* (a Send to
  another device, a fetch to the host) only after the producing stream has finished:
  ``stream_done(stream)`` enqueues a host function on the stream
  (``stream.launch_host_func``) that calls ``trio_token.run_sync_soon(event.set)`` from
  CUDA's callback thread; the trio task awaits the event. Neither the loop nor a thread
  polls or blocks. The callback never raises and makes no CUDA calls.
- A cancelled wait does not stop GPU work already queued; the arrays it uses stay alive
  through the references the caller holds.

CuPy is optional: this module imports it only inside ``GpuDevice`` (``cupy`` may be passed
in, which is how tests drive it without a GPU), and nothing else in asyncflow imports it.
"""
from __future__ import annotations

import numpy as np
import trio

from asyncflow import devices as _names


async def stream_done(stream):
    """Wait until everything enqueued on ``stream`` so far has finished.

    Args:
        stream: an object with ``launch_host_func(callback, arg)`` (a CuPy stream) whose
            callback may run on any thread.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def host_fn(_arg):  # a CUDA driver thread: be quick, never raise, no CUDA calls
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    stream.launch_host_func(host_fn, None)
    await done.wait()


class GpuDevice:
    """A CUDA device through CuPy: ``xp`` is CuPy, arrays live in device memory.

    Args:
        full_name: the device's full name (``.../device:GPU:0``).
        index: the CUDA device ordinal.
        cupy: the CuPy module (imported when None).
    """

    kind = "GPU"

    def __init__(self, full_name, index, cupy=None):
        if cupy is None:
            import cupy  # noqa: F811  (optional dependency, only here)
        self.name = full_name
        self.index = index
        self.spec = _names.DeviceSpec.from_string(full_name)
        self.xp = cupy
        self._cuda_device = cupy.cuda.Device(index)
        with self._cuda_device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._limiter = None

    @property
    def limiter(self):
        """One host thread at a time: GPU launches are asynchronous anyway."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        return self._limiter

    def _use(self):
        return _DeviceScope(self._cuda_device, self.stream)

    def put(self, array):
        """``array`` (host, or another device's) on this device, copied on this stream."""
        if getattr(array, "device", None) is not None and getattr(array.device, "id", None) == self.index:
            return array
        with self._use():
            return self.xp.asarray(array)

    def constant(self, array):
        return self.put(array)

    async def synchronize(self):
        """Wait, without blocking the loop, until this device's stream has drained."""
        await stream_done(self.stream)

    async def to_host(self, array):
        """``array`` as a numpy array, after the producing stream finished (awaited event)."""
        if not hasattr(array, "get"):
            return array
        await stream_done(self.stream)
        with self._use():
            return array.get(stream=self.stream)

    def bind_plan(self, plan):
        """Run every kernel of ``plan`` with this device and stream current; nothing offloads."""
        for node in plan.nodes:
            node.fn = self._bind(node.fn, node.is_async)
            node.offload = False
        return plan

    def _bind(self, fn, is_async):
        use, on_device = self._use, self._on_device
        if is_async:
            async def bound_async(ctx, *args):
                with use():
                    return await fn(ctx, *on_device(args))
            return bound_async

        def bound(ctx, *args):
            with use():
                return fn(ctx, *on_device(args))
        return bound

    def _on_device(self, args):
        """``args`` with numeric host arrays copied onto this device.

        Some GPU kernels produce host arrays (Shape, Size, Rank: TF's host-memory outputs),
        and CuPy refuses to mix them with device arrays; kernels that read shapes accept
        either. Strings and bfloat16 stay on the host.
        """
        for arg in args:
            if type(arg) is np.ndarray and arg.dtype.kind in "biufc":
                break
        else:
            return args
        xp = self.xp
        return [xp.asarray(a) if type(a) is np.ndarray and a.dtype.kind in "biufc" else a
                for a in args]

    def __repr__(self):
        return f"<GpuDevice {self.name}>"


class _DeviceScope:
    """``with``: make a CUDA device and one of its streams current, then restore both."""

    __slots__ = ("device", "stream")

    def __init__(self, device, stream):
        self.device = device
        self.stream = stream

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()

    def __exit__(self, *exc_info):
        self.stream.__exit__(*exc_info)
        self.device.__exit__(*exc_info)
