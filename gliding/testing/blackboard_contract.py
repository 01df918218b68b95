"""The contract every Blackboard backend passes: subclass ``BlackboardContract``, give a ``board``.

    class TestMyBoard(BlackboardContract):
        @pytest.fixture
        def board(self):
            board = MyBoard(..., max_limit=CONTRACT_MAX_LIMIT)   # empty, with this max_limit
            yield board
            board.close()

Hostile strings go in as literal values and must come back byte for byte, and must match when
put back into a query through ``sparql_literal``; hostile IRIs must be refused before anything
reaches the store.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gliding.memory.board.blackboard import (
    Blackboard,
    BlackboardError,
    QueryError,
    Ref,
    Triple,
    TypedLiteral,
    sparql_iri,
    sparql_literal,
)
from gliding.memory.board.vocabulary import NS, RDF_TYPE, VocabularyError, validate_node

CONTRACT_MAX_LIMIT = 10
G1 = "gliding://job/j1"
G2 = "gliding://job/j2"
PREFIX = f"PREFIX gl: <{NS}>\n"
JOB = "gliding://job/j1"
PLAN = "gliding://job/j1/plan/p1"


def step(n: int, **extra: Any) -> dict[str, Any]:
    node = {"@id": f"{PLAN}/step/{n}", "@type": "Step", "text": f"step {n}", "partOf": PLAN}
    node.update(extra)
    return node


HOSTILE_TEXTS = [
    '"',
    "'",
    '"""',
    "'''",
    "> } ; DROP ALL",
    '" } ; DROP ALL ; #',
    "'} ; DROP ALL ; #",
    '" . } } ; INSERT DATA { <http://evil/> <http://evil/> "x" } #',
    "\n}\nDROP ALL\n",
    "\u0000",
    "nul\u0000inside",
    "\\u0022 } ; DROP ALL #",
    "\\U00000022",
    "\\",
    '\\"',
    "\\\\\"",
    "\r\n\t\b\f\v",
    "\u2028\u2029\u0085",
    "é 😀 ☃ \ufeff",
    "\x7f\x1b[31m red",
    '""@en',
    '"^^<http://www.w3.org/2001/XMLSchema#integer>',
    "SERVICE <http://127.0.0.1:9/> { ?s ?p ?o }",
    "# not a comment",
    "<gliding://job/j1>",
    "${x} ?s $s",
    "",
    " ",
]

HOSTILE_IRIS = [
    "gliding://job/j1/x> } ; DROP ALL ; <http://a",
    "gliding://job/j1/with space",
    'gliding://job/j1/"quote',
    "gliding://job/j1/{brace}",
    "gliding://job/j1/back\\slash",
    "gliding://job/j1/new\nline",
    "gliding://job/j1/nul\u0000",
    "gliding://job/j1/\u2028",
    "gliding://job/j1/a|b^c`d",
    "gliding://job/j1/<x>",
    "relative/path",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "",
]

UPDATES = [
    'INSERT DATA { GRAPH <gliding://job/j1> { <http://a> <http://b> "c" } }',
    "DELETE WHERE { GRAPH ?g { ?s ?p ?o } }",
    "DELETE { ?s ?p ?o } INSERT { ?s ?p 1 } WHERE { ?s ?p ?o }",
    "WITH <gliding://job/j1> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    "LOAD <http://127.0.0.1:9/data.ttl>",
    "CLEAR ALL",
    "DROP ALL",
    "drop graph <gliding://job/j1>",
    "CREATE GRAPH <gliding://job/j3>",
    "ADD <gliding://job/j1> TO <gliding://job/j2>",
    "MOVE <gliding://job/j1> TO <gliding://job/j2>",
    "COPY <gliding://job/j1> TO <gliding://job/j2>",
    "SELECT * WHERE { SERVICE <http://127.0.0.1:9/sparql> { ?s ?p ?o } }",
    "SELECT * WHERE { service silent <http://127.0.0.1:9/sparql> { ?s ?p ?o } }",
    "SELECT * WHERE { ?s ?p ?o } ; DROP ALL",
    "SELECT * WHERE { ?s ?p \"\\u0022 } SERVICE <http://127.0.0.1:9/> { ?a ?b ?c } #\" }",
    "\\u0053ELECT * WHERE { ?s ?p ?o }",
]


