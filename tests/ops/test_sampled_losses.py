"""Candidate samplers and sampled losses (nce_loss, sampled_softmax_loss) against TF1.

The random draws of the two libraries differ, so the losses are compared with the samples
given (``sampled_values``), the samplers by their expected counts (deterministic when
``unique=False``) and by the frequencies of many draws.
"""
import inspect

import numpy as np
import pytest

import asyncflow as af
from tests.tf1_reference import tf1_run

RNG = np.random.default_rng(7)
WEIGHTS = RNG.standard_normal((12, 5)).astype(np.float32)
BIASES = RNG.standard_normal(12).astype(np.float32)
INPUTS = RNG.standard_normal((4, 5)).astype(np.float32)
LABELS1 = np.array([[1], [3], [7], [3]], np.int64)
LABELS2 = np.array([[1, 2], [3, 9], [7, 0], [3, 3]], np.int64)
SAMPLED = np.array([3, 0, 11, 5, 9], np.int64)
TRUE_EXPECTED2 = np.full((4, 2), 0.3, np.float32)
SAMPLED_EXPECTED = np.array([0.5, 0.9, 0.1, 0.2, 0.4], np.float32)


def _losses(tf, weights, biases, inputs, labels1, labels2, sampled, true2, sampled_exp):
    w = tf.Variable(weights)
    b = tf.Variable(biases)
    x = tf.constant(inputs)
    out = []
    for labels in (labels1, labels2):
        num_true = labels.shape[1]
        values = (tf.constant(sampled), tf.constant(true2[:, :num_true]),
                  tf.constant(sampled_exp))
        for remove in (False, True):
            for loss_fn in (tf.nn.nce_loss, tf.nn.sampled_softmax_loss):
                loss = loss_fn(w, b, tf.constant(labels), x, num_sampled=5, num_classes=12,
                               num_true=num_true, sampled_values=values,
                               remove_accidental_hits=remove)
                grads = tf.gradients(tf.reduce_sum(loss * tf.constant([1.0, 2.0, 3.0, 4.0])),
                                     [w, b, x])
                out += [loss] + [tf.convert_to_tensor(g) for g in grads]
    hits = tf.nn.compute_accidental_hits(tf.constant(labels2), tf.constant(sampled), 2)
    return out + list(hits)


def _expected_counts(tf, labels):
    """Expected counts of non-unique draws: a function of the ids only."""
    true_classes = tf.constant(labels)
    samplers = [tf.nn.uniform_candidate_sampler(true_classes, 2, 6, False, 12, seed=3),
                tf.nn.log_uniform_candidate_sampler(true_classes, 2, 6, False, 12, seed=3),
                tf.nn.learned_unigram_candidate_sampler(true_classes, 2, 6, False, 12, seed=3),
                tf.nn.fixed_unigram_candidate_sampler(
                    true_classes, 2, 6, False, 12, unigrams=list(range(1, 11)),
                    num_reserved_ids=2, distortion=0.75, seed=3)]
    return [s[1] for s in samplers]


async def test_sampled_losses_and_gradients_match_tf1(tmp_path):
    args = (WEIGHTS, BIASES, INPUTS, LABELS1, LABELS2, SAMPLED, TRUE_EXPECTED2, SAMPLED_EXPECTED)
    with af.Graph().as_default():
        fetches = _losses(af, *args)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            ours = await sess.run(fetches)
    theirs = tf1_run(inspect.getsource(_losses) + """
fetches = _losses(tf, inputs["w"], inputs["b"], inputs["x"], inputs["l1"], inputs["l2"],
                  inputs["s"], inputs["t"], inputs["e"])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["values"] = sess.run(fetches)
""", tmp_path, w=WEIGHTS, b=BIASES, x=INPUTS, l1=LABELS1, l2=LABELS2, s=SAMPLED,
                     t=TRUE_EXPECTED2, e=SAMPLED_EXPECTED)
    assert len(ours) == len(theirs["values"])
    for index, (mine, reference) in enumerate(zip(ours, theirs["values"])):
        np.testing.assert_allclose(mine, reference, rtol=2e-5, atol=2e-5, err_msg=str(index))


async def test_expected_counts_match_tf1(tmp_path):
    labels = np.array([[0, 1], [5, 11], [2, 2]], np.int64)
    with af.Graph().as_default():
        fetches = _expected_counts(af, labels)
        async with af.Session() as sess:
            ours = await sess.run(fetches)
    theirs = tf1_run(inspect.getsource(_expected_counts) + """
fetches = _expected_counts(tf, inputs["labels"])
with tf.Session() as sess:
    outputs["counts"] = sess.run(fetches)
""", tmp_path, labels=labels)
    for index, (mine, reference) in enumerate(zip(ours, theirs["counts"])):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, err_msg=str(index))


