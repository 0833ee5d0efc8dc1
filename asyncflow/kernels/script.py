"""Kernels of ``py_func`` (see ops/script.py): call the user's callable, convert its results.

The callable gets host numpy arrays (read-only views: kernels never let anyone mutate a
shared value). Exceptions it raises fail the run; the executor names the op. As in TF1,
``StopIteration`` becomes OutOfRangeError and ``NotImplementedError`` UnimplementedError.
"""
from __future__ import annotations

import inspect

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import register_kernel


def _arguments(inputs):
    out = []
    for value in inputs:
        host = value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) \
            else value
        view = np.asarray(host).view()
        if view.ndim == 0 and view.dtype == object:  # a scalar string: TF1 passes bytes
            out.append(view[()])
            continue
        view.flags.writeable = False
        out.append(view)
    return out


def _invoke_error(ctx, exc):
    label = f"py_func {ctx.attrs['token']}"
    if isinstance(exc, StopIteration):
        return errors.OutOfRangeError(None, ctx.name, f"{label} raised StopIteration")
    if isinstance(exc, NotImplementedError):
        return errors.UnimplementedError(None, ctx.name, f"{label}: NotImplementedError: {exc}")
    return None


def _convert_one(ctx, index, value, dtype):
    label = f"value {index} returned by py_func {ctx.attrs['token']}"
    if dtype is None:  # string output: bytes objects
        array = np.asarray(value, dtype=object)
        encode = np.vectorize(lambda s: s.encode() if isinstance(s, str) else s, otypes=[object])
        return encode(array) if array.size else array
    target = np.dtype(dtype)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgumentError(
            None, ctx.name, f"{label} cannot be converted to an array: {exc}") from None
    if array.dtype == target:
        return array
    if array.dtype.kind in "biuf" and np.can_cast(array.dtype, target, casting="same_kind"):
        return array.astype(target)
    raise errors.InvalidArgumentError(
        None, ctx.name, f"{label} has dtype {array.dtype}, but Tout[{index}] is {target}; "
                        "return values of that dtype (or cast them in the function)")


def _convert(ctx, result):
    touts = ctx.output_dtypes
    if not touts:
        return ()
    if len(touts) == 1 and not (isinstance(result, (list, tuple)) and len(result) == 1):
        result = [result]
    if not isinstance(result, (list, tuple)) or len(result) != len(touts):
        count = len(result) if isinstance(result, (list, tuple)) else 1
        raise errors.InvalidArgumentError(
            None, ctx.name, f"py_func {ctx.attrs['token']} returned {count} values, but Tout "
                            f"lists {len(touts)}")
    return tuple(ctx.to_device(_convert_one(ctx, i, value, dtype))
                 if dtype is not None else _convert_one(ctx, i, value, dtype)
                 for i, (value, dtype) in enumerate(zip(result, touts)))


def _py_func(ctx, *inputs):
    try:
        result = ctx.attrs["func"](*_arguments(inputs))
    except (StopIteration, NotImplementedError) as exc:
        raise _invoke_error(ctx, exc) from exc
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise errors.InvalidArgumentError(
            None, ctx.name, f"py_func {ctx.attrs['token']} returned an awaitable; define the "
                            "function with `async def` so the op awaits it")
    return _convert(ctx, result)


async def _async_py_func(ctx, *inputs):
    try:
        result = await ctx.attrs["func"](*_arguments(inputs))
    except (StopIteration, NotImplementedError) as exc:
        raise _invoke_error(ctx, exc) from exc
    return _convert(ctx, result)


# CPU kernels only, as TF1 registers PyFunc: with a GPU present placement keeps a py_func on
# the CPU (its inputs cross from the GPU by Send/Recv) unless asked otherwise.
register_kernel("PyFunc", "CPU")(_py_func)
register_kernel("PyFuncStateless", "CPU")(_py_func)
register_kernel("AsyncPyFunc", "CPU", is_async=True)(_async_py_func)
register_kernel("AsyncPyFuncStateless", "CPU", is_async=True)(_async_py_func)
