"""The archive port agents write L0 through, and its local implementation.

An agent never holds the SQLite archive itself: it writes turns, tool results and intents, and
reads them back, through ``ArchivePort`` (async, so a worker in another process can later do the
same over the bus). ``LocalArchive`` is the in-process implementation: every operation runs on
a worker thread, so an fsync never stalls the event loop.

``read_text`` also reads earlier jobs' archives of the same data directory (what recall and
kg_search point at) and, for a blackboard node's IRI, its latest revision's JSON-LD.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio

from gliding.core.iri import parse_iri
from gliding.errors import NotFoundError
from gliding.memory.archive import (
    DEFAULT_MEDIA_TYPE,
    Archive,
    ArchivedItem,
    CallRecord,
    open_for_iri,
)


class ArchivePort(Protocol):
    """What an agent needs of L0. Every method raises ArchiveError when the store fails."""

    @property
    def job(self) -> str: ...

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        """Archive ``content`` under ``iri`` (a no-op when it holds the same bytes)."""
        ...

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        """Archive one model turn and its ledger row in one transaction."""
        ...

    async def find(self, iri: str) -> ArchivedItem | None:
        """The item at ``iri`` with its content, or None when nothing is archived there."""
        ...

    async def read_text(self, iri: str) -> str:
        """An item of this or an earlier job as text (a node: its latest revision).

        Raises:
            NotFoundError: nothing is archived at ``iri``. IRIError: ``iri`` is malformed.
        """
        ...

    async def calls(self) -> list[CallRecord]:
        """The job's LLM ledger so far."""
        ...


class LocalArchive:
    """``ArchivePort`` over one job's ``Archive`` in this process (operations on threads)."""

    def __init__(self, archive: Archive, data_dir: Path) -> None:
        self.archive = archive
        self.data_dir = data_dir

    @property
    def job(self) -> str:
        return self.archive.job

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        await anyio.to_thread.run_sync(partial(self.archive.put, iri, content, kind=kind,
                                               media_type=media_type, meta=meta))

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        def write() -> None:
            with self.archive.batch():
                self.archive.put(iri, body, kind="turn", media_type="application/json",
                                 meta=meta)
                self.archive.record_call(call)

        await anyio.to_thread.run_sync(write)

    async def find(self, iri: str) -> ArchivedItem | None:
        def get() -> ArchivedItem | None:
            try:
                return self.archive.get(iri)
            except NotFoundError:
                return None

        return await anyio.to_thread.run_sync(get)

    async def read_text(self, iri: str) -> str:
        return await anyio.to_thread.run_sync(self.read_text_sync, iri)

    def read_text_sync(self, iri: str) -> str:
        if parse_iri(iri).job == self.archive.job:
            return read_from(self.archive, iri)
        other, _ = open_for_iri(self.data_dir, iri)
        with other:
            return read_from(other, iri)

    async def calls(self) -> list[CallRecord]:
        return await anyio.to_thread.run_sync(self.archive.calls)


def read_from(archive: Archive, iri: str) -> str:
    """The text at ``iri`` in ``archive``; a node IRI gives its latest revision.

    Raises:
        NotFoundError: nothing of that IRI is archived.
    """
    try:
        item = archive.get(iri)
    except NotFoundError:
        revisions = [e for e in archive.list(kind="node") if e.meta.get("node") == iri]
        if not revisions:
            raise
        item = archive.get(revisions[-1].iri)
    return (item.content or b"").decode("utf-8", errors="replace")
