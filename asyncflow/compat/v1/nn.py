"""``tf.nn`` of ``asyncflow.compat.v1``: ``af.nn`` with TF1's argument orders.

TF1's ``tf.nn.dropout(x, keep_prob)`` takes the *keep* probability second; ``af.nn.dropout``
follows TF2 (``rate`` second). Read the TF2 way, ``dropout(x, 0.9)`` would keep 10% of the
units, silently; this module's ``dropout`` reads it as TF1 does.
"""
from asyncflow.nn import *  # noqa: F401,F403
from asyncflow.nn import rnn_cell  # noqa: F401
from asyncflow.ops import nn as _nn


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """TF1's ``tf.nn.dropout(x, keep_prob, noise_shape=None, seed=None, name=None, rate=None)``.

    Keeps each element with probability ``keep_prob`` (a float or a scalar tensor, which may
    be fed 1.0 at evaluation) and scales kept ones by ``1 / keep_prob``; ``rate=`` (by
    keyword) is ``1 - keep_prob``. The result has ``x``'s static shape.

    Raises:
        ValueError: for both or neither of keep_prob/rate, or a probability out of range.
    """
    return _nn.dropout(x, rate=rate, keep_prob=keep_prob, noise_shape=noise_shape, seed=seed,
                       name=name)
