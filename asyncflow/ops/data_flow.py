"""Queues as graph ops (TF1's data_flow_ops): FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue.

A queue op (``FIFOQueue``, ...) outputs a *reference* to a queue resource held in the
session's (or, with ``shared_name``, the process's) resource manager, the way ``VariableV2``
outputs a variable reference. Every access op takes that reference as input 0 (a
``ref_input``) and is colocated with the queue: ``QueueEnqueue``/``QueueEnqueueMany`` and
``QueueDequeue``/``QueueDequeueMany``/``QueueDequeueUpTo`` may wait, and run as async kernels
that park on the resource (``exec/queues.py``) without blocking a thread or the loop;
``QueueClose``, ``QueueSize`` and ``QueueIsClosed`` never wait.

An element is a tuple of components with fixed dtypes (checked at build time) and optional
shapes (checked at build time when known, at run time otherwise). With ``names`` the
components are addressed by name: ``enqueue`` takes a dict and ``dequeue`` returns one.

Also here, for input pipelines: ``CountUpTo`` (a counter variable that fails with
OutOfRangeError at its limit, which is how epochs end) and ``RandomShuffle`` (a permutation
along the first dimension).
"""
from __future__ import annotations

from asyncflow import dtypes as _dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.graph import Tensor
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops.construct import as_tensor, make, make_op, seeds, static_value

_HANDLE = (_dtypes.string, TensorShape([]))
_QUEUE_TYPES = ("FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue")


def _component_shapes(op):
    shapes = op.get_attr("shapes") or ()
    types = op.get_attr("component_types")
    return shapes if shapes else tuple(TensorShape(None) for _ in types)


def _infer_queue(op):
    return [_HANDLE]


def _infer_nothing(op):
    return []


def _infer_dequeue(op):
    return list(zip(op.get_attr("component_types"), _component_shapes(op)))


def _infer_dequeue_many(op):
    n = static_value(op.inputs[1]) if op.type == "QueueDequeueMany" else None
    batch = TensorShape([None if n is None else int(n)])
    return [(dtype, batch.concatenate(shape))
            for dtype, shape in zip(op.get_attr("component_types"), _component_shapes(op))]


def _infer_scalar(dtype):
    return lambda op: [(dtype, TensorShape([]))]


for _type in _QUEUE_TYPES:
    register_op(_type, infer=_infer_queue, stateful=True, ref_outputs=(0,))
register_op("QueueEnqueue", infer=_infer_nothing, stateful=True, ref_inputs=(0,))
register_op("QueueEnqueueMany", infer=_infer_nothing, stateful=True, ref_inputs=(0,))
register_op("QueueDequeue", infer=_infer_dequeue, stateful=True, ref_inputs=(0,))
register_op("QueueDequeueMany", infer=_infer_dequeue_many, stateful=True, ref_inputs=(0,))
register_op("QueueDequeueUpTo", infer=_infer_dequeue_many, stateful=True, ref_inputs=(0,))
register_op("QueueClose", infer=_infer_nothing, stateful=True, ref_inputs=(0,))
register_op("QueueSize", infer=_infer_scalar(_dtypes.int32), stateful=True, ref_inputs=(0,))
register_op("QueueIsClosed", infer=_infer_scalar(_dtypes.bool), stateful=True, ref_inputs=(0,))


def _normalize(dtypes, shapes, names):
    if not isinstance(dtypes, (list, tuple)):
        dtypes = [dtypes]
    dtypes = tuple(_dtypes.as_dtype(d) for d in dtypes)
    if shapes is not None:
        # TF1's _as_shape_list: a list of dims (ints or None; ``()`` too) is one component's
        # shape given bare, so ``FIFOQueue(10, float32, ())`` holds scalars.
        if isinstance(shapes, TensorShape) or (
                isinstance(shapes, (list, tuple)) and
                all(d is None or isinstance(d, int) for d in shapes) and
                not (len(dtypes) > 1 and len(shapes) == len(dtypes) and
                     all(d is None for d in shapes))):
            shapes = [shapes]
        shapes = tuple(as_shape(s) for s in shapes)
        if len(shapes) != len(dtypes):
            raise ValueError(f"Queue shapes must have the same length as dtypes: got "
                             f"{len(shapes)} shapes for {len(dtypes)} dtypes")
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        if len(names) != len(dtypes):
            raise ValueError(f"Queue names must have the same length as dtypes: got "
                             f"{len(names)} names for {len(dtypes)} dtypes")
    return dtypes, shapes, names


