"""Streamed hosted calls (``llm.stream``) through the real litellm path against the fake
provider on 127.0.0.1: the request asks for a stream with the usage; the pieces told to
``on_delta`` add up to the reply; the usage is the final chunk's, the same as a whole call's;
tool-call arguments sent in pieces assemble; a stream cut mid-way is a connection fault that
the retry path takes as a whole."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from gliding.core.messages import Completion, Message, ToolSpec
from gliding.errors import ProviderError
from gliding.llm.faults import RetryPolicy
from gliding.llm.hosted import HostedLLM
from gliding.llm.port import Delta, LLMRequest, ProviderNotice
from gliding.llm.resilient import ResilientLLM
from gliding.testing.fake_provider import FakeProvider, FaultPlan

pytestmark = pytest.mark.heavy  # litellm's import alone takes seconds on two cores

WRITE = ToolSpec("write_file", "Write a file.", {
    "type": "object", "properties": {"path": {"type": "string"},
                                     "content": {"type": "string"}},
    "required": ["path", "content"]})
TEXT = "Streaming works: this reply comes in pieces of a few characters each.\nSecond line."
CALL = {"path": "notes/out.txt", "content": "line one\nline two \"quoted\" ünïcode"}
REPLIES: dict[str, Any] = {"DA": [{"text": TEXT}, {"write_file": CALL}] * 3}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE",
                 "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def ask(llm: HostedLLM | ResilientLLM, *, listen: bool = True
        ) -> tuple[Completion, list[Delta], list[ProviderNotice]]:
    deltas: list[Delta] = []
    notices: list[ProviderNotice] = []

    async def on_delta(delta: Delta) -> None:
        deltas.append(delta)

    async def notify(notice: ProviderNotice) -> None:
        notices.append(notice)

    request = LLMRequest((Message("system", "You are DA, the agent."), Message("user", "go")),
                         tools=(WRITE,), meta={"role": "DA"}, notify=notify,
                         on_delta=on_delta if listen else None)

    async def main() -> Completion:
        return await llm.complete(request)

    return anyio.run(main), deltas, notices




@pytest.mark.parametrize("model", ["openai/fake-model", "anthropic/claude-fake"])
def test_deltas_add_up_to_the_reply_and_the_usage_is_the_whole_calls(model: str) -> None:
    with FakeProvider(REPLIES, chunk_chars=5) as fp:
        llm = HostedLLM(model, timeout_s=5, api_base=fp.url, api_key="dummy")
        text, deltas, _ = ask(llm)
        call, call_deltas, _ = ask(llm)
        whole_text, none, _ = ask(llm, listen=False)
        whole_call, _, _ = ask(llm, listen=False)

    assert text.message.content == TEXT and len(deltas) > 10
    assert "".join(d.text for d in deltas) == TEXT and {d.tool for d in deltas} == {None}
    assert call.message.tool_calls[0].name == "write_file"
    assert call.message.tool_calls[0].arguments == CALL
    assert {d.tool for d in call_deltas} == {"write_file"} and len(call_deltas) > 10
    assert json.loads("".join(d.text for d in call_deltas)) == CALL
    assert none == []
    # exact usage: the final chunk's, as a whole call of the same request reports it
    assert text.usage == whole_text.usage and call.usage == whole_call.usage
    assert text.usage.prompt_tokens > 1 and text.usage.completion_tokens == len(TEXT) // 4
    bodies = [r.json() for r in fp.requests]
    assert [b.get("stream") for b in bodies] == [True, True, None, None]
    if model.startswith("openai/"):
        assert bodies[0]["stream_options"] == {"include_usage": True}


def test_with_stream_off_a_listening_request_is_asked_whole() -> None:
    with FakeProvider(REPLIES) as fp:
        llm = HostedLLM("openai/fake-model", timeout_s=5, api_base=fp.url, api_key="dummy",
                        stream=False)
        completion, deltas, _ = ask(llm)
    assert completion.message.content == TEXT and deltas == []
    assert "stream" not in fp.requests[0].json()


@pytest.mark.parametrize("model", ["openai/fake-model", "anthropic/claude-fake"])
def test_a_stream_cut_midway_is_a_connection_fault_retried_as_a_whole(model: str) -> None:
    with FakeProvider(REPLIES, chunk_chars=5, faults=FaultPlan.down("cut")) as fp:
        hosted = HostedLLM(model, timeout_s=5, api_base=fp.url, api_key="dummy")
        with pytest.raises(ProviderError) as caught:
            ask(hosted)
        assert caught.value.kind == "connection"

        llm = ResilientLLM([hosted], RetryPolicy(max_attempts=3, initial_s=0.01, max_s=0.01))
        deltas: list[Delta] = []
        cut_at: list[int] = []

        async def on_delta(delta: Delta) -> None:
            deltas.append(delta)

        async def notify(notice: ProviderNotice) -> None:
            cut_at.append(len(deltas))
            fp.faults = None  # the retry gets the whole stream

        async def main() -> Completion:
            return await llm.complete(LLMRequest(
                (Message("system", "You are DA, the agent."), Message("user", "go")),
                meta={"role": "DA"}, notify=notify, on_delta=on_delta))

        completion = anyio.run(main)

    assert len(cut_at) == 1 and 0 < cut_at[0] < len(deltas)
    partial = "".join(d.text for d in deltas[:cut_at[0]])
    assert TEXT.startswith(partial) and len(partial) < len(TEXT)
    assert "".join(d.text for d in deltas[cut_at[0]:]) == TEXT == completion.message.content
    assert [r.fault for r in fp.requests] == ["cut", "cut", None]
    assert fp.remaining("DA") == len(REPLIES["DA"]) - 1  # a cut answer used up no reply
