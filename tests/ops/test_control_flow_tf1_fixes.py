"""TF1's answers for the control-flow idioms where asyncflow differed (found by
tests/ops/test_tf1_control_flow_fuzz.py), checked without TensorFlow: ``tf.case`` with no
true predicate and no default, a dict of pairs, ``exclusive`` without a default, no pairs;
the class of a cond's dtype mismatch; ``while_loop``'s ``return_same_structure``,
``swap_memory`` and a falsy ``loop_vars``."""
import collections

import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors


async def run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


async def test_case_without_default_fails_when_no_predicate_holds():
    """TF1 runs the last fn as the default only after an Assert on its predicate: no true
    predicate is an InvalidArgumentError (asyncflow gave the last fn's value)."""
    with af.Graph().as_default():
        k = af.placeholder(af.int32, [])
        a = af.constant([1.0, 2.0])
        out = af.case([(af.equal(k, 0), lambda: a * 2.0), (af.equal(k, 1), lambda: a * 3.0)])
        np.testing.assert_array_equal(await run(out, {k: 0}), [2.0, 4.0])
        np.testing.assert_array_equal(await run(out, {k: 1}), [3.0, 6.0])
        with pytest.raises(errors.InvalidArgumentError, match="none of the predicates is true"):
            await run(out, {k: 7})
        # TF1's control dependency reaches only ops the fn builds: a tensor it returns
        # unchanged does not wait for the Assert (TF1 answers a here too)
        passthrough = af.case([(af.equal(k, 0), lambda: a * 2.0), (af.equal(k, 1), lambda: a)])
        np.testing.assert_array_equal(await run(passthrough, {k: 7}), [1.0, 2.0])


async def test_case_tries_a_dict_in_the_order_of_its_predicates_names():
    """TF1 sorts a dict's pairs by predicate name (an OrderedDict keeps its order):
    ``{k > 0: f, equal(k, 1): g}`` tries ``Equal`` before ``Greater``."""
    with af.Graph().as_default():
        k = af.placeholder(af.int32, [])
        greater, equal = k > 0, af.equal(k, 1)
        assert greater.op.name < "Greater_" and equal.op.name < greater.op.name
        fns = {greater: lambda: af.constant(10), equal: lambda: af.constant(20)}
        by_name = af.case(fns, default=lambda: af.constant(0))
        ordered = af.case(collections.OrderedDict(fns), default=lambda: af.constant(0))
        assert await run([by_name, ordered], {k: 1}) == [20, 10]
        assert await run([by_name, ordered], {k: 2}) == [10, 10]


async def test_case_exclusive_without_default_checks_all_but_the_last_predicate():
    """Without a default, TF1's exclusivity Assert covers the pairs before the last one (the
    last stands in for the default): the last may hold beside an earlier one."""
    with af.Graph().as_default():
        k = af.placeholder(af.int32, [])
        last_overlaps = af.case([(af.equal(k, 0), lambda: af.constant(1)),
                                 (k < 2, lambda: af.constant(2))], exclusive=True)
        assert await run(last_overlaps, {k: 0}) == 1
        assert await run(last_overlaps, {k: 1}) == 2
        earlier_overlap = af.case([(af.equal(k, 0), lambda: af.constant(1)),
                                   (k < 2, lambda: af.constant(2)),
                                   (k > 5, lambda: af.constant(3))], exclusive=True)
        with pytest.raises(errors.InvalidArgumentError, match="exclusive"):
            await run(earlier_overlap, {k: 0})
        with_default = af.case([(af.equal(k, 0), lambda: af.constant(1)),
                                (k < 2, lambda: af.constant(2))],
                               default=lambda: af.constant(3), exclusive=True)
        with pytest.raises(errors.InvalidArgumentError, match="exclusive"):
            await run(with_default, {k: 0})


def test_case_refuses_no_pairs_and_cond_a_dtype_mismatch_as_tf1():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="case 'case': pred_fn_pairs is empty"):
            af.case([], default=lambda: af.constant(1))
        with pytest.raises(ValueError, match="same type: float32, int32"):
            af.cond(af.constant(True), lambda: af.constant(1.0), lambda: af.constant(1))


async def test_while_loop_return_same_structure_swap_memory_and_falsy_loop_vars():
    with af.Graph().as_default():
        a = af.constant([1.0, 2.0])
        kept = af.while_loop(lambda s: af.reduce_sum(s) < 10.0, lambda s: [s * 2.0], [a],
                             return_same_structure=True, swap_memory=True)
        unpacked = af.while_loop(lambda s: af.reduce_sum(s) < 10.0, lambda s: [s * 2.0], [a])
        assert isinstance(kept, list) and len(kept) == 1
        assert isinstance(unpacked, af.Tensor)
        counted = af.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + 1.0), [0, a],
                                maximum_iterations=2, return_same_structure=True)
        assert isinstance(counted, list) and len(counted) == 2
        values = await run([kept[0], unpacked, counted[1]])
        for value, want in zip(values, ([4.0, 8.0], [4.0, 8.0], [3.0, 4.0])):
            np.testing.assert_array_equal(value, want)
        for falsy in (0, [], None):
            with pytest.raises(ValueError, match="'loop_vars' must be provided"):
                af.while_loop(lambda i: i < 3, lambda i: i + 1, falsy)
