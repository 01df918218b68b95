"""The supervisor's journal in a job's L0 archive: one entry per transition.

Entries are ``gliding://job/<job>/journal/<n>`` (kind ``journal``, JSON of the supervisor's
state), numbered from 1 and never overwritten; each keeps its cause and the workspace's
fingerprint in its meta. ``last_entry`` is where a resumed job starts. The journal is
written on a worker thread and is durable when ``record`` returns (the archive's guarantee).

Each entry's meta carries ``version``, the format of its state (``JOURNAL_VERSION``):

    1  the supervisor's state as ``SupervisorState.model_dump_json`` writes it. Entries written
       before the version was recorded have none and are version 1; fields added to the state
       since have defaults, so such an entry is read as it is.

A newer entry than this code knows is refused, never guessed at. A future version that changes
the meaning of a field lifts older entries on read (entries are never rewritten).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from gliding.core.crashpoints import crash_point
from gliding.core.iri import record_iri
from gliding.errors import ArchiveError
from gliding.memory.archive.store import Archive

JOURNAL_VERSION = 1


class _Serialisable(Protocol):
    def model_dump_json(self) -> str: ...


@dataclass(frozen=True)
class JournalEntry:
    n: int
    state: dict[str, Any]
    cause: str
    workspace: str  # fingerprint when it was written ("" if unknown)


class ArchiveJournal:
    """``scheduler.runner.Journal`` over a job's archive."""

    def __init__(self, archive: Archive, *, after: int,
                 fingerprint: Callable[[], str] | None = None) -> None:
        """A journal whose next entry is ``after + 1`` (``last_entry(archive).n`` of a resumed
        job, 0 for a new one)."""
        self.archive = archive
        self.fingerprint = fingerprint
        self.n = after

    async def record(self, state: _Serialisable, cause: str) -> None:
        """Append ``state`` as the next entry, durably.

        Raises:
            ArchiveError: the entry cannot be written.
        """
        self.n += 1
        n = self.n

        def write() -> None:
            crash_point("journal.append")
            meta = {"cause": cause, "workspace": self.fingerprint() if self.fingerprint else "",
                    "version": JOURNAL_VERSION}
            self.archive.put(record_iri(self.archive.job, "journal", str(n)),
                             state.model_dump_json(), kind="journal",
                             media_type="application/json", meta=meta)

        await anyio.to_thread.run_sync(write)


def last_entry(archive: Archive) -> JournalEntry | None:
    """The newest journal entry of ``archive`` (None: the job never journaled).

    Raises:
        ArchiveError: the archive cannot be read, the entry is damaged, or its version is newer
            than ``JOURNAL_VERSION``.
    """
    entries = archive.list(kind="journal")
    if not entries:
        return None
    newest = max(entries, key=lambda e: int(e.iri.rsplit("/", 1)[-1]))
    item = archive.get(newest.iri)
    version = item.meta.get("version", 1)
    if type(version) is not int or version < 1:
        raise ArchiveError(f"journal entry {newest.iri} in {archive.path} is damaged: its "
                           f"version is {version!r}")
    if version > JOURNAL_VERSION:
        raise ArchiveError(f"journal entry {newest.iri} in {archive.path} has version "
                           f"{version}; this Gliding reads journal versions up to "
                           f"{JOURNAL_VERSION}",
                           hint="upgrade Gliding to resume this job")
    return JournalEntry(int(newest.iri.rsplit("/", 1)[-1]), json.loads(item.text()),
                        str(item.meta.get("cause", "")), str(item.meta.get("workspace", "")))
