"""The blackboard vocabulary: validation per type, the IRI rules, and a context that means
exactly what ``node_to_quads`` writes (checked with pyoxigraph's own JSON-LD parser)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyoxigraph import Literal, NamedNode, RdfFormat, parse

from gliding.errors import UsageError
from gliding.memory.board.vocabulary import (
    CONTEXT,
    NS,
    PROPERTIES,
    TYPES,
    VOCAB_VERSION,
    VocabularyError,
    check_iri,
    from_jsonld,
    literal_value,
    node_from_terms,
    node_to_quads,
    to_jsonld,
    validate_node,
)

G = "gliding://job/j1"
J = "gliding://job/j1"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "vocabulary.md"

EXAMPLES: dict[str, dict[str, Any]] = {
    "Job": {"name": "hello world", "status": "running", "createdAt": "2025-03-01T09:00:00Z"},
    "Plan": {"partOf": J, "summary": "two steps"},
    "Step": {"partOf": f"{J}/plan/p1", "text": "write hello.py", "status": "todo",
             "dependsOn": [f"{J}/plan/p1/step/0"], "importance": 0.8},
    "Artifact": {"path": "hello.py", "derivedFrom": [f"{J}/result/c7"],
                 "partOf": J, "mentions": [f"{J}/symbol/main"]},
    "CheckReport": {"status": "fail", "about": [f"{J}/artifact/hello.py"], "text": "exit 1"},
    "Decision": {"status": "another_cycle", "summary": "fix the exit code"},
    "Turn": {"role": "DA", "derivedFrom": [f"{J}/turn/DA/3"], "produced": [f"{J}/result/c7"],
             "speaker": f"{J}/person/ann", "position": 3},
    "ToolResult": {"name": "shell", "derivedFrom": [f"{J}/result/c7"], "summary": "ok"},
    "File": {"path": "src/app.py"},
    "Symbol": {"name": "main", "path": "src/app.py", "line": 12},
    "Error": {"text": "NameError: x", "resolved": False, "about": [f"{J}/file/app"]},
    "Fact": {"text": "Caroline went to a support group", "sessionDate": "8 May, 2023",
             "importance": 3, "supersedes": f"{J}/fact/0", "mentions": ["https://example.org/p/caroline"]},
    "Person": {"name": "Caroline"},
    "Event": {"text": "LGBTQ support group", "sessionDate": "1:56 pm on 8 May, 2023"},
    "Entity": {"name": "Becoming Nicole"},
}


def example(type_name: str) -> dict[str, Any]:
    return {"@id": f"{J}/{type_name.lower()}/x1", "@type": type_name, **EXAMPLES[type_name]}


def _comparable(triple: Any) -> tuple[str, str, object]:
    obj = triple.object
    value = obj.value if isinstance(obj, NamedNode) else (literal_value(obj), obj.datatype.value)
    return (triple.subject.value, triple.predicate.value, value)


def test_version_and_namespace() -> None:
    assert VOCAB_VERSION == "1"
    assert NS == "https://gliding.dev/ns/v1#" and CONTEXT["gl"] == NS
    assert set(EXAMPLES) == set(TYPES)


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_the_inline_context_means_what_node_to_quads_writes(type_name: str) -> None:
    node = example(type_name)
    mine = {_comparable(q) for q in node_to_quads(node, graph=G)}
    theirs = {_comparable(t) for t in parse(to_jsonld(node), format=RdfFormat.JSON_LD)}
    assert mine == theirs


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_every_required_property_is_required(type_name: str) -> None:
    validate_node(example(type_name))
    for key in TYPES[type_name].required:
        node = {k: v for k, v in example(type_name).items() if k != key}
        with pytest.raises(VocabularyError, match=f"requires {key}"):
            validate_node(node)


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_quads_round_trip_to_the_normal_form(type_name: str) -> None:
    node = example(type_name)
    quads = node_to_quads(node, graph=G)
    assert all(q.graph_name == NamedNode(G) for q in quads)
    assert node_from_terms(node["@id"], [(q.predicate, q.object) for q in quads]) == (
        validate_node(node)
    )


def test_all_problems_are_named_at_once_and_it_is_a_usage_error() -> None:
    with pytest.raises(VocabularyError) as caught:
        validate_node({"@id": "nope", "@type": "Step", "colour": 1, "status": "weird"})
    message = str(caught.value)
    for words in ("@id", "colour", "requires text, partOf", "status must be one of"):
        assert words in message
    assert isinstance(caught.value, UsageError) and caught.value.code == "vocabulary.invalid"


def test_the_context_may_be_given_inline_but_never_by_reference() -> None:
    node = {**example("Fact"), "@context": CONTEXT}
    assert validate_node(node) == validate_node(example("Fact"))
    for ref in ("https://gliding.dev/ns/v1", ["https://evil.example/ctx"], {"gl": "http://x#"}):
        with pytest.raises(VocabularyError, match="@context"):
            validate_node({**example("Fact"), "@context": ref})


def test_jsonld_text_is_canonical_and_parses_back() -> None:
    a = {"@type": "Step", "@id": f"{J}/s", "partOf": J, "text": "t",
         "dependsOn": [f"{J}/b", f"{J}/a", f"{J}/a"]}
    b = {"text": "t", "dependsOn": [f"{J}/a", f"{J}/b"], "partOf": J, "@id": f"{J}/s",
         "@type": "Step"}
    assert to_jsonld(a) == to_jsonld(b)
    assert from_jsonld(to_jsonld(a)) == validate_node(a)
    with pytest.raises(VocabularyError):
        from_jsonld(b"\xff not json")


@pytest.mark.parametrize(
    "iri",
    ["gliding://job/j1", "gliding://job/j1/artifact/src%2Fapp.py", "https://example.org/a#b",
     "http://127.0.0.1:7878/x?y=1", "https://例え.jp/パス"],
)
def test_good_iris(iri: str) -> None:
    assert check_iri(iri) == iri


@pytest.mark.parametrize(
    "iri",
    ["", "gliding:/job/j1", "GLIDING://job/j1", "urn:x:y", "ftp://a/b", "//a/b", "a/b",
     "https://a b", "https://a\tb", "https://a\u00a0b", "https://a\u200bb", "https://a\u2028b",
     "https://a<b", "https://a>b", 'https://a"b', "https://a{b", "https://a}b", "https://a|b",
     "https://a^b", "https://a`b", "https://a\\b", "https://a\u0000b", "https://a\u007fb",
     "https://a\ud800b", "https://" + "a" * 5000, 7, None],
)
def test_bad_iris(iri: Any) -> None:
    with pytest.raises(VocabularyError):
        check_iri(iri)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=200),
    importance=st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False,
                                                                     allow_infinity=False)),
)
def test_any_literal_round_trips_through_quads(text: str, importance: int | float) -> None:
    iri = f"{J}/fact/1"
    node = {"@id": iri, "@type": "Fact", "text": text, "importance": importance}
    quads = node_to_quads(node, graph=G)
    back = node_from_terms(iri, [(q.predicate, q.object) for q in quads])
    assert back == validate_node(node)
    assert back is not None and type(back["importance"]) is type(importance)


def test_literal_values_of_other_datatypes_are_none() -> None:
    assert literal_value(Literal("x", language="en")) is None
    xsd = "http://www.w3.org/2001/XMLSchema#"
    assert literal_value(Literal("2025-01-01", datatype=NamedNode(xsd + "date"))) is None
    assert literal_value(Literal("12", datatype=NamedNode(xsd + "int"))) == 12
    assert literal_value(Literal("1", datatype=NamedNode(xsd + "boolean"))) is True


def test_the_docs_describe_every_type_and_property() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name in [*TYPES, *PROPERTIES]:
        assert f"`{name}`" in text, name
    assert NS in text and "@context" in text


def test_the_docs_print_the_context_exactly() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("## The context", 1)[1].split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(block) == CONTEXT
