"""asyncflow's transports: how a master and its workers exchange messages and tensors.

A leaf package: it never imports asyncflow. Modules, lowest first:

* ``messages``: the worker service's messages as frozen dataclasses.
* ``schema``: what may travel: layout constants, dtype allowlist, limits, protocol errors.
* ``wire``: the sans-IO codec (``encode``, ``Decoder``, ``decode``); re-exports the two above.
* ``service``: the handler protocol, the table of calls, and the client ``Channel`` base.
* ``inprocess``: the protocol through direct trio calls (tests, one-process clusters).
* ``http``: aiohttp on a dedicated asyncio thread, bridged to trio (``open_http_server``,
  ``HttpChannel``).

``docs/protocol.md`` specifies the framing, routes, status codes and the token.
"""
