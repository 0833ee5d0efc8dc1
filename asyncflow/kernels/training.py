"""Kernels of the fused optimizer updates (see ops/training.py).

Each dense kernel reads the variable (and its slots) once, computes the new values with array
arithmetic in the variable's dtype, assigns them and returns the variable's new value. A
value someone else holds (a reader, a fetch, a view, a wire buffer) never changes under it:
a new value goes into the stored array itself only when nothing but the variable holds it
(``reusable``, the reference count) and it is larger than ``SMALL_BYTES``, into a new array
otherwise. SGD keeps its two passes into one new array.

The dense applies run in blocks of ``BLOCK`` elements of the flattened arrays with two
block-sized scratch arrays per thread (kept between steps), so the passes of an update stay
in the caches and no array of the variable's size is allocated when the values are updated in
place. The blocks are split over the device's intra-op threads in contiguous chunks
(``kernels/intra_op.py``); elementwise, so the bits do not depend on the split, and each
formula keeps the operation order of TF's (and of the expressions these kernels had before),
so the results are the same bits as those. The RMSProp applies take the order of TF1's
dense CPU functors (``ms + (grad^2 - ms) * (1 - rho)``, ``mg + (grad - mg) * (1 - rho)``,
``mom * momentum + grad * lr / sqrt(...)``): as many passes as the expressions they had
before (``ms * rho + (1 - rho) * grad^2``), and TF1's bits in float32 where those differed
from them in about 2% of the values (up to 4096 ulps near 0 after three steps). So do Adam
(``m + (grad - m) * (1 - beta1)``, ``v + (grad^2 - v) * (1 - beta2)``, where ``m * beta1 +
(1 - beta1) * grad`` differed from TF1 in about half the slots' values) and Nesterov
momentum (``var - (grad * lr + accum * momentum * lr)``): TF1's bits in float32 and float64
(tests/train/test_adam_momentum_tf1.py).

On CPU, for float32 and float64 (``jit.usable``), RMSProp, Adam and momentum take a loop
compiled by numba instead (``kernels/jit.py``): one pass updating the variable and its slots
in place (a copy first where ``reusable`` refuses), with the numpy form's operations in its
order, so the same bits (tests/train/test_optimizer_loops.py); the numpy form stays for other
dtypes, GPUs and numba missing or disabled (RMSProp on 200k float32, one thread: 0.14 ms
against 0.49, bench/RESULTS.md).

Every apply is one update with respect to a Ctrl-C (``sigint_hold.whole``: SIGINT held for
the kernel's call, so its passes and assigns all run before a KeyboardInterrupt goes up). The
sparse applies: ``kernels/training_sparse.py``.
"""
from __future__ import annotations

import threading

import numpy as np

from asyncflow import errors
from asyncflow.kernels import intra_op, jit, sigint_hold
from asyncflow.kernels.registry import register_kernel, register_prepare


def _read(ctx, ref, grad):
    value = ref.read()
    if value.shape != grad.shape:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{ctx.type}: variable {ref.name} has shape {list(value.shape)} "
            f"but the gradient has shape {list(grad.shape)}")
    return value


def scalar_of(value, like):
    """``value`` in ``like``'s dtype (``like``: an array or a dtype): a numpy scalar from host
    values; a 0-d device array stays on the device (``float32(cupy_array)`` would be an
    implicit host copy: TypeError)."""
    dtype = getattr(like, "dtype", like)
    if isinstance(value, (np.ndarray, np.generic, int, float)):
        return dtype.type(value)
    return value.astype(dtype)


@register_kernel("ApplyGradientDescent")
@sigint_hold.whole
def _apply_gradient_descent(ctx, var, alpha, delta):
    # Two passes into one new array (the step, then the new value): the blocked in-place
    # form of the other applies costs more here in calls than it saves (SGD on 8k values:
    # 4.3 us a call against 7.7; on 200k, 41 against 46-61).
    value = _read(ctx, var, delta)
    step = scalar_of(alpha, value) * delta
    if value.ndim:  # in place into the fresh temporary (0-d operands give numpy scalars)
        step = ctx.xp.subtract(value, step, out=step)
    else:
        step = value - step
    # The new value has the shape the variable holds already.
    return (var.assign(step, validate_shape=False, fresh=True),)


