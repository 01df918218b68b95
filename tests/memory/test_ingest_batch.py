"""``Ingestor.batch()`` through the pass-through writer: a block's revisions go to L0 in one
transaction when it ends and its nodes to the blackboard only after that commits; a raising
block writes nothing to either and forgets its revisions, so the same nodes put later are
written, not skipped as unchanged. Real embedded
Oxigraph and a real SQLite archive; the board is wrapped only to watch the order of writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gliding.agents.loop import ToolRecord
from gliding.context.tokens import TokenCounter
from gliding.memory.archive.store import Archive, archive_path
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import BlackboardError
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import VocabularyError, from_jsonld
from gliding.memory.ingest.ingestor import Ingestor
from gliding.memory.recall.knowledge import KnowledgeMemory

pytestmark = pytest.mark.anyio

JOB = "j1"
GRAPH = f"gliding://job/{JOB}"


class Boom(Exception):
    """Raised by a test block to make its batch roll back."""


def committed(data_dir: Path) -> list[tuple[str, str]]:
    """(node IRI, revision IRI) of every node revision another SQLite connection can see."""
    path = archive_path(data_dir, JOB)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT iri, meta FROM entries WHERE kind = 'node' ORDER BY seq")
        return [(json.loads(meta)["node"], iri) for iri, meta in rows]
    finally:
        conn.close()


class WatchingBoard:
    """The real embedded board; each put first checks that the node's revision is committed."""

    def __init__(self, inner: OxigraphBlackboard, data_dir: Path) -> None:
        self.inner = inner
        self.data_dir = data_dir
        self.puts: list[str] = []

    def put(self, node: Mapping[str, Any], *, graph: str) -> str:
        iri = str(node["@id"])
        assert iri in {n for n, _ in committed(self.data_dir)}, f"{iri} not in L0 yet"
        self.puts.append(iri)
        return self.inner.put(node, graph=graph)

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        return self.inner.get(iri, graph=graph)


def fact(n: int, text: str | None = None) -> dict[str, Any]:
    return {"@id": f"{GRAPH}/fact/{n}", "@type": "Fact", "text": text or f"fact number {n}"}


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    board = WatchingBoard(OxigraphBlackboard.in_memory(), tmp_path)
    archive = Archive.open(tmp_path, JOB)
    writes: list[tuple[str, str]] = []
    store = JobNodeStore(board, archive, JOB)  # type: ignore[arg-type]
    store.listen(lambda node, _graph: writes.append((node["@id"], node["@type"])))
    ingestor = Ingestor(board, archive, JOB, DirectWriter(store))  # type: ignore[arg-type]
    yield ingestor, board, archive, writes
    archive.close()


async def test_revisions_are_committed_before_any_board_write(setup: Any, tmp_path: Path) -> None:
    ingestor, board, archive, writes = setup
    async with ingestor.batch() as same:
        assert same is ingestor
        for n in range(4):
            assert await ingestor.put(fact(n)) == f"{GRAPH}/fact/{n}"
        assert board.puts == [] and writes == []  # nothing on the board inside the block
        assert committed(tmp_path) == []  # and nothing of L0 visible to others
        assert archive.list(kind="node") == []  # queued: written when the block ends
        assert board.get(f"{GRAPH}/fact/0", graph=GRAPH) is None
    expected = [f"{GRAPH}/fact/{n}" for n in range(4)]
    assert board.puts == expected  # WatchingBoard checked L0 before every one
    assert writes == [(iri, "Fact") for iri in expected]
    for n, (node, revision) in enumerate(committed(tmp_path)):
        assert node == expected[n] and revision.endswith("/1")
        assert from_jsonld(archive.get(revision).content or b"") == board.get(node, graph=GRAPH)


async def test_a_raising_block_writes_nothing_and_forgets_its_revisions(setup: Any,
                                                                 tmp_path: Path) -> None:
    ingestor, board, archive, writes = setup
    await ingestor.put(fact(0, "first version"))  # outside any batch: written at once
    with pytest.raises(Boom):
        async with ingestor.batch():
            await ingestor.put(fact(0, "second version"))
            await ingestor.put(fact(1))
            raise Boom
    assert [node for node, _ in committed(tmp_path)] == [f"{GRAPH}/fact/0"]
    assert len(archive.list()) == 1
    assert board.puts == [f"{GRAPH}/fact/0"] and len(writes) == 1
    assert board.get(f"{GRAPH}/fact/1", graph=GRAPH) is None
    assert board.get(f"{GRAPH}/fact/0", graph=GRAPH)["text"] == "first version"
    # the same nodes again: not skipped as "unchanged", and numbered as if the block never ran
    await ingestor.put(fact(1))
    await ingestor.put(fact(0, "second version"))
    assert board.get(f"{GRAPH}/fact/1", graph=GRAPH) is not None
    assert board.get(f"{GRAPH}/fact/0", graph=GRAPH)["text"] == "second version"
    revisions = [revision for _, revision in committed(tmp_path)]
    assert revisions[1].endswith("/fact/1/1") and revisions[2].endswith("/fact/0/2")
    await ingestor.put(fact(0, "second version"))  # now it is unchanged
    assert len(committed(tmp_path)) == 3 and len(board.puts) == 3


async def test_a_node_put_twice_in_a_block_keeps_both_revisions_and_ends_as_the_last(
        setup: Any, tmp_path: Path) -> None:
    ingestor, board, _archive, _writes = setup
    async with ingestor.batch():
        await ingestor.put(fact(0, "one"))
        await ingestor.put(fact(0, "one"))  # unchanged: nothing new
        await ingestor.put(fact(0, "two"))
    assert [r.rsplit("/", 1)[-1] for _, r in committed(tmp_path)] == ["1", "2"]
    assert board.get(f"{GRAPH}/fact/0", graph=GRAPH)["text"] == "two"


