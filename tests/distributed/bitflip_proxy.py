"""A TCP proxy on loopback that damages what a worker answers, as a faulty NIC or switch
would behind TCP's 16-bit checksum: once armed, it flips one bit of the Nth byte it forwards
from the server to the client (counted from the arming), then forwards faithfully again."""
from __future__ import annotations

import trio


class BitFlipProxy:
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

    def arm(self, offset, bit=3):
        self._countdown, self._bit = offset, bit

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client):
        host, _, port = self.target.rpartition(":")
        async with client, await trio.open_tcp_stream(host, int(port)) as server:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, False, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, True, nursery.cancel_scope)

    async def _pump(self, source, sink, damage, scope):
        try:
            while data := await source.receive_some(1 << 16):
                if damage and self._countdown is not None:
                    if self._countdown < len(data):
                        data = bytearray(data)
                        data[self._countdown] ^= 1 << self._bit
                        self._countdown = None
                        self.flipped += 1
                    else:
                        self._countdown -= len(data)
                await sink.send_all(bytes(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()  # one side closed: close both
