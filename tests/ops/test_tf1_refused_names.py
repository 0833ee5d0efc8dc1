"""The build-time refusals of the TF1 names added from porting.md's "Not provided" list
(hessians, cross, bitcast, parallel_stack, histogram_fixed_width, required_space_to_batch_
paddings, extract_image_patches, edit_distance, igamma), run under TF1 itself and here: each
case is refused by both, with the same exception type (the messages are checked, op by op,
in the test_tf1_*_names.py files). Cases TF1 builds and refuses only when the step runs
(a batch entry in extract_image_patches' ksizes, a constant negative count in repeat) are
refused here while building, which the names' own tests check; they are not listed."""

from tf1_reference import compat_run, tf1_run

CASES = [
    "tf.hessians(tf.reduce_sum(x * 2.0), x)",
    "tf.hessians(tf.reduce_sum(x * x), tf.constant([1, 2]))",
    "tf.cross(tf.ones([2, 4]), tf.ones([2, 4]))",
    "tf.cross(tf.ones([1, 3]), tf.ones([3, 3]))",
    "tf.cross(tf.ones([3]), tf.ones([3], tf.float64))",
    "tf.cross(tf.ones([3], tf.bool), tf.ones([3], tf.bool))",
    "tf.bitcast(tf.ones([2, 3], tf.int32), tf.float64)",
    "tf.bitcast(tf.ones([2], tf.bool), tf.int8)",
    "tf.bitcast(tf.ones([2], tf.int8), tf.bool)",
    "tf.parallel_stack([tf.placeholder(tf.float32, [None, 3])] * 2)",
    "tf.parallel_stack([tf.ones([2, 3]), tf.ones([3, 2])])",
    "tf.histogram_fixed_width([1.0], [0.0, 5.0], nbins=0)",
    "tf.histogram_fixed_width([1.0], [0.0, 5.0, 6.0], nbins=2)",
    "tf.histogram_fixed_width([1.0], [0.0, 5.0], dtype=tf.float32)",
    "tf.histogram_fixed_width_bins(np.array([1.0]), [0.0, 5.0], nbins=2)",
    "tf.histogram_fixed_width(tf.ones([2], tf.float16), tf.constant([0.0, 1.0], tf.float16))",
    "tf.required_space_to_batch_paddings([5, 7, 1], [2, 3])",
    "tf.extract_image_patches(tf.ones([5, 6, 3]), [1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "
    "'VALID')",
    "tf.extract_image_patches(tf.ones([1, 5, 6, 3]), [1, 2, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "
    "'FULL')",
    "tf.extract_image_patches(tf.ones([1, 5, 6, 3]), [2, 3], [1, 2, 2, 1], [1, 1, 1, 1], "
    "'VALID')",
    "tf.extract_image_patches(tf.ones([1, 5, 6, 3]), [1, 1, 3, 1], [1, 0, 2, 1], [1, 1, 1, 1], "
    "'VALID')",
    "tf.edit_distance(tf.constant([1, 2]), tf.SparseTensor([[0, 0]], [1], [2, 4]))",
    "tf.edit_distance(tf.SparseTensor([[0, 0]], [1], [2, 4]), "
    "tf.SparseTensor([[0, 0]], [1.0], [2, 4]))",
    "tf.edit_distance(tf.SparseTensor([[0, 0]], [1], [2, 4]), "
    "tf.SparseTensor([[0, 0, 0]], [1], [2, 4, 4]))",
    "tf.igamma([1, 2], [1, 2])",
    "tf.igamma(tf.ones([2]), tf.ones([3]))",
    "tf.igammac(tf.ones([2]), tf.ones([2], tf.float64))",
]

SNIPPET = f"CASES = {CASES!r}\n" + """
refused = []
for case in CASES:
    with tf.Graph().as_default():
        x = tf.constant([1.0, 2.0])
        try:
            eval(case)
            refused.append("built")
        except Exception as error:  # noqa: BLE001 - the type is what is compared
            refused.append(type(error).__name__)
outputs["refused"] = np.array(refused)
"""


def test_refusals_match_tf1(tmp_path):
    theirs = tf1_run(SNIPPET, tmp_path)["refused"].tolist()
    ours = compat_run(SNIPPET, {})["refused"].tolist()
    assert "built" not in theirs, [c for c, r in zip(CASES, theirs) if r == "built"]
    assert [f"{c}: {r}" for c, r in zip(CASES, ours)] == \
        [f"{c}: {r}" for c, r in zip(CASES, theirs)]
