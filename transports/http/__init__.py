"""The worker service over HTTP/1.1 on trio: server, client and what they share.

``framing`` (llhttp through httptools, sans-IO: heads, chunked bodies, pipelining),
``protocol`` (routes, status codes, how frames go out), ``server`` (``open_http_server``,
with ``body`` for request bodies, ``guard`` for timeouts, connection limits and rate-limited
logs, ``disconnect`` for clients that leave mid-call, ``pages`` for the status page's routes
and login), ``client`` (``TrioHttpChannel``), and for both ends ``bulk_io`` (large tensors in
few wake-ups) ``same_host`` (a Unix socket beside a loopback listener), ``bare`` (same-host
calls as bare frames on a second such socket, no HTTP) and ``cross_memory`` (a same-host
answer's large tensors copied from the server's memory).
``docs/protocol.md`` specifies the framing, routes, status codes and the token.
"""
