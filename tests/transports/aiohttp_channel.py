"""The tests' aiohttp client: :class:`HttpChannel` on one asyncio thread, bridged to trio.

Theory of operation
-------------------
trio owns the process. aiohttp cannot run inside trio, so the channel's requests run on one
daemon thread with an ``asyncio.SelectorEventLoop`` (:func:`aio_bridge.aio_thread`, beside this module,
started lazily, one per process, with one ``ClientSession`` whose connector pools connections to
every worker), reached through :func:`aio_bridge.run_on_loop`: if the trio caller is
cancelled, the asyncio task is cancelled too and awaited (shielded, bounded), so arrays being
sent stay owned until they are sent.

asyncflow itself speaks to workers with :class:`transports.http.client.TrioHttpChannel` (no
thread hop) and serves them with :mod:`transports.http.server`; this channel is the same
protocol through a third-party HTTP stack, which the tests use to check the trio server against
a client that shares none of its code (it lives with the tests: nothing shipped uses it).

Bodies are single frames of :mod:`transports.wire`. Replies are read by feeding ``readchunk()``
chunks to a :class:`~transports.wire.Decoder`, which validates the header before allocating and
copies each chunk straight into its destination array (aiohttp's ``client_max_size`` does not
apply, the codec's :class:`~transports.wire.Limits` do). Requests send the encoder's buffers as
256 KiB memoryview slices with an explicit Content-Length (small frames as one ``bytes``).
``docs/protocol.md`` lists routes, statuses and the optional bearer token. Nothing here knows
about asyncflow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import typing
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import aiohttp
import trio
from aio_bridge import aio_thread, run_on_loop

from transports.http.protocol import (
    CODE_HEADER, FRAME_CONTENT_TYPE, MAX_TEXT, parse_address, request_path, take_one_frame,
    text_error,
)
from transports.messages import ErrorReply, Message
from transports.service import (
    TEXT_CALLS, Channel, Rpc, TransportDeadlineExceeded, TransportUnavailable,
)
from transports.wire import (
    DEFAULT_LIMITS, SMALL_HEADER_BYTES, Decoder, Limits, RemoteProtocolError,
    encode, frame_size,
)

__all__ = ["FRAME_CONTENT_TYPE", "HttpChannel"]

_SLICE: Final = 256 * 1024


_decode_lock = threading.Lock()
_decoders: concurrent.futures.ThreadPoolExecutor | None = None
_DECODE_THREADS: Final = 2  # large headers decoded at once (each bounded by Limits)


def _decode_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _decoders
    with _decode_lock:
        if _decoders is None:
            _decoders = concurrent.futures.ThreadPoolExecutor(
                _DECODE_THREADS, thread_name_prefix="asyncflow-decode")
        return _decoders


def _slices(buffers: list[bytes | memoryview]) -> Iterator[memoryview]:
    for buffer in buffers:
        view = memoryview(buffer)
        for start in range(0, len(view), _SLICE):
            yield view[start:start + _SLICE]


async def _aslices(buffers: list[bytes | memoryview]) -> AsyncIterator[memoryview]:
    for piece in _slices(buffers):
        yield piece


async def _read_frame(content: aiohttp.StreamReader, limits: Limits) -> Message:
    """Read a body that must hold exactly one frame, decoding as chunks arrive.

    ``readchunk`` hands over aiohttp's buffered chunks one by one; ``readany`` would join them
    (a copy) whenever the decoder falls behind the socket. The bytes of a header larger than
    :data:`~transports.wire.SMALL_HEADER_BYTES` are fed from a worker thread (at most
    :data:`_DECODE_THREADS` at once), since decoding it takes long: the loop keeps answering
    other requests (health) meanwhile.
    """
    decoder, message = Decoder(limits), None
    while True:
        chunk, end_of_http_chunk = await content.readchunk()
        if not chunk and end_of_http_chunk and not content.at_eof():
            continue  # a chunked-encoding boundary, not the end (aiohttp's EMPTY_PAYLOAD
            # answers (b"", True) forever once read: without the at_eof check this spins)
        if decoder.header_bytes_pending > SMALL_HEADER_BYTES:
            await asyncio.get_running_loop().run_in_executor(
                _decode_pool(), decoder.receive_data, chunk)
        else:
            decoder.receive_data(chunk)
        message = take_one_frame(decoder, message)
        if not chunk:
            if message is None:
                raise RemoteProtocolError("empty body: expected one frame")
            return message


# ----------------------------------------------------------------------------- client


class HttpChannel(Channel):
    """A channel to a worker's HTTP server (see :class:`~transports.service.Channel`).

    Args:
        address: ``"host:port"`` (IPv6 hosts in brackets).
        token: bearer token to send, if the server requires one.
        connect_timeout: seconds to establish a connection before TransportUnavailable.
        limits: codec limits for replies (and the requests this side builds).

    Raises:
        ValueError: ``address`` is not ``host:port``.
    """

    def __init__(self, address: str, *, token: str | None = None, connect_timeout: float = 5.0,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__()
        parse_address(address)
        self.address = address
        self._base_url = f"http://{address}"
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._connect_timeout = connect_timeout
        self._limits = limits

    async def _exchange(self, rpc: Rpc, request: Message | None) -> Message:
        path = request_path(rpc, request)
        # Bodiless requests are encoded too: the same field checks, whatever the route.
        buffers = None if request is None else encode(request, self._limits)
        if not rpc.has_body:
            buffers = None
        return await run_on_loop(self._aio_request(
            rpc.http_method, path, buffers, self._read_reply, self._total_timeout()))

    async def _exchange_text(self, method: str) -> str:
        return await run_on_loop(self._aio_request(
            "GET", TEXT_CALLS[method], None, self._read_text, self._total_timeout()))

    def _total_timeout(self) -> float | None:
        # A backstop for the asyncio side; the trio deadline normally cancels the call first.
        remaining = trio.current_effective_deadline() - trio.current_time()
        return None if remaining == float("inf") else max(remaining, 0.0) + 1.0

    async def _aio_request(self, method: str, path: str, buffers: list | None,
                           read: Any, total: float | None) -> Any:
        headers = dict(self._headers)
        data: Any = None
        if buffers is not None:
            size = frame_size(buffers)
            headers["Content-Type"] = FRAME_CONTENT_TYPE
            if size < _SLICE:
                data = b"".join(buffers)
            else:  # explicit length, or aiohttp would switch to chunked encoding
                data, headers["Content-Length"] = _aslices(buffers), str(size)
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=self._connect_timeout)
        what = f"{method} {path} to {self.address}"
        try:
            async with aio_thread().session().request(
                    method, self._base_url + path, data=data, headers=headers,
                    timeout=timeout) as response:
                return await read(response)
        except aiohttp.ConnectionTimeoutError as exc:
            raise TransportUnavailable(f"{what}: no connection within "
                                       f"{self._connect_timeout} s") from exc
        except TimeoutError as exc:
            raise TransportDeadlineExceeded(f"{what}: deadline exceeded") from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransportUnavailable(f"{what}: cannot connect: {exc.os_error}") from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TransportUnavailable(f"{what}: connection lost: {exc}") from exc

    async def _read_reply(self, response: aiohttp.ClientResponse) -> Message:
        if response.content_type != FRAME_CONTENT_TYPE:
            await self._raise_for_text(response)
        reply = await _read_frame(response.content, self._limits)
        if response.status != 200 and not isinstance(reply, ErrorReply):
            raise RemoteProtocolError(f"HTTP {response.status} with a {type(reply).__name__} "
                                      "frame instead of an ErrorReply")
        return reply

    async def _read_text(self, response: aiohttp.ClientResponse) -> str:
        if response.status != 200:
            await self._raise_for_text(response)
        return (await response.content.read(self._limits.max_header_bytes)).decode("utf-8")

    async def _raise_for_text(self, response: aiohttp.ClientResponse) -> typing.NoReturn:
        raise text_error(response.status, self.address, await response.content.read(MAX_TEXT),
                         response.headers.get(CODE_HEADER))
