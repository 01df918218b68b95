"""Knowledge memory: the blackboard (L2) joined to hybrid recall, so what any agent wrote comes
back on demand — by words, by meaning, and through the graph.

``KnowledgeMemory`` reads a ``Blackboard`` and listens to a job's node store
(``board/nodes.JobNodeStore.listen(memory.observe)``): every node written there — through
the coherence directory or the pass-through, the one write path of ingestion — is also
remembered as a recall item when its type carries content worth recalling
(``RECALLED_TYPES``), so nothing is indexed that is not in the graph. Items are embedded in
batches: observed nodes are buffered and ``flush`` (called before every recall, and whenever
``batch_size`` items are waiting) embeds them at once. Bigger batches embed faster (texts of
a length are padded together): LoCoMo dev through the whole ingestion path, bf16, 256 items a
batch ~240 turns/s where 64 gave ~170.

Recall (``recall(query, budget)``) is ``HybridRecall`` (``recall.py``) with the graph wired in:
its entity step asks the blackboard, with one SPARQL query, which other items share a rare
entity or person (``gl:mentions``, mentioned by at most ``rare_df`` items) with the best hits
— expansion — and items both found by words or meaning *and* related in the graph rise the most
— confirmation. Sessions, positions, speakers and dates of items come from the nodes
(``partOf``, ``position``, ``role``, ``createdAt``/``sessionDate``), so the time and neighbour
steps work on anything ingested.

``search`` (agents' ``kg_search``) ranks nodes with the same hybrid scores and returns them with
their IRIs; ``query`` (agents' ``knowledge_query``) is the blackboard's read-only SPARQL.

A node put again with changed text keeps its first indexed text until the process restarts
(``load`` indexes the current state); the blackboard and L0 always have the new revision.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from itertools import islice
from typing import Any, Concatenate, ParamSpec, TypeVar

import structlog

from gliding.core.dates import parse_date
from gliding.core.records import parse_json_output, result_lines
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.memory.board.blackboard import (
    DEFAULT_TIMEOUT_S,
    Blackboard,
    Ref,
    Value,
    sparql_iri,
    sparql_literal,
)
from gliding.memory.board.vocabulary import NS
from gliding.memory.recall.access_log import AccessLog
from gliding.memory.recall.hybrid import Count, HybridRecall, MemoryItem, Packed, RecallSettings
from gliding.memory.recall.lexical import BM25Index
from gliding.memory.recall.packing import group_header, pack_grouped
from gliding.memory.recall.vectors import (
    Embedder,
    Precision,
    VectorIndex,
    VectorStoreError,
    load_embedder,
)
from gliding.tools.readback import MEMORY_READS

__all__ = ["Count", "Embedder", "Hit", "KnowledgeError", "KnowledgeMemory", "MemoryItem",
           "Packed", "Precision", "RecallSettings", "VectorIndex", "VectorStoreError",
           "load_embedder"]

log = structlog.get_logger("gliding.memory")

SCAN_CHARS = 512 * 1024  # of one result, what answer lines are looked for in
RECALLED_TYPES = frozenset({"Turn", "Fact", "Step", "ToolResult", "Error", "CheckReport",
                            "Decision", "Job", "Artifact"})
TEXT_KEYS = ("text", "summary", "name", "path")
_PREFIX = f"PREFIX gl: <{NS}>\n"
_RELATED = _PREFIX + """SELECT ?other (COUNT(DISTINCT ?e) AS ?shared) WHERE {{
  {{ SELECT ?e WHERE {{
      VALUES ?hit {{ {hits} }}
      ?hit gl:mentions ?e . ?t gl:mentions ?e .
    }} GROUP BY ?e HAVING (COUNT(DISTINCT ?t) > 1 && COUNT(DISTINCT ?t) <= {rare}) }}
  ?other gl:mentions ?e .
  {exclude}
}} GROUP BY ?other"""
_LOADED = ("text", "summary", "name", "path", "role", "partOf", "position", "createdAt",
           "sessionDate", "importance", "source", "lineStart", "lineEnd")
_LOAD = _PREFIX + """SELECT ?s ?type ?p ?o WHERE {{ GRAPH {graph} {{ ?s a ?type . ?s ?p ?o .
  FILTER(?type IN ({types}) && ?p IN ({keys})) }} }}"""
_GRAPHS = "SELECT DISTINCT ?g WHERE { GRAPH ?g { ?s ?p ?o } }"


P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[Concatenate[KnowledgeMemory, P], R]
            ) -> Callable[Concatenate[KnowledgeMemory, P], R]:
    """Run ``method`` holding the memory's lock (ingestion and tool threads share it)."""
    @functools.wraps(method)
    def wrapper(self: KnowledgeMemory, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


@dataclass(frozen=True)
class Hit:
    """One node a search found: its IRI, type, graph (its job), score and words."""

    iri: str
    type: str
    graph: str
    score: float
    text: str


class KnowledgeError(GlidingError):
    """Long-term memory could not index or embed (the embedder or the vector store failed)."""

    code = "knowledge.failed"


class KnowledgeMemory:
    """Blackboard + recall index over the nodes written through ``self.board``.

    ``embedder`` None: lexical and graph recall only, unless ``embedder_factory`` gives one on
    the first recall (``ready``). ``vector_index``: another vector backend (e.g. Qdrant)
    instead of the exact in-process index; ``vector_index_factory(dim)`` makes one when the
    lazily loaded embedder arrives (None from it: the exact index). ``graph`` restricts graph
    expansion to one named graph (a conversation's or a job's); None: the hit's own graph.
    ``sources`` reads a tool result's archived text by its IRI (L0): with it, every line of
    every result seen is indexed too (``_LineIndex``), and a recall merges the best lines with
    the ranked items: the answer-bearing lines of a source, not only its first line.
    """

    def __init__(self, board: Blackboard, count: Count, *, embedder: Embedder | None = None,
                 embedder_factory: Callable[[], Embedder | None] | None = None,
                 vector_index: VectorIndex | None = None,
                 vector_index_factory: Callable[[int], VectorIndex | None] | None = None,
                 settings: RecallSettings | None = None, batch_size: int = 256,
                 graph: str | None = None, access_log: AccessLog | None = None,
                 sources: Sources | None = None) -> None:
        self.board = board
        self.access_log = access_log  # where recall's use counts persist (None: in memory)
        self.graph = graph
        self.batch_size = batch_size
        self.index = HybridRecall(count=count, embedder=embedder,
                                  settings=settings or RecallSettings(),
                                  vector_index=vector_index, related=self.related,
                                  grouped=True)
        self._pending: list[MemoryItem] = []
        self._lock = threading.RLock()  # ingestion (event loop) and tools (worker threads)
        self._factory = embedder_factory if embedder is None else None
        self._index_factory = vector_index_factory
        self._seen: set[str] = set()
        self._sessions: dict[str, int] = {}
        self._sources = sources
        self._unread: list[tuple[str, str]] = []  # results whose lines are not indexed yet
        self._line_index = _LineIndex()
        self._graph_of: dict[str, str] = {}
        self._type_of: dict[str, str] = {}
        self._order = 0

    def __len__(self) -> int:
        return len(self.index) + len(self._pending)

    def close(self) -> None:
        """Release the embedding cache, a vector server's client and the access log (the
        blackboard is the caller's); what is waiting stays unindexed, the blackboard has it
        all."""
        with self._lock:
            if self.access_log is not None:
                self.access_log.close()
            for part in (self.index.embedder, self.index.vectors):
                closer = getattr(part, "close", None)
                if callable(closer):
                    closer()

    # ---- ingest ---------------------------------------------------------------------------
    def observe(self, node: Mapping[str, Any], graph: str) -> None:
        """Remember ``node`` (already written to ``graph``) as a recall item if it has content."""
        iri, kind = str(node.get("@id")), str(node.get("@type"))
        if kind not in RECALLED_TYPES or iri in self._seen:
            return
        item = self._item(node)
        if item is None:
            return
        with self._lock:
            self._seen.add(iri)
            self._graph_of[iri] = graph
            self._type_of[iri] = kind
            if kind == "ToolResult" and self._sources is not None and str(
                    node.get("name")) not in MEMORY_READS:
                self._unread.append((iri, str(node.get("source") or node.get("name") or "")))
            self._pending.append(item)
            if len(self._pending) < self.batch_size:
                return
            try:
                self.flush()
            except KnowledgeError as exc:  # the items stay waiting; the write itself is done
                log.warning("knowledge.index.failed", error=exc.message,
                            waiting=len(self._pending))

    def flush(self) -> int:
        """Index every waiting item, embedding them in one batch; returns how many.

        Raises:
            KnowledgeError: embedding or the vector backend failed; the items stay waiting
                and the next flush tries them again.
        """
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return 0
            try:
                self.index.add(pending)
            except Exception as exc:  # an embedder or vector-store failure of any kind
                self._pending[:0] = pending
                raise KnowledgeError(f"could not index {len(pending)} memory items: "
                                     f"{type(exc).__name__}: {exc}") from exc
            return len(pending)

    @_locked
    def load(self, graphs: Iterable[str] | None = None, *, max_nodes: int = 20_000) -> int:
        """Index what the blackboard already holds — the nodes of earlier jobs, so a new job
        can recall them — graph by graph (every graph, newest job first, or ``graphs``) until
        ``max_nodes`` nodes are read; returns how many items were added."""
        types = ", ".join(f"gl:{t}" for t in sorted(RECALLED_TYPES))
        keys = ", ".join(f"gl:{k}" for k in _LOADED)
        page = int(getattr(self.board, "max_limit", 1000))  # the store caps every LIMIT
        nodes: dict[tuple[str, str], dict[str, Any]] = {}
        for graph in (list(graphs) if graphs is not None else self._graphs(page)):
            found: dict[tuple[str, str], dict[str, Any]] = {}
            offset = 0
            while True:
                rows = self.board.query(
                    _LOAD.format(graph=sparql_iri(graph), types=types, keys=keys)
                    + f" ORDER BY ?s ?p LIMIT {page} OFFSET {offset}", timeout_s=60.0,
                    isolated=False)
                offset += len(rows)
                self._collect(graph, rows, found)
                if len(rows) < page:
                    break
            nodes.update(list(found.items())[: max(max_nodes - len(nodes), 0)])
            if len(nodes) >= max_nodes:
                break
        # in the order they were written: job, session (by date, then name), position — the
        # neighbour step relies on it
        before = len(self)
        for (graph, _iri), node in sorted(nodes.items(), key=_written_order):
            self.observe(node, graph)
        self.flush()
        return len(self) - before

    def _graphs(self, page: int) -> list[str]:
        """Every named graph of the store, newest job first (job ids start with the time)."""
        out: list[str] = []
        while True:
            rows = self.board.query(_GRAPHS + f" ORDER BY DESC(?g) LIMIT {page} OFFSET {len(out)}",
                                    timeout_s=60.0, isolated=False)
            out += [g.iri for row in rows if isinstance(g := row.get("g"), Ref)]
            if len(rows) < page:
                return out

    @staticmethod
    def _collect(graph: str, rows: list[dict[str, Value]],
                 nodes: dict[tuple[str, str], dict[str, Any]]) -> None:
        for row in rows:
            subject, kind, p = row.get("s"), row.get("type"), row.get("p")
            if not (isinstance(subject, Ref) and isinstance(kind, Ref) and isinstance(p, Ref)):
                continue
            node = nodes.setdefault((graph, subject.iri), {
                "@id": subject.iri, "@type": kind.iri.rsplit("#", 1)[-1]})
            value = row.get("o")
            node[p.iri.rsplit("#", 1)[-1]] = value.iri if isinstance(value, Ref) else value

    def _item(self, node: Mapping[str, Any]) -> MemoryItem | None:
        texts = [str(node[k]) for k in TEXT_KEYS if isinstance(node.get(k), str) and node[k]]
        if node.get("@type") == "Turn" and "text" in node:
            texts = [str(node["text"])]  # a turn's name is its id, not content
        shown = str(node.get("source") or "")
        if node.get("@type") == "ToolResult" and shown:
            texts, shown = [shown, *texts], ""  # the result is found by its source too
        text = ""
        for part in dict.fromkeys(texts):  # a tool's name is usually in its summary already
            if part not in text:
                text = f"{text} | {part}" if text else part
        if not text.strip():
            return None
        iri = str(node["@id"])
        parent = str(node.get("partOf") or "")
        session = self._sessions.setdefault(parent, len(self._sessions))
        self._order += 1
        position = node.get("position")
        # a conversation turn shows its own id (D3:7); a fact read from a result the lines it
        # reads back from (<result IRI>#L12-14); anything else its full IRI, which the
        # read-back tools take from any job
        label = str(node["name"]) if node.get("@type") == "Turn" and node.get("name") else iri
        start, end = node.get("lineStart"), node.get("lineEnd")
        if isinstance(start, int) and parent:
            label = f"{parent}#L{start}" + (f"-{end}" if isinstance(end, int) and end != start
                                            else "")
        return MemoryItem(
            id=iri, text=text, session=session, date=_node_date(node),
            speaker=str(node.get("role") or ""), source=shown,
            position=int(position) if isinstance(position, int) else self._order,
            importance=(float(node["importance"]) if isinstance(node.get("importance"),
                                                                int | float) else None),
            label=label)

    # ---- recall ---------------------------------------------------------------------------
    def ready(self) -> None:
        """Before a recall: load the embedder if one is to be loaded lazily (the first recall
        pays for it, jobs that never recall do not), and index what is waiting."""
        with self._lock:
            if self._factory is not None:
                factory, self._factory = self._factory, None
                embedder = factory()
                if embedder is not None:
                    try:
                        shared = (self._index_factory(embedder.dim)
                                  if self._index_factory is not None else None)
                        self.index.attach_embedder(embedder, shared)
                    except Exception as exc:  # noqa: BLE001 - recall goes on by words and graph
                        log.warning("vectors.attach.failed",
                                    error=f"{type(exc).__name__}: {exc}",
                                    using="lexical and graph recall")
            self.flush()
            self._index_lines()

    def _index_lines(self) -> None:
        """Index the lines of the results observed since the last recall (read from L0)."""
        unread, self._unread = self._unread, []
        if self._sources is None:
            return
        for result, label in unread:
            try:
                text = self._sources(result)
            except GlidingError as exc:
                log.debug("recall.source.unreadable", iri=result[:200], error=exc.message)
                text = None
            self._line_index.add(result, label, _numbered(text or ""))

    @_locked
    def recall(self, query: str, budget: int, *, now: float | None = None,
               touch: bool = False) -> Packed:
        """The hybrid context for ``query`` within ``budget`` tokens (cl100k by default).
        ``touch`` records that the returned items were used at ``now`` (seconds; default the
        wall clock), so items agents keep needing rank a little higher, decaying over time."""
        self.ready()
        when = time.time() if now is None and touch else now
        rows = self.index.rank(self.index.scores(query, now=when))
        candidates = (self._merged(query, rows) if len(self._line_index)
                      else (self.index.candidate(row) for row in rows))
        packed = pack_grouped(candidates, budget, self.index.count)
        if touch and when is not None:
            self.index.touch(packed.ids, when)
            if self.access_log is not None:
                try:
                    self.access_log.record(packed.ids, when)
                except GlidingError as exc:  # a ranking hint: the recall still answers
                    log.warning("recall.access.unrecorded", error=exc.message)
        return packed

    def _merged(self, query: str, rows: list[int]
                ) -> Iterator[tuple[str, str, tuple[int, int], str]]:
        """The ranked items and the best lines of every result seen (BM25 over lines), in
        one order: each scaled by its own best score, a line by ``LINE_WEIGHT``."""
        index = self.index
        scores = index.scores(query) if rows else None
        top = float(scores[rows[0]]) if scores is not None and rows else 0.0
        lines = self._line_index.best(query, LINE_CANDIDATES)
        best_line = lines[0][0] if lines else 0.0
        queue: list[tuple[float, int, Any]] = []
        for n, row in enumerate(rows):
            value = float(scores[row]) / top if scores is not None and top > 0 else 0.0
            queue.append((-value, n, row))
        for n, (score, result, number, label, text) in enumerate(lines):
            queue.append((-LINE_WEIGHT * score / best_line, len(rows) + n,
                          (result, number, label, text)))
        queue.sort(key=lambda q: (q[0], q[1]))
        said: set[tuple[str, str]] = set()  # the lines given so far, as facts or as lines
        for _score, _n, what in queue:
            if isinstance(what, int):
                item = index.items[what]
                key = (item.label.partition("#")[0], _gist(item.text))
                if "#L" in item.label and key in said:
                    continue
                said.add(key)
                yield index.candidate(what)
                continue
            result, number, label, text = what
            tag = f"{result}#L{number}"
            # a JSON result's records share their line (and a fact of one names the lines the
            # whole JSON spans): the result and the text tell them apart
            key = (result, _gist(text))
            if key in said:
                continue
            said.add(key)
            at = index._row.get(result)
            group = (index.items[at].session, index.items[at].position) if at is not None \
                else (0, 0)
            header = group_header(index.items[at]) if at is not None else ""
            yield tag, (f"[{tag}] {label}: {text}" if label else f"[{tag}] {text}"), group, \
                header

    @_locked
    def restore_access(self) -> int:
        """Take up the use counts the access log kept (a restarted daemon ranks as the one
        before did); returns how many items had some. Call it after ``load``."""
        if self.access_log is None:
            return 0
        self.flush()
        return self.index.restore_access(self.access_log.load())

    @_locked
    def brief(self, query: str, budget: int, *, exclude_graphs: Iterable[str] = (),
              min_shared_terms: int = 2) -> Packed:
        """What long-term memory holds about ``query`` for a prompt, unasked: hybrid recall
        over items outside ``exclude_graphs`` (e.g. the running job) that share at least
        ``min_shared_terms`` terms with the query, within ``budget`` tokens. It never loads
        the embedding model (it uses it once a recall has)."""
        self.flush()
        if not self.index.items or budget <= 0:
            return Packed("", (), 0)
        excluded = set(exclude_graphs)
        wanted = set(self.index.lexical.terms(query))
        scores = self.index.scores(query)
        rows = [row for row in self.index.rank(scores)
                if self._graph_of.get(self.index.items[row].id) not in excluded
                and len(wanted & set(self.index.lexical.terms(self.index.items[row].text)))
                >= min_shared_terms]
        return self.index.pack_rows(rows, budget)

    def related(self, hits: Sequence[str], query: str) -> dict[str, float]:
        """Items sharing a rare entity or person with ``hits`` (graph expansion): item IRI →
        how many such entities it shares. The query's own names are left out (words already
        find them)."""
        rare = self.index.settings.rare_df
        values = " ".join(sparql_iri(h) for h in hits)
        named = [name.lower() for name in re.findall(r"\b[A-Z][a-zA-Z]+", query)]
        exclude = ""
        if named:
            names = ", ".join(sparql_literal(n) for n in dict.fromkeys(named))
            exclude = ("FILTER NOT EXISTS { ?e gl:name ?n . "
                       f"FILTER(LCASE(STR(?n)) IN ({names})) }}")
        sparql = _RELATED.format(hits=values, rare=int(rare), exclude=exclude)
        graph = self.graph or (self._graph_of.get(hits[0]) if hits else None)
        rows = self.board.query(sparql, graph=graph, timeout_s=DEFAULT_TIMEOUT_S, isolated=False)
        out: dict[str, float] = {}
        for row in rows:
            other, shared = row.get("other"), row.get("shared")
            if isinstance(other, Ref) and isinstance(shared, int | float):
                out[other.iri] = float(shared)
        return out

    @_locked
    def search(self, text: str, *, k: int = 10) -> list[Hit]:
        """The ``k`` recalled nodes that best match ``text`` (hybrid scores), best first, as the
        ``Hit`` values (what kg_search, ``gliding memory search`` and MCP show)."""
        self.ready()
        scores = self.index.scores(text)
        out = []
        for row in self.index.rank(scores)[:k]:
            item = self.index.items[row]
            text = " ".join(item.text.split())
            if item.label and item.label != item.id:  # a fact: where it reads back from
                text = f"{item.speaker} at {item.label}: {text}" if item.speaker else text
            out.append(Hit(item.id, self._type_of.get(item.id, "?"),
                           self._graph_of.get(item.id, ""), round(float(scores[row]), 4),
                           text[:300]))
        return out

    def query(self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              graph: str | None = None) -> list[dict[str, Value]]:
        """Read-only SPARQL over the blackboard (validated, LIMIT added or capped), isolated:
        stopped at ``timeout_s`` and within the store's memory bound for one query."""
        return self.board.query(sparql, timeout_s=timeout_s, graph=graph)


Sources = Callable[[str], "str | None"]
"""A tool result's IRI -> its archived text (None: it cannot be read)."""
LINES_INDEXED = 200_000  # lines of results a process indexes for recall, at most
LINE_CANDIDATES = 200  # best lines a recall merges with the ranked items
LINE_WEIGHT = 1.5  # a result's best line against the best item (bench research: 1.5 and 3 tie)
LINE_CHARS = 300  # an answer line as a recall shows it
SCAN_LINES = 5000  # lines of one result indexed
GIST_CHARS = 80  # of a line, to tell a fact from the line it repeats


class _LineIndex:
    """BM25 over every line of the results recall has seen, up to ``LINES_INDEXED`` lines."""

    def __init__(self) -> None:
        self.index = BM25Index()
        self.where: list[tuple[str, int, str, str]] = []  # (result, line, label, text)
        self.full = False

    def __len__(self) -> int:
        return len(self.where)

    def add(self, result: str, label: str, lines: list[tuple[int, str]]) -> None:
        room = LINES_INDEXED - len(self.where)
        if room <= 0:
            if not self.full:
                log.info("recall.lines.full", lines=len(self.where))
                self.full = True
            return
        lines = lines[:room]
        start = len(self.where)
        context = f"{label}: " if label else ""  # a line is found by its source too
        self.index.add([str(start + n) for n in range(len(lines))],
                       [context + t for _, t in lines])
        self.where += [(result, number, label, text) for number, text in lines]

    def best(self, query: str, k: int) -> list[tuple[float, str, int, str, str]]:
        return [(score, *self.where[int(doc)]) for doc, score in self.index.search(query, k)]


def _numbered(text: str) -> list[tuple[int, str]]:
    """The first ``SCAN_LINES`` lines of a result as ``result_lines`` numbers them (an output
    over ``SCAN_CHARS`` is not parsed as JSON), blank ones left out, each collapsed and cut to
    ``LINE_CHARS``."""
    parsed = parse_json_output(text) if len(text) <= SCAN_CHARS else None
    lines = islice(result_lines(text, parsed, cut=LINE_CHARS * 4), SCAN_LINES)
    return [(number, line) for number, raw in lines if (line := one_line(raw, LINE_CHARS))]


def _gist(text: str) -> str:
    """What tells a line apart from the others of its result: its first words."""
    return " ".join(text.split())[:GIST_CHARS]


def _natural(text: str) -> tuple[Any, ...]:
    """``session/10`` after ``session/9``: digit runs compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _written_order(entry: tuple[tuple[str, str], dict[str, Any]]) -> tuple[Any, ...]:
    (graph, iri), node = entry
    position = node.get("position")
    return (graph, str(node.get("createdAt") or ""), _natural(str(node.get("partOf") or "")),
            position if isinstance(position, int) else 0, _natural(iri))


def _node_date(node: Mapping[str, Any]) -> date | None:
    created = node.get("createdAt")
    if isinstance(created, str):
        try:
            return datetime.fromisoformat(created).date()
        except ValueError:
            pass
    when = node.get("sessionDate")
    if isinstance(when, str):
        return parse_date(when)
    return None

