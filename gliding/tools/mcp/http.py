"""The HTTP client of a streamable-HTTP MCP server, with bounded bodies.

The SDK reads a JSON answer whole (``response.aread()``) and bounds only one SSE event
(``max_sse_event_size``, which the session sets to the same limit); httpx2 inflates a gzip
body one network chunk at a time, unbounded. This client's transport hands the SDK each
response body decoded here in bounded steps (``gliding.tools.contentcoding``): a JSON body past
``limit`` bytes (raw or decoded) fails its request with a clear error, a stacked or unknown
coding too; an event stream may run long (its events are bounded by the SDK). An error raised
while the SDK reads a body is an ``httpx2.StreamError``, which the SDK turns into a JSON-RPC
error for that request: the call fails, the session stays.

A server a task declares (not the host's own ``mcp.servers``) is reached through the SSRF guard
of ``web_fetch`` (``gliding.tools.netguard``): only public addresses, or those
``tools.web.allow`` admits, checked on the address actually connected to.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio.lowlevel
import httpcore2
import httpx2

from gliding.errors import ToolError
from gliding.tools.contentcoding import ACCEPTED, Inflater, codings
from gliding.tools.netguard import GuardedBackend, Policy

CONNECT_S = 30.0  # the SDK's timeouts (create_mcp_http_client)
READ_S = 300.0  # a server may hold an event stream open


class Unreadable(httpx2.StreamError):
    """A response body the session will not read: too long, or in a refused coding."""


class _Bounded(httpx2.AsyncByteStream):
    """A response body, decoded in bounded steps; at most ``limit`` bytes (raw and decoded)
    unless it is an event stream (``limit`` None)."""

    def __init__(self, inner: httpx2.AsyncByteStream, found: tuple[str, ...],
                 limit: int | None, url: str) -> None:
        self._inner, self._found, self._limit, self._url = inner, found, limit, url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        inflater = self._inflater()
        raw = 0
        async for chunk in self._inner:
            raw += len(chunk)
            if self._limit is not None and raw > self._limit:
                raise self._too_long()
            if inflater is None:
                yield chunk
                continue
            try:
                for piece in inflater.feed(chunk):
                    yield piece
                    await anyio.lowlevel.checkpoint()
            except ToolError as exc:
                raise Unreadable(f"{self._url}: {exc.message}") from exc
            if inflater.cut:
                raise self._too_long()
        if inflater is not None:
            for piece in inflater.end():
                yield piece
            if inflater.cut:
                raise self._too_long()

    def _inflater(self) -> Inflater | None:
        """Raises:
            Unreadable: a stacked or unknown coding.
        """
        if not self._found:
            return None
        if len(self._found) > 1:
            raise Unreadable(f"{self._url}: the answer came with Content-Encoding "
                             f"{', '.join(self._found)!r}: more than one content coding is "
                             "refused")
        try:
            return Inflater(self._found[0], self._limit or sys.maxsize)
        except ToolError as exc:
            raise Unreadable(f"{self._url}: {exc.message}") from exc

    def _too_long(self) -> Unreadable:
        return Unreadable(f"the answer from {self._url} is longer than the {self._limit:,} "
                          "bytes one MCP message may take (8 × mcp.max_result_bytes + 1 MiB); "
                          "it was dropped unread")

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, whose response bodies come through ``_Bounded``."""

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Raises nothing of its own: a body it refuses fails when the SDK reads it, so the
        SDK answers that one request with an error (an exception here would end the
        session's task group)."""
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        found = codings(response.headers.get("content-encoding", ""))
        events = response.headers.get("content-type", "").lower().startswith(
            "text/event-stream")
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if not (found and k.lower() in ("content-encoding", "content-length"))]
        body = _Bounded(response.stream, found, None if events else self._limit,
                        str(request.url))
        return httpx2.Response(response.status_code, headers=headers, stream=body,
                               extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Guarded(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend, connecting only where ``netguard`` allows (the address
    is picked once per connection, so DNS rebinding gains nothing)."""

    def __init__(self, policy: Policy) -> None:
        self._guard = GuardedBackend(policy)
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore2.AsyncNetworkStream:
        address = await self._guard.pick(host, port)
        return await self._inner.connect_tcp(address, port, timeout=timeout,
                                             local_address=local_address,
                                             socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_transport(policy: Policy) -> httpx2.AsyncHTTPTransport:
    """httpx2's transport, no proxy from the environment, every connection through the guard."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(  # noqa: SLF001 - no hook for a backend
        ssl_context=httpx2.create_ssl_context(), max_connections=10,
        network_backend=_Guarded(policy))
    return transport


def http_client(headers: Mapping[str, str], limit: int,
                guard: Policy | None = None) -> httpx2.AsyncClient:
    """The client the SDK's streamable-HTTP transport is given: ``headers`` on every request,
    the SDK's timeouts, bounded bodies; with ``guard``, connections only where it allows."""
    inner = guarded_transport(guard) if guard is not None else None
    return httpx2.AsyncClient(headers={"Accept-Encoding": ACCEPTED, **headers},
                              timeout=httpx2.Timeout(CONNECT_S, read=READ_S),
                              transport=BoundedTransport(limit, inner))
