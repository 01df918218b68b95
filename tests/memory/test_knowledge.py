"""Knowledge memory: the blackboard joined to hybrid recall. Nodes put through its board are
indexed (only the recalled types, in flushed batches), graph expansion asks the real embedded
Oxigraph store with SPARQL, ``load`` indexes an existing store page by page, the embedder can
be loaded lazily, and a tiny synthetic LoCoMo conversation shows a detail reachable only
through a shared rare entity recalled at a small budget."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gliding.bench.conversation import ingest_conversation, sessions_of
from gliding.context.tokens import TokenCounter
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import QueryError
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import VocabularyError, to_jsonld
from gliding.memory.recall.hybrid import MemoryItem, RecallSettings
from gliding.memory.recall.knowledge import (
    RECALLED_TYPES,
    Hit,
    KnowledgeMemory,
)
from gliding.memory.recall.vectors import ExactVectorIndex
from gliding.testing import embedder as fakes

COUNT = TokenCounter().count
pytestmark = pytest.mark.anyio

G = "gliding://job/kg1"
G2 = "gliding://job/kg2"


class HashEmbedder(fakes.HashEmbedder):
    dim = 32


def memory(board: OxigraphBlackboard | None = None, **options: Any) -> KnowledgeMemory:
    return KnowledgeMemory(board or OxigraphBlackboard.in_memory(), COUNT, **options)


def write(km: KnowledgeMemory, node: dict[str, Any], *, graph: str) -> str:
    """What a job's node store does with a node: put it on the board, then tell its listener."""
    iri = km.board.put(node, graph=graph)
    km.observe(node, graph)
    return iri


def fact(name: str, text: str, graph: str = G, **more: Any) -> dict[str, Any]:
    return {"@id": f"{graph}/fact/{name}", "@type": "Fact", "text": text, **more}


def turn(speaker: str, dia_id: str, text: str) -> dict[str, str]:
    """One turn of a LoCoMo-format session."""
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


def item(km: KnowledgeMemory, iri: str) -> MemoryItem:
    km.flush()
    return km.index.items[km.index._row[iri]]


# --- indexing on put -------------------------------------------------------------------------


def test_a_node_put_through_the_board_is_stored_and_recalled() -> None:
    km = memory()
    iri = write(km, fact("1", "The zebra crossing near the school"), graph=G)
    assert km.board.get(iri, graph=G) == {"@id": iri, "@type": "Fact",
                                          "text": "The zebra crossing near the school"}
    assert len(km) == 1
    packed = km.recall("zebra", 100)
    assert packed.ids == (iri,) and packed.text == (
        f"[{iri}]: The zebra crossing near the school")


def test_a_refused_node_is_neither_stored_nor_indexed() -> None:
    km = memory()
    with pytest.raises(VocabularyError):
        write(km, {"@id": f"{G}/fact/x", "@type": "Fact", "text": 7}, graph=G)
    assert len(km) == 0 and km.board.count() == 0


async def test_what_a_job_s_node_store_writes_is_indexed_and_what_it_refuses_is_not(
        tmp_path: Path) -> None:
    km = memory()
    with Archive.open(tmp_path, "kg1") as archive:
        store = JobNodeStore(km.board, archive, "kg1")
        store.listen(km.observe)
        writer = DirectWriter(store)
        await writer.write(f"{G}/fact/1", to_jsonld(fact("1", "the zebra crossing")))
        with pytest.raises(VocabularyError):
            await writer.write(f"{G}/fact/2", to_jsonld(fact("3", "not the IRI written")))
    assert km.recall("zebra", 100).ids == (f"{G}/fact/1",) and len(km) == 1


