"""GPU check: every kernel family on CuPy vs numpy, stream/event behaviour, and timings.

One command, on a machine with an NVIDIA GPU:

    python bench/gpu_check.py            # add --no-timings to skip part 3

Needs only numpy, cupy, msgpack, aiohttp, trio (and asyncflow from this checkout). Exits 0
with a notice when CuPy finds no CUDA device; otherwise exits 1 if any check failed.

1. Correctness, one check per family. Each builds the same graph twice, once under
   ``af.device("/device:CPU:0")`` and once under ``af.device("/device:GPU:0")``, runs both
   traced (FULL_TRACE) and compares every fetch (float tolerance 1e-4; random ops: shape,
   dtype and statistics only). Each line says how many ops ran on the GPU, so a family that
   silently fell back to the CPU shows. Families: math, reductions, array (layout, indexing,
   tiling, embedding), sources, random, state (variables, checkpoint save/restore of GPU
   variables), scatter (ScatterAdd/Sub/Update), nn (activations, softmax, cross entropies, bias_add, conv2d, pooling and
   their gradients), control_flow (while_loop, cond and a while loop's gradient on GPU:0),
   gradients (an MLP), optimizers (GradientDescent, Momentum, Adam on GPU variables),
   data (queues and summaries stay on the CPU by placement; py_func on GPU values),
   transfer (GPU->CPU, CPU->GPU->CPU, lossy bfloat16 both ways), timeline (FULL_TRACE of a
   GPU training step written with ``af.timeline``, valid Chrome-trace JSON).
2. Streams and events: ``stream_done`` wakes only after the stream has finished.
3. Timings: a chain of 1000 small GPU ops (host overhead per op, asyncflow vs CuPy called
   directly); 64 small matmuls on two streams vs all on one stream.

A failing check prints its error and the rest go on; a summary table ends the run.
``run_checks(timings=...)`` is the entry point tests use with a fake CuPy
(tests/exec/test_gpu_check.py).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import trio  # noqa: E402

import asyncflow as af  # noqa: E402
from asyncflow.exec.devices import cuda_device_count, cuda_status  # noqa: E402
from asyncflow.exec.gpu import stream_done  # noqa: E402

GPU, CPU = "/device:GPU:0", "/device:CPU:0"
RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class CheckError(AssertionError):
    pass


# -- running a family on both devices ----------------------------------------------------------
async def _run(build, kind, config=None, steps=1, init=True):
    """Build under ``kind``'s device, run traced; returns (values, devices_of_ops)."""
    graph = af.Graph()
    with graph.as_default(), af.device(kind):
        fetches, feed, *extra = build()
    config = config or af.SessionConfig(allow_soft_placement=False, optimize_graph=False)
    async with af.Session(graph=graph, config=config) as sess:
        if init:
            with graph.as_default():
                await sess.run(af.global_variables_initializer())
        for _ in range(steps - 1):
            await sess.run(fetches, feed)
        meta = af.RunMetadata()
        values = await sess.run(fetches, feed, options=af.RunOptions(
            trace_level=af.RunOptions.FULL_TRACE), run_metadata=meta)
        if extra:
            values = dict(values, **await extra[0](sess))
    devices = {}
    for record in meta.step_stats:
        devices[record.node_name] = (record.op_type, record.device)
    return values, devices


def _on_gpu(devices):
    return sum(1 for _, d in devices.values() if "GPU" in d)


def _compare(cpu, gpu, rtol=1e-4, atol=1e-4):
    for name in cpu:
        want, got = np.asarray(cpu[name]), gpu[name]
        if not isinstance(got, np.ndarray) and not np.isscalar(got) and got is not None:
            raise CheckError(f"{name}: fetched a {type(got).__name__}, not a numpy array")
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckError(f"{name}: GPU gave {got.dtype}{list(got.shape)}, CPU "
                             f"{want.dtype}{list(want.shape)}")
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


