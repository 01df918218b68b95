"""L3 projection: per-role frames over the blackboard, rendered into a compact briefing.

A frame is a SPARQL CONSTRUCT template over the vocabulary of ``vocabulary.py``, around a focus
(the job), one hop deep, always with a LIMIT. Values enter templates only through
``sparql_iri`` (never by string pasting). The rendered briefing is cut to a token budget. Views
are cached per (role, focus) and dropped when any node they used is written again: the
projector listens to the job's node store (``JobNodeStore.listen(projector.written)``), where
every write ends.

Frames (what each role is shown: the node types its role file lists under ``projection``,
read through the role registry, ``gliding.config.roles``); those of the roles that ship:

    PA  earlier decisions and check reports (why a new cycle started)
    DA  check reports with their evidence and the artifacts so far (the plan is in its
        assignment)
    CA  artifacts and plan steps
    AA  plan steps and earlier decisions (the check report is in its assignment)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gliding.config.roles import entry
from gliding.memory.board.blackboard import Blackboard, Ref, Triple, sparql_iri
from gliding.memory.board.vocabulary import NS

_PREFIX = f"PREFIX gl: <{NS}>\n"
_ONE_HOP = """CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH {graph} {{
  ?s gl:partOf ?parent . ?s a ?type . ?s ?p ?o .
  FILTER(?type IN ({types}))
}} }} LIMIT {limit}"""
HOPS_LIMIT = 200


def frame_types(role: str) -> tuple[str, ...]:
    """The node types ``role``'s frame selects, ``gl:Step`` and the like: what its assignment
    does not already carry (the registry checked each is a ``gl:`` word)."""
    return entry(role).projection


def frame_query(role: str, graph: str, limit: int = HOPS_LIMIT) -> str:
    """The CONSTRUCT query of ``role``'s frame for the job graph ``graph``."""
    return _PREFIX + _ONE_HOP.format(graph=sparql_iri(graph), types=", ".join(frame_types(role)),
                                     limit=int(limit))


@dataclass
class _View:
    text: str
    used: frozenset[str]


@dataclass
class Projector:
    """Builds and caches briefings; ``count`` measures tokens (cl100k in the runtime). One
    Projector serves every job of a process from worker threads: the cache has a lock."""

    board: Blackboard
    count: Callable[[str], int]
    views: dict[tuple[str, str, int], _View] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def briefing(self, role: str, graph: str, budget_tokens: int) -> str:
        key = (role, graph, budget_tokens)
        with self._lock:
            view = self.views.get(key)
            if view is not None:
                self.hits += 1
                return view.text
            self.misses += 1
        triples = self.board.construct(frame_query(role, graph))
        text, used = render(triples, budget_tokens, self.count)
        with self._lock:
            self.views[key] = _View(text, used)
        return text

    def written(self, node: Mapping[str, Any], graph: str) -> None:
        """A ``board/nodes.WriteListener``: ``node`` was written, the views it may be in go."""
        self.invalidate(str(node["@id"]), str(node.get("@type")))

    def invalidate(self, iri: str, node_type: str | None = None) -> int:
        """Drop every view that used ``iri`` and, when the written node's type is given, every
        view whose frame selects that type (a new node may belong in it); returns how many."""
        with self._lock:
            stale = [k for k, v in self.views.items()
                     if iri in v.used or (node_type is not None
                                          and f"gl:{node_type}" in frame_types(k[0]))]
            for k in stale:
                del self.views[k]
        return len(stale)


def render(triples: list[Triple], budget_tokens: int,
           count: Callable[[str], int]) -> tuple[str, frozenset[str]]:
    """One line per node, ``Type <iri-tail>: key=value; ...``, while the budget lasts."""
    nodes: dict[str, dict[str, list[str]]] = {}
    for t in triples:
        props = nodes.setdefault(t.subject.iri, {})
        name = t.predicate.iri.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
        value = t.object.iri if isinstance(t.object, Ref) else str(getattr(t.object, "value",
                                                                           t.object))
        props.setdefault(name, []).append(value)
    lines: list[str] = []
    used: set[str] = set()
    total = 0
    for iri in sorted(nodes):
        props = nodes[iri]
        kind = (props.pop("type", ["?"])[0]).rsplit("#", 1)[-1]
        props.pop("partOf", None)
        body = "; ".join(f"{k}={' | '.join(v)[:200]}" for k, v in sorted(props.items()))
        line = f"{kind} <{iri}>: {body}"
        cost = count(line) + 1
        if total + cost > budget_tokens:
            break
        lines.append(line)
        used.add(iri)
        total += cost
    return "\n".join(lines), frozenset(used)
