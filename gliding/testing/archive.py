"""An in-memory ``ArchivePort``: the fake for tests of agents without SQLite.

It keeps the port's contract (``tests/memory/test_archive_port.py`` runs the same checks
against it and against ``LocalArchive``): an IRI holding the same bytes again is a no-op,
different bytes raise ArchiveError, a turn and its ledger row are written together, a missing
item is NotFoundError, ``warm`` counts only this job's items (a node IRI is none) not warmed
before. Nothing is durable: it is gone with the object. ``warms`` records every ``warm`` call,
for tests of what an agent prefetched.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gliding.core.iri import parse_iri
from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.records import DEFAULT_MEDIA_TYPE, ArchivedItem, CallRecord


class InMemoryArchive:
    """The archive of job ``job``, in a dict."""

    def __init__(self, job: str) -> None:
        self._job = job
        self.items: dict[str, ArchivedItem] = {}
        self.ledger: list[CallRecord] = []
        self.cached: set[str] = set()  # what ``warm`` loaded
        self.warms: list[tuple[str, ...]] = []
        self._seq = itertools.count(1)

    @property
    def job(self) -> str:
        return self._job

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        self._put(iri, content, kind, media_type, meta)

    def _put(self, iri: str, content: bytes | str, kind: str, media_type: str,
             meta: dict[str, Any] | None) -> None:
        if parse_iri(iri).job != self._job:
            raise ArchiveError(f"{iri} is not an IRI of job {self._job}")
        data = content.encode() if isinstance(content, str) else bytes(content)
        digest = hashlib.sha256(data).hexdigest()
        stored = self.items.get(iri)
        if stored is not None:
            if stored.sha256 == digest:
                return
            raise ArchiveError(f"{iri} is already archived with different content",
                               hint="archive the new content under a new IRI")
        self.items[iri] = ArchivedItem(iri, kind, digest, len(data), float(next(self._seq)),
                                       media_type, json.loads(json.dumps(meta or {})), data)

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        if call.job != self._job:
            raise ArchiveError(f"call record of job {call.job!r} sent to job {self._job!r}")
        held = self.items.get(iri)
        if held is not None and held.content == body.encode("utf-8"):
            return  # written before, its ledger row with it
        self._put(iri, body, "turn", "application/json", meta)
        self.ledger.append(replace(call, id=len(self.ledger) + 1))

    async def find(self, iri: str) -> ArchivedItem | None:
        return self.items.get(iri)

    async def read_text(self, iri: str) -> str:
        parse_iri(iri)
        item = self.items.get(iri)
        if item is None:
            revisions = [i for i in self.items.values() if i.meta.get("node") == iri]
            if not revisions:
                raise NotFoundError(f"nothing is archived at {iri}")
            item = revisions[-1]
        return (item.content or b"").decode("utf-8", errors="replace")

    async def warm(self, iris: Sequence[str]) -> int:
        self.warms.append(tuple(iris))
        added = 0
        for iri in iris:
            try:
                parsed = parse_iri(iri)
            except IRIError:
                continue
            if parsed.job == self._job and iri in self.items and iri not in self.cached:
                self.cached.add(iri)
                added += 1
        return added

    async def calls(self) -> list[CallRecord]:
        return list(self.ledger)
