"""When compaction stalls: a compaction that leaves the prompt over the window's high-water mark
(high_water x max_tokens), followed by another within STALL_CALLS prompts, twice in a row
(``ContextEngine.stalled``, which the agent loop turns into ``compaction_stalled``); spaced
compactions never stall, however large the part no compaction can shrink."""

from __future__ import annotations

from gliding.context.engine import STALL_CALLS, STALLS, ContextEngine
from tests.context.test_engine import COUNTER, PREFIX, small
from tests.context.test_engine_cadence import add_step, engine_with_prefix, prompt_compacted


def test_compactions_that_leave_the_prompt_over_the_mark_every_call_stall() -> None:
    config = small(keep_recent=3, max_tokens=5000)
    engine = ContextEngine(config, COUNTER, PREFIX)
    w = config.window
    seen: list[tuple[int, bool]] = []  # (compacted, stalled) after each call

    for n in range(1, 8):
        add_step(engine, n, 2200, None)  # two replies kept are over the window's mark
        seen.append((prompt_compacted(engine), engine.stalled))
        if engine.stalled:
            break

    assert engine.stats.last_prompt_tokens > w.high_water * w.max_tokens
    compactions = [i for i, (compacted, _) in enumerate(seen) if compacted]
    assert len(compactions) == 1 + STALLS  # the first compaction, then two that came too soon
    assert all(b - a <= STALL_CALLS for a, b in zip(compactions, compactions[1:], strict=False))
    assert [stalled for _, stalled in seen] == [False] * (len(seen) - 1) + [True]
    assert engine.stalls == STALLS


def test_spaced_compactions_never_stall_even_when_each_leaves_the_prompt_over_the_mark() -> None:
    config = small(keep_recent=2, max_tokens=6000)
    engine = engine_with_prefix(config, 1400)  # the prefix alone is over high_water x target
    w = config.window
    assert COUNTER.messages(engine.prefix) > w.high_water * w.target_tokens

    for n in range(1, 41):
        add_step(engine, n, 10, 15)  # a batch of growth takes several calls
        prompt_compacted(engine)
        assert not engine.stalled

    assert engine.stats.compactions >= 3 and engine.stalls == 0


def test_a_compaction_that_comes_later_ends_the_row() -> None:
    config = small(keep_recent=3, max_tokens=5000)
    engine = ContextEngine(config, COUNTER, PREFIX)
    for n in range(1, 6):
        add_step(engine, n, 2200, None)
        prompt_compacted(engine)
    assert engine.stalls == 1  # the third compaction would stop the session

    # small turns: the next compaction waits for a batch of growth, more than STALL_CALLS calls
    calls_to_next = 0
    for n in range(5, 30):
        add_step(engine, n, 30, None)
        calls_to_next += 1
        if prompt_compacted(engine):
            break
    assert calls_to_next > STALL_CALLS
    assert engine.stalls == 0 and not engine.stalled
