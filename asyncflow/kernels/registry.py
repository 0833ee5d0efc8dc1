"""The kernel registry: (op type, device kind) -> ``KernelDef``.

A kernel is ``fn(ctx, *inputs) -> tuple(outputs)``. ``ctx`` is provided by the runtime and
offers ``ctx.xp`` (numpy or cupy), ``ctx.attrs`` (the op's attrs), ``ctx.name``/``ctx.type``,
``ctx.output_dtypes`` (numpy dtypes), ``ctx.random_generator()``, and for stateful kernels
``ctx.resources``. Async kernels (``is_async=True``) may also use ``ctx.step`` (the running
step's rendezvous and cancellation) and are awaited; everything else runs inline.

An async kernel may have a synchronous twin registered with ``register_nowait``: the
executor tries it inline first and starts the async kernel only when the twin returns
``WOULD_BLOCK`` (trio's ``*_nowait`` pattern), so a Recv whose value already arrived costs no
task.

An async kernel may also have a *subscribing* form registered with ``register_subscribe``:
``fn(ctx, *inputs, deliver)``, tried when the twin returns ``WOULD_BLOCK``. Instead of running
as a task it arranges for ``deliver(outputs)`` (or ``deliver(None, error)``) to be called once,
synchronously, by whatever produces the value (a Recv subscribes to the step's rendezvous), and
returns a no-argument cancel callable, or ``WOULD_BLOCK`` to decline (then the async kernel runs
as a task, e.g. on a rendezvous that cannot subscribe). A waiting value then wakes the
executor's loop directly, one task switch instead of two.

A kernel may have a *prepare* hook registered with ``register_prepare``: ``fn(ctx) -> value``,
run once per plan node when the plan is built (not per run); the value is the node context's
``prepared`` (a waiting kernel reads it as ``ctx.node.prepared``). It holds what depends only on
the op's attrs and device: a Send/Recv's root-frame rendezvous key, a queue's spec.

``offload=True`` marks kernels that may run on a worker thread when their inputs are large;
the executor decides, the kernel does not know. ``offload_scale`` says how many units of the
op's cost make one element-operation of the offload threshold: a GEMM's cost counts
multiply-adds, which BLAS does some 16 times faster than numpy's elementwise loops, so MatMul
registers 16 and stays on the calling thread until it is as long as an elementwise kernel
that would be offloaded (a hand-off to a worker thread and back costs 30-100 us).

``blocking_io=True`` marks kernels that touch the filesystem (ReadFile, WriteFile, Save,
Restore, MergeCheckpointShards, CommitCheckpoint, LatestCheckpoint): they always run on a
worker thread, whatever their inputs, since a tiny filename may name a FIFO or a slow file
that would block the event loop (other steps, Health, Shutdown). Every execution path honours
it: the plan gives such a node ``offload`` with a threshold of 0 (so every cost test the
executor, the generated step, lanes and pairs make sends it to a thread), the thread form
(``exec/thread_step.py``) does not take a plan holding one, and a GPU plan keeps its
offload. ``abandon=True`` (reads only: ReadFile, Restore, LatestCheckpoint) lets a cancelled
step (``timeout_in_ms``, a session closing) stop waiting for the thread at once
(the executor's IO threads, a bounded number of abandoned reads): the read's result is
dropped. A write
or a checkpoint commit is never abandoned: a cancelled step waits for it to finish or fail, as
long as the filesystem takes, so no half-written file is left behind by the step.

Device kinds and dtypes (TF's kernel registrations; docs/devices.md): a kernel registered for
``ANY`` runs on every kind for numeric dtypes, but no GPU kernel takes strings, so an op with
a string input or output has only its host kinds (``supported_device_kinds``);
a kernel registered for ``"CPU"`` (Save, Restore, summaries, queues, readers, PyFunc) runs
only there, and placement puts it there unless the user asked otherwise.

Host memory (TF's ``.HostMemory("...")``): ``host_memory(type, inputs=..., outputs=...)``
declares the arguments a kernel reads or writes as small host values even when it runs on a
GPU (shapes, paddings, axes, ``Range`` bounds); ``shape_only=...`` the inputs it reads only
for their shape (left wherever they live). ``memory_types(type)`` gives the declaration (or
None); the GPU device keeps such values on the host (``exec/gpu.py``).

Kernels never import the executor, trio or graph objects.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Callable

ANY = "ANY"
WOULD_BLOCK = object()  # returned by a nowait twin that would have to wait


@dataclasses.dataclass(frozen=True, slots=True)
class KernelDef:
    op_type: str
    device_kind: str
    fn: Callable
    is_async: bool = False
    offload: bool = False
    where: str = ""
    nowait: Callable | None = None
    runs_on_dead: bool = False
    subscribe: Callable | None = None
    prepare: Callable | None = None
    offload_scale: int = 1
    blocking_io: bool = False
    abandon: bool = False


_KERNELS: dict[tuple[str, str], KernelDef] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryTypes:
    """Arguments a kernel keeps in host memory on a GPU (positions), and inputs it reads only
    for their shape (``shape_only``: never moved)."""

    host_inputs: frozenset = frozenset()
    host_outputs: frozenset = frozenset()
    shape_only: frozenset = frozenset()


_MEMORY_TYPES: dict[str, MemoryTypes] = {}


def register_kernel(op_type, device=ANY, *, is_async=False, offload=False, runs_on_dead=False,
                    offload_scale=1, blocking_io=False, abandon=False):
    """Decorator registering ``fn`` as the kernel of ``op_type`` on ``device`` kind.

    ``runs_on_dead=True`` (Send/Recv): the executor runs the kernel even when an input is a
    dead tensor, passing ``asyncflow.kernels.control_flow.DEAD`` for it, so deadness can
    cross devices (the kernel forwards ``is_dead`` through the rendezvous).
    ``blocking_io=True``: always on a worker thread; ``abandon=True`` (with it): a cancelled
    step stops waiting for that thread (module docstring).

    Raises:
        KeyError: if that (type, device) already has a kernel, naming both places.
    """
    frame = sys._getframe(1)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"

    def decorate(fn):
        key = (op_type, device)
        if key in _KERNELS:
            raise KeyError(f"Kernel for {op_type!r} on {device} registered twice: at "
                           f"{_KERNELS[key].where} and at {where}")
        if abandon and not blocking_io:
            raise ValueError(f"Kernel for {op_type!r}: abandon=True needs blocking_io=True")
        _KERNELS[key] = KernelDef(op_type, device, fn, is_async=is_async,
                                  offload=offload or blocking_io, where=where,
                                  runs_on_dead=runs_on_dead, offload_scale=offload_scale,
                                  blocking_io=blocking_io, abandon=abandon)
        return fn
    return decorate


def register_nowait(op_type, device=ANY):
    """Decorator: the synchronous twin of an async kernel, tried inline first.

    It returns the outputs, or ``WOULD_BLOCK`` when the async kernel has to run instead.

    Raises:
        KeyError: if ``op_type`` has no async kernel on ``device`` yet.
    """
    return _attach_form(op_type, device, "nowait")


def register_subscribe(op_type, device=ANY):
    """Decorator: the subscribing form ``fn(ctx, *inputs, deliver)`` of an async kernel.

    ``fn`` returns a no-argument callable that cancels the subscription (called when the step
    is torn down before delivery), or ``WOULD_BLOCK`` to have the async kernel run instead.
    ``deliver(outputs, error=None)`` must be called exactly once unless cancelled; it may be
    called before ``fn`` returns.

    Raises:
        KeyError: if ``op_type`` has no async kernel on ``device`` yet.
    """
    return _attach_form(op_type, device, "subscribe")


def register_prepare(op_type, device=ANY):
    """Decorator: ``fn(ctx) -> value``, run once per plan node of ``op_type`` when the plan is
    built; the node context keeps the value as ``prepared``.

    Raises:
        KeyError: if ``op_type`` has no kernel on ``device`` yet.
    """
    return _attach_form(op_type, device, "prepare", needs_async=False)


class Preload:
    """A prepare hook's value for a node whose kernel would do slow one-time work on its first
    run (an import: scipy.fft, 0.2-0.5 s): ``load(ctx)``, run once on a worker thread before
    the plan's first step (``exec/step.py``, ``preload``), so the event loop is never blocked
    by it. Loads are idempotent: a second one (another plan) finds the work done."""

    __slots__ = ("load",)

    def __init__(self, load):
        self.load = load

    @staticmethod
    def chained(first, second):
        """One node's two Preloads (either may be None) as one: ``first``'s load, then
        ``second``'s; the one that is not None alone; None for neither."""
        if first is None or second is None:
            return second if first is None else first

        def load(node):
            first.load(node)
            second.load(node)
        return Preload(load)


