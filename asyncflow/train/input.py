"""Input pipelines built from queues and queue runners (TF1's ``tf.train`` input functions).

A pipeline is a chain of queues, each filled by a QueueRunner registered in the graph's
QUEUE_RUNNERS collection and run by ``start_queue_runners``:

    filenames = af.train.string_input_producer(files, num_epochs=2)   # a filename queue
    key, line = af.TextLineReader().read(filenames)                  # one record per run
    lines = af.train.batch([line], batch_size=32)                     # a batching queue

- ``input_producer`` enqueues a tensor's rows again and again, reshuffled each pass when
  ``shuffle``; with ``num_epochs`` a local-variable counter (``limit_epochs``) fails with
  OutOfRangeError after that many passes, the runner then closes the queue, and its readers
  drain it and fail with OutOfRangeError too: the end of input travels down the chain.
  ``num_epochs`` needs ``af.local_variables_initializer()`` to run first, as in TF1.
- ``batch``/``shuffle_batch`` put examples (or, with ``enqueue_many``, batches of them) into
  a FIFOQueue/RandomShuffleQueue from ``num_threads`` runner tasks and return a
  ``dequeue_many(batch_size)`` (``dequeue_up_to`` with ``allow_smaller_final_batch``).
  ``tensors`` may be a list or a dict; the result has the same form.
"""
from __future__ import annotations

import numpy as np

from asyncflow import dtypes as _dtypes
from asyncflow.graph import GraphKeys
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor, static_value
from asyncflow.ops.control import control_dependencies
from asyncflow.ops.data_flow import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue
from asyncflow.ops.data_flow import count_up_to, random_shuffle
from asyncflow.ops.sources import range as _range
from asyncflow.ops.state import Variable
from asyncflow.train.queue_runner import QueueRunner, add_queue_runner


def limit_epochs(tensor, num_epochs=None, name=None):
    """``tensor``, but only ``num_epochs`` times: the next run fails with OutOfRangeError.

    Raises:
        ValueError: if ``num_epochs`` is not positive.
    """
    if num_epochs is None:
        return tensor
    if num_epochs <= 0:
        raise ValueError(f"limit_epochs: num_epochs must be > 0, got {num_epochs}")
    tensor = as_tensor(tensor)
    with tensor.graph.name_scope(name or "limit_epochs"):
        counter = Variable(np.int64(0), trainable=False, name="epochs",
                           collections=[GraphKeys.LOCAL_VARIABLES])
        counted = count_up_to(counter, num_epochs)
        with control_dependencies([counted]):
            return identity(tensor)


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None,
                   capacity=32, shared_name=None, summary_name=None, name=None, cancel_op=None):
    """A FIFOQueue fed with the rows of ``input_tensor`` by a QueueRunner.

    Args:
        input_tensor: a tensor of rank >= 1; its rows are the elements.
        element_shape: the rows' shape (default: from ``input_tensor``; must be known).
        num_epochs: pass over the rows this many times, then close (None: forever).
        shuffle: shuffle the rows anew on every pass.
        seed: the shuffle's op seed.
        capacity, shared_name: the queue's.
        summary_name, name: names (summary_name is accepted for TF1 compatibility).
        cancel_op: the runner's cancel op (default: closing the queue with cancellation).

    Returns:
        The queue.

    Raises:
        ValueError: if the element shape is not fully known.
    """
    input_tensor = as_tensor(input_tensor)
    graph = input_tensor.graph
    with graph.name_scope(name or "input_producer"):
        shape = input_tensor.shape[1:] if element_shape is None else as_shape(element_shape)
        if not shape.is_fully_defined():
            raise ValueError(f"input_producer: the element shape of {input_tensor.name} must be "
                             f"fully defined, got {shape}; pass element_shape=")
        if shuffle:
            input_tensor = random_shuffle(input_tensor, seed=seed)
        input_tensor = limit_epochs(input_tensor, num_epochs)
        queue = FIFOQueue(capacity, [input_tensor.dtype], shapes=[shape],
                          shared_name=shared_name, name="fifo_queue")
        enqueue = queue.enqueue_many([input_tensor])
        add_queue_runner(QueueRunner(queue, [enqueue], cancel_op=cancel_op))
        return queue


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None, capacity=32,
                          shared_name=None, name=None, cancel_op=None):
    """A queue of filenames (or any strings) for readers, see ``input_producer``.

    Raises:
        ValueError: if ``string_tensor`` is a constant with no elements.
    """
    if not hasattr(string_tensor, "op"):
        values = np.asarray(string_tensor, dtype=object)
        if values.size == 0:
            raise ValueError("string_input_producer requires a non-null input tensor")
        string_tensor = as_tensor([v.encode() if isinstance(v, str) else v
                                   for v in values.ravel()], dtype=_dtypes.string)
    string_tensor = as_tensor(string_tensor)
    if not string_tensor.dtype.is_string:
        raise TypeError(f"string_input_producer needs strings, got {string_tensor.dtype.name}")
    return input_producer(string_tensor, TensorShape([]), num_epochs, shuffle, seed, capacity,
                          shared_name, name=name or "input_producer", cancel_op=cancel_op)


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32,
                         shared_name=None, name=None):
    """A queue of the integers ``0 .. limit-1``, see ``input_producer``."""
    return input_producer(_range(limit), TensorShape([]), num_epochs, shuffle, seed, capacity,
                          shared_name, name=name or "input_producer")


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32,
                         shared_name=None, name=None):
    """TF1's ``tf.train.slice_input_producer``: one row (slice along the first axis) of every
    tensor of ``tensor_list`` at a time, the same row of each, from a producer of row indices.

    Raises:
        ValueError: for an empty list or a first dimension that is not known.
    """
    from asyncflow.ops.indexing import gather
    tensors = [as_tensor(t) for t in tensor_list]
    if not tensors:
        raise ValueError("slice_input_producer: expected at least one tensor")
    rows = tensors[0].shape.dims[0] if tensors[0].shape.ndims else None
    if rows is None:
        raise ValueError("slice_input_producer: the first dimension of the first tensor must "
                         f"be known, got shape {tensors[0].shape}")
    index = range_input_producer(rows, num_epochs, shuffle, seed, capacity, shared_name,
                                 name=name or "input_producer").dequeue()
    return [gather(t, index) for t in tensors]


