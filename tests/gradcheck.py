"""Gradient checking: symbolic gradients against central finite differences (autograd's way).

``check_gradients(build, inputs)`` builds ``y = build(*placeholders)`` in a fresh graph on
float64 placeholders shaped like ``inputs``, projects ``y`` onto a fixed random direction ``r``
(``y_proj = sum(y * r)``, a dot-product test that checks every output at once) and compares
``af.gradients(y_proj, placeholders)`` with central differences of ``y_proj``. The perturbed
evaluations fetch ``y`` itself and do the projection in numpy float64, all in one Session.

Import from tests as ``from gradcheck import check_gradients, assert_close`` (pytest puts the
tests directory on ``sys.path``).
"""
from __future__ import annotations

import numpy as np

import asyncflow as af


def assert_close(actual, expected, *, rtol=1e-4, atol=1e-6, what="value"):
    """Raise AssertionError with a readable element-wise diff unless ``actual ~= expected``."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} != expected shape {expected.shape}")
    close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return
    bad = np.argwhere(~close) if actual.ndim else [()]
    lines = [f"{what}: {int((~close).sum())} of {close.size} elements differ "
             f"(rtol={rtol}, atol={atol})"]
    for index in list(bad)[:10]:
        index = tuple(int(i) for i in index)
        a, e = actual[index], expected[index]
        lines.append(f"  at {list(index)}: got {a!r}, expected {e!r}, |diff|={abs(a - e):.3g}")
    if len(bad) > 10:
        lines.append(f"  ... and {len(bad) - 10} more")
    raise AssertionError("\n".join(lines))


async def check_gradients(build, inputs, *, delta=1e-6, rtol=1e-4, atol=1e-6, seed=0,
                          feed_dict=None):
    """Check ``af.gradients`` of ``build`` against central finite differences.

    Args:
        build: ``build(*tensors) -> Tensor``; called once, inside a fresh default graph, on
            float64 placeholders with the shapes of ``inputs``.
        inputs: numpy-convertible arrays, the point at which to differentiate.
        delta: the finite-difference step.
        rtol, atol: tolerances of the comparison (numpy ``isclose`` semantics).
        seed: seeds the random projection direction.
        feed_dict: extra feeds for tensors that ``build`` creates itself (rarely needed).

    Returns:
        The list of symbolic gradients (numpy arrays; zeros where ``af.gradients`` gave None).

    Raises:
        AssertionError: naming the input and the differing elements when the gradients
            disagree, or when ``build`` does not return a floating tensor.
    """
    arrays = [np.array(value, dtype=np.float64) for value in inputs]
    rng = np.random.default_rng(seed)
    with af.Graph().as_default():
        placeholders = [af.placeholder(af.float64, shape=a.shape, name=f"input_{i}")
                        for i, a in enumerate(arrays)]
        y = build(*placeholders)
        y = af.convert_to_tensor(y)
        if not y.dtype.is_floating:
            raise AssertionError(f"build must return a floating tensor, got {y.dtype.name}")
        direction = af.placeholder(y.dtype, shape=None, name="direction")
        y_proj = af.reduce_sum(y * direction)
        # A gather's gradient is an IndexedSlices (as in TF1): compare its dense form.
        grads = [af.convert_to_tensor(g) if isinstance(g, af.IndexedSlices) else g
                 for g in af.gradients(y_proj, placeholders)]
        extra = dict(feed_dict or {})
        async with af.Session() as sess:
            feeds = {**dict(zip(placeholders, arrays)), **extra}
            y_value = np.asarray(await sess.run(y, feeds), dtype=np.float64)
            r = rng.standard_normal(y_value.shape)
            symbolic = []
            for g, a in zip(grads, arrays):
                # One fetch per run: two gradients may be equal subexpressions.
                value = None if g is None else await sess.run(g, {**feeds, direction: r})
                symbolic.append(np.zeros_like(a) if g is None else
                                np.asarray(value, dtype=np.float64))
            for index, (array, grad) in enumerate(zip(arrays, symbolic)):
                numeric = await _numeric_gradient(sess, y, feeds, placeholders[index], array,
                                                  r, delta)
                kind = "None (unconnected)" if grads[index] is None else "symbolic"
                assert_close(grad, numeric, rtol=rtol, atol=atol,
                             what=f"gradient of input {index} (shape {list(array.shape)}), "
                                  f"{kind} vs finite differences")
    return symbolic


async def _numeric_gradient(sess, y, feeds, placeholder, array, r, delta):
    """Central differences of ``sum(y * r)`` with respect to every element of ``array``."""
    numeric = np.zeros(array.shape, dtype=np.float64)
    flat = numeric.reshape(-1)
    for k in range(array.size):
        values = []
        for sign in (1.0, -1.0):
            shifted = array.copy()
            shifted.reshape(-1)[k] += sign * delta
            out = await sess.run(y, {**feeds, placeholder: shifted})
            values.append(float(np.sum(np.asarray(out, dtype=np.float64) * r)))
        flat[k] = (values[0] - values[1]) / (2 * delta)
    return numeric


def nested_loops_across_devices(x):
    """``x`` through a while loop nested in another, the inner body on ``/cpu:1`` and the
    rest on ``/cpu:0`` (shared by the nested-gradient and loops-across-devices tests)."""
    def outer_body(i, acc):
        def inner_body(j, a):
            with af.device("/cpu:1"):
                return j + 1, af.sin(a) * x
        return i + 1, af.while_loop(lambda j, a: j < i + 1, inner_body,
                                    [af.constant(0), acc], name="inner")[1]
    with af.device("/cpu:0"):
        return af.while_loop(lambda i, acc: i < 3, outer_body,
                             [af.constant(0), af.constant(1.0, af.float64)])[1]