def _attach_form(op_type, device, form, needs_async=True):
    """A decorator attaching ``fn`` as the ``form`` of an already registered (async) kernel."""
    def decorate(fn):
        key = (op_type, device)
        kernel = _KERNELS.get(key)
        if kernel is None or (needs_async and not kernel.is_async):
            kind = "async kernel" if needs_async else "kernel"
            raise KeyError(f"register_{form}({op_type!r}): no {kind} registered on {device}")
        _KERNELS[key] = dataclasses.replace(kernel, **{form: fn})
        return fn
    return decorate


def host_memory(op_type, inputs=(), outputs=(), shape_only=()):
    """Declare ``op_type``'s host-memory inputs and outputs and its shape-only inputs
    (positions; ``inputs="all"`` for every input), as TF's ``.HostMemory`` does.

    Raises:
        KeyError: if ``op_type`` already has a declaration.
    """
    if op_type in _MEMORY_TYPES:
        raise KeyError(f"host_memory({op_type!r}) declared twice")
    every = range(64) if inputs == "all" else inputs
    _MEMORY_TYPES[op_type] = MemoryTypes(frozenset(every), frozenset(outputs),
                                         frozenset(shape_only))


def memory_types(op_type):
    """``op_type``'s MemoryTypes, or None when all its arguments live on its device."""
    return _MEMORY_TYPES.get(op_type)


def get_kernel(op_type, device_kind):
    """The kernel for ``op_type`` on a device kind, falling back to the ANY kernel; or None."""
    return _KERNELS.get((op_type, device_kind)) or _KERNELS.get((op_type, ANY))


HOST_KINDS = ("CPU",)


def supported_device_kinds(op_type, input_dtypes=(), output_dtypes=()):
    """Device kinds with a kernel for ``op_type`` and its inputs' and outputs' DTypes:
    ``ANY`` means every kind; a string argument leaves only the host kinds.

    TensorArray and stack handles are strings here, so those ops stay on the host too (TF
    has GPU kernels for them, with the handle in host memory): moving them needs the loop
    ops that forward a handle (Enter, Switch, Merge) on the GPU as well, or a loop splits
    across devices around its handle."""
    kinds = sorted(kind for (t, kind) in _KERNELS if t == op_type)
    if any(getattr(dtype, "is_string", False) for dtype in (*input_dtypes, *output_dtypes)):
        kinds = sorted({k for k in kinds if k in HOST_KINDS}
                       | (set(HOST_KINDS) if ANY in kinds else set()))
    return kinds
