"""Anthropic prompt-cache breakpoints: at most 4, only for Anthropic models."""

from __future__ import annotations

from gliding.llm.hosted import is_anthropic, with_cache_control


def _msgs(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def test_other_providers_get_no_breakpoints() -> None:
    messages = _msgs(5)
    assert with_cache_control(messages, [0, 2, 4], "openai/gpt-4o-mini") == messages


def test_anthropic_gets_at_most_four_marks_on_the_chosen_messages() -> None:
    out = with_cache_control(_msgs(8), [0, 1, 2, 3, 5, 7], "anthropic/claude-3-5-haiku-latest")
    marked = [i for i, m in enumerate(out) if isinstance(m["content"], list)]
    assert marked == [2, 3, 5, 7]
    assert out[7]["content"][0] == {"type": "text", "text": "m7",
                                    "cache_control": {"type": "ephemeral"}}
    assert out[0]["content"] == "m0"


def test_out_of_range_marks_are_ignored() -> None:
    out = with_cache_control(_msgs(2), [-1, 5, 1], "claude-3-opus")
    assert [isinstance(m["content"], list) for m in out] == [False, True]


def test_model_names() -> None:
    assert is_anthropic("anthropic/claude-3-5-sonnet")
    assert not is_anthropic("ollama/llama3")
