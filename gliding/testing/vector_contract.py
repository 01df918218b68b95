"""The contract every VectorIndex passes: subclass ``VectorIndexContract``, give ``make_index``.

    class TestMyIndex(VectorIndexContract):
        @pytest.fixture
        def make_index(self, tmp_path):
            made = []

            def make(dim: int) -> MyIndex:      # an empty index of dimension ``dim``
                made.append(MyIndex(dim=dim))
                return made[-1]

            yield make
            for index in made:
                index.close()

Scores are cosine similarities and must equal brute force (float32, to 1e-5); the order is best
first. Errors are ValueErrors, and an ``add`` that raises stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import pytest

from gliding.memory.recall.vectors import VectorIndex

ATOL = 1e-5

ODD_IDS = [
    "",
    " ",
    "é 😀 ☃ \ufeff",
    "gliding://job/j1/turn/DA/3",
    "a/b\\c?d#e&f=g",
    "line\nbreak\ttab\r",
    "nul\u0000inside",
    '"quoted" \'single\'',
    "{\"id\": 1}",
    "\u2028\u2029\u0085",
    "x" * 500,
    "0",
    "123e4567-e89b-12d3-a456-426614174000",
    "ω" * 3,
]


class ClosableIndex(VectorIndex, Protocol):
    def close(self) -> None: ...


MakeIndex = Callable[[int], ClosableIndex]


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def brute_force(ids: Sequence[str], vectors: np.ndarray, query: np.ndarray,
                k: int) -> list[tuple[str, float]]:
    """The k best (id, cosine) pairs computed in float64, best first, ties by insertion order."""
    cosine = unit(vectors) @ unit(query)
    order = sorted(range(len(ids)), key=lambda i: (-cosine[i], i))[: max(k, 0)]
    return [(ids[i], float(cosine[i])) for i in order]


def assert_matches(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    """Same ids in the same order, scores equal to float32 precision (seeded data has no ties)."""
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert np.allclose([s for _, s in got], [s for _, s in expected], atol=ATOL)


class VectorIndexContract:
    """Tests every VectorIndex passes; ``make_index(dim)`` gives an empty index."""

    # search equals brute force

    @pytest.mark.parametrize(("seed", "n", "dim", "batches"),
                             [(0, 1, 3, 1), (1, 40, 8, 3), (2, 150, 16, 4), (3, 257, 32, 5),
                              (4, 90, 384, 2)])
    def test_search_equals_brute_force_cosine(self, make_index: MakeIndex, seed: int, n: int,
                                              dim: int, batches: int) -> None:
        rng = np.random.default_rng(seed)
        vectors = rng.normal(size=(n, dim)).astype(np.float32)
        vectors[: n // 3] *= rng.uniform(0.01, 50, size=(n // 3, 1)).astype(np.float32)
        ids = [f"v{i}" for i in range(n)]
        index = make_index(dim)
        bounds = np.linspace(0, n, batches + 1).astype(int)
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            index.add(ids[start:end], vectors[start:end])
            assert len(index) == end
        for _ in range(5):
            query = rng.normal(size=dim).astype(np.float32)
            for k in (1, 5, n):
                assert_matches(index.search(query, k), brute_force(ids, vectors, query, k))
        # a stored vector (scaled) is its own nearest neighbour, at cosine 1
        best_id, best_score = index.search(vectors[n // 2] * 3, 1)[0]
        assert best_id == ids[n // 2] and best_score == pytest.approx(1.0, abs=ATOL)

    def test_k_larger_than_the_index_gives_everything_best_first(
            self, make_index: MakeIndex) -> None:
        index = make_index(2)
        index.add(["east", "north", "west"], np.asarray([[1, 0], [0, 1], [-1, 0]], np.float32))
        got = index.search(np.asarray([1.0, 0.2]), 10)
        assert [i for i, _ in got] == ["east", "north", "west"]
        assert got[0][1] == pytest.approx(1 / np.sqrt(1.04), abs=ATOL)
        assert got[2][1] == pytest.approx(-1 / np.sqrt(1.04), abs=ATOL)

    def test_k_zero_or_negative_gives_nothing(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        index.add(["a", "b"], np.eye(2, 3, dtype=np.float32))
        assert index.search(np.ones(3), 0) == []
        assert index.search(np.ones(3), -1) == []
        assert len(index.search(np.ones(3), 1)) == 1

    def test_an_empty_index_finds_nothing(self, make_index: MakeIndex) -> None:
        index = make_index(4)
        assert len(index) == 0
        assert index.search(np.ones(4), 5) == []
        index.add([], np.zeros((0, 4), np.float32))
        assert len(index) == 0
        assert index.search(np.ones(4), 5) == []

    # ids

    def test_odd_string_ids_round_trip(self, make_index: MakeIndex) -> None:
        rng = np.random.default_rng(7)
        vectors = rng.normal(size=(len(ODD_IDS), 6)).astype(np.float32)
        index = make_index(6)
        index.add(ODD_IDS[:5], vectors[:5])
        index.add(ODD_IDS[5:], vectors[5:])
        assert len(index) == len(ODD_IDS)
        for doc_id, vector in zip(ODD_IDS, vectors, strict=True):
            got_id, score = index.search(vector, 1)[0]
            assert got_id == doc_id and type(got_id) is str
            assert score == pytest.approx(1.0, abs=ATOL)
        assert sorted(i for i, _ in index.search(vectors[0], 100)) == sorted(ODD_IDS)

    def test_an_id_stored_in_an_earlier_batch_is_refused(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        index.add(["a", "b"], np.eye(2, 3, dtype=np.float32))
        with pytest.raises(ValueError, match="already"):
            index.add(["c", "b"], np.ones((2, 3), np.float32))
        assert len(index) == 2
        assert [i for i, _ in index.search(np.ones(3), 5)] in (["a", "b"], ["b", "a"])
        got = dict(index.search(np.asarray([0.0, 1.0, 0.0]), 5))
        assert got["b"] == pytest.approx(1.0, abs=ATOL)  # the first vector of "b" is kept

    def test_an_id_twice_in_one_batch_is_refused(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        with pytest.raises(ValueError, match="already"):
            index.add(["a", "b", "a"], np.eye(3, dtype=np.float32))
        assert len(index) == 0
        index.add(["a"], np.ones((1, 3), np.float32))  # nothing of the refused batch was kept
        assert len(index) == 1

    def test_ids_and_vectors_of_different_lengths_are_refused(
            self, make_index: MakeIndex) -> None:
        index = make_index(3)
        with pytest.raises(ValueError, match="ids"):
            index.add(["a", "b"], np.ones((1, 3), np.float32))
        with pytest.raises(ValueError, match="ids"):
            index.add(["a"], np.ones((2, 3), np.float32))
        assert len(index) == 0

    # dimensions

    def test_a_dimension_mismatch_on_add_is_refused(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        with pytest.raises(ValueError, match="dimension"):
            index.add(["a"], np.ones((1, 4), np.float32))
        index.add(["a"], np.ones((1, 3), np.float32))
        with pytest.raises(ValueError, match="dimension"):
            index.add(["b"], np.ones((1, 2), np.float32))
        assert len(index) == 1

    def test_a_dimension_mismatch_on_search_is_refused(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        with pytest.raises(ValueError, match="dimension"):
            index.search(np.ones(5), 1)  # also when empty
        index.add(["a"], np.ones((1, 3), np.float32))
        with pytest.raises(ValueError, match="dimension"):
            index.search(np.ones(2), 1)

    def test_a_single_vector_may_be_given_as_one_row(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        index.add(["a"], np.asarray([0.0, 2.0, 0.0]))
        assert index.search(np.asarray([[0.0, 1.0, 0.0]]), 1) == [
            ("a", pytest.approx(1.0, abs=ATOL))]

    # lifecycle

    def test_close_can_be_called_twice(self, make_index: MakeIndex) -> None:
        index = make_index(3)
        index.add(["a"], np.ones((1, 3), np.float32))
        index.close()
        index.close()
