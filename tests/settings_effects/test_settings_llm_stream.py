"""llm.stream, changed through the real loader: on (the default), a hosted call built by
build_llm streams its reply to the request's on_delta and asks the provider for a stream with
the usage; off, the same request is asked whole and hears nothing. Against the fake provider
on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import Settings
from gliding.core.messages import Completion, Message
from gliding.daemon.models import build_llm
from gliding.llm.port import Delta, LLMRequest
from gliding.testing.fake_provider import FakeProvider
from tests.settings_effects.effects_support import settings_from

pytestmark = pytest.mark.heavy  # litellm's import alone takes seconds on two cores

TEXT = "A reply streamed in pieces of eight characters."


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def fp() -> Iterator[FakeProvider]:
    with FakeProvider({"DA": [{"text": TEXT}] * 2}) as provider:
        yield provider


def ask(settings: Settings) -> tuple[Completion, list[Delta]]:
    deltas: list[Delta] = []

    async def on_delta(delta: Delta) -> None:
        deltas.append(delta)

    async def main() -> Completion:
        return await build_llm("openai/fake-model", settings).complete(LLMRequest(
            (Message("system", "You are DA, the agent."), Message("user", "go")),
            meta={"role": "DA"}, on_delta=on_delta))

    return anyio.run(main), deltas


def test_llm_stream_on_by_default_streams_with_the_usage(
        tmp: Path, fp: FakeProvider) -> None:
    settings = settings_from(tmp, {"GLIDING_LLM__API_BASE": fp.url})
    assert settings.llm.stream is True
    completion, deltas = ask(settings)
    assert "".join(d.text for d in deltas) == TEXT == completion.message.content
    assert len(deltas) == -(-len(TEXT) // 8)  # the provider's chunks, each told as it came
    body = fp.requests[0].json()
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


def test_llm_stream_false_asks_for_the_whole_reply(tmp: Path, fp: FakeProvider) -> None:
    completion, deltas = ask(settings_from(tmp, {"GLIDING_LLM__API_BASE": fp.url,
                                                 "GLIDING_LLM__STREAM": "false"}))
    assert completion.message.content == TEXT and deltas == []
    assert "stream" not in fp.requests[0].json()
