"""A bare same-host call's run on the server (:mod:`transports.http.bare`): the handler's
answer in the connection's cancel scope (:func:`answer`), and the short path of a step's
RunGraph of a prepared plain graph, without a message (:func:`take_step`,
:func:`answer_step`, :func:`step_reply`).

Why the short path
------------------
A trivial remote step's worker turn is ~42 us of Python on the project's machine, of which
the RunGraph's decode (a ``RunGraph`` and its ``TensorEntry`` built from the frame template),
the handler's checks of what every frame of that template repeats (the graph, the fetches,
the feeds' order, dtypes and shapes), its levels (``run_graph_in_scope``, ``_run_plain``)
and the reply's message and encode are ~20 (bench/RESULTS.md, c43py, c44wrk).

How
---
A RunGraph frame that lies whole in what its call's header came with, of a kept frame
template (:func:`transports.frame_templates.step_template`, then ``read_step``: every fixed
stretch, the sums and each id checked as the template's decode checks them) is taken here
when the handler offers ``prepare_run_graph``
(:func:`transports.http.call_scope.step_preparer`, the optional part of
:class:`transports.service.WorkerServiceProtocol`): made once per template and handler from
the template's fixed fields (``template.bound``), it is a *step* (``live()``, ``begin(ids)``,
``run(state, arrays, scope)``, ``run_full(ids, arrays, scope)``, ``fetch_keys``) or None (such
frames are not the handler's short path's: they take the full path, and so do a frame that
differs, a damaged one and the frames of a graph gone since: the decoder and the handler give
each the answer it gets today). :func:`answer_step` then runs the step as :func:`answer` runs
a RunGraph: in the connection's scope with the call's deadline, the step's lowered into it by
the handler, watched for the client leaving, cancelled by the server's close, a cancel
answered as :func:`answer` answers it, an exception as ``error_reply_for`` makes it. The
step's fetched arrays are written into the frame of the last reply of that step
(:meth:`transports.repeat_frames.Prepared.encode_values`), else a ``RunGraphReply`` is built
and encoded as any.

Nothing here knows about asyncflow.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Final

import trio

from transports import frame_templates
from transports.checksum import enabled as checksum_enabled
from transports.http.call_scope import LentScope, only_cancelled, scope_lender
from transports.messages import ErrorReply, Message, RunGraph, RunGraphReply, TensorEntry
from transports.service import Rpc, error_reply_for, reply_for_result
from transports.wire import encode_prepared

__all__ = ["DEADLINE_GRACE_S", "answer", "answer_step", "step_answer", "step_reply",
           "take_step"]

DEADLINE_GRACE_S: Final = 1.0  # the server's deadline trails the client's (see answer)
_CANCELLED: Final = object()


async def answer(server: Any, conn: Any, rpc: Rpc, message: Message | None, timeout: float,
                 one_way: int = 0) -> Message:
    """The handler's answer (a reply or an ErrorReply) to a call of ``rpc``, in the
    connection's cancel scope (``conn.calls``): its deadline for this call's window, cancelled
    when the client leaves or the server closes (the scope is then spent:
    ``BareService._serve_calls``); an enclosing scope's cancel goes on up.

    The deadline is the call's timeout plus :data:`DEADLINE_GRACE_S`: the client gives up at
    the timeout itself (and closes the connection, which cancels the handler), so its verdict
    is never raced by ours; ours ends a handler whose client cannot say so."""
    fn = getattr(server._handler, rpc.method)
    calls, deadline, fd, watched = _begun(server, conn, timeout, one_way)
    result: Any = _CANCELLED
    lent = None
    try:
        try:
            in_scope = rpc.method == "run_graph" and scope_lender(server._handler)
            if in_scope:  # the step in this call's scope (WorkerServiceProtocol)
                lent = LentScope(calls)
                result = reply_for_result(rpc, await in_scope(message, lent))
            else:
                result = reply_for_result(rpc, await (fn() if message is None
                                                       else fn(message)))
        except Exception as exc:  # noqa: BLE001 -- the client gets an ErrorReply
            result = error_reply_for(exc)
    except BaseException as exc:
        if not (calls.cancel_called and only_cancelled(exc)):
            raise  # (an enclosing scope's cancel, or not a cancel at all)
        result = _CANCELLED  # (ours: an enclosing scope's is seen at the next checkpoint)
    finally:
        _ended(server, calls, lent, watched, fd)
    if result is _CANCELLED:
        return _cancelled(server, rpc.method, timeout, deadline)
    return result


def _begun(server: Any, conn: Any, timeout: float, one_way: int) -> tuple:
    """A call's run begun in the connection's scope (``conn.calls``): its deadline set, the
    scope noted as the server's, watched for the client leaving (not a late call, its reading
    shut; nor a one-way one, whose client may go), cancelled if the server is closing.
    Returns ``(calls, deadline, fd, watched)`` for :func:`_ended` and :func:`_cancelled`."""
    calls = conn.calls
    deadline = trio.current_time() + timeout + DEADLINE_GRACE_S  # (inf: none)
    if deadline < math.inf:
        calls.deadline = deadline
    server._calls.add(calls)
    fd = conn.stream.socket.fileno()
    watched = not (conn.pending or conn.closing or one_way)
    if watched:
        server._monitor.call_started(fd, calls)
    if server._closing:
        calls.cancel()
    return calls, deadline, fd, watched


def _ended(server: Any, calls: trio.CancelScope, lent: LentScope | None, watched: bool,
           fd: int) -> None:
    if lent is not None:
        lent.ended()  # (a step's state may keep it: cancelling it later does nothing)
    if watched:
        server._monitor.call_ended(fd)
    server._calls.discard(calls)
    if calls.deadline != math.inf:  # (ours, or lowered by a lent RunGraph's step)
        calls.deadline = math.inf


def _cancelled(server: Any, method: str, timeout: float, deadline: float) -> ErrorReply:
    return ErrorReply(*(
        ("UNAVAILABLE", "server is shutting down") if server._closing else
        ("DEADLINE_EXCEEDED", f"{method}: no answer within {timeout} s")
        if trio.current_time() >= deadline else ("CANCELLED", "request cancelled")))


class _Bound:
    """What a handler made of one frame template (``template.bound``). The template is the
    process's (until its next ``forget_all``): the handler is held weakly, and a handler's
    step must hold it weakly too (``worker_step.PlainStep``), so that neither keeps a stopped
    server's handler alive."""

    __slots__ = ("handler", "step", "reply")

    def __init__(self, handler: Any, step: Any) -> None:
        self.handler, self.step = weakref.ref(handler), step
        self.reply = None  # the Prepared of its replies' signature, once one was encoded