async def _both(build, **kwargs):
    cpu, _ = await _run(build, CPU, **kwargs)
    gpu, devices = await _run(build, GPU, **kwargs)
    _compare(cpu, gpu)
    ops = _on_gpu(devices)
    if not ops:
        raise CheckError("no op ran on the GPU")
    return f"{len(cpu)} fetches equal; {ops}/{len(devices)} traced ops on GPU"


# -- families -------------------------------------------------------------------------------
async def family_math():
    x, y, c = _normal(32, 32), _normal(32, 32), RNG.integers(-5, 5, (8, 8)).astype(np.int32)

    def build():
        a, b, i = af.constant(x), af.constant(y), af.constant(c)
        out = {
            "unary": af.tanh(a) + af.exp(-af.abs(a)) + af.log1p(af.abs(b)) + af.sign(a)
            + af.floor(a) + af.sin(b) + af.sqrt(af.abs(a)) + af.rsqrt(af.abs(b) + 1.0),
            "binary": af.maximum(a, b) * af.pow(af.abs(a), 1.5) - a / (af.abs(b) + 1.0)
            + af.squared_difference(a, b),
            "ints": af.floordiv(i, 3) + af.mod(i, 3) * i,
            "compare": af.logical_and(af.equal(a, a), af.greater(a, b)),
            "matmul": af.matmul(a, b, transpose_b=True),
            "cast": af.cast(a * 10.0, af.int32),
            "select": af.where(af.greater(a, 0.0), a, b),
            "where": af.where(af.greater(a, 1.0)),
            "add_n3": af.add_n([a, b, a]),
            "add_n10": af.add_n([a[:2]] * 10),
            "sigmoid": af.sigmoid(a),
            "argmax": af.argmax(a, axis=1),
        }
        return out, {}
    return await _both(build)


async def family_reductions():
    x, i = _normal(6, 5, 4), RNG.integers(-9, 9, (6, 5)).astype(np.int32)

    def build():
        a, n = af.constant(x), af.constant(i)
        out = {"sum": af.reduce_sum(a), "sum1": af.reduce_sum(a, axis=1, keepdims=True),
               "mean": af.reduce_mean(a, axis=[0, 2]), "max": af.reduce_max(a, axis=-1),
               "min": af.reduce_min(a), "prod": af.reduce_prod(a, axis=2),
               "all": af.reduce_all(af.greater(a, -9.0)), "any": af.reduce_any(
                   af.greater(a, 1.0), axis=0), "int_mean": af.reduce_mean(n, axis=1),
               "int_sum": af.reduce_sum(n), "empty_max": af.reduce_max(a[:0], axis=0),
               "empty_sum": af.reduce_sum(a[:0])}
        return out, {}
    return await _both(build)


async def family_array():
    x = _normal(4, 6, 3)

    def build():
        a = af.constant(x)
        ids = af.constant(np.array([3, 0, 3, 1], np.int32))
        out = {"reshape": af.reshape(a, [12, -1]), "shape": af.shape(a),
               "transpose": af.transpose(a, [2, 0, 1]), "concat": af.concat([a, a], 1),
               "stack": af.stack([a, a], axis=1), "split": af.split(a, 2, axis=1)[1],
               "slice": af.slice(a, [1, 2, 0], [2, 3, -1]), "strided": a[1:, ::2, 1],
               "gather": af.gather(a, ids), "one_hot": af.one_hot(ids, 5),
               "tile": af.tile(a[:1], [2, 1, 1]), "pad": af.pad(a, [[1, 0], [0, 2], [0, 0]]),
               "squeeze": af.squeeze(af.expand_dims(a, 0), [0]),
               "segment_sum": af.unsorted_segment_sum(a, ids, 5),
               "partition": af.dynamic_partition(a, af.constant([0, 1, 0, 1], af.int32), 2)[0]}
        return out, {}
    return await _both(build)


