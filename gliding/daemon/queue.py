"""The daemon's state in a data directory: its job queue, its token and its address file.

    <data_dir>/daemon/queue.sqlite3   every job submitted to the daemon (``JobQueue``)
    <data_dir>/daemon/events/<job>.jsonl  a job's events, one JSON object a line
                                      (``append_events``, ``read_events``, ``events_end``)
    <data_dir>/daemon.token           the API's bearer token (mode 0600, kept across restarts)
    <data_dir>/daemon.json            where a running daemon listens (pid, url, socket, started)

A job's state moves along ``TRANSITIONS``::

    queued ──► running ──► finished (outcome)        queued ──► cancelled
                 │  ├────► interrupted (error) ──► queued   (resumed on request)
                 │  └────► [cancelling ──►] cancelled ──► queued   (resumed on request)
                 └── the daemon died or stopped: queued again at its next start, ahead of
                     the jobs that never ran (``runs`` > 0: it is resumed, not started over)

The queue is SQLite in WAL mode with ``synchronous=FULL``: each change is one short
transaction, durable once the call returns, so after ``kill -9`` (or a power cut) every job
that was queued or running is found again, in the state of its last committed change. The
methods block (disk I/O): the daemon calls them on worker threads (``anyio.to_thread``); one
lock serialises them. Times are seconds since the epoch, given by the caller.

A queue file SQLite cannot read (garbage, cut short, "file is not a database", "database disk
image is malformed", a database without the queue's table) is refused as ``QueueDamaged``;
the daemon then rebuilds the queue from the jobs' archives (``reconcile.open_queue``).

The queue's format version is SQLite's ``user_version`` (``QUEUE_VERSION``):

    1  the jobs table. Queues made before the version was kept (``user_version`` 0) have
       the same table.
    2  its ``state`` may be ``paused`` too (``gliding interrupt``). A queue of version 0 or 1
       is rebuilt into the table below, in one transaction, and stamped 2 when opened (a
       CHECK constraint cannot be altered in place).

A queue of a newer version is refused with a plain ``ArchiveError``, not ``QueueDamaged``: it
is not rebuilt (that would drop what the newer version keeps), the daemon does not start.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gliding.errors import ArchiveError, JobStateError, NotFoundError

QUEUE_FILE = Path("daemon") / "queue.sqlite3"
QUEUE_VERSION = 2
EVENTS_DIR = Path("daemon") / "events"
TOKEN_FILE = "daemon.token"
INFO_FILE = "daemon.json"

QUEUED, RUNNING, CANCELLING, CANCELLED = "queued", "running", "cancelling", "cancelled"
FINISHED, INTERRUPTED, PAUSED = "finished", "interrupted", "paused"
STATES = (QUEUED, RUNNING, CANCELLING, CANCELLED, FINISHED, INTERRUPTED, PAUSED)
ENDED = (CANCELLED, FINISHED, INTERRUPTED, PAUSED)
"""States no daemon leaves on its own (only a resume request queues the job again)."""
TERMINAL = ("job.finished", "job.cancelled", "job.stopped", "job.paused")
"""The events after which a job's stream ends (the job got its outcome, was cancelled, paused,
or stopped on an error); the daemon's streams and its clients both stop on them."""

TRANSITIONS: dict[str, tuple[str, ...]] = {
    QUEUED: (RUNNING, CANCELLED),
    RUNNING: (FINISHED, INTERRUPTED, CANCELLING, CANCELLED, QUEUED, PAUSED),
    CANCELLING: (CANCELLED, FINISHED, INTERRUPTED, QUEUED),
    INTERRUPTED: (QUEUED, CANCELLED),
    PAUSED: (QUEUED, CANCELLED),
    CANCELLED: (QUEUED,),
    FINISHED: (),
}
"""The states each state may move to; any other change is refused (``JobStateError``)."""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS jobs (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,   -- submission order
    job        TEXT NOT NULL UNIQUE,
    name       TEXT NOT NULL,                       -- the task file's name, for messages
    task       TEXT NOT NULL,                       -- the task file's text
    base_dir   TEXT NOT NULL,                       -- where its relative workspace is
    workspace  TEXT NOT NULL,                       -- resolved when it was submitted
    goal       TEXT NOT NULL,
    model      TEXT,                                -- NULL: the task's or the settings'
    state      TEXT NOT NULL CHECK (state IN ({", ".join(repr(s) for s in STATES)})),
    outcome    TEXT,
    error      TEXT,
    submitted  REAL NOT NULL,
    started    REAL,                                -- its first run
    finished   REAL,
    runs       INTEGER NOT NULL DEFAULT 0           -- how often the daemon started it
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, seq);
"""
_COLUMNS = ("job, name, task, base_dir, workspace, goal, model, state, outcome, error, "
            "submitted, started, finished, runs, seq")
_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
"""SQLite's (primary) result codes for a file that is not a database, or a damaged one."""


