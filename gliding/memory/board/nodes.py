"""A job's nodes: every revision in L0, the current state on the board, and the one way to
write them.

Ingestion writes a node through a ``BoardWriter``: the job's coherence cache
(``coherence/cache.Cache``) when ``memory.coherence.enabled`` is on, ``DirectWriter`` (a
pass-through) when it is off. Either way the write ends in the job's ``JobNodeStore`` — the
directory's store, or the pass-through's — which archives the revision and puts the node, then
tells its listeners (``listen``): the L3 projector drops the views that used the node, long-term
memory indexes it. That is the only way anything learns that a node was written; a committed
write is also the moment the directory invalidates every other copy of the line.

Layout (the one ingestion has always used; a resumed job reads it unchanged):

    revision v of node N   ``revision_iri(job, N, v)``, kind ``node``, meta ``{"node": N}``,
                           the node's canonical JSON-LD (``vocabulary.to_jsonld``)
    index line of type T   ``index_iri(graph, T)`` = ``<graph>/index/<T>``: the members of one
                           node type (those ``partOf`` something) as a JSON list, derived from
                           the board; saving one writes nothing, loading one asks the board and
                           gives the number of members as the version. Versions of an index
                           line are ordered only within one directory's life; views compare
                           the member lists.

``JobNodeStore`` is blocking (SQLite and Oxigraph), safe across threads; the directory calls it
on worker threads, ``DirectWriter`` moves each call to one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import anyio
import structlog

from gliding.core.iri import hashed_segment, record_iri
from gliding.errors import GlidingError, NotFoundError
from gliding.memory.archive.records import ArchivedItem
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard, sparql_iri
from gliding.memory.board.vocabulary import NS, VocabularyError, from_jsonld

log = structlog.get_logger("gliding.memory")

MAX_SEGMENT_CHARS = 200  # what core.iri.parse_iri (and so the archive) accepts in a segment

INDEXED = frozenset({"Plan", "Step", "Artifact", "CheckReport", "Decision"})
"""The node types whose members (those ``partOf`` something) an index line lists: what the
roles' briefings show (``projection.frame_types``)."""

WriteListener = Callable[[Mapping[str, Any], str], object]
"""Told ``(node, graph)`` once a node is durable in L0 and on the board; must not raise."""


class BoardWriter(Protocol):
    """Where ingestion writes a node: ``iri`` and its canonical JSON-LD in, revision out."""

    async def write(self, iri: str, value: str | None) -> int:
        """Make ``value`` the next revision of ``iri``; returns the revision once durable.

        Raises:
            GlidingError: the write failed or its outcome is unknown (read before relying).
        """
        ...

    async def write_many(self, items: Sequence[tuple[str, str]]) -> list[int]:
        """``write`` each ``(iri, value)`` in order, every one even after one fails; then the
        first failure is raised."""
        ...


def revision_iri(job: str, node_iri: str, revision: int) -> str:
    """The L0 IRI of revision ``revision`` of the node ``node_iri`` of ``job``."""
    rest = node_iri[len(f"gliding://job/{job}"):].strip("/") or "job"
    kind, _, name = rest.partition("/")
    if len(quote(name, safe="")) > MAX_SEGMENT_CHARS:  # L0 IRI segments are bounded
        name = hashed_segment(name)
    return str(record_iri(job, "node", kind, name or "-", str(revision)))


def latest_revisions(archive: Archive) -> dict[str, tuple[int, ArchivedItem]]:
    """Each node with revisions in ``archive``: its newest revision's number and entry
    (listed, without content).

    Raises:
        ArchiveError: the archive cannot be read.
    """
    latest: dict[str, tuple[int, ArchivedItem]] = {}
    for item in archive.list(kind="node"):
        node = item.meta.get("node")
        if not isinstance(node, str):
            continue
        revision = int(item.iri.rsplit("/", 1)[-1])
        if revision >= latest.get(node, (0, item))[0]:
            latest[node] = (revision, item)
    return latest


def index_iri(graph: str, kind: str) -> str:
    """The coherence line listing the members of type ``kind`` in the job graph ``graph``."""
    return f"{graph}/index/{kind}"


def index_members(board: Blackboard, graph: str, kind: str) -> list[str]:
    """The nodes of type ``kind`` with a ``partOf`` in ``graph``, sorted (an index line's value).

    Raises:
        BlackboardError: the board could not be read.
    """
    if kind not in INDEXED:
        raise VocabularyError(f"{kind!r} has no index line")
    rows = board.query(
        f"PREFIX gl: <{NS}>\nSELECT ?s WHERE {{ GRAPH {sparql_iri(graph)} {{ ?s a gl:{kind} . "
        f"?s gl:partOf ?p }} }} ORDER BY ?s", isolated=False)
    return sorted({str(getattr(r["s"], "iri", r["s"])) for r in rows if "s" in r})


