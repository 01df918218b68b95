"""web_fetch, web_search and the SSRF guard.

Every refusal is decided on addresses, without connecting: the guard's inner network backend is
a recorder that fails the test if a refused address is ever dialled. The only connections any
test opens go to a server on 127.0.0.1 that the test's own allow-list admits.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpcore
import pytest

from gliding.config.settings import Settings, WebSettings
from gliding.errors import ToolError
from gliding.tools.base import ToolContext
from gliding.tools.contentcoding import STEP, Inflater, codings
from gliding.tools.netguard import GuardedBackend, Policy
from gliding.tools.web import SearxngSearch, WebGroup, fetch, html_to_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: Gliding runs on it, and when web_fetch stops reading a body at its cap,
    httpx's inner body generators are left to the garbage collector, which trio (not asyncio)
    reports as a warning."""
    return "asyncio"

PAGE = """<html><head><title>The  Test &amp; Page</title><style>p{color:red}</style>
<script>alert('x')</script></head><body><h1>Heading</h1><p>First <a href="/next">next page</a>
paragraph.</p><ul><li>one</li><li>two</li></ul><p>Outcome: fine</p></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes, float]] = {}
    asked: list[dict[str, str]] = []  # the headers of every request, in order

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.asked.append(dict(self.headers.items()))
        path = self.path.split("?")[0]
        status, headers, body, delay = self.routes.get(path, (404, {}, b"missing", 0.0))
        if delay:
            time.sleep(delay)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading at its byte cap breaks the pipe: expected


@pytest.fixture
def server() -> Iterator[str]:
    """A local HTTP server on 127.0.0.1; its base URL."""
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        _Handler.routes = {}
        _Handler.asked = []


class Recorder(httpcore.AsyncNetworkBackend):
    """Records every address dialled; dials only loopback (the test server)."""

    def __init__(self) -> None:
        self.dialled: list[str] = []
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        self.dialled.append(host)
        assert host == "127.0.0.1", f"a test dialled {host}"
        return await self.inner.connect_tcp(host, port, timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def stub(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"no such host {host}")
        return table[host]
    return resolve


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Every GuardedBackend the web tools build dials through one recorder."""
    rec = Recorder()
    original = GuardedBackend.__init__

    def init(self: GuardedBackend, policy: Policy, resolve: Any = None, inner: Any = None) -> None:
        if resolve is None:
            original(self, policy, inner=rec)
        else:
            original(self, policy, resolve, inner=rec)

    monkeypatch.setattr(GuardedBackend, "__init__", init)
    return rec


def web(**changes: Any) -> WebSettings:
    return WebSettings().model_copy(update=changes)


# --- the guard ---------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://127.1.2.3:8080/x", "http://10.0.0.1/", "http://192.168.1.1/",
    "http://172.16.0.5/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://[::ffff:127.0.0.1]/", "http://[fd00::1]/", "http://[fe80::1]/", "http://0.0.0.0/",
    "http://100.64.0.1/", "http://[64:ff9b::a00:1]/", "http://224.0.0.1/",
])
async def test_private_loopback_link_local_and_metadata_addresses_are_refused(
    url: str, recorder: Recorder
) -> None:
    with pytest.raises(ToolError) as caught:
        await fetch(url, web(), resolve=stub({}))

    assert "refused to connect" in caught.value.message
    assert caught.value.hint and "tools.web.allow" in caught.value.hint
    assert recorder.dialled == []


async def test_a_name_resolving_to_a_private_address_is_refused(recorder: Recorder) -> None:
    resolve = stub({"intranet.example": ["10.1.2.3"], "mixed.example": ["192.168.0.7", "::1"]})

    for host in ("intranet.example", "mixed.example"):
        with pytest.raises(ToolError, match=f"refused to connect to {host}: .*private"):
            await fetch(f"https://{host}/", web(), resolve=resolve)
    with pytest.raises(ToolError, match="cannot resolve nowhere.example"):
        await fetch("http://nowhere.example/", web(), resolve=resolve)
    assert recorder.dialled == []


async def test_a_redirect_to_a_private_address_is_refused(server: str,
                                                          recorder: Recorder) -> None:
    _Handler.routes = {
        "/go": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"", 0.0),
        "/name": (302, {"Location": "http://metadata.internal/"}, b"", 0.0)}
    allowed = web(allow=("127.0.0.1",))
    resolve = stub({"metadata.internal": ["169.254.169.254"]})

    with pytest.raises(ToolError, match="169.254.169.254 is a link-local"):
        await fetch(f"{server}/go", allowed, resolve=resolve)
    with pytest.raises(ToolError, match="refused to connect to metadata.internal"):
        await fetch(f"{server}/name", allowed, resolve=resolve)
    assert set(recorder.dialled) == {"127.0.0.1"}  # only the allowed test server


