"""tools.web.*: each key, set through GLIDING_* variables, changes what web_fetch or
web_search answers; the default is the control. The only server is on 127.0.0.1, reached only
where the settings' allow-list admits it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gliding.config.settings import Settings
from gliding.errors import ToolError
from gliding.tools.base import ToolContext
from gliding.tools.web import WebGroup
from tests.settings_effects.effects_support import settings_from

DEFAULTS = Settings().tools.web
ALLOW = {"GLIDING_TOOLS__WEB__ALLOW": "127.0.0.1"}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0]
        if path.startswith("/hop/"):
            n = int(path.rsplit("/", 1)[1])
            self.send_response(302)
            self.send_header("Location", f"/hop/{n - 1}" if n > 1 else "/page")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/slow":
            threading.Event().wait(1.5)
        if path == "/search":
            body = json.dumps({"results": [{"title": "Hit", "url": "https://example.org/",
                                            "content": "found"}]}).encode()
            kind = "application/json"
        else:
            agent = self.headers.get("User-Agent", "")
            body = (f"agent={agent}\n" + "y" * 3000).encode()
            kind = "text/plain"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def call(settings: Settings, tool: str, **arguments: Any) -> str:
    """The tool's answer, or ``error: <message>`` as the model would see it."""
    group = WebGroup(settings.tools.web)
    found = {t.name: t for t in group.tools}
    if tool not in found:
        return f"error: no tool {tool}"
    ctx = ToolContext(Path("."), settings.tools)

    async def run() -> str:
        try:
            return str(await found[tool].run(arguments, ctx))
        except ToolError as exc:
            return f"error: {exc.message}"

    return anyio.run(run)


@pytest.mark.parametrize("value", [None, "127.0.0.1"], ids=["default", "loopback"])
def test_web_allow_admits_what_the_guard_refuses(tmp_path: Path, server: str,
                                                 value: str | None) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__WEB__ALLOW": value}

    answer = call(settings_from(tmp_path, env), "web_fetch", url=f"{server}/page")

    if value is None:
        assert DEFAULTS.allow == ()
        assert answer == "error: refused to connect to 127.0.0.1: 127.0.0.1 is a loopback address"
    else:
        assert answer.startswith(f"GET {server}/page → 200 OK, text/plain")


@pytest.mark.parametrize("value", [None, "1024"], ids=["default", "1024"])
def test_web_max_bytes_cuts_the_body(tmp_path: Path, server: str, value: str | None) -> None:
    env = dict(ALLOW) | ({} if value is None else {"GLIDING_TOOLS__WEB__MAX_BYTES": value})

    answer = call(settings_from(tmp_path, env), "web_fetch", url=f"{server}/page")

    if value is None:
        assert DEFAULTS.max_bytes > 4000 and answer.endswith("y" * 3000)
    else:
        assert ", 1024 bytes" in answer.splitlines()[0]
        assert answer.endswith("[page cut at 1024 bytes (tools.web.max_bytes)]")


@pytest.mark.parametrize("value", [None, "0.5"], ids=["default", "0.5"])
def test_web_timeout_s_bounds_a_fetch(tmp_path: Path, server: str, value: str | None) -> None:
    env = dict(ALLOW) | ({} if value is None else {"GLIDING_TOOLS__WEB__TIMEOUT_S": value})

    answer = call(settings_from(tmp_path, env), "web_fetch", url=f"{server}/slow")

    if value is None:
        assert DEFAULTS.timeout_s > 2 and answer.startswith("GET ")
    else:
        assert answer == (f"error: web_fetch: {server}/slow took more than 0.5s "
                          "(tools.web.timeout_s)")


