"""``tf.test``: TF1's gradient checker (``compute_gradient``, ``compute_gradient_error``).

Both run in the default session (``with tf.Session() as sess:`` or ``sess.as_default()``), as
TF1's do inside a ``test_session()``. Jacobians have TF1's layout: ``[x_size, y_size]``, row
``i`` the derivatives of every element of ``y`` with respect to element ``i`` of ``x``.
"""
from __future__ import annotations

import numpy as np

from asyncflow.graph.default_session import get_default_session
from asyncflow.graph.gradients import gradients
from asyncflow.ops.sources import placeholder


def _session():
    sess = get_default_session()
    if sess is None:
        raise ValueError("compute_gradient needs a default session: run it inside "
                         "`with tf.Session() as sess:` (or `with sess.as_default():`)")
    return sess


def _one(x, x_shape, y, y_shape, x_init_value, delta, extra_feed_dict):
    sess = _session()
    x_shape, y_shape = tuple(x_shape), tuple(y_shape)
    x_size, y_size = int(np.prod(x_shape)), int(np.prod(y_shape))
    dtype = x.dtype.np
    x_value = (np.asarray(x_init_value, dtype=dtype).reshape(x_shape)
               if x_init_value is not None
               else np.random.RandomState(1).random_sample(x_shape).astype(dtype))
    feeds = dict(extra_feed_dict or {})
    grad_y = placeholder(y.dtype, y_shape)
    grad_x = gradients(y, x, grad_ys=grad_y)[0]
    theoretical = np.zeros([x_size, y_size], dtype)
    if grad_x is not None:
        for j in range(y_size):
            seed = np.zeros(y_size, y.dtype.np)
            seed[j] = 1
            row = sess.run(grad_x, {**feeds, x: x_value, grad_y: seed.reshape(y_shape)})
            theoretical[:, j] = np.asarray(row).reshape(x_size)
    numerical = np.zeros([x_size, y_size], dtype)
    flat = x_value.reshape(-1)
    for i in range(x_size):
        plus, minus = flat.copy(), flat.copy()
        plus[i] += delta
        minus[i] -= delta
        y_plus = sess.run(y, {**feeds, x: plus.reshape(x_shape)})
        y_minus = sess.run(y, {**feeds, x: minus.reshape(x_shape)})
        numerical[i, :] = (np.asarray(y_plus) - np.asarray(y_minus)).reshape(y_size) / (2 * delta)
    return theoretical, numerical


def compute_gradient(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3,
                     init_targets=None, extra_feed_dict=None):
    """``(theoretical, numerical)`` Jacobians of ``y`` with respect to ``x`` (a tensor, or a
    list of tensors with a list of shapes: then a list of pairs)."""
    if init_targets is not None:
        _session().run(init_targets)
    if isinstance(x, (list, tuple)):
        inits = x_init_value if x_init_value is not None else [None] * len(x)
        return [_one(xi, si, y, y_shape, vi, delta, extra_feed_dict)
                for xi, si, vi in zip(x, x_shape, inits)]
    return _one(x, x_shape, y, y_shape, x_init_value, delta, extra_feed_dict)


def compute_gradient_error(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3,
                           init_targets=None, extra_feed_dict=None):
    """The largest absolute difference between the theoretical and numerical Jacobians."""
    pairs = compute_gradient(x, x_shape, y, y_shape, x_init_value, delta, init_targets,
                             extra_feed_dict)
    if isinstance(pairs, tuple):
        pairs = [pairs]
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in pairs)


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    """Whether a GPU device exists in this process (CuPy finds a CUDA device)."""
    from asyncflow.exec.devices import cuda_device_count
    return cuda_device_count() > 0
