"""GPU benchmark: asyncflow on a GPU against PyTorch eager and CuPy on the same GPU, one run.

One command, on a machine with an NVIDIA GPU (CuPy from the ``[gpu-cuda12]`` or
``[gpu-cuda13]`` extra; PyTorch with CUDA for part 1, skipped with a notice without it):

    python bench/bench_gpu.py            # --quick: fewer rounds

Exits 0 with the reason (and the extra to install) when CuPy finds no CUDA device. Every
figure is a ratio against a baseline measured in the same run, interleaved round by round so
that noise hits both sides alike; medians over rounds.

1. Training steps: the digits MLP (64-128-10, batch 256, SGD) and a small convnet (8x8x1 ->
   conv 3x3x16 SAME -> relu -> 2x2 max pool -> dense 10, batch 256, SGD), asyncflow on
   ``/device:GPU:0`` against the same model in PyTorch eager on ``cuda:0``
   (goal: ratio <= 1.0, no slower than PyTorch eager).
2. Host overhead per op: a chain of 1,000 adds on a 16-float vector, asyncflow against CuPy
   called directly (goal: <= 2 us/op more than CuPy).
3. Two streams: 64 small matmuls (256x256) split over two CuPy streams against the same on one
   (goal: <= 0.6x the one-stream time; small kernels leave room to overlap).
4. Host<->device copies of 256 MiB: asyncflow's ``GpuDevice.put``/``to_host`` against
   ``cupy.asarray``/``.get()`` (goal: >= 90% of CuPy's bandwidth).

``run(cupy, **FULL)`` returns the figures as a dict (``tests`` drive it against the fake CuPy
to check that it runs; the fake has no meaningful timings).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow.exec.devices import cuda_status  # noqa: E402
from asyncflow.exec.gpu import GpuDevice  # noqa: E402

GPU = "/device:GPU:0"
BATCH, IN, HIDDEN, OUT, LR = 256, 64, 128, 10, 0.1


def _median(values):
    return statistics.median(values)


# -- 1. training steps ------------------------------------------------------------------------
def _mlp_graph():
    x = af.placeholder(af.float32, [None, IN])
    labels = af.placeholder(af.int32, [None])
    w1 = af.Variable(af.random_normal([IN, HIDDEN], stddev=0.1, seed=1))
    b1 = af.Variable(af.zeros([HIDDEN]))
    w2 = af.Variable(af.random_normal([HIDDEN, OUT], stddev=0.1, seed=2))
    b2 = af.Variable(af.zeros([OUT]))
    logits = af.matmul(af.nn.relu(af.matmul(x, w1) + b1), w2) + b2
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return x, labels, loss, af.train.GradientDescentOptimizer(LR).minimize(loss)


def _conv_graph():
    x = af.placeholder(af.float32, [None, 8, 8, 1])
    labels = af.placeholder(af.int32, [None])
    filters = af.Variable(af.random_normal([3, 3, 1, 16], stddev=0.1, seed=3))
    dense = af.Variable(af.random_normal([4 * 4 * 16, OUT], stddev=0.1, seed=4))
    hidden = af.nn.relu(af.nn.conv2d(x, filters, strides=1, padding="SAME"))
    pooled = af.nn.max_pool(hidden, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    logits = af.matmul(af.reshape(pooled, [-1, 4 * 4 * 16]), dense)
    loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return x, labels, loss, af.train.GradientDescentOptimizer(LR).minimize(loss)


def _torch_step(kind):
    """A PyTorch eager training step of the same model on cuda:0, or None without CUDA torch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda:0")
    gen = torch.Generator().manual_seed(0)
    if kind == "mlp":
        params = [torch.randn(IN, HIDDEN, generator=gen) * 0.1, torch.zeros(HIDDEN),
                  torch.randn(HIDDEN, OUT, generator=gen) * 0.1, torch.zeros(OUT)]
    else:
        params = [torch.randn(16, 1, 3, 3, generator=gen) * 0.1,
                  torch.randn(4 * 4 * 16, OUT, generator=gen) * 0.1]
    params = [p.to(device).requires_grad_() for p in params]
    optimizer = torch.optim.SGD(params, lr=LR)
    functional = torch.nn.functional

    def step(x, labels):
        optimizer.zero_grad(set_to_none=True)
        if kind == "mlp":
            w1, b1, w2, b2 = params
            logits = functional.relu(x @ w1 + b1) @ w2 + b2
        else:
            filters, dense = params
            hidden = functional.relu(functional.conv2d(x, filters, padding=1))
            logits = functional.max_pool2d(hidden, 2).flatten(1) @ dense
        loss = functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        return loss

    def to_device(x, labels):
        if kind == "conv":
            x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))   # NCHW for PyTorch
        return torch.from_numpy(x).to(device), torch.from_numpy(labels.astype(np.int64)).to(device)
    return step, to_device, torch.cuda.synchronize


async def training(kind, rounds, steps):
    """Median seconds per step: asyncflow on GPU:0 and PyTorch eager (None without it)."""
    rng = np.random.default_rng(0)
    shape = (BATCH, IN) if kind == "mlp" else (BATCH, 8, 8, 1)
    x_value = rng.standard_normal(shape).astype(np.float32)
    labels_value = rng.integers(0, OUT, BATCH).astype(np.int32)
    graph = af.Graph()
    with graph.as_default(), af.device(GPU):
        x, labels, loss, train = (_mlp_graph if kind == "mlp" else _conv_graph)()
    with graph.as_default():
        init = af.global_variables_initializer()
    torch_side = _torch_step(kind)
    ours, theirs = [], []
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        feed = {x: x_value, labels: labels_value}
        await sess.run([loss, train], feed)     # compile, warm up
        if torch_side is not None:
            step, to_device, synchronize = torch_side
            tx, tl = to_device(x_value, labels_value)
            step(tx, tl).item()
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(steps):              # each step fetches the loss, as a loop does
                await sess.run([loss, train], feed)
            ours.append((time.perf_counter() - start) / steps)
            if torch_side is not None:
                start = time.perf_counter()
                for _ in range(steps):          # host batches copied each step, like ours
                    tx, tl = to_device(x_value, labels_value)
                    step(tx, tl).item()
                synchronize()
                theirs.append((time.perf_counter() - start) / steps)
    return _median(ours), (_median(theirs) if theirs else None)