CONTENT: dict[str, dict[str, Any]] = {
    "Job": {"name": "build the parser"},
    "Step": {"text": "write the parser", "partOf": f"{G}/plan/1"},
    "ToolResult": {"name": "grep", "summary": "grep ok: parser.py:3"},
    "Error": {"text": "ValueError: bad token"},
    "CheckReport": {"status": "fail", "about": [G], "text": "tests pass"},
    "Decision": {"status": "done", "text": "the parser works"},
    "Turn": {"role": "DA", "summary": "wrote parser.py"},
    "Fact": {"text": "the parser is recursive descent"},
    "Person": {"name": "Ana"},
    "Entity": {"name": "Parser"},
    "Event": {"text": "session 1"},
    "File": {"path": "parser.py"},
    "Symbol": {"name": "parse"},
    "Artifact": {"path": "parser.py"},
    "Plan": {"partOf": G},
}


@pytest.mark.parametrize("kind", sorted(CONTENT))
def test_only_recalled_types_are_indexed(kind: str) -> None:
    km = memory()
    write(km, {"@id": f"{G}/{kind.lower()}/1", "@type": kind, **CONTENT[kind]}, graph=G)
    assert len(km) == (1 if kind in RECALLED_TYPES else 0)
    assert km.board.count(graph=G) > 0  # stored either way


def test_recalled_nodes_without_content_are_not_indexed() -> None:
    km = memory()
    write(km, {"@id": f"{G}/turn/DA/1", "@type": "Turn", "role": "DA"}, graph=G)
    write(km, {"@id": f"{G}/decision/1", "@type": "Decision", "status": "done"}, graph=G)
    write(km, fact("blank", "   \n\t "), graph=G)
    assert len(km) == 0


def test_item_text_joins_the_content_keys_once_and_a_turn_s_name_is_not_content() -> None:
    km = memory()
    write(km, {"@id": f"{G}/turn/A/1", "@type": "Turn", "role": "A", "name": "D1:1",
                  "text": "the real words", "summary": "a summary"}, graph=G)
    write(km, {"@id": f"{G}/turn/A/2", "@type": "Turn", "role": "A",
                  "summary": "only a summary"}, graph=G)
    write(km, {"@id": f"{G}/result/1", "@type": "ToolResult", "name": "grep",
                  "summary": "grep ok", "path": "grep"}, graph=G)
    assert item(km, f"{G}/turn/A/1").text == "the real words"
    assert item(km, f"{G}/turn/A/2").text == "only a summary"
    assert item(km, f"{G}/result/1").text == "grep ok"  # a name already in the summary: once


def test_a_node_is_indexed_once_and_keeps_its_first_text() -> None:
    km = memory()
    write(km, fact("1", "first words"), graph=G)
    write(km, fact("1", "second words"), graph=G)
    write(km, fact("1", "third words"), graph=G2)
    assert len(km) == 1
    assert (km.board.get(f"{G}/fact/1", graph=G) or {})["text"] == "second words"
    assert item(km, f"{G}/fact/1").text == "first words"  # documented: until load()


def test_puts_are_embedded_in_batches_of_batch_size() -> None:
    embedder = HashEmbedder()
    km = memory(embedder=embedder, batch_size=3)
    for n in range(2):
        write(km, fact(str(n), f"fact {n}"), graph=G)
    assert embedder.calls == [] and len(km.index) == 0 and len(km) == 2
    write(km, fact("2", "fact 2"), graph=G)  # the third fills the batch
    assert [len(call) for call in embedder.calls] == [3] and len(km.index) == 3
    write(km, fact("3", "fact 3"), graph=G)
    assert km.flush() == 1 and km.flush() == 0
    assert [len(call) for call in embedder.calls] == [3, 1]
    write(km, fact("4", "fact 4 zebra"), graph=G)
    assert f"{G}/fact/4" in km.recall("zebra", 100).ids  # recall flushes first
    assert len(km.index) == 5 and len(km.index.vectors) == 5


# --- item mapping ----------------------------------------------------------------------------


