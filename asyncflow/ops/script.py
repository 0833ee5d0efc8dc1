"""``py_func``: a Python callable as a graph op (TF1's script ops), sync or ``async def``.

Theory of operation:
- The callable lives in the op's ``func`` attr, next to a process-unique ``token`` that names
  it in messages. As in TF1, a py_func's body never leaves the process that built it: exporting
  a graph holding one (``as_graph_def``) fails with a ValueError naming the op and the attr.
- Four op types: ``PyFunc``/``PyFuncStateless`` run a plain callable inline in the executor
  loop; ``AsyncPyFunc``/``AsyncPyFuncStateless`` hold an ``async def`` callable and have an
  async kernel, so the executor starts them as tasks and the coroutine is awaited on the event
  loop (it may do I/O or sleep without blocking any thread or other ops). ``stateful=False``
  lets graph rewrites treat the op as a pure function of its inputs.
- Outputs have the dtypes in ``Tout`` and unknown shapes. The kernel converts what the callable
  returns: arrays of another dtype of the same kind are cast (float64 -> float32), crossing
  kinds (float -> int) or a wrong number of results is an ``InvalidArgumentError`` naming the
  op. py_func ops have no gradient (TF1).

Kernels live in ``asyncflow/kernels/script.py``.
"""
from __future__ import annotations

import functools
import inspect
import itertools

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make_op

# (is_async, stateful) -> op type
_TYPES = {(False, True): "PyFunc", (False, False): "PyFuncStateless",
          (True, True): "AsyncPyFunc", (True, False): "AsyncPyFuncStateless"}
_tokens = itertools.count()


def _infer_py_func(op):
    return [(dtype, TensorShape(None)) for dtype in op.get_attr("Tout")]


for (_is_async, _stateful), _type in _TYPES.items():
    register_op(_type, infer=_infer_py_func, stateful=_stateful)
not_differentiable(*_TYPES.values())


def is_async_callable(func):
    """True for ``async def`` functions, partials of them and objects with ``async __call__``."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None))


def py_func(func, inp, Tout, stateful=True, name=None):  # noqa: N803 - TF1 spelling
    """Wrap a Python callable as an op: ``func(*input_arrays)`` runs when the op runs.

    Args:
        func: a callable taking one numpy array per input and returning one value per output
            (a single value when ``Tout`` is a single dtype). An ``async def`` callable is
            awaited on the event loop.
        inp: a list of tensors (or values convertible to tensors).
        Tout: a dtype, or a list/tuple of dtypes (possibly empty).
        stateful: False declares ``func`` a pure function of its inputs.
        name: op name.

    Returns:
        One tensor when ``Tout`` is a single dtype; a list of tensors when it is a list; the
        Operation when ``Tout`` is an empty list.

    Raises:
        TypeError: if ``func`` is not callable or ``inp`` is not a list.
    """
    if not callable(func):
        raise TypeError(f"py_func: func must be callable, got {func!r}")
    if not isinstance(inp, (list, tuple)):
        raise TypeError(f"py_func: inp must be a list of tensors, got {type(inp).__name__}")
    as_list = isinstance(Tout, (list, tuple))
    touts = tuple(dtypes.as_dtype(t) for t in (Tout if as_list else [Tout]))
    inputs = tuple(as_tensor(x) for x in inp)
    is_async = is_async_callable(func)
    attrs = {"func": func, "token": f"pyfunc_{next(_tokens)}", "Tout": touts,
             "is_async": is_async}
    op = make_op(_TYPES[(is_async, bool(stateful))], inputs, attrs, name, "PyFunc")
    if not op.outputs:
        return op
    return list(op.outputs) if as_list else op.outputs[0]