async def family_sources():
    feed = _normal(3, 3)

    def build():
        x = af.placeholder(af.float32, [3, 3], name="x")
        out = {"fill": af.fill([3, 3], 2.5) + x, "range": af.range(0.0, 3.0, 0.5),
               "int_range": af.range(2, 11, 3), "zeros_like": af.zeros_like(x),
               "ones_like": af.ones_like(x), "const": af.constant(np.arange(6.0)) * 2.0}
        return out, {x: feed}
    return await _both(build)


async def family_random():
    def build():
        out = {"normal": af.random_normal([256, 256], seed=1),
               "uniform": af.random_uniform([256, 256], seed=2),
               "truncated": af.truncated_normal([256, 256], seed=3),
               "ints": af.random_uniform([4096], 0, 10, dtype=af.int32, seed=4),
               "shuffled": af.random_shuffle(af.range(0, 100), seed=5)}
        return out, {}
    gpu, devices = await _run(build, GPU)
    stats = {"normal": (0.0, 1.0), "uniform": (0.5, 0.2887), "truncated": (0.0, 0.88)}
    for name, (mean, std) in stats.items():
        value = gpu[name]
        if value.shape != (256, 256) or value.dtype != np.float32:
            raise CheckError(f"{name}: {value.dtype}{list(value.shape)}")
        if abs(value.mean() - mean) > 0.02 or abs(value.std() - std) > 0.02:
            raise CheckError(f"{name}: mean {value.mean():.3f} std {value.std():.3f}, "
                             f"expected about {mean} and {std}")
    if abs(gpu["truncated"]).max() > 2.0:
        raise CheckError("truncated_normal gave a value beyond 2 stddev")
    ints = gpu["ints"]
    if ints.dtype != np.int32 or ints.min() < 0 or ints.max() > 9 or abs(ints.mean() - 4.5) > 0.2:
        raise CheckError(f"random ints: {ints.dtype} in [{ints.min()}, {ints.max()}]")
    if sorted(gpu["shuffled"].tolist()) != list(range(100)):
        raise CheckError("random_shuffle is not a permutation")
    return f"shapes, dtypes and moments as expected; {_on_gpu(devices)} traced ops on GPU"


async def family_state():
    x, path = _normal(6, 4), os.path.join(tempfile.mkdtemp(prefix="gpu_check"), "ckpt")

    def build():
        v = af.Variable(x, name="v")
        w = af.Variable(np.zeros((6, 4), np.float32), name="w")
        with af.control_dependencies([af.assign_add(v, x)]):
            step = af.group(af.assign_sub(v, x * 0.5), af.assign(w, v * 2.0))
        with af.control_dependencies([step]):
            w_now = af.identity(w.value())
        with af.device(None):  # Save/Restore have CPU kernels only (as in TF1): build the
            saver = af.train.Saver([v, w])  # saver outside the GPU scope, as TF1 programs do
        clobber, read = af.assign(v, af.zeros([6, 4])), v.value()

        async def checkpoint(sess):   # Save reads GPU variables, Restore assigns them
            await saver.save(sess, path)
            await sess.run(clobber)
            await saver.restore(sess, path)
            return {"restored": await sess.run(read)}
        return {"v": v.value(), "w": w_now, "inited": af.is_variable_initialized(v)}, {}, \
            checkpoint
    return await _both(build)


async def family_scatter():
    def build():
        w = af.Variable(np.zeros((6, 4), np.float32), name="w")
        rows = af.constant(np.ones((3, 4), np.float32))
        added = af.scatter_add(w, af.constant(np.array([0, 2, 2], np.int32)), rows)
        with af.control_dependencies([added]):
            subbed = af.scatter_sub(w, af.constant(np.array([1, 1], np.int32)), rows[:2])
        with af.control_dependencies([subbed]):
            updated = af.scatter_update(w, af.constant([5], af.int32), rows[:1] * 7.0)
        return {"w": updated}, {}
    return await _both(build)


