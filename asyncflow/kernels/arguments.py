"""Small host-side arguments of kernels: integer vectors (shapes, perms, paddings, indices)
read from numpy or CuPy arrays, and the error a kernel raises for a bad argument."""
from __future__ import annotations

import numpy as np

from asyncflow import errors


def invalid(ctx, message):
    """An InvalidArgumentError naming the running op (the executor adds device and site)."""
    return errors.InvalidArgumentError(None, ctx.name, message)


def host(array):
    """A host (numpy) copy of a small argument; CuPy arrays are fetched with ``get``."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def scatter_add(xp, target, indices, values, subtract=False):
    """``target[indices] += values`` (or ``-=``) with repeated indices accumulating, in place.

    numpy: ``np.add.at``/``np.subtract.at``. CuPy has no ``ufunc.at`` before v13, so device
    arrays use ``cupyx.scatter_add`` (CUDA atomics: float16/32/64, int32, uint32, uint64).
    """
    if xp is np:
        (np.subtract if subtract else np.add).at(target, indices, values)
        return
    import cupyx  # optional dependency, present wherever CuPy is
    cupyx.scatter_add(target, indices, -values if subtract else values)


def ints(array):
    """The argument's values as a flat list of Python ints."""
    return [int(v) for v in host(array).reshape(-1).tolist()]


def is_floating(dtype):
    """A float dtype, bfloat16 included (ml_dtypes' numpy twin has no float ``kind``)."""
    return dtype.kind == "f" or dtype.name == "bfloat16"
