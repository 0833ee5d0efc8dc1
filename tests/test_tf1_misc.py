"""TF1 names and defaults: schedules, einsum/tensordot, Print, summary.image, Variable
helpers, Saver's meta graph default, start_queue_runners' TF1 form, soft placement off,
and af.Session outside trio. Differential checks against TF1 skip without TensorFlow."""
import asyncio
import inspect
import os
import sys
import zlib

import numpy as np
import pytest
import trio
from tensorboardX.proto import summary_pb2

import asyncflow as af
from tests.tf1_reference import tf1_run


def _schedules(tf, gs):
    """The schedules under test, built with asyncflow or TF1 (whose side runs this source)."""
    return [tf.train.exponential_decay(0.1, gs, 7, 0.5),
            tf.train.exponential_decay(0.1, gs, 7, 0.5, staircase=True),
            tf.train.piecewise_constant(gs, [3, 9], [1.0, 0.5, 0.25]),
            tf.train.polynomial_decay(0.1, gs, 10, end_learning_rate=0.01, power=2.0),
            tf.train.polynomial_decay(0.1, gs, 10, cycle=True),
            tf.train.inverse_time_decay(0.1, gs, 5, 0.5),
            tf.train.inverse_time_decay(0.1, gs, 5, 0.5, staircase=True),
            tf.train.cosine_decay(0.1, gs, 12, alpha=0.1)]


STEPS = [0, 1, 3, 4, 9, 10, 14, 25]


async def _our_schedules():
    with af.Graph().as_default():
        gs = af.placeholder(af.int64, [])
        rates = _schedules(af, gs)
        async with af.Session() as sess:
            return np.array([await sess.run(rates, {gs: s}) for s in STEPS])


