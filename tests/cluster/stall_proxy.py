"""A TCP proxy on loopback in front of a real worker that makes it, for one kind of answer, a
peer that sends half a frame and then stalls, or one that answers garbage: the network's and
a broken peer's faults, placed exactly (no timing race).

``arm(path, mode, after)``: the next answer on a connection whose last request line holds
``path`` (``/run``, ``/recv``, ``/graphs``, ``/abort``, ``/health``) is

* ``"stall"``: forwarded up to ``after`` bytes (its HTTP head included), then no byte more
  while the connection stays open (a half-open peer; ``stalled`` is set then);
* ``"garbage"``: replaced by bytes that are no HTTP answer, the connection left open;
* ``"silent"``: not one byte of it forwarded, the connection left open;
* ``"hold"``: not one byte of it forwarded until ``release()``, then all of it (a slow peer).

Once fired it is disarmed; ``release()`` disarms it and closes every connection it cut (the
client sees them reset, as after the peer's own restart), and lets the held answers go on.
Every other byte is forwarded as it comes.
"""
from __future__ import annotations

import trio
from bitflip_proxy import LoopbackProxy

GARBAGE = b"\x00SMTP?\xde\xad\xbe\xef" * 40


class StallProxy(LoopbackProxy):
    """Forwards ``127.0.0.1:port`` to ``target`` (set before the first connection)."""

    def __init__(self):
        self.target = None
        self.port = None
        self.fired = 0
        self.stalled = trio.Event()  # set when an armed answer was cut
        self._armed = None  # (path, mode, after)
        self._release = trio.Event()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def arm(self, path, mode="stall", after=0):
        assert mode in ("stall", "garbage", "silent", "hold"), mode
        self._armed = (path.encode(), mode, after)
        self.stalled = trio.Event()

    def release(self):
        self._armed = None  # (a fault that never fired must not hit the next answer)
        self._release.set()
        self._release = trio.Event()

    async def _handle(self, client):
        host, _, port = self.target.rpartition(":")
        try:
            server = await trio.open_tcp_stream(host, int(port))
        except OSError:
            await client.aclose()
            return
        async with client, server:
            async with trio.open_nursery() as nursery:
                last = [b""]  # this connection's last request line
                nursery.start_soon(self._requests, client, server, last, nursery.cancel_scope)
                nursery.start_soon(self._answers, server, client, last, nursery.cancel_scope)

    async def _requests(self, source, sink, last, scope):
        try:
            while data := await source.receive_some(1 << 16):
                if data.split(b" ", 1)[0] in (b"GET", b"POST", b"DELETE"):
                    last[0] = data.split(b"\r\n", 1)[0]  # (a request's head comes first)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()  # one side closed: close both

    async def _answers(self, source, sink, last, scope):
        try:
            cut = None  # bytes of the armed answer still to forward
            while data := await source.receive_some(1 << 16):
                armed = self._armed
                if cut is None and armed is not None and armed[0] in last[0]:
                    self._armed, self.fired = None, self.fired + 1
                    if armed[1] == "hold":
                        self.stalled.set()
                        await self._release.wait()
                        await sink.send_all(data)
                        continue
                    cut = {"stall": armed[2], "garbage": 0, "silent": 0}[armed[1]]
                    if armed[1] == "garbage":
                        await sink.send_all(GARBAGE)
                if cut is not None:
                    await sink.send_all(data[:cut])
                    cut -= min(cut, len(data))
                    if not cut:
                        self.stalled.set()
                        await self._release.wait()  # held: the connection stays open
                        break
                    continue
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()
