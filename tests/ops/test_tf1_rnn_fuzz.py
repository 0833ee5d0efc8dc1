"""Differential fuzz of TF1's RNN surface against TF1: the cells of ``tf.nn.rnn_cell``
(``BasicRNNCell``, ``BasicLSTMCell`` with ``forget_bias`` and ``state_is_tuple``, ``LSTMCell``
with peepholes, ``cell_clip``, ``num_proj`` and ``proj_clip``, ``GRUCell``, ``MultiRNNCell``,
``DropoutWrapper`` at keep probability 1, ``ResidualWrapper``, ``DeviceWrapper``, cells of
the user's own: ``__call__`` or ``build``/``call``, nested inputs and outputs) driven by
``tf.nn.dynamic_rnn`` (``sequence_length`` with zeros and full lengths, ``time_major``,
``initial_state`` or ``dtype``, ``swap_memory``, ``parallel_iterations``, unknown batch and
time, zero steps, ``scope``), ``static_rnn``, ``bidirectional_dynamic_rnn``,
``static_bidirectional_rnn`` and a cell called by hand, and TF1's refusals.

Each case is a program run in a graph of its own, once in TF1's process and once here
(``tests/tf1_reference.py``): it builds ``result`` (any nesting of tensors) and ``wrt``;
the driver sets every trainable variable to values drawn from its name (so both sides get
the same weights where the names and shapes agree), then fetches the result and its
gradients (weighted by a fixed uneven upstream gradient) with respect to ``wrt`` and every
variable. Compared: the variables' names and shapes (checkpoints depend on them), the
result's nesting (``LSTMStateTuple`` or tuple), ``state_size``/``output_size``, values,
gradients, static shapes, and the kind of a refusal (while building or running, and its
class). The default run draws ``per_family`` cases per family (seed 0) and the ``EDGES``;
the long form (``--runslow``) more. A difference found here becomes a TF-free regression test
(tests/ops/test_rnn_tf1_fixes.py).
"""
import ast

import numpy as np
import pytest

from tests.tf1_reference import compat_run, tf1_run

DRIVER = '''
import zlib


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _leaves(item)]
    return [x]


def _nesting(x):
    if isinstance(x, (list, tuple)):
        return type(x).__name__ + "(" + ",".join(_nesting(i) for i in x) + ")"
    return "T"


def _weights(t):
    w = tf.cast(tf.floormod(tf.range(tf.size(t)) * 7, 11) - 5, t.dtype) * 0.25
    return tf.reshape(w, tf.shape(t))


def _shifted(state, k=0):
    """The state's structure with a fixed nonzero pattern added to each leaf."""
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*[_shifted(s, k + j + 1) for j, s in enumerate(state)])
    if isinstance(state, (list, tuple)):
        return type(state)(_shifted(s, k + 3 * j + 1) for j, s in enumerate(state))
    pattern = tf.sin(tf.cast(tf.range(tf.size(state)), tf.float64) * 1.3 + k)
    return state + tf.reshape(tf.cast(pattern, state.dtype), tf.shape(state))


def _loose(t):
    return tf.placeholder_with_default(t, [None] * t.shape.ndims)


def _static(t):
    return None if t.shape.ndims is None else t.shape.as_list()


for _i, (_code, _names) in enumerate(CASES):
    with tf.Graph().as_default():
        _stage = "build"
        try:
            _env = {"tf": tf, "np": np, "loose": _loose, "shifted": _shifted}
            for _n in _names:
                _env[_n] = tf.constant(inputs[f"c{_i}_{_n}"])
            exec(_code, _env)
            _result = _leaves(_env["result"])
            _vars = sorted(tf.trainable_variables(), key=lambda v: v.name)
            _info = [_nesting(_env["result"]), [f"{v.name} {v.shape.as_list()}" for v in _vars]]
            if "cell" in _env:
                _info.append(str((_env["cell"].state_size, _env["cell"].output_size)))
            outputs[f"c{_i}_info"] = np.array(repr(_info))
            _wrt = _leaves(_env.get("wrt", [])) + _vars
            _grads = tf.gradients(_result, _wrt, grad_ys=[_weights(t) for t in _result])
            _grads = [tf.constant(-1, tf.int8) if g is None else tf.convert_to_tensor(g)
                      for g in _grads]
            outputs[f"c{_i}_static"] = np.array(repr([_static(t) for t in _result + _grads]))
            _stage = "run"
            with tf.Session() as _sess:
                _sess.run(tf.global_variables_initializer())
                for _v in [] if _env.get("keep_init") else _vars:
                    _rng = np.random.RandomState(zlib.crc32(_v.name.encode()))
                    _dtype = "float64" if "64" in _v.dtype.name else "float32"
                    _v.load(_rng.uniform(-0.7, 0.7, _v.shape.as_list()).astype(_dtype), _sess)
                outputs[f"c{_i}"] = _sess.run(_result + _grads)
        except Exception as _e:  # the kind of refusal is compared
            outputs.pop(f"c{_i}_info", None)
            outputs[f"c{_i}_err"] = np.array(f"{_stage}:{type(_e).__name__}: {str(_e)[:300]}")
'''


