"""One MCP server's SDK session, run on an event loop of its own.

The SDK's clients (stdio and streamable HTTP) are async context managers holding task groups:
entered in a group's ``open`` and left in its ``aclose``, they would tie the job's own cancel
scopes to theirs (the composition root closes tool groups inside a shielded scope, which anyio
refuses to unwind across) and a failing transport task could cancel the job. So each server
gets a thread with an event loop (an anyio blocking portal); the session lives there, and
the job's loop only hands it calls through worker threads. A server that fails, hangs or dies
costs its own thread and nothing else.

    start()   spawn (or connect), handshake, list every tool, within the startup timeout
    call()    one tools/call within its timeout; a cancelled caller cancels it there too
    aclose()  leave the session (the SDK closes stdin, then terminates the process group
              and kills it), stop the loop, join the thread; harmless twice

One message from the server is bounded before it is parsed (``message_limit`` of
``mcp.max_result_bytes``): over stdio by our own transport (``stdio.py``, in place of the SDK's,
whose reader is quadratic in a line's length), over HTTP by the client's transport
(``http.py``) and the SDK's SSE event limit. A longer answer fails its own call only.

Errors come out as ``ToolError`` with a message the model can act on; ``gone`` says why the
server is no longer there (a stdio server whose connection closed has exited: every later
call fails at once with the same reason, and likewise an HTTP server whose session closed;
there is no restart, see docs/mcp.md).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import AbstractContextManager, AsyncExitStack, suppress
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread
import jsonschema.validators  # noqa: F401 - see below
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from gliding.core.text import one_line
from gliding.errors import ToolError
from gliding.tools.mcp.confined import Confined
from gliding.tools.mcp.stdio import DROPPED, message_limit, stdio_client
from gliding.tools.netguard import Policy

# The SDK imports jsonschema lazily, at the first result it checks against a tool's output
# schema: on the server's loop, where that import (about 80 ms of CPU, several times that on a
# loaded machine) would hold every other call to the server. Importing it here does it once,
# with this module.

MAX_PAGES = 100  # tools/list pages read at most (a server that never stops paging)
STOP_S = 15.0  # the SDK's own shutdown is bounded (stdin close, SIGTERM, SIGKILL): ~7 s
STDERR_TAIL = 4096  # bytes of a stdio server's stderr read when it fails ...
STDERR_LINES = 4  # ... of which its last lines are quoted ...
STDERR_CHARS = 400  # ... in this many characters at most
# a line that says what went wrong ("Error: Cannot find module", a Python exception's last line)
_ERROR_LINE = re.compile(r"error|exception|fatal|denied|not found", re.IGNORECASE)
CALLS_AT_ONCE = 8  # worker threads one server's calls may hold at once
CLOSED = "Connection closed"  # the SDK's message when a session's connection has ended
SDK_UNREAD = "Failed to parse JSON response"  # the SDK's, when an HTTP answer's body failed


class StdioTarget:
    """A program to start: the exact environment it gets (the SDK adds HOME, LOGNAME, PATH,
    SHELL, TERM and USER from ours when we do not set them), and with ``confined`` the command
    sandbox it runs in (a task's own server: ``confined.py``; then nothing is added)."""

    def __init__(self, command: str, args: Sequence[str], env: Mapping[str, str],
                 cwd: Path | None, confined: Confined | None = None) -> None:
        self.command, self.args, self.env, self.cwd = command, tuple(args), dict(env), cwd
        self.confined = confined


class HttpTarget:
    """A streamable HTTP endpoint and the headers sent with every request; with ``guard``
    (a task's own server), reached only at addresses the SSRF guard allows."""

    def __init__(self, url: str, headers: Mapping[str, str],
                 guard: Policy | None = None) -> None:
        self.url, self.headers, self.guard = url, dict(headers), guard


Target = StdioTarget | HttpTarget


class Session:
    """One server, started by ``start`` and stopped by ``aclose`` (from any task)."""

    def __init__(self, name: str, target: Target, *, startup_timeout_s: float,
                 max_message_bytes: int = message_limit(1 << 20)) -> None:
        self.name = name
        self.target = target
        self.startup_timeout_s = startup_timeout_s
        self.max_message_bytes = max_message_bytes  # one JSON-RPC message, before parsing
        self.gone: str | None = None  # why the server is no longer there; None while it is
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._served: Future[None] | None = None
        self._client: Client | None = None  # lives on the portal's loop
        self._closing: anyio.Event | None = None  # likewise
        self._stderr: IO[bytes] | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # made on the job's loop
        self._stopping = False  # aclose has begun: a call cut off by it is not a crash

    @property
    def stdio(self) -> bool:
        return isinstance(self.target, StdioTarget)

    async def start(self) -> list[types.Tool]:
        """Start the server and list its tools.

        Raises:
            ToolError: it did not start, answer the handshake or list its tools within
                ``startup_timeout_s``; the message says why (a stdio server's last stderr).
        """
        if self._portal is not None:
            raise ToolError(f"server {self.name} is started already")
        self._limiter = anyio.CapacityLimiter(CALLS_AT_ONCE)
        try:
            if self.stdio:
                self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by aclose
            self._portal_cm = start_blocking_portal(name=f"gliding-mcp-{self.name}")
            self._portal = await anyio.to_thread.run_sync(self._portal_cm.__enter__)
            self._served, tools = await anyio.to_thread.run_sync(
                self._portal.start_task, self._serve)
        except BaseException as exc:
            why = self._why(exc)  # before aclose drops the server's stderr
            with anyio.CancelScope(shield=True):
                await self.aclose()
            if isinstance(exc, Exception):
                raise ToolError(f"server {self.name} did not start: {why}") from exc
            raise
        return list(tools)

    async def call(self, tool: str, arguments: dict[str, Any],
                   timeout_s: float) -> types.CallToolResult:
        """One ``tools/call``; an ``isError`` result comes back as it is.

        Raises:
            ToolError: the server is gone (or goes during the call), the call timed out, the
                server answered with a protocol error, or its answer was malformed.
        """
        if self.gone is not None:
            raise ToolError(self.gone, hint="do not call this server's tools again")
        portal = self._portal
        if portal is None or self._client is None or self._limiter is None:
            raise ToolError(f"server {self.name} is not running")
        submitted: list[Future[types.CallToolResult]] = []

        def submit_and_wait() -> types.CallToolResult:
            future = portal.start_task_soon(self._call, tool, arguments, timeout_s)
            submitted.append(future)
            return future.result()

        try:
            return await anyio.to_thread.run_sync(submit_and_wait, abandon_on_cancel=True,
                                                  limiter=self._limiter)
        except TimeoutError as exc:
            raise ToolError(f"{tool} timed out after {timeout_s:g}s (server {self.name} may "
                            "still be working on it)",
                            hint="try smaller input, or raise mcp.timeout_s") from exc
        except MCPError as exc:
            raise self._call_error(tool, exc) from exc
        except ValidationError as exc:
            raise ToolError(f"{tool}: server {self.name} sent a malformed result: "
                            f"{exc.errors()[0]['msg']}") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError,
                CancelledError) as exc:  # the portal stopped under the call (closing time)
            raise ToolError(f"server {self.name} is not running "
                            f"({type(exc).__name__}: {exc})") from exc
        finally:
            for future in submitted:
                future.cancel()  # a caller cancelled mid-call cancels the call; done: no-op

    def _call_error(self, tool: str, exc: MCPError) -> ToolError:
        """What an MCP error answering a call of ``tool`` means for the model; a closed
        connection also marks the server ``gone``."""
        unread = exc.code == types.PARSE_ERROR and exc.message.startswith(SDK_UNREAD)
        if exc.data == DROPPED or unread:  # the answer was not read; the session goes on
            text = exc.message if exc.data == DROPPED else \
                f"its answer could not be read: {exc.message}"
            return ToolError(f"{tool}: server {self.name}: {text}",
                             hint="ask for less at once (a smaller page, range or query)")
        closed = exc.code == types.CONNECTION_CLOSED and (
            self.stdio or exc.message == CLOSED)  # else HTTP: only this call's stream failed
        if closed and self._stopping:
            return ToolError(f"{tool}: server {self.name} was stopped while it ran (the job is "
                             "closing its tools)")
        if closed:  # the session is over for good
            tail = self._stderr_tail(errors_only=True)
            self.gone = (f"server {self.name} exited: its connection closed"
                         + (f"; its stderr ended: {tail}" if tail else "")
                         if self.stdio else
                         f"server {self.name} is gone: its connection closed")
            return ToolError(self.gone, hint="do not call this server's tools again")
        if exc.code == types.CONNECTION_CLOSED:
            return ToolError(f"{tool}: server {self.name}'s answer was lost: {exc.message}")
        return ToolError(f"{tool}: server {self.name} refused the call: {exc.message} "
                         f"(MCP error {exc.code})")

    async def aclose(self) -> None:
        """Stop the server and the loop; wait until the process is gone. Raises nothing."""
        portal, portal_cm, served = self._portal, self._portal_cm, self._served
        self._portal = self._portal_cm = self._served = None
        self._stopping = portal is not None
        if portal_cm is not None and portal is not None:
            await anyio.to_thread.run_sync(self._stop, portal, portal_cm, served)
        elif portal_cm is not None:  # the thread never came up: nothing runs there
            with suppress(Exception):
                portal_cm.__exit__(None, None, None)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # --- on the portal's loop -------------------------------------------------------------

    async def _serve(self, *, task_status: TaskStatus[list[types.Tool]]) -> None:
        """Enter the session, list the tools, report them, then hold it until closing."""
        self._closing = anyio.Event()
        started = False
        with anyio.CancelScope(deadline=anyio.current_time() + self.startup_timeout_s) as scope:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._connect())
                tools = await _list_tools(client)
                scope.deadline = math.inf
                self._client = client
                started = True
                task_status.started(tools)
                await self._closing.wait()
                self._client = None
        if not started:
            raise TimeoutError(f"no answer within {self.startup_timeout_s:g}s "
                               "(mcp.startup_timeout_s)")

    def _connect(self) -> Client:
        target = self.target
        if isinstance(target, StdioTarget):
            params = StdioServerParameters(command=target.command, args=list(target.args),
                                           env=target.env, cwd=target.cwd)
            return Client(stdio_client(params, name=self.name, limit=self.max_message_bytes,
                                       errlog=self._stderr, confined=target.confined))
        from gliding.tools.mcp.http import http_client  # imports httpx2, the SDK's HTTP client

        http = http_client(target.headers, self.max_message_bytes, target.guard)
        return Client(_OwningTransport(
            streamable_http_client(target.url, http_client=http,
                                   max_sse_event_size=self.max_message_bytes), http.aclose))

    async def _call(self, tool: str, arguments: dict[str, Any],
                    timeout_s: float) -> types.CallToolResult:
        client = self._client
        if client is None:
            raise MCPError(types.CONNECTION_CLOSED, "the session is closing")
        with anyio.fail_after(timeout_s):
            return await client.call_tool(tool, arguments)

    # --- on a worker thread ---------------------------------------------------------------

    def _stop(self, portal: BlockingPortal, portal_cm: AbstractContextManager[BlockingPortal],
              served: Future[None] | None) -> None:
        # A failure here is not the job's: whatever happens, the portal stops and joins.
        with suppress(Exception):
            closing = self._closing
            if served is not None and closing is not None:
                portal.call(closing.set)
                served.exception(timeout=STOP_S)  # the session's own end, error or not
        with suppress(RuntimeError):  # stopped already
            portal.call(portal.stop, True)  # cancel what is left (calls in flight)
        portal_cm.__exit__(None, None, None)  # joins the thread

    def _why(self, exc: BaseException) -> str:
        """A one-line reason: the innermost error, plus a stdio server's last stderr line."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        text = str(exc) or type(exc).__name__
        target = self.target
        if (isinstance(exc, OSError) and exc.errno is not None
                and isinstance(target, StdioTarget)):  # spawning failed (not TimeoutError)
            text = f"cannot run {target.command!r}: {exc.strerror or exc}"
        tail = self._stderr_tail()
        return f"{text}; its stderr ended: {tail}" if tail else text

    def _stderr_tail(self, *, errors_only: bool = False) -> str:
        """The last error line the server wrote to stderr, else (unless ``errors_only``) its
        last lines; read without moving the file offset it shares with the server."""
        if self._stderr is None:
            return ""
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, STDERR_TAIL, max(0, size - STDERR_TAIL))
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in data.decode("utf-8", errors="replace").splitlines()]
        lines = [line for line in lines if line]
        errors = [line for line in lines if _ERROR_LINE.search(line)]
        if errors:
            return one_line(errors[-1], STDERR_CHARS)
        return "" if errors_only else one_line(" | ".join(lines[-STDERR_LINES:]), STDERR_CHARS)


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class _OwningTransport:
    """A transport that closes the HTTP client it was given when it closes."""

    def __init__(self, inner: Any, close: Callable[[], Any]) -> None:
        self._inner, self._close = inner, close

    async def __aenter__(self) -> Any:
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            await self._close()
