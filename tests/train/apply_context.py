"""A kernel context for calling the dense apply kernels (kernels/training.py) directly: a CPU
device with ``threads`` intra-op threads, and the attrs the applies read; ``resources``, the
variables such a call takes."""
import numpy as np

from asyncflow import dtypes
from asyncflow.exec.devices import Device
from asyncflow.exec.resources import VariableResource


def resources(values, kind=VariableResource):
    """A ``kind`` (a ``VariableResource``) named ``v0``, ``v1``, ... holding a copy of each of
    ``values``."""
    out = []
    for index, value in enumerate(values):
        resource = kind(f"v{index}", dtypes.as_dtype(value.dtype), value.shape)
        resource.assign(value.copy())
        out.append(resource)
    return out


class ApplyContext:
    def __init__(self, threads, nesterov=False):
        self.attrs = {"use_nesterov": nesterov, "use_locking": False}
        self.name = "apply"
        self.type = "Apply"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)
