"""A kernel context for calling the dense apply kernels (kernels/training.py) directly: a CPU
device with ``threads`` intra-op threads, and the attrs the applies read."""
import numpy as np

from asyncflow.exec.devices import Device


class ApplyContext:
    def __init__(self, threads, nesterov=False):
        self.attrs = {"use_nesterov": nesterov, "use_locking": False}
        self.name = "apply"
        self.type = "Apply"
        self.xp = np
        self.device = Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, threads,
                             intra_op_threads=threads)