# Elements one pass of a dense update covers, with two scratch arrays of this size per thread
# kept between steps (ApplyRMSProp on 200k float32, one thread: 0.94 ms in whole-array passes
# into new arrays, 0.25-0.27 in place in blocks of 32-64k). Up to 256k elements a block: the
# arrays of a 200k variable no longer stay in L2 across the passes, but the update makes 11
# numpy calls instead of 77 and this machine's L3 keeps up (RMSProp in TF1's order, one
# thread, in place, load 9: 200k 0.270 ms in one block against 0.314 in 32k blocks, 98k
# 0.139 against 0.154, 65k 0.092 against 0.100). A split's chunks (``CHUNK_BYTES``) are
# smaller than a block for every float32 or float64 apply: a split runs one block a chunk.
BLOCK = 1 << 18
# Updates of at most this many bytes write new arrays (from malloc's free lists, below its
# mmap threshold: no page faults) with new scratch: cheaper than the reference-count checks
# and the thread's scratch (RMSProp on 128 values: 14.6 us a call, 17.3 before this round).
SMALL_BYTES = 1 << 16

_local = threading.local()


def _scratch(xp, dtype, count):
    """Two scratch arrays of ``count`` elements for the calling thread. numpy's are kept per
    thread and dtype between calls: a new array above malloc's mmap threshold pays its page
    faults on every step."""
    if xp is not np:
        return xp.empty(count, dtype=dtype), xp.empty(count, dtype=dtype)
    cache = getattr(_local, "scratch", None)
    if cache is None:
        cache = _local.scratch = {}
    pair = cache.get(dtype)
    if pair is None or pair[0].size < count:
        pair = cache[dtype] = (np.empty(count, dtype), np.empty(count, dtype))
    return pair[0][:count], pair[1][:count]


def _dtype_of(ctx, var, grad):
    """The variable's value dtype, after checking its shape against the gradient's (no
    reference to the value is kept: see ``_dense_apply``)."""
    return _read(ctx, var, grad).dtype


def check_slots(ctx, slots, shape, of="the gradient"):
    """Each slot's value has the gradient's ``shape`` (or that of what ``of`` names: a sparse
    apply's variable): checked before any stored array is taken to update in place
    (``reusable`` reopens it for writing and makes this thread its writer until the
    ``assign``), so an error leaves every stored array as it was."""
    for ref in slots:
        if ref.read().shape != shape:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: slot {ref.name} has shape "
                f"{list(ref.read().shape)} but {of} has shape {list(shape)}")


def _dense_apply(ctx, var, slots, grad, dtype, per_item_ops, update, block=None):
    """Apply ``update(x, *slot_values, g, new_x, *new_slots, t, u)`` elementwise over blocks of
    ``block`` elements of the flattened arrays (``t`` and ``u``: block-sized scratch), split
    over the intra-op threads when large, assign the new values and return the variable's.
    ``dtype``: the variable's, from ``_dtype_of`` (which checked the gradient's shape).

    ``per_item_ops``: the update's cost per element in ``intra_op``'s element-operations,
    about a third of its passes: in blocks that stay in cache numpy's passes run some 3x
    faster than the elementwise loops ``MIN_SPLIT_WORK`` is scaled for, and a split pays
    only from about 300k elements for RMSProp's 11 passes (a hand-off to a worker thread
    and back costs about 0.1 ms on this VM: 200k float32 took 0.32 ms on one thread and
    0.36 split over two).

    Each new value is written into the stored array itself when nothing else holds it
    (``reusable``: no reader, fetch or view, so no one can see it change), into a new array
    otherwise. An update therefore writes a new array only after it read the old one at the
    same positions, and keeps its temporaries in ``t`` and ``u``.
    """
    xp = ctx.xp
    shape = grad.shape
    check_slots(ctx, slots, shape)
    refs = (var,) + slots
    size = grad.size
    if size * dtype.itemsize <= SMALL_BYTES:  # new arrays from malloc's free lists: cheaper
        news = [xp.empty(shape, dtype=dtype) for _ in refs]
        scratch = (xp.empty(size, dtype=dtype), xp.empty(size, dtype=dtype))
    else:
        news = []
        for ref in refs:
            array = ref.reusable()
            if (array is None or array.shape != shape or array.dtype != dtype
                    or not array.flags.c_contiguous):
                array = xp.empty(shape, dtype=dtype)
            news.append(array)
        scratch = None
    flat = [a.reshape(-1) for a in [ref.read() for ref in refs] + [grad] + news]
    block = block or BLOCK
    if size <= block:  # one block, on this thread: no chunking (for_batch would not split)
        update(*flat, *(scratch or _scratch(xp, dtype, size)))
    else:
        def chunk(start, stop):
            for begin in range(start, stop, block):
                end = min(begin + block, stop)
                update(*(a[begin:end] for a in flat), *_scratch(xp, dtype, end - begin))
        try:
            intra_op.for_batch(ctx, size, per_item_ops, chunk, len(flat) * dtype.itemsize,
                               atomic=True)
        finally:
            # A hand-off no worker picked up keeps ``chunk`` queued for a while: it must not
            # keep views of the stored arrays (they would stop the next step updating in place).
            flat.clear()
    flat = None
    for ref, new in zip(slots, news[1:]):
        ref.assign(new, fresh=True)
    # The new value has the shape the variable holds already.
    return var.assign(news[0], validate_shape=False, fresh=True)


