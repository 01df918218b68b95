"""Which ``Host`` the daemon's API answers: DNS rebinding kept out.

A web page can make a browser send requests to ``127.0.0.1`` by re-pointing its own name at
it (DNS rebinding); the browser then sends that name as ``Host``. ``HostCheck`` answers a
request over TCP only when its ``Host`` is an IP address, ``localhost``, or the name
``daemon.host`` gives; any other is refused (400, ``request.host``) before the app sees it,
health included. The unix socket is not checked: no browser reaches it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from gliding.errors import GlidingError, UsageError


class WrongHost(UsageError):
    """A request whose ``Host`` is no name of this daemon."""

    code = "request.host"


class HostCheck:
    """ASGI middleware: refuse a request over TCP whose ``Host`` is not this daemon's;
    ``answer(error)`` is the response it sends then (the API's JSON error)."""

    def __init__(self, app: ASGIApp, configured: str,
                 answer: Callable[[GlidingError], ASGIApp]) -> None:
        self.app, self.answer = app, answer
        self.names = {"localhost", configured.strip("[]").lower().rstrip(".")}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _over_unix_socket(scope):
            await self.app(scope, receive, send)
            return
        raw = dict(scope.get("headers") or ()).get(b"host")
        name = None if raw is None else host_name(raw.decode("latin-1"))
        if raw is not None and not (name in self.names or _is_ip(name)):
            shown = raw.decode("latin-1")[:100]
            error = WrongHost(f"the Host header {shown!r} is not an address of this daemon",
                              hint="connect to the daemon by its IP address or localhost "
                                   "(or the name daemon.host gives)")
            await self.answer(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def host_name(header: str) -> str:
    """The name of a ``Host`` header without its port, lower-case: ``[::1]:80`` -> ``::1``."""
    text = header.strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def _is_ip(name: str | None) -> bool:
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _over_unix_socket(scope: Scope) -> bool:
    """Whether the request came over the unix socket (uvicorn's ``server`` is its path)."""
    server = scope.get("server")
    return server is not None and server[1] is None and str(server[0]).startswith("/")
