"""Graphs shared by the tests of multi-partition steps (imported by test modules here)."""
import asyncflow as af


def mixed_graph(devices):
    """Fan-out, fan-in and chains across ``devices`` CPUs (all on one device when None).

    Returns:
        ``(x, fetches)``: a ``[3]`` float32 placeholder and three tensors to fetch.
    """
    def on(i):
        return af.device(None if devices is None else f"/device:CPU:{i % devices}")

    x = af.placeholder(af.float32, [3], name="x")
    with on(0):
        a = x * 2.0
        b = af.reduce_sum(x)
    with on(1):
        c = a + b
        d = af.identity(c) * x
    with on(2):
        e = af.add_n([a, c, d])
    with on(0):
        f = e - af.reduce_max(d)
    with on(1):
        g = af.matmul(af.reshape(f, [1, 3]), af.reshape(x, [3, 1]))
    return x, [f, g, af.identity(e)]
