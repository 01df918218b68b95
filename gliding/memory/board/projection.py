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

Around the focus (``Projector.around``): the facts and errors of the job that name the
entities of a role's current task — the identifiers, file names and rarer words of its step or
goal (``focus_terms``). One SPARQL CONSTRUCT gathers their neighbourhood (each fact, what it
was derived from); the triples become JSON-LD and are shaped with the role file's ``frame``
by pyld's framing (the vocabulary's inline ``@context``; a document loader that refuses every
URL, so nothing is ever fetched); the framed nodes are rendered as short lines, those sharing
the most with the focus first, within a token budget, each ending with the IRI (and lines)
its full source reads back from. Measured: framing ~0.4 ms per node on this machine (100
facts and their 25 results: 44 ms), paid once per assignment (views are cached).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gliding.config.roles import entry
from gliding.core.identifiers import identifiers
from gliding.errors import ConfigError
from gliding.memory.board.blackboard import (
    Blackboard,
    Ref,
    Triple,
    TypedLiteral,
    sparql_iri,
    sparql_literal,
)
from gliding.memory.board.vocabulary import CONTEXT, NS, PROPERTIES, TYPES

_PREFIX = f"PREFIX gl: <{NS}>\n"
_ONE_HOP = """CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH {graph} {{
  ?s gl:partOf ?parent . ?s a ?type . ?s ?p ?o .
  FILTER(?type IN ({types}))
}} }} LIMIT {limit}"""
HOPS_LIMIT = 200
_AROUND = """CONSTRUCT {{ ?f ?p ?o . ?r ?rp ?ro }} WHERE {{ GRAPH {graph} {{
  ?f a ?type . FILTER(?type IN ({types}))
  ?f gl:text ?text . OPTIONAL {{ ?f gl:source ?source }}
  FILTER({match})
  {{ ?f ?p ?o }} UNION {{ ?f gl:derivedFrom ?r . ?r ?rp ?ro .
                         FILTER(?rp IN (rdf:type, gl:name, gl:status)) }}
}} }} LIMIT {limit}"""
AROUND_LIMIT = 2000  # triples of the neighbourhood, at most
AROUND_TYPES = frozenset({"Fact", "Error", "ToolResult"})  # a new one may change such a view
_AROUND_KEY = "\x00around\x00"  # in a cached view's role: a view around a focus
FOCUS_TERMS = 12
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{4,}")
_COMMON = frozenset({"about", "above", "after", "again", "against", "along", "among", "another",
    "around", "because", "before", "being", "below", "between", "could", "doing", "during",
    "every", "first", "found", "given", "having", "their", "there", "these", "those", "through",
    "under", "until", "using", "which", "while", "whose", "would", "write", "wrote", "other",
    "should", "shall", "still", "where", "what", "when", "with", "within", "without", "check",
    "checks", "result", "results", "output", "file", "files"})
_XSD = "http://www.w3.org/2001/XMLSchema#"
_RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def frame_types(role: str) -> tuple[str, ...]:
    """The node types ``role``'s frame selects, ``gl:Step`` and the like: what its assignment
    does not already carry (the registry checked each is a ``gl:`` word)."""
    return entry(role).projection


def frame_query(role: str, graph: str, limit: int = HOPS_LIMIT) -> str:
    """The CONSTRUCT query of ``role``'s frame for the job graph ``graph``."""
    return _PREFIX + _ONE_HOP.format(graph=sparql_iri(graph), types=", ".join(frame_types(role)),
                                     limit=int(limit))


def focus_terms(text: str, limit: int = FOCUS_TERMS) -> list[str]:
    """The entities of a task's text, lower-cased, most specific first: identifiers (paths,
    dotted and snake_case names, long numbers), then longer words that are not common ones."""
    found: dict[str, None] = {}
    for ident in identifiers(text):
        found.setdefault(ident.lower().strip("./"))
    words = sorted({w.lower() for w in _WORD.findall(text)} - _COMMON, key=lambda w: (-len(w), w))
    for word in words:
        found.setdefault(word)
    return [t for t in found if t][:limit]


