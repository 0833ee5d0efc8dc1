"""Reading a checkpoint without a graph: TF1's ``tf.train.list_variables`` and
``tf.train.load_variable``.

Both see a partitioned variable as TF1 does: one logical name of its full shape, its saved
slices put together (``kernels/checkpoint_slices.py``). They read files synchronously, as
TF1's do: call them outside the event loop (or through ``trio.to_thread.run_sync``).
"""
from __future__ import annotations

import os

from asyncflow import errors
from asyncflow.graph.shape import TensorShape
from asyncflow.kernels.checkpoint_slices import restore_tensors, saved_variables
from asyncflow.train.saver import data_path, latest_checkpoint


def _data_file(ckpt_dir_or_file):
    path = ckpt_dir_or_file
    if os.path.isdir(path):
        path = latest_checkpoint(path)
        if path is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given "
                             f"directory {ckpt_dir_or_file}")
    return data_path(path)


def list_variables(ckpt_dir_or_file):
    """``[(name, shape)]`` of the variables in a checkpoint (a prefix, or a directory's
    latest), sorted by name; a partitioned variable is one name of its full shape.

    Raises:
        NotFoundError: if there is no such checkpoint.
        ValueError: for a directory without checkpoints.
    """
    saved = saved_variables(_data_file(ckpt_dir_or_file))
    return [(name, list(shape)) for name, (_, shape) in sorted(saved.items())]


def load_variable(ckpt_dir_or_file, name):
    """The value of variable ``name`` in a checkpoint, as a numpy array (a partitioned
    variable's slices put together).

    Raises:
        NotFoundError: if the checkpoint or the name is missing.
    """
    path = _data_file(ckpt_dir_or_file)
    name = name[:-2] if name.endswith(":0") else name
    saved = saved_variables(path)
    if name not in saved:
        raise errors.NotFoundError(None, None, f"Key {name} not found in checkpoint {path}")
    dtype, shape = saved[name]
    return restore_tensors(path, [name], [dtype], [TensorShape(list(shape))], [""])[0]
