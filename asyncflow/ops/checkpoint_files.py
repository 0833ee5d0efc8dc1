"""Checkpoint bookkeeping ops: ``CommitCheckpoint`` and ``LatestCheckpoint``.

They write and read a checkpoint's meta graph and the directory's ``checkpoint`` state file on
the device that runs them, so a Saver on a cluster keeps all of one checkpoint's files in the
data directory of the worker that wrote its data (the Saver colocates them with its Save op;
see ``asyncflow.kernels.checkpoint_files`` for what each does).

- ``CommitCheckpoint(prefix, meta_graph, kept, doomed, latest_filename, meta_graph_suffix)``:
  string scalars ``prefix`` (or the checkpoint's data file name) and ``meta_graph`` (the
  serialized meta graph, empty for none),
  string vectors ``kept`` (the checkpoints the state file lists, empty: leave the state file
  alone) and ``doomed`` (checkpoints to delete), string scalars naming the state file (empty:
  ``checkpoint``) and the meta graph's suffix; no outputs.
- ``LatestCheckpoint(directory, latest_filename)``: a string scalar, the latest complete
  checkpoint's prefix or empty.

Both do file I/O: offload kernels with an unbounded cost, as Save and Restore.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make_op


def _io_cost(shapes, op):
    """File I/O is always worth a worker thread."""
    return float("inf")


def _check_strings(op, ranks):
    for number, (tensor, rank) in enumerate(zip(op.inputs, ranks), 1):
        if not tensor.dtype.is_string or tensor.shape.ndims not in (None, rank):
            kind = "scalar" if rank == 0 else "vector"
            raise TypeError(f"{op.type}: input {number} must be a string {kind}, got "
                            f"{tensor.dtype.name} {tensor.shape}")


def _infer_commit(op):
    _check_strings(op, (0, 0, 1, 1, 0, 0))
    return []


def _infer_latest(op):
    _check_strings(op, (0, 0))
    return [(dtypes.string, TensorShape([]))]


register_op("CommitCheckpoint", infer=_infer_commit, stateful=True, cost=_io_cost)
register_op("LatestCheckpoint", infer=_infer_latest, stateful=True, cost=_io_cost)
not_differentiable("CommitCheckpoint", "LatestCheckpoint")


def commit_checkpoint(prefix, meta_graph, kept, doomed, latest_filename, meta_graph_suffix,
                      name=None):
    """A ``CommitCheckpoint`` op (see the module docstring); returns the Operation."""
    inputs = tuple(as_tensor(v, dtype=dtypes.string) for v in (
        prefix, meta_graph, kept, doomed, latest_filename, meta_graph_suffix))
    return make_op("CommitCheckpoint", inputs, None, name, "CommitCheckpoint")


def latest_checkpoint(directory, latest_filename, name=None):
    """A ``LatestCheckpoint`` op's output: the latest checkpoint prefix in ``directory``."""
    inputs = tuple(as_tensor(v, dtype=dtypes.string) for v in (directory, latest_filename))
    return make_op("LatestCheckpoint", inputs, None, name, "LatestCheckpoint").outputs[0]
