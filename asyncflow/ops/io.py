"""Readers as graph ops (TF1's io_ops): files named in a queue turned into records.

A reader op (``TextLineReader``, ``NumpyRecordReader``) outputs a reference to a reader
resource (``exec/readers.py``), the way a queue op outputs a queue reference. ``read``
builds ``ReaderRead(reader, queue)``: it returns the next record and its key, dequeuing the
next filename from ``queue`` when the current file is used up; ``read_up_to`` builds
``ReaderReadUpTo``, which returns up to ``num_records`` records stacked along a new
dimension 0 (fewer only at the very end of the input). Both wait asynchronously (for a
filename, and for the file, read on a worker thread), so neither blocks the event loop.
When the filename queue is closed and drained they fail with OutOfRangeError: the normal end
of an input pipeline with ``num_epochs``.

- ``TextLineReader(skip_header_lines=None)``: a record is a line (string scalar), the key
  ``b"file:line"``.
- ``NumpyRecordReader(dtypes, shapes=None, names=None)``: a record is one row of a ``.npy``
  array, or of each array named in ``names`` of a ``.npz`` archive (one component per name;
  ``read`` then returns a dict), the key ``b"file:row"``.
"""
from __future__ import annotations

from asyncflow import dtypes as _dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape, as_shape
from asyncflow.ops.construct import as_tensor, make, make_op

_READER_TYPES = ("TextLineReader", "NumpyRecordReader")
_STRING_SCALAR = (_dtypes.string, TensorShape([]))


def _infer_reader(op):
    return [_STRING_SCALAR]


def _component_specs(op):
    shapes = op.get_attr("shapes") or tuple(TensorShape(None) for _ in op.get_attr("component_types"))
    return list(zip(op.get_attr("component_types"), shapes))


def _infer_read(op):
    return [_STRING_SCALAR] + _component_specs(op)


def _infer_read_up_to(op):
    batch = TensorShape([None])  # fewer than num_records at the end of the input
    return [(_dtypes.string, batch)] + [(dtype, batch.concatenate(shape))
                                        for dtype, shape in _component_specs(op)]


for _type in _READER_TYPES:
    register_op(_type, infer=_infer_reader, stateful=True, ref_outputs=(0,))
register_op("ReaderRead", infer=_infer_read, stateful=True, ref_inputs=(0, 1))
register_op("ReaderReadUpTo", infer=_infer_read_up_to, stateful=True, ref_inputs=(0, 1))
register_op("ReaderNumRecordsProduced", infer=lambda op: [(_dtypes.int64, TensorShape([]))],
            stateful=True, ref_inputs=(0,))
register_op("ReaderNumWorkUnitsCompleted", infer=lambda op: [(_dtypes.int64, TensorShape([]))],
            stateful=True, ref_inputs=(0,))
register_op("ReaderReset", infer=lambda op: [], stateful=True, ref_inputs=(0,))
not_differentiable(*_READER_TYPES, "ReaderRead", "ReaderReadUpTo", "ReaderNumRecordsProduced",
                   "ReaderNumWorkUnitsCompleted", "ReaderReset")


def _queue_ref(queue):
    ref = getattr(queue, "queue_ref", queue)
    if not getattr(ref, "_is_ref", False):
        raise TypeError(f"A reader reads filenames from a queue (e.g. "
                        f"af.train.string_input_producer), got {queue!r}")
    return ref


class ReaderBase:
    """What every reader offers; each method builds ops colocated with the reader.

    Args:
        reader_ref: the reader op's output.
        dtypes: the record's component dtypes; shapes: their shapes; names: or None.
    """

    def __init__(self, reader_ref, dtypes, shapes, names=None):
        self._reader_ref = reader_ref
        self._dtypes = tuple(dtypes)
        self._shapes = tuple(shapes)
        self._names = names

    reader_ref = property(lambda self: self._reader_ref)
    name = property(lambda self: self._reader_ref.op.name)

    def _build(self, op_type, inputs, attrs, name, suffix):
        graph = self._reader_ref.graph
        with graph.colocate_with(self._reader_ref.op):
            return make_op(op_type, (self._reader_ref,) + tuple(inputs), attrs,
                           name=name or f"{self.name.rsplit('/', 1)[-1]}_{suffix}", graph=graph)

    def _value(self, tensors):
        if self._names is not None:
            return dict(zip(self._names, tensors))
        return tensors[0] if len(tensors) == 1 else tensors

    def read(self, queue, name=None):
        """``(key, value)``: the next record, a filename dequeued from ``queue`` as needed.

        Returns:
            key: a string scalar; value: a tensor (one component), a list, or a dict
            (``names``).
        """
        op = self._build("ReaderRead", (_queue_ref(queue),), self._attrs(), name, "ReaderRead")
        return op.outputs[0], self._value(op.outputs[1:])

    def read_up_to(self, queue, num_records, name=None):
        """``(keys, values)``: up to ``num_records`` records stacked along dimension 0."""
        n = as_tensor(num_records, dtype=_dtypes.int64, name="num_records")
        op = self._build("ReaderReadUpTo", (_queue_ref(queue), n), self._attrs(), name,
                         "ReaderReadUpTo")
        return op.outputs[0], self._value(op.outputs[1:])

    def num_records_produced(self, name=None):
        return self._build("ReaderNumRecordsProduced", (), None, name,
                           "ReaderNumRecordsProduced").outputs[0]

    def num_work_units_completed(self, name=None):
        return self._build("ReaderNumWorkUnitsCompleted", (), None, name,
                           "ReaderNumWorkUnitsCompleted").outputs[0]

    def reset(self, name=None):
        """An op that forgets the current file and zeroes the counters."""
        return self._build("ReaderReset", (), None, name, "ReaderReset")

    def _attrs(self):
        return {"component_types": self._dtypes, "shapes": self._shapes}

    @property
    def supports_serialize(self):
        return False


