"""Kernels of queues (see ops/data_flow.py); the queue itself is ``exec/queues.py``.

The queue op's kernel returns the queue resource (found or created through
``ctx.queue_resource()``). Access kernels receive it as input 0. The waiting ones are async
and await the resource's own methods, so they import no trio: the resource parks the task.

Kernels own the element format: an element is a tuple of read-only arrays, one per component.
``enqueue`` checks shapes against the queue's and freezes its components (a copy when the
caller could still change them, e.g. a fed array). ``enqueue_many`` hands a queue with fixed
shapes the whole batch as ``Rows`` (the queue copies it into its columnar storage, and its
``dequeue_many`` returns fresh ``Rows``: no work per element); for other queues it copies each
component once and splits it into row views, and ``dequeue_many`` stacks rows (padding them
first for a padding queue) into fresh arrays.
"""
from __future__ import annotations

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import (WOULD_BLOCK, register_kernel, register_nowait,
                                       register_prepare)

_QUEUE_TYPES = ("FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue")


def _queue(ctx):
    return (ctx.queue_resource(),)


def _queue_spec(ctx):  # the prepare hook: once per plan node, not per run
    return ctx.queue_spec()


for _type in _QUEUE_TYPES:
    register_kernel(_type, "CPU")(_queue)
    register_prepare(_type, "CPU")(_queue_spec)


def _frozen(array):
    array = np.asarray(array)
    if array.flags.writeable:
        array = array.copy()
        array.flags.writeable = False
    return array


def _shape_error(ctx, queue, j, expected, got, batch=None):
    """TF1's wording (users search for it): shapes as ``[2,3,3]``, batch size included."""
    def dims(shape):
        lead = [] if batch is None else [batch]
        return "[" + ",".join("?" if d is None else str(d) for d in lead + list(shape)) + "]"
    return errors.InvalidArgumentError(
        None, ctx.name, f"Shape mismatch in tuple component {j}. Expected {dims(expected)}, "
        f"got {dims(got)} (queue '{queue.name}')")


def _fits(expected, shape):
    return len(expected) == len(shape) and all(e is None or e == s
                                               for e, s in zip(expected, shape))


def _check_element(ctx, queue, components):
    shapes = queue.shapes
    if shapes is not None:
        for j, (component, expected) in enumerate(zip(components, shapes)):
            if expected is not None and not _fits(expected, component.shape):
                raise _shape_error(ctx, queue, j, expected, component.shape)


@register_kernel("QueueEnqueue", "CPU", is_async=True)
async def _enqueue(ctx, queue, *components):
    _check_element(ctx, queue, components)
    await queue.enqueue(tuple(_frozen(c) for c in components))
    return ()


def _split(ctx, queue, components):
    """The elements of a batch: ``Rows`` for a columnar queue (which copies them in), else
    row views of one frozen copy per component."""
    sizes = {c.shape[0] if c.ndim else None for c in components}
    if None in sizes or len(sizes) != 1:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"enqueue_many to queue '{queue.name}' needs components with one "
            f"common leading dimension, got shapes {[list(c.shape) for c in components]}")
    shapes = queue.shapes
    if shapes is not None:
        for j, (component, expected) in enumerate(zip(components, shapes)):
            if expected is not None and not _fits(expected, component.shape[1:]):
                raise _shape_error(ctx, queue, j, expected, component.shape[1:],
                                   batch=component.shape[0])
    if queue.columnar:
        return queue.rows(components)
    frozen = [_frozen(c) for c in components]
    if len(frozen) == 1:
        return [(row,) for row in frozen[0]]
    return list(zip(*frozen))


@register_kernel("QueueEnqueueMany", "CPU", is_async=True)
async def _enqueue_many(ctx, queue, *components):
    await queue.enqueue_many(_split(ctx, queue, components))
    return ()


@register_kernel("QueueDequeue", "CPU", is_async=True)
async def _dequeue(ctx, queue):
    return await queue.dequeue()


def _check_batchable(ctx, queue):
    if queue.kind == "PaddingFIFOQueue":
        return
    if queue.shapes is None or any(s is None or None in s for s in queue.shapes):
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{queue.kind} '{queue.name}': dequeue_many and dequeue_up_to "
            "require the components to have specified shapes; pass shapes= when creating "
            "the queue")


def _empty(ctx, queue, j):
    shape = queue.shapes[j]
    return np.zeros((0,) + tuple(0 if d is None else d for d in shape),
                    dtype=ctx.output_dtypes[j] or object)


def _pad_value(dtype):
    return b"" if dtype is None else 0


