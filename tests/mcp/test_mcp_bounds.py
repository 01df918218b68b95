"""What one MCP server may cost the job: one message is bounded before it is parsed (stdio and
HTTP), an answer nested too deep fails its call at once, and a server lends a bounded number
of tools. Against real servers: a raw stdio server written by hand (raw_stdio_server.py, so
the tests choose the exact bytes of an answer) and an HTTP server written with the SDK."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import types
from structlog.testing import capture_logs

from gliding.config.settings import MCPServerSettings, MCPSettings
from gliding.errors import ToolError
from gliding.testing.servers import free_port
from gliding.tools.mcp.client import MCPGroup
from gliding.tools.mcp.http import BoundedTransport, Unreadable
from gliding.tools.mcp.schema import tokens
from gliding.tools.mcp.stdio import (
    DROPPED,
    Dropped,
    Line,
    Lines,
    Replies,
    TooLong,
    message_limit,
    top_level,
)

RAW = Path(__file__).resolve().parent / "raw_stdio_server.py"
KIB = 1024
LIMIT = message_limit(KIB)  # 8 KiB + 1 MiB: mcp.max_result_bytes at its least


def raw_group(*args: str, max_result_bytes: int = KIB, timeout_s: float = 60,
              **server: Any) -> MCPGroup:
    return MCPGroup("raw", MCPServerSettings(command=sys.executable, args=(str(RAW), *args),
                                             **server),
                    MCPSettings(max_result_bytes=max_result_bytes, timeout_s=timeout_s))


async def failure(g: MCPGroup, tool: str, args: dict[str, Any]) -> str:
    with pytest.raises(ToolError) as caught:
        await g.call(tool, args)
    return caught.value.message


# --- stdio: the message bound --------------------------------------------------------------


def test_an_answer_over_the_message_limit_fails_its_call_fast_and_the_session_goes_on() -> None:
    """50 MB in one line: the SDK's reader copied it quadratically and held it whole (past
    ~100 MB the session died); now the call fails as soon as the line passes the limit, the
    line is dropped as it arrives, and the next call on the same session answers."""
    g = raw_group()

    async def main() -> tuple[list[str], int, list[str]]:
        await g.open()
        errors, answers = [], []
        try:
            tracemalloc.start()
            try:
                message = await failure(g, "huge", {"size": 50 << 20})
                answers.append((await g.call("echo", {"text": "after 50 MB"})).text)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            errors.append(message)
            # the id after the result: found at the line's end
            errors.append(await failure(g, "huge", {"size": 3 << 20, "id_last": True}))
            # a huge notification is dropped; the answer after it arrives
            answers.append((await g.call("shout_notice", {"size": 3 << 20})).text)
            answers.append((await g.call("echo", {"text": "still here"})).text)
        finally:
            await g.aclose()
        return errors, peak, answers

    errors, peak, answers = anyio.run(main)

    # "was over": the call failed while the line still came in, before its size was known
    assert errors[0].startswith("huge: server raw: the server's answer was over ")
    assert errors[0].endswith(f"bytes, more than the {LIMIT:,} bytes one MCP message may "
                              "take (8 × mcp.max_result_bytes + 1 MiB); it was dropped unread")
    assert errors[1] == (f"huge: server raw: the server's answer was {(3 << 20) + 82:,} bytes, "
                         f"more than the {LIMIT:,} bytes one MCP message may take (8 × "
                         "mcp.max_result_bytes + 1 MiB); it was dropped unread")
    assert peak < 16 << 20, f"peak {peak >> 20} MiB"
    assert answers == ["after 50 MB", "after the notice", "still here"]
    assert g.session.gone is None


def test_low_mcp_nested_answer() -> None:
    """An answer nested 100,000 deep cannot be parsed (the JSON parser stops at its depth
    limit); it waited the whole call timeout, and now fails its call at once."""
    g = raw_group(timeout_s=60)

    async def main() -> tuple[str, str]:
        await g.open()
        try:
            message = await failure(g, "nested", {"depth": 100_000})
            after = (await g.call("echo", {"text": "next"})).text
        finally:
            await g.aclose()
        return message, after

    message, after = anyio.run(main)

    # the parse error failed the call, not the 60 s call timeout (that would say "timed out")
    assert message.startswith("nested: server raw: the server's answer could not be read: "
                              "Invalid JSON: recursion limit exceeded")
    assert after == "next"


# --- stdio: the pieces, without a server ---------------------------------------------------


def test_lines_hold_at_most_the_limit_and_report_a_longer_line_with_its_ends() -> None:
    stream = b'{"id":1}\n\n' + b"a" * 90 + b"z" * 10 + b"\n" + b'{"id":2}\n'
    for size in (1, 3, len(stream)):
        lines = Lines(50)
        events = [e for i in range(0, len(stream), size)
                  for e in lines.feed(stream[i:i + size])]
        assert len(events) == 4
        assert events[0] == Line(b'{"id":1}') and events[-1] == Line(b'{"id":2}')
        too_long, dropped = events[1], events[2]
        assert isinstance(too_long, TooLong) and too_long.size > 50
        assert too_long.head.startswith(b"a" * 51)
        assert isinstance(dropped, Dropped) and dropped.size == 100
        assert dropped.head == too_long.head and dropped.tail.endswith(b"z" * 10)
        assert lines._size == 0 and not lines._line  # noqa: SLF001 - nothing held after


def test_a_long_line_is_split_in_linear_time() -> None:
    """16 MiB in 64 KiB chunks: the SDK's ``(buffer + chunk).split`` copies ~2 GB for it.
    Linear, because each chunk is appended to one buffer, grown in place, never copied whole
    (that the buffer stays the same object is what is checked, not how long it took)."""
    lines = Lines(32 << 20)
    chunk = b"x" * (64 << 10)
    assert lines.feed(chunk) == []
    buffer = lines._line  # noqa: SLF001 - the one buffer is the point
    for _ in range(255):
        assert lines.feed(chunk) == []
        assert lines._line is buffer  # noqa: SLF001
    assert len(buffer) == 16 << 20
    (line,) = lines.feed(b"\n")
    assert isinstance(line, Line) and len(line.data) == 16 << 20


def test_top_level_finds_the_message_id_and_method_without_recursing() -> None:
    nested = b'{"jsonrpc":"2.0","result":{"id":99,"x":"\\"id\\": 5"},"id":7}'
    assert top_level(nested) == (7, False)
    assert top_level(b'{"id": "abc", "method": "ping"}') == ("abc", True)
    assert top_level(b'{"method":"notifications/message","params":{"id":3}}') == (None, True)
    deep = b'{"jsonrpc":"2.0","id":4,"result":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert top_level(deep) == (4, False)  # recursing, it would hit the recursion limit


def test_replies_fail_the_request_a_dropped_answer_was_for_and_only_waiting_ones() -> None:
    replies = Replies("raw", 100)
    for n in (1, 2, 3):
        replies.sent(types.JSONRPCRequest(jsonrpc="2.0", id=n, method="tools/call"))
    replies.sent(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled",
                                           params={"requestId": 3}))

    first = replies.read(TooLong(b'{"jsonrpc":"2.0","id":1,"result":', 101))
    assert [m.message.id for m in first if not isinstance(m, Exception)] == [1]  # type: ignore[union-attr]
    assert replies.read(Dropped(b'{"jsonrpc":"2.0","id":1,', b"}", 500)) == []
    notice = Dropped(b'{"jsonrpc":"2.0","method":"notifications/message",', b"}", 500)
    assert replies.read(notice) == []
    # no id to be found: every request still waiting fails (3 was cancelled: not waiting)
    unknown = replies.read(Dropped(b'{"result":{"content":[{"text":"', b'"}]}}', 500))
    assert [m.message.id for m in unknown] == [2]  # type: ignore[union-attr]
    error = unknown[0].message  # type: ignore[union-attr]
    assert isinstance(error, types.JSONRPCError) and error.error.data == DROPPED
    assert replies.read(Dropped(b'{"result":', b"}", 500)) == []  # nothing waits any more


# --- how many tools ----------------------------------------------------------------------


def test_low_mcp_many_tools() -> None:
    """A server that lists 304 tools lent them all (47K tokens in every prompt of its roles);
    now it lends at most max_tools (100), their schemas at most max_schema_tokens, and the
    rest are refused with one warning."""
    default = raw_group("300")
    tight = raw_group("300", max_tools=1000, max_schema_tokens=2000)

    async def main() -> list[Any]:
        out = []
        for g in (default, tight):
            with capture_logs() as logs:
                await g.open()
            await g.aclose()
            out.append([e for e in logs if e["event"] == "mcp.server.tools_refused"])
        return out

    default_logs, tight_logs = anyio.run(main)

    assert len(default.tools) == 100 and len(default.refused) == 204
    assert [t.name for t in default.tools][:4] == ["raw__echo", "raw__huge", "raw__nested",
                                                    "raw__shout_notice"]
    assert default.refused[-1] == "raw__tool_299"
    assert len(default_logs) == 1 and default_logs[0]["log_level"] == "warning"
    assert default_logs[0]["listed"] == 304 and default_logs[0]["refused"] == 204
    spent = sum(tokens(t.name, t.description, t.parameters) for t in tight.tools)
    assert spent <= 2000 and 5 < len(tight.tools) < 100
    assert len(tight.tools) + len(tight.refused) == 304 and len(tight_logs) == 1


def test_the_tool_bounds_are_per_server_settings() -> None:
    assert MCPServerSettings(command="x").max_tools == 100
    assert MCPServerSettings(command="x").max_schema_tokens == 20_000
    with pytest.raises(ValueError, match="max_tools"):
        MCPServerSettings(command="x", max_tools=0)


# --- HTTP: bounded bodies ------------------------------------------------------------------


HTTP_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

app = MCPServer("big", log_level="WARNING")


@app.tool()
def big(size: int) -> str:
    """size bytes of x."""
    return "x" * size


@app.tool()
def echo(text: str) -> str:
    """The text."""
    return text


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=True)
'''


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    """An SDK streamable-HTTP server answering JSON (not SSE) on a free loopback port."""
    script = tmp_path / "big_server.py"
    script.write_text(HTTP_SERVER, encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(script), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_an_http_answer_over_the_message_limit_fails_its_call_and_the_session_goes_on(
        http_url: str) -> None:
    g = MCPGroup("big", MCPServerSettings(url=http_url), MCPSettings(max_result_bytes=KIB))

    async def main() -> tuple[str, str]:
        await g.open()
        try:
            message = await failure(g, "big", {"size": 5 << 20})
            return message, (await g.call("echo", {"text": "again"})).text
        finally:
            await g.aclose()

    message, after = anyio.run(main)

    assert message == (f"big: server big: its answer could not be read: Failed to parse JSON "
                       f"response: the answer from {http_url} is longer than the {LIMIT:,} "
                       "bytes one MCP message may take (8 × mcp.max_result_bytes + 1 MiB); it "
                       "was dropped unread")
    assert after == "again"


class _Chunks(httpx2.AsyncByteStream):
    """A raw body in 64 KiB chunks, as a network would deliver it."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.data), 64 << 10):
            yield self.data[i:i + (64 << 10)]


