"""What the RNN fuzz against TF1 (tests/ops/test_tf1_rnn_fuzz.py) found, pinned without
TensorFlow: the expected values and names were written from TF1's run (tf.compat.v1 of TF
2.21 with tf_keras) of the same program."""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)

R = tf.nn.rnn_cell
X0 = (np.sin(np.arange(3 * 2 * 2) * 1.1) * 1.5).reshape(3, 2, 2)


def _run(fetches, variables=None):
    """``fetches`` after setting each trainable variable (sorted by name, k-th) to
    ``sin(arange(n) * 0.7 + k) * 0.5``, as the TF1 run that wrote the expected values."""
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for k, v in enumerate(sorted(tf.trainable_variables(), key=lambda v: v.name)):
            n = int(np.prod(v.shape.as_list()))
            v.load((np.sin(np.arange(n) * 0.7 + k) * 0.5).reshape(v.shape.as_list()), sess)
        return sess.run(fetches)


def _names():
    return sorted(v.name for v in tf.trainable_variables())


def test_multi_rnn_cell_with_concatenated_states():
    """state_is_tuple=False: one [batch, sum of sizes] state, layer 0's columns first (it
    was a tuple of the layers' states, whatever the flag)."""
    with tf.Graph().as_default():
        cell = R.MultiRNNCell([R.BasicRNNCell(2), R.GRUCell(3)], state_is_tuple=False)
        assert cell.state_size == 5 and cell.zero_state(3, tf.float64).shape.as_list() == [3, 5]
        out, state = tf.nn.dynamic_rnn(cell, tf.constant(X0), sequence_length=[2, 1, 0],
                                       dtype=tf.float64)
        assert state.shape.as_list() == [3, 5]
        final, last = _run([state, out[0, -1]])
    np.testing.assert_allclose(final, [
        [0.151171899155, 0.570886729234, 0.207911246878, 0.043176780746, -0.105070048388],
        [-0.743376292188, -0.38647252401, 0.284922288741, 0.233575394213, 0.084486225741],
        [0.0, 0.0, 0.0, 0.0, 0.0]], atol=1e-11)
    np.testing.assert_allclose(last, [0.207911246878, 0.043176780746, -0.105070048388],
                               atol=1e-11)


def test_multi_rnn_cell_refuses_tuple_states_without_state_is_tuple():
    with pytest.raises(ValueError, match="state_is_tuple is not set"):
        R.MultiRNNCell([R.BasicLSTMCell(2), R.GRUCell(3)], state_is_tuple=False)


def test_residual_wrapper_adds_the_inputs():
    with tf.Graph().as_default():
        cell = R.ResidualWrapper(R.GRUCell(2))
        out, state = tf.nn.dynamic_rnn(cell, tf.constant(X0), sequence_length=[2, 1, 0],
                                       dtype=tf.float64)
        assert _names() == ["rnn/gru_cell/candidate/bias:0", "rnn/gru_cell/candidate/kernel:0",
                            "rnn/gru_cell/gates/bias:0", "rnn/gru_cell/gates/kernel:0"]
        outputs, final = _run([out, state])
    np.testing.assert_allclose(outputs, [
        [[0.169525704414, 1.483337851272], [1.508879741877, 0.320573080706]],
        [[-1.774703494434, -1.278138085408], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]], atol=1e-11)
    np.testing.assert_allclose(final, [[0.296135136148, 0.557191621921],
                                       [-0.3473003836, -0.219827597052], [0.0, 0.0]], atol=1e-11)
    with tf.Graph().as_default():  # outputs of another size than the inputs: TF1's ValueError
        with pytest.raises(ValueError, match="ResidualWrapper.*incompatible"):
            tf.nn.dynamic_rnn(R.ResidualWrapper(R.GRUCell(3)), tf.constant(X0),
                              dtype=tf.float64)


def test_device_wrapper_places_the_cell():
    with tf.Graph().as_default():
        cell = R.DeviceWrapper(R.GRUCell(2), "/cpu:0")
        assert (cell.state_size, cell.output_size) == (2, 2)
        out, _ = tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64)
        matmuls = [op for op in tf.get_default_graph().get_operations() if op.type == "MatMul"]
        assert matmuls and all("CPU:0" in op.device.upper() for op in matmuls)
        assert _names()[0] == "rnn/gru_cell/candidate/bias:0"


