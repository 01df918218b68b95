"""What the RDF backends share: pyoxigraph terms to result values, and the text of a put.

Both backends write a node with the same SPARQL update: delete the node's triples in its graph,
then insert the new ones, in one request, which Oxigraph (and SPARQL 1.1 endpoints generally)
apply atomically. The terms are written by pyoxigraph in N-Triples syntax, which is also SPARQL
syntax, from quads built by ``vocabulary.node_to_quads``; no value is spliced in by hand.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyoxigraph import BlankNode, Literal, NamedNode, Quad, QuerySolution
from pyoxigraph import Triple as OxTriple

from gliding.memory.blackboard import Ref, Triple, TypedLiteral, Value
from gliding.memory.vocabulary import literal_value


def to_value(term: object) -> Value:
    """The result Value of one pyoxigraph term."""
    if isinstance(term, NamedNode):
        return Ref(term.value)
    if isinstance(term, BlankNode):
        return Ref(f"_:{term.value}")
    if isinstance(term, Literal):
        value = literal_value(term)
        if value is not None:
            return value
        return TypedLiteral(term.value, term.datatype.value, term.language)
    return TypedLiteral(str(term), "")  # an RDF-star quoted triple: shown as text


def solution_rows(
    solutions: Iterable[QuerySolution], variables: Iterable[str]
) -> list[dict[str, Value]]:
    """One dict per solution, variable name (without ``?``) -> Value; unbound ones left out."""
    names = list(variables)
    rows = []
    for solution in solutions:
        row: dict[str, Value] = {}
        for name in names:
            term = solution[name]
            if term is not None:
                row[name] = to_value(term)
        rows.append(row)
    return rows


def to_triple(triple: OxTriple | Quad) -> Triple:
    """Our Triple of a pyoxigraph triple or quad (the graph name is dropped)."""
    subject = to_value(triple.subject)
    predicate = to_value(triple.predicate)
    assert isinstance(subject, Ref) and isinstance(predicate, Ref)  # RDF allows nothing else
    return Triple(subject, predicate, to_value(triple.object))


def triple_rows(triples: Iterable[Triple]) -> list[dict[str, Value]]:
    """The rows ``Blackboard.query`` returns for CONSTRUCT and DESCRIBE."""
    return [{"subject": t.subject, "predicate": t.predicate, "object": t.object} for t in triples]


def replace_node_update(subject: NamedNode, graph: NamedNode, quads: Iterable[Quad]) -> str:
    """One SPARQL update that replaces every triple of ``subject`` in ``graph`` by ``quads``."""
    body = " .\n".join(f"{q.subject} {q.predicate} {q.object}" for q in quads)
    return (
        f"DELETE WHERE {{ GRAPH {graph} {{ {subject} ?p ?o }} }} ;\n"
        f"INSERT DATA {{ GRAPH {graph} {{\n{body} .\n}} }}"
    )
