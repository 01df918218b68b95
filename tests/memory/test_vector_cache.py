"""The persistent embedding cache: item vectors survive the process, queries never enter it,
models and precisions never mix, and a broken cache only costs speed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from gliding.memory.recall.hybrid import HybridRecall, MemoryItem
from gliding.memory.recall.vector_cache import CachedEmbedder, text_key
from gliding.testing.embedder import HashEmbedder

TEXTS = ["the staging database listens on port 5433", "lunch is at noon", "deploy on friday"]


def cached(tmp_path: Path, embedder: HashEmbedder | None = None) -> CachedEmbedder:
    return CachedEmbedder(embedder or HashEmbedder(), tmp_path / "vectors.sqlite3")  # type: ignore[arg-type]


def test_vectors_come_back_from_the_file_in_a_new_process(tmp_path: Path) -> None:
    first_model = HashEmbedder()
    first = cached(tmp_path, first_model)
    vectors = first.encode(TEXTS)
    assert np.allclose(vectors, HashEmbedder().encode(TEXTS))
    assert (first.hits, first.misses) == (0, 3)
    first.close()

    model = HashEmbedder()
    again = cached(tmp_path, model)
    assert np.allclose(again.encode([*TEXTS, "a new text"]), model.encode([*TEXTS, "a new text"]))
    assert (again.hits, again.misses) == (3, 1)
    assert model.calls[0] == ["a new text"]  # only what the cache lacked was embedded


def test_queries_bypass_the_cache(tmp_path: Path) -> None:
    model = HashEmbedder()
    cache = cached(tmp_path, model)
    cache.encode_query(["which port?"])
    cache.encode_query(["which port?"])
    assert model.embedded == ["which port?", "which port?"]
    assert cache.hits == cache.misses == 0
    with sqlite3.connect(tmp_path / "vectors.sqlite3") as conn:
        assert conn.execute("SELECT COUNT(*) FROM vectors").fetchone() == (0,)


def test_another_precision_is_another_model(tmp_path: Path) -> None:
    cached(tmp_path).encode(TEXTS)
    other = HashEmbedder()
    other.precision = "int8"
    cache = cached(tmp_path, other)
    cache.encode(TEXTS)
    assert (cache.hits, cache.misses) == (0, 3)


def test_a_row_of_the_wrong_size_is_embedded_again(tmp_path: Path) -> None:
    cached(tmp_path).encode(TEXTS[:1])
    with sqlite3.connect(tmp_path / "vectors.sqlite3") as conn:
        conn.execute("UPDATE vectors SET vector = ? WHERE sha256 = ?",
                     (np.zeros(3, np.float32).tobytes(), text_key(TEXTS[0])))
    cache = cached(tmp_path)
    assert np.allclose(cache.encode(TEXTS[:1]), HashEmbedder().encode(TEXTS[:1]))
    assert cache.misses == 1


def test_an_unusable_cache_file_logs_once_and_embeds_directly(tmp_path: Path) -> None:
    (tmp_path / "vectors.sqlite3").write_bytes(b"this is not a database" * 100)
    with capture_logs() as logs:
        cache = cached(tmp_path)
        vectors = cache.encode(TEXTS)
    assert np.allclose(vectors, HashEmbedder().encode(TEXTS))
    assert [e["event"] for e in logs] == ["vectors.cache.unavailable"]


def test_hybrid_recall_embeds_queries_without_caching_them(tmp_path: Path) -> None:
    model = HashEmbedder()
    cache = cached(tmp_path, model)
    recall = HybridRecall(count=len, embedder=cache)  # type: ignore[arg-type]
    recall.add([MemoryItem(id=f"i{n}", text=t, session=0, position=n)
                for n, t in enumerate(TEXTS)])
    recall.recall("which port does the staging database use", 200)
    assert cache.misses == 3 and cache.hits == 0
    assert model.embedded[-1] == "which port does the staging database use"


@pytest.mark.parametrize("text", ["", "\ud800 lone surrogate", "x" * 100_000])
def test_odd_texts_have_keys_and_round_trip(tmp_path: Path, text: str) -> None:
    cache = cached(tmp_path)
    first = cache.encode([text])
    assert np.allclose(cached(tmp_path).encode([text]), first)
