"""Op names under variable scopes against TF1 running the same program: ``default_name``
scopes whose name scope was taken already (``blk`` used by an op), a ``VariableScope`` object
re-entered (a fresh name scope after its last component, its ``original_name_scope`` kept),
re-entered without the auxiliary name scope, under name scopes, and an RNN cell called twice
(its later calls back in the first call's name scope); variable names never change."""
import asyncflow as af
from tf1_reference import compat_run, tf1_run

SNIPPET = """
x = tf.placeholder(tf.float32, [2, 3], name="x")
names = []
tf.identity(x, name="blk")
with tf.variable_scope(None, default_name="blk") as sc:
    names += [sc.name, sc.original_name_scope, tf.identity(x).name]
with tf.variable_scope(sc):
    names += [tf.identity(x).name, tf.get_variable_scope().original_name_scope]
    names.append(tf.get_variable("w", [1]).name)
with tf.variable_scope(sc, reuse=True):
    names += [tf.identity(x).name, tf.get_variable("w", [1]).name]
with tf.variable_scope(sc, auxiliary_name_scope=False):
    names.append(tf.identity(x).name)
with tf.name_scope(sc.original_name_scope):
    names.append(tf.identity(x).name)
with tf.variable_scope(None, default_name="blk") as sc3:
    names += [sc3.name, sc3.original_name_scope]
with tf.name_scope("ns"):
    with tf.variable_scope(sc3):
        names += [tf.identity(x).name, tf.get_variable("v", [1]).name]
with tf.variable_scope("vs") as vs:
    pass
with tf.variable_scope("other"):
    with tf.variable_scope(vs):
        names += [tf.get_variable_scope().name, tf.identity(x).name]
cell = tf.nn.rnn_cell.BasicRNNCell(3)
s = cell.zero_state(2, tf.float32)
o1, _ = cell(x, s)
o2, _ = cell(x, s)
names += [o1.name, o2.name]
names += [v.name for v in tf.global_variables()]
outputs["names"] = np.array(names)
"""


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path)
    with af.Graph().as_default():
        ours = compat_run(SNIPPET, {})
    assert list(ours["names"]) == list(theirs["names"])
