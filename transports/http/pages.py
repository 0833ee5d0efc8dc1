"""Web pages beside the worker protocol on the same port: routes, login and its cookie.

A server may carry a :class:`PageHandler` (the worker's status page, say): then ``GET /``,
``GET /status`` and ``GET /status/...`` go to it, and ``POST /status/login`` logs a browser in.
The token rule is the protocol's, adapted to a browser:

* with no token, every page is open (as every route is);
* ``Authorization: Bearer <token>`` opens every page (scripts use it for the JSON endpoints);
* a browser cannot send that header from a link, so ``POST /status/login`` takes the token in
  a form body, compares it in constant time and answers ``303`` with a random session id in an
  ``HttpOnly; SameSite=Strict`` cookie (:class:`LoginSessions`). The token never appears in a
  URL (URLs end up in logs and histories), and a session id opens only pages, never the
  protocol's routes: a page seen in a browser cannot run a graph.

The handler decides what a page shows without being logged in (a login form, static assets).
Nothing here knows about asyncflow or does I/O.
"""
from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import parse_qs

__all__ = ["COOKIE_NAME", "LOGIN_PATH", "MAX_LOGIN_BODY", "LoginSessions", "Page", "PageGate",
           "PageHandler", "SECURITY_HEADERS", "is_page_path", "login_token"]

LOGIN_PATH: Final = "/status/login"
COOKIE_NAME: Final = "asyncflow_status"
MAX_LOGIN_BODY: Final = 4096  # a login form is a token; anything longer is refused (413)
SESSION_TTL_S: Final = 12 * 3600.0
MAX_SESSIONS: Final = 256  # the oldest login is forgotten beyond this
# Every page answer carries these: no framing, no sniffing, scripts only from this origin.
SECURITY_HEADERS: Final = (
    "X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n"
    "Referrer-Policy: no-referrer\r\nCache-Control: no-store\r\n"
    "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'\r\n")


@dataclass(frozen=True, slots=True)
class Page:
    """A page handler's answer: HTTP status, content type and body."""

    status: int
    content_type: str
    body: bytes


class PageHandler(Protocol):
    """What serves the pages (called in trio, like the worker service's handlers)."""

    async def page(self, path: str, authenticated: bool, note: str = "") -> Page | None:
        """The answer for ``GET path`` (no query); None for an unknown page (404).

        ``authenticated`` says whether the caller may see data; ``note`` is set to why the
        last login failed when the login form is shown again.
        """
        ...


def is_page_path(path: str) -> bool:
    """Whether a request path (query stripped) belongs to the pages."""
    return path in ("/", "/status") or path.startswith("/status/")


def login_token(body: bytes) -> str | None:
    """The ``token`` field of a urlencoded login form (None when absent or malformed)."""
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=False, max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        return None
    values = fields.get("token")
    return values[0].strip() if values and len(values) == 1 else None


class LoginSessions:
    """Random session ids handed out at login, each valid :data:`SESSION_TTL_S` seconds; at
    most :data:`MAX_SESSIONS` (the oldest is forgotten), so logins cannot grow memory."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def issue(self) -> str:
        """A new session's ``Set-Cookie`` header line."""
        session = secrets.token_urlsafe(32)
        self._expiry[session] = self._clock() + SESSION_TTL_S
        while len(self._expiry) > MAX_SESSIONS:
            self._expiry.popitem(last=False)
        return (f"Set-Cookie: {COOKIE_NAME}={session}; Path=/; HttpOnly; SameSite=Strict; "
                f"Max-Age={int(SESSION_TTL_S)}\r\n")

    def valid(self, cookie_header: str) -> bool:
        """Whether a ``Cookie`` header carries a live session id (compared in constant time)."""
        now = self._clock()
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name != COOKIE_NAME or not value:
                continue
            for session, expiry in list(self._expiry.items()):
                if hmac.compare_digest(session.encode(), value.encode("latin-1", "replace")):
                    if expiry > now:
                        return True
                    del self._expiry[session]
        return False

    def __len__(self) -> int:
        return len(self._expiry)


class PageGate:
    """Who may see the pages: the token rule of the module docstring, without I/O.

    Args:
        authorization: the ``Authorization`` header value every request must carry
            (``b"Bearer <token>"``), or None when the server has no token.
    """

    def __init__(self, authorization: bytes | None) -> None:
        self._authorization = authorization
        self.sessions = LoginSessions()

    def admits(self, headers: dict[str, str]) -> bool:
        """Whether a request with ``headers`` may see data (bearer header or session)."""
        if self._authorization is None:
            return True
        offered = headers.get("authorization", "").encode("latin-1")
        return hmac.compare_digest(offered, self._authorization) or self.sessions.valid(
            headers.get("cookie", ""))

    def login(self, form_body: bytes) -> str | None:
        """The ``Set-Cookie`` line of a new session if the form's token is right, else None."""
        token = login_token(form_body)
        if self._authorization is not None:
            offered = f"Bearer {token}".encode("utf-8") if token else b""
            if not hmac.compare_digest(offered, self._authorization):
                return None
        return self.sessions.issue()
