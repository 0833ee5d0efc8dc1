"""``af.random``: TF1's ``tf.random`` namespace.

Builders live in their op families (ops/sources.py, ops/data_flow.py, ops/candidate_sampling.py);
this module only gathers them under TF1's ``tf.random`` names. Random ops draw other numbers
than TF's for the same seeds, as every asyncflow random op does.
"""
from asyncflow.graph import get_default_graph
from asyncflow.ops.candidate_sampling import (  # noqa: F401
    fixed_unigram_candidate_sampler, learned_unigram_candidate_sampler,
    log_uniform_candidate_sampler, uniform_candidate_sampler,
)
from asyncflow.ops.data_flow import random_shuffle as shuffle  # noqa: F401
from asyncflow.ops.sources import (  # noqa: F401
    categorical, multinomial, random_normal as normal, random_uniform as uniform,
    truncated_normal,
)


def set_random_seed(seed):
    """TF1's ``tf.random.set_random_seed``: the default graph's seed (``tf.set_random_seed``)."""
    get_default_graph().seed = seed