class QueueBase:
    """The methods every queue has; each builds ops in the queue's graph.

    Args:
        dtypes: the components' dtypes.
        shapes: the components' shapes (TensorShapes) or None.
        names: component names or None.
        queue_ref: the queue op's output (a reference to the queue resource).
    """

    def __init__(self, dtypes, shapes, names, queue_ref):
        self._dtypes = dtypes
        self._shapes = shapes
        self._names = names
        self._queue_ref = queue_ref

    queue_ref = property(lambda self: self._queue_ref)
    name = property(lambda self: self._queue_ref.op.name)
    dtypes = property(lambda self: list(self._dtypes))
    names = property(lambda self: None if self._names is None else list(self._names))

    @property
    def shapes(self):
        if self._shapes is None:
            return [TensorShape(None) for _ in self._dtypes]
        return list(self._shapes)

    @property
    def graph(self):
        return self._queue_ref.graph

    def _base_name(self, suffix):
        return f"{self.name.rsplit('/', 1)[-1]}_{suffix}"

    def _access(self, op_type, inputs, attrs, name, suffix):
        with self.graph.colocate_with(self._queue_ref.op):
            return make_op(op_type, (self._queue_ref,) + tuple(inputs), attrs,
                           name=name or self._base_name(suffix), graph=self.graph)

    def _components(self, vals, what):
        """``vals`` as tensors in component order, dtype-checked."""
        if self._names is not None:
            if not isinstance(vals, dict):
                raise ValueError(f"Queue {self.name} has names {self._names}: you must "
                                 f"enqueue a dictionary keyed by them, got "
                                 f"{type(vals).__name__} ({what})")
            if sorted(vals) != sorted(self._names):
                raise ValueError(f"Queue {self.name}: {what} keys {sorted(vals)} do not match "
                                 f"names of Queue {sorted(self._names)}")
            vals = [vals[n] for n in self._names]
        elif isinstance(vals, dict):
            raise ValueError(f"Queue {self.name} must have names to enqueue a dictionary "
                             f"({what} takes a list here)")
        elif not isinstance(vals, (list, tuple)):
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise ValueError(f"Queue {self.name}: {what} got {len(vals)} components, expected "
                             f"{len(self._dtypes)}")
        out = []
        for j, (value, dtype) in enumerate(zip(vals, self._dtypes)):
            try:
                out.append(as_tensor(value, dtype=dtype, name=f"component_{j}"))
            except TypeError as exc:
                raise TypeError(f"Queue {self.name}: {what} component {j}: {exc}") from None
        return out

    def _attrs(self):
        shapes = self._shapes if self._shapes is not None else ()
        return {"component_types": self._dtypes, "shapes": shapes}

    def _outputs(self, op):
        tensors = list(op.outputs)
        if self._names is not None:
            return dict(zip(self._names, tensors))
        return tensors[0] if len(tensors) == 1 else tensors

    # -- ops ----------------------------------------------------------------------------------
    def enqueue(self, vals, name=None):
        """An op adding one element; it waits while the queue is full.

        Raises:
            TypeError/ValueError: components of the wrong dtype, number or shape.
        """
        tensors = self._components(vals, "enqueue")
        for j, (tensor, shape) in enumerate(zip(tensors, self.shapes)):
            if not tensor.shape.is_compatible_with(shape):
                raise ValueError(f"Queue {self.name}: enqueue component {j} has shape "
                                 f"{tensor.shape}, incompatible with the queue's {shape}")
        return self._access("QueueEnqueue", tensors, None, name, "enqueue")

    def enqueue_many(self, vals, name=None):
        """An op adding the slices along dimension 0 of every component as elements."""
        tensors = self._components(vals, "enqueue_many")
        batch = TensorShape([None])
        for j, (tensor, shape) in enumerate(zip(tensors, self.shapes)):
            if tensor.shape.ndims == 0:
                raise ValueError(f"Queue {self.name}: enqueue_many component {j} is a scalar; "
                                 "it needs a leading batch dimension")
            full = TensorShape([None]).concatenate(shape) if shape.ndims is not None else None
            if full is not None and not tensor.shape.is_compatible_with(full):
                raise ValueError(f"Queue {self.name}: enqueue_many component {j} has shape "
                                 f"{tensor.shape}, incompatible with a batch of {shape}")
            if tensor.shape.ndims is not None:
                try:
                    batch = batch.merge_with(tensor.shape[:1])
                except ValueError:
                    raise ValueError(f"Queue {self.name}: enqueue_many components disagree on "
                                     f"the batch size ({batch} vs {tensor.shape[:1]})") from None
        return self._access("QueueEnqueueMany", tensors, None, name, "EnqueueMany")

    def dequeue(self, name=None):
        """One element (a tensor, a list, or a dict with names); waits while empty."""
        return self._outputs(self._access("QueueDequeue", (), self._attrs(), name, "Dequeue"))

    def dequeue_many(self, n, name=None):
        """``n`` elements stacked along a new dimension 0; waits for all of them."""
        n = as_tensor(n, dtype=_dtypes.int32, name="n")
        return self._outputs(self._access("QueueDequeueMany", (n,), self._attrs(), name,
                                          "DequeueMany"))

    def dequeue_up_to(self, n, name=None):
        """Like ``dequeue_many``, but once the queue is closed returns what remains."""
        n = as_tensor(n, dtype=_dtypes.int32, name="n")
        return self._outputs(self._access("QueueDequeueUpTo", (n,), self._attrs(), name,
                                          "DequeueUpTo"))

    def close(self, cancel_pending_enqueues=False, name=None):
        """An op closing the queue: new enqueues fail; dequeues drain it, then fail."""
        return self._access("QueueClose", (), {"cancel_pending_enqueues":
                                               bool(cancel_pending_enqueues)}, name, "Close")

    def is_closed(self, name=None):
        return self._access("QueueIsClosed", (), None, name, "IsClosed").outputs[0]

    def size(self, name=None):
        """The number of elements in the queue (an int32 scalar)."""
        return self._access("QueueSize", (), None, name, "Size").outputs[0]


