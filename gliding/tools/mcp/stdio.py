"""The stdio transport to an MCP server, with a bound on one message before it is parsed.

The SDK's ``stdio_client`` splits the server's stdout with ``(buffer + chunk).split("\\n")``:
one line (one JSON-RPC message) of N bytes costs O(N²) copying and is held whole, however big,
before ``mcp.max_result_bytes`` can apply; past ~100 MB the session is dead for every later
call. This transport is the SDK's (the same spawn and the same shutdown sequence, from its own
helpers: ``mcp`` is pinned in pyproject.toml; a task's own server is spawned inside the job's
command sandbox instead, by ``confined.py``), with the reader replaced:

- ``Lines`` splits the raw bytes in one pass over each chunk and keeps at most ``limit`` bytes
  of the line being read. A longer line is dropped as it arrives (its first and last bytes are
  kept to find its id), never held whole.
- ``Replies`` turns what ``Lines`` found into what the SDK's session reads. It knows the
  requests still waiting for an answer (the writer tells it), so a message it cannot deliver
  (too long, or unparsable: nested deeper than the JSON parser goes, say) becomes a JSON-RPC
  error for the request it answers, at once: the call fails with a clear message and the
  session goes on serving the next call. The id comes from the message's own top level when
  it can be read there; an overlong message whose id cannot be found fails every request still
  waiting (their late answers are then ignored by the SDK); a too-long notification or
  request from the server is dropped with a log line.

``message_limit`` derives the bound from ``mcp.max_result_bytes``: a result is rendered to at
most that much text, but its JSON carries escapes, structured content and images beside it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
import structlog
from mcp import StdioServerParameters, types
from mcp.client.stdio import (  # the SDK's own spawn and shutdown (mcp is pinned)
    _create_platform_compatible_process,  # noqa: PLC2701
    _drain_stdout,  # noqa: PLC2701
    _stop_server_process,  # noqa: PLC2701
    get_default_environment,
)
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from gliding.tools.mcp.confined import Confined, release

log = structlog.get_logger("gliding.mcp")

MESSAGE_FACTOR = 8  # one message may be this many times mcp.max_result_bytes ...
MESSAGE_SLACK = 1 << 20  # ... plus this much
EDGE = 4096  # bytes kept of each end of a dropped line, to find its id
READ_CHUNK = 65536
SCAN = 65536  # bytes of a message read at most to find its id
DROPPED = "gliding.dropped"  # ErrorData.data of the errors this transport makes up
_FLUSH_S = 0.5  # the SDK's: time for the writer to flush before stdin closes
_TOKEN = re.compile(rb'["{}\[\]]')
_TAIL_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"[^"\\]{0,256}")\s*'
                      rb'(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?}\s*$')


def message_limit(max_result_bytes: int) -> int:
    """The most bytes one JSON-RPC message from a server may take."""
    return MESSAGE_FACTOR * max_result_bytes + MESSAGE_SLACK


# --- splitting lines, without I/O ----------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """A whole line, at most the limit."""

    data: bytes


@dataclass(frozen=True)
class TooLong:
    """A line has just passed the limit (it is being dropped); its first bytes."""

    head: bytes
    size: int


@dataclass(frozen=True)
class Dropped:
    """An overlong line has ended: its first and last bytes and its size."""

    head: bytes
    tail: bytes
    size: int


Event = Line | TooLong | Dropped


class Lines:
    """Newline-delimited messages from raw chunks; one pass over each chunk, at most ``limit``
    bytes of one line held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._line = bytearray()  # one buffer: a line in one-byte writes costs its bytes only
        self._size = 0
        self._head: bytes | None = None  # set while an overlong line is being dropped
        self._tail = b""

    def feed(self, chunk: bytes) -> list[Event]:
        """What ``chunk`` completes (a partial last line waits for the next chunk)."""
        events: list[Event] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            self._take(chunk[start:] if end < 0 else chunk[start:end], events)
            if end < 0:
                return events
            self._finish(events)
            start = end + 1

    def _take(self, piece: bytes, events: list[Event]) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._head is not None:
            self._tail = (self._tail + piece[-EDGE:])[-EDGE:]
        elif self._size <= self.limit:
            self._line += piece
        else:
            self._head = bytes((self._line + piece[:EDGE])[:EDGE])
            self._tail = piece[-EDGE:]
            self._line = bytearray()
            events.append(TooLong(self._head, self._size))

    def _finish(self, events: list[Event]) -> None:
        if self._head is not None:
            events.append(Dropped(self._head, self._tail, self._size))
        elif self._line:
            line = bytes(self._line)
            if line.strip():
                events.append(Line(line))
        self._line, self._size, self._head, self._tail = bytearray(), 0, None, b""


