"""asyncflow's transports: how a master and its workers exchange messages and tensors.

A leaf package: it never imports asyncflow. Modules, lowest first:

* ``messages``: the worker service's messages as frozen dataclasses.
* ``schema``: what may travel: layout constants, dtype allowlist, limits, protocol errors.
* ``wire``: the sans-IO codec (``encode``, ``Decoder``, ``decode``); re-exports the two above.
* ``service``: the handler protocol, the table of calls, and the client ``Channel`` base.
* ``inprocess``: the protocol through direct trio calls (tests, one-process clusters).
* ``http/``: the protocol over HTTP/1.1 in trio (``transports/http/__init__.py`` lists its
  modules): the worker's server (``open_http_server``) and the client channel asyncflow uses
  (``TrioHttpChannel``), framing by llhttp (httptools), and same-host answers whose large
  tensors the client copies from the server's memory (``cross_memory``).
* ``allocation``: a process keeps freed memory for its next large tensor (glibc ``mallopt``,
  set by ``asyncflow worker``).
* ``loopback_ports``: TCP ports on 127.0.0.1 reserved for the tests and benchmarks that must
  name a server's port before it binds (the transports themselves never use it).

An aiohttp client of the same protocol, which shares no HTTP code with the server, lives with
the tests (``tests/transports/aiohttp_channel.py``).

``docs/protocol.md`` specifies the framing, routes, status codes and the token.
"""
