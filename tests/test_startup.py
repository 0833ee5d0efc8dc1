"""What ``import asyncflow`` loads: ml_dtypes (bfloat16) and scipy.fft only when first needed.

The two cost most of a plain import (bench/RESULTS.md, 2026-12-05; ``bench/bench_startup.py``),
which every worker process pays. Each check runs in a fresh interpreter: this test process
imported both long ago. ``tests/cluster/test_startup_worker.py`` starts a CLI worker.
"""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from transports.messages import RecvTensorsReply, TensorEntry
from transports.wire import encode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in a fresh interpreter; stdin holds a frame with a bfloat16 tensor, encoded by the test.
_BFLOAT16_FIRST_USE = r"""
import sys
import numpy as np
import trio
import asyncflow as af
from transports import wire

def late():
    return [m for m in ("ml_dtypes", "scipy.fft") if m in sys.modules]

assert late() == [], late()
assert af.bfloat16 is af.dtypes.bfloat16 is af.as_dtype("bfloat16") and af.bfloat16.is_floating
assert repr(af.bfloat16) == "af.bfloat16" and late() == []  # no numpy twin needed yet

# A received bfloat16 tensor is the first use: decoding it loads ml_dtypes.
(entry,) = wire.decode(sys.stdin.buffer.read()).tensors
assert late() == ["ml_dtypes"], late()
import ml_dtypes
assert entry.value.dtype == np.dtype(ml_dtypes.bfloat16), entry.value.dtype
assert entry.value.astype(np.float32).tolist() == [1.5, -2.25, 3.0]
assert af.as_dtype(entry.value.dtype) is af.bfloat16 and af.bfloat16.np == entry.value.dtype
assert af.bfloat16.size == 2 and af.bfloat16.max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
assert list(wire.WIRE_DTYPES)[9:12] == ["float16", "bfloat16", "float32"]

# Cast to bfloat16 (rounding to nearest even) and back, then the array through the codec.
x = af.placeholder(af.float32, [3])
rounded = af.cast(x, af.bfloat16)
total = af.reduce_sum(af.cast(rounded, af.float32))

async def main():
    async with af.Session() as sess:
        return await sess.run([rounded, total], {x: np.array([1.0, 1.00390625, 3.0], np.float32)})

value, summed = trio.run(main)
assert value.dtype == af.bfloat16.np and value.astype(np.float32).tolist() == [1.0, 1.0, 3.0]
assert summed == 5.0
frame = b"".join(bytes(b) for b in wire.encode(wire.RecvTensorsReply([wire.TensorEntry("r", value)])))
(back,) = wire.decode(frame).tensors
assert back.value.dtype == value.dtype and back.value.tobytes() == value.tobytes()
assert "scipy.fft" not in sys.modules
print("ok")
"""

# A convolution the cost model sends to the direct kernels leaves scipy.fft out; one sent to
# the FFT path (the convnet's 14x14 5x5 layer) imports it, agrees with the direct one, and the
# BLAS scipy brings is held at one thread like numpy's (exec/intra_op.py).
_FFT_FIRST_USE = r"""
import sys
import numpy as np
import trio
import asyncflow as af
from asyncflow.kernels import nn_conv_fft

rng = np.random.default_rng(0)
def conv(shape, filters):
    x = af.constant(rng.standard_normal(shape).astype(np.float32))
    w = af.constant(rng.standard_normal(filters).astype(np.float32))
    return af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")

with af.device("/cpu:0"):  # the FFT path takes numpy arrays (a visible GPU would take these)
    small, big = conv([1, 4, 4, 1], [2, 2, 1, 1]), conv([8, 14, 14, 32], [5, 5, 32, 64])

async def run(fetch):
    async with af.Session() as sess:
        return await sess.run(fetch)

trio.run(run, small)
assert "scipy.fft" not in sys.modules
nn_conv_fft.FORCE = "fft"  # (the cost model picks it too for this shape at batch 32)
fft = trio.run(run, big)
assert "scipy.fft" in sys.modules
nn_conv_fft.FORCE = "direct"
direct = trio.run(run, big)
np.testing.assert_allclose(fft, direct, rtol=1e-4, atol=1e-3)
try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None
if threadpoolctl is not None:  # scipy's own OpenBLAS, loaded after the device's hold, joins it
    blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert len(blas) >= 1 and blas == [1] * len(blas), blas
print("ok")
"""