def test_items_carry_sessions_positions_dates_speakers_and_labels() -> None:
    km = memory()
    s1, s2 = f"{G}/session/1", f"{G}/session/2"
    write(km, {"@id": f"{G}/turn/Ana/D1%3A2", "@type": "Turn", "role": "Ana",
                  "name": "D1:2", "text": "hello", "partOf": s1, "position": 2,
                  "createdAt": "2023-05-08T13:56:00"}, graph=G)
    write(km, {"@id": f"{G}/turn/Ben/D2%3A1", "@type": "Turn", "role": "Ben",
                  "name": "D2:1", "text": "later", "partOf": s2, "position": 1,
                  "sessionDate": "1:56 pm on 8 June, 2023"}, graph=G)
    write(km, {"@id": f"{G}/turn/Ana/x", "@type": "Turn", "role": "Ana", "text": "no pos",
                  "partOf": s1, "createdAt": "2023-05-08T23:30:00+02:00",
                  "sessionDate": "1 January, 1999"}, graph=G)
    write(km, fact("f", "important", importance=0.9,
                      sessionDate="not a date"), graph=G)
    write(km, {"@id": "https://example.org/fact/1", "@type": "Fact", "text": "outside",
                  "importance": 1}, graph=G)
    first, second = item(km, f"{G}/turn/Ana/D1%3A2"), item(km, f"{G}/turn/Ben/D2%3A1")
    assert (first.session, first.position, first.date, first.speaker, first.label) == (
        0, 2, date(2023, 5, 8), "Ana", "D1:2")
    assert (second.session, second.position, second.date, second.label) == (
        1, 1, date(2023, 6, 8), "D2:1")
    unpositioned = item(km, f"{G}/turn/Ana/x")
    assert unpositioned.session == 0 and unpositioned.position == 3  # the running order
    assert unpositioned.date == date(2023, 5, 8)  # createdAt wins over sessionDate
    assert unpositioned.label == f"{G}/turn/Ana/x"  # no name: its IRI
    important = item(km, f"{G}/fact/f")
    assert important.importance == 0.9 and important.date is None and important.speaker == ""
    assert important.label == f"{G}/fact/f" and important.session == 2  # no partOf: its own session
    outside = item(km, "https://example.org/fact/1")
    assert outside.label == "https://example.org/fact/1" and outside.importance == 1.0
    assert outside.session == important.session  # both have no parent
    packed = km.recall("hello", 200).text
    line = next(ln for ln in packed.splitlines() if "hello" in ln)
    assert line.startswith("[D1:2] Ana") and line.endswith(": hello")
    assert "8 May 2023" in packed


# --- graph expansion -------------------------------------------------------------------------


def entity(name: str, graph: str = G) -> str:
    return f"{graph}/entity/{name.lower()}"


def graph_memory(**options: Any) -> KnowledgeMemory:
    km = memory(**options)
    for name in ("Rare", "Trio", "Common", "Single"):
        write(km, {"@id": entity(name), "@type": "Entity", "name": name}, graph=G)
    write(km, {"@id": f"{G}/person/Ana", "@type": "Person", "name": "Ana"}, graph=G)
    mentions = {
        "f1": ["Rare", "Trio", "Common", "Single", "ana"],
        "f2": ["Rare", "Common"], "f3": ["Trio", "Common"], "f4": ["Trio", "Common"],
        "f5": ["Common"], "f6": ["ana"], "f7": [],
    }
    for name, names in mentions.items():
        iris = [f"{G}/person/Ana" if n == "ana" else entity(n) for n in names]
        write(km, fact(name, f"fact {name}", mentions=iris), graph=G)
    # the same entity IRI mentioned in another graph must not count here
    write(km, fact("x1", "elsewhere", graph=G2, mentions=[entity("Rare")]), graph=G2)
    write(km, fact("x2", "elsewhere", graph=G2, mentions=[entity("Rare")]), graph=G2)
    return km


def test_related_counts_shared_rare_entities_and_people() -> None:
    km = graph_memory()
    related = km.related([f"{G}/fact/f1"], "anything here")
    assert related == {f"{G}/fact/f1": 3.0, f"{G}/fact/f2": 1.0, f"{G}/fact/f3": 1.0,
                       f"{G}/fact/f4": 1.0, f"{G}/fact/f6": 1.0}
    # Common (5 items) is not rare; Single (only f1) relates nothing; G2 is another graph


