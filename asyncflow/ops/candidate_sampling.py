"""Candidate sampling: TF1's four samplers and ``compute_accidental_hits``.

Theory of operation: a sampler draws ``num_sampled`` class ids from ``[0, range_max)`` for a
sampled loss (``nce_loss``, ``sampled_softmax_loss`` in ops/sampled_losses.py) and reports the
*expected count* of every true and sampled class: how often it would appear among the samples
(``p * num_sampled``; with ``unique=True``, sampling repeats until ``num_sampled`` distinct ids
came up after ``tries`` draws, and the count is ``1 - (1 - p) ** tries``, computed as
``-expm1(tries * log1p(-p))``, TF1's ``ExpectedCountHelper``). The distributions:

- ``uniform``: ``p = 1 / range_max``;
- ``log_uniform`` (Zipfian, for ids sorted by decreasing frequency):
  ``p(k) = log((k + 2) / (k + 1)) / log(range_max + 1)``;
- ``learned_unigram``: weights start at 1 and each true class seen adds 1 after the draw (the
  state lives in the op's kernel for the life of the plan, like TF1's);
- ``fixed_unigram``: weights from a list or a vocabulary file (``word,count`` lines), raised
  to ``distortion``, after ``num_reserved_ids`` ids of weight 0. With ``num_shards`` > 1 the
  sampler keeps only the ids of its ``shard`` (TF1's rule, kept exactly: the reserved ids
  ``i`` with ``i % num_shards == shard``, then, counting on from the number of those, the
  entries whose running id falls in the shard) and ``range_max`` is the shard's size; the
  sampled ids index the shard's own list.

The samplers are stateful random ops (``seed`` as for every random op) and have no gradient.
Kernels live in ``asyncflow/kernels/candidate_sampling.py``.
"""
from __future__ import annotations

from asyncflow import dtypes
from asyncflow.graph import not_differentiable, register_op
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.construct import as_tensor, make_op, seeds
from asyncflow.ops.math import cast

SAMPLERS = ("UniformCandidateSampler", "LogUniformCandidateSampler",
            "LearnedUnigramCandidateSampler", "FixedUnigramCandidateSampler")


def _infer_sampler(op):
    true_classes = op.inputs[0]
    if true_classes.dtype is not dtypes.int64:
        raise TypeError(f"true_classes must be int64, got {true_classes.dtype.name}")
    num_true, num_sampled = op.get_attr("num_true"), op.get_attr("num_sampled")
    if true_classes.shape.ndims not in (None, 2) or \
            not true_classes.shape.is_compatible_with(TensorShape([None, num_true])):
        raise ValueError(f"true_classes must be [batch_size, num_true={num_true}], got "
                         f"{true_classes.shape}")
    batch = true_classes.shape[0] if true_classes.shape.ndims == 2 else None
    return [(dtypes.int64, TensorShape([num_sampled])),
            (dtypes.float32, TensorShape([batch, num_true])),
            (dtypes.float32, TensorShape([num_sampled]))]


for _type in SAMPLERS:
    register_op(_type, infer=_infer_sampler, stateful=True)


def _infer_accidental_hits(op):
    return [(dtypes.int32, TensorShape([None])), (dtypes.int64, TensorShape([None])),
            (dtypes.float32, TensorShape([None]))]


register_op("ComputeAccidentalHits", infer=_infer_accidental_hits)
not_differentiable(*SAMPLERS, "ComputeAccidentalHits")