def test_static_bidirectional_rnn_names_under_a_scope():
    """Each direction's static_rnn runs in the direction's scope itself, as TF1's (it opened
    another ``rnn/`` inside: ``bi/fw/rnn/gru_cell/...``, which no TF1 checkpoint has)."""
    with tf.Graph().as_default():
        tf.nn.static_bidirectional_rnn(R.GRUCell(2), R.BasicRNNCell(2), tf.unstack(X0, axis=1),
                                       dtype=tf.float64, scope="bi")
        assert _names() == ["bi/bw/basic_rnn_cell/bias:0", "bi/bw/basic_rnn_cell/kernel:0",
                            "bi/fw/gru_cell/candidate/bias:0", "bi/fw/gru_cell/candidate/kernel:0",
                            "bi/fw/gru_cell/gates/bias:0", "bi/fw/gru_cell/gates/kernel:0"]
    with tf.Graph().as_default():
        tf.nn.static_bidirectional_rnn(R.GRUCell(2), R.BasicRNNCell(2), tf.unstack(X0, axis=1),
                                       dtype=tf.float64)
        assert _names()[0] == "bidirectional_rnn/bw/basic_rnn_cell/bias:0"


def test_bidirectional_dynamic_rnn_keeps_the_backward_outputs_static_shape():
    with tf.Graph().as_default():
        (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(R.GRUCell(2), R.GRUCell(3),
                                                      tf.constant(X0), dtype=tf.float64)
        assert fw.shape.as_list() == [3, 2, 2] and bw.shape.as_list() == [3, 2, 3]


def test_dynamic_rnn_of_zero_steps():
    """TF1: outputs [batch, 0, size] and the initial state (the output TensorArray knows
    its element shape, so stacking no elements works)."""
    with tf.Graph().as_default():
        out, state = tf.nn.dynamic_rnn(R.GRUCell(3), tf.constant(X0)[:, :0], dtype=tf.float64)
        assert out.shape.as_list() == [3, 0, 3]
        outputs, final = _run([out, state])
    assert outputs.shape == (3, 0, 3) and not final.any()


def test_refusals_are_tf1s():
    x = tf.constant(X0)
    with pytest.raises(ValueError, match="initial_state or the state's dtype"):
        tf.nn.dynamic_rnn(R.GRUCell(2), x)
    with pytest.raises(ValueError, match="sequence_length must be a vector"):
        tf.nn.dynamic_rnn(R.GRUCell(2), x, dtype=tf.float64, sequence_length=[[1, 2, 3]])
    with pytest.raises(ValueError, match="sequence_length must be a vector"):
        tf.nn.static_rnn(R.GRUCell(2), tf.unstack(x, axis=1), dtype=tf.float64,
                         sequence_length=[[1, 2, 3]])
    with pytest.raises(ValueError, match="floating point inputs"):
        tf.nn.dynamic_rnn(R.GRUCell(2), tf.cast(x, tf.int32), dtype=tf.float32)
    for rnn in (tf.nn.static_rnn, lambda cell, inputs, dtype: tf.nn.static_bidirectional_rnn(
            cell, cell, inputs, dtype=dtype)):
        with pytest.raises(ValueError, match="must not be empty"):
            rnn(R.GRUCell(2), [], dtype=tf.float64)
        with pytest.raises(TypeError, match="must be a sequence"):
            rnn(R.GRUCell(2), x, dtype=tf.float64)
    with pytest.raises(TypeError, match="must be an LSTMStateTuple"):
        tf.nn.dynamic_rnn(R.BasicLSTMCell(2), x, initial_state=tf.zeros([3, 2], tf.float64))
    with pytest.raises(TypeError, match="must be an LSTMStateTuple"):
        R.LSTMCell(2, num_proj=1)(x[:, 0], tf.zeros([3, 3], tf.float64))


def test_more_refusals_are_tf1s():
    """What is not a cell, a filter that is not callable, an initial state asked for with
    a batch or dtype other than the inputs' (each was accepted, or failed on an attribute)."""
    x = tf.constant(X0)
    for run in (lambda cell: tf.nn.dynamic_rnn(cell, x, dtype=tf.float64),
                lambda cell: tf.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float64),
                lambda cell: tf.nn.bidirectional_dynamic_rnn(R.GRUCell(2), cell, x,
                                                             dtype=tf.float64),
                lambda cell: tf.nn.static_bidirectional_rnn(cell, R.GRUCell(2),
                                                            tf.unstack(x, axis=1),
                                                            dtype=tf.float64)):
        with pytest.raises(TypeError, match="is not an RNNCell: 'output_size' property"):
            run(lambda inputs, state: (inputs, state))
    with pytest.raises(TypeError, match="dropout_state_filter_visitor must be callable"):
        R.DropoutWrapper(R.GRUCell(2), dropout_state_filter_visitor=3)
    cell = R.GRUCell(3)
    with pytest.raises(ValueError, match="dtype from input tensor is different"):
        cell.get_initial_state(x[:, 0], dtype=tf.float32)
    with pytest.raises(ValueError, match="batch size from input tensor is different"):
        cell.get_initial_state(x[:, 0], batch_size=5)
    same = cell.get_initial_state(x[:, 0], batch_size=3, dtype=tf.float64)
    assert same.shape.as_list() == [3, 3] and same.dtype == tf.float64


