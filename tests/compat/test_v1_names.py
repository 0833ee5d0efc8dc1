"""TF1 names a new user's programs use, against TF1 itself where TensorFlow is installed."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import asyncflow as af
import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)
from tf1_reference import tf1_run


SNIPPET = """
x = tf.constant(inputs["x"])
values, indices = tf.nn.top_k(x, 3)
grad = tf.gradients(tf.reduce_sum(values * inputs["w"]), x)[0]
hits = tf.nn.in_top_k(x, inputs["targets"], 2)
unit = tf.nn.l2_normalize(x, 1)
mask = tf.sequence_mask(inputs["lengths"], 5, dtype=tf.float32)
row_sums = tf.reduce_sum(x, reduction_indices=[1])
picked = tf.boolean_mask(x, x > 0.5)
rows = tf.boolean_mask(x, inputs["lengths"] > 2)
with tf.Session() as sess:
    outputs["values"], outputs["indices"], outputs["grad"], outputs["hits"], \\
        outputs["unit"], outputs["mask"], outputs["row_sums"], outputs["picked"], \\
        outputs["rows"] = sess.run([values, indices, grad, hits, unit, mask, row_sums,
                                    picked, rows])
"""


def _inputs():
    rng = np.random.RandomState(0)
    x = rng.normal(size=[4, 6]).astype(np.float32)
    x[1, 2] = x[1, 4]  # a tie: both orders must agree with TF's
    return {"x": x, "w": rng.normal(size=[4, 3]).astype(np.float32),
            "targets": np.array([0, 4, 5, 1], np.int32), "lengths": np.array([0, 2, 5, 3])}


def _ours(inputs):
    af.reset_default_graph()
    outputs = {}
    exec(compile(SNIPPET, "snippet", "exec"), {"tf": tf, "inputs": inputs, "outputs": outputs})  # noqa: S102
    return outputs


def test_names_match_numpy():
    inputs = _inputs()
    out = _ours(inputs)
    x = inputs["x"]
    order = np.argsort(-x, axis=1, kind="stable")[:, :3]
    assert np.array_equal(out["indices"], order)
    assert np.array_equal(out["values"], np.take_along_axis(x, order, 1))
    expected_grad = np.zeros_like(x)
    np.put_along_axis(expected_grad, order, inputs["w"], 1)
    assert np.allclose(out["grad"], expected_grad)
    ranks = (x > x[np.arange(4), inputs["targets"]][:, None]).sum(1)
    assert np.array_equal(out["hits"], ranks < 2)
    assert np.allclose(out["unit"], x / np.linalg.norm(x, axis=1, keepdims=True), atol=1e-6)
    assert np.array_equal(out["mask"], (np.arange(5) < inputs["lengths"][:, None]).astype(np.float32))
    assert np.allclose(out["row_sums"], x.sum(1), atol=1e-5)
    assert np.array_equal(out["picked"], x[x > 0.5])
    assert np.array_equal(out["rows"], x[inputs["lengths"] > 2])


def test_names_match_tf1(tmp_path):
    inputs = _inputs()
    theirs = tf1_run(SNIPPET, tmp_path, **inputs)
    ours = _ours(inputs)
    for key, value in theirs.items():
        assert np.allclose(ours[key], value, atol=1e-6), key


def test_small_tf1_forms():
    x = tf.zeros([2, 3])
    assert tf.expand_dims(x, [0]).shape.as_list() == [1, 2, 3]
    first, second = tf.no_op(), tf.no_op()
    grouped = tf.group([first, [second]])
    assert set(grouped.control_inputs) == {first, second}
    config = tf.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    with tf.Session(config=config) as sess:
        assert sess.run(tf.constant(1.0)) == 1.0
    with pytest.raises(ValueError, match="axis or reduction_indices"):
        tf.reduce_sum(x, axis=0, reduction_indices=0)


def test_count_nonzero_as_tf1():
    # Values and dtypes as TF 2.21's tf.compat.v1 gives them for the same calls.
    x = tf.constant([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    counts = [tf.count_nonzero(x), tf.math.count_nonzero(x, axis=1),
              tf.count_nonzero(x, 0, keepdims=True, dtype=tf.int32),
              tf.count_nonzero(tf.constant([True, False, True])),
              tf.count_nonzero(x, reduction_indices=[1], keep_dims=True)]
    with tf.Session() as sess:
        got = sess.run(counts)
    expected = [(3, np.int64), ([2, 1], np.int64), ([[0, 1, 2]], np.int32), (2, np.int64),
                ([[2], [1]], np.int64)]
    for value, (want, dtype) in zip(got, expected):
        assert np.asarray(value).dtype == dtype
        np.testing.assert_array_equal(value, want)


def test_newaxis_adds_an_axis_in_slicing():
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    column = x[:, tf.newaxis, 1]
    assert column.shape.as_list() == [2, 1]
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(column), [[2.0], [5.0]])
        assert sess.run(x[tf.newaxis]).shape == (1, 2, 3)


def test_app_flags_logging_gfile(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import asyncflow.compat.v1 as tf
        tf.flags.DEFINE_integer("steps", 3, "steps")
        tf.flags.DEFINE_boolean("fast", False, "fast")
        tf.app.flags.DEFINE_string("name", "x", "name")
        FLAGS = tf.flags.FLAGS

        def main(argv):
            tf.logging.set_verbosity(tf.logging.INFO)
            tf.logging.info("steps=%d", FLAGS.steps)
            path = "out/sub"
            tf.gfile.MakeDirs(path)
            with tf.gfile.GFile(path + "/f.txt", "w") as f:
                f.write(FLAGS.name)
            print(FLAGS.steps, FLAGS.fast, tf.gfile.Exists(path + "/f.txt"),
                  tf.gfile.ListDirectory(path), argv[1:])
            return 0

        if __name__ == "__main__":
            tf.app.run()
    """))
    done = subprocess.run([sys.executable, str(script), "--steps=7", "--fast", "--name", "n",
                           "rest"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "7 True True ['f.txt'] ['rest']"
    assert "steps=7" in done.stderr
    assert (tmp_path / "out" / "sub" / "f.txt").read_text() == "n"
    bad = subprocess.run([sys.executable, str(script), "--steps=many"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode != 0 and "--steps=many" in bad.stderr


def test_py_func_gets_a_scalar_string_as_bytes():
    seen = []

    def record(value):
        seen.append(value)
        return value

    out = tf.py_func(record, [tf.constant("abc")], tf.string)
    with tf.Session() as sess:
        assert sess.run(out) == b"abc"
    assert seen == [b"abc"] and isinstance(seen[0], bytes)


def test_slice_input_producer_yields_matching_rows():
    images = tf.constant(np.arange(12, dtype=np.float32).reshape(6, 2))
    labels = tf.constant(np.arange(6, dtype=np.int32))
    image, label = tf.train.slice_input_producer([images, labels], num_epochs=1, shuffle=False)
    rows = []
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        with pytest.raises(tf.errors.OutOfRangeError):
            for _ in range(7):
                rows.append(sess.run([image, label]))
        coord.request_stop()
        coord.join(threads)
    assert [int(label) for _, label in rows] == list(range(6))
    assert all(np.array_equal(im, [2 * lb, 2 * lb + 1]) for im, lb in rows)


def test_a_queue_runner_error_is_logged_and_raised_by_join(caplog):
    def broken(value):
        raise AttributeError("no attribute 'decode'")

    queue = tf.FIFOQueue(4, tf.float32)
    enqueue = queue.enqueue(tf.py_func(broken, [tf.constant(1.0)], tf.float32))
    tf.train.add_queue_runner(tf.train.QueueRunner(queue, [enqueue]))
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        with pytest.raises(tf.errors.OpError, match="no attribute 'decode'"):
            coord.join(threads)
    logged = [r for r in caplog.records if "Exception in QueueRunner" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_saver_set_last_checkpoints():
    tf.Variable(1.0)
    saver = tf.train.Saver()
    saver.set_last_checkpoints(["a", "b"])
    assert saver.last_checkpoints == ["a", "b"]
    with pytest.raises(TypeError):
        saver.set_last_checkpoints("a")


BIRNN = """
steps = [tf.constant(row) for row in inputs["x"]]
with tf.variable_scope("net", initializer=tf.constant_initializer(0.1)):
    cell_fw, cell_bw = tf.nn.rnn_cell.BasicRNNCell(3), tf.nn.rnn_cell.BasicRNNCell(2)
    outs, state_fw, state_bw = tf.nn.static_bidirectional_rnn(
        cell_fw, cell_bw, steps, dtype=tf.float32, sequence_length=inputs["lengths"])
grad = tf.gradients(tf.reduce_sum(tf.stack(outs)), steps[0])[0]
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["outs"], outputs["fw"], outputs["bw"], outputs["grad"] = sess.run(
        [tf.stack(outs), state_fw, state_bw, grad])
"""


def test_static_bidirectional_rnn_matches_tf1(tmp_path):
    rng = np.random.RandomState(1)
    inputs = {"x": rng.normal(size=[4, 2, 3]).astype(np.float32),
              "lengths": np.array([4, 2], np.int32)}
    ours = {}
    exec(compile(BIRNN, "birnn", "exec"), {"tf": tf, "inputs": inputs, "outputs": ours})  # noqa: S102
    assert ours["outs"].shape == (4, 2, 5)
    assert np.all(ours["outs"][2:, 1] == 0)  # past row 1's length: zeros, as TF1
    theirs = tf1_run(BIRNN, tmp_path, **inputs)
    for key, value in theirs.items():
        assert np.allclose(ours[key], value, atol=1e-5), key


def test_compute_gradient_error_is_small_for_a_right_gradient_and_large_for_a_wrong_one():
    x = tf.placeholder(tf.float64, [2, 3])
    y = tf.reduce_sum(tf.tanh(x) * x, axis=1)
    value = np.random.RandomState(0).normal(size=[2, 3])
    with tf.Session():
        theoretical, numerical = tf.test.compute_gradient(x, [2, 3], y, [2], x_init_value=value)
        assert theoretical.shape == (6, 2)
        assert tf.test.compute_gradient_error(x, [2, 3], y, [2], x_init_value=value) < 1e-6
        wrong = tf.stop_gradient(y) + tf.reduce_sum(x, axis=1)  # the gradient misses tanh
        assert tf.test.compute_gradient_error(x, [2, 3], wrong, [2], x_init_value=value) > 0.1
    with pytest.raises(ValueError, match="default session"):
        tf.test.compute_gradient_error(x, [2, 3], y, [2])


def test_gradient_override_map_uses_a_registered_gradient():
    @tf.RegisterGradient("TestDoubledSquareGrad")
    def _doubled(op, grad):
        return [grad * 4.0 * op.inputs[0]]  # twice Square's own

    x = tf.constant([1.0, 3.0])
    graph = tf.get_default_graph()
    plain = tf.square(x)
    with graph.gradient_override_map({"Square": "TestDoubledSquareGrad"}):
        overridden = tf.square(x)
    with tf.Session() as sess:
        assert sess.run(tf.gradients(plain, x)[0]).tolist() == [2.0, 6.0]
        assert sess.run(tf.gradients(overridden, x)[0]).tolist() == [4.0, 12.0]
    with pytest.raises(KeyError, match="TestDoubledSquareGrad"):
        tf.RegisterGradient("TestDoubledSquareGrad")(_doubled)
    with graph.gradient_override_map({"Square": "NoSuchGradient"}):
        missing = tf.square(x)
    with pytest.raises(LookupError, match="NoSuchGradient"):
        tf.gradients(missing, x)


def test_assert_less_equal_passes_or_fails_the_step_with_its_data():
    x = tf.placeholder(tf.float32, [3])
    check = tf.assert_less_equal(x, 2.0, message="too big")
    with tf.control_dependencies([check]):
        doubled = x * 2.0
    with tf.Session() as sess:
        assert sess.run(doubled, {x: [1.0, 2.0, 0.0]}).tolist() == [2.0, 4.0, 0.0]
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"assertion failed: \[too big\] \[Condition x <= y did not "
                                 r"hold element-wise:\] \[x \(Placeholder:0\) = \] \[1 3 0\]"):
            sess.run(doubled, {x: [1.0, 3.0, 0.0]})


def test_read_file_and_write_file(tmp_path):
    target = str(tmp_path / "a" / "b.txt")
    write = tf.write_file(target, tf.constant(b"hello"))
    read = tf.read_file(target)
    missing = tf.read_file(str(tmp_path / "nope"))
    with tf.Session() as sess:
        sess.run(write)  # creates the parent folders
        assert sess.run(read) == b"hello"
        with pytest.raises(tf.errors.NotFoundError, match="nope"):
            sess.run(missing)