async def test_the_checked_address_is_the_one_connected_to(server: str,
                                                           recorder: Recorder) -> None:
    """DNS rebinding: the name is resolved once per connection, by the guard, and the
    connection goes to the address it checked, not to a second answer."""
    answers = iter([["127.0.0.1"], ["10.0.0.1"], ["10.0.0.1"]])
    calls = []

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    _Handler.routes = {"/": (200, {"Content-Type": "text/plain"}, b"hello", 0.0)}
    port = server.rsplit(":", 1)[1]
    allowed = web(allow=("127.0.0.1", "rebind.example"))

    text = await fetch(f"http://rebind.example:{port}/", allowed, resolve=rebinding)

    assert text.endswith("hello") and calls == ["rebind.example"]
    assert recorder.dialled == ["127.0.0.1"]
    with pytest.raises(ToolError):  # the name is allowed, but a private answer is not dialled
        await fetch(f"http://rebind.example:{port}/", web(allow=("127.0.0.1",)),
                    resolve=rebinding)
    assert recorder.dialled == ["127.0.0.1"]


def test_policy_allows_listed_networks_and_hosts_only() -> None:
    policy = Policy.of(["10.0.0.0/8", "127.0.0.1", "Intranet.Example."])

    assert policy.refusal("10.9.9.9") is None and policy.refusal("127.0.0.1") is None
    assert policy.refusal("::ffff:10.1.1.1") is None  # the IPv4 it carries is allowed
    assert policy.refusal("127.0.0.2") == "127.0.0.2 is a loopback address"
    assert policy.refusal("93.184.216.34") is None  # public
    assert policy.host_allowed("intranet.example") and not policy.host_allowed("example")
    with pytest.raises(ValueError):
        Policy.of(["not a host/"])


def test_settings_refuse_a_malformed_allow_entry() -> None:
    with pytest.raises(ValueError, match="not an address, network or host name"):
        Settings.model_validate({"tools": {"web": {"allow": ["http://x/"]}}})
    assert Settings.model_validate(
        {"tools": {"web": {"allow": ["10.0.0.0/8", "::1", "wiki.internal"]}}}).tools.web.allow


@pytest.mark.parametrize("url", ["ftp://example.org/x", "file:///etc/passwd", "example.org",
                                 "http://user:pw@example.org/", "javascript:alert(1)"])
async def test_only_plain_http_and_https_urls_are_fetched(url: str, recorder: Recorder) -> None:
    with pytest.raises(ToolError, match="web_fetch: "):
        await fetch(url, web(), resolve=stub({"example.org": ["93.184.216.34"]}))
    assert recorder.dialled == []


# --- what web_fetch answers -------------------------------------------------------------------


async def test_an_html_page_comes_back_as_readable_text_with_its_links(
    server: str, recorder: Recorder
) -> None:
    _Handler.routes = {"/page": (200, {"Content-Type": "text/html; charset=utf-8"},
                                 PAGE.encode(), 0.0)}

    text = await fetch(f"{server}/page", web(allow=("127.0.0.1",)))

    lines = text.splitlines()
    assert lines[0] == f"GET {server}/page → 200 OK, text/html, {len(PAGE.encode())} bytes"
    assert lines[1] == "Title: The Test & Page"
    assert "Heading" in lines and "- one" in lines and "- two" in lines
    assert "First next page [1] paragraph." in text.replace("\n", " ")
    assert "alert" not in text and "color:red" not in text
    assert text.endswith(f"Links:\n[1] {server}/next")


async def test_the_body_is_cut_at_max_bytes_and_binary_is_not_shown(
    server: str, recorder: Recorder
) -> None:
    _Handler.routes = {
        "/big": (200, {"Content-Type": "text/plain"}, b"x" * 5000, 0.0),
        "/bin": (200, {"Content-Type": "application/octet-stream"}, b"\x00\x01" * 100, 0.0)}
    settings = web(allow=("127.0.0.1",), max_bytes=1024)

    big = await fetch(f"{server}/big", settings)
    binary = await fetch(f"{server}/bin", settings)

    assert big.splitlines()[2] == "x" * 1024 and big.endswith(
        "[page cut at 1024 bytes (tools.web.max_bytes)]")
    assert binary.endswith("[application/octet-stream content is not shown as text]")
    assert "\x00" not in binary


