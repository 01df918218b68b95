"""The daemon's schedules on disk: ``<data_dir>/daemon/schedules.sqlite3``.

SQLite as the job queue (``queue.py``): WAL mode, ``synchronous=FULL``, one short transaction a
change, durable once the call returns, so a schedule added, removed or advanced survives
``kill -9``. A file of its own, not a table in the queue: a damaged queue is rebuilt from the
jobs' archives, and schedules have no other copy to be rebuilt from. A schedules file SQLite
cannot read is refused (the daemon does not start; the hint says to move it away).

The format version is SQLite's ``user_version`` (``STORE_VERSION``): 1, the table below. A
newer one is refused. The methods block: the daemon calls them on worker threads; one lock
serialises them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

from gliding.daemon.queue import immediate
from gliding.daemon.schedule import Schedule, ScheduleExists
from gliding.errors import ArchiveError, NotFoundError

STORE_FILE = Path("daemon") / "schedules.sqlite3"
STORE_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    name       TEXT PRIMARY KEY,
    cron       TEXT NOT NULL,
    tz         TEXT NOT NULL,
    missed     TEXT NOT NULL,
    overlap    TEXT NOT NULL,
    task       TEXT NOT NULL,                       -- the task file's text
    task_name  TEXT NOT NULL,
    base_dir   TEXT NOT NULL,
    model      TEXT,
    created    REAL NOT NULL,
    last_due   REAL NOT NULL,                       -- the last due time acted on
    last_job   TEXT                                 -- the last job it submitted
);
"""
_COLUMNS = ("name, cron, tz, missed, overlap, task, task_name, base_dir, model, created, "
            "last_due, last_job")
_HINT = "move it away (its schedules are lost; add them again) and start the daemon"


class ScheduleStore:
    """The schedules of one daemon; ``ScheduleStore.open(data_dir)``, ``close()`` when done.

    Every method raises ArchiveError when the file cannot be read or written.
    """

    def __init__(self, path: Path) -> None:
        """Open (or create) the store at ``path``.

        Raises:
            ArchiveError: it cannot be opened, is not a schedules file SQLite can read, or its
                version is newer than STORE_VERSION.
        """
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                       timeout=10.0)
        except (OSError, sqlite3.Error) as exc:
            raise ArchiveError(f"cannot open the daemon's schedules {path}: {exc}",
                               hint="check that the data dir is writable") from exc
        try:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version > STORE_VERSION:
                raise ArchiveError(f"the schedules file {path} has version {version}; this "
                                   f"Gliding reads versions up to {STORE_VERSION}",
                                   hint="upgrade Gliding to run this data dir's daemon")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            have = {str(row[1]) for row in self._db.execute("PRAGMA table_info(schedules)")}
            if missing := [c for c in _COLUMNS.split(", ") if c not in have]:
                raise ArchiveError(f"the schedules file {path} is damaged: its table has no "
                                   f"{', '.join(missing)}", hint=_HINT)
            if version < STORE_VERSION:
                self._db.execute(f"PRAGMA user_version = {STORE_VERSION}")
        except sqlite3.Error as exc:
            self._db.close()
            raise ArchiveError(f"the schedules file {path} is damaged or not one: {exc}",
                               hint=_HINT) from exc
        except ArchiveError:
            self._db.close()
            raise

    @classmethod
    def open(cls, data_dir: Path) -> ScheduleStore:
        return cls(data_dir / STORE_FILE)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db, self._lock, f"the daemon's schedules cannot {what}")

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Schedule]:
        with self._lock:
            try:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM schedules {sql}",
                                        args).fetchall()
            except sqlite3.Error as exc:
                raise ArchiveError(f"the daemon's schedules cannot be read: {exc}") from exc
        return [Schedule(*row) for row in rows]

    def all(self) -> list[Schedule]:
        """Every schedule, by name."""
        return self._rows("ORDER BY name")

    def get(self, name: str) -> Schedule | None:
        found = self._rows("WHERE name = ?", (name,))
        return found[0] if found else None

    def add(self, schedule: Schedule) -> None:
        """Keep a new schedule.

        Raises:
            ScheduleExists: one of that name is there.
        """
        marks = ", ".join("?" * len(_COLUMNS.split(", ")))
        try:
            with self._transaction("take the schedule") as db:
                db.execute(f"INSERT INTO schedules ({_COLUMNS}) VALUES ({marks})",
                           tuple(vars(schedule).values()))
        except ArchiveError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ScheduleExists(f"a schedule named {schedule.name} exists",
                                     hint="pick another name, or remove it first "
                                          "(gliding schedule rm NAME)") from exc
            raise

    def remove(self, name: str) -> Schedule:
        """Drop the schedule ``name``; what it was.

        Raises:
            NotFoundError: there is none of that name.
        """
        found = self.get(name)
        with self._transaction("remove the schedule") as db:
            gone = db.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount
        if found is None or not gone:
            raise NotFoundError(f"no schedule named {name[:80]!r}",
                                hint="gliding schedule list shows them")
        return found

    def advance(self, name: str, last_due: float, last_job: str | None = None) -> None:
        """Record that ``name``'s due time ``last_due`` was acted on, and the job it submitted
        (``None`` keeps the one it had). A schedule removed meanwhile is left removed."""
        with self._transaction("record the schedule's run") as db:
            db.execute("UPDATE schedules SET last_due = ?, last_job = COALESCE(?, last_job) "
                       "WHERE name = ?", (last_due, last_job, name))
