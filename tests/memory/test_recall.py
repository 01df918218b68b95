"""Hybrid recall: packing within budget, fusion properties, scoring steps, and the LoCoMo
benchmark end to end on a tiny synthetic file (never the real data)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.bench.memory import gold_ids, parse_range, run_memory_bench, top_sessions
from gliding.context.tokens import TokenCounter
from gliding.core.dates import parse_date as parse_session_date
from gliding.errors import UsageError
from gliding.memory.recall.hybrid import (
    HybridRecall,
    MemoryItem,
    RecallSettings,
    adjust_for_use,
    format_line,
    fuse_scores,
    is_time_question,
    pack,
    rrf,
    spread_to_neighbours,
)
from gliding.testing.embedder import HashEmbedder

COUNTER = TokenCounter()


# --- packing ----------------------------------------------------------------------------------

lines = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80),
                 max_size=30)


@settings(max_examples=150, deadline=None)
@given(lines, st.integers(0, 300))
def test_pack_never_exceeds_the_budget(texts: list[str], budget: int) -> None:
    packed = pack(((f"i{n}", text) for n, text in enumerate(texts)), budget, COUNTER.count)
    assert COUNTER.count(packed.text) == packed.tokens <= budget
    assert packed.text == "\n".join(texts[int(i[1:])] for i in packed.ids)
    assert len(set(packed.ids)) == len(packed.ids)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(0, 400))
def test_pack_is_greedy_best_first(sizes: list[int], budget: int) -> None:
    count = len  # one token a character keeps the arithmetic visible
    texts = ["x" * size for size in sizes]
    packed = pack(((str(n), text) for n, text in enumerate(texts)), budget, count)
    assert len(packed.text) <= budget
    kept = {int(i) for i in packed.ids}
    used = sum(sizes[i] + 1 for i in kept)
    for n, size in enumerate(sizes):  # anything skipped did not fit when its turn came
        if n not in kept:
            used_before = sum(sizes[i] + 1 for i in kept if i < n)
            assert used_before + size + 1 > budget or used + size + 1 > budget


def test_pack_orders_output_by_the_given_order() -> None:
    packed = pack([("b", "second"), ("a", "first")], 100, len, order={"a": 0, "b": 1})
    assert packed.ids == ("a", "b") and packed.text == "first\nsecond"


def test_format_line() -> None:
    item = MemoryItem("D3:7", "I  ran a\ncharity race.", 3, date(2023, 5, 8), "Melanie", 7)
    assert format_line(item) == "[D3:7] Melanie (8 May 2023): I ran a charity race."
    assert format_line(MemoryItem("x", "bare", 1)) == "[x]: bare"


# --- fusion and scoring -----------------------------------------------------------------------

arrays = st.lists(st.floats(0, 50, allow_nan=False, width=32), min_size=1, max_size=30)


@given(arrays, st.data())
def test_fused_scores_are_bounded_and_monotone(lexical: list[float], data: st.DataObject) -> None:
    vector = data.draw(st.lists(st.floats(-1, 1, allow_nan=False, width=32),
                                min_size=len(lexical), max_size=len(lexical)))
    lex, vec = np.asarray(lexical, np.float32), np.asarray(vector, np.float32)
    fused = fuse_scores(lex, vec)
    assert fused.shape == lex.shape and (fused >= 0).all() and (fused <= 2 + 1e-5).all()
    boosted = lex.copy()
    boosted[0] += 1.0  # raising one item's lexical score (max fixed) never lowers its fusion
    boosted_max = max(float(boosted.max()), float(lex.max()))
    assert fuse_scores(boosted, vec)[0] * boosted_max >= fused[0] * float(lex.max()) - 1e-4
    assert np.allclose(fuse_scores(lex, None), lex / lex.max() if lex.max() > 0 else 0)


@given(st.lists(st.permutations([f"d{i}" for i in range(8)]), min_size=1, max_size=4))
def test_rrf_puts_a_unanimous_winner_first_and_is_order_free(rankings: list[list[str]]) -> None:
    first = rankings[0][0]
    unanimous = [[first] + [d for d in r if d != first] for r in rankings]
    fused = rrf(unanimous)
    assert max(fused, key=lambda d: fused[d]) == first
    assert rrf(list(reversed(rankings))) == pytest.approx(rrf(rankings))


def test_neighbours_share_score_only_within_a_session() -> None:
    scores = np.asarray([0, 0, 1.0, 0, 0], np.float32)
    sessions = np.asarray([1, 1, 1, 2, 2])
    out = spread_to_neighbours(scores, sessions, 0.5, span=2)
    assert out.tolist() == pytest.approx([0.25, 0.5, 1.0, 0.0, 0.0])


def test_access_boost_decays_and_importance_scales() -> None:
    s = RecallSettings(access_weight=0.1, access_half_life_s=100.0, importance_weight=0.4)
    fresh = adjust_for_use(1.0, 0.5, 3, 0.0, s)
    later = adjust_for_use(1.0, 0.5, 3, 100.0, s)
    assert fresh > later > 1.0 and fresh - 1.0 == pytest.approx(2 * (later - 1.0))
    assert adjust_for_use(1.0, 1.0, 0, 0, s) > adjust_for_use(1.0, 0.0, 0, 0, s)


def test_time_questions() -> None:
    assert is_time_question("When did Melanie paint a sunrise?")
    assert is_time_question("How long has Caroline had her friends?")
    assert not is_time_question("What did Caroline research?")


# --- the index --------------------------------------------------------------------------------


def memory(embedder: HashEmbedder | None = None) -> HybridRecall:
    texts = [
        ("Caroline", "Hey Mel! How have you been?"),
        ("Melanie", "Swamped with the kids. What's new?"),
        ("Caroline", "I went to an LGBTQ support group yesterday."),
        ("Melanie", "That sounds powerful. How did it feel?"),
        ("Caroline", "Really inspiring. I want to work in counseling."),
        ("Melanie", "I painted a sunrise over the lake last year."),
    ]
    items = [MemoryItem(f"D{1 + n // 3}:{n % 3 + 1}", text, 1 + n // 3,
                        date(2023, 5 + n // 3, 8), speaker, n % 3 + 1)
             for n, (speaker, text) in enumerate(texts)]
    recall = HybridRecall(count=COUNTER.count, embedder=embedder)  # type: ignore[arg-type]
    recall.add(items)
    return recall


@pytest.mark.parametrize("embedder", [None, HashEmbedder()])
def test_recall_finds_the_turn_and_its_neighbours(embedder: HashEmbedder | None) -> None:
    packed = memory(embedder).recall("When did Caroline go to the support group?", 60)
    assert "D1:3" in packed.ids and packed.tokens <= 60
    assert "[D1:3] Caroline (8 May 2023): I went to an LGBTQ support group yesterday." in (
        packed.text.splitlines())
    wide = memory(embedder).recall("support group", 400)
    assert {"D1:1", "D1:2", "D1:3"} <= set(wide.ids)  # the hit's neighbours come along
    if embedder is None:  # nothing pulls in the next session's first turn
        assert "D2:1" not in wide.ids
    assert list(wide.ids) == sorted(wide.ids, key=lambda i: (int(i[1]), int(i[3])))


def test_recall_refuses_duplicates_and_handles_empty() -> None:
    recall = HybridRecall(count=COUNTER.count)
    assert recall.recall("anything", 100).ids == ()
    recall.add([MemoryItem("a", "text", 1)])
    with pytest.raises(ValueError, match="already"):
        recall.add([MemoryItem("a", "again", 1)])


def test_touch_raises_an_items_rank() -> None:
    recall = memory()
    query = "kids"
    before = recall.scores(query, now=0.0)
    recall.touch(["D2:3", "unknown"], now=0.0)
    after = recall.scores(query, now=0.0)
    row = 5
    assert after[row] > before[row]


def test_recency_is_newest_first() -> None:
    recall = memory()
    assert [recall.items[i].id for i in recall.recency()][:2] == ["D2:3", "D2:2"]


# --- benchmark plumbing -----------------------------------------------------------------------


def test_ids_dates_and_ranges() -> None:
    assert gold_ids(["D1:3", "D8:6; D9:17", "D2:05", 7, "x"]) == {"D1:3", "D2:5"}
    assert gold_ids(None) == set()
    assert parse_session_date("1:56 pm on 8 May, 2023") == date(2023, 5, 8)
    assert parse_session_date("garbage") is None
    assert parse_range("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(UsageError):
        parse_range("a-b")


def synthetic(path: Path) -> Path:
    """A LoCoMo-shaped file written by this test: two tiny conversations."""
    sessions = {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:00 pm on 3 March, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a beagle named Pixel."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Cute! I started learning the cello."},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Look at this.",
             "blip_caption": "a photo of a dog on a red sofa"},
        ],
        "session_2_date_time": "9:30 am on 20 April, 2023",
        "session_2": [
            {"speaker": "Bo", "dia_id": "D2:1", "text": "My cello recital went well yesterday."},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "We hiked to Crater Lake last week."},
        ],
    }
    qa = [
        {"question": "What is the name of Ann's dog?", "answer": "Pixel",
         "evidence": ["D1:1"], "category": 1},
        {"question": "When was Bo's cello recital?", "answer": "19 April 2023",
         "evidence": ["D2:1"], "category": 2},
        {"question": "What colour was the sofa?", "answer": "red", "evidence": ["D1:3"],
         "category": 4},
        {"question": "Skipped: no evidence", "answer": "x", "evidence": [], "category": 5},
        {"question": "Skipped: malformed", "answer": "x", "evidence": ["D1:1; D1:2"],
         "category": 5},
    ]
    data = [{"sample_id": "s1", "conversation": sessions, "qa": qa,
             "observation": {"must": "not be used"}},
            {"sample_id": "s2", "conversation": {"session_1": [], "session_1_date_time": ""},
             "qa": []}]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_run_memory_bench_end_to_end(tmp_path: Path) -> None:
    result = run_memory_bench(synthetic(tmp_path / "tiny.json"), [0, 1], [32, 2048],
                              embedder=HashEmbedder())  # type: ignore[arg-type]
    assert result["questions"] == 3 and result["turns"] == 5
    assert set(result["methods"]) == {"recency", "bm25", "vector", "gliding"}
    for method in result["methods"].values():
        assert set(method) == {"32", "2048"}
        assert method["2048"]["recall"] == 1.0  # everything fits
        assert set(method["2048"]["by_category"]) == {"1", "2", "4"}
        assert method["32"]["recall"] <= method["2048"]["recall"]
    assert result["methods"]["gliding"]["32"]["recall"] > result["methods"]["recency"]["32"][
        "recall"]
    assert result["retrieval_ms_p99"] >= result["retrieval_ms_p50"] > 0
    assert result["ingest_turns_per_s"] > 0
    assert result["category_questions"] == {"1": 1, "2": 1, "4": 1}  # n per category
    # two sessions only: every method's top 10 sessions hold them all
    for name, at10 in result["session_recall_at_10"].items():
        assert at10["recall"] == 1.0 and set(at10["by_category"]) == {"1", "2", "4"}, name


def test_run_memory_bench_without_vectors_and_bad_input(tmp_path: Path) -> None:
    path = synthetic(tmp_path / "tiny.json")
    result = run_memory_bench(path, [0], [64], embedder=False)
    assert "vector" not in result["methods"] and result["vector_available"] is False
    with pytest.raises(UsageError, match="conversation 5"):
        run_memory_bench(path, [5], [64], embedder=False)
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(UsageError):
        run_memory_bench(tmp_path / "bad.json", [0], [64], embedder=False)


def test_session_recall_reads_a_ranking_down_to_k_distinct_sessions() -> None:
    from types import SimpleNamespace

    items = [SimpleNamespace(id=f"t{n}") for n in range(6)]
    label_of = {"t0": "D1:1", "t1": "D1:2", "t2": "D3:1", "t3": "D2:5", "t4": "D4:1",
                "t5": "D2:1"}

    assert top_sessions([0, 1, 2, 3, 4], items, label_of, 2) == {"D1", "D3"}  # D1 counted once
    assert top_sessions([5, 0], items, label_of, 10) == {"D2", "D1"}  # fewer than k: all