class _BuiltCell(R.RNNCell):
    """TF1's new-style cell: variables made in ``build`` by add_variable/add_weight."""

    state_size = property(lambda self: 2)
    output_size = property(lambda self: 2)

    def build(self, shape):
        self.w = self.add_variable("weights", [int(shape[-1]) + 2, 2])
        self.b = self.add_weight("b", [2])
        self.built = True

    def call(self, inputs, state):
        out = tf.sigmoid(tf.matmul(tf.concat([inputs, state], 1), self.w) + self.b)
        return out, out


class _PairCell(R.RNNCell):
    """Nested inputs and outputs, no variables."""

    state_size = property(lambda self: 1)
    output_size = property(lambda self: (2, 1))

    def __call__(self, inputs, state, scope=None):
        return (inputs[0] * state, inputs[1] + state), state + inputs[1]


def test_a_cell_of_the_users_own_is_built_before_its_first_call():
    """``build`` runs once with the inputs' shape; its variables live in a scope named after
    the class in snake case (here ``_built_cell``: TF1's ``private__built_cell``), of the
    inputs' dtype (it failed: no ``build`` call, no ``add_variable``)."""
    with tf.Graph().as_default():
        out, _ = tf.nn.dynamic_rnn(_BuiltCell(), tf.constant(X0), dtype=tf.float64,
                                   sequence_length=[2, 1, 0])
        assert _names() == ["rnn/private__built_cell/b:0", "rnn/private__built_cell/weights:0"]
        assert all(v.dtype == tf.float64 for v in tf.trainable_variables())
        outputs = _run(out)
    np.testing.assert_allclose(outputs, [
        [[0.610991848272, 0.58659371404], [0.496074224914, 0.624857864094]],
        [[0.277282006168, 0.399476580419], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]], atol=1e-11)


def test_dynamic_rnn_of_nested_inputs_and_outputs():
    """TF1 unstacks each input of a nest and stacks each output of ``output_size``'s
    structure (here it refused anything but one tensor)."""
    with tf.Graph().as_default():
        x = tf.constant(X0)
        (a, b), state = tf.nn.dynamic_rnn(_PairCell(), (x, x[:, :, 1:]),
                                          initial_state=tf.ones([3, 1], tf.float64),
                                          sequence_length=[2, 1, 0])
        assert [t.shape.as_list() for t in (a, b, state)] == [[3, 2, 2], [3, 2, 1], [3, 1]]
        values = _run([a, b, state])
    expected = [[[[0.0, 1.336811040092], [2.833954983481, -0.552932819401]],
                 [[-1.427403110834, -1.058310488356], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]],
                [[[2.336811040092], [2.100192498877]], [[-0.058310488356], [0.0]], [[0.0], [0.0]]],
                [[2.100192498877], [-0.058310488356], [1.0]]]
    for value, want in zip(values, expected):
        np.testing.assert_allclose(value, want, atol=1e-11)


