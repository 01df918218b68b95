"""BM25 index: tokenisation, ranking sanity, ingest speed, top-k behaviour."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding.memory.recall.lexical import BM25Index, stem, tokenize, top_k

DOCS = {
    "a": "Melanie painted a sunrise over the lake last year.",
    "b": "Caroline went to an LGBTQ support group yesterday.",
    "c": "We went camping in the mountains with the kids.",
    "d": "The kids love painting and pottery classes.",
    "e": "I am swamped with work these days.",
}


def index() -> BM25Index:
    bm25 = BM25Index()
    bm25.add(list(DOCS), list(DOCS.values()))
    return bm25


def test_tokenize_lowercases_drops_stop_words_and_folds_suffixes() -> None:
    assert tokenize("The Kids were Painting paintings; she PAINTED it") == [
        "kid", "paint", "paint", "paint"]
    assert tokenize("Melanie's hikes, hiking, hiked") == ["melani", "hik", "hik", "hik"]
    assert stem("class") == "class" and stem("studies") == "study"


def test_ranking_puts_the_matching_document_first() -> None:
    bm25 = index()
    assert bm25.search("support group", 3)[0][0] == "b"
    assert bm25.search("camping trip", 3)[0][0] == "c"
    painted = [doc for doc, _ in bm25.search("paint", 5)]
    assert set(painted) == {"a", "d"}


def test_rare_terms_outweigh_common_ones() -> None:
    bm25 = BM25Index()
    bm25.add(["1", "2", "3", "4"], ["kids kids park", "kids park", "kids zoo", "kids giraffe"])
    assert bm25.search("kids giraffe", 1)[0][0] == "4"


def test_no_match_returns_nothing_and_scores_are_dense() -> None:
    bm25 = index()
    assert bm25.search("quantum chromodynamics", 5) == []
    scores = bm25.scores("kids")
    assert scores.shape == (len(DOCS),) and (scores >= 0).all()
    assert scores[2] > 0 and scores[3] > 0 and scores[0] == 0


def test_adding_twice_or_mismatched_lengths_is_refused() -> None:
    bm25 = index()
    with pytest.raises(ValueError, match="already"):
        bm25.add(["a"], ["again"])
    with pytest.raises(ValueError, match="ids"):
        bm25.add(["x", "y"], ["one"])


def test_search_after_more_documents_sees_them() -> None:
    bm25 = index()
    assert bm25.search("violin", 1) == []
    bm25.add(["f"], ["She started violin lessons"])
    assert bm25.search("violin", 1)[0][0] == "f"


def test_an_ingest_of_thousands_of_documents_indexes_every_one() -> None:
    """Correctness at scale; how fast ingest is belongs to the memory benchmark
    (``ingest_turns_per_s`` in scripts/bench_memory.py), not to a test."""
    words = [f"word{i}" for i in range(500)]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, 25)) for _ in range(5000)]
    bm25 = BM25Index()
    bm25.add([str(i) for i in range(len(texts))], texts)
    assert len(bm25) == 5000
    hits = bm25.search("word1 word2", 10)
    assert len(hits) == 10
    for doc_id, _score in hits:
        assert {"word1", "word2"} & set(texts[int(doc_id)].split()), doc_id
    both = [i for i, t in enumerate(texts) if {"word1", "word2"} <= set(t.split())]
    assert both and int(hits[0][0]) in both  # a document with both words ranks first


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=40),
       st.integers(0, 50))
def test_top_k_matches_a_full_sort(values: list[float], k: int) -> None:
    scores = np.asarray(values, dtype=np.float32)
    ids = [str(i) for i in range(len(values))]
    expected = sorted(((ids[i], float(scores[i])) for i in range(len(values))),
                      key=lambda pair: (-pair[1], int(pair[0])))[:k]
    assert top_k(ids, scores, k, positive=False) == expected
    assert top_k(ids, scores, k) == [pair for pair in expected if pair[1] > 0]