async def test_a_slow_page_is_a_timeout_error(server: str, recorder: Recorder) -> None:
    _Handler.routes = {"/slow": (200, {"Content-Type": "text/plain"}, b"late", 3.0)}

    # the 0.5 s timeout ended it: waited out, the 3 s page would have come back as "late"
    with pytest.raises(ToolError, match=r"took more than 0.5s \(tools.web.timeout_s\)"):
        await fetch(f"{server}/slow", web(allow=("127.0.0.1",), timeout_s=0.5))


async def test_too_many_redirects_is_an_error(server: str, recorder: Recorder) -> None:
    _Handler.routes = {"/loop": (302, {"Location": "/loop"}, b"", 0.0)}

    with pytest.raises(ToolError, match=r"more than 2 redirects \(tools.web.max_redirects\)"):
        await fetch(f"{server}/loop", web(allow=("127.0.0.1",), max_redirects=2))


def test_html_to_text_drops_markup_and_keeps_structure() -> None:
    title, text, links = html_to_text(PAGE, "https://example.org/a/")

    assert title == "The Test & Page"
    assert links == ["https://example.org/next"]
    assert text.splitlines()[0] == "Heading"


# --- content codings: bounded decoding ----------------------------------------------------


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


@pytest.fixture(scope="module")
def zeros_gz() -> bytes:
    """64 MiB of zeros, gzipped: about 64 KB on the wire."""
    return _gzip(bytes(64 << 20))


async def test_gzip_and_deflate_pages_are_decoded_and_the_request_asks_for_them(
    server: str, recorder: Recorder
) -> None:
    text = ("hello, compressed world\n" * 200).encode()
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    _Handler.routes = {
        "/gz": (200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
                _gzip(text), 0.0),
        "/zlib": (200, {"Content-Type": "text/plain", "Content-Encoding": "deflate"},
                  zlib.compress(text), 0.0),
        "/raw": (200, {"Content-Type": "text/plain", "Content-Encoding": "Deflate, identity"},
                 raw_deflate.compress(text) + raw_deflate.flush(), 0.0),
        "/members": (200, {"Content-Type": "text/plain", "Content-Encoding": "x-gzip"},
                     _gzip(text[:100]) + _gzip(text[100:]), 0.0)}
    settings = web(allow=("127.0.0.1",))

    for path in ("/gz", "/zlib", "/raw", "/members"):
        answer = await fetch(f"{server}{path}", settings)
        head, _, body = answer.partition("\n\n")
        assert body == text.decode(), path
        assert re.search(rf"text/plain, {len(text)} bytes \((x-)?(gzip|deflate), \d+ on the "
                         r"wire\)$", head), head
    assert {h.get("Accept-Encoding") for h in _Handler.asked} == {"gzip, deflate"}


async def test_a_gzip_bomb_is_inflated_no_further_than_max_bytes(
    server: str, recorder: Recorder, zeros_gz: bytes
) -> None:
    """64 KB on the wire that inflate to 64 MiB: reading stops at max_bytes of decoded text,
    and memory stays near it (httpx inflated a whole 64 KB network chunk at once: 64 MiB)."""
    _Handler.routes = {"/bomb": (200, {"Content-Type": "text/plain",
                                       "Content-Encoding": "gzip"}, zeros_gz, 0.0)}
    settings = web(allow=("127.0.0.1",), max_bytes=1 << 20)

    tracemalloc.start()
    try:
        answer = await fetch(f"{server}/bomb", settings)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert peak < 16 << 20, f"peak {peak >> 20} MiB"  # never inflated whole
    assert re.search(rf"text/plain, {1 << 20} bytes \(gzip, \d+ on the wire\)$",
                     answer.splitlines()[0])
    assert answer.endswith(f"[page cut at {1 << 20} bytes (tools.web.max_bytes)]")