class QueueDamaged(ArchiveError):
    """The queue file is not a queue SQLite can read: garbage, cut short, malformed."""

    code = "queue.damaged"


@dataclass(frozen=True)
class QueuedJob:
    """One job as the queue holds it."""

    job: str
    name: str
    task: str
    base_dir: str
    workspace: str
    goal: str
    model: str | None
    state: str
    outcome: str | None
    error: str | None
    submitted: float
    started: float | None
    finished: float | None
    runs: int
    seq: int


class JobQueue:
    """The jobs of one daemon; ``JobQueue.open(data_dir)``, ``close()`` when done.

    Every method raises ArchiveError when the database cannot be read or written.
    """

    def __init__(self, path: Path) -> None:
        """Open (or create) the queue at ``path`` and check it (SQLite's ``quick_check``:
        milliseconds for thousands of jobs).

        Raises:
            QueueDamaged: the file is not a queue SQLite can read. ArchiveError: it cannot be
                opened (permissions, locked, I/O error), or its version is newer than
                ``QUEUE_VERSION``.
        """
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            empty = path.is_file() and path.stat().st_size == 0
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                       timeout=10.0)
        except (OSError, sqlite3.Error) as exc:
            raise ArchiveError(f"cannot open the job queue {path}: {exc}",
                               hint="check that the data dir is writable") from exc
        try:
            if empty:  # a queue is never empty once made: it was cut short
                raise QueueDamaged(f"the job queue {path} is damaged or not a queue: "
                                   "the file is empty")
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version > QUEUE_VERSION:
                raise ArchiveError(f"the job queue {path} has version {version}; this Gliding "
                                   f"reads queue versions up to {QUEUE_VERSION}",
                                   hint="upgrade Gliding to run this data dir's daemon")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            if version < 2 and self._db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
                    ).fetchone():
                try:
                    _rebuild(self._db)
                except sqlite3.Error as exc:  # a table without the columns it should have
                    raise QueueDamaged(f"the job queue {path} is damaged or not a queue: it "
                                       f"cannot be upgraded: {exc}",
                                       hint="move it away; the jobs' archives keep their "
                                            "data") from exc
            self._db.executescript(_SCHEMA)
            _check(self._db, path)
            if version < QUEUE_VERSION:
                self._db.execute(f"PRAGMA user_version = {QUEUE_VERSION}")
        except sqlite3.Error as exc:
            self._db.close()
            damaged = isinstance(exc, sqlite3.DatabaseError) and (
                getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED)
            raise (QueueDamaged if damaged else ArchiveError)(
                f"the job queue {path} is damaged or not a queue: {exc}",
                hint="move it away; the jobs' archives keep their data") from exc
        except ArchiveError:  # QueueDamaged, or a newer version
            self._db.close()
            raise

    @classmethod
    def open(cls, data_dir: Path) -> JobQueue:
        return cls(data_dir / QUEUE_FILE)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db, self._lock, f"the job queue cannot {what}")

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[QueuedJob]:
        with self._lock:
            try:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs {sql}", args).fetchall()
            except sqlite3.Error as exc:
                raise ArchiveError(f"the job queue cannot be read: {exc}") from exc
        return [QueuedJob(*row) for row in rows]

    # -- reading ------------------------------------------------------------------------------

    def get(self, job: str) -> QueuedJob | None:
        found = self._rows("WHERE job = ?", (job,))
        return found[0] if found else None

    def newest(self, limit: int, offset: int = 0) -> list[QueuedJob]:
        """Newest first."""
        return self._rows("ORDER BY seq DESC LIMIT ? OFFSET ?", (limit, offset))

    def count(self) -> int:
        with self._lock:
            try:
                return int(self._db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
            except sqlite3.Error as exc:
                raise ArchiveError(f"the job queue cannot be read: {exc}") from exc

    def pending(self) -> list[QueuedJob]:
        """The queued jobs in the order they should start: those that ran before (to resume)
        first, then by submission."""
        return self._rows("WHERE state = ? ORDER BY runs > 0 DESC, seq", (QUEUED,))

    def in_state(self, *states: str) -> list[QueuedJob]:
        marks = ", ".join("?" * len(states))
        return self._rows(f"WHERE state IN ({marks}) ORDER BY seq", tuple(states))

    # -- changing -----------------------------------------------------------------------------

    def add(self, job: str, *, name: str, task: str, base_dir: str, workspace: str, goal: str,
            model: str | None, now: float) -> QueuedJob:
        """Queue a new job.

        Raises:
            JobStateError: the id is taken (the caller draws another).
        """
        try:
            with self._transaction("queue the job") as db:
                db.execute("INSERT INTO jobs (job, name, task, base_dir, workspace, goal, model,"
                           " state, submitted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (job, name, task, base_dir, workspace, goal, model, QUEUED, now))
        except ArchiveError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise JobStateError(f"job id {job} is taken") from exc
            raise
        added = self.get(job)
        assert added is not None
        return added

    def move(self, job: str, to: str, *, now: float | None = None, outcome: str | None = None,
             error: str | None = None, allowed: tuple[str, ...] | None = None) -> QueuedJob:
        """Move ``job`` to state ``to`` in one transaction, if ``TRANSITIONS`` (and ``allowed``,
        the states the caller expects it in) let it. ``running`` counts a run (and sets
        ``started`` the first time); an ended state sets ``finished`` (``now``), ``outcome``
        and ``error``; ``queued`` clears them.

        Raises:
            NotFoundError: no such job. JobStateError: its state does not allow it.
        """
        with self._transaction(f"move job {job} to {to}") as db:
            row = db.execute("SELECT state FROM jobs WHERE job = ?", (job,)).fetchone()
            if row is None:
                raise NotFoundError(f"no job {job} in the daemon's queue")
            state = row[0]
            if to not in TRANSITIONS[state] or (allowed is not None and state not in allowed):
                raise JobStateError(f"job {job} is {state}: it cannot be made {to}",
                                    hint=_hint(state))
            if to == RUNNING:
                db.execute("UPDATE jobs SET state = ?, runs = runs + 1, "
                           "started = COALESCE(started, ?) WHERE job = ?", (to, now, job))
            elif to == QUEUED:
                db.execute("UPDATE jobs SET state = ?, outcome = NULL, error = NULL, "
                           "finished = NULL WHERE job = ?", (to, job))
            elif to in ENDED:
                db.execute("UPDATE jobs SET state = ?, outcome = ?, error = ?, finished = ? "
                           "WHERE job = ?", (to, outcome, error, now, job))
            else:
                db.execute("UPDATE jobs SET state = ? WHERE job = ?", (to, job))
        moved = self.get(job)
        assert moved is not None
        return moved

    def restore(self, entries: Iterable[QueuedJob]) -> int:
        """Insert whole entries as they were (a rebuilt queue), in their order, in one
        transaction; their ``seq`` is given anew. How many were inserted.

        Raises:
            ArchiveError: one cannot be inserted (an id taken, a state not in STATES).
        """
        fields = _COLUMNS.rsplit(", ", 1)[0]  # all but seq
        marks = ", ".join("?" * len(fields.split(", ")))
        rows = [(e.job, e.name, e.task, e.base_dir, e.workspace, e.goal, e.model, e.state,
                 e.outcome, e.error, e.submitted, e.started, e.finished, e.runs)
                for e in entries]
        with self._transaction("take the rebuilt entries") as db:
            db.executemany(f"INSERT INTO jobs ({fields}) VALUES ({marks})", rows)
        return len(rows)


def _check(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a queue whose pages SQLite finds damaged, or whose table lacks a column.

    Raises:
        QueueDamaged: it is. sqlite3.Error: it cannot be read.
    """
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise QueueDamaged(f"the job queue {path} is damaged or not a queue: "
                           f"{'; '.join(problems[:3])}",
                           hint="move it away; the jobs' archives keep their data")
    have = {str(row[1]) for row in db.execute("PRAGMA table_info(jobs)")}
    missing = [c for c in _COLUMNS.split(", ") if c not in have]
    if missing:
        raise QueueDamaged(f"the job queue {path} is damaged or not a queue: its jobs table "
                           f"has no {', '.join(missing)}",
                           hint="move it away; the jobs' archives keep their data")


@contextlib.contextmanager
def immediate(db: sqlite3.Connection, lock: threading.Lock, failing: str
              ) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on ``db`` under ``lock``, rolled back on any
    exception; a SQLite error comes out as ArchiveError("<failing>: <error>") (the daemon's
    queue and schedules files both write this way)."""
    with lock:
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise ArchiveError(f"{failing}: {exc}") from exc


def _rebuild(db: sqlite3.Connection) -> None:
    """The jobs table of a version 0 or 1 queue moved into the current table (whose CHECK
    admits every state of ``STATES``), in one transaction: a crash leaves the old table."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("ALTER TABLE jobs RENAME TO jobs_v1")
        db.execute("DROP INDEX IF EXISTS jobs_state")
        for statement in _SCHEMA.split(";"):  # not executescript: it would commit first
            if statement.strip():
                db.execute(statement)
        db.execute(f"INSERT INTO jobs ({_COLUMNS}) SELECT {_COLUMNS} FROM jobs_v1")
        db.execute("DROP TABLE jobs_v1")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _hint(state: str) -> str:
    return {
        FINISHED: "it has its outcome; submit the task again to run it again",
        CANCELLED: "resume it to run it on",
        INTERRUPTED: "resume it to run it on",
        QUEUED: "it waits for a free slot",
        RUNNING: "wait for it, or cancel it",
        CANCELLING: "it stops at its next safe point",
        PAUSED: "a steer or resume runs it on",
    }[state]


# -- the token and the address file ------------------------------------------------------------

def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def ensure_token(data_dir: Path) -> str:
    """The daemon's bearer token: made on the first start (``secrets.token_urlsafe(32)``, a
    file of mode 0600 that only its owner may read), read back on later ones.

    Raises:
        ArchiveError: the file cannot be made or read, or others may read it.
    """
    path = token_path(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_token(data_dir, strict=True)
    except OSError as exc:
        raise ArchiveError(f"cannot create {path}: {exc.strerror or exc}") from exc
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return token


def read_token(data_dir: Path, *, strict: bool = False) -> str:
    """The token a daemon of ``data_dir`` made. ``strict`` (the daemon): refuse a file that
    is a link, not the user's, or that others may read.

    Raises:
        ArchiveError: it is missing, unreadable, empty, or (strict) not private.
    """
    path = token_path(data_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="ascii") as handle:
            st = os.fstat(handle.fileno())
            token = handle.read(1024).strip()
    except OSError as exc:
        raise ArchiveError(f"cannot read the daemon's token {path}: {exc.strerror or exc}",
                           hint="start the daemon once (gliding daemon) to make it") from exc
    except UnicodeDecodeError as exc:
        raise ArchiveError(f"the daemon's token {path} is not a token",
                           hint="remove it; the next daemon start makes a new one") from exc
    if strict and (st.st_mode & 0o077 or st.st_uid != os.getuid()):
        raise ArchiveError(f"the daemon's token {path} may be read by others "
                           f"(mode {st.st_mode & 0o777:o})",
                           hint=f"chmod 600 {path}, or remove it for a new one")
    if not token:
        raise ArchiveError(f"the daemon's token {path} is empty",
                           hint="remove it; the next daemon start makes a new one")
    return token


def info_path(data_dir: Path) -> Path:
    return data_dir / INFO_FILE


def write_info(data_dir: Path, info: dict[str, Any]) -> None:
    """Write ``daemon.json`` whole or not at all (a temporary file renamed over it)."""
    path = info_path(data_dir)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        temp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise ArchiveError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_info(data_dir: Path) -> dict[str, Any] | None:
    """What ``daemon.json`` says, or None when it is missing or unreadable. Whether that
    daemon still runs is for the caller to check (``DaemonLock.held_elsewhere``)."""
    try:
        data = json.loads(info_path(data_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_info(data_dir: Path, pid: int) -> None:
    """Remove ``daemon.json`` if it is the one process ``pid`` wrote."""
    found = read_info(data_dir)
    if found is not None and found.get("pid") == pid:
        with contextlib.suppress(OSError):
            info_path(data_dir).unlink()


# -- event files ---------------------------------------------------------------------------------

def append_events(lines: list[tuple[Path, str]]) -> None:
    """Append each JSON line to its file (whole lines, in order; no fsync: an event is news,
    and once written it survives the writer's ``kill -9``).

    Raises:
        OSError: a file cannot be written.
    """
    by_path: dict[Path, list[str]] = {}
    for path, line in lines:
        by_path.setdefault(path, []).append(line + "\n")
    for path, chunk in by_path.items():
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(chunk))


def events_end(path: Path, tail_bytes: int) -> tuple[int, int]:
    """The last event number in the events file ``path`` (its ``seq``; 0: none) and the file's
    size, reading its last ``tail_bytes``; a last line a kill cut short is cut off, so the
    next append starts a whole line."""
    try:
        with path.open("rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - tail_bytes))
            tail = handle.read()
            keep = tail.rfind(b"\n") + 1
            if keep < len(tail):
                size -= len(tail) - keep
                handle.truncate(size)
                tail = tail[:keep]
    except FileNotFoundError:
        return 0, 0
    for line in reversed(tail.splitlines()):
        try:
            return int(json.loads(line)["seq"]), size
        except (ValueError, KeyError, TypeError):
            continue
    return 0, size


def read_events(path: Path, after: int = 0) -> list[dict[str, Any]]:
    """The events of an events file numbered above ``after`` (a line that is not an event is
    skipped)."""
    out = []
    try:
        with path.open("rb") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                    seq = int(record.get("seq", 0))
                except (ValueError, AttributeError, TypeError):
                    continue
                if seq > after:
                    out.append(record)
    except FileNotFoundError:
        return []
    return out