class JobNodeStore:
    """Versioned nodes of job ``job``: revisions in its archive, current state on the board
    (the coherence directory's ``NodeStore``)."""

    def __init__(self, board: Blackboard, archive: Archive, job: str) -> None:
        self.board, self.archive, self.job = board, archive, job
        self.graph = f"gliding://job/{job}"
        self._index_prefix = f"{self.graph}/index/"
        self._latest: dict[str, tuple[int, str]] | None = None  # node -> (revision, sha256)
        self._lock = threading.RLock()
        self._listeners: list[WriteListener] = []

    def listen(self, listener: WriteListener) -> None:
        """Tell ``listener`` of every node written from now on (after it is durable)."""
        self._listeners.append(listener)

    def load(self, iri: str) -> tuple[int, str | None]:
        """Raises: ArchiveError, BlackboardError: the archive or the board could not be read."""
        if iri.startswith(self._index_prefix):
            members = index_members(self.board, self.graph, iri[len(self._index_prefix):])
            return len(members), json.dumps(members)
        with self._lock:
            revision = self._revisions().get(iri, (0, ""))[0]
        if revision == 0:
            return 0, None
        try:
            return revision, self.archive.get(revision_iri(self.job, iri, revision)).text()
        except NotFoundError:
            return 0, None

    def save(self, iri: str, version: int, value: str | None) -> None:
        """Archive ``value`` as revision ``version`` (the same bytes again: a no-op), put the
        node on the board, tell the listeners.

        Raises: VocabularyError: ``value`` is not a node with this IRI (or is None);
        ArchiveError, BlackboardError: it could not be written."""
        if iri.startswith(self._index_prefix):
            return
        node = self._node(iri, value)
        text = value or ""
        self._archive(iri, version, text)
        with self._lock:
            latest = self._revisions()
            if version >= latest.get(iri, (0, ""))[0]:
                latest[iri] = (version, hashlib.sha256(text.encode()).hexdigest())
        self._put(node)

    def append(self, iri: str, value: str | None) -> int:
        """``save`` as the next revision, numbered here (``DirectWriter``, no directory): the
        bytes of the newest revision again only put the node on the board again (a board put
        that failed before is mended). An index line is derived: nothing is written and the
        number of members ``value`` lists is returned (what ``load`` would give).

        Raises: as ``save``."""
        return self.append_many([(iri, value)])[0]

    def append_many(self, items: Sequence[tuple[str, str | None]]) -> list[int]:
        """``append`` of each item, the revisions archived in one L0 transaction (all or none)
        before any node goes to the board; every node is put even after one fails, then the
        first failure is raised.

        Raises: as ``save``."""
        revisions: list[int] = []
        puts: list[dict[str, Any]] = []
        with self._lock:
            latest = self._revisions()
            newer: dict[str, tuple[int, str]] = {}  # taken up once the transaction commits
            with self.archive.batch():
                for iri, value in items:
                    if iri.startswith(self._index_prefix):  # derived: its size, no query
                        revisions.append(len(_members(iri, value)))
                        continue
                    node = self._node(iri, value)
                    text = value or ""
                    digest = hashlib.sha256(text.encode()).hexdigest()
                    revision, last = newer.get(iri) or latest.get(iri, (0, ""))
                    if digest != last:
                        revision += 1
                        self._archive(iri, revision, text)
                        newer[iri] = (revision, digest)
                    revisions.append(revision)
                    puts.append(node)
            latest.update(newer)
        failure: GlidingError | None = None
        for put in puts:
            try:
                self._put(put)
            except GlidingError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return revisions

    def mend(self) -> int:
        """Put every node's newest revision on the board again (a resumed job: what an earlier
        run archived may not have got there) and tell the listeners; returns how many. A node
        that fails is logged and skipped.

        Raises:
            ArchiveError: the archive cannot be listed.
        """
        put = 0
        for node_iri, (_n, revision) in latest_revisions(self.archive).items():
            try:
                self._put(from_jsonld(self.archive.get(revision.iri).content or b""))
                put += 1
            except GlidingError as exc:
                log.warning("blackboard.catch_up.failed", job=self.job, iri=node_iri,
                            error=exc.message)
        return put

    def _node(self, iri: str, value: str | None) -> dict[str, Any]:
        node = from_jsonld(value if value is not None else "null")
        if node["@id"] != iri:
            raise VocabularyError(f"the node written to {iri} has @id {node['@id']!r}")
        return node

    def _archive(self, iri: str, revision: int, text: str) -> None:
        self.archive.put(revision_iri(self.job, iri, revision), text, kind="node",
                         media_type="application/ld+json", meta={"node": iri})

    def _put(self, node: Mapping[str, Any]) -> None:
        self.board.put(node, graph=self.graph)
        for listener in self._listeners:
            try:
                listener(node, self.graph)
            except GlidingError as exc:  # the write is done; a listener's trouble is its own
                log.warning("blackboard.listener.failed", job=self.job, iri=str(node["@id"]),
                            error=exc.message)

    def _revisions(self) -> dict[str, tuple[int, str]]:
        if self._latest is None:
            self._latest = {node: (r, item.sha256)
                            for node, (r, item) in latest_revisions(self.archive).items()}
        return self._latest


def _members(iri: str, value: str | None) -> list[str]:
    """The member list an index line's value holds.

    Raises:
        VocabularyError: ``value`` is not a JSON list of IRIs.
    """
    try:
        members = json.loads(value or "[]")
    except ValueError as exc:
        raise VocabularyError(f"the index line {iri} is not JSON: {exc}") from exc
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise VocabularyError(f"the index line {iri} is not a list of IRIs")
    return members


class DirectWriter:
    """The ``BoardWriter`` when coherence is off: straight into the store, on a worker thread."""

    def __init__(self, store: JobNodeStore) -> None:
        self.store = store

    async def write(self, iri: str, value: str | None) -> int:
        return await anyio.to_thread.run_sync(self.store.append, iri, value)

    async def write_many(self, items: Sequence[tuple[str, str]]) -> list[int]:
        return await anyio.to_thread.run_sync(self.store.append_many, items)