def test_related_leaves_out_the_names_the_query_says() -> None:
    km = graph_memory()
    related = km.related([f"{G}/fact/f1"], 'What about Rare and ana? "}) . } DROP ALL { ?x')
    assert related == {f"{G}/fact/f1": 2.0, f"{G}/fact/f3": 1.0, f"{G}/fact/f4": 1.0,
                       f"{G}/fact/f6": 1.0}  # Rare left out; "ana" is not written as a name
    shouted = km.related([f"{G}/fact/f1"], "And ANA?")
    assert shouted == {f"{G}/fact/f1": 2.0, f"{G}/fact/f2": 1.0, f"{G}/fact/f3": 1.0,
                       f"{G}/fact/f4": 1.0}
    assert km.board.count(graph=G) > 0  # and the query text changed nothing


def test_related_follows_rare_df_and_several_hits() -> None:
    km = graph_memory(settings=RecallSettings(rare_df=2))
    assert km.related([f"{G}/fact/f1"], "q") == {
        f"{G}/fact/f1": 2.0, f"{G}/fact/f2": 1.0, f"{G}/fact/f6": 1.0}
    assert km.related([f"{G}/fact/f2", f"{G}/fact/f6"], "q") == {
        f"{G}/fact/f1": 2.0, f"{G}/fact/f2": 1.0, f"{G}/fact/f6": 1.0}
    assert km.related([f"{G}/fact/f7"], "q") == {}
    assert km.related([], "q") == {}


def test_related_searches_the_fixed_graph_when_one_is_given() -> None:
    km = graph_memory(graph=G2)
    assert km.related([f"{G}/fact/f1"], "q") == {}  # f1 mentions nothing in G2
    assert km.related([f"{G2}/fact/x1"], "q") == {f"{G2}/fact/x1": 1.0,
                                                   f"{G2}/fact/x2": 1.0}


def test_related_refuses_a_hit_that_is_not_an_iri() -> None:
    km = graph_memory()
    with pytest.raises(VocabularyError):
        km.related(["> } DROP ALL ; <x"], "q")


def test_recall_raises_the_items_that_share_a_rare_entity_with_its_hits() -> None:
    plain = RecallSettings(neighbour_weight=0, importance_weight=0, speaker_weight=0,
                           time_weight=0)
    off = RecallSettings(neighbour_weight=0, importance_weight=0, speaker_weight=0,
                         time_weight=0, entity_weight=0)
    scores = {}
    for name, settings in (("on", plain), ("off", off)):
        km = memory(settings=settings)
        write(km, {"@id": entity("Oslo"), "@type": "Entity", "name": "Oslo"}, graph=G)
        write(km, fact("hit", "the zebra was striped", mentions=[entity("Oslo")]), graph=G)
        write(km, fact("far", "a cold fjord", mentions=[entity("Oslo")]), graph=G)
        write(km, fact("none", "a warm beach"), graph=G)
        km.ready()
        row = {i.id: n for n, i in enumerate(km.index.items)}
        got = km.index.scores("zebra")
        scores[name] = {iri: float(got[r]) for iri, r in row.items()}
    assert scores["off"][f"{G}/fact/far"] == 0
    assert scores["on"][f"{G}/fact/far"] == pytest.approx(0.3)
    assert scores["on"][f"{G}/fact/hit"] == pytest.approx(scores["off"][f"{G}/fact/hit"] + 0.3)
    assert scores["on"][f"{G}/fact/none"] == 0


# --- search and query ------------------------------------------------------------------------


def test_search_gives_hits_with_their_iris_types_and_graphs() -> None:
    km = memory(settings=RecallSettings(neighbour_weight=0))  # only the words count here
    write(km, fact("1", "zebra  crossing\n\nat the school " + "x " * 400), graph=G)
    write(km, {"@id": f"{G2}/step/1", "@type": "Step", "text": "paint the zebra",
                  "partOf": f"{G2}/plan/1"}, graph=G2)
    write(km, fact("3", "nothing relevant"), graph=G)
    hits = km.search("zebra")
    assert [(h.iri, h.type, h.graph) for h in hits] == [
        (f"{G2}/step/1", "Step", G2), (f"{G}/fact/1", "Fact", G)]
    assert all(isinstance(h, Hit) and h.score > 0 for h in hits)
    assert hits[0].score >= hits[1].score
    assert hits[1].text.startswith("zebra crossing at the school x") and len(hits[1].text) == 300
    assert km.search("zebra", k=1) == hits[:1]
    assert km.search("quantum") == []


