"""The training API's surface against TF1's: ``compute_gradients``, ``apply_gradients`` and
``minimize`` with None gradients, no variables, integer losses and variables, bad gates,
gradients that are lists or of the wrong dtype or shape, TF1's keyword arguments
(``aggregation_method``, ``colocate_gradients_with_ops``), slot names and ``get_slot``, the
names of the update ops and of the non-slot variables under a name scope, the optimizers'
argument checks, Ftrl's ``beta``, and sparse updates with int64 and out-of-range indices.

Each case runs in a graph of its own under TF1 (``tf1_run``; skips without TensorFlow) and
here (``compat_run``); both must give the same ``out`` (its repr), or fail with the same error
class. The messages may differ (ours name the optimizer, the op or the variable).
Regressions, TF-free: tests/train/test_optimizer_tf1_values.py.
"""
from tf1_reference import compat_run, tf1_run

CASES = [
    ('apply_none', '''v = tf.Variable([1.0, 2.0], name='v')
tf.train.GradientDescentOptimizer(0.1).apply_gradients([(None, v)])
'''),
    ('apply_empty', '''tf.train.GradientDescentOptimizer(0.1).apply_gradients([])
'''),
    ('apply_list_grad', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.GradientDescentOptimizer(0.1).apply_gradients([([1.0, 1.0], v)])
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
    ('apply_wrong_dtype', '''v = tf.Variable(np.array([1.0, 2.0]), name='v')
op = tf.train.GradientDescentOptimizer(0.1).apply_gradients([(tf.constant([1.0, 1.0]), v)])
out = 'built'
'''),
    ('apply_wrong_shape', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.GradientDescentOptimizer(0.1).apply_gradients([(tf.constant([1.0, 1.0, 3.0]), v)])
out = 'built'
'''),
    ('apply_dup_var', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.MomentumOptimizer(0.1, 0.9).apply_gradients([(tf.constant([1.0, 1.0]), v), (tf.constant([1.0, 1.0]), v)])
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
    ('minimize_unconnected', '''v = tf.Variable([1.0, 2.0], name='v')
tf.train.GradientDescentOptimizer(0.1).minimize(tf.constant(1.0) * 2.0, var_list=[v])
'''),
    ('compute_empty_varlist', '''v = tf.Variable([1.0, 2.0], name='v')
tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(v), var_list=[])
'''),
    ('compute_no_trainables', '''v = tf.Variable([1.0, 2.0], name='v', trainable=False)
tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(v))
'''),
    ('compute_int_loss', '''v = tf.Variable([1.0, 2.0], name='v')
tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.cast(tf.reduce_sum(v), tf.int32))
'''),
    ('compute_int_var', '''v = tf.Variable([1, 2], name='v')
tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(tf.cast(v, tf.float32)), var_list=[v])
'''),
    ('compute_bad_gate', '''v = tf.Variable([1.0, 2.0], name='v')
tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(v), gate_gradients=7)
'''),
    ('compute_partial_none', '''v = tf.Variable([1.0, 2.0], name='v'); w = tf.Variable([3.0], name='w')
out = [g is None for g, _ in tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(v))]
'''),
    ('compute_kwargs', '''v = tf.Variable([1.0, 2.0], name='v')