async def family_nn():
    x, f = _normal(2, 9, 9, 3), _normal(3, 3, 3, 4)
    logits, labels = _normal(8, 10), RNG.integers(0, 10, 8).astype(np.int32)
    wide = _normal(4, 70)

    def build():
        a, k = af.constant(x), af.constant(f)
        z, y = af.constant(logits), af.constant(labels)
        conv = af.nn.conv2d(a, k, [1, 1, 1, 1], "SAME")
        conv2 = af.nn.conv2d(a, k, [1, 2, 2, 1], "VALID")
        pooled = af.nn.max_pool(conv, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        averaged = af.nn.avg_pool(conv, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        act = af.nn.bias_add(af.nn.relu(z), af.constant(np.arange(10, dtype=np.float32)))
        dense = af.nn.softmax_cross_entropy_with_logits(labels=af.one_hot(y, 10), logits=z)
        sparse = af.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z)
        sparse_wide = af.nn.sparse_softmax_cross_entropy_with_logits(
            labels=af.constant(np.array([0, 69, 3, 5], np.int32)), logits=af.constant(wide))
        loss = (af.reduce_sum(pooled) + af.reduce_sum(averaged) + af.reduce_sum(conv2 ** 2)
                + af.reduce_sum(dense) + af.reduce_sum(sparse) + af.nn.l2_loss(act)
                + af.reduce_sum(af.nn.elu(z) + af.nn.relu6(z) + af.nn.leaky_relu(z, 0.1)))
        grads = af.gradients(loss, [a, k, z])
        out = {"conv": conv, "conv_valid": conv2, "max_pool": pooled, "avg_pool": averaged,
               "bias_relu": act, "softmax": af.nn.softmax(z), "log_softmax": af.nn.log_softmax(z),
               "xent": dense, "sparse_xent": sparse, "sparse_xent_wide": sparse_wide,
               "sigmoid_xent": af.nn.sigmoid_cross_entropy_with_logits(
                   labels=af.nn.sigmoid(z), logits=z),
               "loss": loss, "d_input": grads[0], "d_filter": grads[1], "d_logits": grads[2]}
        return out, {}
    return await _both(build)


async def family_control_flow():
    feed = np.abs(_normal(16)) * 0.1

    def build():
        x = af.placeholder(af.float32, [16], name="x")
        i0 = af.constant(0)
        _, total = af.while_loop(lambda i, acc: af.less(i, 5),
                                 lambda i, acc: (i + 1, acc * 1.5 + af.tanh(acc)), [i0, x])
        picked = af.cond(af.reduce_sum(x) > 0.0, lambda: af.exp(x), lambda: -x)
        other = af.cond(af.reduce_sum(x) > 1e9, lambda: af.exp(x), lambda: -x)
        grad = af.gradients(af.reduce_sum(total), x)[0]
        return {"while": total, "cond_true_or_false": picked, "cond_false": other,
                "while_grad": grad}, {x: feed}
    return await _both(build, config=af.SessionConfig(allow_soft_placement=True, optimize_graph=False))


def _mlp(x, sizes=(32, 64, 10)):
    h, weights = x, []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        w = af.Variable(np.random.default_rng(i).standard_normal((fan_in, fan_out)).astype(
            np.float32) * 0.3, name=f"w{i}")
        b = af.Variable(np.full(fan_out, 0.1, np.float32), name=f"b{i}")
        weights += [w, b]
        h = af.nn.bias_add(af.matmul(h, w), b)
        if i < len(sizes) - 2:
            h = af.nn.relu(h)
    return h, weights


async def family_gradients():
    x, labels = _normal(16, 32), RNG.integers(0, 10, 16).astype(np.int32)

    def build():
        logits, weights = _mlp(af.constant(x))
        loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
            labels=af.constant(labels), logits=logits))
        grads = af.gradients(loss, weights)
        return {"loss": loss, **{f"d_{w.op.name}": g for w, g in zip(weights, grads)}}, {}
    return await _both(build)


