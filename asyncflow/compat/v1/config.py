"""TF1's ``tf.ConfigProto`` and ``tf.GPUOptions`` for ``asyncflow.compat.v1``.

``ConfigProto`` is ``af.SessionConfig`` with TF1's ``gpu_options`` beside it, so
``config.gpu_options.allow_growth = True`` runs. asyncflow's GPU memory pool (CuPy's) already
grows on demand, so the GPU options are accepted and have no effect.
"""
from __future__ import annotations

import dataclasses

from asyncflow.exec.options import SessionConfig


@dataclasses.dataclass
class GPUOptions:
    """TF1's ``tf.GPUOptions`` (accepted; the memory pool grows on demand regardless)."""

    allow_growth: bool = False
    per_process_gpu_memory_fraction: float = 0.0
    visible_device_list: str = ""


@dataclasses.dataclass
class ConfigProto(SessionConfig):
    """``af.SessionConfig`` plus TF1's ``gpu_options``."""

    gpu_options: GPUOptions = dataclasses.field(default_factory=GPUOptions)
