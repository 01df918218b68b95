"""The prefetch line index and predictor: the index stays within its bounds and consistent when
it drops sources; the predictor warms only sources the prompt does not hold, only lines that
show something the prompt lacks, within its token budget, sources and lines per source."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.context.prefetch.lines import LineIndex
from gliding.context.prefetch.predictor import Predictor, PrefetchParams, Warm

BASE = "gliding://job/j/"


def iri(n: int) -> str:
    return f"{BASE}result/DA-{n}-0"


def count(text: str) -> int:
    """A token counter fake: one token a word."""
    return len(text.split())


def assert_consistent(index: LineIndex) -> None:
    """Postings and document frequencies describe exactly the sources the index holds."""
    df: Counter[str] = Counter()
    postings: dict[str, list[tuple[str, int]]] = {}
    for source in index.sources.values():
        df.update(source.ids)
        assert source.ids == frozenset().union(*(x.ids for x in source.lines))
        for line in source.lines:
            for ident in line.ids:
                postings.setdefault(ident, []).append((line.iri, line.number))
    assert +index.df == df and set(index.df) == set(df)  # no zero or negative counts left
    got = {k: sorted((x.iri, x.number) for x in v) for k, v in index.postings.items()}
    assert got == {k: sorted(v) for k, v in postings.items()}


# --- LineIndex ---------------------------------------------------------------------------------


def test_lines_keep_identifiers_numbers_and_text_without_markup() -> None:
    index = LineIndex()
    text = "<output>\nplain words\n  src/app/loader.py:42:  def <b>parse_config</b>(x)\n1234"

    source = index.add(iri(1), text, turn=1, kind="result")

    assert [(x.number, x.text) for x in source.lines] == [
        (3, "src/app/loader.py:42: def parse_config(x)"), (4, "1234")]
    assert source.lines[0].ids == {"src/app/loader.py", "parse_config"}
    assert source.ids == {"src/app/loader.py", "parse_config", "1234"}
    assert index.df["parse_config"] == 1
    assert [x.number for x in index.postings["parse_config"]] == [3]


def test_a_closing_tag_line_is_not_a_line() -> None:
    source = LineIndex().add(iri(1), "<output>\nparse_config.x\n</output>", turn=1,
                             kind="result")

    assert [x.number for x in source.lines] == [2]


def test_a_source_keeps_at_most_max_lines_in_pieces_of_line_chars() -> None:
    index = LineIndex(max_lines=3, line_chars=40)
    text = "\n".join(f"name_{i}.attr " + "word " * 20 for i in range(10))

    source = index.add(iri(1), text, turn=1, kind="result")

    # each line is cut into pieces of at most 40 characters; only pieces with identifiers stay
    assert [x.number for x in source.lines] == [1, 2, 3]
    assert all(len(x.text) <= 40 and x.text.startswith(f"name_{i}.attr")
               for i, x in enumerate(source.lines))
    assert "name_5.attr" not in index.postings
    assert_consistent(index)


def test_a_long_line_s_identifiers_are_each_in_a_piece_that_shows_them() -> None:
    index = LineIndex(line_chars=60)
    record = ", ".join(f'"key_{i}": "value_{i}_{1000 + i}"' for i in range(30))

    source = index.add(iri(1), "{" + record + "}", turn=1, kind="result")

    assert {x.number for x in source.lines} == {1} and len(source.lines) > 1
    for line in source.lines:
        assert len(line.text) <= 60 and all(ident in line.text for ident in line.ids)
    assert all(f"value_{i}_{1000 + i}" in index.postings for i in range(30))


def test_adding_a_source_twice_counts_it_once() -> None:
    index = LineIndex()
    first = index.add(iri(1), "shared_name.x", turn=1, kind="result")

    again = index.add(iri(1), "other_name.y", turn=2, kind="turn")

    assert again is first and len(index) == 1
    assert index.df["shared_name.x"] == 1 and "other_name.y" not in index.df
    assert len(index.postings["shared_name.x"]) == 1


def test_the_oldest_sources_are_dropped_past_max_sources() -> None:
    index = LineIndex(max_sources=2)
    index.add(iri(1), "shared_name.x only_first.y", turn=1, kind="result")
    index.add(iri(2), "shared_name.x", turn=2, kind="result")
    assert index.df["shared_name.x"] == 2

    index.add(iri(3), "shared_name.x only_third.z", turn=3, kind="result")

    assert list(index.sources) == [iri(2), iri(3)]
    assert index.df["shared_name.x"] == 2
    assert "only_first.y" not in index.df and "only_first.y" not in index.postings
    assert {x.iri for x in index.postings["shared_name.x"]} == {iri(2), iri(3)}
    assert_consistent(index)


_pool = [f"id_{i}.x" for i in range(10)] + ["plain", "words", "1234"]
_source_text = st.lists(st.lists(st.sampled_from(_pool), max_size=5).map(" ".join),
                        max_size=8).map("\n".join)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.tuples(st.integers(1, 12), _source_text), max_size=25),
       max_sources=st.integers(1, 6), max_lines=st.integers(1, 5))
def test_the_index_stays_bounded_and_consistent(
    texts: list[tuple[int, str]], max_sources: int, max_lines: int
) -> None:
    index = LineIndex(max_sources=max_sources, max_lines=max_lines)
    order: list[str] = []

    for n, text in texts:
        index.add(iri(n), text, turn=n, kind="result")
        if iri(n) not in order:
            order.append(iri(n))
        order = [x for x in order if x in index.sources]

        assert len(index) <= max_sources
        assert all(len(s.lines) <= max_lines for s in index.sources.values())
        assert_consistent(index)
    newest = list(dict.fromkeys(iri(n) for n, _ in texts))
    assert list(index.sources) == order
    assert set(index.sources) <= set(newest)


# --- Predictor ---------------------------------------------------------------------------------


def predictor(*texts: str, budget_tokens: int = 400, max_sources: int = 6,
              lines_per_source: int = 3, min_score: float = 0.5,
              turns: tuple[int, ...] = ()) -> Predictor:
    """A predictor over one source per text, ``iri(1)`` first: results, but turns for the
    numbers in ``turns``."""
    index = LineIndex()
    for n, text in enumerate(texts, 1):
        index.add(iri(n), text, turn=n, kind="turn" if n in turns else "result")
    return Predictor(index, PrefetchParams(budget_tokens, max_sources, lines_per_source,
                                           min_score=min_score))


def quoted(warmed: list[Warm]) -> dict[str, list[int]]:
    return {w.iri: [x.number for x in w.lines] for w in warmed if w.lines}


def test_a_source_sharing_the_query_is_warmed_with_the_lines_the_prompt_lacks() -> None:
    p = predictor("unrelated_name.x\nother_thing.y",
                  "plain\nhandler_fn.call uses cache_key.get\nhandler_fn.call\nzebra_mod.q")

    warmed = p.predict({"handler_fn.call": 2.0}, visible={"handler_fn.call"}, exclude=(),
                       count=count)

    # line 3 shows only what the prompt shows; line 4 something it lacks, after the query's
    assert quoted(warmed) == {iri(2): [2, 4]}
    narrow = predictor("unrelated_name.x\nother_thing.y",
                       "plain\nhandler_fn.call uses cache_key.get\nhandler_fn.call\nzebra_mod.q",
                       lines_per_source=1)
    assert quoted(narrow.predict({"handler_fn.call": 2.0}, visible={"handler_fn.call"},
                                 exclude=(), count=count)) == {iri(2): [2]}


def test_an_excluded_source_is_never_warmed() -> None:
    p = predictor("handler_fn.call uses cache_key.get", "handler_fn.call uses tenant_id.x")

    warmed = p.predict({"handler_fn.call": 1.0}, visible=(), exclude={iri(1)}, count=count)

    assert [w.iri for w in warmed] == [iri(2)]
    assert p.predict({"handler_fn.call": 1.0}, visible=(), exclude={iri(1), iri(2)},
                     count=count) == []


def test_nothing_is_warmed_for_a_query_no_source_shares() -> None:
    p = predictor("handler_fn.call uses cache_key.get")

    assert p.predict({"absent_name.z": 1.0}, visible=(), exclude=(), count=count) == []
    assert p.predict({}, visible=(), exclude=(), count=count) == []


def test_a_rare_identifier_outranks_a_common_one() -> None:
    p = predictor("common_name.x rare_name.y", "common_name.x", "common_name.x", "common_name.x")

    warmed = p.predict({"common_name.x": 1.0, "rare_name.y": 1.0}, visible=(), exclude=(),
                       count=count)

    assert warmed[0].iri == iri(1)
    assert [w.iri for w in warmed] == [iri(1)]  # the rest score under min_share of the best


def test_every_source_holding_an_identifier_an_action_used_was_accessed() -> None:
    p = predictor("used_name.x in a result", "used_name.x again, other_name.y",
                  "other_name.y only", "agent_only.z written by the agent", turns=(4,))

    # the turn holding used_name.x counts too; an identifier only turns hold points nowhere
    assert p.observe_action(["used_name.x", "agent_only.z", "absent_name.w"]) == [iri(1), iri(2)]
    assert p.observe_action([]) == []


def test_an_accessed_source_is_warmed_without_a_content_match_and_fades() -> None:
    p = predictor("first_only.a shared_key.lookup", "second_only.b", "third_only.c")
    p.observe_action(["second_only.b"])

    warmed = p.predict({"shared_key.lookup": 1.0}, visible=(), exclude=(), count=count)

    # one access (1.0) outranks the best content match (0.5 x its share)
    assert [w.iri for w in warmed] == [iri(2), iri(1)]
    p.observe_action(["third_only.c"])  # 0.6 for iri(2), 1.0 for iri(3)
    assert [w.iri for w in p.predict({}, visible=(), exclude=(), count=count)] == [iri(3), iri(2)]
    p.observe_action([])  # 0.36 for iri(2): under min_score, it is no longer warmed
    assert [w.iri for w in p.predict({}, visible=(), exclude=(), count=count)] == [iri(3)]


def test_access_adds_up_recent_and_often_beats_once() -> None:
    p = predictor("often_name.a", "once_name.b")
    for _ in range(3):
        p.observe_action(["often_name.a"])
    p.observe_action(["once_name.b"])

    # 1.0 for iri(2); 0.6 x (1 + 0.6 + 0.36) = 1.18 for iri(1)
    assert [w.iri for w in p.predict({}, visible=(), exclude=(), count=count)] == [iri(1), iri(2)]


def test_an_excluded_or_zero_budget_source_is_warmed_without_lines() -> None:
    p = predictor("wanted_name.a", "wanted_name.a other_name.b", budget_tokens=0)
    p.observe_action(["wanted_name.a"])

    warmed = p.predict({}, visible=(), exclude={iri(1)}, count=count)

    assert [(w.iri, w.lines) for w in warmed] == [(iri(2), ())]  # the cache warms, no block


def test_the_ranking_holds_what_shows_something_the_prompt_lacks_results_first() -> None:
    p = predictor("shown_name.a", "hidden_name.b", "hidden_name.c other_name.e", "turn_name.d",
                  "excluded_name.f", turns=(4,))

    ranking = p.rank({"turn_name.d": 2.0}, visible={"shown_name.a"}, exclude={iri(5)})

    # iri(1) shows nothing the prompt lacks; the turn matches the query but comes after every
    # result; results no evidence points at, newest first
    assert ranking == [(iri(3), 0.0), (iri(2), 0.0), (iri(4), 0.5)]
    p.observe_action(["hidden_name.b"])
    assert [x for x, _ in p.rank({}, visible=(), exclude=())][:2] == [iri(2), iri(5)]


def test_what_is_warmed_is_the_head_of_the_ranking_that_scores() -> None:
    p = predictor("used_name.a", "other_name.b", "third_name.c", "fourth_name.d", max_sources=2)
    p.observe_action(["used_name.a"])
    p.observe_action(["third_name.c"])

    warmed = p.predict({}, visible=(), exclude=(), count=count)

    assert [x for x, _ in p.ranking] == [iri(3), iri(1), iri(4), iri(2)]
    assert [w.iri for w in warmed] == [iri(3), iri(1)]  # 1.0 and 0.6; the rest score 0


def test_max_sources_lines_per_source_and_budget_bound_what_is_warmed() -> None:
    texts = ["\n".join(f"shared_key.lookup other_{k}_{i}.val" for i in range(6))
             for k in range(8)]
    query = {"shared_key.lookup": 1.0}

    wide = predictor(*texts, budget_tokens=10_000, max_sources=20, lines_per_source=20)
    narrow = predictor(*texts, budget_tokens=10_000, max_sources=3, lines_per_source=2)
    poor = predictor(*texts, budget_tokens=3 * (2 + 4), max_sources=20, lines_per_source=20)

    assert sum(len(x) for x in quoted(wide.predict(query, visible=(), exclude=(),
                                                   count=count)).values()) == 48
    got = quoted(narrow.predict(query, visible=(), exclude=(), count=count))
    assert len(got) == 3 and all(len(x) == 2 for x in got.values())
    assert sum(len(x) for x in quoted(poor.predict(query, visible=(), exclude=(),
                                                   count=count)).values()) == 3


# --- property: the bounds hold whatever the index, query and parameters --------------------------

_ids = [f"n{i}_x.y" for i in range(14)]
_predict_text = st.lists(st.lists(st.sampled_from(_ids), min_size=1, max_size=4)
                         .map(" ".join), min_size=1, max_size=8).map("\n".join)


@settings(max_examples=80, deadline=None)
@given(texts=st.lists(_predict_text, min_size=1, max_size=10),
       query=st.dictionaries(st.sampled_from(_ids), st.floats(0.1, 3.0), max_size=6),
       visible=st.sets(st.sampled_from(_ids)),
       excluded=st.sets(st.integers(1, 10)),
       actions=st.lists(st.lists(st.sampled_from(_ids), max_size=3), max_size=5),
       budget=st.integers(0, 60), max_sources=st.integers(1, 5),
       lines_per_source=st.integers(1, 4))
def test_predictions_stay_within_their_bounds(
    texts: list[str], query: dict[str, float], visible: set[str], excluded: set[int],
    actions: list[list[str]], budget: int, max_sources: int, lines_per_source: int,
) -> None:
    p = predictor(*texts, budget_tokens=budget, max_sources=max_sources,
                  lines_per_source=lines_per_source)
    for ids in actions:
        p.observe_action(ids)
    exclude = {iri(n) for n in excluded}

    warmed = p.predict(query, visible=visible, exclude=exclude, count=count)

    assert len(warmed) <= max_sources
    assert len({w.iri for w in warmed}) == len(warmed)
    assert not {w.iri for w in warmed} & exclude
    lines = [x for w in warmed for x in w.lines]
    assert sum(count(x.text) + 4 for x in lines) <= budget
    for w in warmed:
        assert len(w.lines) <= lines_per_source
        assert all(x.iri == w.iri for x in w.lines)
        assert [x.number for x in w.lines] == sorted({x.number for x in w.lines})
        assert w.iri in p.index.sources and set(w.lines) <= set(p.index.sources[w.iri].lines)
        # it shares the query or an action used it
        assert set(query) & p.index.sources[w.iri].ids or w.iri in p.access
    assert all(x.ids - visible for x in lines)  # each shows something the prompt lacks
