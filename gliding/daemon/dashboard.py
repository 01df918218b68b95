"""The web dashboard the daemon serves at ``/``: logins, pages, static files, security headers.

A browser logs in with the daemon's token (the form at ``/``) or with a one-time link
(``gliding dashboard`` asks ``POST /v1/dashboard/links`` for one: ``/login?once=<random>``,
single-use, LINK_S seconds). Either gives a session: a random cookie (HttpOnly,
SameSite=Strict, Path=/) kept in this process's memory with its CSRF token, so a daemon
restart ends every session. The page's script reads the CSRF token from a ``<meta>`` tag and
sends it as CSRF_HEADER on every request that changes something; the API's auth dependency
(``api.authorized``) takes the bearer token or a live session, and for a session's POST or
DELETE wants that header (``CSRFRefused``, 403 without it). The token itself never reaches a
page.

Every response carries CSP (no inline script or style, nothing from elsewhere), so a tool
output or model reply shown on the page cannot run: the script puts text into the page with
``textContent`` only, and this module escapes what it writes into the two pages it fills.
The static files ship in the package (``static/``) and are served from memory, by name.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gliding.errors import GlidingError

SESSION_COOKIE = "gliding_session"
CSRF_HEADER = "X-Gliding-CSRF"
SESSION_S = 12 * 3600  # a login lasts this long (or until the daemon stops)
LINK_S = 300  # a one-time link is good this long
MAX_SESSIONS = 64  # the oldest go first: a script that logs in in a loop cannot fill memory
MAX_LINKS = 64
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
STATIC = Path(__file__).parent / "static"
_SERVED = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
           "login.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}


class CSRFRefused(GlidingError):
    """A request of a browser session that would change something, without its CSRF token."""

    code = "auth.csrf"


class Sessions:
    """The dashboard's logins and one-time links, in this process's memory only. Secrets are
    kept as their SHA-256, so a lookup compares no secret byte by byte."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._sessions: OrderedDict[str, tuple[str, float]] = OrderedDict()  # → csrf, expiry
        self._links: OrderedDict[str, float] = OrderedDict()  # → expiry

    def link(self) -> tuple[str, float]:
        """A new one-time login secret and when it expires."""
        once, expires = secrets.token_urlsafe(32), self._now() + LINK_S
        _bounded(self._links, MAX_LINKS)
        self._links[_key(once)] = expires
        return once, expires

    def redeem(self, once: str) -> bool:
        """Whether ``once`` is a live one-time secret; it is used up either way."""
        expires = self._links.pop(_key(once), None)
        return expires is not None and expires > self._now()

    def open(self) -> str:
        """A new session: its cookie value."""
        session = secrets.token_urlsafe(32)
        _bounded(self._sessions, MAX_SESSIONS)
        self._sessions[_key(session)] = (secrets.token_urlsafe(32), self._now() + SESSION_S)
        return session

    def csrf_of(self, session: str | None) -> str | None:
        """The CSRF token of a live session; None for no, an unknown or an expired one."""
        if not session:
            return None
        found = self._sessions.get(_key(session))
        if found is None:
            return None
        if found[1] <= self._now():
            del self._sessions[_key(session)]
            return None
        return found[0]

    def close(self, session: str) -> None:
        self._sessions.pop(_key(session), None)


def _key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


def _bounded(table: OrderedDict[str, Any], most: int) -> None:
    while len(table) >= most:
        table.popitem(last=False)


def check_csrf(request: Request, csrf: str) -> None:
    """Raises CSRFRefused when ``request`` changes something without the session's token."""
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode("utf-8", "replace"), csrf.encode()):
        raise CSRFRefused(f"this request needs the {CSRF_HEADER} header of the dashboard "
                          "page", hint="reload the dashboard (or send the bearer token)")


class SecurityHeaders:
    """ASGI middleware: CSP and its companions on every response of the daemon."""

    HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
               ("Referrer-Policy", "same-origin"), ("X-Frame-Options", "DENY"),
               ("Cross-Origin-Opener-Policy", "same-origin"))

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.HEADERS:
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def add_pages(app: FastAPI, sessions: Sessions, token: str, event_names: Iterable[str]) -> None:
    """The dashboard's pages on ``app``: ``/`` (the dashboard, or the login form), ``/login``
    (the form's POST, a one-time link's GET), ``/logout`` and ``/static/<name>``. Reads the
    static files now (call it off the event loop)."""
    expected = token.encode()
    files = {name: (STATIC / name).read_bytes() for name in _SERVED}
    index = (STATIC / "index.html").read_text(encoding="utf-8").replace(
        "{{events}}", html.escape(" ".join(sorted(event_names))))
    login = (STATIC / "login.html").read_text(encoding="utf-8")

    def login_page(message: str = "", status: int = 200) -> HTMLResponse:
        shown = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
        return _page(login.replace("{{message}}", shown), status)

    def logged_in(request: Request) -> RedirectResponse:
        sessions.close(request.cookies.get(SESSION_COOKIE, ""))  # a new login ends the old
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, sessions.open(), max_age=SESSION_S, path="/",
                            httponly=True, samesite="strict")
        return response

    @app.get("/", include_in_schema=False)
    async def dashboard(request: Request) -> HTMLResponse:
        csrf = sessions.csrf_of(request.cookies.get(SESSION_COOKIE))
        if csrf is None:
            return login_page()
        return _page(index.replace("{{csrf}}", html.escape(csrf)))

    @app.get("/login", include_in_schema=False)
    async def one_time(request: Request, once: str = "") -> Response:
        if once and sessions.redeem(once):
            return logged_in(request)
        return login_page("This login link was used already or has expired: ask "
                          "`gliding dashboard` for another one, or log in with the token.", 401)

    @app.post("/login", summary="Log the dashboard in with the daemon's token",
              response_class=HTMLResponse, openapi_extra={"requestBody": {"content": {
                  "application/x-www-form-urlencoded": {"schema": {
                      "type": "object", "required": ["token"],
                      "properties": {"token": {"type": "string"}}}}}}},
              responses={303: {"description": "Logged in: the session cookie is set"},
                         401: {"description": "The login form again, with why not"},
                         403: {"description": "A form posted from another site"}})
    async def login_form(request: Request) -> Response:
        if not _same_origin(request):
            return login_page("This login came from another site.", 403)
        try:
            form = parse_qs((await request.body()).decode("utf-8", "replace"),
                            max_num_fields=4)
        except ValueError:  # more fields than a login form has
            form = {}
        sent = (form.get("token") or [""])[0].strip().encode("utf-8", "replace")
        if not hmac.compare_digest(sent, expected):
            return login_page("Wrong token: use the one in <data_dir>/daemon.token.", 401)
        return logged_in(request)

    @app.post("/logout", status_code=204, summary="End the dashboard's session",
              responses={403: {"description": "Without the session's CSRF header"}})
    async def logout(request: Request) -> Response:
        session = request.cookies.get(SESSION_COOKIE, "")
        csrf = sessions.csrf_of(session)
        if csrf is not None:
            check_csrf(request, csrf)
            sessions.close(session)
        response = Response(status_code=204)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in files:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(files[name], media_type=_SERVED[name],
                        headers={"Cache-Control": "no-cache"})


def _page(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={"Cache-Control": "no-store"})


def _same_origin(request: Request) -> bool:
    """Whether a form POST came from this daemon's own page: a browser says where from
    (``Sec-Fetch-Site``, else ``Origin``); a request with neither is no browser's form (a
    script that holds the token can log in anyway)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()