def _fresh_python(script, stdin=b"", args=()):
    done = subprocess.run([sys.executable, "-c", script, *args], input=stdin, capture_output=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == b"ok", done.stderr.decode()[-3000:]


def test_import_leaves_out_ml_dtypes_until_a_bfloat16_is_used():
    values = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    frame = b"".join(bytes(b) for b in encode(RecvTensorsReply([TensorEntry("v", values)])))
    _fresh_python(_BFLOAT16_FIRST_USE, frame)


def test_import_leaves_out_scipy_fft_until_the_fft_convolution_is_chosen():
    _fresh_python(_FFT_FIRST_USE)


# Review (rrev34): the first uses of bfloat16 and of the FFT path, made by several threads at
# once, each get the one dtype object and the same bits; a DType pickles and as_dtype finds
# bfloat16 before and after ml_dtypes loads; the BLAS hold's extension with no hold in force.
_FIRST_USES_AT_ONCE = r"""
import pickle
import sys
import threading
import numpy as np
import trio
import asyncflow as af
from asyncflow.exec import intra_op
from asyncflow.kernels import nn_conv_fft
from transports import wire

frame = sys.stdin.buffer.read()
assert pickle.loads(pickle.dumps(af.bfloat16)) is af.bfloat16 and "ml_dtypes" not in sys.modules
try:
    af.as_dtype(np.complex64)
except TypeError as exc:  # the list of dtypes names bfloat16 without loading it
    assert "bfloat16" in str(exc) and "ml_dtypes" not in sys.modules, exc
else:
    raise AssertionError("complex64 is no asyncflow dtype")
intra_op.hold_blas_loaded_since()  # no hold in force: nothing to extend, nothing fails

rng = np.random.default_rng(0)
x = rng.standard_normal([8, 14, 14, 32]).astype(np.float32)
w = rng.standard_normal([5, 5, 32, 64]).astype(np.float32)
nn_conv_fft.FORCE = "fft"

async def conv():
    with af.Graph().as_default(), af.device("/cpu:0"):
        out = af.nn.conv2d(af.constant(x), af.constant(w), strides=[1, 1, 1, 1], padding="SAME")
        async with af.Session() as sess:
            return await sess.run(out)

uses = [lambda: af.bfloat16.np, lambda: af.as_dtype("bfloat16").size,
        lambda: wire.decode(frame).tensors[0].value.dtype, lambda: trio.run(conv)] * 2
results, failures = [None] * len(uses), []
barrier = threading.Barrier(len(uses))

def first_use(i):
    barrier.wait()
    try:
        results[i] = uses[i]()
    except BaseException as exc:
        failures.append(repr(exc))

threads = [threading.Thread(target=first_use, args=(i,)) for i in range(len(uses))]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
assert not failures, failures
import ml_dtypes
bf16 = np.dtype(ml_dtypes.bfloat16)
assert results[0] is results[4] is results[2] is results[6] is bf16 and results[1] == 2
assert af.bfloat16.np is bf16 and af.as_dtype(np.zeros(2, bf16).dtype) is af.bfloat16
assert results[3].tobytes() == results[7].tobytes()
assert pickle.loads(pickle.dumps(af.bfloat16)) is af.bfloat16
assert pickle.loads(pickle.dumps([af.bfloat16, af.float32])) == [af.bfloat16, af.float32]
try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None
if threadpoolctl is not None:
    blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert blas == [1] * len(blas), blas
print("ok")
"""

# ml_dtypes imported by the program itself before asyncflow met a bfloat16: as_dtype of such
# an array finds it; a DType pickled before the load is the same object after it.
_ML_DTYPES_FIRST = r"""
import pickle
import sys
import asyncflow as af
saved = pickle.dumps(af.bfloat16)
import ml_dtypes
import numpy as np
assert af.as_dtype(np.ones(3, ml_dtypes.bfloat16).dtype) is af.bfloat16
assert af.as_dtype(np.dtype(ml_dtypes.bfloat16).newbyteorder(">")) is af.bfloat16
assert pickle.loads(saved) is af.bfloat16 and af.bfloat16.np == np.dtype(ml_dtypes.bfloat16)
try:
    af.as_dtype(np.dtype(ml_dtypes.float8_e4m3fn))
except TypeError as exc:
    assert "float8_e4m3fn" in str(exc) and "bfloat16" in str(exc), exc
else:
    raise AssertionError("float8 is no asyncflow dtype")
print("ok")
"""


def test_first_uses_of_bfloat16_and_the_fft_path_from_threads_at_once():
    values = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    frame = b"".join(bytes(b) for b in encode(RecvTensorsReply([TensorEntry("v", values)])))
    _fresh_python(_FIRST_USES_AT_ONCE, frame)


def test_as_dtype_and_pickles_of_bfloat16_when_the_program_imported_ml_dtypes_first():
    _fresh_python(_ML_DTYPES_FIRST)


# Review (rhyg): a convolution forced onto the FFT path, small enough to run on the event
# loop's thread, imported scipy.fft there on its first step (0.2-0.5 s with the loop blocked).
# The plan's preload (kernels/registry.py ``Preload``) imports it on a worker thread before the
# first step: a meta path finder records the thread of each import of scipy.fft, for a local
# trio step (inline and traced), an asyncio step (asyncflow.aio) and a worker's RunGraph.
_FFT_OFF_THE_LOOP = r"""
import asyncio
import sys
import threading
import numpy as np
import trio
import asyncflow as af
import asyncflow.aio
from asyncflow.kernels import nn_conv_fft

importing = []

class Spy:  # finds nothing: records who asks for scipy.fft
    def find_spec(self, name, path=None, target=None):
        if name == "scipy.fft":
            importing.append(threading.get_ident())
        return None

sys.meta_path.insert(0, Spy())
nn_conv_fft.FORCE = "fft"
PATH = sys.argv[1]
DEVICE = "/job:worker/task:0/cpu:0" if PATH == "worker" else "/cpu:0"
rng = np.random.default_rng(0)
with af.device(DEVICE):
    x = af.placeholder(af.float32, [None, 6, 6, 1])
    w = af.constant(rng.standard_normal([3, 3, 1, 1]).astype(np.float32))
    y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
value = rng.standard_normal([1, 6, 6, 1]).astype(np.float32)
options = af.RunOptions(trace_level=af.RunOptions.FULL_TRACE) if PATH == "traced" else None

async def trio_step():
    loop = threading.get_ident()
    if PATH == "worker":
        cluster = af.ClusterSpec({"worker": ["inprocess:9791"]})
        async with af.Server(cluster, "worker", 0):
            async with af.Session(cluster=cluster) as sess:
                with trio.fail_after(60):
                    return loop, await sess.run(y, {x: value})
    async with af.Session() as sess:
        return loop, await sess.run(y, {x: value}, options=options)

async def asyncio_step():
    loop = threading.get_ident()
    async with af.aio.Session() as sess:
        return loop, await sess.run(y, {x: value})

assert "scipy.fft" not in sys.modules
loop, fft = asyncio.run(asyncio_step()) if PATH == "aio" else trio.run(trio_step)
assert "scipy.fft" in sys.modules and importing and loop not in importing, (loop, importing)
nn_conv_fft.FORCE = "direct"
async def direct():
    async with af.Session() as sess:
        return await sess.run(y, {x: value})
if PATH != "worker":
    np.testing.assert_allclose(fft, trio.run(direct), rtol=1e-5, atol=1e-5)
print("ok")
"""


@pytest.mark.parametrize("path", ["inline", "traced", "aio", "worker"])
def test_first_fft_convolution_on_the_loop_imports_scipy_fft_on_a_worker_thread(path):
    _fresh_python(_FFT_OFF_THE_LOOP, args=[path])


# Review (rrevhyg): two more ways to the FFT path's first run on the loop's thread. The cost
# model (no FORCE) picks it for a tiny shape its placeholder left unknown at plan time
# (1x11x11x1 by an 11x11 window, ~3 us: run inline), which the preload ignored; and constant
# folding ran a forced-FFT convolution of constants while compiling, on the loop. Imported by
# a preload on a worker thread, scipy's OpenBLAS stayed out of the BLAS hold (OpenBLAS 0.3.30
# ignores a thread count set from that thread): the hold is extended from the loop's.
_FFT_OFF_THE_LOOP_UNKNOWN_OR_FOLDED = r"""
import sys
import threading
import numpy as np
import trio
import asyncflow as af
from asyncflow.kernels import nn_conv_fft

importing = []

class Spy:  # finds nothing: records who asks for scipy.fft
    def find_spec(self, name, path=None, target=None):
        if name == "scipy.fft":
            importing.append(threading.get_ident())
        return None

sys.meta_path.insert(0, Spy())
rng = np.random.default_rng(0)
value = rng.standard_normal([1, 11, 11, 1]).astype(np.float32)
with af.device("/cpu:0"):  # the FFT path takes numpy arrays (a visible GPU would take these)
    w = af.constant(rng.standard_normal([11, 11, 1, 1]).astype(np.float32))
    if sys.argv[1] == "folded":
        nn_conv_fft.FORCE = "fft"
        x = af.constant(value)
        feeds = {}
    else:  # the model's own choice for a shape unknown until the step
        x = af.placeholder(af.float32, [None, None, None, 1])
        feeds = {x: value}
    y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")

async def step():
    async with af.Session() as sess:
        return threading.get_ident(), await sess.run(y, feeds)

assert "scipy.fft" not in sys.modules
loop, fft = trio.run(step)
assert "scipy.fft" in sys.modules and importing and loop not in importing, (loop, importing)
nn_conv_fft.FORCE = "direct"
async def direct():
    async with af.Session() as sess:
        return await sess.run(y, feeds)
np.testing.assert_allclose(fft, trio.run(direct), rtol=1e-4, atol=1e-4)
try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None
if threadpoolctl is not None:  # scipy's own OpenBLAS, loaded by the preload, joins the hold
    blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert len(blas) >= 1 and blas == [1] * len(blas), blas
print("ok")
"""


@pytest.mark.parametrize("case", ["model", "folded"])
def test_an_fft_convolution_unknown_at_plan_time_or_folded_imports_off_the_loop(case):
    _fresh_python(_FFT_OFF_THE_LOOP_UNKNOWN_OR_FOLDED, args=[case])


# The BLAS hold after a preload, whichever thread awaits the first step: the preload
# extends the hold to the OpenBLAS scipy.fft brings on the worker thread that imported it
# (each limit takes threadpoolctl's control for its call, exec/intra_op.py), never on the
# awaiting loop's thread (a library scan there, 1-5 ms with the loop blocked); the FFT kernels
# of the first step and the next run with every BLAS at one thread, and it ends so, whether
# that loop is trio's on the main thread or another one, asyncio's on another thread, or the
# compat layer called from another thread (which its steps run on).
_FFT_PRELOAD_HOLDS_BLAS_FROM_ANY_THREAD = r"""
import asyncio
import sys
import threading
import numpy as np
import trio
import asyncflow as af
import asyncflow.aio
import asyncflow.compat.v1 as tf
from asyncflow.exec import intra_op
from asyncflow.kernels import nn_conv_fft

try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None

def blas_threads():  # numpy's and scipy's OpenBLAS (threadpoolctl's view), [] without it
    if threadpoolctl is None:
        return []
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

extended, loops, kernels = [], [], []
real = intra_op.hold_blas_loaded_since
real_conv2d = nn_conv_fft.conv2d

def spy():
    extended.append(threading.current_thread().name)
    real()

def conv2d(*args, **kwargs):  # the FFT kernel as it runs: on which thread, with what BLAS
    kernels.append((threading.current_thread().name, blas_threads()))
    return real_conv2d(*args, **kwargs)

intra_op.hold_blas_loaded_since = spy
nn_conv_fft.conv2d = conv2d
nn_conv_fft.FORCE = "fft"
CASE = sys.argv[1]
rng = np.random.default_rng(0)
graph = af.Graph()
with graph.as_default(), af.device("/cpu:0"):
    x = af.placeholder(af.float32, [None, 6, 6, 1])
    w = af.constant(rng.standard_normal([3, 3, 1, 1]).astype(np.float32))
    y = af.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
value = rng.standard_normal([1, 6, 6, 1]).astype(np.float32)
results = []

async def trio_step():
    loops.append(threading.current_thread().name)
    async with af.Session(graph=graph) as sess:
        results.extend([await sess.run(y, {x: value}) for _ in range(2)])

async def aio_step():
    loops.append(threading.current_thread().name)
    async with af.aio.Session(graph=graph) as sess:
        results.extend([await sess.run(y, {x: value}) for _ in range(2)])

def compat_step():
    loops.append("asyncflow-compat-loop")
    with tf.Session(graph=graph) as sess:
        results.extend([sess.run(y, {x: value}) for _ in range(2)])

step = {"trio": lambda: trio.run(trio_step), "trio in a thread": lambda: trio.run(trio_step),
        "asyncio in a thread": lambda: asyncio.run(aio_step()),
        "compat from a thread": compat_step}[CASE]
assert "scipy.fft" not in sys.modules
if CASE == "trio":
    step()
else:
    thread = threading.Thread(target=step, name="awaiting")
    thread.start()
    thread.join(120)
assert len(results) == 2 and "scipy.fft" in sys.modules, results
assert extended and not set(extended) & set(loops), (extended, loops)
# Both steps' FFT kernels ran with every BLAS at one thread (the first right after the
# preload), and so it stays: the device's claim holds for the process.
assert len(kernels) == 2, kernels
if threadpoolctl is not None:  # numpy's and scipy's OpenBLAS both held at one thread
    for blas in [threads for _, threads in kernels] + [blas_threads()]:
        assert len(blas) >= 2 and blas == [1] * len(blas), (kernels, blas_threads())
print("ok")
"""


@pytest.mark.parametrize("case", ["trio", "trio in a thread", "asyncio in a thread",
                                  "compat from a thread"])
def test_a_preload_holds_the_blas_it_brings_at_one_thread_whichever_thread_awaits(case):
    _fresh_python(_FFT_PRELOAD_HOLDS_BLAS_FROM_ANY_THREAD, args=[case])