class TextLineReader(ReaderBase):
    """Reads the lines of text files (without their line endings).

    Args:
        skip_header_lines: lines to skip at the top of each file.
        shared_name: share the reader by this name across sessions in the process.
        name: the op name.
    """

    def __init__(self, skip_header_lines=None, shared_name=None, name=None):
        ref = make("TextLineReader", (), {"skip_header_lines": int(skip_header_lines or 0),
                                          "container": "", "shared_name": shared_name or ""},
                   name, "TextLineReader")
        super().__init__(ref, (_dtypes.string,), (TensorShape([]),))


class NumpyRecordReader(ReaderBase):
    """Reads rows of ``.npy`` arrays, or of named arrays in ``.npz`` archives.

    Args:
        dtypes: one dtype per component (a file's arrays must cast to it safely).
        shapes: per component the shape of one row (checked against each file), or None.
        names: the ``.npz`` array names, one per component; None reads ``.npy`` files.
        shared_name, name: as for TextLineReader.

    Raises:
        ValueError: if the numbers of dtypes, shapes and names differ.
    """

    def __init__(self, dtypes, shapes=None, names=None, shared_name=None, name=None):
        if not isinstance(dtypes, (list, tuple)):
            dtypes = [dtypes]
        dtypes = tuple(_dtypes.as_dtype(d) for d in dtypes)
        shapes = tuple(TensorShape(None) for _ in dtypes) if shapes is None else \
            tuple(as_shape(s) for s in shapes)
        if names is not None:
            names = [names] if isinstance(names, str) else list(names)
        if len(shapes) != len(dtypes) or (names is not None and len(names) != len(dtypes)):
            raise ValueError(f"NumpyRecordReader: {len(dtypes)} dtypes, {len(shapes)} shapes and "
                             f"{'no' if names is None else len(names)} names do not line up")
        if names is None and len(dtypes) != 1:
            raise ValueError("NumpyRecordReader: several components need names= (.npz arrays)")
        ref = make("NumpyRecordReader", (), {
            "component_types": dtypes, "shapes": shapes, "names": tuple(names or ()),
            "container": "", "shared_name": shared_name or ""}, name, "NumpyRecordReader")
        super().__init__(ref, dtypes, shapes, names)


# -- whole files: TF1's tf.read_file / tf.write_file ---------------------------------------
def _infer_read_file(op):
    if op.inputs[0].dtype is not _dtypes.string:
        raise TypeError(f"filename must be a string tensor, got {op.inputs[0].dtype.name}")
    return [(_dtypes.string, TensorShape([]))]


register_op("ReadFile", infer=_infer_read_file, stateful=True)
register_op("WriteFile", infer=lambda op: [], stateful=True)
not_differentiable("ReadFile", "WriteFile")


def read_file(filename, name=None):
    """The bytes of the file ``filename`` (a scalar string); a worker reads within its data
    folder. Fails the step with NotFoundError naming a missing file."""
    return make("ReadFile", (as_tensor(filename, dtype=_dtypes.string),), None, name, "ReadFile")


def write_file(filename, contents, name=None):
    """An op that writes the scalar string ``contents`` to ``filename``, creating its parent
    folders (a worker writes within its data folder)."""
    return make_op("WriteFile", (as_tensor(filename, dtype=_dtypes.string),
                                 as_tensor(contents, dtype=_dtypes.string)), None, name,
                   "WriteFile")

