"""The prompt meter behind the ``turn`` events' token fields: the naive prompt per call from the
engine's running sum, and a simulated prefix cache that reads what a session's previous prompt
shares with this one, in 1,024 then 128-token steps, and nothing under 1,024 tokens."""

from __future__ import annotations

from gliding.context.engine import EngineStats
from gliding.context.prompt_meter import INCREMENT, MIN_TOKENS, PromptMeter, cached_prefix
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Message


def test_a_cache_reads_nothing_under_the_minimum_then_whole_steps() -> None:
    assert cached_prefix(0) == cached_prefix(MIN_TOKENS - 1) == 0
    assert cached_prefix(MIN_TOKENS) == MIN_TOKENS
    assert cached_prefix(MIN_TOKENS + INCREMENT - 1) == MIN_TOKENS
    assert cached_prefix(MIN_TOKENS + 3 * INCREMENT + 5) == MIN_TOKENS + 3 * INCREMENT


def test_the_meter_reads_the_shared_prefix_and_the_naive_prompt_per_call() -> None:
    counter = TokenCounter()
    system = Message("system", "rules " * 1500)  # well over MIN_TOKENS on its own
    first = [system, Message("user", "the task")]
    meter = PromptMeter(counter)
    stats = EngineStats(baseline_tokens=1600, last_prompt_tokens=1600)
    one = meter.measure(first, stats)
    assert (one.built, one.naive, one.cached, one.compactions) == (1600, 1600, 0, 0)
    second = [*first, Message("assistant", "a reply"), Message("user", "more")]
    stats.baseline_tokens, stats.last_prompt_tokens = 1600 + 1620, 1620
    two = meter.measure(second, stats)
    shared = counter.messages(first)
    assert two.naive == 1620 and two.built == 1620
    assert two.cached == cached_prefix(shared) and two.cached >= MIN_TOKENS
    compacted = [system, Message("user", "a summary of it all")]  # the history rewritten
    stats.baseline_tokens, stats.compactions = stats.baseline_tokens + 1700, 1
    three = meter.measure(compacted, stats)
    assert three.cached == cached_prefix(counter.message(system)) and three.compactions == 1
    assert meter.last == three
