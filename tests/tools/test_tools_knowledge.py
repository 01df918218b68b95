"""The knowledge tools and recall against a real in-memory Oxigraph blackboard and KnowledgeMemory:
what the model sees for good searches and queries, for hostile or broken SPARQL, and for huge
results. Long-term memory is wired the way a job wires it (``MemoryAccess`` into
``job_groups``, without embeddings); the session's own memory comes with the context."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from gliding.config.settings import ToolSettings
from gliding.context.tokens import TokenCounter
from gliding.errors import GlidingError
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import QueryTimeout, Ref
from gliding.memory.board.vocabulary import NS
from gliding.memory.recall import vectors
from gliding.memory.recall.access import MemoryAccess
from gliding.memory.recall.knowledge import Hit, KnowledgeMemory
from gliding.memory.recall.vectors import load_embedder
from gliding.tools.base import SessionRecall, ToolContext, ToolOutcome, Toolset
from gliding.tools.groups import job_groups
from gliding.tools.knowledge import (
    KG_SEARCH,
    KNOWLEDGE_QUERY,
    LINE_CHARS,
    MAX_CHARS,
    KnowledgeAccess,
    KnowledgeGroup,
)
from gliding.tools.readback import KNOWLEDGE_LABEL, SESSION_LABEL

PREFIX = f"PREFIX gl: <{NS}>\n"
J1, J2 = "gliding://job/j1", "gliding://job/j2"
COUNT = TokenCounter().count
RECALL_BUDGET = 600

def remember(memory: KnowledgeMemory, node: dict[str, Any], *, graph: str) -> str:
    """What a job's node store does with a node: put it on the board, then tell long-term
    memory (its listener)."""
    iri = memory.board.put(node, graph=graph)
    memory.observe(node, graph)
    return iri



@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def knowledge() -> Iterator[KnowledgeMemory]:
    board = OxigraphBlackboard.in_memory(max_limit=1000)
    memory = KnowledgeMemory(board, TokenCounter().count)
    remember(memory, {"@id": J1, "@type": "Job",
                      "name": "Record the staging database port in notes.txt"}, graph=J1)
    remember(memory, {"@id": f"{J1}/fact/1", "@type": "Fact", "partOf": J1,
                      "text": "the staging database listens on port 5433"}, graph=J1)
    remember(memory, {"@id": J2, "@type": "Job", "name": "Rename the cache module"}, graph=J2)
    remember(memory, {"@id": f"{J2}/fact/1", "@type": "Fact", "partOf": J2,
                      "text": "the cache module is called store.py"}, graph=J2)
    yield memory
    board.close()


@dataclass(frozen=True)
class Session:
    """A session's own memory (``SessionRecall``) that always answers ``found``."""

    found: str

    def recall(self, query: str) -> str:
        return self.found


@dataclass(frozen=True)
class Job:
    """The "knowledge" and "memory" tools of a job and the context a role calls them with."""

    tools: Toolset
    ctx: ToolContext

    async def use(self, tool: str, **arguments: Any) -> ToolOutcome:
        return await self.tools.call(tool, arguments, self.ctx)


def access(memory: KnowledgeMemory) -> MemoryAccess:
    return MemoryAccess(memory, COUNT, RECALL_BUDGET)


def job(tmp_path: Path, memory: KnowledgeMemory | KnowledgeAccess | None,
        session: SessionRecall | None = None) -> Job:
    """``memory`` wired as a job wires it: a KnowledgeMemory through MemoryAccess."""
    wired = access(memory) if isinstance(memory, KnowledgeMemory) else memory
    tools = job_groups(knowledge=wired).toolset(["knowledge", "memory"])
    return Job(tools, ToolContext(tmp_path, ToolSettings(), session=session))


# --- kg_search ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_kg_search_lists_the_best_nodes_one_line_each(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    out = await job(tmp_path, knowledge).use("kg_search", query="staging database port")
    assert out.ok, out.output
    lines = out.output.splitlines()
    assert f"Fact {J1}/fact/1: the staging database listens on port 5433" in lines
    assert f"Job {J1}: Record the staging database port in notes.txt" in lines[:2]
    assert all(line.split(" ", 1)[0] in ("Fact", "Job") and "gliding://job/" in line
               for line in lines)


