"""Kept facts in a session: an identifier the agent used, from a tool result, stays in the prompt
with its result line and IRI long after the messages that showed it were compacted and their L1
lines evicted; what the agent never used does not. Recall reaches a compacted turn by any
identifier of its full text. The working set lives until the next compaction."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gliding.config.settings import ContextSettings, PrefetchSettings, SummarySettings
from gliding.context.engine import WORKING_SET
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Message
from tests.context.test_engine import (
    COUNTER,
    JOB,
    Session,
    history_part,
    live_part,
    own_words,
    session,
    small,
)

FACT_LINE = "src/app/loader.py:42: def parse_config(path_name) -> zebra_cfg.Settings"
UNUSED_LINE = "src/app/loader.py:97: def unused_helper_fn(tenant_region)"
FACTS_HEADER = "[Facts this job has used"


def text_of(prompt: Sequence[Message]) -> str:
    return "\n".join(m.content for m in prompt)


def used_then_forgotten(config: ContextSettings, turns: int = 40) -> Session:
    """The first result shows a definition, the second reply uses it; then ``turns`` turns of
    words no one uses again push both far out of the prompt."""
    s = session(config)
    s.step("open the loader", f"{FACT_LINE}\n    return zebra_cfg.load(path_name)\n{UNUSED_LINE}")
    s.step("parse_config returns zebra_cfg.Settings; call it", "ok")
    for k in range(turns):
        s.step(own_words(40, k), own_words(250, 100 + k))
    s.prompt()
    return s


def test_a_used_fact_survives_many_compactions_with_its_result_line_and_iri() -> None:
    s = used_then_forgotten(small())
    first = str(result_iri(JOB, "DA-1-0"))
    gone = next(i for i, p in enumerate(s.prompts)
                if all(first not in m.content and "parse_config" not in m.content
                       for m in live_part(p)) and i > 2)
    evicted = s.engine.chain.weak

    assert s.compactions[-1] - s.compactions[gone] >= 20  # many compactions since it left
    assert first in evicted and str(turn_iri(JOB, "DA", 2)) in evicted  # its L1 lines are gone
    for p in s.prompts[gone:]:
        assert "zebra_cfg.Settings" in text_of(history_part(p))  # never lost on the way
    block = text_of(history_part(s.prompts[-1]))
    assert f"<result/DA-1-0> 1: {FACT_LINE}" in block.splitlines()
    base = re.search(r"<x> means (\S+)x;", block)
    assert base and base[1] + "result/DA-1-0" == first  # the IRI reads back
    assert FACTS_HEADER in block
    assert "unused_helper_fn" not in text_of(s.prompts[-1])  # shown, never used: not a fact


def test_without_a_facts_budget_the_used_fact_is_lost_with_its_l1_lines() -> None:
    config = small()
    none = config.model_copy(update={"summaries": SummarySettings(budget_tokens=200,
                                                                  facts_budget_tokens=0)})

    kept = used_then_forgotten(config)
    lost = used_then_forgotten(none)

    assert "zebra_cfg.Settings" in text_of(kept.prompts[-1])  # the control
    assert "zebra_cfg.Settings" not in text_of(lost.prompts[-1])
    assert all(FACTS_HEADER not in m.content for p in lost.prompts for m in p)
    assert lost.engine.facts.lines == []


def test_the_facts_stay_within_their_budget() -> None:
    config = small()
    tight = config.model_copy(update={"summaries": SummarySettings(budget_tokens=200,
                                                                   facts_budget_tokens=70)})
    s = session(tight)
    for k in range(6):  # six facts on six lines of ~31 tokens: two fit
        s.step(f"look at mod_{k}", f"src/app/mod_{k}.py:{k}: def fact_name_{k}(x) -> y")
        s.step(f"fact_name_{k} is what I need", "ok")
    for k in range(30):
        s.step(own_words(40, k), own_words(250, 100 + k))
    s.prompt()

    assert 0 < s.engine.facts.tokens <= 70
    shown = [k for k in range(6) if f"fact_name_{k}" in text_of(s.prompts[-1])]
    assert shown == [4, 5]  # the most recently used stay


def test_recall_finds_a_compacted_result_by_an_identifier_only_its_full_text_has() -> None:
    s = session(small())
    lines = [f"src/app/mod_{k}.py:{k}: handle(x)" for k in range(100)]
    lines.insert(70, "src/deep/needle_quantum.py:7: buried")
    s.step("search", "\n".join(lines), "grep")
    for k in range(30):
        s.step(own_words(40, k), own_words(250, 100 + k))
    s.prompt()
    first = str(result_iri(JOB, "DA-1-0"))
    entry = next(e for e in s.engine.stats.history if e.iri == first)
    assert "needle_quantum" not in entry.summary
    assert all("needle_quantum" not in m.content for m in s.prompts[-1])

    assert first in [e.iri for e in s.engine.recall("src/deep/needle_quantum.py")]
    assert s.engine.recall("no_such_identifier_anywhere") == []


def test_the_working_set_is_for_one_prompt_only_and_never_gets_an_l1_line() -> None:
    config = small()
    s = session(config.model_copy(update={"prefetch": PrefetchSettings(enabled=True,
                                                                       budget_tokens=400)}))
    for k in range(4):
        s.step(f"look at mod_{k}",
               "\n".join(f"src/pkg/mod_{k}.py:{i}: def fn_{k}_{i}(x) uses shared_key.lookup"
                         for i in range(5)))
    for k in range(8):
        s.step(own_words(40, k), own_words(150, 100 + k))
    s.step("now call shared_key.lookup", "shared_key.lookup failed")
    p = s.prompt()
    assert p[-1].content.startswith("[Working set:")
    assert s.engine.live[-1].tool == WORKING_SET and s.engine.warmed
    # the cache's newest mark is the newest message before the block, which the next drops
    assert s.engine.cache_marks(p).messages[-1] == len(p) - 2
    quoted = {w.iri for w in s.engine.warmed if w.lines}
    assert quoted and all(w.iri not in {x.iri for x in s.engine.live if x.whole}
                          for w in s.engine.warmed)
    again = s.prompt()  # nothing new happened: the same prompt, one block
    assert again == p

    compactions = s.engine.stats.compactions
    s.step("still on shared_key.lookup", "shared_key.lookup: now it works")
    after = s.prompt()
    blocks = [n for n, m in enumerate(after) if m.content.startswith("[Working set:")]
    assert blocks in ([], [len(after) - 1])  # the earlier block left; a new one may come last
    if s.engine.stats.compactions == compactions:  # what came before it is as it was: cached
        assert after[: len(p) - 1] == p[:-1]
        assert after[len(p) - 1].role == "assistant"
    for k in range(12):
        s.step(own_words(40, 50 + k), own_words(150, 150 + k))
        blocks = [m for m in s.prompts[-1] if m.content.startswith("[Working set:")]
        assert len(blocks) <= 1 and (not blocks or blocks[0] is s.prompts[-1][-1])

    # every message added is live or has its L1 entry; the working set has none
    live = [x for x in s.engine.live if x.tool != WORKING_SET]
    assert len(s.added) == len(s.engine.stats.history) + len(live)
    assert all(e.iri and "Working set" not in e.summary for e in s.engine.stats.history)
    assert all(not m.content.startswith("[Working set:") for m in history_part(s.prompts[-1]))


def test_many_used_facts_never_take_the_prompt_over_max_tokens() -> None:
    s = session(small(max_tokens=1500))
    for k in range(60):
        s.step(f"look at mod_{k}", "\n".join(
            f"src/app/mod_{k}.py:{i}: def fact_name_{k}_{i}(x) -> y" for i in range(3)))
        s.step(" ".join(f"fact_name_{k}_{i}" for i in range(3)) + " are what I need", "ok")
    s.prompt()

    assert s.engine.facts.lines  # the facts came back
    assert max(COUNTER.messages(p) for p in s.prompts) <= 1500


def test_a_result_compacted_before_any_use_leaves_its_identifiers_under_its_iri() -> None:
    """An agent comes back to a name a result showed long before; the compaction that moved the
    result out leaves the identifiers of it that the prompt does not show, under its IRI."""
    s = session(small())
    defs = [f"src/app/mod_{k}.py:{k}: def helper_{k}(arg_{k})" for k in range(30)]
    s.step("open the modules", "\n".join(defs))
    for k in range(6):
        s.step(own_words(40, k), own_words(250, 100 + k))
    s.prompt()
    gone = next(i for i, p in enumerate(s.prompts)
                if i > 1 and all("helper_29" not in m.content for m in live_part(p)))

    block = text_of(history_part(s.prompts[gone]))
    assert "[Identifiers in earlier results not used yet" in block
    listed = next(x for x in block.splitlines() if x.startswith("<result/DA-1-0> ")).split()[1:]
    l1_line = next(x for x in block.splitlines() if x.endswith("<result/DA-1-0>"))
    assert len(listed) >= 5
    assert all(x in "\n".join(defs) and x not in l1_line for x in listed)  # only what it lacks