# --- finding a message's id ----------------------------------------------------------------


def top_level(data: bytes) -> tuple[Any, bool]:
    """The ``id`` among the top-level members of the JSON object ``data`` begins (``None``
    when it is not found there) and whether ``method`` is one of them. Only the first
    ``SCAN`` bytes are read, without recursion: a message nested 100,000 deep costs one pass
    over them."""
    data = data[:SCAN]
    depth, i = 0, 0
    found: Any = None
    method = False
    while (token := _TOKEN.search(data, i)) is not None:
        i = token.start()
        if data[i] != 0x22:  # a bracket
            depth += 1 if data[i] in b"{[" else -1
            i += 1
            continue
        end = _string_end(data, i)  # a string: a key when at depth 1 and a ':' follows
        if end < 0:
            break
        if depth == 1:
            rest = data[end:end + 600].lstrip()
            if rest.startswith(b":"):
                key = data[i + 1:end - 1]
                method = method or key == b"method"
                if key == b"id" and found is None:
                    found = _value(rest[1:].lstrip())
        i = end
    return found, method


def _string_end(data: bytes, i: int) -> int:
    """The index just past the string that starts at ``data[i]`` (a quote), or -1."""
    j = i + 1
    while True:
        j = data.find(b'"', j)
        if j < 0:
            return -1
        backslashes = 0
        while data[j - 1 - backslashes] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:
            return j + 1
        j += 1


def _value(text: bytes) -> Any:
    """A JSON-RPC id (an integer or a short string) at the start of ``text``, else None."""
    match = re.match(rb'-?\d+|"[^"\\]{0,256}"', text)
    if match is None:
        return None
    token = match.group().decode("utf-8", errors="replace")
    return token[1:-1] if token.startswith('"') else int(token)


def tail_id(tail: bytes) -> Any:
    """The id when it is the last member of the object ``tail`` ends (``,"id":7}``)."""
    match = _TAIL_ID.search(tail)
    return _value(match.group(1)) if match else None


# --- what the session reads ----------------------------------------------------------------


class Replies:
    """The requests waiting for an answer, and what each event becomes for the session."""

    def __init__(self, server: str, limit: int) -> None:
        self.server = server
        self.limit = limit
        self._waiting: dict[str, types.RequestId] = {}  # str(id) -> the id as sent
        self._answered: Any = None  # the request an overlong line being dropped was failed for

    def sent(self, message: types.JSONRPCMessage) -> None:
        """Note a message the client sends: a request waits; a cancellation stops waiting."""
        if isinstance(message, types.JSONRPCRequest):
            self._waiting[str(message.id)] = message.id
        elif (isinstance(message, types.JSONRPCNotification)
              and message.method == "notifications/cancelled"
              and isinstance(message.params, dict)):
            self._waiting.pop(str(message.params.get("requestId")), None)

    def read(self, event: Event) -> list[SessionMessage | Exception]:
        """What the session gets for ``event``: the message, errors for the requests it
        cannot answer, an exception (as the SDK gives one), or nothing."""
        if isinstance(event, Line):
            return self._line(event.data)
        if isinstance(event, TooLong):
            found, _ = top_level(event.head)
            self._answered = found if str(found) in self._waiting else None
            if self._answered is None:
                return []
            return self._fail([self._answered], self._too_long(f"over {event.size:,}"))
        answered, self._answered = self._answered, None
        why = self._too_long(f"{event.size:,}")
        if answered is not None:
            log.warning("mcp.message.dropped", server=self.server, bytes=event.size,
                        limit=self.limit, request=answered)
            return []
        found, method = top_level(event.head)
        found = found if found is not None else tail_id(event.tail)
        if str(found) in self._waiting:
            failed = [found]
        elif method:  # a notification or a request of the server's: nobody waits for it
            failed = []
        else:
            failed = list(self._waiting)
        log.warning("mcp.message.dropped", server=self.server, bytes=event.size,
                    limit=self.limit, failed=len(failed))
        return self._fail(failed, why)

    def _line(self, data: bytes) -> list[SessionMessage | Exception]:
        try:
            message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            found, _ = top_level(data)
            if found is None:
                found = tail_id(data[-EDGE:])
            log.warning("mcp.message.unreadable", server=self.server, bytes=len(data),
                        reason=reason, request=found)
            if str(found) in self._waiting:
                return self._fail([found], f"the server's answer could not be read: {reason}")
            return [exc]
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._waiting.pop(str(message.id), None)
        return [SessionMessage(message)]

    def _too_long(self, size: str) -> str:
        return (f"the server's answer was {size} bytes, more than the {self.limit:,} bytes "
                f"one MCP message may take ({MESSAGE_FACTOR} × mcp.max_result_bytes + 1 MiB); "
                "it was dropped unread")

    def _fail(self, ids: list[Any], why: str) -> list[SessionMessage | Exception]:
        out: list[SessionMessage | Exception] = []
        for key in ids:
            sent = self._waiting.pop(str(key), None)
            if sent is not None:
                error = types.ErrorData(code=types.INTERNAL_ERROR, message=why, data=DROPPED)
                out.append(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=sent,
                                                              error=error)))
        return out