def test_query_is_the_read_only_sparql_of_the_store() -> None:
    km = memory()
    write(km, fact("1", "one"), graph=G)
    rows = km.query("PREFIX gl: <https://gliding.dev/ns/v1#> "
                    "SELECT ?t WHERE { ?s gl:text ?t }", graph=G)
    assert rows == [{"t": "one"}]
    with pytest.raises(QueryError):
        km.query("DELETE WHERE { ?s ?p ?o }")
    assert km.board.count(graph=G) == 2


# --- load ------------------------------------------------------------------------------------


def fill(km: KnowledgeMemory, graph: str, n: int) -> list[str]:
    iris = []
    for k in range(n):
        iris.append(write(km, {
            "@id": f"{graph}/turn/A/{k}", "@type": "Turn", "role": "Ana" if k % 2 else "Ben",
            "name": f"D1:{k}", "text": f"turn number {k} about topic{k}",
            "partOf": f"{graph}/session/1", "position": k + 1,
            "createdAt": "2023-05-08T13:56:00", "importance": 0.5}, graph=graph))
    write(km, {"@id": f"{graph}/person/Ana", "@type": "Person", "name": "Ana"}, graph=graph)
    return iris


def test_load_indexes_an_existing_on_disk_store_page_by_page(tmp_path: Path) -> None:
    live = memory(OxigraphBlackboard.open(tmp_path / "kg", max_limit=5))
    first, second = fill(live, G, 6), fill(live, G2, 3)
    live.flush()
    expected = {i.id: i for i in live.index.items}
    live.board.close()
    with OxigraphBlackboard.open(tmp_path / "kg", max_limit=5) as store:  # 9 nodes, ~90 rows
        km = memory(store)
        assert km.load() == 9
        assert set(km.index._row) == set(first + second)
        for iri, before in expected.items():
            after = item(km, iri)
            assert (after.text, after.date, after.speaker, after.position, after.label,
                    after.importance) == (before.text, before.date, before.speaker,
                                          before.position, before.label, before.importance)
        assert km.load() == 0  # already indexed
        assert f"{G}/turn/A/4" in km.recall("topic4", 100).ids
        assert km.search("topic4")[0].iri == f"{G}/turn/A/4"
        assert km.search("topic2")[0].graph == G2
        only = memory(store)
        assert only.load(graphs=[G2]) == 3 and set(only.index._row) == set(second)
        assert memory(store).load(graphs=[]) == 0


def test_load_after_live_ingest_adds_nothing() -> None:
    km = memory()
    fill(km, G, 3)
    assert km.load() == 0 and len(km) == 3


def test_load_reads_at_most_max_nodes() -> None:
    board = OxigraphBlackboard.in_memory()
    for k in range(10):
        board.put(fact(str(k), f"fact {k}"), graph=G)
    assert memory(board).load(max_nodes=2) <= 2


def test_a_loaded_memory_scores_like_the_live_one(tmp_path: Path) -> None:
    board = OxigraphBlackboard.in_memory()
    live = memory(board)
    with Archive.open(tmp_path, "conv") as archive:
        ingest_conversation(live.board, archive, "conv", sessions_of(PUPPY), live.observe)
    live.ready()
    loaded = memory(board)
    loaded.load()
    query = "What breed is the puppy?"
    a, b = live.index.scores(query), loaded.index.scores(query)
    by_id = {i.id: float(b[n]) for n, i in enumerate(loaded.index.items)}
    for n, it in enumerate(live.index.items):
        assert by_id[it.id] == pytest.approx(float(a[n]), abs=1e-4), it.label