@register_kernel("ApplyMomentum")
@sigint_hold.whole
def _apply_momentum(ctx, var, accum, lr, grad, momentum):
    xp = ctx.xp
    dtype = _dtype_of(ctx, var, grad)
    lr, momentum = scalar_of(lr, dtype), scalar_of(momentum, dtype)
    nesterov = ctx.attrs["use_nesterov"]
    if _compiles(ctx, dtype, grad):
        return (compiled_apply(ctx, var, (accum,), grad, dtype, _momentum_loop,
                               (lr, momentum, bool(nesterov))),)

    def update(x, a0, g, x1, a1, t, u):
        xp.multiply(a0, momentum, out=a1)
        a1 += g                                   # accum * momentum + grad
        if nesterov:                              # value - (grad * lr + accum * momentum * lr)
            xp.multiply(g, lr, out=t)
            xp.multiply(a1, momentum, out=u)
            u *= lr
            t += u
            xp.subtract(x, t, out=x1)
        else:                                     # value - lr * accum
            xp.multiply(a1, lr, out=t)
            xp.subtract(x, t, out=x1)
    return (_dense_apply(ctx, var, (accum,), grad, dtype, 2, update),)


@register_kernel("ApplyAdam")
@sigint_hold.whole
def _apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    xp = ctx.xp
    dtype = _dtype_of(ctx, var, grad)
    beta1, beta2 = scalar_of(beta1, dtype), scalar_of(beta2, dtype)
    one = dtype.type(1)
    lr_t = scalar_of(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), dtype)
    epsilon = scalar_of(epsilon, dtype)
    nesterov = ctx.attrs["use_nesterov"]
    if _compiles(ctx, dtype, grad):
        return (compiled_apply(ctx, var, (m, v), grad, dtype, _adam_loop, (
            beta1, one - beta1, one - beta2, lr_t, epsilon, bool(nesterov))),)

    def update(x, m0, v0, g, x1, m1, v1, t, u):
        xp.subtract(g, m0, out=t)
        t *= one - beta1
        xp.add(m0, t, out=m1)                      # m + (grad - m) * (1 - beta1)
        xp.square(g, out=t)
        t -= v0
        t *= one - beta2
        xp.add(v0, t, out=v1)                      # v + (grad^2 - v) * (1 - beta2)
        if nesterov:                               # step = m * beta1 + (1 - beta1) * grad
            xp.multiply(m1, beta1, out=u)
            xp.multiply(g, one - beta1, out=t)
            u += t
            u *= lr_t
        else:
            xp.multiply(m1, lr_t, out=u)           # lr_t * step / (sqrt(v) + epsilon)
        xp.sqrt(v1, out=t)
        t += epsilon
        u /= t
        xp.subtract(x, u, out=x1)
    return (_dense_apply(ctx, var, (m, v), grad, dtype, 5, update),)