def frame_of(role: str) -> dict[str, Any] | None:
    """``role``'s frame with the vocabulary's inline ``@context`` (None: the role has none).

    Raises:
        ConfigError: the frame names a word that is not a node type or property.
    """
    text = entry(role).frame
    if not text:
        return None
    frame = json.loads(text)
    _check_words(frame, role)
    return {"@context": CONTEXT, **frame}


def _check_words(frame: Mapping[str, Any], role: str) -> None:
    for key, value in frame.items():
        if key == "@type":
            kinds = value if isinstance(value, list) else [value]
            unknown = [k for k in kinds if k not in TYPES]
            if unknown:
                raise ConfigError(f"roles/{role}.yaml: frame: {unknown[0]!r} is not a node type",
                                  hint=f"node types: {', '.join(TYPES)}")
        elif not key.startswith("@") and key not in PROPERTIES:
            raise ConfigError(f"roles/{role}.yaml: frame: {key!r} is not a property",
                              hint="properties are the vocabulary's (docs/vocabulary.md)")
        if isinstance(value, Mapping):
            _check_words(value, role)


def around_query(graph: str, terms: list[str], types: list[str],
                 limit: int = AROUND_LIMIT) -> str:
    """The CONSTRUCT of the nodes of ``types`` in ``graph`` whose text or source names one of
    ``terms`` (values quoted by ``sparql_literal``), with the type, name and status of what
    each was derived from."""
    match = " || ".join(f"CONTAINS(LCASE(?text), {sparql_literal(t)}) || "
                        f"CONTAINS(LCASE(STR(COALESCE(?source, \"\"))), {sparql_literal(t)})"
                        for t in terms)
    return (_PREFIX + "PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>\n"
            + _AROUND.format(graph=sparql_iri(graph), match=match, limit=int(limit),
                             types=", ".join(f"gl:{t}" for t in types)))


def to_jsonld(triples: list[Triple]) -> list[dict[str, Any]]:
    """Triples as expanded JSON-LD node objects (what pyld frames)."""
    nodes: dict[str, dict[str, Any]] = {}
    for t in triples:
        node = nodes.setdefault(t.subject.iri, {"@id": t.subject.iri})
        if t.predicate.iri == _RDF_TYPE and isinstance(t.object, Ref):
            node.setdefault("@type", []).append(t.object.iri)
            continue
        node.setdefault(t.predicate.iri, []).append(_term(t.object))
    return list(nodes.values())


def _term(value: object) -> dict[str, Any]:
    if isinstance(value, Ref):
        return {"@id": value.iri}
    if isinstance(value, TypedLiteral):
        return {"@value": value.value, "@type": value.datatype} if value.datatype else {
            "@value": value.value}
    if isinstance(value, bool):
        return {"@value": value}
    if isinstance(value, int):
        return {"@value": value, "@type": _XSD + "integer"}
    if isinstance(value, float):
        return {"@value": value}
    return {"@value": str(value), "@type": _XSD + "string"}


