"""``gliding mcp --transport http``: streamable HTTP on a socket, for bearers of a token only.

``listening_socket`` binds the port before anything is served (a port in use is a usage error,
not a traceback); ``mcp_token`` reads or makes ``<data_dir>/mcp.token`` (0600); ``BearerOnly``
lets through only requests that bear it; ``serve_http`` runs the SDK's app under uvicorn with a
signal handling that leaves the jobs' cleanup to the caller. Apart from the tools because this
is the server's one door to the network, and its check is read on its own.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.server import MCPServer

from gliding.errors import UsageError


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, before anything is served.

    Raises:
        UsageError: the port cannot be bound (in use, or not ours to take).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port") from exc
    return sock


class BearerOnly:
    """An ASGI app that lets through only HTTP requests bearing ``token`` (``Authorization:
    Bearer <token>``, compared in constant time); any other gets 401 and reaches nothing.
    ``run_job`` starts programs and ``read_iri`` reads archives: over HTTP anything on the host
    (a sandboxed command with network too) could call them, so no token, no call."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": {"code": "auth", "message": (
                    "missing or wrong bearer token" if given else "no bearer token"),
                    "hint": "send Authorization: Bearer <the token in <data_dir>/mcp.token>"}})
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


def mcp_token(data_dir: Path) -> str:
    """The bearer token of ``gliding mcp --transport http``: ``<data_dir>/mcp.token`` (0600),
    made the first time.

    Raises:
        UsageError: it cannot be read or made.
    """
    path = data_dir / "mcp.token"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            token = path.read_text(encoding="ascii").strip()
            if len(token) < 32:
                raise UsageError(f"{path} holds no usable token",
                                 hint="delete it; the next start makes a new one") from None
            return token
        token = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(token + "\n")
        return token
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read or make the MCP token {path}: {exc}") from exc


async def serve_http(server: MCPServer, sock: socket.socket,
                      announce: Callable[[str], None], token: str) -> None:
    """Streamable HTTP at ``http://host:port/mcp`` on ``sock``, for requests bearing
    ``token``. uvicorn's own signal handling would end the process before the jobs are
    cancelled and the runtime closed; here a signal stops it gracefully and the caller cleans
    up."""
    import uvicorn  # the SDK's HTTP server

    class Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    host, port = sock.getsockname()[:2]
    app = BearerOnly(server.streamable_http_app(host=host), token)
    http = Uvicorn(uvicorn.Config(app, log_level="warning"))

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                http.should_exit = True
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal)
        announce(f"http://{host}:{port}/mcp")
        await http.serve(sockets=[sock])
        tg.cancel_scope.cancel()
