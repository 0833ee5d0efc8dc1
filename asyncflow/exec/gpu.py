"""GPU devices (CuPy): kernels on the device's stream, values awaited by events, never polled.

Theory of operation (docs/devices.md):
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
- Host memory (TF's ``HostMemory`` registrations; docs/devices.md). ``bind_plan`` gives every
  node one of three forms. A *host node* runs its kernel with ``xp = numpy`` on host values:
  an op whose data inputs and outputs are all int32 (bools allowed beside them: shape
  arithmetic, loop counters, comparisons of counters), an op with a string argument, and a
  Const whose every reader takes it as a host-memory input. A *mixed node* is a device
  kernel with host-memory arguments (``kernels.registry.host_memory``: ``Pad``'s paddings,
  ``Reshape``'s shape, ``Range``'s bounds, ``Shape``'s output): those stay numpy, its
  shape-only inputs stay wherever they are, the rest go to the device. Every other node is a
  *device node*: numeric host arrays are copied onto the device before it runs. So a shape
  computed from a device array's metadata reaches ``Reshape`` without a device round trip;
  the only round trip left is a host-memory input produced by a device kernel (a float
  ``Range`` bound computed on the GPU), counted in ``statistics().round_trips``.
- Feeds: numeric values other than int32 go to the device; int32, strings and bfloat16 stay
  on the host (no CUDA array holds strings).
- An out-of-memory in a kernel is ``ResourceExhaustedError`` naming the bytes asked; the
  executor adds the op and device. The device stays usable.

CuPy is optional: this module imports it only inside ``GpuDevice`` (``cupy`` may be passed
in, which is how tests drive it without a GPU), and nothing else in asyncflow imports it.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import trio

from asyncflow import device_names as _names
from asyncflow import errors
from asyncflow.kernels.registry import MemoryTypes, memory_types


@dataclasses.dataclass(frozen=True)
class GpuStatistics:
    """``round_trips``: host-memory inputs fetched from the device (each a synchronizing
    copy); ``host_nodes``/``mixed_nodes``: nodes bound in those forms so far."""

    round_trips: int
    host_nodes: int
    mixed_nodes: int


_HOST_DTYPE = np.dtype(np.int32)
_NO_HOST_MEMORY = MemoryTypes()


def _is_host_op(node):
    """A node a GPU runs on the host: its arguments other than host-memory ones are int32
    (bools beside), or one of them is a string or bfloat16 (no CUDA array holds either, so
    such values stay on the host: ``put``). ``node``: a compile-time ``Node``."""
    types = memory_types(node.type) or _NO_HOST_MEMORY
    dtypes = [producer.out_spec(index)[0] for i, (producer, index) in enumerate(node.inputs)
              if i not in types.host_inputs] + [
        t.dtype for i, t in enumerate(node.outputs) if i not in types.host_outputs]
    if not node.outputs:
        return False
    if any(d.is_string or d.name == "bfloat16" for d in dtypes):
        return True
    numeric = [d for d in dtypes if d.name != "bool"]
    return bool(numeric) and all(not d.is_string and d.np == _HOST_DTYPE for d in numeric)


def _read_as_host_memory(plan, node):
    """Every reader of ``node``'s outputs in ``plan`` (a NodePlan's data edges) takes them
    as a host-memory input."""
    readers = 0
    for _, consumer, position in node.out_edges:
        readers += 1
        types = memory_types(plan.nodes[consumer].op.type)
        if types is None or position not in types.host_inputs:
            return False
    return readers > 0


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
        memory = getattr(cupy.cuda, "memory", None)
        self._out_of_memory = getattr(memory, "OutOfMemoryError", MemoryError)
        self._round_trips = 0
        self._host_nodes = 0
        self._mixed_nodes = 0

    def statistics(self):
        """A GpuStatistics of this device's host-memory handling so far."""
        return GpuStatistics(self._round_trips, self._host_nodes, self._mixed_nodes)

    @property
    def limiter(self):
        """One host thread at a time: GPU launches are asynchronous anyway."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(1)
        return self._limiter

    def _use(self):
        return _DeviceScope(self._cuda_device, self.stream)

    def put(self, array):
        """``array`` (host, or another device's) on this device, copied on this stream; int32,
        string, object and bfloat16 values stay on the host (see the module docstring)."""
        if getattr(array, "device", None) is not None and getattr(array.device, "id", None) == self.index:
            return array
        kind = getattr(getattr(array, "dtype", None), "kind", None)
        if kind is None or kind not in "biufc" or array.dtype == _HOST_DTYPE:
            # (not an array: a TensorArray's or stack's handle, which lives on the host)
            return array
        with self._use():
            return self._device_array(array)

    def _device_array(self, array):
        try:
            return self.xp.asarray(array)
        except self._out_of_memory as exc:
            raise self._exhausted(exc) from exc

    def _exhausted(self, exc):
        size = getattr(exc, "size", None)
        asked = f"{size:,} bytes" if isinstance(size, int) else "memory"
        return errors.ResourceExhaustedError(
            None, None, f"OOM when allocating {asked} on {self.name}: {exc}. The step failed; "
            "the session stays usable: free tensors or use smaller batches")

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
        """Run every kernel of ``plan`` with this device and stream current, host nodes and
        host-memory arguments on the host (module docstring); nothing offloads but blocking
        IO kernels."""
        for node in plan.nodes:
            op = node.op
            if op.type not in ("_Send", "_Recv") and (
                    _is_host_op(op) or (op.type == "Const" and _read_as_host_memory(plan, node))):
                node.ctx.xp = np
                convert = self._on_host
                self._host_nodes += 1
            else:
                types = memory_types(op.type)
                convert = self._on_device if types is None else self._mixed(types)
                self._mixed_nodes += types is not None
            node.fn = self._bind(node.fn, node.is_async, convert, node.ctx.xp is np)
            node.offload = node.blocking_io  # (a host kernel doing IO: kernels/registry.py)
        return plan

    def _bind(self, fn, is_async, convert, on_host):
        use, out_of_memory, exhausted = self._use, self._out_of_memory, self._exhausted
        if on_host:
            if is_async:
                async def host_async(ctx, *args):
                    return await fn(ctx, *convert(args))
                return host_async

            def host(ctx, *args):
                return fn(ctx, *convert(args))
            return host
        if is_async:
            async def bound_async(ctx, *args):
                with use():
                    try:
                        return await fn(ctx, *convert(args))
                    except out_of_memory as exc:
                        raise exhausted(exc) from exc
            return bound_async

        def bound(ctx, *args):
            with use():
                try:
                    return fn(ctx, *convert(args))
                except out_of_memory as exc:
                    raise exhausted(exc) from exc
        return bound

    def _host_value(self, value):
        """A device array fetched to the host (a synchronizing round trip, counted)."""
        if isinstance(value, self.xp.ndarray):
            self._round_trips += 1
            with self._use():
                return value.get(stream=self.stream)
        return value

    def _on_host(self, args):
        """``args`` of a host node: device arrays fetched (rare: see the module docstring)."""
        ndarray = self.xp.ndarray
        for arg in args:
            if isinstance(arg, ndarray):
                break
        else:
            return args
        return [self._host_value(a) for a in args]

    def _mixed(self, types):
        """The argument conversion of a kernel with host-memory or shape-only inputs."""
        host, keep = types.host_inputs, types.shape_only

        def convert(args):
            out = []
            for position, arg in enumerate(args):
                if position in host:
                    out.append(self._host_value(arg))
                elif position in keep or type(arg) is not np.ndarray \
                        or arg.dtype.kind not in "biufc":
                    out.append(arg)
                else:
                    out.append(self._device_array(arg))
            return out
        return convert

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
        put = self._device_array
        return [put(a) if type(a) is np.ndarray and a.dtype.kind in "biufc" else a
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