async def family_optimizers():
    x, labels = _normal(16, 32), RNG.integers(0, 10, 16).astype(np.int32)

    def build():
        out = {}
        for name, opt in (("sgd", af.train.GradientDescentOptimizer(0.1)),
                          ("momentum", af.train.MomentumOptimizer(0.1, 0.9)),
                          ("adam", af.train.AdamOptimizer(0.01))):
            with af.name_scope(name):
                logits, weights = _mlp(af.constant(x))
                loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=af.constant(labels), logits=logits))
                train = opt.minimize(loss, var_list=weights)
                with af.control_dependencies([train]):
                    out[name] = af.identity(weights[0].value())
        return out, {}
    return await _both(build, steps=3)


def _summary_values(serialized):
    """``{tag: values}`` of a serialized Summary: a scalar's value, a histogram's count,
    min, max and sum (bucket edges may split float32 rounding differently)."""
    from tensorboardX.proto import summary_pb2
    out = {}
    for value in summary_pb2.Summary.FromString(bytes(serialized)).value:
        if value.HasField("histo"):
            histo = value.histo
            out[value.tag] = [histo.num, histo.min, histo.max, histo.sum]
        else:
            out[value.tag] = [value.simple_value]
    return out


async def family_data():
    """Queues, readers and summaries have CPU kernels only: with soft placement they land on
    the CPU while their producers and consumers stay on the GPU."""
    x = _normal(4, 3)

    def build():
        q = af.FIFOQueue(8, [af.float32], shapes=[[4, 3]])
        a = af.constant(x) * 2.0
        enqueue = q.enqueue([a])
        with af.control_dependencies([enqueue]):
            got = q.dequeue() + 1.0
        summary = af.summary.merge([af.summary.scalar("loss", af.reduce_sum(a)),
                                    af.summary.histogram("a", a)])
        doubled = af.py_func(lambda v: v * 2.0, [a], af.float32)
        return {"dequeued": got, "summary": summary, "py_func": doubled}, {}
    config = af.SessionConfig(allow_soft_placement=True, optimize_graph=False)
    cpu, _ = await _run(build, CPU, config=config)
    gpu, devices = await _run(build, GPU, config=config)
    # The GPU's float32 sums may differ from numpy's in the last bits, so the serialized
    # summaries need not be equal byte for byte (the H200 showed it): compare their values.
    ours, theirs = _summary_values(gpu["summary"]), _summary_values(cpu["summary"])
    if ours.keys() != theirs.keys() or any(
            not np.allclose(ours[tag], theirs[tag], rtol=1e-4, atol=1e-5) for tag in ours):
        raise CheckError(f"summaries differ: GPU {ours}, CPU {theirs}")
    _compare({k: cpu[k] for k in ("dequeued", "py_func")}, gpu)
    def where(word):
        return sorted({d.rsplit(":", 2)[-2][-3:] + ":" + d.rsplit(":", 1)[-1]
                       for t, d in devices.values() if word in t})
    return (f"queue ops on {where('Queue')}, summaries on {where('Summary')}, py_func on "
            f"{where('PyFunc')}, "
            f"{_on_gpu(devices)} traced ops on GPU")