PUPPY_TURNS = [("Caroline", "I adopted a puppy named Biscuit."), ("Melanie", "What breed is he?"),
               ("Caroline", "A beagle, very loud."), ("Melanie", "My kids would love that.")]
PUPPY = {f"session_{n}": [turn(speaker, f"D{n}:{k}", text)
                          for k, (speaker, text) in enumerate(PUPPY_TURNS, 1)] for n in (1, 2)}


# --- a lazily loaded embedder ----------------------------------------------------------------


class Factory:
    def __init__(self, embedder: HashEmbedder | None) -> None:
        self.embedder = embedder
        self.calls = 0

    def __call__(self) -> HashEmbedder | None:
        self.calls += 1
        return self.embedder


def test_the_embedder_factory_runs_on_the_first_recall_and_backfills() -> None:
    embedder = HashEmbedder()
    factory = Factory(embedder)
    km = memory(embedder_factory=factory, batch_size=2)
    for n in range(3):
        write(km, fact(str(n), f"fact {n} zebra" if n == 1 else f"fact {n}"), graph=G)
    assert factory.calls == 0 and not km.index.has_vectors  # ingest does not load it
    assert len(km.index) == 2  # one batch went in without vectors
    packed = km.recall("zebra", 100)
    assert factory.calls == 1 and km.index.embedder is embedder
    assert [len(call) for call in embedder.calls] == [2, 1, 1]  # backfill, pending, query
    assert len(km.index.vectors) == 3 and f"{G}/fact/1" in packed.ids
    km.search("zebra")
    km.recall("zebra", 100)
    assert factory.calls == 1


def test_a_factory_that_gives_none_leaves_recall_lexical() -> None:
    factory = Factory(None)
    km = memory(embedder_factory=factory)
    write(km, fact("1", "zebra"), graph=G)
    assert km.recall("zebra", 100).ids == (f"{G}/fact/1",)
    km.recall("zebra", 100)
    assert factory.calls == 1 and not km.index.has_vectors


def test_a_given_embedder_wins_over_the_factory() -> None:
    factory = Factory(HashEmbedder())
    km = memory(embedder=HashEmbedder(), embedder_factory=factory)
    write(km, fact("1", "zebra"), graph=G)
    km.recall("zebra", 100)
    assert factory.calls == 0


def test_a_lazy_embedder_fills_the_given_vector_index() -> None:
    pytest.importorskip("qdrant_client")
    from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex

    index = QdrantVectorIndex.local(None, collection="kg", dim=HashEmbedder.dim)
    km = memory(embedder_factory=Factory(HashEmbedder()), vector_index=index, batch_size=1)
    for n in range(3):
        write(km, fact(str(n), f"fact {n}"), graph=G)
    assert len(index) == 0
    km.recall("fact", 100)
    assert len(index) == 3 and km.index.vectors is index
    index.close()


def test_a_vector_index_factory_makes_the_index_when_the_embedder_arrives() -> None:
    pytest.importorskip("qdrant_client")
    from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex

    asked: list[int] = []
    made: list[QdrantVectorIndex] = []

    def make(dim: int) -> QdrantVectorIndex:
        asked.append(dim)
        made.append(QdrantVectorIndex.local(None, collection="lazy", dim=dim))
        return made[-1]

    km = memory(embedder_factory=Factory(HashEmbedder()), vector_index_factory=make)
    write(km, fact("1", "zebra"), graph=G)
    assert asked == []
    km.recall("zebra", 100)
    assert asked == [HashEmbedder.dim] and km.index.vectors is made[0] and len(made[0]) == 1
    made[0].close()


def test_a_vector_index_factory_that_gives_none_means_the_exact_index() -> None:
    km = memory(embedder_factory=Factory(HashEmbedder()), vector_index_factory=lambda _: None)
    write(km, fact("1", "zebra"), graph=G)
    km.recall("zebra", 100)
    assert isinstance(km.index.vectors, ExactVectorIndex) and len(km.index.vectors) == 1


