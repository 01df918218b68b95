"""Web tools for research jobs: ``web_fetch(url)`` and, where a search service is configured,
``web_search(query, k?)``.

``web_fetch`` GETs an http(s) URL through the SSRF guard (``netguard``: only public addresses
unless ``tools.web.allow`` says more, checked on the address actually connected to, on every
redirect), within ``tools.web.timeout_s`` for the whole fetch and ``tools.web.max_bytes`` of
body (raw bytes read, and bytes decoded: a gzip or deflate body is inflated in bounded steps by
``contentcoding``, a stacked or unknown coding refused), and answers with the final URL,
status, type and the page as text (HTML made readable: scripts, styles and markup dropped,
headings, paragraphs and list items on lines of their own, links numbered at the end). Like
every tool result the answer is archived whole in L0 and a large one reaches the prompt as its
summary and IRI. Binary types are described, not shown.

``web_search`` asks a ``SearchBackend``; the one shipped is SearXNG's JSON API
(``tools.web.search.url``, https://docs.searxng.org/dev/search_api.html). The search service
is the operator's choice, so its URL is not subject to the guard. Without one, the web group
offers ``web_fetch`` only.
"""

from __future__ import annotations

import html
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpcore
import httpx

from gliding.config.settings import WebSettings
from gliding.core.text import clip, one_line
from gliding.errors import ToolError
from gliding.tools.base import Tool, ToolContext, ToolGroup, prop, schema
from gliding.tools.contentcoding import ACCEPTED, Inflater, codings
from gliding.tools.netguard import (
    GuardedBackend,
    Policy,
    Resolver,
    check_url_host,
    system_resolver,
)

MAX_LINKS = 40
MAX_SEARCH_K = 20
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml",
              "application/ld+json", "application/rss+xml", "application/atom+xml")
_BLOCK = {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
          "footer", "main", "aside", "blockquote", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
          "dt", "dd", "figcaption", "hr"}
_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str


class SearchBackend(Protocol):
    """A web search service."""

    name: str

    async def search(self, query: str, k: int) -> list[SearchHit]:
        """At most ``k`` hits, best first. Raises ToolError when the service fails."""
        ...


class SearxngSearch:
    """SearXNG's JSON API: ``GET <url>/search?q=...&format=json``."""

    name = "searxng"

    def __init__(self, url: str, timeout_s: float, user_agent: str) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.user_agent = user_agent

    async def search(self, query: str, k: int) -> list[SearchHit]:
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False,
                                         verify=await ssl_context()) as client:
                response = await client.get(f"{self.url}/search",
                                            params={"q": query, "format": "json"},
                                            headers={"User-Agent": self.user_agent})
        except httpx.TimeoutException as exc:  # its message is often empty
            raise ToolError(f"web_search: the search service failed: no answer within "
                            f"{self.timeout_s:g}s (tools.web.search.timeout_s)") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"web_search: the search service failed: {exc}") from exc
        if response.status_code != 200:
            raise ToolError(f"web_search: the search service answered {response.status_code}")
        try:
            results = response.json().get("results", [])
        except (json.JSONDecodeError, AttributeError) as exc:
            raise ToolError("web_search: the search service sent no JSON results") from exc
        hits = []
        for item in results[:k] if isinstance(results, list) else []:
            if isinstance(item, dict) and isinstance(item.get("url"), str):
                hits.append(SearchHit(one_line(str(item.get("title") or ""), 200),
                                      item["url"], one_line(str(item.get("content") or ""), 400)))
        return hits


def search_backend(settings: WebSettings) -> SearchBackend | None:
    """The search service the settings name, or None."""
    s = settings.search
    if s.provider == "searxng" and s.url:
        return SearxngSearch(s.url, s.timeout_s, settings.user_agent)
    return None


class _Text(HTMLParser):
    """HTML to readable text: block elements on lines of their own, links collected."""

    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.parts: list[str] = []
        self.links: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False
        self._open_link = 0  # the number of the link being read, 0 outside one

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n")
        if tag == "li" and not self._skip:
            self.parts.append("- ")
        if tag == "a" and not self._skip:
            href = dict(attrs).get("href")
            if href and not href.startswith(("#", "javascript:", "mailto:")) \
                    and len(self.links) < MAX_LINKS:
                self.links.append(urljoin(self.base, href))
                self._open_link = len(self.links)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK:
            self.parts.append("\n")
        if tag == "a" and self._open_link and not self._skip:
            self.parts.append(f" [{self._open_link}]")
            self._open_link = 0

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip()


