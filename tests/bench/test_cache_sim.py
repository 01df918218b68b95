"""The prompt-cache simulator against the providers' documented behaviour (Anthropic's and
OpenAI's "Prompt caching" pages), with a word tokenizer so that every count is checkable."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from gliding.bench.cache_sim import (
    CLAUDE_35_HAIKU,
    GPT_4O_MINI,
    AnthropicCache,
    AnthropicParams,
    Call,
    OpenAICache,
    OpenAIParams,
    annotate,
    anthropic_blocks,
    anthropic_min_tokens,
    report,
    simulate,
)

EPHEMERAL = {"type": "ephemeral"}


def encode(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) for w in text.split()]


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def tool(name: str, size: int = 10, mark: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "description": words(size, name),
                           "input_schema": {"type": "object", "properties": {}}}
    if mark:
        out["cache_control"] = EPHEMERAL
    return out


def text(body: str, mark: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "text", "text": body}
    if mark:
        out["cache_control"] = EPHEMERAL
    return out


def messages(n: int, mark_last: bool = True, size: int = 20) -> list[dict[str, Any]]:
    out = [{"role": "user" if i % 2 == 0 else "assistant",
            "content": [text(words(size, f"m{i}-"), mark_last and i == n - 1)]}
           for i in range(n)]
    return out


def body(tools: list[dict[str, Any]], system: str, msgs: list[dict[str, Any]],
         mark_system: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 100, "tools": tools,
            "system": [text(system, mark_system)], "messages": msgs, **extra}


def tokens_to(b: dict[str, Any], block_index: int) -> int:
    blocks, _ = anthropic_blocks(b)
    return sum(len(encode(x.text)) for x in blocks[:block_index + 1])


def total(b: dict[str, Any]) -> int:
    blocks, _ = anthropic_blocks(b)
    return sum(len(encode(x.text)) for x in blocks)


def small(min_tokens: int = 50, **kw: Any) -> AnthropicCache:
    return AnthropicCache(encode, AnthropicParams(min_tokens=min_tokens, **kw))


# ---- Anthropic ----------------------------------------------------------------------------
def test_a_repeated_prompt_reads_everything_up_to_its_last_breakpoint() -> None:
    cache = small()
    b = body([tool("a"), tool("b")], words(100, "s"), messages(3))
    first = cache.feed(b, 0.0)
    assert (first.cache_read, first.cache_write, first.uncached) == (0, total(b), 0)
    second = cache.feed(b, 10.0)
    assert second.cache_read == total(b) and second.cache_write == 0 and second.hit


def test_a_changed_tool_invalidates_the_whole_cache() -> None:
    cache = small()
    cache.feed(body([tool("a", mark=True), tool("b", mark=True)], words(100, "s"),
                    messages(3)), 0.0)
    changed = body([tool("a", mark=True), tool("b", 11, mark=True)], words(100, "s"),
                   messages(3))
    out = cache.feed(changed, 1.0)
    assert out.cache_read == 0 and out.cache_write == total(changed)


def test_a_changed_system_keeps_the_tools_cache() -> None:
    cache = small(min_tokens=15)
    tools = [tool("a"), tool("b", 20, mark=True)]
    cache.feed(body(tools, words(100, "s"), messages(3)), 0.0)
    changed = body(tools, words(100, "t"), messages(3))
    out = cache.feed(changed, 1.0)
    assert out.cache_read == tokens_to(changed, 1)  # both tools, not the system
    assert out.cache_write == total(changed) - out.cache_read


def test_appended_turns_read_the_previous_prefix_and_write_the_rest() -> None:
    cache = small()
    before = body([tool("a")], words(100, "s"), messages(4))
    cache.feed(before, 0.0)
    after = body([tool("a")], words(100, "s"), messages(6))
    out = cache.feed(after, 1.0)
    assert out.cache_read == total(before)
    assert out.cache_write == total(after) - total(before)


def test_the_lookback_reaches_20_blocks_and_no_further() -> None:
    for appended, hit in ((20, True), (21, False)):
        cache = small()
        base = messages(4)
        cache.feed(body([], words(100, "s"), base, mark_system=False), 0.0)
        longer = [dict(m) for m in base]
        longer[-1] = {"role": longer[-1]["role"],
                      "content": [text(longer[-1]["content"][0]["text"])]}  # mark moves on
        for i in range(appended):
            longer.append({"role": "user" if i % 2 else "assistant",
                           "content": [text(words(5, f"x{i}-"), i == appended - 1)]})
        b = body([], words(100, "s"), longer, mark_system=False)
        out = cache.feed(b, 1.0)
        blocks, _ = anthropic_blocks(b)
        assert len(blocks) == 1 + 4 + appended
        assert out.hit is hit, appended
        if hit:
            assert out.cache_read == tokens_to(b, 4)


def test_a_breakpoint_on_the_stable_prefix_survives_a_lookback_miss() -> None:
    """The reason Gliding marks the end of the stable prefix as well."""
    cache = small()
    cache.feed(body([], words(100, "s"), messages(4)), 0.0)
    b = body([], words(100, "s"), messages(40))
    out = cache.feed(b, 1.0)
    assert out.cache_read == tokens_to(b, 0)


def test_a_prefix_under_the_minimum_is_never_cached() -> None:
    cache = small(min_tokens=1024)
    b = body([tool("a")], words(100, "s"), messages(3))
    assert total(b) < 1024
    for t in (0.0, 1.0, 2.0):
        out = cache.feed(b, t)
        assert out.below_min and not out.hit and out.cache_write == 0
        assert out.uncached == total(b)
    assert anthropic_min_tokens("claude-3-5-haiku-latest") == 2048
    assert anthropic_min_tokens("anthropic/claude-sonnet-4-5") == 1024


def test_only_the_breakpoints_over_the_minimum_are_written() -> None:
    cache = small(min_tokens=150)
    b = body([tool("a", mark=True)], words(200, "s"), messages(2))
    cache.feed(b, 0.0)
    changed = body([tool("a", mark=True)], words(200, "t"), messages(2))
    out = cache.feed(changed, 1.0)
    assert out.cache_read == 0  # the tool's prefix (under 150) was never written


def test_five_breakpoints_are_an_error() -> None:
    cache = small()
    b = body([tool(n, mark=True) for n in "abc"], words(100, "s"), messages(2))
    out = cache.feed(b, 0.0)  # 3 tools + the system + the last message
    assert out.error and "5 cache_control" in out.error and out.breakpoints == 5
    ok = body([tool(n, mark=True) for n in "ab"], words(100, "s"), messages(2))
    assert cache.feed(ok, 1.0).error is None


def test_entries_expire_after_the_ttl_and_a_hit_refreshes_them() -> None:
    cache = small()
    b = body([], words(100, "s"), messages(2))
    cache.feed(b, 0.0)
    assert cache.feed(b, 250.0).hit
    assert cache.feed(b, 500.0).hit  # refreshed at 250
    assert not cache.feed(b, 801.0).hit  # 301 s after the last use
    one_hour = body([], words(100, "s"), messages(2, mark_last=False), mark_system=False)
    one_hour["system"] = [{"type": "text", "text": words(100, "s"),
                           "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    cache.feed(one_hour, 1000.0)
    assert cache.feed(one_hour, 1000.0 + 3000).hit


def test_tool_choice_invalidates_the_messages_but_not_the_system() -> None:
    cache = small()
    b = body([tool("a")], words(100, "s"), messages(3), tool_choice={"type": "auto"})
    cache.feed(b, 0.0)
    changed = dict(b, tool_choice={"type": "any"})
    out = cache.feed(changed, 1.0)
    assert out.cache_read == tokens_to(changed, 1)


def test_moving_the_last_breakpoint_keeps_the_prefix_identity() -> None:
    """cache_control is not part of a block's identity: the next turn reads the last one."""
    cache = small()
    first = body([], words(100, "s"), messages(3))
    cache.feed(first, 0.0)
    second = body([], words(100, "s"), messages(3, mark_last=False) + messages(5)[3:])
    assert cache.feed(second, 1.0).cache_read == total(first)