# --- the transport -------------------------------------------------------------------------


@asynccontextmanager
async def stdio_client(server: StdioServerParameters, *, name: str, limit: int,
                       errlog: IO[bytes] | IO[str] | None = None,
                       confined: Confined | None = None,
                       ) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``server`` and yield the session's (read, write) streams, as the SDK's
    ``stdio_client`` does, with messages longer than ``limit`` bytes dropped unread; with
    ``confined``, inside the job's command sandbox (``confined.py``; ``server.env`` is then
    the whole environment: nothing of the SDK's default is added).

    Raises:
        OSError: the program cannot be started.
        ToolError: ``confined`` and the sandbox cannot run.
    """
    cgroup = None
    if confined is None:
        process = await _create_platform_compatible_process(
            command=server.command, args=server.args,
            env=get_default_environment() | (server.env or {}),
            errlog=errlog if errlog is not None else sys.stderr, cwd=server.cwd)  # type: ignore[arg-type]
    else:
        process, cgroup = await confined.spawn(
            server.command, server.args, server.env or {},
            Path(server.cwd) if server.cwd is not None else None,
            errlog if errlog is not None else sys.stderr)
    try:
        async with _transport(process, name, limit) as streams:
            yield streams
    finally:
        await release(cgroup)  # the process is gone: the transport's shutdown waited for it


@asynccontextmanager
async def _transport(process: Any, name: str, limit: int) -> AsyncIterator[tuple[Any, Any]]:
    """The session's streams over a started ``process``; it is stopped (and waited for, the
    SDK's way) when they close."""
    # No await before the task group: a cancellation in the gap would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    replies = Replies(name, limit)
    writer_done = anyio.Event()
    shutting_down = False

    async def stdout_reader() -> None:
        assert process.stdout is not None
        lines = Lines(limit)
        try:
            async with read_writer:
                try:
                    while True:
                        try:
                            chunk = await process.stdout.receive(READ_CHUNK)
                        except anyio.EndOfStream:
                            return
                        for event in lines.feed(chunk):
                            for item in replies.read(event):
                                try:
                                    await read_writer.send(item)
                                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                    return
                finally:
                    await _drain_stdout(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed stdout under the read
        except (anyio.BrokenResourceError, ConnectionError) as exc:
            if not shutting_down:
                log.warning("mcp.stdout.failed", server=name, error=str(exc))

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    replies.sent(session_message.message)
                    text = session_message.message.model_dump_json(by_alias=True,
                                                                   exclude_unset=True)
                    await process.stdin.send((text + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end, not a hang
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(_FLUSH_S):
            await writer_done.wait()
        await _stop_server_process(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