def frame_nodes(nodes: list[dict[str, Any]], frame: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``nodes`` (expanded JSON-LD) shaped by ``frame`` with pyld; never loads a document."""
    from pyld import jsonld  # 0.1 s to import: only when a briefing has facts to shape

    framed = jsonld.frame(nodes, dict(frame), options={"documentLoader": _refuse,
                                                        "omitGraph": False})
    found = framed.get("@graph", [])
    return [n for n in found if isinstance(n, dict)]


def _refuse(url: str, options: Mapping[str, Any] | None = None) -> Any:
    from pyld import jsonld

    raise jsonld.JsonLdError("a briefing never loads a remote document",
                             "jsonld.LoadDocumentError", {"url": url},
                             code="loading document failed")


def render_framed(nodes: list[dict[str, Any]], terms: list[str], budget_tokens: int,
                  count: Callable[[str], int]) -> tuple[str, frozenset[str]]:
    """One short line per framed node — its text, then where it comes from and the IRI its
    full source reads back from — those naming the most focus terms first, within the
    budget."""
    ranked: list[tuple[int, str, str]] = []
    for node in nodes:
        text = " ".join(str(_first(node.get("text")) or "").split())
        if not text:
            continue
        origin = _origin(node)
        line = f"- {text}" + (f" ({origin})" if origin else "")
        low = f"{text} {_first(node.get('source')) or ''}".lower()
        ranked.append((-sum(t in low for t in terms), str(node.get("@id")), line))
    return _within(((iri, line) for _rank, iri, line in sorted(ranked)), budget_tokens, count,
                   fill=True)


def _within(lines: Iterable[tuple[str, str]], budget_tokens: int,
            count: Callable[[str], int], *, fill: bool) -> tuple[str, frozenset[str]]:
    """``lines`` (the IRI each shows, its text) in order while their tokens, one more each for
    the line end, fit ``budget_tokens``: the first that does not fit ends the text, or with
    ``fill`` is passed over for later ones that do. Returns the text and the IRIs it shows."""
    out: list[str] = []
    used: set[str] = set()
    total = 0
    for iri, line in lines:
        cost = count(line) + 1
        if total + cost > budget_tokens:
            if fill:
                continue
            break
        out.append(line)
        used.add(iri)
        total += cost
    return "\n".join(out), frozenset(used)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _origin(node: Mapping[str, Any]) -> str:
    """``read_file notes.md, <result IRI>#L7`` for a fact read from a result; the error's or
    note's own IRI otherwise; a result that failed says so."""
    source = _first(node.get("source"))
    parent = _first(node.get("derivedFrom"))
    parent_iri = parent.get("@id") if isinstance(parent, Mapping) else parent
    start, end = _first(node.get("lineStart")), _first(node.get("lineEnd"))
    where = str(node.get("@id"))
    if isinstance(parent_iri, str) and isinstance(start, int):
        where = f"{parent_iri}#L{start}" + (f"-{end}" if isinstance(end, int) and end != start
                                           else "")
    failed = isinstance(parent, Mapping) and _first(parent.get("status")) == "error"
    parts = [str(source)] if source else []
    return ", ".join([*parts, where]) + (" — from a failed call" if failed else "")


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

    def around(self, role: str, graph: str, focus: str, budget_tokens: int) -> str:
        """The facts of the job graph ``graph`` around ``focus`` (a task's text), shaped by
        ``role``'s frame and rendered within ``budget_tokens``; "" when the role has no frame,
        the focus names nothing or nothing matches. Cached like ``briefing``.

        Raises:
            ConfigError: the role's frame names a word outside the vocabulary.
            GlidingError: the board could not be read.
        """
        frame = frame_of(role)
        terms = focus_terms(focus)
        if frame is None or not terms or budget_tokens <= 0:
            return ""
        key = (f"{role}{_AROUND_KEY}{focus}", graph, budget_tokens)
        with self._lock:
            view = self.views.get(key)
            if view is not None:
                self.hits += 1
                return view.text
            self.misses += 1
        kinds = frame.get("@type")
        types = list(kinds) if isinstance(kinds, list) else [str(kinds)] if kinds else ["Fact"]
        triples = self.board.construct(around_query(graph, terms, types))
        nodes = frame_nodes(to_jsonld(triples), frame) if triples else []
        text, used = render_framed(nodes, terms, budget_tokens, self.count)
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
            stale = [k for k, v in self.views.items() if iri in v.used or (
                node_type is not None and _shows(k, iri, node_type))]
            for k in stale:
                del self.views[k]
        return len(stale)


def _shows(key: tuple[str, str, int], iri: str, node_type: str) -> bool:
    """Whether a new node ``iri`` of ``node_type`` may belong in the view of ``key``: a
    frame's type for a board view; a fact, error or result of its job for a view around a
    focus."""
    role, graph, _ = key
    if _AROUND_KEY in role:
        return node_type in AROUND_TYPES and iri.startswith(graph + "/")
    return f"gl:{node_type}" in frame_types(role)


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
    return _within(((iri, _plain_line(iri, nodes[iri])) for iri in sorted(nodes)),
                   budget_tokens, count, fill=False)


def _plain_line(iri: str, props: Mapping[str, list[str]]) -> str:
    kind = props.get("type", ["?"])[0].rsplit("#", 1)[-1]
    body = "; ".join(f"{k}={' | '.join(v)[:200]}" for k, v in sorted(props.items())
                     if k not in ("type", "partOf"))
    return f"{kind} <{iri}>: {body}"
