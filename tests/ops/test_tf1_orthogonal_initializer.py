"""TF1's ``tf.orthogonal_initializer`` (porting.md listed it as not provided): orthogonal
values times ``gain`` for tall, wide and higher-rank shapes, seeded draws repeatable, and
TF1's refusals (a shape of rank < 2, an integer dtype); the same program under TF1 gives the
same shapes, dtypes, orthogonality and refusals (the numbers drawn are asyncflow's own)."""
import numpy as np

import asyncflow as af
import asyncflow.compat.v1 as tf
from tf1_reference import compat_run, tf1_run

SNIPPET = """
tf.set_random_seed(7)
shapes = [[6, 3], [3, 6], [2, 3, 4], [5, 5]]
made = [tf.get_variable(f"v{i}", s, initializer=tf.orthogonal_initializer(gain=g, seed=i),
                        dtype=d)
        for i, (s, g, d) in enumerate(zip(shapes, [1.0, 2.0, 0.5, 1.0],
                                          [tf.float32, tf.float64, tf.float32, tf.float64]))]
refused = []
for build in (lambda: tf.get_variable("r1", [4], initializer=tf.orthogonal_initializer()),
              lambda: tf.orthogonal_initializer(dtype=tf.int32),
              lambda: tf.get_variable("r3", [2, 2], tf.int32, tf.orthogonal_initializer())):
    try:
        build()
        refused.append("none")
    except Exception as e:
        refused.append(type(e).__name__)
outputs["refused"] = np.array(refused)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    values = sess.run(made)
    again = sess.run([v.initialized_value() for v in made])
errors = []
for v, g in zip(values, [1.0, 2.0, 0.5, 1.0]):
    m = v.reshape(-1, v.shape[-1])
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    errors.append(np.abs(gram - g * g * np.eye(len(gram))).max())
outputs["orthogonal"] = np.array([e < 1e-5 for e in errors])
outputs["dtypes"] = np.array([str(v.dtype) for v in values])
outputs["shapes"] = np.array([str(list(v.shape)) for v in values])
outputs["repeatable"] = np.array([True])
"""


def test_against_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path)
    with af.Graph().as_default():
        ours = compat_run(SNIPPET, {})
    for key in ("refused", "orthogonal", "dtypes", "shapes"):
        assert list(ours[key]) == list(theirs[key]), key


def test_orthogonal_seeded_and_refused_here():
    with af.Graph().as_default():
        out = compat_run(SNIPPET, {})
    assert out["orthogonal"].all()
    assert list(out["dtypes"]) == ["float32", "float64", "float32", "float64"]
    assert list(out["refused"]) == ["ValueError", "ValueError", "TypeError"]
    draws = []
    for _ in range(2):  # the same graph seed and op seed draw the same matrix
        with af.Graph().as_default():
            af.set_random_seed(3)
            value = tf.orthogonal_initializer(seed=1)([4, 4], af.float64)
            with tf.Session() as sess:
                draws.append(sess.run(value))
    np.testing.assert_array_equal(draws[0], draws[1])
    np.testing.assert_allclose(draws[0] @ draws[0].T, np.eye(4), atol=1e-14)
