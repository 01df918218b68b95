"""The embedded Oxigraph blackboard passes the contract, persists on disk and times queries out
(how they are stopped: test_query_bounds.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyoxigraph import Literal, NamedNode, Quad

from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import BlackboardError, QueryTimeout
from gliding.memory.board.vocabulary import NS, validate_node
from gliding.testing.blackboard_contract import (
    CONTRACT_MAX_LIMIT,
    G1,
    BlackboardContract,
    step,
)


class TestOxigraphOnDisk(BlackboardContract):
    @pytest.fixture
    def board(self, tmp_path: Path) -> Iterator[OxigraphBlackboard]:
        board = OxigraphBlackboard.open(tmp_path / "blackboard", max_limit=CONTRACT_MAX_LIMIT)
        yield board
        board.close()


class TestOxigraphInMemory(BlackboardContract):
    @pytest.fixture
    def board(self) -> Iterator[OxigraphBlackboard]:
        board = OxigraphBlackboard.in_memory(max_limit=CONTRACT_MAX_LIMIT)
        yield board
        board.close()


def test_nodes_survive_closing_and_reopening(tmp_path: Path) -> None:
    with OxigraphBlackboard.open(tmp_path / "bb") as board:
        board.put(step(1, summary="kept"), graph=G1)
    with OxigraphBlackboard.open(tmp_path / "bb") as board:
        assert board.get(step(1)["@id"], graph=G1) == validate_node(step(1, summary="kept"))


def test_a_store_held_by_another_opener_is_a_clear_error(tmp_path: Path) -> None:
    with OxigraphBlackboard.open(tmp_path / "bb"):
        with pytest.raises(BlackboardError) as caught:
            OxigraphBlackboard.open(tmp_path / "bb")
    assert "oxigraph serve" in str(caught.value)


def test_a_long_query_times_out_and_gives_its_turn_back() -> None:
    with OxigraphBlackboard.in_memory(max_queries=1) as board:
        board.store.extend(
            Quad(NamedNode(f"http://example.org/{i}"), NamedNode(NS + "line"), Literal(i))
            for i in range(2000)
        )
        heavy = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?p ?x . ?b ?p ?y . FILTER(?x != ?y) }"
        with pytest.raises(QueryTimeout):
            board.query(heavy, timeout_s=0.05)
        # The query was stopped at its timeout (tests/memory/test_query_bounds.py looks at the
        # processes): the only turn is free again, and the next query answers at once.
        assert board.query("ASK { ?s ?p ?o }", timeout_s=2) == [{"boolean": True}]


def test_triples_put_did_not_write_make_get_fail_clearly() -> None:
    with OxigraphBlackboard.in_memory() as board:
        board.put(step(1), graph=G1)
        board.store.add(
            Quad(NamedNode(step(1)["@id"]), NamedNode("http://example.org/colour"),
                 Literal("red"), NamedNode(G1))
        )
        with pytest.raises(BlackboardError) as caught:
            board.get(step(1)["@id"], graph=G1)
    assert "did not write" in str(caught.value)


def test_from_clauses_never_fetch_remote_data() -> None:
    with OxigraphBlackboard.in_memory() as board:
        board.put(step(1), graph=G1)
        rows = board.query("SELECT ?s WHERE { ?s ?p ?o } ", graph=None)
        assert rows == []
        remote = "SELECT ?s FROM <http://127.0.0.1:9/data.ttl> WHERE { ?s ?p ?o }"
        assert board.query(remote) == []


@pytest.mark.parametrize("sparql", [
    f"SELECT ?s ?p ?o WHERE {{ GRAPH <{G1}> {{ ?s ?p ?o }} }} ORDER BY ?s ?p ?o",
    'SELECT ?b ?l ?n ?d WHERE { BIND(BNODE("x") AS ?b) BIND("hi"@en AS ?l) BIND(2.5 AS ?n) '
    'BIND("2024-01-02"^^<http://www.w3.org/2001/XMLSchema#date> AS ?d) }',
    f"ASK {{ GRAPH <{G1}> {{ ?s ?p ?o }} }}",
    f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH <{G1}> {{ ?s ?p ?o }} }}",
])
def test_isolated_and_in_process_queries_answer_alike(sparql: str) -> None:
    with OxigraphBlackboard.in_memory() as board:
        for n in range(3):
            board.put(step(n, summary=f'"quoted" \\ {n} é'), graph=G1)
        isolated = board.query(sparql)
        here = board.query(sparql, isolated=False)
    if "BNODE" in sparql:  # a fresh blank node each time: compare all but its label
        assert [dict(r, b=None) for r in isolated] == [dict(r, b=None) for r in here]
    elif "CONSTRUCT" in sparql:
        assert sorted(map(repr, isolated)) == sorted(map(repr, here)) and len(here) > 3
    else:
        assert isolated == here and here