def html_to_text(page: str, base: str) -> tuple[str, str, list[str]]:
    """The title, readable text and links (absolute) of an HTML page."""
    parser = _Text(base)
    parser.feed(page)
    parser.close()
    return " ".join(html.unescape(parser.title).split()), parser.text(), parser.links


_SSL: list[ssl.SSLContext] = []  # httpx's default context, made once a process


async def ssl_context() -> ssl.SSLContext:
    """httpx's default SSL context, made once a process on a worker thread: loading the CA
    bundle takes 20-270 ms of CPU, which would stop every job's event loop."""
    if not _SSL:
        _SSL[:] = [await anyio.to_thread.run_sync(httpx.create_ssl_context)]
    return _SSL[0]


def guarded_transport(policy: Policy, resolve: Resolver, context: ssl.SSLContext
                      ) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through the SSRF guard."""
    transport = httpx.AsyncHTTPTransport(verify=context, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - httpx has no hook for it
        ssl_context=context, max_connections=4,
        network_backend=GuardedBackend(policy, resolve))
    return transport


async def fetch(url: str, settings: WebSettings, *, resolve: Resolver = system_resolver) -> str:
    """``web_fetch``'s answer for ``url``.

    Raises:
        ToolError: a URL that is not http(s) or cannot be parsed, an address the guard refuses,
            a timeout, too many redirects, a failed request, or a body in a content coding
            that is stacked, unknown or corrupt.
    """
    url = url.strip()
    host = _checked_host(url)
    policy = Policy.of(settings.allow)
    check_url_host(host, policy)
    context = await ssl_context()
    try:
        with anyio.fail_after(settings.timeout_s):
            async with httpx.AsyncClient(
                    transport=guarded_transport(policy, resolve, context), follow_redirects=True,
                    max_redirects=settings.max_redirects, trust_env=False,
                    timeout=settings.timeout_s,
                    headers={"User-Agent": settings.user_agent, "Accept-Encoding": ACCEPTED,
                             "Accept": "text/html,text/plain,application/json;q=0.9,*/*;q=0.5"},
            ) as client, client.stream("GET", url) as response:
                page = await _read(response, settings.max_bytes, url)
    except TimeoutError as exc:
        raise ToolError(f"web_fetch: {url} took more than {settings.timeout_s:g}s "
                        "(tools.web.timeout_s)") from exc
    except httpx.TooManyRedirects as exc:
        raise ToolError(f"web_fetch: more than {settings.max_redirects} redirects "
                        "(tools.web.max_redirects)") from exc
    except httpx.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ToolError):  # the guard refused a connection, maybe a redirect's
            raise ToolError(cause.message, hint=cause.hint) from exc
        raise ToolError(f"web_fetch: {url} failed: {exc}") from exc
    except (httpx.InvalidURL, UnicodeError) as exc:  # a redirect to a URL httpx cannot parse
        raise ToolError(f"web_fetch: {url} failed: {clip(str(exc), 300)}") from exc
    return await anyio.to_thread.run_sync(_render, response, page, settings, url)


def _checked_host(url: str) -> str:
    """The host of ``url``, once httpx can parse it as an http(s) URL without credentials.

    Raises:
        ToolError: any other URL (a bad IPv4 such as ``0177.0.0.1``, a broken IPv6 bracket, a
            control character, an invalid international name, ...).
    """
    try:
        parts = urlsplit(url)
        host = httpx.URL(url).host  # the IDNA decoding of an xn-- name may fail here too
    except (httpx.InvalidURL, ValueError) as exc:  # idna's errors are ValueErrors too
        raise ToolError(f"web_fetch: {clip(url, 200)!r} is not a URL web_fetch can open: "
                        f"{clip(str(exc), 200)}",
                        hint="give a plain http:// or https:// URL with a host name or a "
                             "dotted IPv4 address") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or not host:
        raise ToolError(f"web_fetch: {clip(url, 200)!r} is not an http:// or https:// URL")
    if parts.username or parts.password:
        raise ToolError("web_fetch: URLs with a user name or password are refused")
    return parts.hostname


@dataclass(frozen=True)
class _Page:
    """A body as web_fetch read it: decoded, whether it was cut, and how it came."""

    body: bytes
    cut: bool
    coding: str | None = None  # the content coding it came in, None for none
    wire: int = 0  # raw bytes read


async def _read(response: httpx.Response, max_bytes: int, url: str) -> _Page:
    """The body of ``url``: at most ``max_bytes`` raw bytes read and ``max_bytes`` decoded.

    The raw stream is read (httpx would inflate each chunk whole, unbounded) and its coding
    decoded here in bounded steps, with a checkpoint between steps.

    Raises:
        ToolError: a stacked, unknown or corrupt content coding.
    """
    try:
        return await _read_coded(response, max_bytes)
    except ToolError as exc:
        raise ToolError(f"web_fetch: {url}: {exc.message}", hint=exc.hint) from exc


async def _read_coded(response: httpx.Response, max_bytes: int) -> _Page:
    """``_read`` without the URL in its errors."""
    found = codings(response.headers.get("content-encoding", ""))
    if len(found) > 1:
        raise ToolError(f"the page came with Content-Encoding {', '.join(found)!r}: more than "
                        "one content coding is refused (a page has no need of it; a "
                        "compression bomb does)")
    inflater = Inflater(found[0], max_bytes) if found else None
    body, wire, cut = bytearray(), 0, False
    async for chunk in response.aiter_raw():
        room = max_bytes - wire
        wire += min(len(chunk), room)
        if inflater is None:
            body += chunk[:room]
        else:
            for piece in inflater.feed(chunk[:room]):
                body += piece
                await anyio.lowlevel.checkpoint()
        if len(chunk) > room:
            cut = True
            break
        if inflater is not None and inflater.cut:
            break
    if inflater is not None:
        if not cut:
            for piece in inflater.end():
                body += piece
        cut = cut or inflater.cut
    return _Page(bytes(body), cut, found[0] if found else None, wire)


def _render(response: httpx.Response, page: _Page, settings: WebSettings, asked: str) -> str:
    final = str(response.url)
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    body = page.body
    size = f"{len(body)} bytes" + (f" ({page.coding}, {page.wire} on the wire)"
                                   if page.coding else "")
    head = f"GET {final} → {response.status_code} {response.reason_phrase}, " \
           f"{kind or 'no content type'}, {size}"
    if final != asked:
        head += f" (asked for {asked})"
    lines = [head]
    if kind and not kind.startswith(TEXT_TYPES):
        lines.append(f"[{kind} content is not shown as text]")
        return "\n".join(lines)
    text = body.decode(response.encoding or "utf-8", errors="replace")
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:2000]):
        title, text, links = html_to_text(text, final)
        if title:
            lines.append(f"Title: {title}")
        lines += ["", text]
        if links:
            lines += ["", "Links:", *(f"[{n}] {link}" for n, link in enumerate(links, 1))]
    else:
        lines += ["", text]
    if page.cut:
        lines.append(f"[page cut at {settings.max_bytes} bytes (tools.web.max_bytes)]")
    return "\n".join(lines)


WEB_FETCH = schema(["url"], url=prop("string", "http:// or https:// URL to fetch"))
WEB_SEARCH = schema(["query"], query=prop("string", "what to search the web for"),
                    k=prop("integer", f"how many results (1-{MAX_SEARCH_K}, default 8)"))


class WebGroup(ToolGroup):
    """The "web" group: web_fetch, and web_search when a search service is configured."""

    def __init__(self, settings: WebSettings, *, backend: SearchBackend | None = None,
                 resolve: Resolver = system_resolver) -> None:
        self.settings = settings
        self.backend = backend if backend is not None else search_backend(settings)
        self.resolve = resolve
        tools = [Tool("web_fetch", "Fetch a web page (http/https) and return it as text.",
                      WEB_FETCH, self._fetch)]
        if self.backend is not None:
            tools.append(Tool("web_search", "Search the web; returns titles, URLs, snippets.",
                              WEB_SEARCH, self._search))
        super().__init__("web", tools, "fetch web pages and search the web")

    async def _fetch(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return await fetch(str(args["url"]), self.settings, resolve=self.resolve)

    async def _search(self, args: dict[str, Any], ctx: ToolContext) -> str:
        assert self.backend is not None  # only offered with one
        query = " ".join(str(args["query"]).split())
        if not query:
            raise ToolError("web_search: the query is empty")
        k = int(args.get("k") or 8)
        if not 1 <= k <= MAX_SEARCH_K:
            raise ToolError(f"web_search: k must be 1 to {MAX_SEARCH_K}, got {k}")
        hits = await self.backend.search(clip(query, 500), k)
        if not hits:
            return f"no results for {query!r}"
        return "\n".join(render_hits(hits))


def render_hits(hits: Sequence[SearchHit]) -> list[str]:
    return [f"{n}. {h.title or '(no title)'} <{h.url}>" + (f"\n   {h.snippet}" if h.snippet
                                                           else "")
            for n, h in enumerate(hits, 1)]
