"""``af.summary``: summary ops and the FileWriter that TensorBoard reads (TF1 ``tf.summary``).

``scalar``/``histogram`` add ops whose output is a serialized ``Summary`` protobuf (a string
scalar) and put it in ``GraphKeys.SUMMARIES``; ``merge``/``merge_all`` combine them into one
string; ``FileWriter.add_summary`` writes the fetched bytes to an event file. As in TF1 a
summary's tag is its name under the enclosing name scopes (``"layer1/loss"``), optionally
prefixed by a ``family``.
"""
from __future__ import annotations

import re

from asyncflow.graph.graph import GraphKeys, get_default_graph
from asyncflow.ops import summary_ops as _ops
from asyncflow.ops.construct import as_tensor, graph_of
from asyncflow.summary.writer import FileWriter  # noqa: F401

_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w.]")


def _clean_tag(name):
    return None if name is None else _INVALID_TAG_CHARACTERS.sub("_", name).lstrip("/")


def _summary(builder, name, value, collections, family):
    tensor = as_tensor(value)
    graph = graph_of([tensor])
    name, family = _clean_tag(name), _clean_tag(family)
    base = name if family is None else f"{family}/{name}"
    with graph.as_default(), graph.name_scope(base) as scope:
        tag = scope.rstrip("/") if family is None else f"{family}/{scope.rstrip('/')}"
        out = builder(tag, tensor, name=scope)
    for key in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        graph.add_to_collection(key, out)
    return out


def scalar(name, tensor, collections=None, family=None):
    """A scalar summary of a 0-d numeric tensor.

    Args:
        name: the summary's name (its tag, under the current name scope).
        tensor: a scalar tensor (any numeric or bool dtype).
        collections: collection keys to add the summary to (default ``[SUMMARIES]``).
        family: an optional tag prefix (a TensorBoard tab group).

    Returns:
        A string scalar tensor holding a serialized Summary.

    Raises:
        ValueError: if ``tensor`` is not a scalar.
    """
    return _summary(_ops.scalar_summary, name, tensor, collections, family)


def histogram(name, values, collections=None, family=None):
    """A histogram summary of any numeric tensor (TF's default exponential buckets).

    Running it fails with InvalidArgumentError when ``values`` holds NaN or Inf.

    Returns:
        A string scalar tensor holding a serialized Summary.
    """
    return _summary(_ops.histogram_summary, name, values, collections, family)


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """An image summary of a ``[batch, height, width, channels]`` tensor (TF1 ``tf.summary.image``).

    Up to ``max_outputs`` images are PNG-encoded, tagged ``<tag>/image/<k>`` (``<tag>/image``
    when ``max_outputs`` is 1). uint8 images are written as they are; floats are scaled as
    TF1 does, each image on its own (values >= 0 so the largest is 255; with negatives,
    0 becomes 128 and the largest absolute value 127 away), truncated, a pixel with a
    non-finite channel painted red.

    Returns:
        A string scalar tensor holding a serialized Summary.
    """
    def build(tag, images, name=None):
        return _ops.image_summary(tag, images, max_outputs, name=name)
    return _summary(build, name, tensor, collections, family)


def merge(inputs, collections=None, name=None):
    """One Summary holding the values of every input summary (duplicate tags fail the run)."""
    inputs = [as_tensor(t) for t in inputs]
    graph = graph_of(inputs)
    with graph.as_default():
        out = _ops.merge_summary(inputs, name=name)
    for key in collections or ():
        graph.add_to_collection(key, out)
    return out


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    """Merge every summary in collection ``key`` of the default graph; None if there are none."""
    summaries = get_default_graph().get_collection(key, scope)
    if not summaries:
        return None
    return merge(summaries, name=name)


__all__ = ["FileWriter", "histogram", "image", "merge", "merge_all", "scalar"]