@register_kernel("ApplyAdagrad")
@sigint_hold.whole
def _apply_adagrad(ctx, var, accum, lr, grad):
    xp, dtype = ctx.xp, _dtype_of(ctx, var, grad)
    lr = scalar_of(lr, dtype)

    def update(x, a0, g, x1, a1, t, u):
        xp.square(g, out=t)
        xp.add(t, a0, out=a1)                      # accum + grad^2
        xp.multiply(g, lr, out=t)                  # value - lr * grad / sqrt(accum)
        xp.sqrt(a1, out=u)
        t /= u
        xp.subtract(x, t, out=x1)
    return (_dense_apply(ctx, var, (accum,), grad, dtype, 2, update),)


@register_kernel("ApplyRMSProp")
@sigint_hold.whole
def _apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = _read(ctx, var, grad)
    dtype = value.dtype
    one = dtype.type(1)
    rho, lr, momentum, epsilon = [scalar_of(s, dtype) for s in (rho, lr, momentum, epsilon)]
    if _compiles(ctx, dtype, grad):
        del value
        return (compiled_apply(ctx, var, (ms, mom), grad, dtype, rms_prop_loop,
                               (one - rho, lr, momentum, epsilon)),)
    if grad.ndim and grad.size * dtype.itemsize <= SMALL_BYTES:
        ms0, mom0 = ms.read(), mom.read()
        if (ms0.shape == mom0.shape == grad.shape
                and ms0.dtype == mom0.dtype == grad.dtype == dtype):
            # Small: the same eleven operations in the same order on whole arrays, without
            # the blocks' machinery (RMSProp on 256 float32: 8.2 us a call against 11.7).
            t = xp.square(grad)
            t -= ms0
            t *= one - rho
            ms1 = xp.add(ms0, t)
            xp.add(ms1, epsilon, out=t)
            xp.sqrt(t, out=t)
            u = xp.multiply(grad, lr)
            u /= t
            mom1 = xp.multiply(mom0, momentum)
            mom1 += u
            ms.assign(ms1, fresh=True)
            mom.assign(mom1, fresh=True)
            return (var.assign(xp.subtract(value, mom1), validate_shape=False, fresh=True),)
    del value  # (no reference held: the blocked form may update the stored array in place)

    def update(x, ms0, mom0, g, x1, ms1, mom1, t, u):
        xp.square(g, out=t)
        t -= ms0
        t *= one - rho
        xp.add(ms0, t, out=ms1)                    # ms + (grad^2 - ms) * (1 - rho)
        xp.add(ms1, epsilon, out=t)
        xp.sqrt(t, out=t)
        xp.multiply(g, lr, out=u)
        u /= t                                     # lr * grad / sqrt(ms + epsilon)
        xp.multiply(mom0, momentum, out=mom1)
        mom1 += u                                  # + mom * momentum
        xp.subtract(x, mom1, out=x1)
    return (_dense_apply(ctx, var, (ms, mom), grad, dtype, 4, update),)


@register_kernel("ApplyCenteredRMSProp")
@sigint_hold.whole
def _apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    dtype = _dtype_of(ctx, var, grad)
    one = dtype.type(1)
    rho, lr, momentum, epsilon = (scalar_of(s, dtype) for s in (rho, lr, momentum, epsilon))

    def update(x, mg0, ms0, mom0, g, x1, mg1, ms1, mom1, t, u):
        xp.square(g, out=t)
        t -= ms0
        t *= one - rho
        xp.add(ms0, t, out=ms1)                    # ms + (grad^2 - ms) * (1 - rho)
        xp.subtract(g, mg0, out=t)
        t *= one - rho
        xp.add(mg0, t, out=mg1)                    # mg + (grad - mg) * (1 - rho)
        xp.square(mg1, out=t)
        xp.subtract(ms1, t, out=t)
        t += epsilon
        xp.sqrt(t, out=t)                          # sqrt(ms - mg^2 + epsilon)
        xp.multiply(g, lr, out=u)
        u /= t
        xp.multiply(mom0, momentum, out=mom1)
        mom1 += u
        xp.subtract(x, mom1, out=x1)
    return (_dense_apply(ctx, var, (mg, ms, mom), grad, dtype, 5, update),)


