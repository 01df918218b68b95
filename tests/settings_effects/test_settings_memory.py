"""memory.*: each key, set through GLIDING_* variables, changes where the blackboard lives, how
knowledge is embedded and indexed, and how much recall and the briefing may take; the default
is the control.

The blackboard URL is shown with a real ``oxigraph serve`` the test starts on a free loopback
port; the vector keys through ``open_knowledge`` (what every job calls) and the real packaged
embedder; the recall keys through scripted jobs, read back from the job's archive and prompts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.daemon.board import job_board
from gliding.daemon.runtime import blackboard_path, open_knowledge
from gliding.errors import ConfigError
from gliding.memory.archive.store import Archive
from gliding.memory.backends import qdrant_vectors
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex
from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard
from gliding.memory.board.nodes import JobNodeStore
from gliding.memory.coherence.cache import DEFAULT_MARGIN_S
from gliding.memory.recall.knowledge import KnowledgeMemory
from gliding.memory.recall.vectors import ExactVectorIndex, VectorIndex
from gliding.testing import call
from gliding.testing.servers import OXIGRAPH, free_port, oxigraph_serve
from gliding.tools.readback import KNOWLEDGE_LABEL
from tests.settings_effects.effects_support import (
    run_scripted,
    run_team,
    settings_from,
    write_task,
)

DEFAULTS = Settings().memory
BRIEFING = "Blackboard (what the team recorded so far)"
GRAPH = "gliding://job/earlier-1"
HELLO_TASK = ('goal: Create the file hello.txt containing exactly the text "Hello, World!"\n'
              "pipeline: [PA, DA, CA, AA]\n"
              "checks:\n  - file_contains: {path: hello.txt, text: 'Hello, World!'}\n")
NO_VECTORS = {"GLIDING_MEMORY__VECTORS__ENABLED": "false"}


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``oxigraph serve`` on a free loopback port, its data in a temporary directory."""
    if not OXIGRAPH.exists():
        pytest.skip(f"no oxigraph binary at {OXIGRAPH} (pip install oxigraph)")
    with oxigraph_serve(tmp_path_factory.mktemp("oxigraph-serve")) as base:
        yield base


def seed(board: Any, n: int = 40) -> None:
    """``n`` facts about deployments in an earlier job's graph, each one line of its own."""
    for i in range(n):
        board.put({"@id": f"{GRAPH}/fact/{i}", "@type": "Fact", "partOf": GRAPH,
                   "text": f"deploy note {i}: the service {i} listens on port {5000 + i} "
                           f"behind proxy {i % 3}"}, graph=GRAPH)


def knowledge_for(settings: Settings, n: int = 40) -> KnowledgeMemory:
    board = OxigraphBlackboard.in_memory()
    seed(board, n)
    return open_knowledge(board, settings, TokenCounter(settings.context.tokenizer).count)


# --- memory.blackboard.url -------------------------------------------------------------------


def test_blackboard_url_is_the_endpoint_a_job_writes_its_nodes_to(tmp: Path, server: str
                                                                  ) -> None:
    settings = settings_from(tmp, {"GLIDING_MEMORY__BLACKBOARD__URL": server, **NO_VECTORS})
    assert settings.memory.blackboard.url == server

    job = run_team(write_task(tmp, HELLO_TASK), settings)

    assert job.handle.report.outcome == "success"
    graph = f"gliding://job/{job.handle.report.job}"
    endpoint = SparqlEndpointBlackboard.for_oxigraph(server)
    try:
        assert endpoint.count(graph=graph) > 0
        rows = endpoint.query("PREFIX gl: <https://gliding.dev/ns/v1#>\n"
                              "SELECT ?name WHERE { ?job a gl:Job ; gl:name ?name }", graph=graph)
    finally:
        endpoint.close()
    assert rows == [{"name": 'Create the file hello.txt containing exactly the text '
                             '"Hello, World!"'}]
    assert not blackboard_path(settings.data_dir).exists()  # nothing embedded in the data dir


def test_blackboard_url_default_is_the_embedded_store_in_the_data_dir(tmp: Path) -> None:
    settings = settings_from(tmp, NO_VECTORS)
    assert DEFAULTS.blackboard.url is None and settings.memory.blackboard.url is None

    job = run_team(write_task(tmp, HELLO_TASK), settings)

    store = OxigraphBlackboard.open(blackboard_path(settings.data_dir))
    try:
        assert store.count(graph=f"gliding://job/{job.handle.report.job}") > 0
    finally:
        store.close()


# --- memory.vectors.enabled / precision --------------------------------------------------------


