"""How often, and when last, recall handed each memory item to an agent — kept on disk, so the
use-based boost of ranking (``hybrid.adjust_for_use``: items agents keep needing rank a little
higher, decaying with age) survives a daemon restart instead of starting from nothing.

One SQLite file in the data directory (``<data_dir>/recall_access.sqlite3``), a row per item
IRI: ``(item, count, last)``, ``last`` in seconds since the epoch. Writes are one transaction
per recall; a file that cannot be read is set aside (``.bad``) and started afresh with one
warning: the statistics are a ranking hint, never worth failing a job for.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

import structlog

from gliding.errors import ArchiveError

ACCESS_FILE = "recall_access.sqlite3"
_SCHEMA = ("CREATE TABLE IF NOT EXISTS access ("
           "item TEXT PRIMARY KEY, count INTEGER NOT NULL, last REAL NOT NULL)")

log = structlog.get_logger()


class AccessLog:
    """The access statistics of one data directory's recall index."""

    def __init__(self, path: Path) -> None:
        """Open (or make) the log at ``path``.

        Raises:
            ArchiveError: it cannot be opened or made (a read-only or missing directory).
        """
        self.path = path
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if not path.is_file():
                raise ArchiveError(f"cannot open the recall access log {path}: {exc}") from exc
            bad = path.with_suffix(path.suffix + ".bad")
            log.warning("recall.access.unreadable", path=str(path), error=str(exc),
                        moved_to=str(bad))
            try:
                path.replace(bad)
                self._db = self._open()
            except (OSError, sqlite3.Error) as again:
                raise ArchiveError(
                    f"cannot start the recall access log {path} afresh: {again}") from again

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArchiveError(f"cannot make {self.path.parent}: {exc}") from exc
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=5.0)
        try:
            db.execute(_SCHEMA)
            db.execute("SELECT count(*) FROM access").fetchone()  # a damaged file fails here
            db.commit()
        except sqlite3.Error:
            db.close()
            raise
        return db

    def load(self) -> dict[str, tuple[int, float]]:
        """Every item's ``(count, last)``."""
        with self._lock:
            rows = self._db.execute("SELECT item, count, last FROM access").fetchall()
        return {str(item): (int(count), float(last)) for item, count, last in rows}

    def record(self, items: Iterable[str], now: float) -> None:
        """``items`` were handed to an agent at ``now``: one more use each.

        Raises:
            ArchiveError: the file cannot be written (a full disk, a read-only directory).
        """
        rows = [(item, now) for item in dict.fromkeys(items)]
        if not rows:
            return
        try:
            with self._lock, self._db:
                self._db.executemany(
                    "INSERT INTO access (item, count, last) VALUES (?, 1, ?) "
                    "ON CONFLICT(item) DO UPDATE SET count = count + 1, "
                    "last = max(last, excluded.last)", rows)
        except sqlite3.Error as exc:
            raise ArchiveError(f"cannot record recall use in {self.path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()