def test_dropout_wrapper_keeps_each_lstm_memory_of_a_nested_state():
    """TF1's default state filter keeps the memory ``c`` of every LSTMStateTuple, however
    deep (here it kept only a top-level one's: the c of a MultiRNNCell's LSTMs was
    dropped); a ``dropout_state_filter_visitor`` decides otherwise (it was ignored)."""
    rng = np.random.default_rng(3)
    for visitor, c_dropped, h_dropped in ((None, False, True), (lambda s: True, True, True),
                                          (lambda s: False, False, False)):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            x = tf.constant(rng.standard_normal((4, 5)))
            inner = R.MultiRNNCell([R.BasicLSTMCell(8), R.BasicLSTMCell(8)])
            state = tuple(R.LSTMStateTuple(tf.constant(rng.standard_normal((4, 8))),
                                           tf.constant(rng.standard_normal((4, 8))))
                          for _ in range(2))
            cell = R.DropoutWrapper(inner, state_keep_prob=0.5, seed=2,
                                    dropout_state_filter_visitor=visitor)
            _, dropped = cell(x, state)
            _, plain = inner(x, state)  # the same variables, no dropout
            dropped, plain = _run([dropped, plain])
        for layer in range(2):
            for part, expect_dropped in (("c", c_dropped), ("h", h_dropped)):
                got, full = getattr(dropped[layer], part), getattr(plain[layer], part)
                if not expect_dropped:
                    np.testing.assert_allclose(got, full, rtol=1e-12)
                    continue
                zero = got == 0
                assert 0 < zero.sum() < got.size, (visitor, layer, part)
                np.testing.assert_allclose(got[~zero], 2 * full[~zero], rtol=1e-12)


def test_static_rnns_of_nested_steps():
    """Each step of static_rnn/static_bidirectional_rnn may be a nest, each of its leaves
    reversed within its length and each output leaf concatenated fw then bw, as TF1's (it
    refused them). Without an initial state, the dtype is required, as TF1's."""
    with tf.Graph().as_default():
        x = tf.constant(X0)
        steps = [(x[:, t], x[:, t, 1:]) for t in range(2)]
        outs, _, _ = tf.nn.static_bidirectional_rnn(
            _PairCell(), _PairCell(), steps, initial_state_fw=tf.ones([3, 1], tf.float64),
            initial_state_bw=tf.ones([3, 1], tf.float64) * 2, sequence_length=[2, 1, 0])
        assert [[t.shape.as_list() for t in o] for o in outs] == [[[3, 4], [3, 2]]] * 2
        values = _run(outs)
        with pytest.raises(ValueError, match="initial_state or the state's dtype"):
            tf.nn.static_rnn(_PairCell(), steps)
    expected = [[[[0.0, 1.336811040092, 0.0, 2.357307801998],
                  [-1.427403110834, -1.058310488356, -2.854806221669, -2.116620976711],
                  [0.0, 0.0, 0.0, 0.0]],
                 [[2.336811040092, 3.100192498877], [-0.058310488356, 0.941689511644],
                  [0.0, 0.0]]],
                [[[2.833954983481, -0.552932819401, 2.425489211459, -0.47323708243],
                  [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
                 [[2.100192498877, 1.763381458785], [0.0, 0.0], [0.0, 0.0]]]]
    for step, want in zip(values, expected):
        for value, leaf in zip(step, want):
            np.testing.assert_allclose(value, leaf, atol=1e-11)


def test_lstm_cell_shards_and_arguments_in_tf1s_order():
    """``num_unit_shards``/``num_proj_shards`` partition the kernels as TF1's (they were
    missing, so TF1's order of the arguments after ``proj_clip`` was shifted: a positional
    ``forget_bias`` landed in ``state_is_tuple``)."""
    with tf.Graph().as_default():
        cell = R.LSTMCell(4, num_unit_shards=2, num_proj=3, num_proj_shards=2)
        out, _ = tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64)
        assert sorted((v.name, v.shape.as_list()) for v in tf.trainable_variables()) == [
            ("rnn/lstm_cell/bias:0", [16]), ("rnn/lstm_cell/kernel/part_0:0", [3, 16]),
            ("rnn/lstm_cell/kernel/part_1:0", [2, 16]),
            ("rnn/lstm_cell/projection/kernel/part_0:0", [2, 3]),
            ("rnn/lstm_cell/projection/kernel/part_1:0", [2, 3])]
        last = _run(out[:, -1])
    np.testing.assert_allclose(last, [[0.204136107682, 0.110174621023, -0.035603711429],
                                      [0.132296112072, 0.023022320708, -0.097079227818],
                                      [0.019491431657, 0.00684645519, -0.009018516133]],
                               atol=1e-11)
    with tf.Graph().as_default():
        cell = R.LSTMCell(3, True, 0.5, None, 2, 0.3, None, None, 0.25, False)
        assert cell.state_size == 5
        _, state = tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64)
        final = _run(state)
    np.testing.assert_allclose(final, [
        [0.293977260267, -0.13562266668, -0.480404922028, 0.251871290407, 0.191693339546],
        [0.023406712978, 0.078797798128, 0.066752326872, -0.014958765665, -0.024690157008],
        [0.403949509873, 0.312359649354, 0.084911728487, 0.009175833966, -0.047987895889]],
        atol=1e-11)