async def test_schedules_follow_their_formulas():
    ours = await _our_schedules()
    expected = np.array([[0.1 * 0.5 ** (s / 7), 0.1 * 0.5 ** (s // 7),
                          1.0 if s <= 3 else 0.5 if s <= 9 else 0.25,
                          (0.1 - 0.01) * (1 - min(s, 10) / 10) ** 2 + 0.01,
                          (0.1 - 0.0001) * (1 - s / (10 * max(1, np.ceil(s / 10)))) + 0.0001,
                          0.1 / (1 + 0.5 * s / 5), 0.1 / (1 + 0.5 * (s // 5)),
                          0.1 * (0.9 * 0.5 * (1 + np.cos(np.pi * min(s, 12) / 12)) + 0.1)]
                         for s in STEPS])
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    assert ours.dtype == np.float32


async def test_schedules_match_tf1(tmp_path):
    ours = await _our_schedules()
    theirs = tf1_run(inspect.getsource(_schedules) + """
gs = tf.placeholder(tf.int64, [])
rates = _schedules(tf, gs)
with tf.Session() as sess:
    outputs["rates"] = np.array([sess.run(rates, {gs: s}) for s in inputs["steps"]])
""", tmp_path, steps=np.array(STEPS))
    np.testing.assert_allclose(ours, theirs["rates"], rtol=1e-6)


def test_schedule_argument_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="global_step is required"):
            af.train.exponential_decay(0.1, None, 10, 0.5)
        with pytest.raises(ValueError, match="1 less than the length of values"):
            af.train.piecewise_constant(af.constant(1), [1, 2], [0.1, 0.2])


async def test_einsum_and_tensordot_values_and_gradients_match_tf1(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    c = rng.standard_normal((3, 5)).astype(np.float32)
    equations = ["ijk,kl->ijl", "ijk,kl->il", "ijk,kl,jl->i", "ijk->kj", "ijk,kl"]
    with af.Graph().as_default():
        ta, tb, tc = af.constant(a), af.constant(b), af.constant(c)
        results, grads = [], []
        for eq in equations:
            operands = [ta, tb, tc][:eq.split("->")[0].count(",") + 1]
            out = af.einsum(eq, *operands)
            results.append(out)
            grads.append(af.gradients(af.reduce_sum(out * out), operands))
        dots = [af.tensordot(ta, tb, 1), af.tensordot(ta, tc, [[1], [0]]),
                af.tensordot(ta, tb, [[2], [0]])]
        dot_grads = af.gradients(af.reduce_sum(dots[1] * dots[1]), [ta, tc])
        async with af.Session() as sess:
            ours = await sess.run([results, grads, dots, dot_grads])
    for eq, value in zip(equations, ours[0]):
        operands = [a, b, c][:eq.split("->")[0].count(",") + 1]
        np.testing.assert_allclose(value, np.einsum(eq, *operands), rtol=1e-5, atol=1e-5)
    theirs = tf1_run("""
ta, tb, tc = (tf.constant(inputs[k]) for k in "abc")
results, grads = [], []
for eq in ["ijk,kl->ijl", "ijk,kl->il", "ijk,kl,jl->i", "ijk->kj", "ijk,kl"]:
    operands = [ta, tb, tc][:eq.split("->")[0].count(",") + 1]
    out = tf.einsum(eq, *operands)
    results.append(out)
    grads.extend(tf.gradients(tf.reduce_sum(out * out), operands))
dots = [tf.tensordot(ta, tb, 1), tf.tensordot(ta, tc, [[1], [0]]), tf.tensordot(ta, tb, [[2], [0]])]
dot_grads = tf.gradients(tf.reduce_sum(dots[1] * dots[1]), [ta, tc])
with tf.Session() as sess:
    outputs["results"], outputs["grads"], outputs["dots"], outputs["dot_grads"] = sess.run(
        [results, grads, dots, dot_grads])
""", tmp_path, a=a, b=b, c=c)
    for mine, theirs_value in zip(ours[0], theirs["results"]):
        np.testing.assert_allclose(mine, theirs_value, rtol=1e-5, atol=1e-5)
    for mine, theirs_value in zip([g for gs in ours[1] for g in gs], theirs["grads"]):
        np.testing.assert_allclose(mine, theirs_value, rtol=1e-4, atol=1e-4)
    for mine, theirs_value in zip(ours[2] + ours[3], theirs["dots"] + theirs["dot_grads"]):
        np.testing.assert_allclose(mine, theirs_value, rtol=1e-5, atol=1e-5)


def test_einsum_errors_name_the_problem():
    with af.Graph().as_default():
        a = af.constant(np.ones((2, 3), np.float32))
        with pytest.raises(ValueError, match="names 2 operands, 1 given"):
            af.einsum("ij,jk->ik", a)
        with pytest.raises(ValueError, match="has rank 2 but subscripts 'ijk'"):
            af.einsum("ijk->i", a)
        with pytest.raises(ValueError, match="contracted dims differ"):
            af.tensordot(a, a, [[1], [0]])


async def test_print_passes_its_input_and_prints_first_n_times(capfd):
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0, 3.0, 4.0])
        printed = af.Print(x, [x, af.constant(7)], message="x: ", first_n=2, summarize=2)
        grad = af.gradients(af.reduce_sum(printed * 2.0), x)[0]
        async with af.Session() as sess:
            for _ in range(3):
                np.testing.assert_array_equal(await sess.run(printed), [1, 2, 3, 4])
            np.testing.assert_array_equal(await sess.run(grad), [2, 2, 2, 2])
    err = capfd.readouterr().err
    assert err.count("x: [1 2...]7") == 2, err


def _png_pixels(data):
    """Decode an 8-bit, unfiltered PNG (what the ImageSummary kernel writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        chunks[kind] = data[pos + 8:pos + 8 + length]
        pos += 12 + length
    width, height = int.from_bytes(chunks[b"IHDR"][:4], "big"), int.from_bytes(chunks[b"IHDR"][4:8], "big")
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, -1)
    assert not rows[:, 0].any()
    return rows[:, 1:].reshape(height, width, -1)


async def test_summary_image_writes_pngs_tf1_scales(tmp_path):
    images = np.linspace(0.0, 2.0, 2 * 3 * 4 * 3, dtype=np.float32).reshape(2, 3, 4, 3)
    with af.Graph().as_default():
        summary = af.summary.image("pictures", af.constant(images), max_outputs=5)
        assert summary in af.get_collection(af.GraphKeys.SUMMARIES)
        async with af.Session() as sess:
            data = await sess.run(summary)
    values = summary_pb2.Summary.FromString(data.item() if hasattr(data, "item") else data).value
    assert len(values) == 2
    for k, value in enumerate(values):
        assert value.tag == f"pictures/image/{k}"
        assert (value.image.height, value.image.width, value.image.colorspace) == (3, 4, 3)
        pixels = _png_pixels(value.image.encoded_image_string)
        # each image on its own scale: its largest value becomes 255, then truncated
        expected = np.trunc(images[k] * np.float32(255.0 / images[k].max())).astype(np.uint8)
        np.testing.assert_array_equal(pixels, expected)
    with af.Graph().as_default(), pytest.raises(ValueError, match="4-D"):
        af.summary.image("bad", af.zeros([3, 4]))
    with af.Graph().as_default(), pytest.raises(ValueError, match="max_outputs must be at"):
        af.summary.image("none", af.zeros([1, 2, 2, 1]), max_outputs=0)


def _image_cases():
    """``(images, max_outputs)``: float with negatives and a NaN pixel, non-negative, a dark
    image (below TF1's 1e-6 threshold), uint8, float64, 1 and 4 channels, one image."""
    rng = np.random.default_rng(3)
    mixed = rng.uniform(-1.5, 2.0, (3, 4, 5, 3)).astype(np.float32)
    mixed[1, 2, 3, 1] = np.nan
    mixed[2, 0, 0, 0] = np.inf
    return [(mixed, 3), (mixed, 2), (mixed[:1], 3), (mixed, 1),
            (np.abs(mixed[:2]), 4), (np.full((1, 2, 2, 1), 1e-7, np.float32), 1),
            (rng.integers(0, 256, (2, 3, 2, 4)).astype(np.uint8), 2),
            (rng.uniform(-3, 1, (2, 3, 3, 1)), 2)]


async def test_summary_image_values_match_tf1(tmp_path):
    """Tags, sizes, colorspaces and decoded PNG pixels of ``summary.image`` against TF1's
    (``summary_image_op_test.py``'s normalization: per image, truncated, NaN painted red)."""
    cases = _image_cases()
    with af.Graph().as_default():
        summaries = [af.summary.image("pics", af.constant(images), max_outputs=limit)
                     for images, limit in cases]
        async with af.Session() as sess:
            datas = await sess.run(summaries)
    ours = []
    for data in datas:
        for value in summary_pb2.Summary.FromString(data).value:
            image = value.image
            ours.append((value.tag, [image.height, image.width, image.colorspace],
                         _png_pixels(image.encoded_image_string)))
    theirs = tf1_run("""
from tensorflow.core.framework import summary_pb2
count = len([k for k in inputs if k.startswith("images")])
tags, sizes, pixels = [], [], []
with tf.Session() as sess:
    for k in range(count):
        data = sess.run(tf.summary.image("pics", tf.constant(inputs[f"images{k}"]),
                                         max_outputs=int(inputs[f"limit{k}"])))
        for value in summary_pb2.Summary.FromString(data).value:
            tags.append(value.tag)
            sizes.append([value.image.height, value.image.width, value.image.colorspace])
            pixels.append(sess.run(tf.image.decode_png(value.image.encoded_image_string)))
outputs["tags"] = np.array(tags)
outputs["sizes"] = sizes
outputs["pixels"] = pixels
""", tmp_path, **{f"images{k}": images for k, (images, _) in enumerate(cases)},
        **{f"limit{k}": limit for k, (_, limit) in enumerate(cases)})
    # TF1 names each summary op uniquely (pics, pics_1...), as asyncflow does
    assert [tag for tag, _, _ in ours] == [str(tag) for tag in theirs["tags"]]
    assert len(ours) == len(theirs["pixels"]) == 14
    for (tag, size, pixels), tf_size, tf_pixels in zip(ours, theirs["sizes"], theirs["pixels"]):
        assert size == list(tf_size), tag
        np.testing.assert_array_equal(pixels, tf_pixels, err_msg=tag)


async def test_variable_initialized_value_and_load():
    with af.Graph().as_default():
        v = af.Variable(3.0, name="v")
        w = af.Variable(v.initialized_value() * 2.0, name="w")
        async with af.Session() as sess:
            await sess.run(w.initializer)          # v itself is not initialized yet
            assert await sess.run(w) == 6.0
            await v.load(5.0, sess)
            assert await sess.run(v) == 5.0
            assert await sess.run(v.initialized_value()) == 5.0


async def test_a_dropped_variable_load_warns_with_the_callers_line():
    """``v.load(value, sess)`` with an af.Session is a run to await; one dropped (TF1's habit)
    loads nothing, so its warning must name the line that called ``load``, and ``load``: it
    named asyncflow's own line and ``Session.run``, which the program never wrote."""
    import gc
    import warnings

    with af.Graph().as_default():
        v = af.Variable([0.0, 0.0], name="v")
        async with af.Session() as sess:
            await sess.run(v.initializer)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                line = sys._getframe().f_lineno + 1
                v.load([1.0, 2.0], sess)
                gc.collect()
            assert (await sess.run(v)).tolist() == [0.0, 0.0]
            async with trio.open_nursery() as nursery:  # still a coroutine to start
                nursery.start_soon(v.load, [3.0, 4.0], sess)
            assert (await sess.run(v)).tolist() == [3.0, 4.0]
    messages = [(w.filename, w.lineno, str(w.message)) for w in caught
                if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    filename, lineno, message = messages[0]
    assert (filename, lineno) == (__file__, line), messages
    assert "v.load(...)" in message and "await v.load(value, sess)" in message, message


async def test_saver_writes_the_meta_graph_by_default(tmp_path):
    with af.Graph().as_default():
        v = af.Variable([1.0, 2.0], name="v")
        doubled = af.multiply(v, 2.0, name="doubled")
        saver = af.train.Saver()
        async with af.Session() as sess:
            await sess.run(v.initializer)
            path = await saver.save(sess, str(tmp_path / "model"), global_step=3)
    assert os.path.exists(path + ".meta")
    with af.Graph().as_default() as graph:
        restorer = af.train.import_meta_graph(path + ".meta")
        async with af.Session() as sess:
            await restorer.restore(sess, path)
            assert (await sess.run(graph.get_tensor_by_name(doubled.name))).tolist() == [2, 4]


async def test_start_queue_runners_tf1_form_runs_until_stopped():
    with af.Graph().as_default():
        queue = af.FIFOQueue(4, af.int32, shapes=[[]])
        counter = af.Variable(0, name="counter")
        af.train.add_queue_runner(af.train.QueueRunner(queue, [queue.enqueue(counter.assign_add(1))]))
        item = queue.dequeue()
        async with af.Session() as sess:
            await sess.run(counter.initializer)
            coord = af.train.Coordinator()
            threads = af.train.start_queue_runners(sess=sess, coord=coord)
            assert len(list(threads)) == 1
            got = [int(await sess.run(item)) for _ in range(6)]
            assert got == [1, 2, 3, 4, 5, 6]
            coord.request_stop()
            await coord.join(threads)
            assert coord.running_tasks == 0


async def test_closing_the_session_stops_tf1_form_runners():
    with af.Graph().as_default():
        queue = af.FIFOQueue(2, af.int32, shapes=[[]])
        af.train.add_queue_runner(af.train.QueueRunner(queue, [queue.enqueue(1)] * 2))
        coord = af.train.Coordinator()
        async with af.Session() as sess:
            runners = af.train.start_queue_runners(sess=sess, coord=coord)
            assert int(await sess.run(queue.dequeue())) == 1
        with trio.fail_after(60):  # guards a hang only
            await runners.wait()
        assert coord.should_stop() and coord.running_tasks == 0


async def test_soft_placement_is_off_by_default():
    assert af.SessionConfig().allow_soft_placement is False
    with af.Graph().as_default():
        with af.device("/device:CPU:7"):
            x = af.constant(1.0) + 1.0
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError, match="CPU:7"):
                await sess.run(x)
        async with af.Session(config=af.SessionConfig(allow_soft_placement=True)) as sess:
            assert await sess.run(x) == 2.0


def test_session_outside_trio_names_the_asyncio_session():
    with af.Graph().as_default():
        x = af.constant(1.0)

        async def use():
            async with af.Session() as sess:
                await sess.run(x)

        with pytest.raises(RuntimeError, match="asyncflow.aio.Session"):
            asyncio.run(use())
