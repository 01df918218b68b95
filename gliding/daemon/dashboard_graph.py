"""A job's blackboard as nodes and edges, for the dashboard's picture of it
(``GET /v1/jobs/{job}/board``): around one node (its 1-hop neighbourhood, with its literal
properties), or the job's whole graph up to a limit. Blocking: call it on a worker thread."""

from __future__ import annotations

from typing import Any

from gliding.memory.board.blackboard import Blackboard, Ref, sparql_iri

QUERY_TIMEOUT_S = 10.0
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
VALUE_CHARS = 300  # a literal shown on the page, clipped


def board_graph(board: Blackboard, job: str, node: str | None, limit: int) -> dict[str, Any]:
    """The nodes and edges of job ``job``'s graph: those touching ``node``, or any (at most
    ``limit`` triples read). Raises as ``Blackboard.query``."""
    graph = f"gliding://job/{job}"
    if node:
        at = sparql_iri(node)
        query = (f"SELECT ?s ?p ?o WHERE {{ {{ {at} ?p ?o . BIND({at} AS ?s) }} UNION "
                 f"{{ ?s ?p {at} . BIND({at} AS ?o) }} }} LIMIT {int(limit)}")
    else:
        query = (f"SELECT ?s ?p ?o WHERE {{ ?s ?p ?o . FILTER(isIRI(?o) && ?p != "
                 f"<{RDF_TYPE}>) }} LIMIT {int(limit)}")
    rows = board.query(query, graph=graph, timeout_s=QUERY_TIMEOUT_S, isolated=False)
    types: dict[str, str] = {}
    edges: list[dict[str, str]] = []
    properties: list[dict[str, str]] = []
    for row in rows:
        s, p, o = row.get("s"), row.get("p"), row.get("o")
        if not isinstance(s, Ref) or not isinstance(p, Ref) or o is None:
            continue
        types.setdefault(s.iri, "")
        if p.iri == RDF_TYPE and isinstance(o, Ref):
            types[s.iri] = _short(o.iri)
        elif isinstance(o, Ref):
            types.setdefault(o.iri, "")
            edges.append({"source": s.iri, "target": o.iri, "property": _short(p.iri)})
        elif s.iri == node:
            value = str(getattr(o, "value", o))
            properties.append({"property": _short(p.iri), "value": value[:VALUE_CHARS]})
    if types:
        found = " ".join(sparql_iri(iri) for iri in types)
        for row in board.query(f"SELECT ?s ?t WHERE {{ VALUES ?s {{ {found} }} ?s a ?t }}",
                               graph=graph, timeout_s=QUERY_TIMEOUT_S, isolated=False):
            s, t = row.get("s"), row.get("t")
            if isinstance(s, Ref) and isinstance(t, Ref):
                types[s.iri] = _short(t.iri)
    return {"job": job, "graph": graph, "node": node or None,
            "nodes": [{"iri": iri, "type": kind} for iri, kind in types.items()],
            "edges": edges, "properties": properties}


def _short(iri: str) -> str:
    """A property's or type's local name: ``https://…/vocab#dependsOn`` → ``dependsOn``."""
    return iri.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
