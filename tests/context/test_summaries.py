"""The L1 summary chain: eviction by score (properties), weak references, and relative IRIs in
the rendered history block."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.context.summaries import (
    ChainEntry,
    SummaryChain,
    Weights,
    choose_evictions,
    relevance,
    scores,
    terms,
)
from gliding.context.tokens import TokenCounter
from gliding.core.iri import result_iri, turn_iri

WORDS = ["parse_config", "loader", "yaml", "pytest", "passed", "failed", "write_file",
         "src/app.py", "retry", "cache_key", "tenant", "region", "handler", "budget", "1234"]
COUNTER = TokenCounter()


@st.composite
def chains(draw: st.DrawFn, *, same_tokens: bool = False) -> list[ChainEntry]:
    n = draw(st.integers(1, 14))
    turns = sorted(draw(st.sets(st.integers(1, 500), min_size=n, max_size=n)))
    fixed = draw(st.integers(1, 80))
    out = []
    for turn in turns:
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
        tokens = fixed if same_tokens else draw(st.integers(1, 80))
        out.append(ChainEntry(turn, "assistant", " ".join(words),
                              str(turn_iri("job-1", "DA", turn)), tokens))
    return out


weights_st = st.builds(Weights, st.floats(0, 1), st.floats(0, 3), st.floats(0, 3))
focus_st = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)


def kept(entries: list[ChainEntry], gone: list[int]) -> list[ChainEntry]:
    return [e for i, e in enumerate(entries) if i not in set(gone)]


@settings(max_examples=120)
@given(entries=chains(), focus=focus_st, weights=weights_st, share=st.floats(0, 1.2))
def test_after_eviction_the_chain_fits_its_budget(
    entries: list[ChainEntry], focus: str, weights: Weights, share: float
) -> None:
    total = sum(e.tokens for e in entries)
    budget = int(total * share)

    gone = choose_evictions(entries, focus, weights, budget)

    assert sum(e.tokens for e in kept(entries, gone)) <= budget
    assert gone == sorted(set(gone))
    if total <= budget:
        assert gone == []
    else:
        assert gone  # something had to go


@settings(max_examples=120)
@given(entries=chains(), weights=weights_st, share=st.floats(0, 1), data=st.data())
def test_the_most_relevant_entry_outlives_less_relevant_older_costlier_ones(
    entries: list[ChainEntry], weights: Weights, share: float, data: st.DataObject
) -> None:
    best = data.draw(st.integers(0, len(entries) - 1))
    extra = data.draw(focus_st)
    focus = entries[best].summary + " " + extra  # every term of ``best`` is in the focus
    budget = int(sum(e.tokens for e in entries) * share)

    gone = set(choose_evictions(entries, focus, weights, budget))

    focus_terms = terms(focus)
    assert relevance(terms(entries[best].summary), focus_terms) == 1.0
    if best in gone:
        for i, other in enumerate(entries):
            dominated = (other.turn < entries[best].turn and other.tokens > entries[best].tokens
                         and relevance(terms(other.summary), focus_terms) < 1.0)
            assert not (dominated and i not in gone), (
                f"evicted {entries[best]} but kept the less relevant, older, costlier {other}")


@settings(max_examples=80)
@given(entries=chains(), focus=focus_st, w_recency=st.floats(0, 3), share=st.floats(0, 1))
def test_with_beta_0_and_no_cost_weight_the_oldest_go_first(
    entries: list[ChainEntry], focus: str, w_recency: float, share: float
) -> None:
    budget = int(sum(e.tokens for e in entries) * share)

    gone = choose_evictions(entries, focus, Weights(0.0, w_recency, 0.0), budget)

    assert gone == list(range(len(gone)))


@settings(max_examples=80)
@given(entries=chains(same_tokens=True), focus=focus_st, weights=weights_st,
       share=st.floats(0, 1))
def test_with_beta_0_and_equal_costs_the_oldest_go_first(
    entries: list[ChainEntry], focus: str, weights: Weights, share: float
) -> None:
    budget = int(sum(e.tokens for e in entries) * share)

    gone = choose_evictions(entries, focus, Weights(0.0, weights.w_recency, weights.w_cost),
                            budget)

    assert gone == list(range(len(gone)))


@settings(max_examples=80)
@given(entries=chains(), focus=focus_st, weights=weights_st, share=st.floats(0, 1))
def test_with_beta_1_the_least_relevant_go_first(
    entries: list[ChainEntry], focus: str, weights: Weights, share: float
) -> None:
    budget = int(sum(e.tokens for e in entries) * share)

    gone = set(choose_evictions(entries, focus, Weights(1.0, weights.w_recency, weights.w_cost),
                                budget))

    rel = [relevance(terms(e.summary), terms(focus)) for e in entries]
    if gone and len(gone) < len(entries):
        assert max(rel[i] for i in gone) <= min(rel[i] for i in range(len(entries))
                                                if i not in gone)


def test_scores_follow_the_formula() -> None:
    entries = [ChainEntry(1, "assistant", "parse_config loader", "i1", 10),
               ChainEntry(3, "assistant", "pytest passed", "i3", 40),
               ChainEntry(5, "assistant", "yaml loader", "i5", 20)]
    w = Weights(0.4, 0.5, 0.25)

    got = scores(entries, "loader yaml", w)

    # relevance 1/2, 0, 1; recency 0, 1/2, 1; cheapness 3/4, 0, 1/2
    want = [0.4 * 0.5 + 0.6 * (0.25 * 0.75),
            0.6 * (0.5 * 0.5),
            0.4 * 1 + 0.6 * (0.5 * 1 + 0.25 * 0.5)]
    assert got == pytest.approx(want)


# --- the chain: weak references and rendering ------------------------------------------------

HEADER = re.compile(r"^\[Earlier turns, summarised\. <x> means (?P<base>\S*)x; ")
LINE = re.compile(r"^#(?P<turn>\d+) (?P<role>[^:]+): (?P<summary>.*) <(?P<iri>[^<>]+)>$")


def resolve(header: str, line: str) -> tuple[int, str]:
    base = HEADER.match(header)
    assert base, header
    m = LINE.match(line)
    assert m, line
    return int(m["turn"]), base["base"] + m["iri"]


jobs = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(job=jobs, n=st.integers(1, 25), budget_share=st.floats(0.1, 1.5), focus=focus_st,
       seed=st.integers(0, 10_000))
def test_evicted_iris_become_weak_and_render_counts_them(
    job: str, n: int, budget_share: float, focus: str, seed: int
) -> None:
    rnd = random.Random(seed)
    chain = SummaryChain(1, Weights(), COUNTER.count)
    for turn in range(1, n + 1):
        iri = (turn_iri(job, "DA", turn) if turn % 2 else result_iri(job, f"DA-{turn}-0"))
        chain.add(turn, "assistant" if turn % 2 else "tool bash",
                  " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 8))), str(iri))
    all_iris = [e.iri for e in chain.entries]
    chain.budget_tokens = max(0, int(chain.tokens * budget_share))

    evicted = chain.evict(focus)

    assert chain.tokens <= chain.budget_tokens
    assert chain.weak == [e.iri for e in evicted]
    assert sorted(chain.weak + [e.iri for e in chain.entries]) == sorted(all_iris)
    text = chain.render()
    header, *lines = text.splitlines()
    if chain.weak:
        assert lines[-1] == (f"[{len(chain.weak)} older turns dropped from this list; "
                             "recall(query) finds them.]")
        lines = lines[:-1]
    else:
        assert "dropped" not in text
    resolved = [resolve(header, line) for line in lines]
    assert resolved == [(e.turn, e.iri) for e in chain.entries]
    for weak_iri in chain.weak:
        assert f"<{weak_iri}>" not in text


@settings(max_examples=60)
@given(job=jobs, turns=st.lists(st.integers(1, 10_000), min_size=1, max_size=20, unique=True))
def test_render_lines_carry_relative_iris_that_resolve_with_the_header_base(
    job: str, turns: list[int]
) -> None:
    chain = SummaryChain(10_000, Weights(), COUNTER.count)
    entries = [chain.add(t, "assistant", f"step {t} wrote src/app.py",
                         str(turn_iri(job, "DA", t) if t % 3 else result_iri(job, f"DA-{t}-0")))
               for t in sorted(turns)]

    header, *lines = chain.render().splitlines()

    assert HEADER.match(header)["base"] == f"gliding://job/{job}/"  # type: ignore[index]
    for entry, line in zip(entries, lines, strict=True):
        assert resolve(header, line) == (entry.turn, entry.iri)
        assert "gliding://" not in line  # relative, not repeated in full
    assert len(lines) == len(entries)


def test_render_of_a_subset_shows_only_those_entries_and_no_weak_note() -> None:
    chain = SummaryChain(30, Weights(), COUNTER.count)
    for t in range(1, 6):
        chain.add(t, "assistant", f"turn {t} parse_config", str(turn_iri("j", "DA", t)))
    chain.evict("parse_config")
    assert chain.weak

    header, *lines = chain.render(chain.entries[-1:], weak=False).splitlines()

    assert [resolve(header, line)[1] for line in lines] == [chain.entries[-1].iri]


def test_entry_tokens_are_the_tokens_of_its_rendered_line() -> None:
    chain = SummaryChain(1000, Weights(), COUNTER.count)

    entry = chain.add(7, "tool grep", "  3 matches\n in   src/app.py  ", "gliding://job/j/result/x")

    assert entry.summary == "3 matches in src/app.py"  # one line, whitespace collapsed
    assert entry.tokens == COUNTER.count("#7 tool grep: 3 matches in src/app.py <result/x>") + 1
