"""The exact JSON litellm sends: the requests of a real agent session (scripted) go through
``HostedLLM`` to a stdlib HTTP server on 127.0.0.1 that records each body. For Anthropic the
tool list and the system prompt carry ``cache_control`` and their bytes are the same on every
call, with at most 4 marks a request; OpenAI gets no mark, and the same stable prefix."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.agents.loop import AgentEnv, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.llm.hosted import HostedLLM
from gliding.llm.port import LLMRequest
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.tools.base import ToolContext
from gliding.tools.groups import job_groups

ANTHROPIC_REPLY = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "list_dir",
                 "input": {"path": "."}}],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 900, "output_tokens": 12, "cache_read_input_tokens": 700,
              "cache_creation_input_tokens": 200},
}
OPENAI_REPLY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "list_dir", "arguments": "{\"path\": \".\"}"}}]}}],
    "usage": {"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912,
              "prompt_tokens_details": {"cached_tokens": 700}},
}


class Recorder(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.bodies.append(json.loads(raw))  # type: ignore[attr-defined]
        reply = ANTHROPIC_REPLY if self.path.endswith("/messages") else OPENAI_REPLY
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    httpd.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy")
    monkeypatch.setenv("ANTHROPIC_API_BASE", url)
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.setenv("OPENAI_API_BASE", url + "/v1")
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def session_requests(tmp: Path) -> list[LLMRequest]:
    """The requests of one DA session: a refused finish, tool calls, a finish."""
    (tmp / "a.txt").write_text("alpha\n", encoding="utf-8")
    llm = ScriptedLLM([call("finish", summary="too early"), call("list_dir", path="."),
                       call("read_file", path="a.txt"), call("grep", pattern="alpha"),
                       call("finish", summary="looked")])
    spec = load_role("DA")
    settings = Settings()
    archive = LocalArchive(Archive.open(tmp / "data", "j1"), tmp / "data")
    env = AgentEnv(
        job="j1", role=spec, llm=llm,
        toolset=job_groups(reader=archive, iri_base="gliding://job/j1/").toolset(
            spec.tool_groups),
        tool_ctx=ToolContext(tmp, settings.tools), archive=archive,
        budget=BudgetTracker(Limits(), started_at=0.0), bus=InProcessBus(), now=lambda: 0.0,
        max_turns=6, context=settings.context, counter=TokenCounter())
    assert anyio.run(run_agent, env, "Goal: look at a.txt").status == "finished"
    archive.archive.close()
    return llm.requests


def send(model: str, requests: list[LLMRequest], server: ThreadingHTTPServer
         ) -> list[dict[str, Any]]:
    llm = HostedLLM(model, stream=False)  # the recorder answers whole replies, not streams

    async def main() -> None:
        for request in requests:
            await llm.complete(request)

    anyio.run(main)
    return list(server.bodies)  # type: ignore[attr-defined]


def marks(value: Any) -> int:
    """How many ``cache_control`` keys a JSON value holds."""
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(marks(v) for v in value.values())
    if isinstance(value, list):
        return sum(marks(v) for v in value)
    return 0


def test_anthropic_gets_marks_on_tools_system_and_messages_with_stable_bytes(
        tmp_path: Path, server: ThreadingHTTPServer) -> None:
    requests = session_requests(tmp_path)
    bodies = send("anthropic/claude-sonnet-4-5", requests, server)

    assert len(bodies) == len(requests) == 5
    for body in bodies:
        assert 1 <= marks(body) <= 4
        tools = body["tools"]
        assert tools[-1]["cache_control"] == {"type": "ephemeral"}
        assert marks(tools) == 1
        assert [t["name"] for t in tools][-1] == "finish"
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert marks(body["system"]) == 1
        # the newest message is marked (the first call's is the assignment: the prefix end)
        assert marks(body["messages"][-1]) == 1
    # the same bytes of tools and system on every call
    assert len({json.dumps(b["tools"], sort_keys=True) for b in bodies}) == 1
    assert len({json.dumps(b["system"], sort_keys=True) for b in bodies}) == 1
    # and the messages before the newest one are what the previous call sent, marks aside
    def unmarked(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [unmarked(v) for v in value]
        return value
    for before, after in zip(bodies, bodies[1:], strict=False):
        assert unmarked(after["messages"][:len(before["messages"])]) == unmarked(
            before["messages"])


def test_openai_gets_no_marks_and_the_same_prefix(
        tmp_path: Path, server: ThreadingHTTPServer) -> None:
    requests = session_requests(tmp_path)
    bodies = send("openai/gpt-4o-mini", requests, server)

    assert len(bodies) == 5
    assert all(marks(b) == 0 for b in bodies)
    assert len({json.dumps(b["tools"]) for b in bodies}) == 1
    for before, after in zip(bodies, bodies[1:], strict=False):
        assert after["messages"][:len(before["messages"])] == before["messages"]