def _stack(ctx, queue, j, rows):
    """Component ``j`` of a PaddingFIFOQueue's rows, each padded to the largest. (Other queues
    batch only with fixed shapes, ``_check_batchable``, and those hand out ``Rows``.)"""
    dims = np.max([row.shape for row in rows], axis=0) if rows[0].ndim else ()
    out = np.full((len(rows),) + tuple(int(d) for d in dims), _pad_value(ctx.output_dtypes[j]),
                  dtype=ctx.output_dtypes[j] or object)
    for i, row in enumerate(rows):
        out[(i,) + tuple(slice(0, d) for d in row.shape)] = row
    return out


def _batch(ctx, queue, elements):
    count = len(ctx.output_dtypes)
    if not elements:
        return tuple(_empty(ctx, queue, j) for j in range(count))
    if queue.columnar:  # Rows: fresh arrays gathered by the queue
        return tuple(c if c.dtype == (ctx.output_dtypes[j] or object) else c.astype(
            ctx.output_dtypes[j] or object) for j, c in enumerate(elements.columns))
    return tuple(_stack(ctx, queue, j, [e[j] for e in elements]) for j in range(count))


def _count(ctx, n):
    n = int(n)
    if n < 0:
        raise errors.InvalidArgumentError(None, ctx.name, f"requested {n} elements; the "
                                          "number must be >= 0")
    return n


async def _take(queue, n, allow_small=False):
    # The executor runs this kernel as a task only after the nowait twin found too few
    # elements; by the time the task starts a runner may have enqueued them, and then
    # taking them at once saves the step a round of the scheduler (starting the task was
    # already a schedule point).
    return await queue.dequeue_many(n, allow_small, eager=True)


@register_kernel("QueueDequeueMany", "CPU", is_async=True)
async def _dequeue_many(ctx, queue, n):
    _check_batchable(ctx, queue)
    return _batch(ctx, queue, await _take(queue, _count(ctx, n)))


@register_kernel("QueueDequeueUpTo", "CPU", is_async=True)
async def _dequeue_up_to(ctx, queue, n):
    _check_batchable(ctx, queue)
    return _batch(ctx, queue, await _take(queue, _count(ctx, n), allow_small=True))


@register_kernel("QueueClose", "CPU")
def _close(ctx, queue):
    queue.close(cancel_pending_enqueues=ctx.attrs["cancel_pending_enqueues"])
    return ()


@register_kernel("QueueSize", "CPU")
def _size(ctx, queue):
    return (np.asarray(queue.size(), dtype=np.int32),)


@register_kernel("QueueIsClosed", "CPU")
def _is_closed(ctx, queue):
    return (np.asarray(queue.closed),)


# -- input-pipeline helpers -------------------------------------------------------------------
@register_kernel("CountUpTo", "CPU")
def _count_up_to(ctx, ref):
    value = ref.read()
    limit = ctx.attrs["limit"]
    if value >= limit:
        raise errors.OutOfRangeError(None, ctx.name, f"Reached limit of {limit}")
    ref.assign(np.asarray(value + 1, dtype=value.dtype))
    return (np.asarray(value),)


@register_kernel("RandomShuffle")
def _random_shuffle(ctx, value):
    if value.ndim == 0 or value.shape[0] < 2:
        return (value,)
    permutation = ctx.random_generator().permutation(value.shape[0])
    return (value[ctx.xp.asarray(permutation)],)


# Synchronous twins, tried inline first: a queue op that need not wait costs no task.
@register_nowait("QueueEnqueue", "CPU")
def _enqueue_nowait(ctx, queue, *components):
    _check_element(ctx, queue, components)
    added = queue.poll_enqueue_many((tuple(_frozen(c) for c in components),))
    return () if added else WOULD_BLOCK


@register_nowait("QueueEnqueueMany", "CPU")
def _enqueue_many_nowait(ctx, queue, *components):
    return () if queue.poll_enqueue_many(_split(ctx, queue, components)) else WOULD_BLOCK


@register_nowait("QueueDequeue", "CPU")
def _dequeue_nowait(ctx, queue):
    taken = queue.poll_dequeue_many(1)
    return WOULD_BLOCK if taken is None else taken[0]


@register_nowait("QueueDequeueMany", "CPU")
def _dequeue_many_nowait(ctx, queue, n):
    _check_batchable(ctx, queue)
    taken = queue.poll_dequeue_many(_count(ctx, n))
    return WOULD_BLOCK if taken is None else _batch(ctx, queue, taken)


@register_nowait("QueueDequeueUpTo", "CPU")
def _dequeue_up_to_nowait(ctx, queue, n):
    _check_batchable(ctx, queue)
    taken = queue.poll_dequeue_many(_count(ctx, n), allow_small=True)
    return WOULD_BLOCK if taken is None else _batch(ctx, queue, taken)
