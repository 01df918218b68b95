"""Anthropic prompt-cache breakpoints: at most 4 (the tool list's included), only for Anthropic
models, and a message sent in the same shape whether it is marked or not."""

from __future__ import annotations

from typing import Any

from gliding.llm.hosted import is_anthropic, tools_with_cache_control, with_cache_control

EPHEMERAL = {"type": "ephemeral"}


def _msgs(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def _marked(out: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(out)
            if isinstance(m["content"], list) and "cache_control" in m["content"][-1]]


def test_other_providers_get_no_breakpoints() -> None:
    messages = _msgs(5)
    assert with_cache_control(messages, [0, 2, 4], "openai/gpt-4o-mini") == messages
    tools = [{"type": "function", "function": {"name": "a"}}]
    assert tools_with_cache_control(tools, True, "openai/gpt-4o-mini") == tools


def test_anthropic_gets_at_most_four_marks_on_the_chosen_messages() -> None:
    out = with_cache_control(_msgs(8), [0, 1, 2, 3, 5, 7], "anthropic/claude-3-5-haiku-latest")
    assert _marked(out) == [2, 3, 5, 7]
    assert out[7]["content"] == [{"type": "text", "text": "m7", "cache_control": EPHEMERAL}]
    # an unmarked message has the same shape, without the mark
    assert out[0]["content"] == [{"type": "text", "text": "m0"}]


def test_the_tool_mark_takes_one_of_the_four() -> None:
    out = with_cache_control(_msgs(8), [0, 2, 5, 7], "claude-sonnet-4-5", limit=3)
    assert _marked(out) == [2, 5, 7]
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b")]
    marked = tools_with_cache_control(tools, True, "anthropic/claude-sonnet-4-5")
    assert marked[0] == tools[0] and marked[1]["cache_control"] == EPHEMERAL
    assert tools_with_cache_control(tools, False, "anthropic/claude-sonnet-4-5") == tools
    assert _marked(with_cache_control(_msgs(3), [0, 1, 2], "claude-3-opus", limit=0)) == []


def test_out_of_range_and_empty_messages_are_not_marked() -> None:
    out = with_cache_control(_msgs(2), [-1, 5, 1], "claude-3-opus")
    assert _marked(out) == [1]
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}
    assert with_cache_control([call], [0], "claude-3-opus") == [call]


def test_model_names() -> None:
    assert is_anthropic("anthropic/claude-3-5-sonnet")
    assert not is_anthropic("ollama/llama3")