def program(cases):
    listed = [(code, sorted(inputs)) for code, inputs in cases]
    feeds = {f"c{i}_{name}": np.asarray(value) for i, (_, inputs) in enumerate(cases)
             for name, value in inputs.items()}
    return f"CASES = {listed!r}\n" + DRIVER, feeds


def _tolerance(dtype):
    return {np.dtype("float32"): 1e-4, np.dtype("float64"): 1e-9}.get(np.dtype(dtype))


def compare(ours, theirs, i):
    """Case ``i``'s differences from TF1's, as lines."""
    mine_err, want_err = ours.get(f"c{i}_err"), theirs.get(f"c{i}_err")
    if mine_err is not None or want_err is not None:
        if mine_err is None or want_err is None:
            return [f"ours: {mine_err if mine_err is not None else 'a value'} | "
                    f"TF1: {want_err if want_err is not None else 'a value'}"]
        mine_kind, want_kind = (":".join(str(e).split(":")[:2]) for e in (mine_err, want_err))
        if mine_kind != want_kind:
            return [f"refused {mine_kind}, TF1 {want_kind}: ours {mine_err} | TF1 {want_err}"]
        return []
    problems = []
    mine_info, want_info = (ast.literal_eval(str(o[f"c{i}_info"])) for o in (ours, theirs))
    if mine_info != want_info:
        problems.append(f"structure/variables/sizes {mine_info} | TF1 {want_info}")
    mine, want = list(ours[f"c{i}"]), list(theirs[f"c{i}"])
    if len(mine) != len(want):
        return problems + [f"{len(mine)} fetches, TF1 {len(want)}"]
    mine_static = ast.literal_eval(str(ours[f"c{i}_static"]))
    want_static = ast.literal_eval(str(theirs[f"c{i}_static"]))
    for k, (a, b) in enumerate(zip(mine, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"fetch {k}: {a.dtype}{list(a.shape)}, TF1 {b.dtype}{list(b.shape)}")
            continue
        tolerance = _tolerance(b.dtype)
        same = np.array_equal(a, b) if tolerance is None else np.allclose(
            a, b, rtol=tolerance, atol=tolerance, equal_nan=True)
        if not same:
            worst = np.abs(a.astype(np.float64) - b).max()
            problems.append(f"fetch {k}: off by {worst:.3g}: {a.ravel()[:5]} TF1 {b.ravel()[:5]}")
        if mine_static[k] != want_static[k]:
            problems.append(f"fetch {k}: static shape {mine_static[k]}, TF1 {want_static[k]}")
    return problems


def run_fuzz(tmp_path, cases):
    source, feeds = program(cases)
    theirs = tf1_run(source, tmp_path, **feeds)
    ours = compat_run(source, feeds)
    report = []
    for i, (code, _) in enumerate(cases):
        problems = compare(ours, theirs, i)
        if problems:
            more = f"\n  ... and {len(problems) - 3} more" if len(problems) > 3 else ""
            report.append(f"case {i}:\n{code}\n  -> " + "\n  -> ".join(problems[:3]) + more)
    assert not report, f"{len(report)} differences from TF1:\n" + "\n".join(report)


# ---- the draws ----------------------------------------------------------------------------

RNN = "tf.nn.rnn_cell."


def _cell(rng, depth, nested=True):
    """A cell's source and its output size (inputs of ``depth``)."""
    units = int(rng.integers(1, 5))
    roll = int(rng.integers(0, 9 if nested else 6))
    if roll == 0:
        act = str(rng.choice(["", ", activation=tf.nn.relu", ", activation=tf.sigmoid"]))
        return f"{RNN}BasicRNNCell({units}{act})", units
    if roll == 1:
        forget = float(rng.choice([1.0, 0.0, 0.5, 2.5]))
        tuple_ = bool(rng.random() < 0.7)
        act = ", activation=tf.nn.relu" if rng.random() < 0.15 else ""
        return f"{RNN}BasicLSTMCell({units}, forget_bias={forget}, state_is_tuple={tuple_}{act})", \
            units
    if roll in (2, 3):
        options = []
        if rng.random() < 0.5:
            options.append("use_peepholes=True")
        if rng.random() < 0.4:
            options.append(f"cell_clip={float(rng.choice([0.1, 0.5, 1.0]))}")
        proj = None
        if rng.random() < 0.5:
            proj = int(rng.integers(1, 4))
            options.append(f"num_proj={proj}")
            if rng.random() < 0.5:
                options.append(f"proj_clip={float(rng.choice([0.05, 0.3]))}")
        if rng.random() < 0.3:
            options.append(f"forget_bias={float(rng.choice([0.0, 0.7]))}")
        if rng.random() < 0.3:
            options.append("state_is_tuple=False")
        if rng.random() < 0.15:
            options.append("activation=tf.nn.relu")
        return f"{RNN}LSTMCell({', '.join([str(units)] + options)})", proj or units
    if roll == 4:
        return f"{RNN}GRUCell({units})", units
    if roll == 5:
        inner, size = _cell(rng, depth, nested=False)
        return f"{RNN}DropoutWrapper({inner}, input_keep_prob=1.0, output_keep_prob=1.0, " \
               f"state_keep_prob=1.0)", size
    if roll == 6:
        first, size = _cell(rng, depth, nested=False)
        second, size = _cell(rng, size, nested=False)
        tuple_ = "" if rng.random() < 0.8 else ", state_is_tuple=True"
        return f"{RNN}MultiRNNCell([{first}, {second}]{tuple_})", size
    if roll == 7:  # a residual cell needs inputs of its output size
        inner = _cell_of_size(rng, depth)
        return f"{RNN}ResidualWrapper({inner})", depth
    inner, size = _cell(rng, depth, nested=False)
    return f"{RNN}DeviceWrapper({inner}, '/cpu:0')", size


def _cell_of_size(rng, units):
    return str(rng.choice([f"{RNN}BasicRNNCell({units})", f"{RNN}GRUCell({units})",
                           f"{RNN}BasicLSTMCell({units})", f"{RNN}LSTMCell(3, num_proj={units})"]))


def _lengths(rng, batch, steps):
    roll = int(rng.integers(0, 5))
    if roll == 0:
        return None
    if roll == 1:
        return np.full(batch, steps)
    if roll == 2:
        return np.zeros(batch)
    values = rng.integers(0, steps + 1, size=batch)
    values[0] = 0 if rng.random() < 0.5 else values[0]
    return values


def _inputs(rng, time_major=False):
    batch, steps, depth = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
    dtype = "float64" if rng.random() < 0.25 else "float32"
    shape = (steps, batch, depth) if time_major else (batch, steps, depth)
    return batch, steps, depth, dtype, (rng.standard_normal(shape) * 1.5).astype(dtype)


def _length_arg(rng, lengths, inputs):
    if lengths is None:
        return ""
    dtype = str(rng.choice(["int32", "int64"]))
    if rng.random() < 0.2:
        return f", sequence_length={[int(v) for v in lengths]}"
    inputs["n"] = lengths.astype(dtype)
    return ", sequence_length=n"


def _state_arg(rng, cell_name, batch, dtype):
    """``initial_state`` (a pattern added to zeros, differentiated) or ``dtype``."""
    roll = rng.random()
    if roll < 0.35:
        return f"s0 = shifted({cell_name}.zero_state({batch}, tf.{dtype}))\nwrt.append(s0)\n", \
            ", initial_state=s0"
    return "", f", dtype=tf.{dtype}"


def _dynamic(rng):
    time_major = bool(rng.random() < 0.3)
    batch, steps, depth, dtype, x = _inputs(rng, time_major)
    inputs = {"x": x}
    cell, _ = _cell(rng, depth)
    code = f"cell = {cell}\nwrt = [x]\n"
    source = "loose(x)" if rng.random() < 0.3 else "x"
    state_code, state = _state_arg(rng, "cell", batch, dtype)
    lengths = _length_arg(rng, _lengths(rng, batch, steps), inputs)
    extra = ""
    if rng.random() < 0.3:
        extra += ", swap_memory=True"
    if rng.random() < 0.3:
        extra += f", parallel_iterations={int(rng.choice([1, 4]))}"
    if time_major:
        extra += ", time_major=True"
    code += state_code + (f"result = tf.nn.dynamic_rnn(cell, {source}{lengths}{state}{extra})")
    return code, inputs


def _static_rnn(rng):
    batch, steps, depth, dtype, x = _inputs(rng)
    inputs = {"x": x}
    cell, _ = _cell(rng, depth)
    state_code, state = _state_arg(rng, "cell", batch, dtype)
    lengths = _length_arg(rng, _lengths(rng, batch, steps), inputs)
    code = (f"cell = {cell}\nwrt = [x]\n{state_code}"
            f"result = tf.nn.static_rnn(cell, tf.unstack(x, axis=1){lengths}{state})")
    return code, inputs


def _bidirectional(rng):
    static = bool(rng.random() < 0.4)
    time_major = not static and bool(rng.random() < 0.3)
    batch, steps, depth, dtype, x = _inputs(rng, time_major)
    inputs = {"x": x}
    fw, _ = _cell(rng, depth)
    bw, _ = _cell(rng, depth)
    code = f"fw = {fw}\nbw = {bw}\nwrt = [x]\n"
    if rng.random() < 0.3:
        code += (f"s_fw = shifted(fw.zero_state({batch}, tf.{dtype}))\n"
                 f"s_bw = shifted(bw.zero_state({batch}, tf.{dtype}), 5)\nwrt += [s_fw, s_bw]\n")
        state = ", initial_state_fw=s_fw, initial_state_bw=s_bw"
    else:
        state = f", dtype=tf.{dtype}"
    lengths = _length_arg(rng, _lengths(rng, batch, steps), inputs)
    if static:
        code += (f"result = tf.nn.static_bidirectional_rnn(fw, bw, tf.unstack(x, axis=1)"
                 f"{state}{lengths})")
    else:
        major = ", time_major=True" if time_major else ""
        code += f"result = tf.nn.bidirectional_dynamic_rnn(fw, bw, x{lengths}{state}{major})"
    return code, inputs


def _by_hand(rng):
    """One step of a cell called directly, twice (the second call reuses its variables)."""
    batch, _, depth, dtype, x = _inputs(rng)
    cell, _ = _cell(rng, depth)
    code = (f"cell = {cell}\ns = shifted(cell.zero_state({batch}, tf.{dtype}))\nwrt = [x, s]\n"
            f"o1, s1 = cell(x[:, 0], s)\no2, s2 = cell(x[:, -1], s1)\nresult = (o1, o2, s2)")
    return code, {"x": x}


GENERATORS = [_dynamic, _dynamic, _dynamic, _static_rnn, _bidirectional, _by_hand]

_X = np.random.default_rng(5).standard_normal((3, 4, 2)).astype(np.float32)
_X1 = {"x": _X}
_XN = {"x": _X, "n": np.array([0, 4, 2], np.int32)}
EDGES = [
    # scopes: a string, a VariableScope, the same cell run twice (its variables reused)
    (f"cell = {RNN}GRUCell(3)\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, scope='encoder')", _X1),
    (f"cell = {RNN}BasicLSTMCell(3)\nwrt = [x]\n"
     "with tf.variable_scope('outer') as vs:\n    pass\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, scope=vs)", _X1),
    (f"cell = {RNN}LSTMCell(3, num_proj=2)\nwrt = [x]\n"
     "a = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)\n"
     "b = tf.nn.dynamic_rnn(cell, x * 2.0, dtype=tf.float32, scope='second')\n"
     "result = (a, b)", _X1),
    (f"cell = {RNN}GRUCell(2)\nwrt = [x]\n"
     "result = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32, scope='s')", _X1),
    (f"fw = {RNN}GRUCell(2)\nbw = {RNN}GRUCell(2)\nwrt = [x]\n"
     "result = tf.nn.bidirectional_dynamic_rnn(fw, bw, x, dtype=tf.float32, scope='bi')", _X1),
    (f"fw = {RNN}GRUCell(2)\nbw = {RNN}GRUCell(2)\nwrt = [x]\n"
     "result = tf.nn.static_bidirectional_rnn(fw, bw, tf.unstack(x, axis=1), "
     "dtype=tf.float32, scope='bi')", _X1),
    # unknown batch and time; a zero state of a dynamic batch size
    (f"cell = {RNN}BasicLSTMCell(3)\nwrt = [x]\nxl = loose(x)\n"
     "s0 = cell.zero_state(tf.shape(xl)[0], tf.float32)\n"
     "result = tf.nn.dynamic_rnn(cell, xl, initial_state=s0, sequence_length=n)", _XN),
    (f"cell = {RNN}GRUCell(3)\nwrt = [x]\nxl = loose(x)\n"
     "result = tf.nn.static_rnn(cell, tf.unstack(xl, num=4, axis=1), dtype=tf.float32, "
     "sequence_length=n)", _XN),
    (f"fw = {RNN}BasicRNNCell(2)\nbw = {RNN}LSTMCell(2, use_peepholes=True)\nwrt = [x]\n"
     "result = tf.nn.static_bidirectional_rnn(fw, bw, tf.unstack(loose(x), num=4, axis=1), "
     "dtype=tf.float32, sequence_length=n)", _XN),
    # zero steps (TF1 fails to differentiate them with respect to the inputs, so not wrt x)
    (f"cell = {RNN}GRUCell(3)\n"
     "result = tf.nn.dynamic_rnn(cell, x[:, :0], dtype=tf.float32)", _X1),
    # MultiRNNCell with concatenated states; LSTM states not tuples inside
    (f"cell = {RNN}MultiRNNCell([{RNN}BasicRNNCell(2), {RNN}GRUCell(3)], state_is_tuple=False)"
     "\nwrt = [x]\nresult = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    (f"cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2, state_is_tuple=False), "
     f"{RNN}LSTMCell(3, num_proj=2, state_is_tuple=False)], state_is_tuple=False)\nwrt = [x]\n"
     "s0 = shifted(cell.zero_state(3, tf.float32))\nwrt.append(s0)\n"
     "result = tf.nn.dynamic_rnn(cell, x, initial_state=s0)", _X1),
    (f"cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2), {RNN}GRUCell(3)], state_is_tuple=False)"
     "\nwrt = [x]\nresult = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    # an initial state of LSTMStateTuples built by hand; a nested MultiRNNCell
    (f"cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2), {RNN}MultiRNNCell([{RNN}GRUCell(2), "
     f"{RNN}BasicLSTMCell(1)])])\nwrt = [x]\n"
     "c = tf.ones([3, 2]) * 0.5\n"
     f"s0 = ({RNN}LSTMStateTuple(c, -c), (c * 0.3, {RNN}LSTMStateTuple(c[:, :1], c[:, 1:])))\n"
     "result = tf.nn.dynamic_rnn(cell, x, initial_state=s0, sequence_length=n)", _XN),
    # the residual wrapper (sum and residual_fn), dropout with keep probabilities of 1 as
    # tensors, the device wrapper's structure
    (f"cell = {RNN}ResidualWrapper({RNN}GRUCell(2))\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    (f"cell = {RNN}ResidualWrapper({RNN}BasicLSTMCell(2), lambda i, o: i * o)\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}ResidualWrapper({RNN}GRUCell(3))\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}DropoutWrapper({RNN}BasicLSTMCell(2), input_keep_prob=tf.constant(1.0), "
     "output_keep_prob=tf.placeholder_with_default(1.0, []), state_keep_prob=1.0, seed=3)\n"
     "wrt = [x]\nresult = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}MultiRNNCell([{RNN}DeviceWrapper({RNN}GRUCell(2), '/cpu:0'), "
     f"{RNN}ResidualWrapper({RNN}DropoutWrapper({RNN}BasicRNNCell(2)))])\nwrt = [x]\n"
     "result = tf.nn.bidirectional_dynamic_rnn(cell, cell, x, dtype=tf.float32, "
     "sequence_length=n)", _XN),
    # cells of the user's own: TF1's old style (__call__ with get_variable) and new (call,
    # build with add_variable/add_weight); a cell of nested inputs and state
    (f"class Mine({RNN}RNNCell):\n"
     "    state_size = property(lambda self: 3)\n"
     "    output_size = property(lambda self: 3)\n"
     "    def __call__(self, inputs, state, scope=None):\n"
     "        with tf.variable_scope(scope or 'mine'):\n"
     "            w = tf.get_variable('w', [inputs.shape[1] + 3, 3])\n"
     "            out = tf.tanh(tf.matmul(tf.concat([inputs, state], 1), w))\n"
     "        return out, out\n"
     "cell = Mine()\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    (f"class MyCell({RNN}RNNCell):\n"
     "    state_size = property(lambda self: 2)\n"
     "    output_size = property(lambda self: 2)\n"
     "    def build(self, shape):\n"
     "        self.w = self.add_variable('weights', [int(shape[-1]) + 2, 2])\n"
     "        self.b = self.add_weight('b', [2], initializer=tf.zeros_initializer())\n"
     "        self.built = True\n"
     "    def call(self, inputs, state):\n"
     "        out = tf.sigmoid(tf.matmul(tf.concat([inputs, state], 1), self.w) + self.b)\n"
     "        return out, out\n"
     "cell = MyCell()\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"class Pair({RNN}RNNCell):\n"
     "    state_size = property(lambda self: (2, 1))\n"
     "    output_size = property(lambda self: (2, 1))\n"
     "    def __call__(self, inputs, state, scope=None):\n"
     "        a, b = inputs\n"
     "        s, t = state\n"
     "        return (a + s, b * t + b), (s + a, t + 1.0)\n"
     "cell = Pair()\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, (x, x[:, :, :1]), dtype=tf.float32, sequence_length=n)",
     _XN),
    (f"class Pair({RNN}RNNCell):\n"
     "    state_size = property(lambda self: 1)\n"
     "    output_size = property(lambda self: (2, 1))\n"
     "    def __call__(self, inputs, state, scope=None):\n"
     "        return (inputs[0] * state, inputs[1] + state), state + inputs[1]\n"
     "cell = Pair()\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, (x, x[:, :, 1:]), dtype=tf.float32, time_major=True)",
     _X1),
    (f"class Pair({RNN}RNNCell):\n"
     "    state_size = property(lambda self: 1)\n"
     "    output_size = property(lambda self: (2, 1))\n"
     "    def __call__(self, inputs, state, scope=None):\n"
     "        return (inputs[0] * state, inputs[1] + state), state + inputs[1]\n"
     "cell = Pair()\nwrt = [x]\nsteps = [(x[:, t], x[:, t, 1:]) for t in range(4)]\n"
     "result = (tf.nn.static_rnn(cell, steps, dtype=tf.float32, sequence_length=n), "
     "tf.nn.static_bidirectional_rnn(cell, Pair(), steps, dtype=tf.float32, "
     "sequence_length=n))", _XN),
    # the initializers (keep_init: the variables keep their initial values): the scope's
    # for the kernels, each cell's own default for its biases, the cells' arguments
    ("keep_init = True\nwrt = [x]\n"
     "with tf.variable_scope('s', initializer=tf.constant_initializer(0.1)):\n"
     f"    cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2), {RNN}GRUCell(3), "
     f"{RNN}BasicRNNCell(2), {RNN}LSTMCell(2, use_peepholes=True, num_proj=1)])\n"
     "    result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    ("keep_init = True\nwrt = [x]\n"
     f"cell = {RNN}MultiRNNCell([{RNN}GRUCell(3, kernel_initializer=tf.constant_initializer(0.2), "
     "bias_initializer=tf.constant_initializer(-0.3)), "
     f"{RNN}LSTMCell(2, initializer=tf.constant_initializer(-0.15), use_peepholes=True)])\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    # two cells of one class in one scope; a cell called with a scope of its own
    (f"wrt = [x]\na = tf.nn.dynamic_rnn({RNN}GRUCell(2), x, dtype=tf.float32)\n"
     f"b = tf.nn.dynamic_rnn({RNN}GRUCell(3), x, dtype=tf.float32)\nresult = (a, b)", _X1),
    (f"cell = {RNN}BasicLSTMCell(2)\nwrt = [x]\ns = cell.zero_state(3, tf.float32)\n"
     "o1, s1 = cell(x[:, 0], s, scope='step')\no2, s2 = cell(x[:, 1], s1)\n"
     "result = (o1, o2, s2)", _X1),
    # a model built twice, the second time reusing the first's variables (new cells)
    ("wrt = [x]\nouts = []\nfor reuse in (None, True):\n"
     "    with tf.variable_scope('model', reuse=reuse):\n"
     f"        cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2), {RNN}GRUCell(2)])\n"
     "        outs.append(tf.nn.dynamic_rnn(cell, x * (2.0 if reuse else 1.0), "
     "dtype=tf.float32))\nresult = outs", _X1),
    ("wrt = [x]\nouts = []\nwith tf.variable_scope('model'):\n"
     f"    outs.append(tf.nn.static_rnn({RNN}LSTMCell(2, num_proj=1), tf.unstack(x, axis=1), "
     "dtype=tf.float32))\n    tf.get_variable_scope().reuse_variables()\n"
     f"    outs.append(tf.nn.bidirectional_dynamic_rnn({RNN}GRUCell(2), {RNN}GRUCell(2), x, "
     "dtype=tf.float32))\n"
     f"    outs.append(tf.nn.static_rnn({RNN}LSTMCell(2, num_proj=1), tf.unstack(x, axis=1), "
     "dtype=tf.float32))\nresult = outs", _X1),
    # one cell object as two layers (its variables shared), a state and a dtype both given
    (f"c = {RNN}GRUCell(2)\ncell = {RNN}MultiRNNCell([c, c])\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    (f"cell = {RNN}BasicLSTMCell(2)\nwrt = [x]\ns0 = shifted(cell.zero_state(3, tf.float32))\n"
     "wrt.append(s0)\nresult = tf.nn.dynamic_rnn(cell, x, initial_state=s0, dtype=tf.float32)",
     _X1),
    # get_initial_state of the inputs (a static and an unknown batch)
    (f"cell = {RNN}MultiRNNCell([{RNN}BasicLSTMCell(2), {RNN}GRUCell(2)])\nwrt = [x]\n"
     "s0 = cell.get_initial_state(x[:, 0])\ns1 = cell.get_initial_state(loose(x[:, 0]))\n"
     "result = (tf.nn.dynamic_rnn(cell, x, initial_state=s0), s1)", _X1),
    # LSTMCell's kernels in shards, and its arguments by position (TF1's order)
    (f"cell = {RNN}LSTMCell(4, num_unit_shards=2, num_proj=3, num_proj_shards=2)\n"
     "wrt = [x]\nresult = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=n)", _XN),
    (f"cell = {RNN}LSTMCell(3, True, 0.5, None, 2, 0.3, None, None, 0.25, False)\n"
     "wrt = [x]\nresult = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    # dropout of the state through a filter (keep 1: values equal)
    (f"cell = {RNN}DropoutWrapper({RNN}LSTMCell(2), state_keep_prob=1.0, "
     "dropout_state_filter_visitor=lambda s: True)\nwrt = [x]\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    # refusals: no dtype nor initial state, inputs of another rank, lengths not a vector,
    # an empty list, a state of the wrong structure
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.dynamic_rnn(cell, x)", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.static_rnn(cell, tf.unstack(x, axis=1))", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.dynamic_rnn(cell, x[0], dtype=tf.float32)", _X1),
    (f"cell = {RNN}GRUCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=[[1, 2, 3]])", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.static_rnn(cell, [], dtype=tf.float32)", _X1),
    (f"cell = {RNN}BasicLSTMCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, x, initial_state=tf.zeros([3, 2]))", _X1),
    (f"cell = {RNN}GRUCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, x, initial_state=tf.zeros([3, 5]))", _X1),
    (f"cell = {RNN}GRUCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32, sequence_length=[1, 2])", _X1),
    (f"cell = {RNN}GRUCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float64)", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.static_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.static_bidirectional_rnn(cell, cell, [], "
     "dtype=tf.float32)", _X1),
    (f"cell = {RNN}GRUCell(2)\n"
     "result = tf.nn.dynamic_rnn(cell, tf.cast(x, tf.int32), dtype=tf.float32)", _X1),
    (f"cell = {RNN}GRUCell(2)\nresult = tf.nn.static_rnn(cell, tf.unstack(x, axis=1), "
     "dtype=tf.float32, sequence_length=[[1, 2, 3]])", _X1),
    # not a cell, a filter not callable, an initial state of another batch or dtype
    ("result = tf.nn.dynamic_rnn(lambda i, s: (i, s), x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}DropoutWrapper({RNN}GRUCell(3), dropout_state_filter_visitor=3)\n"
     "result = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)", _X1),
    (f"cell = {RNN}GRUCell(3)\nresult = cell.get_initial_state(x[:, 0], dtype=tf.float64)", _X1),
    (f"cell = {RNN}GRUCell(3)\nresult = cell.get_initial_state(x[:, 0], batch_size=5)", _X1),
    # a sharded kernel used by a second loop and by hand
    (f"cell = {RNN}LSTMCell(3, num_unit_shards=2)\nwrt = [x]\n"
     "a = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)\n"
     "b = tf.nn.dynamic_rnn(cell, x * 2.0, dtype=tf.float32, scope='rnn')\n"
     "result = (a, b, cell(x[:, 0], cell.zero_state(3, tf.float32)))", _X1),
]


def _draw(seed, per_family):
    rng = np.random.default_rng([seed, 1206])
    return [generator(rng) for _ in range(per_family) for generator in GENERATORS]


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_rnn_surface_agrees_with_tf1(tmp_path):
    run_fuzz(tmp_path, EDGES + _draw(seed=0, per_family=5))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rnn_surface_agrees_with_tf1_long(tmp_path, seed):
    run_fuzz(tmp_path, _draw(seed=seed, per_family=20))