class BlackboardContract:
    """Tests every backend passes; ``board`` is empty and has max_limit=CONTRACT_MAX_LIMIT."""

    # put / get

    def test_put_returns_the_iri_and_get_gives_the_normal_form_back(
        self, board: Blackboard
    ) -> None:
        node = step(
            1,
            dependsOn=["gliding://job/j1/plan/p1/step/0", "https://example.org/spec#s"],
            status="doing",
            importance=0.75,
            line=-(2**63),
            resolved=False,
            createdAt="2025-01-02T03:04:05+00:00",
            summary="writes hello.py",
        )
        assert board.put(node, graph=G1) == node["@id"]
        got = board.get(node["@id"], graph=G1)
        assert got == validate_node(node)
        assert got is not None and got["dependsOn"] == sorted(node["dependsOn"])
        assert type(got["importance"]) is float and type(got["resolved"]) is bool

    def test_get_of_an_unknown_node_is_none(self, board: Blackboard) -> None:
        assert board.get("gliding://job/j1/plan/nothing", graph=G1) is None

    def test_many_valued_properties_come_back_sorted_without_duplicates(
        self, board: Blackboard
    ) -> None:
        iri = board.put(step(1, mentions=["http://b.org/", "http://a.org/", "http://b.org/"]),
                        graph=G1)
        board.put(step(2, mentions="http://c.org/"), graph=G1)
        assert board.get(iri, graph=G1)["mentions"] == ["http://a.org/", "http://b.org/"]  # type: ignore[index]
        assert board.get(step(2)["@id"], graph=G1)["mentions"] == ["http://c.org/"]  # type: ignore[index]

    def test_re_put_replaces_every_previous_triple_of_the_node(self, board: Blackboard) -> None:
        iri = board.put(step(1, dependsOn=["http://a.org/", "http://b.org/"], summary="old"),
                        graph=G1)
        before = board.count(graph=G1)
        board.put(step(1, dependsOn=["http://c.org/"], status="done"), graph=G1)
        assert board.get(iri, graph=G1) == validate_node(
            step(1, dependsOn=["http://c.org/"], status="done")
        )
        assert board.count(graph=G1) == before - 1
        rows = board.query(PREFIX + f"SELECT ?o WHERE {{ {sparql_iri(iri)} gl:dependsOn ?o }}",
                           graph=G1)
        assert rows == [{"o": Ref("http://c.org/")}]

    def test_re_put_leaves_the_nodes_that_point_at_it(self, board: Blackboard) -> None:
        board.put({"@id": PLAN, "@type": "Plan", "partOf": JOB}, graph=G1)
        board.put(step(1), graph=G1)
        board.put({"@id": PLAN, "@type": "Plan", "partOf": JOB, "summary": "v2"}, graph=G1)
        assert board.get(step(1)["@id"], graph=G1) == validate_node(step(1))
        rows = board.query(PREFIX + f"SELECT ?s WHERE {{ ?s gl:partOf {sparql_iri(PLAN)} }}",
                           graph=G1)
        assert rows == [{"s": Ref(step(1)["@id"])}]

    def test_named_graphs_are_separate(self, board: Blackboard) -> None:
        board.put(step(1, summary="in j1"), graph=G1)
        board.put(step(1, summary="in j2"), graph=G2)
        board.put(step(1, summary="in j1, again"), graph=G1)
        assert board.get(step(1)["@id"], graph=G1)["summary"] == "in j1, again"  # type: ignore[index]
        assert board.get(step(1)["@id"], graph=G2)["summary"] == "in j2"  # type: ignore[index]
        assert board.get(step(1)["@id"], graph="gliding://job/j3") is None
        assert board.count(graph=G1) == board.count(graph=G2) == 4
        assert board.count() == 8
        rows = board.query(PREFIX + "SELECT ?g ?sum WHERE { GRAPH ?g { ?s gl:summary ?sum } } "
                           "ORDER BY ?g")
        assert rows == [{"g": Ref(G1), "sum": "in j1, again"}, {"g": Ref(G2), "sum": "in j2"}]

    # queries

    def test_select_gives_typed_values_and_leaves_unbound_variables_out(
        self, board: Blackboard
    ) -> None:
        board.put(step(1, importance=0.5, line=7, resolved=True), graph=G1)
        board.put(step(2), graph=G1)
        rows = board.query(
            PREFIX + "SELECT ?s ?type ?text ?imp ?line ?res WHERE { ?s a ?type ; gl:text ?text "
            "OPTIONAL { ?s gl:importance ?imp ; gl:line ?line ; gl:resolved ?res } } ORDER BY ?s",
            graph=G1,
        )
        assert rows == [
            {"s": Ref(step(1)["@id"]), "type": Ref(NS + "Step"), "text": "step 1", "imp": 0.5,
             "line": 7, "res": True},
            {"s": Ref(step(2)["@id"]), "type": Ref(NS + "Step"), "text": "step 2"},
        ]

    def test_other_literals_come_back_as_typed_literals(self, board: Blackboard) -> None:
        rows = board.query('SELECT ?lang ?date WHERE { BIND("hallo"@de AS ?lang) '
                           'BIND("2025-01-02"^^<http://www.w3.org/2001/XMLSchema#date> AS ?date) }')
        assert rows == [{
            "lang": TypedLiteral("hallo", "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString",
                                 "de"),
            "date": TypedLiteral("2025-01-02", "http://www.w3.org/2001/XMLSchema#date"),
        }]

    def test_without_a_graph_the_named_graphs_are_reached_with_graph(
        self, board: Blackboard
    ) -> None:
        board.put(step(1), graph=G1)
        assert board.query(PREFIX + "SELECT ?s WHERE { ?s a gl:Step }") == []
        rows = board.query(PREFIX + "SELECT ?g WHERE { GRAPH ?g { ?s a gl:Step } }")
        assert rows == [{"g": Ref(G1)}]

    def test_ask(self, board: Blackboard) -> None:
        board.put(step(1), graph=G1)
        assert board.query(PREFIX + "ASK { ?s a gl:Step }", graph=G1) == [{"boolean": True}]
        assert board.query(PREFIX + "ASK { ?s a gl:Plan }", graph=G1) == [{"boolean": False}]

    def test_construct_one_hop_around_a_focus(self, board: Blackboard) -> None:
        board.put({"@id": PLAN, "@type": "Plan", "partOf": JOB}, graph=G1)
        board.put(step(1), graph=G1)
        board.put(step(2, dependsOn=step(1)["@id"]), graph=G1)
        board.put(step(3), graph=G2)
        focus = sparql_iri(step(1)["@id"])
        frame = (f"CONSTRUCT {{ {focus} ?p ?o . ?s ?q {focus} }} WHERE "
                 f"{{ {{ {focus} ?p ?o }} UNION {{ ?s ?q {focus} }} }}")
        triples = board.construct(frame, graph=G1)
        f = Ref(step(1)["@id"])
        assert set(triples) == {
            Triple(f, Ref(RDF_TYPE), Ref(NS + "Step")),
            Triple(f, Ref(NS + "text"), "step 1"),
            Triple(f, Ref(NS + "partOf"), Ref(PLAN)),
            Triple(Ref(step(2)["@id"]), Ref(NS + "dependsOn"), f),
        }
        rows = board.query(frame, graph=G1)
        assert sorted(rows, key=repr) == sorted(
            ({"subject": t.subject, "predicate": t.predicate, "object": t.object}
             for t in triples), key=repr)

    def test_construct_refuses_select(self, board: Blackboard) -> None:
        with pytest.raises(QueryError):
            board.construct("SELECT * WHERE { ?s ?p ?o }")

    def test_a_query_that_does_not_parse_is_a_query_error(self, board: Blackboard) -> None:
        with pytest.raises(QueryError):
            board.query("SELECT * WHERE { ?s ?p }")

    # read-only, LIMIT

    @pytest.mark.parametrize("update", UPDATES)
    def test_updates_and_service_are_refused(self, board: Blackboard, update: str) -> None:
        board.put(step(1), graph=G1)
        with pytest.raises(QueryError):
            board.query(update, graph=G1)
        with pytest.raises(QueryError):
            board.construct(update, graph=G1)
        assert board.count() == 3
        assert board.get(step(1)["@id"], graph=G1) == validate_node(step(1))

    def test_limit_is_added_or_capped(self, board: Blackboard) -> None:
        for n in range(CONTRACT_MAX_LIMIT + 5):
            board.put(step(n), graph=G1)
        select = PREFIX + "SELECT ?s WHERE { ?s a gl:Step }"
        assert len(board.query(select, graph=G1)) == CONTRACT_MAX_LIMIT
        assert len(board.query(select + " LIMIT 1000000", graph=G1)) == CONTRACT_MAX_LIMIT
        assert len(board.query(select + " LIMIT 3", graph=G1)) == 3
        sub = PREFIX + "SELECT ?s WHERE { { SELECT ?s WHERE { ?s a gl:Step } LIMIT 500 } }"
        assert len(board.query(sub, graph=G1)) == CONTRACT_MAX_LIMIT
        iris = " ".join(sparql_iri(step(n)["@id"]) for n in range(12))
        values = select + f" VALUES ?s {{ {iris} }}"
        assert len(board.query(values, graph=G1)) == CONTRACT_MAX_LIMIT
        construct = "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }"
        assert len(board.construct(construct, graph=G1)) == CONTRACT_MAX_LIMIT

    # hostile values

    @pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
    def test_hostile_text_is_stored_and_read_back_literally(
        self, board: Blackboard, text: str
    ) -> None:
        node = {"@id": "gliding://job/j1/fact/1", "@type": "Fact", "text": text, "summary": text}
        board.put(node, graph=G1)
        board.put(step(1), graph=G1)
        assert board.get(node["@id"], graph=G1) == validate_node(node)
        rows = board.query(
            PREFIX + f"SELECT ?s ?t WHERE {{ ?s gl:text {sparql_literal(text)} ; gl:summary ?t }}",
            graph=G1,
        )
        assert rows == [{"s": Ref(node["@id"]), "t": text}]
        assert board.count() == 3 + 3

    def test_hostile_numbers_and_booleans_match_exactly(self, board: Blackboard) -> None:
        board.put(step(1, importance=0.1, line=2**63 - 1, resolved=True), graph=G1)
        for prop, value in (("importance", 0.1), ("line", 2**63 - 1), ("resolved", True)):
            pattern = f"?s gl:{prop} {sparql_literal(value)}"
            rows = board.query(PREFIX + f"SELECT ?s WHERE {{ {pattern} }}", graph=G1)
            assert rows == [{"s": Ref(step(1)["@id"])}]

    @pytest.mark.parametrize("iri", HOSTILE_IRIS, ids=range(len(HOSTILE_IRIS)))
    def test_hostile_iris_are_refused_before_the_store(self, board: Blackboard, iri: str) -> None:
        board.put(step(1), graph=G1)
        with pytest.raises(VocabularyError):
            board.put({"@id": iri, "@type": "Fact", "text": "x"}, graph=G1)
        with pytest.raises(VocabularyError):
            board.put(step(2, dependsOn=[iri]), graph=G1)
        with pytest.raises(VocabularyError):
            board.put(step(3), graph=iri)
        with pytest.raises(VocabularyError):
            board.get(iri, graph=G1)
        with pytest.raises(VocabularyError):
            board.query("SELECT * WHERE { ?s ?p ?o }", graph=iri)
        with pytest.raises(VocabularyError):
            sparql_iri(iri)
        assert board.count() == 3

    # validation

    @pytest.mark.parametrize(
        ("node", "words"),
        [
            ({"@id": "gliding://job/j1/x", "@type": "Stepp", "text": "t"}, "@type"),
            ({"@type": "Fact", "text": "t"}, "@id"),
            ({"@id": "gliding://job/j1/x", "@type": "Step", "text": "t"}, "requires partOf"),
            ({**step(1), "colour": "red"}, "unknown property 'colour'"),
            ({**step(1), "line": "7"}, "line"),
            ({**step(1), "line": 1.5}, "line"),
            ({**step(1), "importance": True}, "importance"),
            ({**step(1), "importance": float("nan")}, "importance"),
            ({**step(1), "resolved": 1}, "resolved"),
            ({**step(1), "text": None}, "text"),
            ({**step(1), "text": 7}, "text"),
            ({**step(1), "partOf": [PLAN]}, "one value"),
            ({**step(1), "status": "finished"}, "status"),
            ({**step(1), "createdAt": "yesterday"}, "createdAt"),
            ({**step(1), "text": "\ud800"}, "surrogate"),
            ({**step(1), "@context": "https://evil.example/context.jsonld"}, "@context"),
            ({"@id": "gliding://job/j1/c", "@type": "CheckReport", "status": "pass"}, "about"),
        ],
    )
    def test_invalid_nodes_are_refused_and_nothing_is_written(
        self, board: Blackboard, node: dict[str, Any], words: str
    ) -> None:
        with pytest.raises(VocabularyError) as caught:
            board.put(node, graph=G1)
        assert words in str(caught.value)
        assert board.count() == 0

    def test_concurrent_puts_through_one_board_never_merge_revisions(
        self, board: Blackboard
    ) -> None:
        def revision(t: int, k: int) -> dict[str, Any]:
            return step(1, summary=f"{t}-{k}",
                        dependsOn=[f"http://example.org/{t}/{k}/{i}" for i in range(4)])

        def writer(t: int) -> None:
            for k in range(15):
                board.put(revision(t, k), graph=G1)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        got = board.get(step(1)["@id"], graph=G1)
        assert got is not None
        t, k = map(int, got["summary"].split("-"))
        assert got == validate_node(revision(t, k))
        assert board.count() == 8

    # lifecycle

    def test_a_closed_board_refuses_work(self, board: Blackboard) -> None:
        board.put(step(1), graph=G1)
        board.close()
        board.close()
        with pytest.raises(BlackboardError):
            board.get(step(1)["@id"], graph=G1)
        with pytest.raises(BlackboardError):
            board.put(step(2), graph=G1)
        with pytest.raises(BlackboardError):
            board.query("ASK { ?s ?p ?o }")