# ---- OpenAI -------------------------------------------------------------------------------
def openai_body(n_words: int, tag: str = "w", tools: int = 0) -> dict[str, Any]:
    return {"model": "gpt-test",
            "tools": [{"type": "function", "function": {"name": f"t{i}"}} for i in range(tools)],
            "messages": [{"role": "user", "content": words(n_words, tag)}]}


def test_openai_caches_from_1024_tokens_in_128_token_steps() -> None:
    cache = OpenAICache(encode)
    short = openai_body(1022)  # 1023 tokens with the "[user]" header
    assert cache.feed(short, 0.0).below_min
    assert not cache.feed(short, 1.0).hit
    b = openai_body(1299)  # 1,300 tokens
    assert cache.feed(b, 2.0).cache_read == 0
    again = cache.feed(b, 3.0)
    assert again.cache_read == 1024 + 2 * 128 and again.uncached == 1300 - 1280
    longer = openai_body(2999)
    assert cache.feed(longer, 4.0).cache_read == 1280  # the shared prefix, in increments
    assert cache.feed(openai_body(1299, "v"), 5.0).cache_read == 0
    assert cache.feed(longer, 5.0 + 301).cache_read == 0  # expired


def test_openai_tools_come_before_the_messages() -> None:
    cache = OpenAICache(encode, OpenAIParams())
    cache.feed(openai_body(2000, tools=2), 0.0)
    assert cache.feed(openai_body(2000, tools=3), 1.0).cache_read == 0