async def family_transfer():
    x = _normal(64, 64)
    results = {}
    for label, devices, config in (
            ("cpu", ("/device:CPU:0", "/device:CPU:1"), af.SessionConfig(device_count={"CPU": 2})),
            ("gpu", (CPU, GPU), None)):
        for compress in ("", "truncate", "round"):
            graph = af.Graph()
            with graph.as_default():
                with af.device(devices[0]):
                    a = af.placeholder(af.float32, [64, 64], name="a")
                    a2 = a * 1.0                  # computed here: a feed would go directly
                with af.device(devices[1]):
                    b = af.tanh(a2) * 3.0         # CPU -> other device
                with af.device(devices[0]):
                    c = af.identity(b) + 1.0      # other device -> CPU
            cfg = config or af.SessionConfig()
            cfg = af.SessionConfig(device_count=cfg.device_count, compress_transfers=compress or None,
                                   allow_soft_placement=False)
            async with af.Session(graph=graph, config=cfg) as sess:
                meta = af.RunMetadata()
                results[label, compress] = await sess.run(c, {a: x}, options=af.RunOptions(
                    trace_level=af.RunOptions.FULL_TRACE), run_metadata=meta)
            if label == "gpu":
                kinds = {r.op_type for r in meta.step_stats if "GPU" in r.device}
                if not {"_Send", "_Recv"} <= kinds:
                    raise CheckError(f"no Send/Recv on the GPU side (ops there: {sorted(kinds)})")
    for compress in ("", "truncate", "round"):
        _compare({compress or "plain": results["cpu", compress]},
                 {compress or "plain": results["gpu", compress]}, rtol=1e-6, atol=1e-6)
    if np.array_equal(results["gpu", "round"], results["gpu", ""]):
        raise CheckError("bfloat16 transfer changed nothing: was it applied?")
    return "CPU->GPU->CPU plain, truncate and round equal the CPU:0->CPU:1->CPU:0 results"


async def family_timeline():
    x, labels = _normal(16, 32), RNG.integers(0, 10, 16).astype(np.int32)
    graph = af.Graph()
    with graph.as_default():
        with af.device(GPU):
            logits, weights = _mlp(af.constant(x))
            loss = af.reduce_mean(af.nn.sparse_softmax_cross_entropy_with_logits(
                labels=af.constant(labels), logits=logits))
            train = af.train.GradientDescentOptimizer(0.1).minimize(loss)
        with af.device(CPU):
            reported = af.identity(loss)
        init = af.global_variables_initializer()
    async with af.Session(graph=graph) as sess:
        await sess.run(init)
        meta = af.RunMetadata()
        await sess.run([train, reported], options=af.RunOptions(
            trace_level=af.RunOptions.FULL_TRACE), run_metadata=meta)
    path = os.path.join(tempfile.mkdtemp(prefix="gpu_check"), "timeline.json")
    af.timeline.write(meta, path)
    with open(path) as f:
        trace = json.load(f)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    if not any("GPU" in n for n in names):
        raise CheckError(f"no GPU process in the timeline (processes: {names})")
    ops = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    return f"{ops} op events, processes {names}, written to {path}"


FAMILIES = {
    "math": family_math, "reductions": family_reductions, "array": family_array,
    "sources": family_sources, "random": family_random, "state": family_state,
    "scatter": family_scatter,
    "nn": family_nn, "control_flow": family_control_flow, "gradients": family_gradients,
    "optimizers": family_optimizers, "data": family_data, "transfer": family_transfer,
    "timeline": family_timeline,
}


# -- streams, events, timings -----------------------------------------------------------------
async def check_events(cupy, n=4096):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.ones((n, n), cupy.float32)
        b = a @ a
    start = time.perf_counter()
    await stream_done(stream)
    waited = time.perf_counter() - start
    if not stream.done:
        raise CheckError("stream_done returned before the stream finished")
    if float(b[0, 0].get()) != n:
        raise CheckError(f"ones @ ones gave {float(b[0, 0].get())}, expected {n}")
    return f"stream_done woke after {waited * 1e3:.2f} ms; stream.done is True"


