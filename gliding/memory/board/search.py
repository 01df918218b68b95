"""Text search over the blackboard: every node's words (name, text, summary, path, status)
ranked with BM25, with the node's type and graph (its job). Backs ``gliding memory search``.

Lexical only for now; the hybrid recall of ``recall.py`` (embeddings, neighbours, time) is for
conversational memory items and will be joined here when turns are ingested as nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gliding.memory.board.blackboard import Blackboard, Ref
from gliding.memory.board.vocabulary import NS
from gliding.memory.recall.lexical import BM25Index

_NODES = f"""PREFIX gl: <{NS}>
SELECT ?g ?s ?type ?p ?v WHERE {{ GRAPH ?g {{
  ?s a ?type . ?s ?p ?v .
  FILTER(?p IN (gl:name, gl:text, gl:summary, gl:path, gl:status))
}} }}"""


@dataclass(frozen=True)
class Hit:
    iri: str
    type: str
    graph: str
    score: float
    text: str


def search_nodes(board: Blackboard, query: str, *, k: int = 10,
                 max_rows: int = 100_000, timeout_s: float = 30.0) -> list[Hit]:
    """The ``k`` nodes whose words best match ``query`` (BM25), best first."""
    rows = board.query(_NODES + f" LIMIT {int(max_rows)}", timeout_s=timeout_s)
    texts: dict[str, list[str]] = {}
    meta: dict[str, tuple[str, str]] = {}
    for row in rows:
        subject, graph, kind = row["s"], row["g"], row["type"]
        if not isinstance(subject, Ref):
            continue
        key = subject.iri
        texts.setdefault(key, []).append(str(getattr(row["v"], "value", row["v"])))
        meta[key] = (kind.iri.rsplit("#", 1)[-1] if isinstance(kind, Ref) else "?",
                     graph.iri if isinstance(graph, Ref) else "")
    if not texts:
        return []
    index = BM25Index()
    ids = sorted(texts)
    index.add(ids, [" ".join(texts[i]) for i in ids])
    return [Hit(iri, meta[iri][0], meta[iri][1], round(float(score), 4),
                " | ".join(texts[iri])[:300]) for iri, score in index.search(query, k)]
