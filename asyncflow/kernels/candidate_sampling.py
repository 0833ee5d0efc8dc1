"""Kernels of the candidate samplers and ComputeAccidentalHits (see ops/candidate_sampling.py).

Sampling runs on the host with the node's random generator; a distribution is a pair of
functions (``probability(ids)``, ``draw(rng, n)``). A sampler whose distribution cannot give
``num_sampled`` distinct ids (zero weights) fails with InvalidArgumentError instead of looping.
"""
from __future__ import annotations

import math

import numpy as np

from asyncflow.kernels.arguments import host as _host
from asyncflow.kernels.arguments import invalid as _invalid
from asyncflow.kernels.registry import register_kernel, register_prepare

_MAX_ROUNDS = 10_000


def _sample(ctx, true_classes, probability, draw, support):
    """``(sampled, true_expected, sampled_expected)`` as TF1's RangeSampler computes them."""
    attrs = ctx.attrs
    num_sampled, unique = attrs["num_sampled"], attrs["unique"]
    true_classes = _host(true_classes)
    if true_classes.ndim != 2 or true_classes.shape[1] != attrs["num_true"]:
        raise _invalid(ctx, f"true_classes must be [batch_size, {attrs['num_true']}], got "
                            f"{list(true_classes.shape)}")
    if unique and support < num_sampled:
        raise _invalid(ctx, f"cannot sample {num_sampled} unique ids: only {support} of "
                            f"range_max {attrs['range_max']} have a positive probability")
    rng = ctx.random_generator()
    if not unique:
        sampled, tries = draw(rng, num_sampled), num_sampled
    else:
        picked, seen, tries = [], set(), 0
        for _ in range(_MAX_ROUNDS):
            for value in draw(rng, 2 * (num_sampled - len(picked))).tolist():
                tries += 1
                if value not in seen:
                    seen.add(value)
                    picked.append(value)
                    if len(picked) == num_sampled:
                        break
            if len(picked) == num_sampled:
                break
        sampled = np.asarray(picked, np.int64)

    def expected(ids):
        p = probability(ids)
        if tries == num_sampled:
            return (p * num_sampled).astype(np.float32)
        return (-np.expm1(tries * np.log1p(-p))).astype(np.float32)

    return tuple(ctx.to_device(a) for a in (np.asarray(sampled, np.int64),
                                            expected(true_classes), expected(sampled)))


@register_kernel("UniformCandidateSampler")
def _uniform(ctx, true_classes):
    limit = ctx.attrs["range_max"]
    return _sample(ctx, true_classes, lambda ids: np.full(np.shape(ids), 1.0 / limit),
                   lambda rng, n: rng.integers(0, limit, n, dtype=np.int64), limit)


@register_kernel("LogUniformCandidateSampler")
def _log_uniform(ctx, true_classes):
    limit = ctx.attrs["range_max"]
    log_range = math.log(limit + 1)

    def probability(ids):
        ids = np.asarray(ids, np.float64)
        return (np.log(ids + 2.0) - np.log(ids + 1.0)) / log_range

    def draw(rng, n):
        values = np.exp(rng.random(n) * log_range).astype(np.int64) - 1
        return values % limit
    return _sample(ctx, true_classes, probability, draw, limit)


def _weighted(weights):
    total = float(weights.sum())
    cumulative = np.cumsum(weights)

    def draw(rng, n):
        return np.searchsorted(cumulative, rng.random(n) * total, side="right").astype(np.int64)
    return (lambda ids: weights[np.asarray(ids, np.int64)] / total), draw


@register_kernel("LearnedUnigramCandidateSampler")
def _learned_unigram(ctx, true_classes):
    counts = ctx.prepared  # the node's weights, kept for the life of the plan
    probability, draw = _weighted(counts.copy())
    out = _sample(ctx, true_classes, probability, draw, counts.size)
    np.add.at(counts, _host(true_classes).reshape(-1), 1.0)  # after the draw, as TF1
    return out


@register_prepare("LearnedUnigramCandidateSampler")
def _learned_unigram_state(ctx):
    return np.ones(ctx.attrs["range_max"], np.float64)


@register_kernel("FixedUnigramCandidateSampler")
def _fixed_unigram(ctx, true_classes):
    weights = ctx.prepared
    if weights.size != ctx.attrs["range_max"]:
        raise _invalid(ctx, f"range is {ctx.attrs['range_max']} must be equal to weights "
                            f"size {weights.size} (the ids of shard {ctx.attrs.get('shard', 0)} "
                            f"of {ctx.attrs.get('num_shards', 1)}, reserved ids included)")
    weighted, draw = _weighted(weights)

    def probability(ids):  # an id outside the shard's list has probability 0, as in TF
        ids = np.asarray(ids, np.int64)
        inside = (ids >= 0) & (ids < weights.size)
        return np.where(inside, weighted(np.where(inside, ids, 0)), 0.0)
    return _sample(ctx, true_classes, probability, draw, int(np.count_nonzero(weights)))


@register_prepare("FixedUnigramCandidateSampler")
def _fixed_unigram_weights(ctx):
    attrs = ctx.attrs
    counts = list(attrs["unigrams"])
    if attrs["vocab_file"]:
        with open(ctx.resolve_path(attrs["vocab_file"]), encoding="utf-8") as vocab:
            counts = [float(line.rstrip("\n").split(",")[-1]) for line in vocab if line.strip()]
    num_shards, shard = attrs.get("num_shards", 1), attrs.get("shard", 0)
    # TF1's rule: the reserved ids of this shard, then the entries whose id, counted on from
    # the number of those (not from num_reserved_ids), falls in this shard.
    reserved = len(range(shard, attrs["num_reserved_ids"], num_shards))
    mine = [c for i, c in enumerate(counts, start=reserved) if i % num_shards == shard]
    return np.concatenate([np.zeros(reserved),
                           np.power(np.asarray(mine, np.float64), attrs["distortion"])])


@register_kernel("ComputeAccidentalHits")
def _accidental_hits(ctx, true_classes, sampled):
    true_classes, sampled = _host(true_classes), _host(sampled)
    if true_classes.ndim != 2 or true_classes.shape[1] != ctx.attrs["num_true"]:
        raise _invalid(ctx, f"true_classes must be [batch_size, {ctx.attrs['num_true']}], got "
                            f"{list(true_classes.shape)}")
    # In (row, true class, sample) order, as TF1 lists them.
    rows, positions = np.nonzero(true_classes[:, :, None] == sampled[None, None, :])[0::2]
    weights = np.full(rows.shape, -np.finfo(np.float32).max, np.float32)
    return rows.astype(np.int32), positions.astype(np.int64), weights
