"""The supervisor's journal in the archive carries its format's version: an entry of this
version or one written before versions were kept (none in its meta) is read; a newer one, or a
version that is no number, is refused with the archive's path and the versions in the message.
The journal contract (``gliding.testing.journal_contract``) holds for it and for the in-memory
journal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from gliding.core.iri import record_iri
from gliding.errors import ArchiveError
from gliding.memory.archive.journal import JOURNAL_VERSION, ArchiveJournal, last_entry
from gliding.memory.archive.store import Archive
from gliding.scheduler.runner import Journal
from gliding.scheduler.supervisor import SupervisorState
from gliding.testing.journal import MemoryJournal
from gliding.testing.journal_contract import JournalContract, Last, MakeJournal

JOB = "20260101-000000-abcdef"


class State(BaseModel):
    waiting: str


def put_entry(archive: Archive, n: int, meta: dict[str, Any]) -> None:
    """An entry as an earlier (or later) Gliding wrote it."""
    archive.put(record_iri(JOB, "journal", str(n)), State(waiting=f"step {n}").model_dump_json(),
                kind="journal", media_type="application/json", meta=meta)


def test_entries_are_written_with_the_version_and_read_back(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        journal = ArchiveJournal(archive, after=0, fingerprint=lambda: "fp")
        anyio.run(journal.record, State(waiting="PA"), "start")
        anyio.run(journal.record, State(waiting="DA"), "plan")
        entry = last_entry(archive)
        meta = archive.get(record_iri(JOB, "journal", "2")).meta
    assert entry is not None
    assert (entry.n, entry.state, entry.cause, entry.workspace) == (2, {"waiting": "DA"}, "plan",
                                                                    "fp")
    assert meta["version"] == JOURNAL_VERSION


def test_an_entry_from_before_versions_is_read_as_version_1(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        put_entry(archive, 1, {"cause": "start", "workspace": ""})
        entry = last_entry(archive)
    assert entry is not None
    assert (entry.n, entry.state, entry.cause) == (1, {"waiting": "step 1"}, "start")


def test_a_newer_entry_is_refused_with_the_file_and_the_versions(tmp_path: Path) -> None:
    newer = JOURNAL_VERSION + 1
    with Archive.open(tmp_path, JOB) as archive:
        put_entry(archive, 1, {"cause": "start", "workspace": "", "version": JOURNAL_VERSION})
        put_entry(archive, 2, {"cause": "plan", "workspace": "", "version": newer})
        with pytest.raises(ArchiveError) as refused:
            last_entry(archive)
        path = archive.path
    assert (f"{record_iri(JOB, 'journal', '2')} in {path} has version {newer}; this Gliding "
            f"reads journal versions up to {JOURNAL_VERSION}") in str(refused.value)
    assert "upgrade Gliding" in str(refused.value)


@pytest.mark.parametrize("version", ["2", 0, 1.5, None])
def test_a_version_that_is_no_count_is_a_damaged_entry(tmp_path: Path, version: Any) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        put_entry(archive, 1, {"cause": "start", "workspace": "", "version": version})
        with pytest.raises(ArchiveError, match="is damaged: its version is"):
            last_entry(archive)


class TestArchiveJournal(JournalContract):
    """The journal in the job's archive, read back as ``gliding resume`` reads it: from the
    archive opened again."""

    @pytest.fixture
    def make_journal(self, tmp_path: Path) -> Iterator[MakeJournal]:
        opened: list[Archive] = []

        def make(after: int) -> tuple[Journal, Last]:
            archive = Archive.open(tmp_path / "data", "j1")
            opened.append(archive)

            def last() -> tuple[int, SupervisorState, str] | None:
                with Archive.open(tmp_path / "data", "j1") as again:
                    entry = last_entry(again)
                if entry is None:
                    return None
                return entry.n, SupervisorState.model_validate(entry.state), entry.cause

            return ArchiveJournal(archive, after=after), last

        yield make
        for archive in opened:
            archive.close()


class TestMemoryJournal(JournalContract):
    @pytest.fixture
    def make_journal(self) -> MakeJournal:
        def make(after: int) -> tuple[Journal, Last]:
            journal = MemoryJournal(after=after)
            return journal, journal.last

        return make