async def check_small_ops(cupy):
    n = 1000
    graph = af.Graph()
    with graph.as_default(), af.device(GPU):
        x = af.placeholder(af.float32, [16], name="x")
        y = x
        for _ in range(n):
            y = y + 1.0
    async with af.Session(graph=graph) as sess:
        await sess.run(y, {x: np.zeros(16, np.float32)})
        start = time.perf_counter()
        await sess.run(y, {x: np.zeros(16, np.float32)})
        ours = (time.perf_counter() - start) / n
    z = cupy.zeros(16, cupy.float32)
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(n):
        z = z + 1.0
    cupy.cuda.Device().synchronize()
    direct = (time.perf_counter() - start) / n
    return (f"chain of {n} small ops: asyncflow {ours * 1e6:.1f} us/op, CuPy directly "
            f"{direct * 1e6:.1f} us/op (overhead {(ours - direct) * 1e6:.1f} us/op)")


async def check_two_streams(cupy, size=256, kernels=64):
    """Many small matmuls on one stream, then split over two: kernels this small leave most
    of the GPU idle, so two streams can overlap them (8192^2 ones fill an H200 alone)."""
    a = cupy.random.standard_normal((size, size), dtype=cupy.float32)
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    times = []
    for streams in ((s1, s1), (s1, s2)):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for i in range(kernels):
            with streams[i % 2]:
                a @ a
        await stream_done(streams[0])
        await stream_done(streams[1])
        times.append((time.perf_counter() - start) * 1e3)
    return (f"{kernels} {size}^2 matmuls: one stream {times[0]:.2f} ms, two streams "
            f"{times[1]:.2f} ms ({times[1] / times[0]:.2f}x)")


# -- driver -----------------------------------------------------------------------------------
async def _attempt(results, section, name, fn, *args):
    start = time.perf_counter()
    try:
        detail = await fn(*args)
        ok = True
    except Exception as exc:  # noqa: BLE001 - reported, and the other checks go on
        lines = [line for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
        ok, detail = False, " ".join(lines[:3])[:300]
        traceback.print_exc()
    seconds = time.perf_counter() - start
    results.append((section, name, ok, seconds, detail))
    print(f"  {'PASS' if ok else 'FAIL'} {name:13s} {seconds:6.2f}s  {detail}", flush=True)


async def run_checks(cupy=None, timings=True, families=None, event_size=4096):
    """Run every check; returns ``[(section, name, ok, seconds, detail)]``.

    Args:
        cupy: the CuPy module (imported when None; tests pass a fake).
        timings: also run part 3 (meaningless on a fake).
        families: names from ``FAMILIES`` to run (all when None).
        event_size: the square matmul the stream-event check waits for.
    """
    if cupy is None:
        import cupy
    results = []
    print("1. kernel families on GPU:0 vs CPU:0")
    for name in families or FAMILIES:
        await _attempt(results, "correctness", name, FAMILIES[name])
    print("2. streams and events")
    await _attempt(results, "events", "stream_done", check_events, cupy, event_size)
    if timings:
        print("3. timings")
        await _attempt(results, "timings", "small_ops", check_small_ops, cupy)
        await _attempt(results, "timings", "two_streams", check_two_streams, cupy)
    return results


def summary_table(results):
    """The summary table of ``run_checks``' results, as text."""
    lines = [f"{'section':12s} {'check':13s} {'result':6s} {'time':>7s}  detail"]
    for section, name, ok, seconds, detail in results:
        lines.append(f"{section:12s} {name:13s} {'PASS' if ok else 'FAIL':6s} "
                     f"{seconds:6.2f}s  {detail[:100]}")
    failed = [name for _, name, ok, _, _ in results if not ok]
    lines.append(f"{len(results) - len(failed)}/{len(results)} passed"
                 + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if cuda_device_count() == 0:
        reason = cuda_status()[1] or "CuPy finds no CUDA device on this machine"
        print(f"gpu_check: no CUDA device here ({reason}); nothing to check.")
        return 0
    results = trio.run(lambda: run_checks(timings="--no-timings" not in argv))
    print()
    print(summary_table(results))
    return 0 if all(ok for _, _, ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
