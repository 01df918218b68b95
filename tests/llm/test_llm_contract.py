"""The model port's contract (``gliding.testing.llm_contract``) against every backend that can
be given its answers: ``ScriptedLLM`` (the test fake), the replies-file model
(``--model scripted:replies.yaml``), and litellm talking to the fake provider, a real HTTP
server on 127.0.0.1, in OpenAI's and in Anthropic's wire format. The local model cannot be
told what to answer; its own tests hold it to the same shapes (tests/integration)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gliding.llm.hosted import HostedLLM
from gliding.llm.port import LLM
from gliding.llm.replies import replies_from_data
from gliding.llm.scripted import FileScriptedLLM
from gliding.testing import ScriptedLLM
from gliding.testing.fake_provider import FakeProvider
from gliding.testing.llm_contract import LLMContract, MakeLLM


class TestScriptedLLM(LLMContract):
    @pytest.fixture
    def make_llm(self) -> MakeLLM:
        @contextmanager
        def make(replies: dict[str, Any]) -> Iterator[LLM]:
            yield ScriptedLLM(replies_from_data(replies))

        return make


class TestRepliesFile(LLMContract):
    @pytest.fixture
    def make_llm(self, tmp_path: Path) -> MakeLLM:
        @contextmanager
        def make(replies: dict[str, Any]) -> Iterator[LLM]:
            path = tmp_path / "replies.yaml"
            path.write_text(yaml.safe_dump(replies, allow_unicode=True), encoding="utf-8")
            yield FileScriptedLLM(path)

        return make


def _hosted(model: str) -> Callable[[], MakeLLM]:
    @pytest.fixture
    def make_llm(self: Any) -> MakeLLM:
        @contextmanager
        def make(replies: dict[str, Any]) -> Iterator[LLM]:
            with FakeProvider(replies) as fp:
                yield HostedLLM(model, timeout_s=30, api_base=fp.url, api_key="dummy")

        return make

    return make_llm


@pytest.mark.heavy  # litellm's import takes seconds
class TestHostedOpenAI(LLMContract):
    make_llm = _hosted("openai/fake-model")


@pytest.mark.heavy
class TestHostedAnthropic(LLMContract):
    make_llm = _hosted("anthropic/fake-model")