p = tf.train.GradientDescentOptimizer(0.1).compute_gradients(tf.reduce_sum(v * v), aggregation_method=tf.AggregationMethod.EXPERIMENTAL_TREE, colocate_gradients_with_ops=True)
out = len(p)
'''),
    ('minimize_kwargs', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(v * v), colocate_gradients_with_ops=True, name='train')
out = op.name
'''),
    ('gradients_kwargs', '''v = tf.Variable([1.0, 2.0], name='v')
g = tf.gradients(tf.reduce_sum(v * v), [v], colocate_gradients_with_ops=True, gate_gradients=True, aggregation_method=tf.AggregationMethod.ADD_N)
out = len(g)
'''),
    ('op_names', '''v = tf.Variable([1.0, 2.0], name='v')
gs = tf.train.get_or_create_global_step()
op = tf.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(v * v), global_step=gs)
out = (op.name, op.type, sorted(o.name for o in tf.get_default_graph().get_operations() if o.name.startswith('Adam') and o.type in ('ApplyAdam', 'AssignAdd', 'Assign', 'NoOp')))
'''),
    ('op_names_nogs', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(tf.reduce_sum(v * v), name='train')
out = (op.name, op.type)
'''),
    ('gs_int32', '''v = tf.Variable([1.0, 2.0], name='v')
gs = tf.Variable(0, name='gs', trainable=False)
op = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(v * v), global_step=gs)
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); s.run(op); out = (int(s.run(gs)), gs.dtype.base_dtype.name)
'''),
    ('get_slot_missing', '''v = tf.Variable([1.0, 2.0], name='v'); w = tf.Variable([1.0], name='w')
o = tf.train.MomentumOptimizer(0.1, 0.9); o.minimize(tf.reduce_sum(v * v), var_list=[v])
out = (o.get_slot(w, 'momentum'), o.get_slot(v, 'nope'), o.get_slot_names(), o.get_slot(v, 'momentum').name)
'''),
    ('slot_names_all', '''v = tf.Variable([1.0, 2.0], name='v')
out = []
for o in [tf.train.GradientDescentOptimizer(0.1), tf.train.MomentumOptimizer(0.1, 0.9), tf.train.AdamOptimizer(), tf.train.AdagradOptimizer(0.1), tf.train.RMSPropOptimizer(0.1), tf.train.RMSPropOptimizer(0.1, centered=True), tf.train.FtrlOptimizer(0.1)]:
    o.minimize(tf.reduce_sum(v * v)); out.append((o.get_name(), o.get_slot_names()))
'''),
    ('slot_in_scope', '''with tf.variable_scope('outer'):
    v = tf.Variable([1.0, 2.0], name='v')
with tf.name_scope('train'):
    o = tf.train.AdamOptimizer(); o.minimize(tf.reduce_sum(v * v))
out = sorted(x.op.name for x in tf.global_variables())
'''),
    ('adam_two_graph_vars', '''v = tf.Variable([1.0, 2.0], name='zz'); w = tf.Variable([1.0], name='aa')
o = tf.train.AdamOptimizer(); o.minimize(tf.reduce_sum(v * v) + tf.reduce_sum(w))
b1, b2 = o._get_beta_accumulators()
out = (b1.op.name, b1.device, b1.dtype.base_dtype.name)
'''),
    ('slot_trainable', '''v = tf.Variable([1.0, 2.0], name='v')
o = tf.train.AdagradOptimizer(0.1); o.minimize(tf.reduce_sum(v * v))
out = ([x.op.name for x in tf.trainable_variables()], [x.op.name for x in tf.global_variables()])
'''),
    ('name_empty', '''tf.train.GradientDescentOptimizer(0.1, name='')
'''),
    ('adagrad_zero', '''tf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0)
'''),
    ('ftrl_neg', '''tf.train.FtrlOptimizer(0.1, initial_accumulator_value=-1.0)
'''),
    ('ftrl_zero_init', '''out = type(tf.train.FtrlOptimizer(0.1, initial_accumulator_value=0.0)).__name__
'''),
    ('ftrl_pos_power', '''tf.train.FtrlOptimizer(0.1, learning_rate_power=0.5)
'''),
    ('ftrl_neg_l1', '''tf.train.FtrlOptimizer(0.1, l1_regularization_strength=-0.5)
'''),
    ('ftrl_beta', '''v = tf.Variable([1.0, -2.0, 0.5], name='v')
op = tf.train.FtrlOptimizer(0.1, l2_regularization_strength=0.1, beta=0.3).minimize(tf.reduce_sum(v * v))
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); s.run(op); out = s.run(v).tolist()
'''),
    ('momentum_tensor_lr', '''v = tf.Variable(np.array([1.0, -2.0]), name='v')
