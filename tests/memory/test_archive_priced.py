"""The ledger records whether each call's cost is known (``calls.priced``, schema version 2),
and an archive written before that (version 1) opens with its calls read as priced."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gliding.memory.archive.records import CallRecord
from gliding.memory.archive.schema import SCHEMA_VERSION
from gliding.memory.archive.store import Archive, archive_path

JOB = "20260101-000000-abcdef"

V1_CALLS = """
CREATE TABLE calls (
    id INTEGER PRIMARY KEY, job TEXT NOT NULL, role TEXT NOT NULL, turn INTEGER NOT NULL,
    model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL, latency_s REAL NOT NULL, cost_usd REAL NOT NULL,
    created_at REAL NOT NULL, turn_iri TEXT)
"""


def test_an_unpriced_call_reads_back_unpriced(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        archive.record_call(CallRecord(job=JOB, role="DA", turn=1, model="openai/x",
                                       prompt_tokens=10, priced=False))
        archive.record_call(CallRecord(job=JOB, role="DA", turn=2, model="openai/y",
                                       cost_usd=0.01))
    with Archive.open(tmp_path, JOB, create=False) as archive:
        assert [(c.model, c.priced, c.cost_usd) for c in archive.calls()] == [
            ("openai/x", False, 0.0), ("openai/y", True, 0.01)]


def test_a_version_1_archive_is_migrated_and_its_calls_count_as_priced(tmp_path: Path) -> None:
    path = archive_path(tmp_path, JOB)
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute(V1_CALLS)
    conn.execute("INSERT INTO calls VALUES (NULL, ?, 'PA', 1, 'gpt-x', 5, 1, 0, 0.5, 0.002, "
                 "1.0, NULL)", (JOB,))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    with Archive.open(tmp_path, JOB, create=False) as archive:
        old = archive.calls()
        archive.record_call(CallRecord(job=JOB, role="DA", turn=1, model="openai/x",
                                       priced=False))
        calls = archive.calls()
    assert [(c.model, c.priced, c.cost_usd) for c in old] == [("gpt-x", True, 0.002)]
    assert [c.priced for c in calls] == [True, False]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()
