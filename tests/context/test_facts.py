"""The fact book: identifiers the agent wrote that a tool result showed, kept with the result line
that says what they are; lines picked by a greedy cover of what the prompt lacks, evicted least
recently used first to the budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.context.facts import FactBook
from gliding.context.prefetch.lines import LineIndex

BASE = "gliding://job/j/"


def count(text: str) -> int:
    """A token counter fake: one token a word."""
    return len(text.split())


def rel(iri: str) -> str:
    return iri.removeprefix(BASE)


def result(n: int) -> str:
    return f"{BASE}result/DA-{n}-0"


def index_of(*results: str, turns: tuple[str, ...] = ()) -> LineIndex:
    index = LineIndex()
    for n, text in enumerate(results, 1):
        index.add(result(n), text, turn=n, kind="result")
    for n, text in enumerate(turns, 1):
        index.add(f"{BASE}turn/DA/{n}", text, turn=n, kind="turn")
    return index


# --- which identifiers are facts -----------------------------------------------------------------


def test_a_fact_is_written_by_the_agent_and_shown_by_a_tool_result() -> None:
    index = index_of("src/app/loader.py:42: def parse_config(path_name)",
                     turns=("I wonder about turn_only.name",))
    book = FactBook(1000, count)

    book.observe_use(["parse_config", "turn_only.name", "never_shown.attr", "src/app/loader.py"],
                     turn=3, given={"src/app/loader.py"})

    assert book.missing(set(), index) == {"parse_config"}
    assert "src/app/loader.py" not in book.used  # the task gave it
    assert "path_name" not in book.used  # shown, never written


def test_a_result_that_comes_after_the_use_makes_it_a_fact_too() -> None:
    index = LineIndex()
    book = FactBook(1000, count)
    book.observe_use(["zebra_cfg.Settings"], turn=1, given=())
    assert book.missing(set(), index) == set()

    index.add(result(2), "returns zebra_cfg.Settings", turn=2, kind="result")

    assert book.missing(set(), index) == {"zebra_cfg.Settings"}


def test_what_the_prompt_or_a_fact_line_shows_is_not_missing() -> None:
    index = index_of("alpha_one.x and beta_two.y", "gamma_three.z")
    book = FactBook(1000, count)
    book.observe_use(["alpha_one.x", "beta_two.y", "gamma_three.z"], turn=1, given=())

    assert book.missing({"gamma_three.z"}, index) == {"alpha_one.x", "beta_two.y"}
    book.add_lines({"alpha_one.x"}, index, rel)  # its line shows beta_two.y as well
    assert book.missing({"gamma_three.z"}, index) == set()
    assert book.missing(set(), index) == {"gamma_three.z"}


def test_a_fact_whose_result_left_the_index_is_not_missing() -> None:
    index = LineIndex(max_sources=1)
    index.add(result(1), "old_name.attr here", turn=1, kind="result")
    book = FactBook(1000, count)
    book.observe_use(["old_name.attr"], turn=1, given=())
    assert book.missing(set(), index) == {"old_name.attr"}

    index.add(result(2), "something_else.entirely", turn=2, kind="result")

    assert book.missing(set(), index) == set()


# --- lines -------------------------------------------------------------------------------------


def test_add_lines_covers_the_missing_facts_with_the_fewest_lines() -> None:
    index = index_of("a_x.one only\nother_line a_x.one b_y.two\nplain", "c_z.three here",
                     turns=("a_x.one b_y.two c_z.three",))  # a turn never is a fact's line
    book = FactBook(1000, count)
    book.observe_use(["a_x.one"], turn=2, given=())
    book.observe_use(["b_y.two", "c_z.three"], turn=5, given=())

    added = book.add_lines({"a_x.one", "b_y.two", "c_z.three"}, index, rel)

    assert [(x.line.iri, x.line.number) for x in added] == [(result(1), 2), (result(2), 1)]
    assert [set(x.facts) for x in added] == [{"a_x.one", "b_y.two"}, {"c_z.three"}]
    assert [x.used for x in added] == [5, 5]
    first = "<result/DA-1-0> 2: other_line a_x.one b_y.two"
    assert added[0].tokens == count(first) + 1
    assert book.lines == added
    assert book.tokens == sum(x.tokens for x in added)
    assert book.render(book.lines, rel).splitlines() == [
        "[Facts this job has used, each with a line of the result it came from "
        "(<IRI> line: text):]",
        first,
        "<result/DA-2-0> 1: c_z.three here",
    ]


def test_between_equal_covers_the_shorter_line_wins() -> None:
    index = index_of("a long line that mentions key_name.attr among many other words",
                     "short key_name.attr")
    book = FactBook(1000, count)
    book.observe_use(["key_name.attr"], turn=1, given=())

    (added,) = book.add_lines({"key_name.attr"}, index, rel)

    assert added.line.iri == result(2)


def test_render_of_nothing_is_empty() -> None:
    assert FactBook(10, count).render([], rel) == ""


# --- eviction ----------------------------------------------------------------------------------


def book_with_three_lines() -> tuple[FactBook, LineIndex]:
    index = index_of("old_fact.one here", "new_fact.two here", "mid_fact.three here")
    book = FactBook(1000, count)
    book.observe_use(["old_fact.one"], turn=1, given=())
    book.observe_use(["mid_fact.three"], turn=3, given=())
    book.observe_use(["new_fact.two"], turn=5, given=())
    book.add_lines({"old_fact.one", "new_fact.two", "mid_fact.three"}, index, rel)
    assert len(book.lines) == 3
    return book, index


def test_evict_within_budget_evicts_nothing() -> None:
    book, _index = book_with_three_lines()

    assert book.evict() == []
    assert len(book.lines) == 3


def test_evict_drops_the_least_recently_used_lines_until_the_book_fits() -> None:
    book, index = book_with_three_lines()
    per_line = book.lines[0].tokens
    book.budget_tokens = 2 * per_line  # one line too many

    gone = book.evict()

    assert [set(x.facts) for x in gone] == [{"old_fact.one"}]
    assert {f for x in book.lines for f in x.facts} == {"new_fact.two", "mid_fact.three"}
    assert book.tokens <= book.budget_tokens
    # an evicted fact is no longer missing (its line stays in L0) until the agent uses it again
    assert book.missing(set(), index) == set()
    book.observe_use(["old_fact.one"], turn=9, given=())
    assert book.missing(set(), index) == {"old_fact.one"}


def test_a_fact_used_again_after_its_line_was_added_stays_missing_after_eviction() -> None:
    book, index = book_with_three_lines()
    book.observe_use(["old_fact.one"], turn=8, given=())  # used again; its line says used=1
    book.budget_tokens = 0

    gone = book.evict()

    assert len(gone) == 3 and book.lines == []
    assert book.missing(set(), index) == {"old_fact.one"}


# --- property: cover and budget ------------------------------------------------------------------

POOL = [f"name_{i}.attr" for i in range(12)]
results_st = st.lists(st.lists(st.lists(st.sampled_from(POOL), min_size=1, max_size=4),
                               min_size=1, max_size=5), min_size=1, max_size=6)
uses_st = st.lists(st.tuples(st.lists(st.sampled_from(POOL), max_size=4), st.integers(1, 50)),
                   max_size=10)


@settings(max_examples=60, deadline=None)
@given(results=results_st, uses=uses_st, visible=st.sets(st.sampled_from(POOL)),
       budget=st.integers(0, 60))
def test_lines_cover_every_missing_fact_and_eviction_keeps_the_most_recent_within_budget(
    results: list[list[list[str]]], uses: list[tuple[list[str], int]], visible: set[str],
    budget: int,
) -> None:
    index = index_of(*("\n".join(" ".join(line) for line in lines) for lines in results))
    book = FactBook(budget, count)
    for ids, turn in uses:
        book.observe_use(ids, turn, given=())
    shown = {x for lines in results for line in lines for x in line}

    missing = book.missing(visible, index)
    added = book.add_lines(missing, index, rel)

    assert missing == (set(book.used) & shown) - visible
    covered = [set(x.facts) for x in added]
    assert set().union(*covered) == missing
    assert sum(len(c) for c in covered) == len(missing)  # each fact covered once
    assert all(c <= x.line.ids and c for c, x in zip(covered, added, strict=True))
    assert book.missing(visible, index) == set()

    recency = {id(x): max(book.used[f] for f in x.facts) for x in book.lines}
    gone = book.evict()

    assert book.tokens <= budget
    if gone and book.lines:
        assert max(recency[id(x)] for x in gone) <= min(recency[id(x)] for x in book.lines)
    assert len(gone) + len(book.lines) == len(added)


# --- identifiers of results that left the prompt unused ------------------------------------------


def test_see_lists_the_ids_the_prompt_does_not_show_within_half_the_budget() -> None:
    book = FactBook(budget_tokens=100, count=count)
    ids = [f"name_{n}.attr" for n in range(200)]

    first = book.see(result(1), ids, hidden={"name_0.attr"}, label=rel)

    assert first is not None and first.ids[0] == "name_1.attr"  # in order, less the hidden
    assert "name_0.attr" not in first.ids
    assert book.render_seen([first], rel).splitlines()[1] == (
        "<result/DA-1-0> " + " ".join(first.ids))
    more = [book.see(result(n), [f"other_{n}_{k}.x" for k in range(50)], (), rel)
            for n in range(2, 9)]
    assert sum(x.tokens for x in book.seen) <= 50  # SEEN_SHARE of the budget, never more
    assert more[-1] is None  # no room left for the lists
    assert book.see(result(9), ["name_1.attr"], hidden={"name_1.attr"}, label=rel) is None


def test_evict_drops_the_lists_oldest_first_before_any_used_fact() -> None:
    book, _index = book_with_three_lines()
    listed = book.see(result(7), ["listed_id.one", "listed_id.two"], (), rel)
    assert listed is not None
    book.budget_tokens = book.tokens - 1  # one token too many

    assert book.evict() == []  # no fact line had to go
    assert book.seen == [] and len(book.lines) == 3