lr = tf.placeholder(tf.float32, [])
op = tf.train.MomentumOptimizer(lr, 0.9).minimize(tf.reduce_sum(v * v))
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op, {lr: 0.5}); s.run(op, {lr: 0.25}); out = s.run(v).tolist()
'''),
    ('minimize_var_list_tuple', '''v = tf.Variable([1.0, 2.0], name='v')
op = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(v * v), var_list=(v,))
out = 'ok'
'''),
    ('apply_twice_same_opt', '''v = tf.Variable([1.0, 2.0], name='v')
o = tf.train.AdamOptimizer(0.1)
a = o.minimize(tf.reduce_sum(v * v)); b = o.minimize(tf.reduce_sum(v))
out = (a.name, b.name, sorted(x.op.name for x in tf.global_variables()))
'''),
    ('sparse_apply_dense_grad_int64_idx', '''v = tf.Variable(np.ones([4, 2], np.float32), name='v')
g = tf.IndexedSlices(tf.constant(np.ones([3, 2], np.float32)), tf.constant([3, 0, 3], tf.int64), tf.constant([4, 2], tf.int64))
op = tf.train.AdagradOptimizer(0.1).apply_gradients([(g, v)])
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
    ('sparse_out_of_range', '''v = tf.Variable(np.ones([4, 2], np.float32), name='v')
g = tf.IndexedSlices(tf.constant(np.ones([1, 2], np.float32)), tf.constant([4]), tf.constant([4, 2]))
op = tf.train.MomentumOptimizer(0.1, 0.9).apply_gradients([(g, v)])
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
    ('sparse_gd_out_of_range', '''v = tf.Variable(np.ones([4, 2], np.float32), name='v')
g = tf.IndexedSlices(tf.constant(np.ones([1, 2], np.float32)), tf.constant([-1]), tf.constant([4, 2]))
op = tf.train.GradientDescentOptimizer(0.1).apply_gradients([(g, v)])
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
    ('proximal_adagrad_bad_hypers', '''v = tf.Variable(np.ones([3, 2], np.float32), name='v')
out = []
for kw in (dict(learning_rate=0.0), dict(learning_rate=0.1, l1_regularization_strength=-0.1),
           dict(learning_rate=0.1, l2_regularization_strength=-0.1)):
    for loss in (tf.reduce_sum(v * v), tf.reduce_sum(tf.gather(v, [2, 0, 2]))):
        o = tf.train.ProximalAdagradOptimizer(**kw); op = o.minimize(loss)
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            try:
                s.run(op); out.append('ran')
            except tf.errors.InvalidArgumentError:
                out.append(s.run([v, o.get_slot(v, 'accumulator')])[0].tolist())
'''),
    ('ftrl_tensor_beta', '''v = tf.Variable([1.0, -2.0], name='v')
op = tf.train.FtrlOptimizer(0.1, beta=tf.constant(0.3)).minimize(tf.reduce_sum(v * v))
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = np.round(s.run(v), 5).tolist()
'''),
    ('int_lr_beyond_int32', '''v = tf.Variable(np.zeros([1]), name='v')
op = tf.train.GradientDescentOptimizer(3000000000).minimize(tf.reduce_sum(v))
with tf.Session() as s:
    s.run(tf.global_variables_initializer()); s.run(op); out = s.run(v).tolist()
'''),
]

DRIVER = """
for _name, _code in CASES:
    _env = {"tf": tf, "np": np}
    try:
        with tf.Graph().as_default():
            exec(_code, _env)
        outputs[_name] = np.array(repr(_env.get("out")))
    except Exception as _e:
        outputs[_name] = np.array("error " + type(_e).__name__)
"""


def test_training_api_agrees_with_tf1(tmp_path):
    source = f"CASES = {CASES!r}\n" + DRIVER
    theirs = tf1_run(source, tmp_path)
    ours = compat_run(source, {})
    report = [f"{name}: asyncflow {ours[name]} vs TF1 {theirs[name]}"
              for name, _ in CASES if str(ours[name]) != str(theirs[name])]
    assert not report, f"{len(report)} differences from TF1:\n" + "\n".join(report)
