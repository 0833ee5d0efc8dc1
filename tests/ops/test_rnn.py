"""RNN cells and dynamic_rnn/static_rnn/bidirectional_dynamic_rnn: TF1's variable names,
sequence_length semantics, and outputs and gradients equal to TF1's for the same weights."""
import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run

# One model source for both sides: ``tf`` is asyncflow here and tf.compat.v1 there.
MODELS = """
def build(tf, kind, x, lengths):
    rnn_cell = tf.nn.rnn_cell
    if kind == "multi":
        cell = rnn_cell.MultiRNNCell([rnn_cell.BasicLSTMCell(4), rnn_cell.GRUCell(3)])
        outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
        state = [s for s in tf.nest.flatten(state)] if hasattr(tf, "nest") else state
    elif kind == "lstm_proj":
        cell = rnn_cell.LSTMCell(5, use_peepholes=True, cell_clip=2.0, num_proj=3,
                                 forget_bias=0.5)
        outputs, state = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, time_major=True)
    elif kind == "static":
        cell = rnn_cell.BasicRNNCell(3)
        steps = tf.unstack(x, axis=1)
        outputs, state = tf.nn.static_rnn(cell, steps, sequence_length=lengths,
                                          dtype=tf.float32)
        outputs = tf.stack(outputs, axis=1)
    elif kind == "bidi":
        (fw, bw), (sfw, sbw) = tf.nn.bidirectional_dynamic_rnn(
            rnn_cell.BasicLSTMCell(3), rnn_cell.GRUCell(2), x, sequence_length=lengths,
            dtype=tf.float32)
        outputs, state = tf.concat([fw, bw], 2), (sfw, sbw)
    flat_state = flat(state)
    variables = sorted(tf.trainable_variables(), key=lambda v: v.name)
    loss = tf.reduce_sum(outputs * outputs) + sum(tf.reduce_sum(s) for s in flat_state)
    grads = tf.gradients(loss, [x] + variables)
    return outputs, flat_state, variables, grads


def flat(structure):
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flat(item)]
    return [structure]
"""
KINDS = ["multi", "lstm_proj", "static", "bidi"]
NAMES = {
    "multi": ["rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias:0",
              "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel:0",
              "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias:0",
              "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel:0",
              "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias:0",
              "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel:0"],
    "lstm_proj": ["rnn/lstm_cell/bias:0", "rnn/lstm_cell/kernel:0",
                  "rnn/lstm_cell/projection/kernel:0", "rnn/lstm_cell/w_f_diag:0",
                  "rnn/lstm_cell/w_i_diag:0", "rnn/lstm_cell/w_o_diag:0"],
    "static": ["rnn/basic_rnn_cell/bias:0", "rnn/basic_rnn_cell/kernel:0"],
    "bidi": ["bidirectional_rnn/bw/gru_cell/candidate/bias:0",
             "bidirectional_rnn/bw/gru_cell/candidate/kernel:0",
             "bidirectional_rnn/bw/gru_cell/gates/bias:0",
             "bidirectional_rnn/bw/gru_cell/gates/kernel:0",
             "bidirectional_rnn/fw/basic_lstm_cell/bias:0",
             "bidirectional_rnn/fw/basic_lstm_cell/kernel:0"],
}


def _namespace():
    space = {}
    exec(MODELS, space)  # noqa: S102 - the test's own model source, shared with the TF1 side
    return space


async def _ours(kind, x0, lengths0, seed=7):
    space = _namespace()
    with af.Graph().as_default():
        af.set_random_seed(seed)
        x = af.constant(x0)
        lengths = af.constant(lengths0)
        outputs, state, variables, grads = space["build"](af, kind, x, lengths)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            # Random biases too, so the test sees them (TF1 starts them at 0 or 1).
            rng = np.random.default_rng(seed)
            for v in variables:
                await v.load(rng.uniform(-0.5, 0.5, v.shape.as_list()).astype(np.float32), sess)
            values = await sess.run([outputs, state, variables, grads])
        return [v.name for v in variables], values


