"""The status page every worker serves on its own port (``transports.http.pages`` routes it).

Pages (``GET``; the token rule is ``transports/http/pages.py``'s: a bearer header, or a
session cookie from the login form, or no token at all on a worker without one):

* ``/`` and ``/status``: the page (``status_static/status.html``), or the login form when the
  caller may not see data (HTTP 401, so a script notices);
* ``/status/status.js``, ``/status/status.css``: its script and style, served from the package
  (no CDN: workers may have no internet), open to all since they hold no data;
* ``/status/api/cluster``: the cluster view as JSON (``status.gather_cluster``: every task of
  this worker's ClusterSpec, their rates, graphs, queues, errors and the last traced step's
  timeline); the page polls it, scripts may too;
* ``/status/api/task``: this task's own status (the same document as ``GET /v1/status``).

This module knows the worker service and the cluster view, never sockets.
"""
from __future__ import annotations

import html
import json
from importlib import resources

from asyncflow.cluster.status import ClusterWatcher
from transports.http.pages import LOGIN_PATH, Page

_STATIC = {"/status/status.js": ("status.js", "text/javascript; charset=utf-8"),
           "/status/status.css": ("status.css", "text/css; charset=utf-8")}
_HTML = "text/html; charset=utf-8"
_JSON = "application/json"


def _static(name):
    return resources.files("asyncflow.cluster").joinpath("status_static", name).read_bytes()


class StatusPages:
    """The page handler of one worker (``transports.http.pages.PageHandler``).

    Args:
        service: the task's WorkerService.
        cluster: its ClusterSpec (the tasks the cluster view asks).
        connect: ``connect(address) -> Channel`` with the worker's token.
    """

    def __init__(self, service, cluster, connect):
        self.service = service
        self.watcher = ClusterWatcher(cluster, connect,
                                      local=(service.task, service.status_json))
        self._assets = {}

    async def page(self, path, authenticated, note=""):
        if path in _STATIC:
            name, content_type = _STATIC[path]
            if name not in self._assets:
                self._assets[name] = _static(name)
            return Page(200, content_type, self._assets[name])
        if path in ("/", "/status"):
            if not authenticated:
                return Page(401, _HTML, login_page(note))
            return Page(200, _HTML, _static("status.html").replace(
                b"{{task}}", html.escape(self.service.task).encode()))
        if path not in ("/status/api/cluster", "/status/api/task"):
            return None
        if not authenticated:
            return Page(401, _JSON, b'{"error": "log in at /status or send the bearer token"}')
        if path == "/status/api/task":
            return Page(200, _JSON, (await self.service.status_json()).encode())
        view = await self.watcher.view()
        view["self"] = self.service.task
        return Page(200, _JSON, json.dumps(view, default=str).encode())

    async def aclose(self):
        await self.watcher.aclose()


def login_page(note=""):
    """The login form (the token goes in a POST body, never in a URL); it shows no data, not
    even the task's name."""
    warning = f'<p class="error" id="login-error">{html.escape(note)}</p>' if note else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>asyncflow status: log in</title>
<link rel="stylesheet" href="/status/status.css"></head>
<body class="login"><main>
<h1>asyncflow status</h1>
<p>This worker asks for the cluster's token (<code>ASYNCFLOW_TOKEN</code>).</p>
{warning}
<form method="post" action="{LOGIN_PATH}" id="login">
<label>token <input type="password" name="token" id="token" autocomplete="current-password"
 autofocus required></label>
<button type="submit">log in</button>
</form></main></body></html>
""".encode()