@pytest.mark.parametrize("value", [None, "2"], ids=["default", "2"])
def test_web_max_redirects_bounds_the_hops(tmp_path: Path, server: str,
                                           value: str | None) -> None:
    env = dict(ALLOW) | ({} if value is None else {"GLIDING_TOOLS__WEB__MAX_REDIRECTS": value})

    answer = call(settings_from(tmp_path, env), "web_fetch", url=f"{server}/hop/4")

    if value is None:
        assert DEFAULTS.max_redirects >= 4
        assert answer.startswith(f"GET {server}/page → 200 OK")
        assert f"(asked for {server}/hop/4)" in answer
    else:
        assert answer == "error: web_fetch: more than 2 redirects (tools.web.max_redirects)"


@pytest.mark.parametrize("value", [None, "ResearchBot/2"], ids=["default", "custom"])
def test_web_user_agent_is_what_servers_see(tmp_path: Path, server: str,
                                            value: str | None) -> None:
    env = dict(ALLOW) | ({} if value is None else {"GLIDING_TOOLS__WEB__USER_AGENT": value})

    answer = call(settings_from(tmp_path, env), "web_fetch", url=f"{server}/page")

    assert answer.splitlines()[2] == f"agent={value or DEFAULTS.user_agent}"


@pytest.mark.parametrize("value", [None, "searxng"], ids=["default", "searxng"])
def test_web_search_provider_offers_web_search(tmp_path: Path, server: str,
                                               value: str | None) -> None:
    env = {"GLIDING_TOOLS__WEB__SEARCH__URL": server}
    if value is not None:
        env["GLIDING_TOOLS__WEB__SEARCH__PROVIDER"] = value

    answer = call(settings_from(tmp_path, env), "web_search", query="gliding")

    if value is None:
        assert DEFAULTS.search.provider is None and answer == "error: no tool web_search"
    else:
        assert answer == "1. Hit <https://example.org/>\n   found"


@pytest.mark.parametrize("value", [None, "url"], ids=["default", "url"])
def test_web_search_url_is_the_service_asked(tmp_path: Path, server: str,
                                             value: str | None) -> None:
    env = {"GLIDING_TOOLS__WEB__SEARCH__PROVIDER": "searxng"}
    if value is not None:
        env["GLIDING_TOOLS__WEB__SEARCH__URL"] = server

    answer = call(settings_from(tmp_path, env), "web_search", query="gliding")

    if value is None:
        assert DEFAULTS.search.url is None and answer == "error: no tool web_search"
    else:
        assert answer.startswith("1. Hit")


@pytest.mark.parametrize("value", ["0.3", "1.5"], ids=["0.3", "1.5"])
def test_web_search_timeout_s_bounds_a_search(tmp_path: Path, value: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A service that accepts the connection and never answers: the search gives up, and it
    is httpx's timeout, set to the key's value, that gives up (the default, 15 s, is too long
    to wait for in a test). What each request was sent with and how it failed is recorded,
    not the wall time, which a busy machine stretches."""
    sent: list[dict[str, float | None]] = []
    failed: list[httpx.HTTPError] = []

    class Recording(httpx.AsyncClient):
        async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
            sent.append(dict(request.extensions["timeout"]))
            try:
                return await super().send(request, **kwargs)
            except httpx.HTTPError as exc:
                failed.append(exc)
                raise

    monkeypatch.setattr(httpx, "AsyncClient", Recording)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        env = {"GLIDING_TOOLS__WEB__SEARCH__PROVIDER": "searxng",
               "GLIDING_TOOLS__WEB__SEARCH__URL": f"http://127.0.0.1:{silent.getsockname()[1]}",
               "GLIDING_TOOLS__WEB__SEARCH__TIMEOUT_S": value}
        answer = call(settings_from(tmp_path, env), "web_search", query="gliding")

    assert answer == ("error: web_search: the search service failed: no answer within "
                      f"{float(value):g}s (tools.web.search.timeout_s)")
    assert sent == [dict.fromkeys(("connect", "read", "write", "pool"), float(value))]
    assert len(failed) == 1 and isinstance(failed[0], httpx.ReadTimeout)
    assert DEFAULTS.search.timeout_s == 15.0