def test_a_sharded_lstm_cell_runs_again_after_a_dynamic_rnn():
    """A cell of ``num_unit_shards`` used by a second ``dynamic_rnn`` and then by hand (an
    encoder's cell stepped while decoding) reuses its sharded kernel; it failed to build, the
    kernel's concatenation kept inside the first loop."""
    with tf.Graph().as_default():
        cell = R.LSTMCell(3, num_unit_shards=2)
        first, _ = tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64)
        again, _ = tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64, scope="rnn")
        step, _ = cell(tf.constant(X0[:, 0]), cell.zero_state(3, tf.float64))
        assert [name for name in _names() if "kernel" in name] == \
            ["rnn/lstm_cell/kernel/part_0:0", "rnn/lstm_cell/kernel/part_1:0"]
        a, b, c = _run([first, again, step])
    np.testing.assert_allclose(b, a, atol=1e-12)
    np.testing.assert_allclose(c, a[:, 0], atol=1e-12)
    assert np.abs(a).max() > 0.01


def test_a_sharded_lstm_kernel_checkpoints_under_tf1s_names(tmp_path):
    """The parts save as one tensor under the kernel's full name, as TF1's Saver writes
    them, so a checkpoint restores into a cell of other shards or none."""
    def build(**shards):
        cell = R.LSTMCell(4, num_proj=3, **shards)
        return tf.nn.dynamic_rnn(cell, tf.constant(X0), dtype=tf.float64)[0]
    with tf.Graph().as_default():
        out = build(num_unit_shards=2, num_proj_shards=2)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            want = sess.run(out)
            path = saver.save(sess, str(tmp_path / "model"))
    assert sorted(tf.train.list_variables(path)) == [
        ("rnn/lstm_cell/bias", [16]), ("rnn/lstm_cell/kernel", [5, 16]),
        ("rnn/lstm_cell/projection/kernel", [4, 3])]
    for shards in ({}, {"num_unit_shards": 3, "num_proj_shards": 1}):
        with tf.Graph().as_default():
            out = build(**shards)
            saver = tf.train.Saver()
            with tf.Session() as sess:
                saver.restore(sess, path)
                np.testing.assert_array_equal(sess.run(out), want)


def test_get_initial_state_of_the_inputs():
    """TF1's ``cell.get_initial_state(inputs)``: zeros of the inputs' batch and dtype (it
    was missing); with an unknown batch, of the batch the inputs have when the step runs."""
    with tf.Graph().as_default():
        cell = R.MultiRNNCell([R.BasicLSTMCell(2), R.GRUCell(3)])
        known = cell.get_initial_state(tf.constant(X0[:, 0]))
        assert [t.shape.as_list() for t in (known[0].c, known[0].h, known[1])] == \
            [[3, 2], [3, 2], [3, 3]] and known[1].dtype == tf.float64
        loose = tf.placeholder(tf.float32, [None, 2])
        unknown = cell.get_initial_state(loose)
        assert unknown[1].shape.as_list() == [None, 3]
        again = cell.get_initial_state(batch_size=4, dtype=tf.float32)
        with tf.Session() as sess:
            value, other = sess.run([unknown, again], {loose: np.ones((5, 2))})
    assert value[1].shape == (5, 3) and not value[0].c.any()
    assert other[0].h.shape == (4, 2)