def take_step(server: Any, conn: Any, length: int, prepare: Any) -> tuple | None:
    """``(bound, ids, arrays)`` of the RunGraph frame of ``length`` bytes at the start of
    ``conn.pending`` (taken from it) where the short path takes it (see the module), else
    None, ``conn.pending`` as it was. ``prepare``: the handler's ``prepare_run_graph``. A
    frame of a template that the handler has no live step for is left to the full path
    unread (its template matched, nothing more: ``frame_templates.step_template``)."""
    pending = conn.pending
    data = pending if len(pending) == length else pending[:length]
    template = frame_templates.step_template(data, server._limits)
    if template is None:
        return None
    bound = template.bound
    if bound is None or bound.handler() is not server._handler:
        cls, fields, names, tensors = frame_templates.describe(template)
        try:  # (another message under RunGraph's index: the full path's error)
            step = prepare(fields, names, tensors) if cls is RunGraph else None
        except Exception:  # noqa: BLE001 -- (a handler's fault: its frames take the full path)
            step = None
        bound = template.bound = _Bound(server._handler, step)
    step = bound.step
    if step is None or not step.live():
        return None
    found = frame_templates.read_step(template, data)
    if found is None:
        return None
    conn.pending = pending[length:] if len(pending) != length else b""
    server._count_received(length)
    return bound, *found


async def answer_step(server: Any, conn: Any, taken: tuple, timeout: float) -> Any:
    """:func:`answer` of a RunGraph that :func:`take_step` took: the step's fetched arrays
    (a list), or a RunGraphReply (the full path's, where the handler's step sent it there),
    or an ErrorReply."""
    bound, ids, arrays = taken
    step = bound.step
    calls, deadline, fd, watched = _begun(server, conn, timeout, 0)
    result: Any = _CANCELLED
    lent = LentScope(calls)
    try:
        try:
            state = step.begin(ids)
            result = await (step.run(state, arrays, lent) if state is not None
                            else step.run_full(ids, arrays, lent))
        except Exception as exc:  # noqa: BLE001 -- the client gets an ErrorReply
            result = error_reply_for(exc)
    except BaseException as exc:
        if not (calls.cancel_called and only_cancelled(exc)):
            raise
        result = _CANCELLED
    finally:
        _ended(server, calls, lent, watched, fd)
    if result is _CANCELLED:
        return _cancelled(server, "run_graph", timeout, deadline)
    return result


def step_reply(conn: Any, taken: tuple, values: list, limits: Any) -> list:
    """The buffers of the reply of :func:`answer_step`'s ``values``: written into the frame of
    the step's last reply where they are of its signature, else a RunGraphReply encoded (its
    signature kept for the next). Raises what ``encode`` raises (an unsendable reply)."""
    bound = taken[0]
    prepared = bound.reply
    if prepared is not None:
        buffers = prepared.encode_values(values, checksum_enabled())
        if buffers is not None:
            return buffers
    reply = RunGraphReply([TensorEntry(key, value)
                           for key, value in zip(bound.step.fetch_keys, values)])
    buffers, bound.reply = encode_prepared(None, reply, limits, defer_checksums=True)
    return buffers


def step_answer(taken: tuple, values: list, room: int) -> bytearray | None:
    """The frame of :func:`answer_step`'s ``values`` after ``room`` bytes for the caller's
    answer head, in one buffer (written with one ``write``, no ``frame_size``, no pieces:
    ~1 us of a short step's answer, bench/RESULTS.md, c47wrk), where they are of the
    signature of the step's last reply; else None (:func:`step_reply` encodes them)."""
    prepared = taken[0].reply
    if prepared is None:
        return None
    return prepared.values_frame(values, checksum_enabled(), room)
