"""A fake OpenAI chat-completions server on 127.0.0.1 for tests of hosted models: litellm's
``openai/<model>`` reaches it through ``OPENAI_BASE_URL``; it records every request body and
answers with tool calls and a fixed usage (1200 prompt tokens, 1000 of them cached, 40
completion tokens), streamed when the request asks (``stream: true``, with the usage in a
last chunk). Nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gliding.testing.fake_provider import openai_stream, sse_bytes

MODEL = "openai/gliding-test-model"  # a model litellm's cost map has no price for
PRICES = {MODEL: {"input": 3.0, "output": 15.0, "cache_read": 0.3}}
USAGE = {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
         "prompt_tokens_details": {"cached_tokens": 1000}}


def reply(calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A chat completion asking for ``calls``, with ``USAGE``."""
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gliding-test-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{i}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}
                           for i, (name, args) in enumerate(calls)]}}],
        "usage": USAGE,
    }


def da_reply(body: dict[str, Any]) -> dict[str, Any]:
    """DA: write the file, then (once a tool result says it wrote it) finish."""
    wrote = any(m.get("role") == "tool" and str(m.get("tool_call_id")).startswith("call_")
                and str(m.get("content", "")).startswith("wrote")  # not the role's example
                for m in body.get("messages") or ())
    if wrote:
        return reply([("finish", {"summary": "wrote hello.txt"})])
    return reply([("write_file", {"path": "hello.txt", "content": "Hello"})])


@dataclass
class FakeOpenAI:
    """What the server answers with (``answer(request body)``, after ``delay_s``) and what it
    received (bodies and paths); ``url`` is its base URL once it runs."""

    answer: Callable[[dict[str, Any]], dict[str, Any]] = da_reply
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay_s: float = 0.0
    paths: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


@contextlib.contextmanager
def serve_fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The server, running, with the environment litellm reads pointed at it."""
    fake = FakeOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            fake.paths.append(self.path)
            fake.requests.append(body)
            if fake.delay_s:
                fake.release.wait(fake.delay_s)  # set at teardown: no handler outlives the test
            answer = fake.answer(body)
            data, kind = json.dumps(answer).encode(), "application/json"
            if body.get("stream") is True:  # llm.stream: the same answer as events
                data, kind = sse_bytes(openai_stream(answer, 16, usage=bool(
                    (body.get("stream_options") or {}).get("include_usage")))), \
                    "text/event-stream"
            try:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout) and closed the connection
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="fake-openai", daemon=True)
    thread.start()
    fake.url = url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
