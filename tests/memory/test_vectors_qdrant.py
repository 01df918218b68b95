"""Qdrant in qdrant-client's local mode passes the VectorIndex contract; fallback; reopening."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex, open_qdrant_index, point_id
from gliding.memory.recall.vectors import ExactVectorIndex, VectorStoreError
from gliding.testing.vector_contract import MakeIndex, VectorIndexContract

pytest.importorskip("qdrant_client")  # the backend module itself imports it only when used


class TestQdrantLocalInMemory(VectorIndexContract):
    @pytest.fixture
    def make_index(self) -> Iterator[MakeIndex]:
        made: list[QdrantVectorIndex] = []

        def make(dim: int) -> QdrantVectorIndex:
            made.append(QdrantVectorIndex.local(None, collection="contract", dim=dim))
            return made[-1]

        yield make
        for index in made:
            index.close()


class TestQdrantLocalOnDisk(VectorIndexContract):
    @pytest.fixture
    def make_index(self, tmp_path: Path) -> Iterator[MakeIndex]:
        made: list[QdrantVectorIndex] = []

        def make(dim: int) -> QdrantVectorIndex:
            path = tmp_path / f"qdrant-{len(made)}"
            made.append(QdrantVectorIndex.local(str(path), collection="contract", dim=dim))
            return made[-1]

        yield make
        for index in made:
            index.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_gives_none_and_one_warning() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with capture_logs() as logs:
        index = open_qdrant_index(url, collection="memory", dim=8)
    assert index is None
    warnings = [entry for entry in logs if entry["event"] == "vectors.qdrant.unavailable"]
    assert len(warnings) == 1, logs
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["using"] == "exact numpy index"
    assert warnings[0]["url"] == url
    assert "VectorStoreError" in warnings[0]["error"]


def test_connect_to_an_unreachable_server_is_a_vector_store_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(VectorStoreError) as caught:
        QdrantVectorIndex.connect(url, collection="memory", dim=8, timeout_s=2)
    assert caught.value.code == "vectors.store_failed"
    assert url in str(caught.value) and "hint:" in str(caught.value)
    assert caught.value.__cause__ is not None


def test_without_qdrant_client_open_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qdrant_client", None)  # import raises ImportError
    with capture_logs() as logs:
        assert open_qdrant_index(None, collection="memory", dim=8) is None
    assert [entry["event"] for entry in logs] == ["vectors.qdrant.unavailable"]
    assert "qdrant_client" in logs[0]["error"] and logs[0]["using"] == "exact numpy index"
    assert logs[0]["hint"] == "pip install 'gliding[qdrant]'"


def test_local_mode_through_open_qdrant_index(tmp_path: Path) -> None:
    index = open_qdrant_index(None, collection="memory", dim=3, path=str(tmp_path / "q"))
    assert isinstance(index, QdrantVectorIndex)
    try:
        index.add(["a"], np.ones((1, 3)))
        assert index.search(np.ones(3), 1)[0][0] == "a"
    finally:
        index.close()


def test_a_reopened_collection_keeps_its_points_and_refuses_another_dimension(
        tmp_path: Path) -> None:
    path = str(tmp_path / "qdrant")
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(30, 12)).astype(np.float32)
    ids = [f"doc-{i}" for i in range(30)]
    with QdrantVectorIndex.local(path, collection="memory", dim=12) as index:
        index.add(ids[:20], vectors[:20])
        index.add(ids[20:], vectors[20:])
    with QdrantVectorIndex.local(path, collection="memory", dim=12) as index:
        assert len(index) == 30
        exact = ExactVectorIndex(12)
        exact.add(ids, vectors)
        query = rng.normal(size=12)
        assert [i for i, _ in index.search(query, 7)] == [i for i, _ in exact.search(query, 7)]
        with pytest.raises(ValueError, match="already"):
            index.add(["doc-3"], vectors[:1])
        with pytest.raises(VectorStoreError):  # the folder is locked while a client has it
            QdrantVectorIndex.local(path, collection="memory", dim=12)
    with pytest.raises(ValueError, match="dimension 12, not 16"):
        QdrantVectorIndex.local(path, collection="memory", dim=16)
    with QdrantVectorIndex.local(path, collection="other", dim=16) as other:
        assert len(other) == 0  # another collection in the same folder is separate
    with QdrantVectorIndex.local(path, collection="memory", dim=12) as index:
        assert len(index) == 30  # the refused opening changed nothing


def test_a_closed_index_refuses_work() -> None:
    index = QdrantVectorIndex.local(None, collection="memory", dim=3)
    index.add(["a"], np.ones((1, 3)))
    index.close()
    with pytest.raises(VectorStoreError, match="closed"):
        index.search(np.ones(3), 1)
    with pytest.raises(VectorStoreError, match="closed"):
        index.add(["b"], np.ones((1, 3)))


def test_point_ids_are_stable_uuids() -> None:
    assert point_id("a") == point_id("a") != point_id("b")
    assert len(point_id("é 😀")) == 36