async def test_nested_blocks_join_the_outer_one(setup: Any, tmp_path: Path) -> None:
    ingestor, board, _archive, _writes = setup
    async with ingestor.batch():
        await ingestor.put(fact(0))
        async with ingestor.batch():
            await ingestor.put(fact(1))
        assert board.puts == [] and committed(tmp_path) == []  # the inner end wrote nothing
        await ingestor.put(fact(2))
    assert board.puts == [f"{GRAPH}/fact/{n}" for n in range(3)]
    with pytest.raises(Boom):
        async with ingestor.batch():
            await ingestor.put(fact(3))
            async with ingestor.batch():
                await ingestor.put(fact(4))
                raise Boom
    assert len(committed(tmp_path)) == 3 and len(board.puts) == 3
    await ingestor.put(fact(4))  # forgotten with the outer block, so written now
    assert board.puts[-1] == f"{GRAPH}/fact/4"


async def test_a_refused_node_caught_inside_the_block_does_not_spoil_it(setup: Any,
                                                                 tmp_path: Path) -> None:
    ingestor, board, _archive, _writes = setup
    async with ingestor.batch():
        await ingestor.put(fact(0))
        with pytest.raises(VocabularyError):
            await ingestor.put({"@id": f"{GRAPH}/fact/bad", "@type": "Fact", "text": "x\ud800"})
        await ingestor.put(fact(1))
    assert board.puts == [f"{GRAPH}/fact/0", f"{GRAPH}/fact/1"]
    assert len(committed(tmp_path)) == 2


async def test_a_rolled_back_block_indexes_nothing_for_recall(tmp_path: Path) -> None:
    memory = KnowledgeMemory(OxigraphBlackboard.in_memory(), TokenCounter().count)
    with Archive.open(tmp_path, JOB) as archive:
        store = JobNodeStore(memory.board, archive, JOB)
        store.listen(memory.observe)
        ingestor = Ingestor(memory.board, archive, JOB, DirectWriter(store))
        with pytest.raises(Boom):
            async with ingestor.batch():
                await ingestor.put(fact(0, "the zebra crossing"))
                raise Boom
        assert len(memory) == 0 and memory.recall("zebra", 100).ids == ()
        await ingestor.put(fact(0, "the zebra crossing"))
        assert memory.recall("zebra", 100).ids == (f"{GRAPH}/fact/0",)


async def test_entities_seen_only_in_a_rolled_back_block_do_not_leak_into_later_writes(
        tmp_path: Path) -> None:
    board = OxigraphBlackboard.in_memory()
    job = f"gliding://job/{JOB}"
    with Archive.open(tmp_path, JOB) as archive:
        ingestor = Ingestor(board, archive, JOB,
                            DirectWriter(JobNodeStore(board, archive, JOB)))
        with pytest.raises(Boom):
            async with ingestor.batch():
                await ingestor.tool_result(ToolRecord(
                    "read_file", {"path": "src/a.py"}, True,
                    "src/a.py lines 1-2 of 2\nimport os\ndef go():\n", f"{job}/result/DA-1-0"))
                raise Boom
        assert board.count() == 0 and archive.list() == []
        await ingestor.tool_result(ToolRecord(
            "edit_file", {"path": "src/a.py", "old": "x", "new": "def go():\n"}, True,
            "edited", f"{job}/result/DA-2-0"))
        symbol = board.get(f"{job}/symbol/src%2Fa.py#go", graph=job)
        assert symbol is not None and "line" not in symbol  # no write ever said line 2


class FlakyBoard:
    """A real in-memory board whose next ``fail`` puts raise, as an endpoint that went away."""

    def __init__(self) -> None:
        self.inner = OxigraphBlackboard.in_memory()
        self.fail = 0

    def put(self, node: dict[str, Any], *, graph: str) -> str:
        if self.fail:
            self.fail -= 1
            raise BlackboardError("board down")
        return self.inner.put(node, graph=graph)

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        return self.inner.get(iri, graph=graph)


async def test_a_failed_board_write_is_retried_and_never_wedges_the_node(tmp_path: Path) -> None:
    board = FlakyBoard()
    with Archive.open(tmp_path, "j1") as archive:
        store = JobNodeStore(board, archive, "j1")  # type: ignore[arg-type]
        ingest = Ingestor(board, archive, "j1", DirectWriter(store))  # type: ignore[arg-type]
        a = {"@id": "gliding://job/j1/fact/a", "@type": "Fact", "text": "v1"}
        board.fail = 1
        with pytest.raises(BlackboardError):
            await ingest.put(a)
        await ingest.put({**a, "text": "v2"})  # the next revision goes through (it used to clash)
        assert board.get(a["@id"], graph=ingest.graph)["text"] == "v2"
        board.fail = 1
        with pytest.raises(BlackboardError):
            async with ingest.batch():
                await ingest.put({"@id": "gliding://job/j1/fact/b", "@type": "Fact", "text": "b"})
                await ingest.put({"@id": "gliding://job/j1/fact/c", "@type": "Fact", "text": "c"})
        assert board.get("gliding://job/j1/fact/c", graph=ingest.graph) is not None
        assert board.get("gliding://job/j1/fact/b", graph=ingest.graph) is None
        # unchanged
        await ingest.put({"@id": "gliding://job/j1/fact/b", "@type": "Fact", "text": "b"})
        assert board.get("gliding://job/j1/fact/b", graph=ingest.graph) is not None
        revisions = [e.meta["node"] for e in archive.list(kind="node")]
        assert revisions.count("gliding://job/j1/fact/b") == 1  # retried, not re-archived