# -- compiled loops (kernels/jit.py): one pass, in place ----------------------------------------
# Each loop takes its chunk as slices and indexes them from 0: an index from ``range(start,
# stop)`` may be negative for all numba knows, and its wraparound test per access stops LLVM
# vectorizing (RMSProp on 200k float32: 0.83-0.99 ms so, 0.15 over slices). Each array is
# read and written at the same index only (in place: the variable and its slots), which LLVM
# proves safe; separate output arrays would need more runtime alias checks than it makes.
# Element-operations per element of a compiled apply, for ``for_batch``'s split threshold: one
# pass runs RMSProp at ~0.7 ns an element on one core, the pace of numpy's simplest loops.
LOOP_WORK = 1


@jit.loop
def rms_prop_loop(x, ms, mom, g, rho1, lr, momentum, epsilon, start, stop):
    x, ms, mom, g = x[start:stop], ms[start:stop], mom[start:stop], g[start:stop]
    for i in range(x.shape[0]):
        gi = g[i]
        ms0 = ms[i]
        ms1 = ms0 + (gi * gi - ms0) * rho1        # ms + (grad^2 - ms) * (1 - rho)
        ms[i] = ms1
        mom1 = mom[i] * momentum + gi * lr / np.sqrt(ms1 + epsilon)
        mom[i] = mom1
        x[i] = x[i] - mom1


@jit.loop
def _adam_loop(x, m, v, g, beta1, beta1c, beta2c, lr_t, epsilon, nesterov, start, stop):
    x, m, v, g = x[start:stop], m[start:stop], v[start:stop], g[start:stop]
    for i in range(x.shape[0]):
        gi, m0, v0 = g[i], m[i], v[i]
        m1 = m0 + (gi - m0) * beta1c              # m + (grad - m) * (1 - beta1)
        m[i] = m1
        v1 = v0 + (gi * gi - v0) * beta2c         # v + (grad^2 - v) * (1 - beta2)
        v[i] = v1
        if nesterov:
            step = (m1 * beta1 + gi * beta1c) * lr_t
        else:
            step = m1 * lr_t
        x[i] = x[i] - step / (np.sqrt(v1) + epsilon)


@jit.loop
def _momentum_loop(x, a, g, lr, momentum, nesterov, start, stop):
    x, a, g = x[start:stop], a[start:stop], g[start:stop]
    for i in range(x.shape[0]):
        gi = g[i]
        a1 = a[i] * momentum + gi
        a[i] = a1
        if nesterov:                              # value - (grad * lr + accum * momentum * lr)
            x[i] = x[i] - (gi * lr + a1 * momentum * lr)
        else:
            x[i] = x[i] - a1 * lr


def in_place(ctx, ref, shape, dtype):
    """``ref``'s value as a C-contiguous array of ``dtype`` that a compiled loop may update
    in place: the stored array when ``reusable``, else a copy (no reader sees it change)."""
    array = ref.reusable()
    if (array is None or array.shape != shape or array.dtype != dtype
            or not array.flags.c_contiguous):
        value = ref.read()
        if value.shape != shape:
            raise errors.InvalidArgumentError(
                None, ctx.name, f"{ctx.type}: slot {ref.name} has shape {list(value.shape)} "
                f"but the gradient has shape {list(shape)}")
        array = np.array(value, dtype=dtype, order="C")
    return array


def loop_gradient(grad, dtype):
    """``grad`` flattened, C-contiguous in ``dtype`` and read-only, as a compiled loop takes
    it: one signature a dtype (``_preload`` compiled it), whatever the gradient's flags."""
    g = grad.reshape(-1)
    if g.dtype != dtype or not g.flags.c_contiguous:
        g = np.ascontiguousarray(g, dtype=dtype)
    if g.flags.writeable:
        g = g.view()
        g.flags.writeable = False
    return g


def compiled_apply(ctx, var, slots, grad, dtype, loop, scalars):
    """``loop(x, *slots, g, *scalars, start, stop)`` over the flattened arrays, updating the
    variable's and the slots' arrays in place (``in_place``), split over the intra-op
    threads when large (one loop call a chunk, the GIL released); assigns the new values and
    returns the variable's. The gradient goes in as a read-only view: one signature a dtype
    (``_preload`` compiled it), whatever the gradient's flags."""
    check_slots(ctx, slots, grad.shape)
    refs = (var,) + slots
    news = [in_place(ctx, ref, grad.shape, dtype) for ref in refs]
    g = loop_gradient(grad, dtype)
    flat = [a.reshape(-1) for a in news] + [g]
    size = g.size
    if size * LOOP_WORK < intra_op.MIN_SPLIT_WORK:
        loop(*flat, *scalars, 0, size)
    else:
        try:
            intra_op.for_batch(ctx, size, LOOP_WORK,
                               lambda start, stop: loop(*flat, *scalars, start, stop),
                               atomic=True)
        finally:
            flat.clear()  # (see ``_dense_apply``: no view of a stored array kept queued)
    flat = g = None
    for ref, new in zip(slots, news[1:]):
        ref.assign(new, fresh=True)
    return var.assign(news[0], validate_shape=False, fresh=True)


