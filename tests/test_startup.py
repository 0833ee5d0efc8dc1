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


def _fresh_python(script, stdin=b""):
    done = subprocess.run([sys.executable, "-c", script], input=stdin, capture_output=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == b"ok", done.stderr.decode()[-3000:]


def test_import_leaves_out_ml_dtypes_until_a_bfloat16_is_used():
    values = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    frame = b"".join(bytes(b) for b in encode(RecvTensorsReply([TensorEntry("v", values)])))
    _fresh_python(_BFLOAT16_FIRST_USE, frame)


def test_import_leaves_out_scipy_fft_until_the_fft_convolution_is_chosen():
    _fresh_python(_FFT_FIRST_USE)