# --- end to end: a LoCoMo-format conversation ------------------------------------------------


CONVERSATION: dict[str, Any] = {
    "speaker_a": "Caroline", "speaker_b": "Melanie",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        turn("Caroline", "D1:1", "Big news: my cousin Ingrid got married at a vineyard last "
                                 "weekend."),
        turn("Melanie", "D1:2", "Congratulations to her! Was it a big party?"),
        turn("Caroline", "D1:3", "About eighty guests and lots of dancing."),
        turn("Melanie", "D1:4", "Ours was at the town hall, just family."),
        turn("Caroline", "D1:5", "Small ceremonies are lovely too."),
        turn("Melanie", "D1:6", "My cousin plays the cello, by the way."),
    ],
    "session_2_date_time": "10:00 am on 20 May, 2023",
    "session_2": [
        turn("Melanie", "D2:1", "How is your week going?"),
        turn("Caroline", "D2:2", "Busy! I baked a lemon chiffon cake for Ingrid and she "
                                 "adored it."),
        turn("Melanie", "D2:3", "Yum, that sounds lovely."),
        turn("Caroline", "D2:4", "Work has been hectic though."),
        turn("Melanie", "D2:5", "Take a break this weekend."),
    ],
    "session_3_date_time": "4:30 pm on 2 June, 2023",
    "session_3": [
        turn("Melanie", "D3:1", "My cousin took the kids camping on Saturday."),
        turn("Caroline", "D3:2", "Sounds fun, did they catch any fish?"),
        turn("Melanie", "D3:3", "Just one tiny trout."),
        turn("Caroline", "D3:4", "Better than nothing!"),
    ],
    "session_4_date_time": "9:15 am on 30 June, 2023",
    "session_4": [
        turn("Caroline", "D4:1", "I started pottery classes on Tuesdays."),
        turn("Melanie", "D4:2", "How are they going so far?"),
        turn("Caroline", "D4:3", "My first bowl collapsed, sadly."),
        turn("Melanie", "D4:4", "My cousin gave me a leaky mug once."),
    ],
    "session_5_date_time": "7:00 pm on 14 July, 2023",
    "session_5": [
        turn("Melanie", "D5:1", "We finally painted the living room."),
        turn("Caroline", "D5:2", "What colour did you pick?"),
        turn("Melanie", "D5:3", "A soft green, my cousin helped."),
        turn("Caroline", "D5:4", "Green is calming."),
    ],
    "session_6_date_time": "11:30 am on 1 August, 2023",
    "session_6": [
        turn("Caroline", "D6:1", "A cousin of mine is moving abroad."),
        turn("Melanie", "D6:2", "Exciting! Where to?"),
        turn("Caroline", "D6:3", "Somewhere warm, that is all I know."),
    ],
    "session_1_summary": "never read",
}
# The answer (D2:2) shares no word with the question; only the rare entity Ingrid, which it
# shares with the best hit (D1:1), leads to it. Five other turns each share one common word.
QUESTION = "What treat was made for the cousin who got married at the vineyard?"
BUDGET = 120


def ingested(tmp_path: Path, settings: RecallSettings) -> tuple[KnowledgeMemory, dict[str, str]]:
    km = memory(settings=settings)
    with Archive.open(tmp_path, "locomo-1") as archive:
        ingest = ingest_conversation(km.board, archive, "locomo-1", sessions_of(CONVERSATION),
                                     km.observe)
    return km, ingest.turn_iris


def test_a_detail_reachable_only_through_a_shared_rare_entity_is_recalled(
        tmp_path: Path) -> None:
    km, turns = ingested(tmp_path / "on", RecallSettings())
    km.ready()
    answer, hit = turns["D2:2"], turns["D1:1"]
    assert km.index.lexical.scores(QUESTION)[km.index._row[answer]] == 0  # words cannot
    assert hit == km.index.lexical.search(QUESTION, 1)[0][0]
    packed = km.recall(QUESTION, BUDGET)
    assert answer in packed.ids and hit in packed.ids
    assert packed.tokens <= BUDGET and COUNT(packed.text) == packed.tokens
    line = next(ln for ln in packed.text.splitlines() if ln.startswith("[D2:2] Caroline"))
    assert line.endswith(": Busy! I baked a lemon chiffon cake for Ingrid and she adored it.")
    assert "20 May 2023" in packed.text  # on the line or its session's header
    plain = [iri for iri, _ in km.index.lexical.search(QUESTION, len(packed.ids))]
    assert answer not in plain  # plain BM25 with as many lines misses it


