"""L0 archive: one crash-safe SQLite database per job that holds every archived byte by IRI.

Layout: ``<data_dir>/jobs/<job>/archive.sqlite3`` with three tables:

    entries   append-only items (turns, tool results, records), content-hashed with SHA-256
    calls     the job's LLM ledger: one row per model call with tokens, latency and cost
    job       job metadata (status, goal, started, finished ...) as JSON values

Guarantees:
    * Nothing is ever overwritten. Putting an IRI again with identical bytes is a no-op; with
      different bytes it raises ArchiveError and the stored entry stays as it was.
    * A ``put`` that returned is durable: the database runs in WAL mode with ``synchronous=FULL``
      and every write is one short ``BEGIN IMMEDIATE`` transaction, so a process killed at any
      moment leaves every committed entry readable and nothing half-written.
    * Reads are verified: ``get`` and ``read`` re-hash the content and raise ArchiveError on a
      mismatch; ``verify`` checks the whole file.

One ``Archive`` may be shared by several threads (agents run tools in worker threads): the
connection is opened with ``check_same_thread=False`` and every operation holds a lock. Several
processes may open the same archive; SQLite's locking serialises their writes.

Every sqlite3 and OS error is translated into ArchiveError (``raise ... from``). The tables,
pragmas and schema version live in ``schema.py``; the values ``Archive`` returns
(``ArchivedItem``, ``CallRecord``) and how they are encoded into rows live in ``records.py``.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from gliding.core.crashpoints import crash_point
from gliding.core.iri import IRI, job_iri, parse_iri
from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.records import (
    DEFAULT_MEDIA_TYPE,
    ArchivedItem,
    CallRecord,
    content_problem,
    dump_json,
    encode_content,
    item_from_row,
    load_json,
)
from gliding.memory.archive.schema import CALL_COLUMNS, ENTRY_COLUMNS, prepare

ARCHIVE_FILE = "archive.sqlite3"


def archive_path(data_dir: Path, job: str) -> Path:
    """Where the archive of ``job`` lives under ``data_dir``.

    Raises:
        IRIError: ``job`` is not a valid job id (this also keeps paths inside ``data_dir``).
    """
    return Path(data_dir) / "jobs" / job_iri(job).job / ARCHIVE_FILE


def open_for_iri(data_dir: Path, iri: str) -> tuple[Archive, IRI]:
    """Open the existing archive that holds ``iri``; the caller closes it.

    Raises:
        IRIError: ``iri`` is not a Gliding IRI.
        NotFoundError: the job named by ``iri`` has no archive under ``data_dir``.
        ArchiveError: the archive exists but cannot be opened.
    """
    parsed = parse_iri(iri)
    try:
        archive = Archive.open(data_dir, parsed.job, create=False)
    except NotFoundError as exc:
        raise NotFoundError(
            f"cannot read {iri}: job {parsed.job!r} has no archive under {data_dir}",
            hint=exc.hint,
        ) from exc
    return archive, parsed


class Archive:
    """The L0 archive of one job. Open it with ``Archive.open``; close it (or use ``with``)."""

    def __init__(
        self, conn: sqlite3.Connection, *, path: Path, job: str, now: Callable[[], float]
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._job = job
        self._now = now
        self._lock = threading.RLock()
        self._batching = False

    @classmethod
    def open(
        cls,
        data_dir: Path,
        job: str,
        *,
        create: bool = True,
        now: Callable[[], float] = time.time,
    ) -> Archive:
        """Open (and with ``create`` make) the archive of ``job`` under ``data_dir``.

        Raises:
            IRIError: ``job`` is not a valid job id.
            NotFoundError: ``create`` is False and the job has no archive.
            ArchiveError: the file cannot be created or opened, is not an archive, or was
                written by a newer Gliding.
        """
        path = archive_path(data_dir, job)
        if not create and not path.is_file():
            raise _missing_archive(data_dir, job, path)
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            mode = "rwc" if create else "rw"
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode={mode}",
                uri=True,
                timeout=30.0,
                isolation_level=None,  # autocommit; transactions are explicit BEGIN/COMMIT
                check_same_thread=False,  # shared by worker threads, guarded by self._lock
            )
        except sqlite3.OperationalError as exc:
            if not create and not path.is_file():
                raise _missing_archive(data_dir, job, path) from exc
            raise ArchiveError(f"cannot open archive {path}: {exc}") from exc
        except OSError as exc:
            raise ArchiveError(
                f"cannot create archive directory {path.parent}: {exc}",
                hint="check that the data dir is writable",
            ) from exc
        try:
            prepare(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path=path, job=job, now=now)

    @property
    def job(self) -> str:
        return self._job

    @property
    def path(self) -> Path:
        return self._path

    # -- entries ------------------------------------------------------------------------------

    def put(
        self,
        iri: IRI | str,
        content: bytes | str,
        *,
        kind: str,
        media_type: str = DEFAULT_MEDIA_TYPE,
        meta: dict[str, Any] | None = None,
    ) -> ArchivedItem:
        """Archive ``content`` under ``iri`` (text is stored as UTF-8) and return the entry.

        Writing an IRI that already holds the same bytes is a no-op that returns the stored
        entry (its kind, meta and created_at, not the new ones).

        Raises:
            IRIError: ``iri`` is a string that is not a Gliding IRI.
            ArchiveError: the IRI belongs to another job or names no item; it already holds
                different bytes; the content or meta cannot be encoded; the write failed.
        """
        crash_point("archive.write")
        key = self._key(iri)
        if not kind:
            raise ArchiveError(f"no kind given for {key}", hint="pass kind='turn', 'result', ...")
        data = encode_content(content, key)
        meta_json = dump_json(meta or {}, f"meta of {key}")
        digest = hashlib.sha256(data).hexdigest()
        with self._transaction(f"archive {key}") as conn:
            row = conn.execute(
                f"SELECT {ENTRY_COLUMNS} FROM entries WHERE iri = ?", (key,)
            ).fetchone()
            if row is not None:
                stored = item_from_row(row, None)
                if stored.sha256 == digest and stored.size == len(data):
                    return replace(stored, content=data)
                raise ArchiveError(
                    f"{key} is already archived with different content "
                    f"({stored.size} B, sha256 {stored.sha256[:12]}); entries are never "
                    "overwritten",
                    hint="archive the new content under a new IRI",
                )
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM entries").fetchone()
            created_at = float(self._now())
            conn.execute(
                "INSERT INTO entries (iri, job, kind, seq, created_at, media_type, sha256, size,"
                " content, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, self._job, kind, seq, created_at, media_type, digest, len(data), data,
                 meta_json),
            )
        return ArchivedItem(
            iri=key,
            kind=kind,
            sha256=digest,
            size=len(data),
            created_at=created_at,
            media_type=media_type,
            meta=json.loads(meta_json),
            content=data,
        )

    def get(self, iri: IRI | str) -> ArchivedItem:
        """The entry at ``iri`` with its content, after checking the content against its hash.

        Raises:
            IRIError: ``iri`` is a string that is not a Gliding IRI.
            NotFoundError: the archive holds nothing at ``iri``.
            ArchiveError: the IRI belongs to another job; the entry is corrupt; the read failed.
        """
        key = self._key(iri)
        with self._reading(f"read {key}") as conn:
            row = conn.execute(
                f"SELECT {ENTRY_COLUMNS}, content FROM entries WHERE iri = ?", (key,)
            ).fetchone()
        if row is None:
            raise NotFoundError(
                f"{key} is not in the archive of job {self._job!r} ({self._path})",
                hint="check the IRI; Archive.list() shows what the job holds",
            )
        content = row[7]
        problem = (
            content_problem(row[2], row[3], content)
            if isinstance(content, bytes)
            else f"content is {type(content).__name__}, not bytes"
        )
        if problem:
            raise ArchiveError(
                f"corrupt entry {key}: {problem}",
                hint=f"the file {self._path} was changed outside Gliding; run verify()",
            )
        return item_from_row(row[:7], content)

    def read(self, iri: IRI | str, offset: int = 0, limit: int | None = None) -> bytes:
        """Bytes ``offset`` to ``offset + limit`` of the entry at ``iri`` (to the end if no limit).

        Raises:
            IRIError, NotFoundError, ArchiveError: as ``get``; ArchiveError also for a negative
                offset or limit.
        """
        if offset < 0 or (limit is not None and limit < 0):
            raise ArchiveError(
                f"bad byte range offset={offset} limit={limit} for {iri}",
                hint="offset and limit are byte counts >= 0",
            )
        content = self.get(iri).content
        assert content is not None  # get always returns the content
        end = None if limit is None else offset + limit
        return content[offset:end]

    def list(self, kind: str | None = None) -> list[ArchivedItem]:
        """Every entry (or every entry of ``kind``) in archiving order, without content.

        Raises:
            ArchiveError: the read failed.
        """
        query = f"SELECT {ENTRY_COLUMNS} FROM entries"
        params: tuple[str, ...] = ()
        if kind is not None:
            query += " WHERE kind = ?"
            params = (kind,)
        with self._reading("list entries") as conn:
            rows = conn.execute(query + " ORDER BY seq", params).fetchall()
        return [item_from_row(row, None) for row in rows]

    # -- LLM ledger ---------------------------------------------------------------------------

    def record_call(self, record: CallRecord) -> CallRecord:
        """Append one LLM call to the ledger; returns it with ``id`` (and ``created_at``) set.

        Raises:
            ArchiveError: the record belongs to another job, or the write failed.
        """
        if record.job != self._job:
            raise ArchiveError(
                f"call record of job {record.job!r} sent to the archive of job {self._job!r}"
            )
        created_at = float(self._now()) if record.created_at is None else record.created_at
        with self._transaction("record an LLM call") as conn:
            cursor = conn.execute(
                f"INSERT INTO calls ({CALL_COLUMNS})"
                " VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.job, record.role, record.turn, record.model, record.prompt_tokens,
                 record.completion_tokens, record.cached_tokens, record.latency_s,
                 record.cost_usd, created_at, record.turn_iri, int(record.priced)),
            )
        return replace(record, id=cursor.lastrowid, created_at=created_at)

    def calls(self) -> builtins.list[CallRecord]:
        """The ledger in recording order.

        Raises:
            ArchiveError: the read failed.
        """
        with self._reading("read the LLM ledger") as conn:
            rows = conn.execute(f"SELECT {CALL_COLUMNS} FROM calls ORDER BY id").fetchall()
        return [
            CallRecord(
                id=r[0], job=r[1], role=r[2], turn=r[3], model=r[4], prompt_tokens=r[5],
                completion_tokens=r[6], cached_tokens=r[7], latency_s=r[8], cost_usd=r[9],
                created_at=r[10], turn_iri=r[11], priced=bool(r[12]),
            )
            for r in rows
        ]

    # -- job metadata -------------------------------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        """Set job metadata ``key`` (status, goal, started, finished ...) to a JSON value.

        Raises:
            ArchiveError: ``value`` is not JSON-serialisable, or the write failed.
        """
        text = dump_json(value, f"job metadata {key!r}")
        with self._transaction(f"set job metadata {key!r}") as conn:
            conn.execute(
                "INSERT INTO job (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, text),
            )

    def get_meta(self, key: str, default: Any = None) -> Any:
        """The JSON value of job metadata ``key``, or ``default`` when it was never set.

        Raises:
            ArchiveError: the stored value is not JSON, or the read failed.
        """
        with self._reading(f"read job metadata {key!r}") as conn:
            row = conn.execute("SELECT value FROM job WHERE key = ?", (key,)).fetchone()
        if row is None:
            return default
        return load_json(row[0], f"job metadata {key!r}")

    # -- health -------------------------------------------------------------------------------

    def verify(self) -> builtins.list[str]:
        """Check the whole archive: SQLite's integrity check, then every entry re-hashed.

        Returns one line per problem; an empty list means the archive is healthy. A database
        too damaged to read is reported as a problem, not raised.

        Raises:
            ArchiveError: the archive is closed.
        """
        problems: list[str] = []
        with self._lock:
            conn = self._require_open()
            try:
                checks = [row[0] for row in conn.execute("PRAGMA integrity_check")]
                if checks != ["ok"]:
                    problems.extend(f"integrity_check: {line}" for line in checks)
                rows = conn.execute(
                    "SELECT iri, job, sha256, size, content, meta FROM entries ORDER BY seq"
                )
                for iri, job, digest, size, content, meta in rows:
                    problems.extend(self._entry_problems(iri, job, digest, size, content, meta))
            except sqlite3.Error as exc:
                problems.append(f"database unreadable: {exc}")
        return problems

    def _entry_problems(
        self, iri: str, job: str, digest: str, size: int, content: Any, meta: str
    ) -> builtins.list[str]:
        found: builtins.list[str] = []
        if not isinstance(content, bytes):
            return [f"corrupt entry {iri}: content is {type(content).__name__}, not bytes"]
        problem = content_problem(digest, size, content)
        if problem:
            found.append(f"corrupt entry {iri}: {problem}")
        if job != self._job:
            found.append(f"entry {iri} is marked as job {job!r}, not {self._job!r}")
        try:
            if parse_iri(iri).job != self._job:
                found.append(f"entry {iri} names another job")
        except IRIError as exc:  # reported, not raised: verify describes bad data
            found.append(f"entry {iri!r} has a bad IRI: {exc}")
        try:
            json.loads(meta)
        except (TypeError, ValueError):
            found.append(f"entry {iri} has meta that is not JSON")
        return found

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the archive; closing twice is harmless.

        Raises:
            ArchiveError: SQLite failed to close the file.
        """
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise ArchiveError(f"cannot close archive {self._path}: {exc}") from exc

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"<Archive job={self._job!r} path={str(self._path)!r} {state}>"

    # -- internals ----------------------------------------------------------------------------

    def _key(self, iri: IRI | str) -> str:
        parsed = parse_iri(iri) if isinstance(iri, str) else iri
        if parsed.job != self._job:
            raise ArchiveError(
                f"{parsed} belongs to job {parsed.job!r}, not to this archive of job "
                f"{self._job!r}",
                hint="open the archive of that job (open_for_iri does it from the IRI)",
            )
        if parsed.kind is None:
            raise ArchiveError(
                f"{parsed} names the job itself, not an archived item",
                hint="use an item IRI such as gliding://job/<job>/result/<call>",
            )
        return str(parsed)

    def _require_open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ArchiveError(
                f"the archive of job {self._job!r} is closed", hint="open it again"
            )
        return self._conn

    @contextmanager
    def batch(self) -> Iterator[Archive]:
        """Group the writes of this block into one transaction (one fsync instead of one per
        put): every put inside is durable once the block ends, and none is if it raises or the
        process dies inside it. Other threads' writes wait for the block. Nested blocks join
        the outer one.

        Raises:
            ArchiveError: the transaction could not be started or committed.
        """
        with self._lock:
            if self._batching:
                yield self
                return
            with self._transaction("write a batch") as _conn:
                self._batching = True
                try:
                    yield self
                finally:
                    self._batching = False

    @contextmanager
    def _transaction(self, what: str) -> Iterator[sqlite3.Connection]:
        """One short write transaction; rolled back on any error; sqlite3 errors translated.
        Inside ``batch`` it is part of the batch's transaction."""
        with self._lock:
            conn = self._require_open()
            if self._batching:
                try:
                    yield conn
                except sqlite3.Error as exc:
                    raise ArchiveError(f"could not {what} in {self._path}: {exc}") from exc
                return
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise ArchiveError(
                    f"could not {what} in {self._path}: {exc}",
                    hint="check free disk space and that no other program holds the file",
                ) from exc

    @contextmanager
    def _reading(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._require_open()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise ArchiveError(f"could not {what} from {self._path}: {exc}") from exc


def _missing_archive(data_dir: Path, job: str, path: Path) -> NotFoundError:
    return NotFoundError(
        f"job {job!r} ({job_iri(job)}) has no archive under data dir {data_dir} "
        f"(looked for {path})",
        hint="check the job id and the data dir (--data-dir / GLIDING_DATA_DIR)",
    )