def test_vectors_enabled_false_recalls_without_loading_an_embedder(tmp: Path) -> None:
    settings = settings_from(tmp, NO_VECTORS)
    knowledge = knowledge_for(settings)

    knowledge.ready()
    packed = knowledge.recall("which port does service 7 listen on", 200)

    assert knowledge.index.embedder is None and not knowledge.index.has_vectors
    assert "the service 7 listens on port 5007" in packed.text


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.heavy
def test_vectors_enabled_loads_the_packaged_embedder_at_the_first_recall_in_the_precision_set(
        tmp: Path, precision: str) -> None:
    settings = settings_from(tmp, {"GLIDING_MEMORY__VECTORS__PRECISION": precision})
    assert DEFAULTS.vectors.enabled and DEFAULTS.vectors.precision == "auto"
    knowledge = knowledge_for(settings)
    assert knowledge.index.embedder is None  # lazy: a job that never recalls never loads it

    knowledge.ready()

    embedder = knowledge.index.embedder
    assert embedder is not None, "the packaged all-MiniLM-L6-v2 did not load"
    assert embedder.dim == 384 and embedder.precision == precision
    assert isinstance(knowledge.index.vectors, ExactVectorIndex)
    assert len(knowledge.index.vectors) == len(knowledge.index.items) == 40


# --- memory.vectors.url / collection -----------------------------------------------------------


@pytest.mark.heavy
def test_vectors_url_unreachable_logs_and_falls_back_to_the_exact_index(tmp: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = settings_from(tmp, {"GLIDING_MEMORY__VECTORS__URL": url,
                                   "GLIDING_MEMORY__VECTORS__PRECISION": "int8"})
    knowledge = knowledge_for(settings)

    with capture_logs() as logs:
        knowledge.ready()

    (warning,) = [e for e in logs if e["event"] == "vectors.qdrant.unavailable"]
    assert warning["url"] == url and warning["collection"] == DEFAULTS.vectors.collection
    assert knowledge.index.embedder is not None
    assert isinstance(knowledge.index.vectors, ExactVectorIndex)
    assert len(knowledge.index.vectors) == 40
    assert "port 5007" in knowledge.recall("service 7 port", 200).text


@pytest.mark.heavy
def test_vectors_collection_is_the_collection_open_knowledge_asks_qdrant_for(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str | None, str, int]] = []

    def local_qdrant(url: str | None, *, collection: str, dim: int,
                     **_: Any) -> VectorIndex | None:  # a server stand-in: qdrant local mode
        opened.append((url, collection, dim))
        return QdrantVectorIndex.local(None, collection=collection, dim=dim)

    monkeypatch.setattr(qdrant_vectors, "open_qdrant_index", local_qdrant)
    settings = settings_from(tmp, {"GLIDING_MEMORY__VECTORS__URL": "http://qdrant.invalid:6333",
                                   "GLIDING_MEMORY__VECTORS__COLLECTION": "team-memory_v2",
                                   "GLIDING_MEMORY__VECTORS__PRECISION": "int8"})
    knowledge = knowledge_for(settings)

    knowledge.ready()

    assert opened == [("http://qdrant.invalid:6333", "team-memory_v2", 384)]
    vectors = knowledge.index.vectors
    assert isinstance(vectors, QdrantVectorIndex) and vectors.collection == "team-memory_v2"
    assert vectors.client.collection_exists("team-memory_v2") and len(vectors) == 40
    assert DEFAULTS.vectors.collection == "gliding"


@pytest.mark.parametrize("name", ["has space", "a/b", "", "x" * 256])
def test_vectors_collection_that_qdrant_would_refuse_is_a_config_error(tmp: Path,
                                                                       name: str) -> None:
    with pytest.raises(ConfigError, match=r"memory\.vectors\.collection"):
        settings_from(tmp, {"GLIDING_MEMORY__VECTORS__COLLECTION": name})


# --- memory.recall.budget_tokens ---------------------------------------------------------------


def _recall_and_search(tmp: Path, budget: int | None) -> tuple[str, str, TokenCounter]:
    tmp.mkdir(exist_ok=True)
    env = dict(NO_VECTORS)
    if budget is not None:
        env["GLIDING_MEMORY__RECALL__BUDGET_TOKENS"] = str(budget)
    settings = settings_from(tmp, env)
    settings.data_dir.mkdir(parents=True)
    board = OxigraphBlackboard.open(blackboard_path(settings.data_dir))  # an earlier job's
    seed(board, 60)
    board.close()
    task = write_task(tmp, "goal: Find the deploy notes\npipeline: [DA]\n")
    job = run_scripted(task, settings, {"DA": [
        call("recall", query="deploy note service port proxy"),
        call("kg_search", query="deploy note service port proxy", k=50),
        call("finish", summary="found them")]})
    assert job.handle.report.outcome == "success", job.handle.report
    recalled, searched = job.results()
    assert recalled.startswith(f"{KNOWLEDGE_LABEL}\n"), recalled
    return (recalled.removeprefix(f"{KNOWLEDGE_LABEL}\n"), searched,
            TokenCounter(settings.context.tokenizer))


