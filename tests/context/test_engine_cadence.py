"""How often the context engine compacts: at most once per prompt() call, never again when
nothing was added since the last call, and — when the part of the prompt no compaction can
shrink (the prefix and the newest keep_recent messages) is already over the trigger — once per
batch of growth rather than on every call. Every compaction is a cache miss."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gliding.config.settings import ContextSettings, PrefetchSettings
from gliding.context.engine import WORKING_SET, ContextEngine
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Message, ToolCall
from tests.context.test_engine import COUNTER, JOB, PREFIX, small, words


def with_prefetch(config: ContextSettings, enabled: bool) -> ContextSettings:
    return config.model_copy(update={"prefetch": PrefetchSettings(enabled=enabled,
                                                                  budget_tokens=400)})


def engine_with_prefix(config: ContextSettings, prefix_words: int) -> ContextEngine:
    prefix = list(PREFIX)
    if prefix_words:
        prefix[0] = Message("system", PREFIX[0].content + "\n" + words(prefix_words, 99))
    return ContextEngine(config, COUNTER, prefix)


def add_step(engine: ContextEngine, n: int, reply: int, result: int | None) -> None:
    """One turn as the agent loop adds it: the reply, and its call's result when there is one.
    Results define names of their own that later replies use (what prefetch can warm)."""
    calls = () if result is None else (ToolCall(f"c{n}", "bash", {"cmd": f"step {n}"}),)
    reply_text = f"use shared_{n % 4}.key\n" + words(reply, n)
    engine.add(Message("assistant", reply_text, calls), iri=str(turn_iri(JOB, "DA", n)))
    if result is not None:
        text = (f"src/pkg/mod_{n}.py:{n}: def fn_{n}(x) uses shared_{n % 4}.key\n"
                + words(result, 1000 + n))
        engine.add(Message("tool", text, (), f"c{n}", "bash"),
                   iri=str(result_iri(JOB, f"DA-{n}-0")), tool="bash")


def prompt_compacted(engine: ContextEngine) -> int:
    """prompt(), and how many compactions it made."""
    before = engine.stats.compactions
    engine.prompt("the goal")
    return engine.stats.compactions - before


# a step: reply words, result words (None: a plain reply), prompt() calls after it
steps_st = st.lists(st.tuples(st.integers(0, 150), st.one_of(st.none(), st.integers(0, 700)),
                              st.integers(1, 3)), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_st, prefix_words=st.sampled_from([0, 0, 300, 900, 1400]),
       keep_recent=st.integers(1, 4), max_tokens=st.sampled_from([1500, 2500, 6000]))
def test_prompt_compacts_at_most_once_a_call_and_never_again_with_nothing_added(
    steps: list[tuple[int, int | None, int]], prefix_words: int, keep_recent: int,
    max_tokens: int,
) -> None:
    engine = engine_with_prefix(small(keep_recent=keep_recent, max_tokens=max_tokens),
                                prefix_words)

    for n, (reply, result, calls) in enumerate(steps, 1):
        add_step(engine, n, reply, result)
        first = prompt_compacted(engine)
        again = [prompt_compacted(engine) for _ in range(calls - 1)]

        assert first <= 1
        assert again == [0] * (calls - 1), "compacted with nothing added since the last call"
    event(f"compacted: {engine.stats.compactions > 0}")


def test_an_irreducible_prompt_over_the_trigger_compacts_once_a_batch_not_every_call() -> None:
    config = small(keep_recent=2, max_tokens=6000)
    engine = engine_with_prefix(config, 1400)  # the prefix alone is over high_water x target
    w = config.window
    assert COUNTER.messages(engine.prefix) > w.high_water * w.target_tokens
    calls = 0

    for n in range(1, 41):
        add_step(engine, n, 10, 15)  # ~60 tokens a step against a batch of 240
        calls += 1
        prompt_compacted(engine)
        assert engine.stats.last_prompt_tokens <= w.max_tokens

    assert 0 < engine.stats.compactions <= calls // 3
    assert [prompt_compacted(engine) for _ in range(10)] == [0] * 10


def test_a_huge_newest_message_over_the_trigger_compacts_once_then_waits() -> None:
    config = small(keep_recent=2, max_tokens=6000)
    engine = ContextEngine(config, COUNTER, PREFIX)
    for n in range(1, 3):
        add_step(engine, n, 10, 20)
    assert prompt_compacted(engine) == 0
    add_step(engine, 3, 1200, None)  # a reply (never routed) alone over the trigger
    assert engine.live[-1].tokens > config.window.high_water * config.window.target_tokens

    counts = [prompt_compacted(engine) for _ in range(6)]

    assert counts == [1, 0, 0, 0, 0, 0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_st, prefix_words=st.sampled_from([0, 300, 900]))
def test_with_prefetch_on_prompt_still_compacts_at_most_once_a_call(
    steps: list[tuple[int, int | None, int]], prefix_words: int
) -> None:
    engine = engine_with_prefix(with_prefetch(small(max_tokens=2500), True), prefix_words)
    warmed = False

    for n, (reply, result, calls) in enumerate(steps, 1):
        add_step(engine, n, reply, result)
        got = [prompt_compacted(engine)]
        warmed = warmed or engine.live[-1].tool == WORKING_SET
        got += [prompt_compacted(engine) for _ in range(calls - 1)]

        assert all(x <= 1 for x in got)
        assert engine.stats.last_prompt_tokens <= 2500
    event(f"compacted: {engine.stats.compactions > 0}, working set: {warmed}")


def test_with_prefetch_on_the_working_set_never_makes_the_next_call_compact() -> None:
    config = with_prefetch(small(max_tokens=2500), True)
    # no kept facts or identifier lists: they would show the identifiers the block warms
    config = config.model_copy(update={"summaries": config.summaries.model_copy(
        update={"facts_budget_tokens": 0})})
    engine = engine_with_prefix(config, 0)
    for n, (reply, result) in enumerate([(70, 312), (0, 121), (24, 45)], 1):
        add_step(engine, n, reply, result)
        prompt_compacted(engine)
    assert engine.live[-1].tool == WORKING_SET  # the last call warmed lines

    assert prompt_compacted(engine) == 0