def _inputs(kind):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 6, 4)).astype(np.float32)
    if kind == "lstm_proj":
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
    return x, np.array([6, 2, 4], np.int32)


@pytest.mark.parametrize("kind", KINDS)
async def test_variable_names_are_tf1s(kind):
    x0, lengths0 = _inputs(kind)
    names, _ = await _ours(kind, x0, lengths0)
    assert names == NAMES[kind]


async def test_sequence_length_zeroes_outputs_and_keeps_the_last_state():
    x0, lengths0 = _inputs("multi")
    _, (outputs, state, _, _) = await _ours("multi", x0, lengths0)
    assert np.all(outputs[1, 2:] == 0) and np.all(outputs[2, 4:] == 0)
    assert np.any(outputs[1, :2] != 0)
    np.testing.assert_allclose(state[-1][1], outputs[1, 1], rtol=1e-6)  # GRU state = output
    np.testing.assert_allclose(state[-1][2], outputs[2, 3], rtol=1e-6)


def test_cell_argument_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="at least one cell"):
            af.nn.rnn_cell.MultiRNNCell([])
        with pytest.raises(ValueError, match="last dimension of the inputs must be known"):
            cell = af.nn.rnn_cell.BasicLSTMCell(3)
            cell(af.placeholder(af.float32, [2, None]), cell.zero_state(2, af.float32))


@pytest.mark.parametrize("kind", KINDS)
async def test_outputs_and_gradients_match_tf1(kind, tmp_path):
    x0, lengths0 = _inputs(kind)
    names, ours = await _ours(kind, x0, lengths0)
    weights = {f"w{k}": value for k, value in enumerate(ours[2])}
    theirs = tf1_run(MODELS + f"""
x = tf.constant(inputs["x"])
lengths = tf.constant(inputs["lengths"])
outputs_t, state_t, variables, grads = build(tf, {kind!r}, x, lengths)
assert [v.name for v in variables] == {names!r}, [v.name for v in variables]
with tf.Session() as sess:
    for k, v in enumerate(variables):
        v.load(inputs[f"w{{k}}"], sess)
    outputs["outputs"], outputs["state"], outputs["grads"] = sess.run([outputs_t, state_t, grads])
""", tmp_path, x=x0, lengths=lengths0, **weights)
    np.testing.assert_allclose(ours[0], theirs["outputs"], rtol=1e-5, atol=1e-5)
    for mine, reference in zip(ours[1], theirs["state"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
    for mine, reference in zip(ours[3], theirs["grads"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-4)


async def test_fused_lstm_step_equals_the_op_by_op_cell():
    """BasicLSTMCell runs as one FusedLSTMCell op; with an explicit activation it takes the
    op-by-op path. Both give the same outputs, states and gradients (float64)."""
    rng = np.random.default_rng(9)
    x0 = rng.standard_normal((3, 7, 5))
    results = []
    for activation in (None, af.tanh):
        with af.Graph().as_default():
            x = af.constant(x0)
            cell = af.nn.rnn_cell.BasicLSTMCell(4, forget_bias=0.7, activation=activation)
            outputs, state = af.nn.dynamic_rnn(cell, x, dtype=af.float64)
            types = {op.type for op in af.get_default_graph().get_operations()}
            assert ("FusedLSTMCell" in types) == (activation is None)
            kernel, bias = sorted(af.trainable_variables(), key=lambda v: v.name)[::-1]
            loss = af.reduce_sum(outputs * outputs) + af.reduce_sum(state.c)
            grads = af.gradients(loss, [x, kernel, bias])
            async with af.Session() as sess:
                await kernel.load(rng.uniform(-0.5, 0.5, [9, 16]) if not results else
                                  results[0][3], sess)
                await bias.load(rng.uniform(-0.5, 0.5, [16]) if not results else
                                results[0][4], sess)
                values = await sess.run([outputs, state, grads])
                results.append(values + await sess.run([kernel, bias]))
    fused, plain = results
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-12)
    np.testing.assert_allclose(fused[1].c, plain[1].c, rtol=1e-12)
    for a, b in zip(fused[2], plain[2]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
