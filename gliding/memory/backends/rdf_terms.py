"""What the RDF backends share: pyoxigraph terms to result values, answers read from the wire
(SPARQL JSON results, N-Triples), and the text of a put.

Both backends write a node with the same SPARQL update: delete the node's triples in its graph,
then insert the new ones, in one request, which Oxigraph (and SPARQL 1.1 endpoints generally)
apply atomically. The terms are written by pyoxigraph in N-Triples syntax, which is also SPARQL
syntax, from quads built by ``vocabulary.node_to_quads``; no value is spliced in by hand.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyoxigraph import (
    BlankNode,
    Literal,
    NamedNode,
    Quad,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolution,
    QuerySolutions,
    RdfFormat,
    parse,
    parse_query_results,
)
from pyoxigraph import Triple as OxTriple

from gliding.memory.board.blackboard import BlackboardError, Ref, Triple, TypedLiteral, Value
from gliding.memory.board.vocabulary import literal_value


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


def result_rows(body: bytes, source: str) -> list[dict[str, Value]]:
    """The rows of a SELECT or ASK answer in SPARQL JSON results (``[{"boolean": b}]`` for ASK).

    Raises:
        BlackboardError: ``body`` is not SPARQL JSON results (``source`` names who answered).
    """
    result = parse_results(body, source)
    if isinstance(result, QueryBoolean):
        row: dict[str, Value] = {"boolean": bool(result)}
        return [row]
    return solution_rows(result, [v.value for v in result.variables])


def parse_results(body: bytes, source: str) -> QuerySolutions | QueryBoolean:
    """``body`` read as SPARQL JSON results.

    Raises:
        BlackboardError: it is not (``source`` names who answered).
    """
    try:
        return parse_query_results(body, format=QueryResultsFormat.JSON)
    except (SyntaxError, ValueError) as exc:
        raise BlackboardError(f"{source} answered bad SPARQL JSON results: {exc}") from exc


def ntriples_triples(body: bytes, source: str) -> list[Triple]:
    """The triples of a CONSTRUCT or DESCRIBE answer in N-Triples.

    Raises:
        BlackboardError: ``body`` is not N-Triples (``source`` names who answered).
    """
    try:
        return [to_triple(t) for t in parse(body, format=RdfFormat.N_TRIPLES)]
    except (SyntaxError, ValueError) as exc:
        raise BlackboardError(f"{source} answered bad N-Triples: {exc}") from exc


def replace_node_update(subject: NamedNode, graph: NamedNode, quads: Iterable[Quad]) -> str:
    """One SPARQL update that replaces every triple of ``subject`` in ``graph`` by ``quads``."""
    body = " .\n".join(f"{q.subject} {q.predicate} {q.object}" for q in quads)
    return (
        f"DELETE WHERE {{ GRAPH {graph} {{ {subject} ?p ?o }} }} ;\n"
        f"INSERT DATA {{ GRAPH {graph} {{\n{body} .\n}} }}"
    )