def _sampler(op_type, true_classes, num_true, num_sampled, unique, range_max, seed, name,
             default_name, **attrs):
    num_true, num_sampled, range_max = int(num_true), int(num_sampled), int(range_max)
    if num_true < 1 or num_sampled < 1 or range_max < 1:
        raise ValueError(f"{op_type}: num_true ({num_true}), num_sampled ({num_sampled}) and "
                         f"range_max ({range_max}) must be positive")
    if unique and num_sampled > range_max:
        raise ValueError(f"{op_type}: cannot sample {num_sampled} unique ids from a range of "
                         f"{range_max}")
    true_classes = cast(as_tensor(true_classes), dtypes.int64)
    seed1, seed2 = seeds(seed)
    op = make_op(op_type, (true_classes,),
                 {"num_true": num_true, "num_sampled": num_sampled, "unique": bool(unique),
                  "range_max": range_max, "seed": seed1, "seed2": seed2, **attrs},
                 name, default_name)
    return tuple(op.outputs)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                              seed=None, name=None):
    """Sample ids uniformly from ``[0, range_max)``.

    Returns:
        ``(sampled_candidates int64 [num_sampled], true_expected_count float32
        [batch, num_true], sampled_expected_count float32 [num_sampled])``.
    """
    return _sampler("UniformCandidateSampler", true_classes, num_true, num_sampled, unique,
                    range_max, seed, name, "UniformCandidateSampler")


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                  seed=None, name=None):
    """Sample ids with the Zipfian ``p(k) = log((k+2)/(k+1)) / log(range_max+1)``."""
    return _sampler("LogUniformCandidateSampler", true_classes, num_true, num_sampled, unique,
                    range_max, seed, name, "LogUniformCandidateSampler")


def learned_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                      seed=None, name=None):
    """Sample ids by the counts of the true classes seen so far (each starting at 1)."""
    return _sampler("LearnedUnigramCandidateSampler", true_classes, num_true, num_sampled,
                    unique, range_max, seed, name, "LearnedUnigramCandidateSampler")


def fixed_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                    vocab_file="", distortion=1.0, num_reserved_ids=0,
                                    num_shards=1, shard=0, unigrams=(), seed=None, name=None):
    """Sample ids by fixed weights: ``unigrams`` or the counts of a ``word,count`` file.

    ``num_shards``/``shard`` keep one shard of the ids (TF1's rule, see the module
    docstring); ``range_max`` is then the number of ids of that shard.

    Raises:
        ValueError: without exactly one of ``vocab_file`` and ``unigrams``, for a shard
            outside ``[0, num_shards)``, or when ``range_max`` is not the number of ids
            ``unigrams`` gives this shard.
    """
    if bool(vocab_file) == bool(len(unigrams)):
        raise ValueError("fixed_unigram_candidate_sampler: give exactly one of vocab_file "
                         "and unigrams")
    num_shards, shard = int(num_shards), int(shard)
    if num_shards < 1 or not 0 <= shard < num_shards:
        raise ValueError(f"fixed_unigram_candidate_sampler: shard {shard} is not one of "
                         f"num_shards {num_shards} shards")
    size = _shard_size(int(num_reserved_ids), len(unigrams), num_shards, shard)
    if unigrams and size != int(range_max):
        raise ValueError(f"fixed_unigram_candidate_sampler: range is {range_max} must be "
                         f"equal to weights size {size} (num_reserved_ids "
                         f"{num_reserved_ids}, {len(unigrams)} unigrams, shard {shard} of "
                         f"{num_shards})")
    return _sampler("FixedUnigramCandidateSampler", true_classes, num_true, num_sampled,
                    unique, range_max, seed, name, "FixedUnigramCandidateSampler",
                    vocab_file=str(vocab_file), distortion=float(distortion),
                    num_reserved_ids=int(num_reserved_ids), num_shards=num_shards,
                    shard=shard, unigrams=[float(u) for u in unigrams])


def _shard_size(num_reserved_ids, count, num_shards, shard):
    """How many of ``num_reserved_ids`` + ``count`` ids shard ``shard`` keeps (TF1's rule:
    the entries are numbered on from the number of reserved ids the shard kept)."""
    reserved = len(range(shard, num_reserved_ids, num_shards))
    return reserved + sum(1 for i in range(reserved, reserved + count) if i % num_shards == shard)


def compute_accidental_hits(true_classes, sampled_candidates, num_true, seed=None, name=None):
    """Where a sampled id equals one of a row's true classes.

    Returns:
        ``(indices int32, ids int64, weights float32)``: the row, the position among the
        samples, and ``-FLT_MAX`` for each hit (added to a logit, it removes the class).
    """
    del seed
    true_classes = cast(as_tensor(true_classes), dtypes.int64)
    sampled_candidates = cast(as_tensor(sampled_candidates), dtypes.int64)
    op = make_op("ComputeAccidentalHits", (true_classes, sampled_candidates),
                 {"num_true": int(num_true)}, name, "ComputeAccidentalHits")
    return tuple(op.outputs)