# -- 2. host overhead per op ------------------------------------------------------------------
async def overhead_per_op(cupy, n=1000, rounds=5):
    """Seconds per op: asyncflow's chain of ``n`` adds on GPU:0, and CuPy's, same vector."""
    graph = af.Graph()
    with graph.as_default(), af.device(GPU):
        x = af.placeholder(af.float32, [16], name="x")
        y = x
        for _ in range(n):
            y = y + 1.0
    zeros = np.zeros(16, np.float32)
    ours, theirs = [], []
    async with af.Session(graph=graph) as sess:
        await sess.run(y, {x: zeros})
        for _ in range(rounds):
            start = time.perf_counter()
            await sess.run(y, {x: zeros})
            ours.append((time.perf_counter() - start) / n)
            start = time.perf_counter()
            z = cupy.asarray(zeros)
            for _ in range(n):
                z = z + 1.0
            z.get()
            theirs.append((time.perf_counter() - start) / n)
    return _median(ours), _median(theirs)


# -- 3. two streams -----------------------------------------------------------------------------
def two_streams(cupy, size=256, kernels=64, rounds=5):
    """Seconds for ``kernels`` matmuls on one stream and split over two (median of rounds)."""
    a = cupy.asarray(np.random.default_rng(0).standard_normal((size, size)).astype(np.float32))
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    device = cupy.cuda.Device()

    def launch(split):
        for i in range(kernels):
            with streams[i % 2 if split else 0]:
                a @ a
        for stream in streams:
            stream.synchronize()
    launch(True)
    one, two = [], []
    for _ in range(rounds):
        device.synchronize()
        start = time.perf_counter()
        launch(False)
        one.append(time.perf_counter() - start)
        start = time.perf_counter()
        launch(True)
        two.append(time.perf_counter() - start)
    return _median(one), _median(two)


# -- 4. copies ------------------------------------------------------------------------------------
async def copies(cupy, mib=256, rounds=3):
    """Seconds for a host->device->host round of ``mib`` MiB: asyncflow's device, then CuPy's."""
    host = np.ones(mib * (1 << 20) // 4, np.float32)
    gpu = GpuDevice("/job:localhost/replica:0/task:0/device:GPU:0", 0, cupy=cupy)
    ours, theirs = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        back = await gpu.to_host(gpu.put(host))
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        again = cupy.asarray(host).get()
        theirs.append(time.perf_counter() - start)
        assert back.shape == again.shape == host.shape
    return _median(ours), _median(theirs)


FULL = dict(rounds=15, steps=20, chain=1000, kernels=64, mib=256)
QUICK = dict(rounds=3, steps=5, chain=200, kernels=16, mib=16)


async def run(cupy, rounds, steps, chain, kernels, mib):
    """Every figure of the benchmark, as a dict of (asyncflow, baseline) pairs in seconds."""
    figures = {}
    for kind in ("mlp", "conv"):
        figures[f"{kind} step"] = await training(kind, rounds, steps)
    figures["per op"] = await overhead_per_op(cupy, n=chain, rounds=max(rounds // 3, 1))
    figures["two streams"] = two_streams(cupy, kernels=kernels, rounds=max(rounds // 3, 1))
    figures["copy"] = await copies(cupy, mib=mib, rounds=max(rounds // 5, 1))
    return figures


def report(figures, mib):
    lines = []
    for kind, label in (("mlp", "digits MLP step"), ("conv", "convnet step")):
        ours, torch_s = figures[f"{kind} step"]
        if torch_s is None:
            lines.append(f"{label}: asyncflow {ours * 1e3:.3f} ms; PyTorch with CUDA not "
                         "installed here: comparison skipped")
        else:
            lines.append(f"{label}: asyncflow {ours * 1e3:.3f} ms, PyTorch eager "
                         f"{torch_s * 1e3:.3f} ms, ratio {ours / torch_s:.2f} (goal <= 1.0)")
    ours, cupy_s = figures["per op"]
    lines.append(f"per op: asyncflow {ours * 1e6:.2f} us, CuPy {cupy_s * 1e6:.2f} us, overhead "
                 f"{(ours - cupy_s) * 1e6:.2f} us/op (goal <= 2)")
    one, two = figures["two streams"]
    lines.append(f"two streams: one stream {one * 1e3:.3f} ms, two {two * 1e3:.3f} ms, ratio "
                 f"{two / one:.2f} (goal <= 0.6)")
    ours, cupy_s = figures["copy"]
    lines.append(f"copy {mib} MiB there and back: asyncflow {ours * 1e3:.1f} ms, CuPy "
                 f"{cupy_s * 1e3:.1f} ms, bandwidth {cupy_s / ours:.0%} of CuPy's (goal >= 90%)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and smaller sizes")
    args = parser.parse_args(argv)
    count, reason = cuda_status()
    if not count:
        print(f"bench_gpu: no CUDA device: {reason}; nothing to measure.")
        return 0
    import cupy
    sizes = QUICK if args.quick else FULL
    figures = trio.run(lambda: run(cupy, **sizes))
    print(report(figures, sizes["mib"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