def _compiles(ctx, dtype, grad):
    """Whether an apply of a variable of ``dtype`` takes its compiled loop: on CPU, a float32
    or float64 gradient of that dtype, loops available (``jit.usable``)."""
    return grad.dtype == dtype and jit.usable(ctx, grad)


def _warm_calls(dtype):
    """Each apply's loop called on tiny arrays of ``dtype`` with the argument types the
    kernels pass (the gradient a read-only view)."""
    one = dtype.type(1)
    arrays = [np.zeros(2, dtype) for _ in range(3)]
    g = np.ones(2, dtype)
    g.flags.writeable = False
    return {"ApplyRMSProp": lambda: rms_prop_loop(*arrays, g, *[one] * 4, 0, 2),
            "ApplyAdam": lambda: _adam_loop(*arrays, g, *[one] * 5, False, 0, 2),
            "ApplyMomentum": lambda: _momentum_loop(*arrays[:2], g, one, one, False, 0, 2)}


_warms = {}  # (op type, dtype) -> the warm function jit.preload keeps track of


def _preload(ctx):
    """Prepare hook: compile (or load from numba's disk cache: ~0.08 s a loop here, against
    ~0.35 s to compile) the loop of this node's op type and dtype on a worker thread before
    the first step (``jit.preload``); None for a dtype no loop takes and on a GPU (CuPy's
    arrays: the numpy forms run there)."""
    return preload_loop(ctx, ctx.type)


def preload_loop(ctx, op_type):
    """``_preload`` for the loop of ``op_type`` (a key of ``_warm_calls``) at this node's
    dtype: also for a fused node that runs that apply (kernels/matmul_apply.py)."""
    dtype = ctx.output_dtypes[0]
    if getattr(ctx, "xp", np) is not np or dtype not in jit.SUPPORTED:
        return None
    key = (op_type, np.dtype(dtype))
    warm = _warms.get(key)
    if warm is None:
        def warm():
            _warm_calls(key[1])[key[0]]()
        warm = _warms.setdefault(key, warm)
    return jit.preload(warm)


for _type in ("ApplyRMSProp", "ApplyAdam", "ApplyMomentum"):
    register_prepare(_type)(_preload)


@register_kernel("ApplyFtrlV2")
@sigint_hold.whole
def _apply_ftrl(ctx, var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
    value = _read(ctx, var, grad)
    new_var, new_accum, new_linear = _ftrl_rule(ctx.xp, value, accum.read(), linear.read(),
                                                grad, lr, l1, l2, l2_shrinkage, lr_power)
    accum.assign(new_accum, fresh=True)
    linear.assign(new_linear, fresh=True)
    return (var.assign(new_var, fresh=True),)


def _ftrl_rule(xp, value, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
    """TF1's FTRL-Proximal step (``ApplyFtrlV2``): new (var, accum, linear)."""
    lr, l1, l2 = scalar_of(lr, value), scalar_of(l1, value), scalar_of(l2, value)
    shrinkage, power = scalar_of(l2_shrinkage, value), scalar_of(lr_power, value)
    shrunk = grad + 2 * shrinkage * value
    new_accum = accum + grad * grad
    if float(power) == -0.5:
        root_new, root_old = xp.sqrt(new_accum), xp.sqrt(accum)
    else:
        root_new, root_old = new_accum ** -power, accum ** -power
    new_linear = linear + shrunk - (root_new - root_old) / lr * value
    quadratic = root_new / lr + 2 * l2
    shrunk_var = (xp.sign(new_linear) * l1 - new_linear) / quadratic
    new_var = xp.where(xp.abs(new_linear) > l1, shrunk_var, xp.zeros_like(shrunk_var))
    return new_var.astype(value.dtype), new_accum, new_linear