async def _read(raw: bytes, *, encoding: str, kind: str = "application/json") -> bytes:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"Content-Encoding": encoding,
                                             "Content-Type": kind}, stream=_Chunks(raw))

    async with httpx2.AsyncClient(transport=BoundedTransport(
            LIMIT, inner=httpx2.MockTransport(handler))) as client:
        return (await client.get("http://mcp.test/mcp")).content


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_compressed_http_answer_is_inflated_in_bounded_steps() -> None:
    """A 64 KB gzip body that inflates to 64 MiB: httpx2 inflated it whole; the transport
    stops at the message limit and fails the read (the SDK answers the call with it)."""
    bomb = await anyio.to_thread.run_sync(lambda: gzip.compress(bytes(64 << 20), mtime=0))
    small = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}

    tracemalloc.start()
    try:
        with pytest.raises(Unreadable, match="is longer than the"):
            await _read(bomb, encoding="gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak >> 20} MiB"

    plain = gzip.compress(json.dumps(small).encode())
    assert json.loads(await _read(plain, encoding="gzip")) == small
    with pytest.raises(Unreadable, match="more than one content coding is refused"):
        await _read(plain, encoding="gzip, gzip")
    with pytest.raises(Unreadable, match="Content-Encoding 'br'"):
        await _read(plain, encoding="br")
    # an event stream may run past the limit (the SDK bounds each event)
    stream = gzip.compress(b"data: x\n\n" * (300 << 10))
    assert len(await _read(stream, encoding="gzip", kind="text/event-stream")) > LIMIT


def test_low_a_line_written_one_byte_at_a_time_costs_its_bytes_only() -> None:
    """A server that writes its answer one byte per write: the line is held in one buffer
    (a list of one-byte pieces took ~15 times the bytes it held)."""
    import tracemalloc

    from gliding.tools.mcp.stdio import Line, Lines

    limit = 200_000
    lines = Lines(limit)
    tracemalloc.start()
    try:
        for _ in range(limit - 10):
            assert not lines.feed(b"a")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, peak
    assert lines.feed(b"\n") == [Line(b"a" * (limit - 10))]
