"""The on-disk layout of the L0 archive: tables, durability pragmas and the schema version.

``prepare`` is run on every connection ``archive.Archive.open`` makes: it switches the database to
WAL with ``synchronous=FULL`` (a returned commit survives a killed process; with FULL also a power
cut) and creates or checks the tables. A file written by a newer schema is refused, not guessed at.

The schema version is SQLite's ``user_version``; each version, and how an older file is migrated
in place (when it is opened, in the transaction that checks it):

    1  entries (every archived item), calls (the ledger) and job (the job's key-value meta)
    2  calls.priced: 0 when nobody knows what the call cost (cost_usd then holds 0). A version 1
       file gets the column with 1 in every row: version 1 counted every call as priced.

What a journal entry holds has its own version (``journal.JOURNAL_VERSION``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gliding.errors import ArchiveError

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    iri        TEXT PRIMARY KEY,
    job        TEXT NOT NULL,
    kind       TEXT NOT NULL,
    seq        INTEGER NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    media_type TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    content    BLOB NOT NULL,
    meta       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_kind_seq ON entries (kind, seq);
CREATE TABLE IF NOT EXISTS calls (
    id                INTEGER PRIMARY KEY,
    job               TEXT NOT NULL,
    role              TEXT NOT NULL,
    turn              INTEGER NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    latency_s         REAL NOT NULL,
    cost_usd          REAL NOT NULL,
    created_at        REAL NOT NULL,
    turn_iri          TEXT,
    priced            INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS job (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

ENTRY_COLUMNS = "iri, kind, sha256, size, created_at, media_type, meta"
CALL_COLUMNS = (
    "id, job, role, turn, model, prompt_tokens, completion_tokens, cached_tokens, "
    "latency_s, cost_usd, created_at, turn_iri, priced"
)
# what an archive of an older version needs to read as this one (the changelog is above)
MIGRATIONS = {2: "ALTER TABLE calls ADD COLUMN priced INTEGER NOT NULL DEFAULT 1"}


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Set the durability pragmas and create (or check) the schema."""
    try:
        (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        if str(mode).lower() != "wal":
            raise ArchiveError(
                f"archive {path} cannot use write-ahead logging (journal_mode={mode})",
                hint="keep the data dir on a local file system",
            )
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise ArchiveError(
                    f"archive {path} has schema version {version}; this Gliding reads "
                    f"{SCHEMA_VERSION}",
                    hint="upgrade Gliding to read this archive",
                )
            fresh = not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calls'").fetchone()
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            if not fresh:
                for to, statement in sorted(MIGRATIONS.items()):
                    if version < to:
                        conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise ArchiveError(
            f"{path} is not a usable Gliding archive: {exc}",
            hint="the file may be damaged or not an archive; move it aside to start afresh",
        ) from exc