async def test_a_stacked_coding_is_refused_at_once(server: str, recorder: Recorder,
                                                   zeros_gz: bytes) -> None:
    """The attack: a small page sent as ``gzip, gzip`` (here 64 MiB twice gzipped, a few
    hundred bytes on the wire) is refused before anything is inflated."""
    bomb = _gzip(zeros_gz)
    assert len(bomb) < 4096
    _Handler.routes = {"/bomb": (200, {"Content-Type": "text/html",
                                       "Content-Encoding": "gzip, gzip"}, bomb, 0.0)}

    tracemalloc.start()
    try:
        with pytest.raises(ToolError) as caught:
            await fetch(f"{server}/bomb", web(allow=("127.0.0.1",)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert caught.value.message == (
        f"web_fetch: {server}/bomb: the page came with Content-Encoding 'gzip, gzip': more "
        "than one content coding is refused (a page has no need of it; a compression bomb "
        "does)")
    assert peak < 4 << 20  # refused before anything was inflated


async def test_an_unknown_or_corrupt_coding_is_a_clear_error(server: str,
                                                             recorder: Recorder) -> None:
    _Handler.routes = {
        "/br": (200, {"Content-Type": "text/plain", "Content-Encoding": "br"}, b"\x0b\x02", 0.0),
        "/bad": (200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
                 b"\x1f\x8b not gzip at all", 0.0)}
    settings = web(allow=("127.0.0.1",))

    with pytest.raises(ToolError, match="came with Content-Encoding 'br', which web_fetch does "
                                        r"not decode \(it asks for gzip, deflate\)"):
        await fetch(f"{server}/br", settings)
    with pytest.raises(ToolError, match="the page is not valid gzip data"):
        await fetch(f"{server}/bad", settings)


def test_the_inflater_yields_bounded_steps_up_to_its_limit_however_the_input_is_cut() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    packed = _gzip(data)
    for size in (1, 7, 4096, len(packed)):
        inflater = Inflater("gzip", 300_000)
        pieces = [p for i in range(0, len(packed), size)
                  for p in inflater.feed(packed[i:i + size])]
        pieces += list(inflater.end())
        assert max(len(p) for p in pieces) <= STEP
        assert b"".join(pieces) == data[:300_000] and inflater.cut
    whole = Inflater("gzip", len(data))
    out = b"".join([*whole.feed(packed), *whole.end()])
    assert out == data and not whole.cut  # exactly the limit is not a cut
    assert codings(" gzip , Identity,") == ("gzip",)
    assert codings("identity") == ()


@pytest.mark.parametrize("url", ["http://0177.0.0.1/", "http://[::1/", "http://xn--/",
                                 "http://\x00x/", "http://256.1.1.1/"])
async def test_low_web_fetch_invalid_url(url: str, recorder: Recorder) -> None:
    """A URL httpx cannot parse is a tool error the model reads, not httpx's InvalidURL (or
    idna's or urllib's ValueError) escaping the tool."""
    with pytest.raises(ToolError, match="is not a URL web_fetch can open") as caught:
        await fetch(url, web(), resolve=stub({}))
    assert caught.value.hint and "http://" in caught.value.hint
    assert recorder.dialled == []


# --- web_search and the group ----------------------------------------------------------------


async def test_web_search_asks_the_searxng_json_api(server: str) -> None:
    results = {"results": [{"title": f"Hit {i}", "url": f"https://example.org/{i}",
                            "content": f"snippet {i}"} for i in range(5)]}
    _Handler.routes = {"/search": (200, {"Content-Type": "application/json"},
                                   json.dumps(results).encode(), 0.0)}
    group = WebGroup(WebSettings.model_validate({"search": {"provider": "searxng",
                                                            "url": server}}))
    ctx = ToolContext(workspace=None, settings=Settings().tools)  # type: ignore[arg-type]

    assert [t.name for t in group.tools] == ["web_fetch", "web_search"]
    tool = next(t for t in group.tools if t.name == "web_search")
    answer = await tool.run({"query": "gliding  agents", "k": 2}, ctx)

    assert answer == ("1. Hit 0 <https://example.org/0>\n   snippet 0\n"
                      "2. Hit 1 <https://example.org/1>\n   snippet 1")
    with pytest.raises(ToolError, match="k must be 1 to 20"):
        await tool.run({"query": "x", "k": 50}, ctx)


def test_without_a_search_service_the_group_offers_web_fetch_only() -> None:
    assert [t.name for t in WebGroup(WebSettings()).tools] == ["web_fetch"]


async def test_a_failing_search_service_is_a_tool_error(server: str) -> None:
    _Handler.routes = {"/search": (500, {}, b"down", 0.0)}

    with pytest.raises(ToolError, match="the search service answered 500"):
        await SearxngSearch(server, 5, "test").search("q", 3)
