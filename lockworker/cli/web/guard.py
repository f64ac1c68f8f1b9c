"""Who may see the dashboard and change anything through it.

- **Where it listens.** Loopback unless told otherwise; any other address only with a
  token (``--auth-token`` or ``$LOCKWORKER_DASHBOARD_TOKEN``): the command refuses to
  start without one (:func:`needs_token`).
- **The token.** With a token every page asks for it: ``Authorization: Bearer <token>``
  (for scripts), or the login form, which sets a session cookie (HttpOnly,
  SameSite=Strict) holding an HMAC of the token, never the token itself.
- **Host names.** Without a token only requests addressed to a loopback name
  (``127.0.0.1``, ``localhost``, ``[::1]``) are served, so a web site whose name an
  attacker points at 127.0.0.1 (DNS rebinding) cannot read the page in a victim's browser.
- **Cross-site requests.** Every change is a POST that must come from the dashboard's own
  origin (``Origin``, else ``Referer``; ``Sec-Fetch-Site`` where the browser sends it)
  and carry the form's CSRF token, an HMAC of a random per-browser cookie under a key
  of this process (:class:`Csrf`).
- **Headers.** A Content Security Policy that runs only the dashboard's own script file
  (no inline script, so an id that slipped through escaping still could not run), no
  framing, no sniffing, no caching.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

ENV_TOKEN = "LOCKWORKER_DASHBOARD_TOKEN"
SESSION_COOKIE = "lockworker_session"
CSRF_COOKIE = "lockworker_csrf"
OPEN_PATHS = ("/login", "/static/")
"""What is served without the token: the login form and the stylesheet and script."""
LOOPBACK_NAMES = ("localhost",)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) only reaches this machine."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def needs_token(host: str, token: str | None) -> bool:
    """True when serving ``host`` without a token must be refused."""
    return not token and not is_loopback(host)


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: proves the token was given, not it."""
    return hmac.new(token.encode(), b"lockworker-dashboard-session", hashlib.sha256).hexdigest()


def authorized(request: Request, token: str) -> bool:
    """The bearer header or the session cookie matches ``token``."""
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
        return True
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_value(token).encode())


def host_name(request: Request) -> str:
    """The host the request was addressed to, without its port."""
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def same_origin(request: Request) -> bool:
    """The request comes from a page of this dashboard (not another site's form)."""
    if request.headers.get("sec-fetch-site", "same-origin") != "same-origin":
        return False
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    parts = urllib.parse.urlsplit(source)
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return f"{parts.scheme}://{parts.netloc}" == here


class Csrf:
    """Form tokens: an HMAC, under a key of this process, of a random cookie that each
    browser is given with its first page."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def token(self, cookie: str) -> str:
        return hmac.new(self._key, cookie.encode(), hashlib.sha256).hexdigest()

    def valid(self, request: Request, form_token: str) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        expected = self.token(cookie).encode()
        return bool(cookie) and hmac.compare_digest(form_token.encode(), expected)


def cookie_of(request: Request) -> tuple[str, bool]:
    """The browser's CSRF cookie, and whether it is new (to be set on the response)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    return (cookie, False) if len(cookie) >= 32 else (secrets.token_urlsafe(32), True)


def same_secret(given: str, secret: str) -> bool:
    """``given == secret`` in a time that does not tell how much of it matched."""
    return hmac.compare_digest(given.encode(), secret.encode())


def set_cookie(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")


class Guard(BaseHTTPMiddleware):
    """Checks the host name and the token of every request; adds the headers."""

    def __init__(self, app: object, token: str | None) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.token = token

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await self._checked(request, call_next)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _checked(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if self.token is None:
            if not is_loopback(host_name(request)):
                return PlainTextResponse(
                    "this dashboard answers only at a loopback address (127.0.0.1, "
                    "localhost); start it with a token to serve other names", status_code=421,
                )
            return await call_next(request)
        if request.url.path.startswith(OPEN_PATHS) or authorized(request, self.token):
            return await call_next(request)
        if "text/html" in request.headers.get("accept", ""):
            target = urllib.parse.quote(request.url.path + (
                f"?{request.url.query}" if request.url.query else ""), safe="")
            return RedirectResponse(f"/login?next={target}", status_code=303)
        return PlainTextResponse(
            "a token is needed: Authorization: Bearer <token>", status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="lockworker dashboard"'},
        )