@pytest.mark.parametrize("settings", [RecallSettings(entity_weight=0),
                                      RecallSettings(rare_df=1)],
                         ids=["no-graph-step", "nothing-rare"])
def test_without_graph_expansion_the_detail_is_crowded_out(tmp_path: Path,
                                                           settings: RecallSettings) -> None:
    km, turns = ingested(tmp_path, settings)
    packed = km.recall(QUESTION, BUDGET)
    assert turns["D2:2"] not in packed.ids
    assert turns["D1:1"] in packed.ids and len(packed.ids) >= 4  # the budget went elsewhere


def test_brief_leaves_out_the_running_job_and_weak_matches_and_never_loads_vectors() -> None:
    factory = Factory(HashEmbedder())
    km = memory(embedder_factory=factory)
    write(km, fact("a", "the staging database listens on port 5433"), graph=G)
    write(km, fact("b", "the staging database was moved to a new host", G2), graph=G2)
    write(km, fact("c", "lunch is at noon", G2), graph=G2)
    write(km, fact("d", "a database backup runs nightly", G2), graph=G2)  # one shared term
    packed = km.brief("which port does the staging database use", 200, exclude_graphs=[G])
    assert packed.ids == (f"{G2}/fact/b",)
    assert COUNT(packed.text) == packed.tokens <= 200
    assert factory.calls == 0 and km.index.embedder is None
    assert km.brief("which port does the staging database use", 0).ids == ()
    assert km.brief("staging database port", 200).ids[:1] == (f"{G}/fact/a",)


class FlakyEmbedder(HashEmbedder):
    """Raises on its next ``fail`` batches, as a model or a vector server that went away."""

    fail = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            self.fail -= 1
            raise OSError("embedder failed")
        return super().encode(texts)


def test_a_failed_flush_keeps_the_items_waiting_and_the_put_succeeds() -> None:
    embedder = FlakyEmbedder()
    km = memory(embedder=embedder, batch_size=2)
    write(km, fact("a", "alpha apples"), graph=G)
    embedder.fail = 1
    write(km, fact("b", "beta bananas"), graph=G)  # indexing fails: logged, not raised
    assert km.board.get(f"{G}/fact/b", graph=G) is not None
    write(km, fact("c", "gamma grapes"), graph=G)
    assert len(km) == 3
    assert f"{G}/fact/b" in km.recall("bananas", 200).ids


def test_a_failed_embedder_attach_leaves_recall_lexical_and_working() -> None:
    embedder = FlakyEmbedder()
    km = memory(embedder_factory=lambda: embedder)
    write(km, fact("a", "alpha apples"), graph=G)
    km.flush()  # indexed by words before any embedder
    embedder.fail = 1
    assert km.recall("apples", 200).ids == (f"{G}/fact/a",)
    assert km.index.embedder is None and len(km.index.vectors) == 0
    write(km, fact("b", "beta bananas"), graph=G)
    assert f"{G}/fact/b" in km.recall("bananas", 200).ids


@pytest.mark.heavy
def test_recall_from_a_thread_while_ingestion_writes_is_consistent() -> None:
    km = memory(embedder=HashEmbedder(), batch_size=4)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                km.recall("cat story", 200)
                km.search("cat", k=3)
            except BaseException as exc:  # noqa: BLE001 -- collected and asserted below
                errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(120):
            write(km, fact(str(n), f"cat story {n}"), graph=G)
    finally:
        done.set()
        thread.join()
    assert errors == [] and len(km) == 120
    assert len(km.index.vectors) == len(km.index.items) == 120