@pytest.mark.parametrize("budget", [None, 60, 250])
def test_recall_budget_tokens_bounds_recall_and_kg_search_answers(tmp: Path,
                                                                   budget: int | None) -> None:
    section, searched, counter = _recall_and_search(tmp, budget)
    limit = budget if budget is not None else DEFAULTS.recall.budget_tokens
    assert 0 < counter.count(section) <= limit
    assert 0 < counter.count(searched) <= limit
    assert section.count("deploy note") == len(section.splitlines())  # whole lines only


def test_recall_budget_tokens_larger_recalls_more(tmp: Path) -> None:
    small, small_search, _ = _recall_and_search(tmp / "small", 60)
    large, large_search, _ = _recall_and_search(tmp / "large", 400)
    assert len(large.splitlines()) > len(small.splitlines()) >= 1
    assert len(large_search.splitlines()) > len(small_search.splitlines()) >= 1


# --- memory.recall.briefing_tokens -------------------------------------------------------------


def _system_prompts(tmp: Path, briefing: int | None) -> dict[str, str]:
    env = dict(NO_VECTORS)
    if briefing is not None:
        env["GLIDING_MEMORY__RECALL__BRIEFING_TOKENS"] = str(briefing)
    job = run_team(write_task(tmp, HELLO_TASK), settings_from(tmp, env))
    assert job.handle.report.outcome == "success"
    return {str(r.meta["role"]): r.messages[0].content for r in job.llm.requests}


def test_briefing_tokens_zero_leaves_the_blackboard_out_of_every_system_prompt(tmp: Path
                                                                               ) -> None:
    prompts = _system_prompts(tmp, 0)
    assert set(prompts) == {"PA", "DA", "CA", "AA"}
    assert not [role for role, text in prompts.items() if BRIEFING in text]


@pytest.mark.parametrize("briefing", [None, 60])
def test_briefing_tokens_positive_briefs_each_role_within_it(tmp: Path,
                                                             briefing: int | None) -> None:
    prompts = _system_prompts(tmp, briefing)
    limit = briefing if briefing is not None else DEFAULTS.recall.briefing_tokens
    counter = TokenCounter()
    briefed = {role: text.split(f"{BRIEFING}:\n", 1)[1] for role, text in prompts.items()
               if BRIEFING in text}
    assert {"CA", "AA"} <= set(briefed)  # DA's frame (check reports, artifacts) is empty yet
    assert all(0 < counter.count(text) <= limit for text in briefed.values()), briefed


# --- memory.coherence.* -------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [None, "false"])
def test_coherence_enabled_runs_the_jobs_directory_and_false_leaves_it_out(
        tmp: Path, enabled: str | None) -> None:
    env = dict(NO_VECTORS)
    if enabled is not None:
        env["GLIDING_MEMORY__COHERENCE__ENABLED"] = enabled
    with capture_logs() as logs:
        job = run_team(write_task(tmp, HELLO_TASK), settings_from(tmp, env))
    assert job.handle.report.outcome == "success"
    started = [e for e in logs if e["event"] == "coherence.directory.started"]
    if enabled is None:
        assert [e["space"] for e in started] == [job.handle.report.job]
        assert started[0]["lease_s"] == DEFAULTS.coherence.lease_s
    else:
        assert started == []
    nodes = OxigraphBlackboard.open(blackboard_path(tmp / "data"))
    try:
        assert nodes.count(graph=f"gliding://job/{job.handle.report.job}") > 0  # written either way
    finally:
        nodes.close()


@pytest.mark.parametrize("lease", [None, "0.3"])
def test_coherence_lease_s_is_how_long_a_cache_trusts_a_line(tmp: Path, lease: str | None
                                                              ) -> None:
    env = dict(NO_VECTORS)
    if lease is not None:
        env["GLIDING_MEMORY__COHERENCE__LEASE_S"] = lease
    settings = settings_from(tmp, env)
    expected = float(lease) if lease is not None else DEFAULTS.coherence.lease_s

    iri = "gliding://job/j/plan/1"

    async def trusted_at(ages: tuple[float, ...]) -> list[bool]:
        """Whether the job's agent cache still trusts a line it read, at each age (seconds
        since the read, on the cache's clock, set by hand: the machine's load plays no part)."""
        board = OxigraphBlackboard.in_memory()
        async with InProcessBus() as bus, \
                job_board(bus, JobNodeStore(board, Archive.open(tmp / "data", "j"), "j"),
                          settings, len, resumed=False) as jb:
            assert jb is not None and jb.directory.lease_s == expected
            cache, now = jb.views.cache, [1000.0]
            cache.clock = lambda: now[0]
            await cache.read(iri)
            seen = []
            for age in ages:
                now[0] = 1000.0 + age
                seen.append(cache.peek(iri) is not None)
            return seen

    trusted_for = expected - DEFAULT_MARGIN_S  # the lease, less the margin for clock rates
    if lease is not None:
        assert anyio.run(trusted_at, (0.0, trusted_for - 0.01, trusted_for + 0.01,
                                      expected + 1.0)) == [True, True, False, False]
    else:  # the default: still trusted well past the short lease
        assert anyio.run(trusted_at, (0.6, trusted_for - 0.01)) == [True, True]