def _make_queue(op_type, dtypes, shapes, attrs, shared_name, name):
    attrs.update({"component_types": dtypes, "shapes": shapes or (), "container": "",
                  "shared_name": shared_name or ""})
    capacity = attrs["capacity"]
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity == 0:
        raise ValueError(f"{op_type} {name}: capacity must be a positive int (negative: "
                         f"unbounded, as in TF1), got {capacity!r}")
    return make(op_type, (), attrs, name=name)


class FIFOQueue(QueueBase):
    """A queue handing out elements in the order they were enqueued.

    Args:
        capacity: the most elements it holds; enqueues wait beyond it. Negative: unbounded.
        dtypes: a dtype or a list, one per component.
        shapes: the components' shapes (needed by ``dequeue_many``), or None.
        names: component names (enqueue takes, dequeue returns a dict), or None.
        shared_name: share the queue by this name across sessions in the process.
        name: the op name.
    """

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None,
                 name="fifo_queue"):
        dtypes, shapes, names = _normalize(dtypes, shapes, names)
        ref = _make_queue("FIFOQueue", dtypes, shapes, {"capacity": capacity}, shared_name, name)
        super().__init__(dtypes, shapes, names, ref)


class RandomShuffleQueue(QueueBase):
    """A queue handing out a random element, only while more than ``min_after_dequeue`` remain
    (the floor is ignored once it is closed).

    Args:
        capacity, dtypes, shapes, names, shared_name, name: as for FIFOQueue.
        min_after_dequeue: the floor that keeps the mix well shuffled.
        seed: an op seed, combined with the graph seed as in TF1.
    """

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, names=None, seed=None,
                 shared_name=None, name="random_shuffle_queue"):
        dtypes, shapes, names = _normalize(dtypes, shapes, names)
        if min_after_dequeue < 0 or 0 <= capacity <= min_after_dequeue:
            raise ValueError(f"RandomShuffleQueue {name}: min_after_dequeue ({min_after_dequeue}) "
                             f"must be >= 0 and below capacity ({capacity})")
        seed1, seed2 = seeds(seed)
        ref = _make_queue("RandomShuffleQueue", dtypes, shapes, {
            "capacity": capacity, "min_after_dequeue": int(min_after_dequeue), "seed": seed1,
            "seed2": seed2}, shared_name, name)
        super().__init__(dtypes, shapes, names, ref)