def _flatten(tensors):
    """``(list of tensors, names or None, how to rebuild)``."""
    if isinstance(tensors, dict):
        names = sorted(tensors)
        return [as_tensor(tensors[n]) for n in names], names, "dict"
    if isinstance(tensors, (list, tuple)):
        return [as_tensor(t) for t in tensors], None, "list"
    return [as_tensor(tensors)], None, "single"


def _element_shapes(tensor_list, shapes, enqueue_many, dynamic_pad, where):
    if shapes is not None:
        shapes = [as_shape(s) for s in shapes]
    else:
        shapes = [t.shape[1:] if enqueue_many else t.shape for t in tensor_list]
    for tensor, shape in zip(tensor_list, shapes):
        if dynamic_pad:
            if shape.ndims is None:
                raise ValueError(f"{where}: {tensor.name} needs a known rank for dynamic_pad")
        elif not shape.is_fully_defined():
            raise ValueError(f"{where}: all shapes must be fully defined, {tensor.name} has "
                             f"{shape}; pass shapes= or use dynamic_pad=True")
    return shapes


def _build_batch(queue, tensor_list, names, form, batch_size, num_threads, enqueue_many,
                 allow_smaller_final_batch):
    vals = dict(zip(names, tensor_list)) if names is not None else tensor_list
    enqueue = queue.enqueue_many(vals) if enqueue_many else queue.enqueue(vals)
    add_queue_runner(QueueRunner(queue, [enqueue] * max(1, int(num_threads))))
    if allow_smaller_final_batch:
        out = queue.dequeue_up_to(batch_size, name="batch")
    else:
        out = queue.dequeue_many(batch_size, name="batch")
    if form == "list" and not isinstance(out, list):
        return [out]
    return out


def _check_batch_size(batch_size, where):
    value = static_value(batch_size) if hasattr(batch_size, "op") else batch_size
    if value is not None and int(value) < 1:
        raise ValueError(f"{where}: batch_size must be >= 1, got {value}")


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None,
          dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``tensors``, filled by ``num_threads`` runner tasks through a FIFOQueue.

    Args:
        tensors: a tensor, a list or a dict of tensors (one example, or a batch of them
            with ``enqueue_many``).
        batch_size: examples per batch.
        num_threads: concurrent enqueue tasks.
        capacity: the queue's capacity.
        enqueue_many: ``tensors`` are batches whose rows are examples.
        shapes: the examples' shapes (default: the tensors' own; must be known unless
            ``dynamic_pad``).
        dynamic_pad: pad examples of varying shape (a PaddingFIFOQueue).
        allow_smaller_final_batch: the last batch may be smaller when the input ends.
        shared_name, name: the queue's shared name; the name scope.

    Returns:
        Batched tensors in the form of ``tensors``.

    Raises:
        ValueError: on unknown shapes or a bad batch size.
    """
    tensor_list, names, form = _flatten(tensors)
    _check_batch_size(batch_size, "batch")
    with tensor_list[0].graph.name_scope(name or "batch"):
        shapes = _element_shapes(tensor_list, shapes, enqueue_many, dynamic_pad, "batch")
        queue_cls = PaddingFIFOQueue if dynamic_pad else FIFOQueue
        queue = queue_cls(capacity, [t.dtype for t in tensor_list], shapes=shapes, names=names,
                          shared_name=shared_name, name="fifo_queue" if not dynamic_pad
                          else "padding_fifo_queue")
        return _build_batch(queue, tensor_list, names, form, batch_size, num_threads,
                            enqueue_many, allow_smaller_final_batch)


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None,
                  enqueue_many=False, shapes=None, allow_smaller_final_batch=False,
                  shared_name=None, name=None):
    """Shuffled batches of ``tensors``, through a RandomShuffleQueue.

    Args:
        min_after_dequeue: how many examples stay in the queue to mix with (more: better
            shuffling, slower start).
        seed: the queue's op seed.
        the rest: as for ``batch``.

    Returns:
        Batched tensors in the form of ``tensors``.

    Raises:
        ValueError: on unknown shapes, a bad batch size, or ``min_after_dequeue`` not below
            ``capacity``.
    """
    tensor_list, names, form = _flatten(tensors)
    _check_batch_size(batch_size, "shuffle_batch")
    with tensor_list[0].graph.name_scope(name or "shuffle_batch"):
        shapes = _element_shapes(tensor_list, shapes, enqueue_many, False, "shuffle_batch")
        queue = RandomShuffleQueue(capacity, min_after_dequeue, [t.dtype for t in tensor_list],
                                   shapes=shapes, names=names, seed=seed,
                                   shared_name=shared_name, name="random_shuffle_queue")
        return _build_batch(queue, tensor_list, names, form, batch_size, num_threads,
                            enqueue_many, allow_smaller_final_batch)