@pytest.mark.anyio
async def test_kg_search_k_bounds_the_hits_and_must_be_positive(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    j = job(tmp_path, knowledge)
    one = await j.use("kg_search", query="staging database port", k=1)
    assert one.ok and len(one.output.splitlines()) == 1
    bad = await j.use("kg_search", query="port", k=0)
    assert not bad.ok and bad.output.startswith("error: kg_search: k must be at least 1")


@pytest.mark.anyio
async def test_kg_search_with_nothing_matching_says_so(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    out = await job(tmp_path, knowledge).use("kg_search", query="zebra quokka")
    assert out.ok and out.output == "nothing found for 'zebra quokka'"


@pytest.mark.anyio
async def test_kg_search_without_the_embeddings_extra_ranks_by_words_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what find_spec says of a missing package
    monkeypatch.setattr(vectors, "_unavailable_logged", False)
    board = OxigraphBlackboard.in_memory(max_limit=1000)
    memory = KnowledgeMemory(board, COUNT, embedder_factory=load_embedder)  # as a job wires it
    remember(memory, {"@id": f"{J1}/fact/1", "@type": "Fact",
                      "text": "the staging database listens on port 5433"}, graph=J1)
    try:
        with capture_logs() as logs:
            out = await job(tmp_path, memory).use("kg_search", query="staging database port")
    finally:
        board.close()
    assert out.ok, out.output
    assert out.output.splitlines() == [
        f"Fact {J1}/fact/1: the staging database listens on port 5433"]
    assert memory.index.embedder is None
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert warning["event"] == "vectors.unavailable"
    assert warning["hint"] == "pip install 'gliding[embeddings]'"


@pytest.mark.anyio
async def test_without_a_blackboard_the_tools_say_they_are_unavailable(tmp_path: Path) -> None:
    j = job(tmp_path, None)  # no long-term memory and no session
    assert j.tools.names == ("read_result", "grep_result", "recall", "note")  # no knowledge
    for tool, args in (("kg_search", {"query": "x"}), ("knowledge_query", {"sparql": "ASK {}"})):
        out = await j.use(tool, **args)
        assert not out.ok and f"tool {tool!r} is not available to this role" in out.output, out
        unbound = await Toolset((KG_SEARCH, KNOWLEDGE_QUERY)).call(tool, args, j.ctx)
        assert not unbound.ok and "not available in this session" in unbound.output, unbound
    out = await j.use("recall", query="x")
    assert not out.ok and "not available in this session" in out.output, out


# --- knowledge_query ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_knowledge_query_reads_every_jobs_graph_as_var_value_lines(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    sparql = PREFIX + ("SELECT ?g ?s ?text WHERE { GRAPH ?g { ?s a gl:Fact ; gl:text ?text } } "
                       "ORDER BY ?g")
    out = await job(tmp_path, knowledge).use("knowledge_query", sparql=sparql)
    assert out.ok, out.output
    assert out.output.splitlines() == [
        f'g={J1} s={J1}/fact/1 text="the staging database listens on port 5433"',
        f'g={J2} s={J2}/fact/1 text="the cache module is called store.py"',
    ]


@pytest.mark.anyio
async def test_knowledge_query_predeclares_the_gl_prefix(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    sparql = "SELECT ?s WHERE { GRAPH ?g { ?s a gl:Job } } ORDER BY ?s"
    out = await job(tmp_path, knowledge).use("knowledge_query", sparql=sparql)
    assert out.ok and out.output.splitlines() == [f"s={J1}", f"s={J2}"]
    declared = await job(tmp_path, knowledge).use("knowledge_query", sparql=PREFIX + sparql)
    assert declared.ok and declared.output == out.output


@pytest.mark.anyio
async def test_knowledge_query_renders_numbers_booleans_and_typed_literals(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    sparql = ('PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\nSELECT ?n ?b ?d ?l ?missing '
              'WHERE { BIND(3 AS ?n) BIND(true AS ?b) '
              'BIND("2024-01-02T03:04:05Z"^^xsd:dateTime AS ?d) BIND("hi"@en AS ?l) }')
    j = job(tmp_path, knowledge)
    out = await j.use("knowledge_query", sparql=sparql)
    assert out.ok and out.output == 'n=3 b=true d="2024-01-02T03:04:05Z" l="hi"@en'
    ask = await j.use("knowledge_query",
                    sparql=PREFIX + f"ASK {{ GRAPH <{J2}> {{ ?s a gl:Job }} }}")
    assert ask.ok and ask.output == "boolean=true"


@pytest.mark.anyio
async def test_no_rows_outside_graph_points_at_the_named_graphs(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    out = await job(tmp_path, knowledge).use("knowledge_query",
                    sparql="SELECT ?s WHERE { ?s ?p ?o }")
    assert out.ok and out.output.startswith("no rows") and "GRAPH ?g" in out.output


@pytest.mark.anyio
@pytest.mark.parametrize(("sparql", "word"), [
    (PREFIX + f'INSERT DATA {{ GRAPH <{J1}> {{ <{J1}/x> gl:text "forged" }} }}', "INSERT"),
    (PREFIX + "DELETE WHERE { GRAPH ?g { ?s ?p ?o } }", "DELETE"),
    ("SELECT * WHERE { SERVICE <http://example.org/sparql> { ?s ?p ?o } }", "SERVICE"),
    ("DROP ALL", "DROP"),
    ("SELECT * WHERE { ?s ?p ?o } ; CLEAR ALL", "CLEAR"),
])
async def test_updates_and_service_are_refused_and_change_nothing(
        tmp_path: Path, knowledge: KnowledgeMemory, sparql: str, word: str) -> None:
    before = knowledge.board.count()
    out = await job(tmp_path, knowledge).use("knowledge_query", sparql=sparql)
    assert not out.ok
    assert out.output.startswith(f"error: refused: {word} is not allowed"), out.output
    assert "hint: " in out.output
    assert knowledge.board.count() == before


@pytest.mark.anyio
async def test_a_query_that_does_not_parse_is_an_error_the_model_can_read(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    j = job(tmp_path, knowledge)
    broken = await j.use("knowledge_query", sparql="SELECT ?s WHERE { ?s ")
    assert not broken.ok and broken.output.startswith("error: the query does not parse")
    unknown = await j.use("knowledge_query", sparql="SELECT ?s WHERE { ?s a nope:X }")
    assert not unknown.ok and unknown.output.startswith("error: the query does not parse")
    update = await j.use("knowledge_query", sparql="hello there")
    assert not update.ok and "not a read-only query" in update.output


@pytest.mark.anyio
async def test_a_huge_result_is_bounded_with_a_count_of_the_rest(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    for i in range(400):
        remember(knowledge, {"@id": f"{J1}/fact/n{i}", "@type": "Fact", "partOf": J1,
                             "text": f"note {i}: " + "padding words " * 30}, graph=J1)
    sparql = PREFIX + "SELECT ?s ?text WHERE { GRAPH ?g { ?s gl:text ?text } }"
    out = await job(tmp_path, knowledge).use("knowledge_query", sparql=sparql)
    assert out.ok
    assert len(out.output) <= MAX_CHARS
    lines = out.output.splitlines()
    shown = len(lines) - 1
    assert lines[-1] == f"[{402 - shown} more rows]"
    assert all(len(line) <= 600 for line in lines)
    hits = await job(tmp_path, knowledge).use("kg_search", query="padding note", k=50)
    assert hits.ok and len(hits.output) <= MAX_CHARS
    assert COUNT(hits.output) <= RECALL_BUDGET  # the hits are clipped to the recall budget
    assert 0 < len(hits.output.splitlines()) < 50  # the budget, not k, ended the list


@pytest.mark.anyio
async def test_store_failures_and_timeouts_come_back_as_errors_with_their_hint(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    class Slow(MemoryAccess):
        def query(self, sparql: str) -> list[dict[str, Any]]:
            raise QueryTimeout("the query ran past 10.0 s", hint="narrow the query")

    out = await job(tmp_path, Slow(knowledge, COUNT, RECALL_BUDGET)).use(
        "knowledge_query", sparql="SELECT * WHERE { ?s ?p ?o }")
    assert not out.ok and out.output == ("error: the query ran past 10.0 s\n"
                                         "  hint: narrow the query")
    knowledge.board.close()
    closed = await job(tmp_path, knowledge).use("knowledge_query",
                                                 sparql="SELECT * WHERE { ?s ?p ?o }")
    assert not closed.ok and "is closed" in closed.output


# --- recall: the session and long-term memory --------------------------------------------------


@pytest.mark.anyio
async def test_recall_answers_from_the_session_and_from_long_term_memory(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    turn = "#2 DA: read config.yaml; the port is set there <gliding://job/j3/turn/DA/2>"
    out = await job(tmp_path, knowledge, Session(turn)).use("recall",
                                                            query="staging database port")
    assert out.ok
    first, second = out.output.split("\n\n")
    assert first == f"{SESSION_LABEL}\n{turn}"
    assert second.startswith(f"{KNOWLEDGE_LABEL}\n")
    assert "the staging database listens on port 5433" in second


@pytest.mark.anyio
async def test_recall_leaves_out_an_empty_section(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    only_knowledge = await job(tmp_path, knowledge, Session("")).use(
        "recall", query="staging database port")
    assert only_knowledge.ok and only_knowledge.output.startswith(KNOWLEDGE_LABEL)
    assert SESSION_LABEL not in only_knowledge.output
    only_session = await job(tmp_path, None, Session("#1 PA: planned")).use("recall",
                                                                             query="plan")
    assert only_session.ok and only_session.output == f"{SESSION_LABEL}\n#1 PA: planned"
    with OxigraphBlackboard.in_memory() as board:
        empty = KnowledgeMemory(board, TokenCounter().count)
        nothing = await job(tmp_path, empty, Session("")).use("recall", query="zebra")
    assert nothing.ok and nothing.output == "nothing found for 'zebra'"


@pytest.mark.anyio
async def test_recall_keeps_the_session_when_long_term_memory_fails(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    knowledge.board.close()  # recall's graph step now fails on the closed store
    kept = await job(tmp_path, knowledge, Session("#1 PA: planned the port")).use(
        "recall", query="staging database port")
    assert kept.ok and kept.output.startswith(f"{SESSION_LABEL}\n#1 PA: planned the port")
    assert kept.output.splitlines()[-1].startswith("[long-term memory failed: ")
    alone = await job(tmp_path, knowledge).use("recall", query="staging database port")
    assert not alone.ok and alone.output.startswith("error: long-term memory failed: ")


# --- every answer within MAX_CHARS, whatever the nodes and the model's input -------------------


LONG_IRI = f"{J1}/fact/" + "a" * 3900  # near vocabulary.MAX_IRI_CHARS
HOSTILE_TEXTS = ["word " * 19_000, "x" * 99_000, "line\n" * 5000, "sep\u2028" * 5000,
                 "padding " + "é😀" * 20_000]


@pytest.mark.anyio
@pytest.mark.parametrize("budget_tokens", [600, 100_000])
async def test_kg_search_stays_within_max_chars_for_hostile_nodes(
        tmp_path: Path, budget_tokens: int) -> None:
    with OxigraphBlackboard.in_memory() as board:
        memory = KnowledgeMemory(board, COUNT)
        for i, text in enumerate(HOSTILE_TEXTS * 12):
            remember(memory, {"@id": f"{LONG_IRI}{i}" if i % 2 else f"{J1}/fact/{i}",
                              "@type": "Fact", "partOf": J1, "text": f"padding {text}"},
                             graph=J1)
        wired = MemoryAccess(memory, COUNT, budget_tokens)
        j = job(tmp_path, wired)
        for args in ({"query": "padding word line sep", "k": 50}, {"query": "padding"},
                     {"query": "q" * 20_000}, {"query": "padding " * 5000, "k": 50}):
            out = await j.use("kg_search", **args)
            assert out.ok and len(out.output) <= MAX_CHARS, (args, len(out.output))
            shown = out.output.splitlines()
            assert all(len(line) <= LINE_CHARS for line in shown)
            assert all(line.startswith(("Fact gliding://job/j1/fact/", "[", "nothing found"))
                       for line in shown), shown
        found = await j.use("kg_search", query="padding word", k=50)
        whole = [line for line in found.output.splitlines() if "/fact/a" not in line]
        assert whole and all(line.split(" ")[1].rstrip(":").startswith(f"{J1}/fact/")
                             for line in whole)  # short IRIs come whole, only texts are cut


HITS = st.lists(st.builds(Hit, iri=st.text(), type=st.text(), graph=st.just(J1),
                          score=st.just(1.0), text=st.text()), max_size=60)


class Canned:
    """A KnowledgeAccess that answers ``hits`` to every search, or raises ``error``."""

    def __init__(self, hits: list[Hit], error: GlidingError | None = None) -> None:
        self.hits, self.error = hits, error

    def recall(self, query: str) -> str:
        return ""

    def search(self, query: str, k: int | None = None) -> list[Hit]:
        if self.error is not None:
            raise self.error
        return self.hits

    def query(self, sparql: str) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return [{"v": hit.text, "iri": Ref(hit.iri)} for hit in self.hits]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hits=HITS, query=st.text(min_size=1).filter(str.strip),
       message=st.text(), hint=st.one_of(st.none(), st.text()),
       scale=st.integers(min_value=1, max_value=400))
def test_no_answer_or_error_passes_max_chars(hits: list[Hit], query: str, message: str,
                                            hint: str | None, scale: int) -> None:
    hits = [Hit(h.iri * scale, h.type * scale, h.graph, h.score, h.text * scale) for h in hits]

    async def answers() -> list[ToolOutcome]:
        ctx = ToolContext(Path("."), ToolSettings())
        found = Toolset(KnowledgeGroup(Canned(hits)).tools)
        failing = Toolset(KnowledgeGroup(Canned(hits, GlidingError(
            message * scale, hint=None if hint is None else hint * scale))).tools)
        return [await found.call("kg_search", {"query": query * scale}, ctx),
                await found.call("knowledge_query", {"sparql": query * scale}, ctx),
                await failing.call("kg_search", {"query": query}, ctx),
                await failing.call("knowledge_query", {"sparql": query}, ctx)]

    for out in anyio.run(answers):
        assert len(out.output) <= MAX_CHARS, (len(out.output), out.output[:80])


@pytest.mark.anyio
async def test_a_refused_query_does_not_echo_the_whole_query(
        tmp_path: Path, knowledge: KnowledgeMemory) -> None:
    out = await job(tmp_path, knowledge).use("knowledge_query", sparql="x" * 60_000)
    assert not out.ok and "not a read-only query" in out.output
    assert len(out.output) <= 300
