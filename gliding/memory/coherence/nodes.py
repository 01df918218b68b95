"""The ``NodeStore`` of a job's blackboard graph: what the job's coherence directory writes.

A line is a blackboard node, its value the node's canonical JSON-LD (``vocabulary.to_jsonld``),
its version the node's L0 revision number, so the layout is the one ingestion has always used
(``ingest.revision_iri``; ``ingest.latest_revisions`` and a resumed job read it unchanged):

    save(iri, v, text)   archive revision v of the node in L0 (the exact bytes), then put the node
                         on the board; an existing revision with the same bytes is a no-op, so a
                         retried save is harmless
    load(iri)            the newest revision in L0 and its bytes: what the last acknowledged
                         write wrote, even if the board put after it never happened (the next
                         save puts the node again)

An index line (``ingest.index_iri``: ``<graph>/index/<Type>``) lists the members of one node
type (those ``partOf`` something), as JSON. It is derived data: ``save`` writes nothing (each
member was saved before the ingestor wrote the index) and ``load`` asks the board, giving the
number of members as the version. Versions of an index line are therefore only ordered within
one directory's life (after a restart they start again from the member count); nothing
compares them across restarts: views compare the member lists.
"""

from __future__ import annotations

import json
import threading

from gliding.errors import NotFoundError
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard
from gliding.memory.board.vocabulary import VocabularyError, from_jsonld
from gliding.memory.ingest.ingestor import index_members, latest_revisions, revision_iri


class JobNodeStore:
    """Versioned nodes of job ``job``: revisions in its archive, current state on the board."""

    def __init__(self, board: Blackboard, archive: Archive, job: str) -> None:
        self.board, self.archive, self.job = board, archive, job
        self.graph = f"gliding://job/{job}"
        self._index_prefix = f"{self.graph}/index/"
        self._latest: dict[str, int] | None = None  # node IRI -> newest revision in L0
        self._lock = threading.Lock()

    def load(self, iri: str) -> tuple[int, str | None]:
        """Raises: ArchiveError, BlackboardError: the archive or the board could not be read."""
        if iri.startswith(self._index_prefix):
            members = index_members(self.board, self.graph, iri[len(self._index_prefix):])
            return len(members), json.dumps(members)
        with self._lock:
            revision = self._revisions().get(iri, 0)
        if revision == 0:
            return 0, None
        try:
            return revision, self.archive.get(revision_iri(self.job, iri, revision)).text()
        except NotFoundError:
            return 0, None

    def save(self, iri: str, version: int, value: str | None) -> None:
        """Raises: VocabularyError: ``value`` is not a node with this IRI (or is None);
        ArchiveError, BlackboardError: it could not be written."""
        if iri.startswith(self._index_prefix):
            return
        node = from_jsonld(value if value is not None else "null")
        if node["@id"] != iri:
            raise VocabularyError(f"the node written to {iri} has @id {node['@id']!r}")
        self.archive.put(revision_iri(self.job, iri, version), value or "", kind="node",
                         media_type="application/ld+json", meta={"node": iri})
        with self._lock:
            latest = self._revisions()
            latest[iri] = max(version, latest.get(iri, 0))
        self.board.put(node, graph=self.graph)

    def _revisions(self) -> dict[str, int]:
        if self._latest is None:
            self._latest = {node: r for node, (r, _) in latest_revisions(self.archive).items()}
        return self._latest
