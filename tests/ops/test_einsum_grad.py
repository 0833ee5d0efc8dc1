"""The gradient of ``einsum`` in every form TF1's gradient takes: matmul-like, batch,
reductions, transposes, outer products, ``...`` that broadcasts, and a label repeated in one
operand (a diagonal, a trace). Checked against finite differences on drawn equations and
against TF1 (``tf.einsum`` and ``tf.gradients``, when TensorFlow is importable).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncflow as af
from gradcheck import check_gradients
from tests.tf1_reference import tf1_run

SIZES = {"a": 2, "b": 3, "c": 1, "d": 2}


@st.composite
def equations(draw):
    """``(equation, operand shapes)``: 1-3 operands over labels of fixed sizes, a label
    repeated within an operand now and then, and maybe ``...`` over batch dimensions of
    which each operand holds a trailing part, some of size 1 (broadcast)."""
    count = draw(st.integers(1, 3))
    subscripts = [draw(st.lists(st.sampled_from("abcd"), max_size=3)) for _ in range(count)]
    batch = draw(st.lists(st.integers(1, 2), max_size=2)) if draw(st.booleans()) else None
    inputs, shapes = [], []
    for labels in subscripts:
        shape = [SIZES[label] for label in labels]
        text = "".join(labels)
        if batch is not None:
            held = batch[len(batch) - draw(st.integers(0, len(batch))):]
            ones = draw(st.lists(st.booleans(), min_size=len(held), max_size=len(held)))
            text = "..." + text
            shape = [1 if one else size for size, one in zip(held, ones)] + shape
        inputs.append(text)
        shapes.append(tuple(shape))
    used = sorted(set("".join("".join(s) for s in subscripts)))
    output = draw(st.permutations(used))[:draw(st.integers(0, len(used)))]
    prefix = "..." if batch is not None else ""
    return ",".join(inputs) + "->" + prefix + "".join(output), shapes


@given(equations(), st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_einsum_gradient_matches_finite_differences(case, seed):
    equation, shapes = case
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(shape) for shape in shapes]
    await check_gradients(lambda *xs: af.einsum(equation, *xs), inputs, rtol=1e-5, atol=1e-7)


FORMS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
         ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("ij->ji", [(2, 3)]),
         ("i,j->ij", [(3,), (4,)]), ("ijk,kl,jl->i", [(2, 3, 4), (4, 5), (3, 5)]),
         ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iij->j", [(2, 2, 3)]),
         ("ij,jj->i", [(2, 3), (3, 3)]), ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
         ("...ij,jk->...ik", [(2, 3, 4), (4, 5)]), ("ij...,j->i...", [(2, 3, 4), (3,)]),
         ("...i->...", [(2, 3, 4)]), ("...ii->...i", [(2, 3, 3)]), ("i...i->...", [(3, 2, 3)]),
         ("ab...,b...->a...", [(2, 3, 1, 4), (3, 5, 1)])]


async def test_einsum_gradients_match_tf1(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"x{k}_{j}": rng.standard_normal(shape)
              for k, (_, shapes) in enumerate(FORMS) for j, shape in enumerate(shapes)}
    with af.Graph().as_default():
        fetches = []
        for k, (equation, shapes) in enumerate(FORMS):
            xs = [af.constant(arrays[f"x{k}_{j}"]) for j in range(len(shapes))]
            out = af.einsum(equation, *xs)
            assert out.shape.as_list() == list(np.einsum(equation, *[
                arrays[f"x{k}_{j}"] for j in range(len(shapes))]).shape), equation
            fetches.append([out] + af.gradients(af.reduce_sum(af.sin(out)), xs))
        async with af.Session() as sess:
            ours = await sess.run(fetches)
    theirs = tf1_run(f"""
FORMS = {FORMS!r}
values = []
for k, (equation, shapes) in enumerate(FORMS):
    xs = [tf.constant(inputs[f"x{{k}}_{{j}}"]) for j in range(len(shapes))]
    out = tf.einsum(equation, *xs)
    values += [out] + tf.gradients(tf.reduce_sum(tf.sin(out)), xs)
with tf.Session() as sess:
    outputs["values"] = sess.run(values)
""", tmp_path, **arrays)
    flat = [value for group in ours for value in group]
    assert len(flat) == len(theirs["values"])
    for mine, tf_value in zip(flat, theirs["values"]):
        np.testing.assert_allclose(mine, tf_value, rtol=1e-10, atol=1e-12)


def test_einsum_gradient_of_unknown_rank_ellipsis_names_the_op():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, shape=None)
        y = af.einsum("...i->...", x, name="rows")
        with pytest.raises(LookupError, match="Einsum 'rows'.*ranks"):
            af.gradients(y, x)
