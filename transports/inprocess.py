"""The worker protocol without sockets: a conformance twin of the HTTP transport.

Theory of operation
-------------------
:class:`InProcessChannel` calls the handler directly, in the caller's trio task, so a cancelled or
timed-out call cancels the handler exactly as an HTTP client disconnect would, and tests can use
``autojump_clock``. Everything else behaves as over HTTP: the request and the reply each pass
through :func:`~transports.wire.encode` and an incremental :class:`~transports.wire.Decoder` (so
the handler and the caller never share an array, field types and dtypes are checked, and limits
apply), and handler exceptions become ErrorReplys exactly as the HTTP server maps them. Closing the
channel (:meth:`~transports.service.Channel.aclose`) cancels calls in flight and makes later calls
raise TransportUnavailable, which is how tests simulate a worker that died.

This module must not know about asyncflow or HTTP.
"""

from __future__ import annotations

from transports.messages import Message
from transports.service import (
    Channel, Rpc, WorkerServiceProtocol, error_reply_for, reply_for_result,
)
from transports.wire import CLOSED, DEFAULT_LIMITS, NEED_DATA, Decoder, Limits, encode

__all__ = ["InProcessChannel"]


class InProcessChannel(Channel):
    """A channel to a handler in the same trio run.

    Args:
        handler: the worker service implementation.
        limits: the codec limits applied to both directions.
        address: a name for error messages (e.g. the worker's task name).
    """

    def __init__(self, handler: WorkerServiceProtocol, *, limits: Limits = DEFAULT_LIMITS,
                 address: str = "in-process") -> None:
        super().__init__()
        self._handler = handler
        self._limits = limits
        self.address = address

    async def _exchange(self, rpc: Rpc, request: Message | None) -> Message:
        arguments = () if request is None else (self._transfer(request),)
        try:
            method = getattr(self._handler, rpc.method)
            return self._transfer(reply_for_result(rpc, await method(*arguments)))
        except Exception as exc:  # noqa: BLE001 -- every handler failure becomes an ErrorReply
            return self._transfer(error_reply_for(exc))

    async def _exchange_text(self, method: str) -> str:
        try:
            text = await getattr(self._handler, method)()
        except Exception as exc:  # noqa: BLE001 -- reported like the HTTP server's 500
            error = error_reply_for(exc)
            raise error.error() from exc
        return text

    def _transfer(self, message: Message) -> Message:
        """Send a message through the codec as a socket would carry it, buffer by buffer."""
        decoder = Decoder(self._limits)
        for buffer in encode(message, self._limits):
            decoder.receive_data(buffer)
        decoder.receive_data(b"")
        received = decoder.next_event()
        assert received is not NEED_DATA and received is not CLOSED and (
            decoder.next_event() is CLOSED), "encode produced other than one frame"
        return received
