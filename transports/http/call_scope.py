"""The bare same-host server's cancel scope of a call (:mod:`transports.http.bare`): what it
lends a RunGraph handler, and which handler it lends it to.

A trio cancel scope entered and left costs ~10 us of a worker's CPU, more than the rest of a
small call's bookkeeping together, so the bare server runs a connection's calls in one scope
(``BareService._serve_calls``), entered again only after a call was cancelled (a cancelled
scope is spent). Only a call's own window can cancel it: its deadline is set for the window
and cleared after, the disconnect monitor and the server's close see it only then, and a
RunGraph handler (``run_graph_in_scope``, :class:`transports.service.WorkerServiceProtocol`)
gets a :class:`LentScope`, which acts on the scope only while its call runs (a step's state
keeps what it was lent: an AbortStep of that step, later, must not cancel another call).

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
from typing import Any

import trio

__all__ = ["LentScope", "only_cancelled", "scope_lender", "step_preparer"]


class LentScope:
    """A RunGraph's share of its connection's cancel scope: while the call runs, its
    ``deadline`` (lowered to the step's) and ``cancel`` (AbortStep, Reset) are the scope's;
    once the call ended they act on nothing."""

    __slots__ = ("_scope",)

    def __init__(self, scope: trio.CancelScope) -> None:
        self._scope: trio.CancelScope | None = scope

    @property
    def deadline(self) -> float:
        return math.inf if self._scope is None else self._scope.deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        if self._scope is not None:
            self._scope.deadline = value

    @property
    def cancel_called(self) -> bool:
        return self._scope is not None and self._scope.cancel_called

    def cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def ended(self) -> None:
        """The call is over: from now on nothing here acts on the connection's scope."""
        self._scope = None


def only_cancelled(exc: BaseException) -> bool:
    """``exc`` is trio's Cancelled, or a group of nothing else (a handler's nursery's)."""
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, BaseExceptionGroup) and all(
        only_cancelled(one) for one in exc.exceptions)


_LENDS: dict = {}  # handler class -> whether its run_graph_in_scope is its RunGraph


def scope_lender(handler: Any) -> Any:
    """The handler's ``run_graph_in_scope`` where it is its RunGraph, else None: defined no
    less derived than its ``run_graph`` (a subclass or an instance that overrides
    ``run_graph`` alone is served by that override, as over HTTP, never bypassed)."""
    cls = type(handler)
    lends = _LENDS.get(cls)
    if lends is None:
        lends = _LENDS[cls] = next((name == "run_graph_in_scope" for klass in cls.__mro__
                                    for name in ("run_graph_in_scope", "run_graph")
                                    if name in vars(klass)), False)
    own = getattr(handler, "__dict__", None)
    if own and ("run_graph" in own or "run_graph_in_scope" in own):
        lends = "run_graph_in_scope" in own
    return getattr(handler, "run_graph_in_scope", None) if lends else None


_PREPARES: dict = {}  # handler class -> whether its prepare_run_graph is its RunGraph's


def step_preparer(handler: Any) -> Any:
    """The handler's ``prepare_run_graph`` where its steps may take the short path
    (``transports/http/bare_calls.py``), else None: its RunGraph is its
    ``run_graph_in_scope`` (:func:`scope_lender`) and the first class of its MRO that defines
    ``run_graph`` or ``run_graph_in_scope`` defines ``prepare_run_graph`` too (a subclass that
    overrides either alone is served by its override, never bypassed), as an instance that
    sets either does."""
    if scope_lender(handler) is None:
        return None
    cls = type(handler)
    prepares = _PREPARES.get(cls)
    if prepares is None:
        prepares = _PREPARES[cls] = next((
            "prepare_run_graph" in vars(klass) for klass in cls.__mro__
            if "run_graph" in vars(klass) or "run_graph_in_scope" in vars(klass)), False)
    own = getattr(handler, "__dict__", None)
    if own and ("run_graph" in own or "run_graph_in_scope" in own):
        prepares = "prepare_run_graph" in own
    return getattr(handler, "prepare_run_graph", None) if prepares else None
