"""A graph's RunGraph as a caller sends it step after step: everything fixed but the ids and
the feeds' bytes.

A master sends one registered graph the same RunGraph every step but for its ``step_id``, its
``request_id`` and its feeds' values. :class:`RunGraphStep` holds the fixed fields once (the
handle, the feed keys, the fetch keys, the run's timeout and trace flag); a channel that keeps
prepared frames (``transports.http.client``) builds a step's frame from the
:class:`transports.repeat_frames.Prepared` it learnt from this signature's last full encode,
filling in only the ids and the feeds' bytes (:meth:`Prepared.encode_step`): no RunGraph nor
TensorEntry is made and no field is compared again. A feed of another dtype or shape (or not a
C-contiguous array) is never sent in that frame: the step's RunGraph is built and encoded in
full, and its own signature kept for the next steps. A channel without prepared frames sends
:meth:`RunGraphStep.message`'s RunGraph (``Channel.run_graph_step``).

Nothing here knows about asyncflow, trio or HTTP.
"""

from __future__ import annotations

from typing import Any

from transports.messages import RunGraph, TensorEntry

__all__ = ["RunGraphStep", "StepCall"]


class RunGraphStep:
    """The fixed fields of a graph's RunGraphs (one per handle, feed and fetch keys, timeout
    and trace flag); ``prepared``: the channel's prepared frame of them (None until the
    first full encode; the channel keeps it)."""

    __slots__ = ("graph_handle", "feed_keys", "fetch_keys", "timeout_ms", "trace", "prepared")

    def __init__(self, graph_handle: str, feed_keys: tuple, fetch_keys: tuple,
                 timeout_ms: int | None = None, trace: bool = False) -> None:
        self.graph_handle = graph_handle
        self.feed_keys = tuple(feed_keys)
        self.fetch_keys = tuple(fetch_keys)
        self.timeout_ms = timeout_ms
        self.trace = trace
        self.prepared: Any = None

    def fits(self, graph_handle: str, timeout_ms: int | None, trace: bool) -> bool:
        """Whether this is the signature of a RunGraph of ``graph_handle`` (the same object:
        a handle registered again makes a new one) with that timeout and trace flag."""
        return (graph_handle is self.graph_handle and timeout_ms == self.timeout_ms
                and trace is self.trace)

    def message(self, step_id: int, request_id: int, values: list) -> RunGraph:
        """The step's RunGraph, as a full encode takes it."""
        return RunGraph(self.graph_handle, step_id,
                        [TensorEntry(key, value) for key, value in zip(self.feed_keys, values)],
                        list(self.fetch_keys), timeout_ms=self.timeout_ms, trace=self.trace,
                        request_id=request_id)


class StepCall:
    """One step's RunGraph call: a :class:`RunGraphStep`, the step's ids and feed values."""

    __slots__ = ("step", "step_id", "request_id", "values")

    def __init__(self, step: RunGraphStep, step_id: int, request_id: int, values: list) -> None:
        self.step, self.step_id, self.request_id, self.values = step, step_id, request_id, values

    def message(self) -> RunGraph:
        return self.step.message(self.step_id, self.request_id, self.values)
