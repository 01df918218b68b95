"""The contract every model backend passes: subclass ``LLMContract`` and give ``make_llm``, a
factory of context managers that each yield an ``LLM`` answering the given replies (the
replies-file format of ``gliding/llm/replies.py``, as a dict: per role, one tool call or
``text`` per turn):

    class TestMyModel(LLMContract):
        @pytest.fixture
        def make_llm(self, tmp_path):
            @contextmanager
            def make(replies):
                yield MyModel(...)      # answers role R's n-th call with replies[R][n-1]
            return make

What an agent relies on, whatever the backend: a tool call comes back named as asked with its
arguments decoded, a text answer as text, a role's answers in order, usage as non-negative
whole numbers, and a backend that cannot answer raises LLMError (never another exception).
``tests/llm/test_llm_contract.py`` runs it against ``ScriptedLLM``, the replies-file model and
litellm talking to the fake provider (OpenAI's and Anthropic's wire formats).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import anyio
import pytest

from gliding.core.messages import Completion, Message, ToolSpec
from gliding.errors import LLMError
from gliding.llm.port import LLM, LLMRequest

MakeLLM = Callable[[dict[str, Any]], AbstractContextManager[LLM]]

TOOLS = (
    ToolSpec("write_file", "Write a file of the workspace.",
             {"type": "object", "properties": {"path": {"type": "string"},
                                               "content": {"type": "string"}},
              "required": ["path", "content"]}),
    ToolSpec("finish", "End the turn.",
             {"type": "object", "properties": {"summary": {"type": "string"}}}),
)


def ask(llm: LLM, role: str, turn: int, tools: tuple[ToolSpec, ...] = TOOLS) -> Completion:
    """Turn ``turn`` of ``role``, as the agent loop asks it (the role named in the system
    prompt and in ``meta``)."""
    request = LLMRequest(
        messages=[Message("system", f"You are {role}, a role of a Gliding job."),
                  Message("user", f"Goal: write hello.txt (turn {turn}).")],
        tools=tools, meta={"role": role, "turn": turn})
    return anyio.run(llm.complete, request)


class LLMContract:
    """What the agent loop relies on from any ``LLM``."""

    def test_a_tool_call_comes_back_named_with_its_arguments_decoded(
            self, make_llm: MakeLLM) -> None:
        args = {"path": "hello.txt", "content": "Hello, \"World\"! ✓\n"}
        with make_llm({"DA": [{"write_file": args}]}) as llm:
            done = ask(llm, "DA", 1)
        assert [(c.name, c.arguments) for c in done.message.tool_calls] == [("write_file", args)]
        assert all(c.id for c in done.message.tool_calls)  # results are linked by this id
        assert done.message.role == "assistant"

    def test_a_text_answer_comes_back_as_text(self, make_llm: MakeLLM) -> None:
        with make_llm({"AA": [{"text": "every check passed"}]}) as llm:
            done = ask(llm, "AA", 1)
        assert done.message.content == "every check passed"
        assert done.message.tool_calls == ()

    def test_a_roles_answers_come_in_order_and_roles_are_apart(self, make_llm: MakeLLM) -> None:
        replies = {"DA": [{"write_file": {"path": "a", "content": "1"}},
                          {"finish": {"summary": "wrote a"}}],
                   "CA": [{"finish": {"summary": "checked"}}]}
        with make_llm(replies) as llm:
            first, checked, second = ask(llm, "DA", 1), ask(llm, "CA", 1), ask(llm, "DA", 2)
        assert [c.name for c in first.message.tool_calls] == ["write_file"]
        assert [c.arguments for c in checked.message.tool_calls] == [{"summary": "checked"}]
        assert [c.arguments for c in second.message.tool_calls] == [{"summary": "wrote a"}]

    def test_usage_latency_and_model_are_reported(self, make_llm: MakeLLM) -> None:
        with make_llm({"DA": [{"finish": {"summary": "ok"}}]}) as llm:
            done = ask(llm, "DA", 1)
            assert llm.name
        usage = done.usage
        for value in (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens):
            assert type(value) is int and value >= 0
        assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
        assert done.latency_s >= 0 and done.model

    def test_a_model_that_cannot_answer_raises_llm_error(self, make_llm: MakeLLM) -> None:
        with make_llm({"DA": [{"finish": {"summary": "ok"}}]}) as llm:
            ask(llm, "DA", 1)
            with pytest.raises(LLMError):  # DA has no second answer
                ask(llm, "DA", 2)