async def test_draws_follow_their_distributions_and_unique_draws_are_distinct():
    with af.Graph().as_default():
        labels = af.constant([[0]], af.int64)
        zipf = af.nn.log_uniform_candidate_sampler(labels, 1, 1, False, 50, seed=11)
        unique = af.nn.log_uniform_candidate_sampler(labels, 1, 40, True, 50, seed=12)
        fixed = af.nn.fixed_unigram_candidate_sampler(labels, 1, 1, False, 4,
                                                      unigrams=[1.0, 0.0, 3.0, 4.0], seed=13)
        learned = af.nn.learned_unigram_candidate_sampler(af.constant([[2]], af.int64), 1, 1,
                                                          False, 4, seed=14)
        async with af.Session() as sess:
            draws = [await sess.run([zipf[0], fixed[0]]) for _ in range(4000)]
            sampled, true_count, sampled_count = await sess.run(unique)
            learned_draws = [int((await sess.run(learned[0]))[0]) for _ in range(2000)]
    zipf_ids = np.array([d[0][0] for d in draws])
    expected = (np.log(np.arange(50) + 2.0) - np.log(np.arange(50) + 1.0)) / np.log(51.0)
    np.testing.assert_allclose(np.bincount(zipf_ids, minlength=50)[:5] / 4000, expected[:5],
                               atol=0.03)
    fixed_ids = np.bincount([d[1][0] for d in draws], minlength=4) / 4000
    np.testing.assert_allclose(fixed_ids, [0.125, 0.0, 0.375, 0.5], atol=0.03)
    assert len(set(sampled.tolist())) == 40 and sampled.min() >= 0 and sampled.max() < 50
    assert np.all((sampled_count > 0) & (sampled_count <= 1)) and true_count.shape == (1, 1)
    # Class 2 is seen every step: it soon dominates the learned distribution.
    assert np.mean(np.array(learned_draws[-500:]) == 2) > 0.9


async def test_sampler_arguments_and_impossible_draws_fail_clearly():
    with af.Graph().as_default():
        labels = af.constant([[0]], af.int64)
        with pytest.raises(ValueError, match="cannot sample 6 unique ids from a range of 5"):
            af.nn.uniform_candidate_sampler(labels, 1, 6, True, 5)
        with pytest.raises(ValueError, match="exactly one of vocab_file and unigrams"):
            af.nn.fixed_unigram_candidate_sampler(labels, 1, 1, True, 3)
        sparse = af.nn.fixed_unigram_candidate_sampler(labels, 1, 2, True, 3,
                                                       unigrams=[1.0, 0.0, 0.0], name="few")
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match="few.*cannot sample 2 unique ids: only 1 of range_max 3"):
                await sess.run(sparse)


def _sharded_counts(tf, vocab_file):
    """Each shard of 3 of a fixed unigram sampler over 2 reserved ids and 10 unigrams (and
    of 2 over a vocabulary file): its expected counts for every id it holds."""
    out = []
    for num_shards, shard, size, source in [(3, 0, 4, "u"), (3, 1, 5, "u"), (3, 2, 3, "u"),
                                            (2, 1, 6, "f")]:
        true_classes = tf.constant(np.arange(size, dtype=np.int64).reshape(size, 1))
        kwargs = dict(vocab_file=vocab_file) if source == "f" else \
            dict(unigrams=[float(u) for u in range(1, 11)])
        sampler = tf.nn.fixed_unigram_candidate_sampler(
            true_classes, 1, 3, False, size, num_reserved_ids=2, distortion=0.5,
            num_shards=num_shards, shard=shard, seed=5, **kwargs)
        out.append(sampler[1])
    return out


async def test_fixed_unigram_shards_match_tf1(tmp_path):
    vocab = tmp_path / "vocab.csv"
    vocab.write_text("".join(f"w{i},{i * i + 1}\n" for i in range(10)))
    with af.Graph().as_default():
        fetches = _sharded_counts(af, str(vocab))
        async with af.Session() as sess:
            ours = await sess.run(fetches)
            draws = np.concatenate([(await sess.run(
                af.get_default_graph().get_operations()[-1].outputs[0])) for _ in range(50)])
    theirs = tf1_run(inspect.getsource(_sharded_counts) + f"""
with tf.Session() as sess:
    outputs["counts"] = sess.run(_sharded_counts(tf, {str(vocab)!r}))
""", tmp_path)
    assert len(ours) == len(theirs["counts"]) == 4
    for index, (mine, reference) in enumerate(zip(ours, theirs["counts"])):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, err_msg=str(index))
    assert draws.min() >= 0 and draws.max() < 6  # ids of the shard's own list


def test_fixed_unigram_shard_arguments_fail_clearly():
    with af.Graph().as_default():
        labels = af.constant([[0]], af.int64)
        with pytest.raises(ValueError, match="shard 3 is not one of num_shards 3 shards"):
            af.nn.fixed_unigram_candidate_sampler(labels, 1, 1, False, 4, unigrams=[1.0] * 10,
                                                  num_shards=3, shard=3)
        with pytest.raises(ValueError, match="range is 12 must be equal to weights size 4"):
            af.nn.fixed_unigram_candidate_sampler(labels, 1, 1, False, 12,
                                                  unigrams=[1.0] * 10, num_reserved_ids=2,
                                                  num_shards=3, shard=0)
