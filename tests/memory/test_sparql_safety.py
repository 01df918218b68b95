"""Read-only query checks and query-template escaping, with pyoxigraph as the parsing oracle.

The property tests put arbitrary text through ``sparql_literal`` into a query and require the
query to pass ``check_read_only_query`` unchanged in shape and pyoxigraph to read the value back
exactly: no value can end the literal early, whatever quotes, backslashes, ``\\u`` sequences,
newlines or keywords it holds.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyoxigraph import QuerySolutions, Store

from gliding.memory.backends.rdf_terms import to_value
from gliding.memory.board.blackboard import (
    QueryError,
    check_read_only_query,
    sparql_iri,
    sparql_literal,
)
from gliding.memory.board.vocabulary import VocabularyError

STORE = Store()
TRICKY = st.lists(
    st.sampled_from(
        ["\\", "u", "U", "0022", "005C", "000A", "0027", '"', "'", '"""', "'''", "\n", "\r",
         "}", "{", "<", ">", "#", " ", ";", "DROP ALL", "SERVICE", "INSERT", "LIMIT 1",
         "\u0000", "\u2028", "é", "😀", "00000022", "00220022", "D800"]
    ),
    max_size=12,
).map("".join)


def _bound_value(literal: str) -> object:
    checked = check_read_only_query(f"SELECT ?v WHERE {{ BIND({literal} AS ?v) }}", max_limit=5)
    assert checked.form == "SELECT" and checked.limit == 5
    result = STORE.query(checked.text)
    assert isinstance(result, QuerySolutions)
    (solution,) = list(result)
    return to_value(solution["v"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), TRICKY))
def test_any_text_comes_back_exactly(text: str) -> None:
    assert _bound_value(sparql_literal(text)) == text


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    )
)
def test_numbers_and_booleans_come_back_exactly(value: int | float | bool) -> None:
    got = _bound_value(sparql_literal(value))
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "value", ["\ud800", float("nan"), float("inf"), 2**63, -(2**63) - 1, None, b"x", ["x"]]
)
def test_values_that_cannot_be_stored_are_refused(value: object) -> None:
    with pytest.raises(VocabularyError):
        sparql_literal(value)  # type: ignore[arg-type]


def test_iris_are_bracketed_after_validation() -> None:
    assert sparql_iri("gliding://job/j1/step/1") == "<gliding://job/j1/step/1>"
    with pytest.raises(VocabularyError):
        sparql_iri("gliding://job/j1/x> } ; DROP ALL ; <http://a")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT * WHERE { ?s ?p ?o }", "SELECT * WHERE { ?s ?p ?o }\nLIMIT 7"),
        ("SELECT * WHERE { ?s ?p ?o } # tail", "SELECT * WHERE { ?s ?p ?o } # tail\nLIMIT 7"),
        ("SELECT * WHERE { ?s ?p ?o } limit 100", "SELECT * WHERE { ?s ?p ?o } limit 7"),
        ("SELECT * WHERE { ?s ?p ?o } LIMIT 3 OFFSET 2",
         "SELECT * WHERE { ?s ?p ?o } LIMIT 3 OFFSET 2"),
        ("SELECT * WHERE { ?s ?p ?o } OFFSET 2", "SELECT * WHERE { ?s ?p ?o } OFFSET 2\nLIMIT 7"),
        ("SELECT * { ?s ?p ?o } VALUES ?s { <http://a> }",
         "SELECT * { ?s ?p ?o } LIMIT 7\nVALUES ?s { <http://a> }"),
        ("SELECT * { { SELECT * { ?s ?p ?o } LIMIT 99 } }",
         "SELECT * { { SELECT * { ?s ?p ?o } LIMIT 99 } }\nLIMIT 7"),
        ("CONSTRUCT WHERE { ?s ?p ?o }", "CONSTRUCT WHERE { ?s ?p ?o }\nLIMIT 7"),
        ("DESCRIBE <http://a>", "DESCRIBE <http://a>\nLIMIT 7"),
        ("ASK { ?s ?p ?o }", "ASK { ?s ?p ?o }"),
        ("PREFIX drop: <http://x/> SELECT ?add WHERE { ?add drop:copy 'LIMIT 5' }",
         "PREFIX drop: <http://x/> SELECT ?add WHERE { ?add drop:copy 'LIMIT 5' }\nLIMIT 7"),
        ('SELECT * WHERE { ?s ?p "} LIMIT 1000 # DROP" }',
         'SELECT * WHERE { ?s ?p "} LIMIT 1000 # DROP" }\nLIMIT 7'),
    ],
)
def test_limit_is_added_or_capped_and_the_result_parses(query: str, expected: str) -> None:
    checked = check_read_only_query(query, max_limit=7)
    assert checked.text == expected
    STORE.query(checked.text)  # parses


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "INSERT DATA { <http://a> <http://b> <http://c> }",
        "PREFIX x: <http://x/> DELETE WHERE { ?s ?p ?o }",
        "SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }",
        "SELECT * WHERE { ?s ?p ?o } ; CLEAR ALL",
        "SELECT * WHERE { ?s ?p ?o } LIMIT ?n",
        "SELECT * WHERE { ?s ?p ?o } LIMIT",
        "SELECT * WHERE { ?s ?p ?o } LIMIT １０",
        "\\u0053ELECT * WHERE { ?s ?p ?o }",
        "SELECT * WHERE { SERV\\u0049CE <http://127.0.0.1:9/> { ?s ?p ?o } }",
        'SELECT * WHERE { ?s ?p "\\u0022 } SERVICE <http://127.0.0.1:9/> { ?a ?b ?c } #" }',
        "SELECT * WHERE { ?s ?p '\\U00000027 } ; DROP ALL #' }",
        "LOAD <http://127.0.0.1:9/x>",
        "x" * 100_001,
    ],
)
def test_refused(query: str) -> None:
    with pytest.raises(QueryError):
        check_read_only_query(query, max_limit=7)


def test_escapes_past_unicode_are_left_to_the_parser() -> None:
    checked = check_read_only_query("SELECT * WHERE { ?s ?p '\\UFFFFFFFF' }", max_limit=7)
    with pytest.raises(SyntaxError):
        STORE.query(checked.text)


def test_max_limit_must_be_positive() -> None:
    with pytest.raises(QueryError):
        check_read_only_query("SELECT * { ?s ?p ?o }", max_limit=0)


def test_a_refusal_does_not_repeat_a_long_first_word() -> None:
    with pytest.raises(QueryError) as caught:
        check_read_only_query("X" * 90_000 + " { ?s ?p ?o }", max_limit=7)
    assert "not a read-only query" in caught.value.message
    assert len(str(caught.value)) < 200