# ---- sessions and the report ---------------------------------------------------------------
def test_annotate_finds_sessions_first_calls_and_compactions() -> None:
    sys_a, sys_b = words(30, "a"), words(30, "b")
    m = messages(8, mark_last=False)
    calls = [
        Call("anthropic", body([], sys_a, m[:1]), t=0),
        Call("anthropic", body([], sys_b, m[:1]), t=1),
        Call("anthropic", body([], sys_a, m[:3]), t=2),
        Call("anthropic", body([], sys_a, m[:5]), t=3),
        Call("anthropic", body([], sys_a, [m[0], m[4], m[5], m[6]]), t=4),  # compacted
        Call("anthropic", body([], sys_b, m[:3]), t=5),
    ]
    out = annotate(calls)
    assert [c.session for c in out] == ["anthropic-1", "anthropic-2", "anthropic-1",
                                        "anthropic-1", "anthropic-1", "anthropic-2"]
    assert [sorted(c.tags) for c in out] == [["first"], ["first"], [], [], ["compaction"], []]


def test_report_shares_over_all_steady_and_resumed_calls() -> None:
    def b(n: int) -> dict[str, Any]:
        return body([], words(3000, "s"), messages(n, size=400))

    calls = [Call("anthropic", b(1), "s1", 0.0, frozenset({"first"}), "x"),
             Call("anthropic", b(3), "s1", 1.0, frozenset(), "x"),
             Call("anthropic", b(5), "s1", 2.0, frozenset({"resume"}), "x")]
    calls += [Call("openai", {"model": "m", "messages": [{"role": "user", "content":
                                                          words(2000, "o")}]}, "o", float(t))
              for t in range(2)]
    outcomes = simulate(calls, encode)
    r = report(calls, outcomes, {"anthropic": CLAUDE_35_HAIKU, "openai": GPT_4O_MINI})
    a = r["anthropic"]
    assert a["all"]["calls"] == 3 and a["steady"]["calls"] == 2
    assert a["excluded_from_steady"] == {"first_calls": 1, "after_compaction": 0,
                                         "share_of_calls": pytest.approx(0.3333)}
    read = sum(o.cache_read for o in outcomes[:3])
    assert a["all"]["read_share"] == round(read / sum(o.input_tokens for o in outcomes[:3]), 4)
    assert a["after_resume"]["calls"] == 1 and a["after_resume"]["read_share"] > 0.5
    assert [o.reusable for o in outcomes[:3]] == [0, total(b(1)), total(b(3))]
    assert a["steady"]["ceiling_read_share"] >= a["steady"]["read_share"] > 0
    assert a["by_label"]["x"]["all"]["calls"] == 3
    assert r["openai"]["all"]["cache_read_tokens"] == 1920  # 2001 tokens: 1024 + 7 × 128
    haiku = outcomes[0]
    assert a["all"]["input_cost_usd"] > 0 and haiku.cache_write > 0


def test_a_mark_inside_a_tool_result_is_a_breakpoint_on_it() -> None:
    """litellm puts a tool message's cache_control on the text inside the tool_result."""
    result = {"type": "tool_result", "tool_use_id": "c1",
              "content": [text(words(10, "r"), mark=True)]}
    b = body([], words(100, "s"), [{"role": "user", "content": [result]}], mark_system=False)
    blocks, _ = anthropic_blocks(b)
    assert [x.ttl for x in blocks] == [None, "5m"]
    plain = dict(result, content=words(10, "r"))
    same, _ = anthropic_blocks(body([], words(100, "s"), [{"role": "user", "content": [plain]}],
                                    mark_system=False))
    assert [x.text for x in same] == [x.text for x in blocks]