class PaddingFIFOQueue(QueueBase):
    """A FIFOQueue whose ``dequeue_many`` pads components of varying shape with zeros
    (empty strings) to the largest in the batch.

    Args:
        shapes: required; a ``None`` dim may vary between elements, the rank may not.
        the rest: as for FIFOQueue.
    """

    def __init__(self, capacity, dtypes, shapes, names=None, shared_name=None,
                 name="padding_fifo_queue"):
        dtypes, shapes, names = _normalize(dtypes, shapes, names)
        if shapes is None or any(s.ndims is None for s in shapes):
            raise ValueError(f"PaddingFIFOQueue {name}: shapes must be given, each of known rank "
                             f"(use None for dims that vary), got {shapes}")
        ref = _make_queue("PaddingFIFOQueue", dtypes, shapes, {"capacity": capacity},
                          shared_name, name)
        super().__init__(dtypes, shapes, names, ref)


not_differentiable(*_QUEUE_TYPES, "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue",
                   "QueueDequeueMany", "QueueDequeueUpTo", "QueueClose", "QueueSize",
                   "QueueIsClosed")


# -- input-pipeline helpers -------------------------------------------------------------------
def _infer_count_up_to(op):
    ref = op.inputs[0]
    if not ref.is_ref or not ref.dtype.is_integer:
        raise TypeError(f"input must be an integer variable reference, got {ref.name} "
                        f"({ref.dtype.name})")
    return [(ref.dtype, TensorShape([]))]


def _infer_same(op):
    return [(op.inputs[0].dtype, op.inputs[0].shape)]


register_op("CountUpTo", infer=_infer_count_up_to, stateful=True, ref_inputs=(0,))
register_op("RandomShuffle", infer=_infer_same, stateful=True)
not_differentiable("CountUpTo", "RandomShuffle")


def count_up_to(ref, limit, name=None):
    """Increment an integer variable until ``limit``; returns the value before the increment.

    Running it once the variable has reached ``limit`` fails with OutOfRangeError.
    """
    ref = ref._ref() if hasattr(ref, "_ref") else ref
    if not isinstance(ref, Tensor) or not ref.is_ref:
        raise TypeError(f"count_up_to needs a Variable, got {ref!r}")
    with ref.graph.colocate_with(ref.op):
        return make("CountUpTo", (ref,), {"limit": int(limit)}, name, "CountUpTo")


def random_shuffle(value, seed=None, name=None):
    """``value`` with its slices along dimension 0 in a random order (new each run)."""
    value = as_tensor(value)
    seed1, seed2 = seeds(seed, value.graph)
    return make("RandomShuffle", (value,), {"seed": seed1, "seed2": seed2}, name,
                "RandomShuffle")
