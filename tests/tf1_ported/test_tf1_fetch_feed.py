"""What may be fetched and fed around ``cond`` and ``while_loop``: TensorFlow 1.x's
``control_flow_ops_py_test.py`` (``testFetchable``, ``testFeedable``, the "dead tensor" of a
finished loop) ported to asyncflow, and one program run under TF1 too (when TensorFlow is
importable) whose refusals and values must match.

TF1 marks the ops built inside a cond branch or a while loop as not fetchable (a loop's
Enters and a top-level loop's Exits excepted) and the values computed inside a loop as not
feedable: ``sess.run`` refuses them with a ValueError before anything runs.
"""
import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run


def _get_while_tensor():
    """control_flow_ops_py_test.py ControlFlowTest._getWhileTensor: a tensor of a loop body."""
    tensor = []

    def body(i):
        if not tensor:
            tensor.append(af.constant(1))
        return i + tensor[0]
    af.while_loop(lambda i: i < 10, body, [0])
    return tensor[0]


async def test_fetching_a_tensor_of_a_finished_loop_is_refused():
    """The "dead tensor": a body value fetched after the loop (TF1: not fetchable)."""
    with af.Graph().as_default():
        while_tensor = _get_while_tensor()
        async with af.Session() as sess:
            with pytest.raises(ValueError, match=r"Operation 'while/Const_\d+' has been marked "
                                                 r"as not fetchable: it is computed inside "
                                                 r"while_loop 'while'"):
                await sess.run(while_tensor)
            # the session stays usable
            assert await sess.run(af.get_default_graph().get_tensor_by_name("while/Exit:0")) == 10


async def test_fetchable():
    """control_flow_ops_py_test.py ControlFlowTest.testFetchable: each op input is fetched;
    those inside the branches are refused, the others give their values."""
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32)
        af.cond(af.constant(True), lambda: x + 2, lambda: x + 0)
        refused = set()
        async with af.Session() as sess:
            for op in graph.get_operations():
                for t in op.inputs:
                    # TF1's graph.is_fetchable: false for the branches' ops and the Switches
                    # and pivots the cond builds around them
                    if t.op.control_flow_context is None and t.op.type != "Switch" and \
                            t.op.name not in ("cond/switch_t", "cond/switch_f", "cond/pred_id"):
                        await sess.run(t, feed_dict={x: 3})
                    else:
                        refused.add(t.op.type)
                        with pytest.raises(ValueError, match="has been marked as not fetchable"):
                            await sess.run(t, feed_dict={x: 3})
        assert refused == {"Switch", "Identity", "Add", "Const"}


async def test_feedable():
    """control_flow_ops_py_test.py ControlFlowTest.testFeedable: tensors outside the loop may
    be fed; every int32 tensor computed inside it (and its Enters) may not."""
    with af.Graph().as_default() as graph:
        c = af.constant(2)
        i0 = af.constant(0)
        r = af.while_loop(lambda i: i < 1000, lambda i: af.square(c) + i, [i0])
        async with af.Session() as sess:
            assert await sess.run(r, feed_dict={i0: 0}) == 1000
            outside = [t for op in graph.get_operations() for t in op.outputs
                       if op.control_flow_context is None and op.type != "Enter"] + [r]
            assert i0 in outside and c in outside
            for t in outside:
                await sess.run(r, feed_dict={t: 3})
            inside = [t for op in graph.get_operations() for t in op.inputs
                      if t not in outside and t.dtype is af.int32]
            assert inside
            for t in inside:
                with pytest.raises(ValueError, match="may not be fed"):
                    await sess.run(r, feed_dict={t: 3})


# One graph built by the same source under TF1 (``tf``) and asyncflow (``af``): roles name
# tensors by what they are, so the two systems' op names need not agree.
_ROLES = """
def roles(tf):
    x = tf.placeholder(tf.float32, shape=[], name="x")
    seen = {}

    def body(i, v):
        seen["loop_body"] = v * 2.0
        return i + 1, seen["loop_body"]
    _, seen["loop_result"] = tf.while_loop(lambda i, v: i < 3, body, [0, x])

    def branch():
        seen["cond_branch"] = x + 1.0
        return seen["cond_branch"]
    seen["cond_result"] = tf.cond(x > 0, branch, lambda: x - 1.0)

    def outer(k, w):
        def inner():
            seen["inner_result"] = tf.while_loop(lambda j, u: j < 2,
                                                 lambda j, u: (j + 1, u * x), [0, w])[1]
            return seen["inner_result"]
        seen["outer_cond_result"] = tf.cond(k > 0, inner, lambda: w)
        return k + 1, seen["outer_cond_result"]
    _, seen["outer_result"] = tf.while_loop(lambda k, w: k < 3, outer, [0, x])
    return x, seen


def probe(tf, sess):
    # what each role gives when fetched (-1: refused), then whether it may be fed (1/-1);
    # the asyncflow side runs the same steps with await
    x, seen = roles(tf)
    found = []
    for role in sorted(seen):
        try:
            found.append(float(sess.run(seen[role], {x: 1.5})))
        except ValueError as exc:
            assert "has been marked as not fetchable" in str(exc), exc
            found.append(-1.0)
    for role in sorted(seen):
        try:
            sess.run(seen["outer_result"], {x: 1.5, seen[role]: 1.0})
            found.append(1.0)
        except ValueError as exc:
            assert "may not be fed" in str(exc), exc
            found.append(-1.0)
    return found
"""


async def test_fetch_and_feed_refusals_match_tf1(tmp_path):
    namespace = {}
    exec(_ROLES, namespace)

    with af.Graph().as_default():
        x, seen = namespace["roles"](af)
        async with af.Session() as sess:
            ours = []
            for role in sorted(seen):
                try:
                    ours.append(float(await sess.run(seen[role], {x: 1.5})))
                except ValueError as exc:
                    assert "has been marked as not fetchable" in str(exc), exc
                    ours.append(-1.0)
            for role in sorted(seen):
                try:
                    await sess.run(seen["outer_result"], {x: 1.5, seen[role]: 1.0})
                    ours.append(1.0)
                except ValueError as exc:
                    assert "may not be fed" in str(exc), exc
                    ours.append(-1.0)
    theirs = tf1_run(_ROLES + """
with tf.Session() as sess:
    outputs["found"] = probe(tf, sess)
""", tmp_path)
    np.testing.assert_allclose(ours, theirs["found"], rtol=1e-6)
