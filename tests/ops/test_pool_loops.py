"""The max pools' compiled loops (kernels/pool_loops.py) against their numpy forms, which stay
the reference (``jit.ENABLED`` off): the same bits for MaxPool, MaxPoolGrad,
``_MaxPoolWithTaps``, ``_MaxPoolGradByTaps`` and ``_MaxPoolReluGradByTaps``, over odd sizes,
SAME and VALID, strides below, equal to and above the window, ties (+0/-0 included), NaN, inf
and -inf inputs, inf and NaN gradients, float32 and float64, and 1-3 intra-op threads in
chunks of a few images."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from asyncflow.kernels import jit, nn_conv, nn_pool_taps, pool_loops

from test_conv_kernels import KernelContext, pool_attrs, small_chunks

assert small_chunks  # a fixture, used by name below

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (or ASYNCFLOW_JIT=0)")

# (n, h, w, c, kh, kw, sh, sw, padding)
CASES = [
    (3, 8, 8, 4, 2, 2, 2, 2, "SAME"),      # the convnet's windows: 2x2 inside the input
    (3, 7, 9, 32, 2, 2, 2, 2, "SAME"),     # ... and on a padded edge, 32 channels
    (2, 7, 9, 3, 3, 3, 2, 2, "SAME"),      # overlapping, padded on every side
    (4, 9, 7, 8, 3, 2, 1, 1, "VALID"),
    (2, 5, 5, 2, 5, 5, 1, 1, "SAME"),      # a window as large as the input
    (5, 6, 11, 9, 2, 3, 3, 2, "VALID"),    # stride above the window: cells no window reads
    (2, 9, 6, 3, 3, 3, 3, 3, "VALID"),     # tiling without padding
    (2, 6, 9, 1, 2, 3, 2, 3, "VALID"),     # one channel
    (3, 9, 4, 5, 3, 1, 3, 1, "VALID"),     # a column of taps
    (2, 4, 10, 3, 1, 5, 1, 5, "SAME"),     # a row of taps
    (2, 6, 5, 7, 2, 2, 1, 1, "SAME"),      # 2x2 overlapping, padded below and right
    (1, 12, 12, 2, 12, 12, 1, 1, "SAME"),  # 144 taps: winners without the NaN-first flag
]


def inputs(case, special, dtype, seed=0):
    """A Relu-like input of few values (ties everywhere), -0.0 among the zeros, and a
    gradient of both signs; ``special``: NaN, inf and -inf cells, windows all -inf."""
    n, h, w, c = case[:4]
    rng = np.random.default_rng(seed)
    x = (rng.integers(-1, 3, size=(n, h, w, c)) * 1.0).astype(dtype)
    x[rng.random(x.shape) < 0.3] = -0.0
    flat = x.reshape(-1)
    if special == "nan_inf":
        cells = rng.choice(flat.size, size=max(3, flat.size // 6), replace=False)
        flat[cells[0::3]], flat[cells[1::3]], flat[cells[2::3]] = np.nan, np.inf, -np.inf
        flat[0] = np.nan  # a first cell NaN
    elif special == "minus_inf":
        x[:, : h // 2] = -np.inf
        x[0, h // 2:, :, 0] = np.nan
    return x


def gradients(shape, dtype, seed=1):
    rng = np.random.default_rng(seed)
    plain = rng.standard_normal(shape).astype(dtype)
    special = plain.copy()
    special.reshape(-1)[::5] = np.inf
    special.reshape(-1)[1::7] = -np.inf
    special.reshape(-1)[2::11] = np.nan
    return plain, special


def all_five(attrs, x, grads, threads):
    ctx = KernelContext(attrs, threads)
    pooled = nn_conv._max_pool(ctx, x)[0]
    results = [pooled]
    if x.shape[1] * x.shape[2] and attrs["ksize"][1] * attrs["ksize"][2] <= 256:
        pooled_taps, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
        results += [pooled_taps, taps]
    for grad in grads:
        results.append(nn_conv._max_pool_grad(ctx, x, pooled, grad)[0])
        if len(results) > 1:
            results.append(nn_pool_taps._max_pool_grad_by_taps(ctx, x, taps, grad)[0])
            results.append(nn_pool_taps._max_pool_relu_grad_by_taps(
                ctx, x, taps, grad, pooled_taps)[0])
    return results


def numpy_forms(monkeypatch, *args):
    with monkeypatch.context() as patch:
        patch.setattr(jit, "ENABLED", False)
        return all_five(*args)


def assert_same_bits(got, want, where):
    """The same bits, NaNs' signs and payloads included."""
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, index)
        assert a.tobytes() == b.tobytes(), (where, index)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("special", ["plain", "nan_inf", "minus_inf"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_loops_give_the_numpy_forms_bits(special, dtype, threads, small_chunks,
                                             monkeypatch):
    for seed, case in enumerate(CASES):
        attrs = pool_attrs(*case[4:])
        x = inputs(case, special, dtype, seed)
        out_shape = nn_conv._max_pool(KernelContext(attrs, 1), x)[0].shape
        grads = gradients(out_shape, dtype, seed)
        want = numpy_forms(monkeypatch, attrs, x, grads, 1)
        assert_same_bits(all_five(attrs, x, grads, threads), want, (case, special))


def test_the_loops_split_over_threads_as_one_thread(small_chunks):
    case = (7, 14, 14, 32, 2, 2, 2, 2, "SAME")
    attrs = pool_attrs(*case[4:])
    x = inputs(case, "nan_inf", np.float32)
    grads = gradients((7, 7, 7, 32), np.float32)
    one = all_five(attrs, x, grads, 1)
    for threads in (2, 3):
        assert_same_bits(all_five(attrs, x, grads, threads), one, threads)


def test_other_dtypes_and_large_windows_take_the_numpy_forms(monkeypatch):
    """float16 and integers have no loop; a window of over 256 taps no uint8 winners."""
    calls = []
    monkeypatch.setattr(pool_loops, "max_pool", lambda *args: calls.append(args[1].dtype))
    monkeypatch.setattr(pool_loops, "max_pool_grad", lambda *args: calls.append("grad"))
    attrs = pool_attrs(2, 2, 2, 2, "VALID")
    for dtype in (np.float16, np.int32, np.float32):
        nn_conv._max_pool(KernelContext(attrs, 1), np.ones((2, 4, 4, 3), dtype))
    assert calls == [np.float32]
    x = np.arange(17 * 17, dtype=np.float32).reshape(1, 17, 17, 1)
    grad = nn_conv._max_pool_grad(KernelContext(pool_attrs(17, 17, 1, 1, "VALID"), 1), x,
                                  np.full((1, 1, 1, 1), 288, np.float32),
                                  np.ones((1, 1, 1, 1), np.float32))[0]
    assert calls == [np.float32] and grad.reshape(-1)[-1] == 1 and grad.sum() == 1


def test_warm_compiles_every_loop_and_the_prepare_hook_preloads_it(monkeypatch):
    """The loops compile (or load from the disk cache) on the preload's worker thread."""
    pool_loops.warm()  # (every signature warm: the kernels' first calls do not compile)
    for loop in (pool_loops._max_loop, pool_loops._route_tiled_loop):
        assert loop._compiled is not None and len(loop._compiled.signatures) >= 2
    monkeypatch.setattr(jit, "_warmed", set())

    class Node:
        output_dtypes = [np.dtype(np.float32)]
        xp = np
    assert pool_loops.preload(Node()) is not None
    Node.xp = object()  # a GPU's array module: no loops there
    assert pool_loops.preload(Node()) is None
    Node.xp, Node.output_dtypes = np, [np.dtype(np.float16)]
    assert pool_loops.preload(Node()) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_warm_up_compiles_what_the_kernels_call(small_chunks, dtype):
    """``warm`` compiles the signatures the kernels then call, whatever their arrays' flags (a
    variable's value is read-only, a fresh array writable: numba types them apart, and a
    signature the warm-up missed compiles at the step's first call, on the event loop's
    thread where a small pool runs inline)."""
    pool_loops.warm()
    loops = (pool_loops._max_loop, pool_loops._route_tiled_loop, pool_loops._route_added_loop)
    compiled = [set(loop._compiled.signatures) for loop in loops]
    for case in (CASES[0], CASES[2]):
        attrs = pool_attrs(*case[4:])
        for writeable in (False, True):
            x = inputs(case, "plain", dtype)
            x.flags.writeable = writeable
            ctx = KernelContext(attrs, 2)
            pooled = nn_conv._max_pool(ctx, x)[0]
            grad = gradients(pooled.shape, dtype)[0]
            grad.flags.writeable = pooled.flags.writeable = writeable
            nn_conv._max_pool_grad(ctx, x, pooled, grad)
            pooled_taps, taps = nn_pool_taps._max_pool_with_taps(ctx, x)
            taps.flags.writeable = pooled_taps.flags.writeable = writeable
            nn_pool_taps._max_pool_grad_by_taps(ctx, x, taps, grad)
            nn_pool_taps._max_pool_relu_grad_by_taps(ctx, x, taps, grad, pooled_taps)
    assert [set(loop._compiled.signatures) for loop in loops] == compiled


# A session's first step: the pools' prepare hook (jit.preload) imports numba and compiles
# the loops on a worker thread; a tiny pool, run inline on the event loop's thread, must not
# import or compile there. A meta path finder records the thread of each import of numba.
# Every BLAS, scipy's that numba brings included, stays held at one thread.
_FIRST_STEP = r"""
import sys
import threading
import numpy as np
import trio
import asyncflow as af
from asyncflow.kernels import jit, pool_loops

importing = []

class Spy:  # finds nothing: records who asks for numba
    def find_spec(self, name, path=None, target=None):
        if name == "numba":
            importing.append(threading.get_ident())
        return None

sys.meta_path.insert(0, Spy())
with af.device("/cpu:0"):  # the loops are CPU's (a visible GPU would take the pools)
    x = af.placeholder(af.float32, [None, 4, 4, 2])
    y = af.nn.relu(x)
    pooled = af.nn.max_pool(y, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    (grad,) = af.gradients(af.reduce_sum(pooled * pooled), [x])
value = np.random.default_rng(0).standard_normal([1, 4, 4, 2]).astype(np.float32)

async def step():
    async with af.Session() as sess:
        return threading.get_ident(), await sess.run([pooled, grad], {x: value})

assert "numba" not in sys.modules
loop, (got, got_grad) = trio.run(step)
assert "numba" in sys.modules and importing and loop not in importing, (loop, importing)
assert pool_loops.warm in jit._warmed
jit.ENABLED = False
async def numpy_forms():
    async with af.Session() as sess:
        return await sess.run([pooled, grad], {x: value})
want, want_grad = trio.run(numpy_forms)
assert got.tobytes() == want.tobytes() and got_grad.tobytes() == want_grad.tobytes()
# numba's compile loaded scipy's own OpenBLAS: the device's BLAS hold covers it (jit.py)
import threadpoolctl
assert "scipy.linalg.cython_blas" in sys.modules
blas = [(info["filepath"], info["num_threads"]) for info in threadpoolctl.threadpool_info()
        if info.get("user_api") == "blas"]
assert all(threads == 1 for _, threads in blas), blas
print("ok")
"""


def test_the_first_step_loads_and_compiles_the_loops_off_the_event_loop():
    done = subprocess.run([sys.executable, "-c", _FIRST_STEP], capture_output=True,
                          cwd=pathlib.Path(__file__).parents[2], timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == b"ok", done.stderr.decode()[-3000:]
