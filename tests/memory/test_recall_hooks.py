"""HybridRecall's hooks: item labels in packed lines, precomputed vectors and the refusals that
leave the index unchanged, attaching an embedder late (backfilling vectors), the ``related``
graph hook in place of the BM25 entity step, and a vector backend that cannot score every item
(Qdrant's local mode, in memory) — top-k search and vectors it already holds not embedded
again. Embeddings come from a deterministic bag-of-words fake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

import numpy as np
import pytest

from gliding.context.tokens import TokenCounter
from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex
from gliding.memory.recall import hybrid as recall_module
from gliding.memory.recall.hybrid import HybridRecall, MemoryItem, RecallSettings, format_line
from gliding.memory.recall.packing import group_header
from gliding.memory.recall.vectors import ExactVectorIndex, VectorStoreError
from gliding.testing.embedder import HashEmbedder

COUNTER = TokenCounter()


TEXTS = ["I adopted a beagle puppy named Biscuit.", "What breed is the puppy?",
         "Biscuit loves the beach at Brighton.", "My kids painted the fence blue.",
         "We drove to Brighton for the weekend.", "The tax report is due on Friday."]


def items(n: int = len(TEXTS), prefix: str = "i") -> list[MemoryItem]:
    return [MemoryItem(f"{prefix}{k}", TEXTS[k % len(TEXTS)], session=1, position=k + 1,
                       speaker="Ana" if k % 2 else "Ben") for k in range(n)]


def qdrant(dim: int = HashEmbedder.dim) -> QdrantVectorIndex:
    pytest.importorskip("qdrant_client")
    return QdrantVectorIndex.local(None, collection="recall", dim=dim)


# --- labels ----------------------------------------------------------------------------------


def test_format_line_shows_the_label_instead_of_the_id() -> None:
    item = MemoryItem("gliding://job/c/turn/Ana/D1%3A3", "hello   there\n  you", 1,
                      date(2023, 5, 8), "Ana", 3, label="D1:3")
    assert format_line(item) == "[D1:3] Ana (8 May 2023): hello there you"
    unlabelled = MemoryItem("gliding://job/c/fact/1", "plain", 1)
    assert format_line(unlabelled) == "[gliding://job/c/fact/1]: plain"


def test_recall_packs_labelled_lines_but_returns_ids() -> None:
    recall = HybridRecall(count=COUNTER.count)
    recall.add([MemoryItem("gliding://job/c/turn/A/1", "the zebra", 1, label="D1:1"),
                MemoryItem("gliding://job/c/turn/A/2", "a giraffe", 1, label="D1:2")])
    packed = recall.recall("zebra", 50)
    assert packed.ids[0] == "gliding://job/c/turn/A/1"
    assert packed.text.splitlines()[0] == "[D1:1]: the zebra"


# --- adding with precomputed vectors, and refusals -------------------------------------------


def snapshot(recall: HybridRecall) -> tuple[int, int, int, list[float]]:
    return (len(recall), len(recall.lexical), len(recall.vectors),
            recall.scores("Biscuit Brighton").tolist())


def test_precomputed_vectors_are_used_instead_of_embedding() -> None:
    embedder = HashEmbedder()
    recall = HybridRecall(count=COUNTER.count, embedder=embedder)  # type: ignore[arg-type]
    batch = items(4)
    given = embedder.encode([HybridRecall.index_text(i) for i in batch])
    embedder.calls.clear()
    recall.add(batch, vectors=given)
    assert embedder.calls == []  # nothing embedded at ingest
    assert len(recall.vectors) == 4
    reference = HybridRecall(count=COUNTER.count, embedder=HashEmbedder())  # type: ignore[arg-type]
    reference.add(batch)
    query = "beagle puppy"
    got, expected = recall.vector_scores(query), reference.vector_scores(query)
    assert got is not None and expected is not None
    assert np.allclose(got, expected, atol=1e-6)
    assert np.allclose(recall.scores(query), reference.scores(query), atol=1e-6)


@pytest.mark.parametrize("case", ["repeated in the batch", "already indexed", "too few vectors",
                                  "too many vectors"])
def test_refused_adds_leave_the_index_unchanged(case: str) -> None:
    embedder = HashEmbedder()
    recall = HybridRecall(count=COUNTER.count, embedder=embedder)  # type: ignore[arg-type]
    recall.add(items(3))
    before, calls = snapshot(recall), len(embedder.calls)
    fresh = [MemoryItem("new1", "brand new words", 2), MemoryItem("new2", "more words", 2)]
    vectors: np.ndarray | None = np.ones((2, HashEmbedder.dim), np.float32)
    if case == "repeated in the batch":
        batch, vectors, match = [fresh[0], fresh[1], fresh[0]], None, "'new1' is already"
    elif case == "already indexed":
        batch, vectors, match = [fresh[0], items(3)[1]], None, "'i1' is already"
    elif case == "too few vectors":
        batch, vectors, match = fresh, np.ones((1, HashEmbedder.dim), np.float32), "1 vectors"
    else:
        batch, vectors, match = fresh, np.ones((3, HashEmbedder.dim), np.float32), "3 vectors"
    with pytest.raises(ValueError, match=match):
        recall.add(batch, vectors=vectors)
    assert snapshot(recall) == before
    assert len(embedder.calls) == calls + 1  # only the snapshot's query was embedded
    recall.add(fresh)  # the refused ids are still free
    assert len(recall) == 5 and len(recall.vectors) == 5


def test_a_failing_vector_backend_leaves_the_index_unchanged() -> None:
    index = qdrant()
    recall = HybridRecall(count=COUNTER.count, embedder=HashEmbedder(),  # type: ignore[arg-type]
                          vector_index=index)
    recall.add(items(2))
    index.close()
    with pytest.raises(VectorStoreError):
        recall.add([MemoryItem("late", "too late", 1)])
    assert len(recall) == 2 and len(recall.lexical) == 2 and "late" not in recall._row


def test_vectors_without_an_embedder_are_ignored_and_recall_stays_lexical() -> None:
    recall = HybridRecall(count=COUNTER.count)
    recall.add(items(2), vectors=np.ones((2, 8), np.float32))
    assert len(recall.vectors) == 0 and recall.vector_scores("puppy") is None
    assert recall.recall("puppy", 100).ids == ("i0", "i1")  # conversation order


# --- attaching an embedder late --------------------------------------------------------------


def test_attach_embedder_backfills_every_item_in_one_batch() -> None:
    recall = HybridRecall(count=COUNTER.count)
    recall.add(items(5))
    assert not recall.has_vectors and recall.vector_scores("puppy") is None
    embedder = HashEmbedder()
    recall.attach_embedder(embedder)  # type: ignore[arg-type]
    assert recall.has_vectors and isinstance(recall.vectors, ExactVectorIndex)
    assert embedder.calls == [[HybridRecall.index_text(i) for i in items(5)]]
    assert len(recall.vectors) == 5
    reference = HybridRecall(count=COUNTER.count, embedder=HashEmbedder())
    reference.add(items(5))
    assert np.allclose(recall.scores("beagle"), reference.scores("beagle"), atol=1e-6)
    recall.add([MemoryItem("later", "a later beagle", 2)])  # later items are embedded too
    assert len(recall.vectors) == 6
    recall.attach_embedder(HashEmbedder())  # a second: ignored
    assert recall.embedder is embedder


def test_attach_embedder_to_an_empty_index_embeds_nothing() -> None:
    recall = HybridRecall(count=COUNTER.count)
    embedder = HashEmbedder()
    recall.attach_embedder(embedder)  # type: ignore[arg-type]
    assert embedder.calls == [] and len(recall.vectors) == 0


def test_attach_embedder_reuses_a_shared_index_s_vectors() -> None:
    index = qdrant()
    embedder = HashEmbedder()
    stored = embedder.encode([HybridRecall.index_text(i) for i in items(3)])
    index.add([i.id for i in items(3)], stored)  # another process embedded these already
    embedder.calls.clear()
    recall = HybridRecall(count=COUNTER.count)
    recall.add(items(5))
    recall.attach_embedder(embedder, vector_index=index)  # type: ignore[arg-type]
    assert embedder.embedded == [HybridRecall.index_text(i) for i in items(5)[3:]]
    assert len(index) == 5 and recall.vectors is index
    index.close()


# --- the related hook ------------------------------------------------------------------------


PLAIN = RecallSettings(neighbour_weight=0, importance_weight=0, speaker_weight=0, time_weight=0)


class Related:
    """A fake graph: fixed relations, and a record of what it was asked."""

    def __init__(self, relations: Mapping[str, float]) -> None:
        self.relations = dict(relations)
        self.asked: list[tuple[list[str], str]] = []

    def __call__(self, hits: Sequence[str], query: str) -> Mapping[str, float]:
        self.asked.append((list(hits), query))
        return self.relations


def test_related_replaces_the_bm25_entity_step() -> None:
    # without a hook, i2 ("Biscuit loves the beach at Brighton") shares the rare name Biscuit
    # with the best hit and rises through BM25 over names
    query = "beagle puppy adopted"
    plain = HybridRecall(count=COUNTER.count, settings=PLAIN)
    plain.add(items())
    off = HybridRecall(count=COUNTER.count, settings=RecallSettings(
        neighbour_weight=0, importance_weight=0, speaker_weight=0, time_weight=0,
        entity_weight=0))
    off.add(items())
    assert plain.scores(query)[2] > off.scores(query)[2] == 0
    # with a hook, only what it relates rises: i5 by the full weight, i2 not at all
    related = Related({"i5": 2.0, "i3": 1.0, "not-an-item": 9.0})
    hooked = HybridRecall(count=COUNTER.count, settings=PLAIN, related=related)
    hooked.add(items())
    gain = hooked.scores(query) - off.scores(query)
    assert np.allclose(gain, [0, 0, 0, 0.15, 0, 0.3], atol=1e-6)
    hits, asked = related.asked[0]
    assert asked == query and hits[0] == "i0" and set(hits) == {"i0", "i1"}  # positive only
    assert "i5" in hooked.recall(query, 200).ids and "i5" not in off.recall(query, 200).ids


def test_related_is_asked_at_most_entity_hits_best_first() -> None:
    related = Related({})
    recall = HybridRecall(count=COUNTER.count, related=related,
                          settings=RecallSettings(entity_hits=2))
    recall.add(items(12))
    recall.scores("Biscuit puppy Brighton")
    (hits, _), = related.asked
    assert len(hits) == 2
    fused = recall.lexical_scores("Biscuit puppy Brighton")
    assert fused[recall._row[hits[0]]] == fused.max()


def test_related_is_not_asked_without_hits_or_with_the_step_off() -> None:
    related = Related({"i0": 1.0})
    recall = HybridRecall(count=COUNTER.count, related=related)
    recall.add(items())
    assert not recall.scores("xylophone quantum").any()  # no hit, nothing related
    assert recall.recall("xylophone quantum", 100).ids == ()
    off = HybridRecall(count=COUNTER.count, related=related,
                       settings=RecallSettings(entity_weight=0))
    off.add(items())
    off.scores("puppy")
    assert related.asked == []


# --- a vector backend that only answers top-k ------------------------------------------------


def test_a_top_k_backend_scores_this_index_s_items_and_floors_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_module, "VECTOR_CANDIDATES", 3)
    index = qdrant()
    shared = HybridRecall(count=COUNTER.count, embedder=HashEmbedder(),  # type: ignore[arg-type]
                          vector_index=index)
    exact = HybridRecall(count=COUNTER.count, embedder=HashEmbedder())  # type: ignore[arg-type]
    for recall in (shared, exact):
        recall.add(items(12))
    query = "Biscuit the beagle at the beach"
    got, truth = shared.vector_scores(query), exact.vector_scores(query)
    assert got is not None and truth is not None and got.shape == (12,)
    assert np.allclose(got, truth, atol=1e-5)  # every own item fits the hits asked for
    # other items in the same collection (another blackboard's) crowd some own ones out:
    # those get the lowest own score that came back, never another item's score
    foreign = HashEmbedder().encode([f"{query} number {n}" for n in range(30)])
    index.add([f"other-{n}" for n in range(30)], foreign)
    got = shared.vector_scores(query)
    assert got is not None
    hits = {i for i, _ in index.search(HashEmbedder().encode([query])[0], 12 + 3)}
    returned = [n for n in range(12) if f"i{n}" in hits]
    floor = min(float(truth[n]) for n in returned) if returned else 0.0
    for row in range(12):
        expected = truth[row] if row in returned else floor
        assert got[row] == pytest.approx(expected, abs=1e-5)
    assert len(returned) < 12  # the case this test is about happened
    index.close()


def test_a_shared_backend_s_stored_vectors_are_not_embedded_again() -> None:
    index = qdrant()
    marker = np.zeros((1, HashEmbedder.dim), np.float32)
    marker[0, 0] = 1.0
    index.add(["i0"], marker)  # stored earlier, e.g. by another worker on the same server
    embedder = HashEmbedder()
    recall = HybridRecall(count=COUNTER.count, embedder=embedder,  # type: ignore[arg-type]
                          vector_index=index)
    batch = items(3)
    recall.add(batch)
    assert embedder.embedded == [HybridRecall.index_text(i) for i in batch[1:]]
    assert len(index) == 3 and len(recall) == 3
    assert index.search(marker[0], 1)[0] == ("i0", pytest.approx(1.0, abs=1e-5))
    # precomputed vectors: only the rows of the ids the backend lacks are stored
    more = [MemoryItem("j0", "alpha", 2), MemoryItem("j1", "beta", 2)]
    index.add(["j0"], marker * -1)
    rows = np.eye(2, HashEmbedder.dim, k=5, dtype=np.float32)
    recall.add(more, vectors=rows)
    assert len(index) == 5
    assert index.search(rows[1], 1)[0] == ("j1", pytest.approx(1.0, abs=1e-5))
    assert index.search(-marker[0], 1)[0][0] == "j0"  # its first vector was kept
    assert index.missing(["i0", "j1", "zz", "zz"]) == ["zz"]
    index.close()


def test_grouped_packing_never_puts_an_undated_line_under_a_date() -> None:
    from datetime import date as day

    from gliding.memory.recall.packing import pack_grouped

    dated = MemoryItem(id="a", text="a dated turn", session=0, position=1, date=day(2023, 5, 8))
    undated = MemoryItem(id="b", text="a job's turn", session=1, position=1)
    candidates = [(i.id, format_line(i, dated=False), (i.session, i.position), group_header(i))
                  for i in (dated, undated)]
    packed = pack_grouped(candidates, 200, COUNTER.count)
    assert packed.text.splitlines() == ["[b]: a job's turn", "(8 May 2023)",
                                        "[a]: a dated turn"]
    assert packed.ids == ("b", "a") and packed.tokens <= 200
