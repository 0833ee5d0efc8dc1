"""A TCP proxy on loopback that damages what a worker answers (or, armed with
``requests=True``, what it is sent), as a faulty NIC or switch would behind TCP's 16-bit
checksum: once armed, it flips one bit of the Nth byte it forwards from the server to the
client (counted from the arming, or from the end of the next HTTP head: into the frame), then
forwards faithfully again."""
from __future__ import annotations

import trio


class LoopbackProxy:
    """A proxy on ``127.0.0.1:port`` (a free port, set by :meth:`serve`); subclasses forward
    each connection in ``_handle(client)``."""

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)


class BitFlipProxy(LoopbackProxy):
    """Forwards ``127.0.0.1:port`` to ``target`` (set before the first connection).

    ``arm(offset, bit)`` makes it flip ``bit`` of the ``offset``-th server-to-client byte
    forwarded after the call; ``flipped`` counts the flips done.
    """

    def __init__(self):
        self.target = None
        self.port = None
        self.flipped = 0
        self._countdown = None  # bytes still to forward before the one to damage
        self._bit = 0
        self._head_due = False  # the countdown starts after the next b"\r\n\r\n"
        self._tail = b""  # the last bytes seen while looking for it
        self._path = None  # damage only answers to requests for this path
        self._requests = False  # damage requests (client to server) instead of answers

    def arm(self, offset, bit=3, in_body=False, path=None, requests=False):
        """``in_body``: count ``offset`` from the end of the next HTTP head (into the frame),
        or, when negative, back from the end of its body (-1: the body's last byte, by its
        Content-Length); ``path``: only in an answer on a connection whose last request line
        holds it (with ``requests``: in a request whose line holds it)."""
        assert in_body or offset >= 0, "an offset from the body's end needs in_body"
        self._countdown, self._bit, self._path = offset, bit, path
        self._requests = requests
        self._head_due, self._tail = in_body, b""

    async def _handle(self, client):
        host, _, port = self.target.rpartition(":")
        async with client, await trio.open_tcp_stream(host, int(port)) as server:
            async with trio.open_nursery() as nursery:
                last = [b""]  # this connection's last request line
                nursery.start_soon(self._pump, client, server, last, False, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, last, True, nursery.cancel_scope)

    async def _pump(self, source, sink, last, damage, scope):
        try:
            while data := await source.receive_some(1 << 16):
                if not damage and data.split(b" ", 1)[0] in (b"GET", b"POST", b"DELETE"):
                    last[0] = data.split(b"\r\n", 1)[0]  # (a request's head comes first)
                if damage != self._requests and self._countdown is not None and (
                        self._path is None or self._path.encode() in last[0]):
                    start = self._skip_head(data)
                    if start is None:
                        pass
                    elif self._countdown < len(data) - start:
                        data = bytearray(data)
                        data[start + self._countdown] ^= 1 << self._bit
                        self._countdown = None
                        self.flipped += 1
                    else:
                        self._countdown -= len(data) - start
                await sink.send_all(bytes(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()  # one side closed: close both

    def _skip_head(self, data):
        """Where the counted bytes start in ``data`` (None: all of it is still HTTP head)."""
        if not self._head_due:
            return 0
        seen = self._tail + bytes(data)
        end = seen.find(b"\r\n\r\n")
        if end < 0:
            self._tail = seen[-3:] if self._countdown >= 0 else seen  # the whole head: its length
            return None
        self._head_due = False
        if self._countdown < 0:  # counted back from the body's end
            for line in seen[:end].split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    self._countdown += int(value)
            assert self._countdown >= 0, "the answer's body is shorter than the offset back"
        return end + 4 - len(self._tail)
