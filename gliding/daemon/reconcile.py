"""The daemon's queue set right from the jobs' archives, and job endings the queue could not take.

The queue (``queue.py``) and each job's archive (``<data_dir>/jobs/<job>/archive.sqlite3``) are
separate files; the archive is what a job is. Three things reconcile them:

``open_queue``  a damaged queue file (``QueueDamaged``: garbage, cut short, "file is not a
                database", "database disk image is malformed") does not keep the daemon from
                starting. A new queue is built beside it (``queue.sqlite3.rebuild``) with one
                entry per archive (``rebuilt_entry``); the damaged file, with its ``-wal`` and
                ``-shm``, is moved aside to ``queue.sqlite3.damaged-<UTC time>`` (never deleted);
                the new queue takes its place. ``Rebuilt`` says when, what was rebuilt and what
                is lost, for the one warning the daemon logs (``daemon.queue.rebuilt``).
``ended_in_archive``  at a start, a queue entry still ``running`` whose archive says the job
                ended (an outcome, or a stop on an error such as a full disk) takes that ending
                instead of being resumed: the queue could not be written when the job ended.
``Unsettled``   while the daemon runs, an ending the queue could not take (the disk is full)
                is kept in memory, shown in place of the queue's ``running``, and written as
                soon as the queue takes writes again.

A rebuilt entry's state comes from its archive: an outcome is ``finished``; a job the daemon
was running (its archive says ``running`` and no process holds its lock, or that the daemon
stopped it) is ``queued`` to resume, as after ``kill -9``; one stopped by an error or a cancel
stays ``interrupted`` or ``cancelled``; one running in another process, or one the daemon never
ran (no events file: ``gliding run`` ran it) and stopped, is ``interrupted`` (resumed on
request only). Whatever rows the damaged file still lets read (read-only, row by row) give
rebuilt entries back their task text, name and times, and name the jobs lost: a job queued
that never started has no archive and cannot be rebuilt. The events files
(``daemon/events/<job>.jsonl``) name such jobs too when the damaged file cannot be read at all.

Everything here blocks (files, SQLite): the daemon calls it on worker threads.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gliding.daemon import queue as q
from gliding.daemon.jobs import (
    CANCELLED_BY,
    FINISHED,
    PAUSED_BY,
    STOPPED,
    SUSPENDED_BY,
    JobLock,
)
from gliding.daemon.queue import JobQueue, QueueDamaged, QueuedJob
from gliding.errors import ArchiveError, GlidingError
from gliding.memory.archive.store import ARCHIVE_FILE, Archive

REBUILD_SUFFIX = ".rebuild"
DAMAGED_SUFFIX = ".damaged-"
SIDECARS = ("", "-wal", "-shm")  # a SQLite file and the files that go with it
LOST_NAMED = 20  # lost jobs named in the warning; the rest are counted

Ending = tuple[str, str | None, str | None]
"""A queue state a job ended in, with its outcome and error."""


@dataclass(frozen=True)
class Rebuilt:
    """What rebuilding a damaged queue did."""

    at: float  # when (seconds since the epoch)
    damaged: Path  # where the damaged file was moved
    why: str  # what was wrong with it
    found: int | None  # entries it seemed to have; None: none could be read
    rebuilt: int  # entries rebuilt from archives
    resumed: int  # of those, jobs queued to resume (they were running)
    lost: tuple[str, ...]  # jobs queued (or starting) with no archive: gone, to submit again
    dropped: int  # jobs that ended before they had an archive: no longer listed

    def fields(self) -> dict[str, Any]:
        """The warning's data: when, what was rebuilt, what is lost."""
        lost = list(self.lost[:LOST_NAMED])
        return {"at": _utc(self.at), "damaged_file": str(self.damaged), "why": self.why,
                "entries_found": "unreadable" if self.found is None else self.found,
                "rebuilt": self.rebuilt, "resumed": self.resumed, "lost": len(self.lost),
                "lost_jobs": lost + ([f"+{len(self.lost) - len(lost)}"]
                                     if len(self.lost) > len(lost) else []),
                "ended_without_archive": self.dropped, "summary": self.summary()}

    def summary(self) -> str:
        found = ("none of its entries could be read" if self.found is None
                 else f"it seemed to hold {self.found} entries")
        lost = (f"{len(self.lost)} queued jobs that never started had no archive and are "
                "lost (submit them again)" if self.lost else "no queued job was lost")
        return (f"the job queue was damaged ({self.why}); {found}. It was moved to "
                f"{self.damaged} and rebuilt from {self.rebuilt} archives ({self.resumed} "
                f"jobs to resume); {lost}")


# -- opening, rebuilding when damaged -------------------------------------------------------------

def open_queue(data_dir: Path, now: float) -> tuple[JobQueue, Rebuilt | None]:
    """The queue of ``data_dir``, rebuilt from the archives when its file is damaged (and
    ``Rebuilt`` then, else None).

    Raises:
        ArchiveError: the queue cannot be opened for another reason (permissions, I/O), or the
            rebuilt one cannot be written.
    """
    path = data_dir / q.QUEUE_FILE
    temp = path.with_name(path.name + REBUILD_SUFFIX)
    if not path.exists() and temp.is_file():  # a rebuild stopped after the move: finish it
        _move(temp, path)
    try:
        return JobQueue(path), None
    except QueueDamaged as exc:
        why = exc.message.split(": ", 1)[-1]
    return rebuild(data_dir, now, why)


def rebuild(data_dir: Path, now: float, why: str) -> tuple[JobQueue, Rebuilt]:
    """Build a new queue from the archives, move the damaged file aside, put the new one in
    its place (in that order: a kill at any point leaves the damaged file or the new queue).

    Raises:
        ArchiveError: the new queue cannot be written or moved into place.
    """
    path = data_dir / q.QUEUE_FILE
    temp = path.with_name(path.name + REBUILD_SUFFIX)
    for suffix in SIDECARS:  # an earlier rebuild's leftovers: ours, made again below
        with contextlib.suppress(FileNotFoundError):
            Path(f"{temp}{suffix}").unlink()
    found, rows = damaged_rows(path)
    known = rows | {job: {"state": None} for job in _evented_jobs(data_dir) if job not in rows}
    archived = sorted(_archived_jobs(data_dir))
    entries = [rebuilt_entry(data_dir, job, rows.get(job), now) for job in archived]
    new = JobQueue(temp)
    try:
        new.restore(entries)
    finally:
        new.close()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    damaged = _free_name(path.with_name(f"{path.name}{DAMAGED_SUFFIX}{stamp}"))
    _move(path, damaged)
    _move(temp, path)
    have = set(archived)
    missing = [job for job in sorted(known) if job not in have]
    lost = tuple(job for job in missing if not _ended(data_dir, job, known[job]["state"]))
    return JobQueue(path), Rebuilt(
        at=now, damaged=damaged, why=why, found=found, rebuilt=len(entries),
        resumed=sum(e.state == q.QUEUED for e in entries), lost=lost,
        dropped=len(missing) - len(lost))


def damaged_rows(path: Path) -> tuple[int | None, dict[str, dict[str, Any]]]:
    """How many entries the damaged queue at ``path`` seems to hold (None: unreadable), and
    what can be read of each, by job id: read-only (SQLite's ``immutable``: nothing is
    written beside it), row by row, up to the first damaged page."""
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None, {}
    count: int | None = None
    rows: dict[str, dict[str, Any]] = {}
    try:
        with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
            count = int(db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
        with contextlib.suppress(sqlite3.Error):
            for job, name, task, base_dir, model, state, submitted, started in db.execute(
                    "SELECT job, name, task, base_dir, model, state, submitted, started "
                    "FROM jobs ORDER BY seq"):
                if isinstance(job, str):
                    rows[job] = {"name": name, "task": task, "base_dir": base_dir,
                                 "model": model, "state": state, "submitted": submitted,
                                 "started": started}
    finally:
        db.close()
    if count is None and rows:
        count = len(rows)  # at least those
    return count, rows


def rebuilt_entry(data_dir: Path, job: str, row: dict[str, Any] | None,
                  now: float) -> QueuedJob:
    """The queue entry of ``job`` as its archive (and ``row``, what the damaged queue still
    had of it, if anything) says it stands."""
    row = row or {}
    meta, error = _archive_meta(data_dir, job)
    raw = meta.get("task_record")
    record: dict[str, Any] = raw if isinstance(raw, dict) else {}
    source = str(meta.get("task") or record.get("source") or "task.yaml")
    began = _float(row.get("submitted")) or _job_time(job) or now
    base = replace(_BLANK, job=job, name=_str(row.get("name")) or Path(source).name,
                   task=_str(row.get("task")), base_dir=_str(row.get("base_dir"))
                   or str(Path(source).parent), workspace=str(record.get("workspace") or ""),
                   goal=str(meta.get("goal") or ""), model=_str(row.get("model")) or None,
                   submitted=began, started=_float(row.get("started")) or began,
                   runs=_int(meta.get("resumes")) + 1)
    status = str(meta.get("status") or "running")
    ended = None if error else _ending(status, str(meta.get("stopped_by") or ""))
    if error:
        ended = (q.INTERRUPTED, None, f"its archive cannot be read: {error}")
    elif ended is None and JobLock(data_dir / "jobs" / job).held_elsewhere():
        ended = (q.INTERRUPTED, None, "it ran in another process when the queue was rebuilt; "
                                      "resume it once that process has ended")
    elif ended is None and not _has_events(data_dir, job):
        ended = (q.INTERRUPTED, None, "its process ended while it ran (not a daemon's job)")
    elif ended is None and not (meta.get("task_record") or base.task):
        ended = (q.INTERRUPTED, None, "it stopped before it was set up; submit its task again")
    if ended is None:
        return replace(base, state=q.QUEUED)  # resumed, ahead of new jobs (runs > 0)
    state, outcome, why = ended
    return replace(base, state=state, outcome=outcome, error=why,
                   finished=_mtime(data_dir / "jobs" / job / ARCHIVE_FILE) or now)


# -- a start after a queue write failed -----------------------------------------------------------

def ended_in_archive(data_dir: Path, entry: QueuedJob) -> Ending | None:
    """How ``entry`` (``running`` in the queue, no process runs it) ended, when its archive
    says so and says it of the entry's last run; None: resume it (its archive says
    ``running``, or that the daemon stopped it, or it cannot be read: the resume says why).

    The archive counts resumes, the queue runs: a stop recorded by an earlier run (the last
    one was killed before its resume wrote anything) is not taken for the last run's."""
    if not (data_dir / "jobs" / entry.job / ARCHIVE_FILE).is_file():
        return None
    meta, error = _archive_meta(data_dir, entry.job)
    if error:
        return None
    ended = _ending(str(meta.get("status") or "running"), str(meta.get("stopped_by") or ""))
    if ended is None or (ended[0] != q.FINISHED and _int(meta.get("resumes")) < entry.runs - 1):
        return None
    return ended


def _ending(status: str, stopped_by: str) -> Ending | None:
    """The queue state an archive's ``status`` and ``stopped_by`` say the job ended in; None
    when it has not ended (running, or suspended by the daemon: to resume)."""
    if status in FINISHED:
        return q.FINISHED, status, None
    if status != STOPPED or stopped_by in ("", SUSPENDED_BY):
        return None
    if stopped_by == CANCELLED_BY:
        return q.CANCELLED, None, "cancelled while it ran"
    if stopped_by == PAUSED_BY:
        return q.PAUSED, None, PAUSED_BY
    return q.INTERRUPTED, None, stopped_by


# -- endings the queue could not take --------------------------------------------------------------

@dataclass(frozen=True)
class Unsettled:
    """An ending the queue could not take when the job ended: the state, outcome and error
    the job ended in, when, and the stop to write in its archive once there is room again
    (the archive may have failed too)."""

    state: str
    at: float
    outcome: str | None = None
    error: str | None = None
    stop: str | None = None

    def view(self, entry: QueuedJob) -> QueuedJob:
        """``entry`` as it stands, not as the queue still says."""
        if entry.state not in (q.RUNNING, q.CANCELLING):
            return entry
        return replace(entry, state=self.state, outcome=self.outcome, error=self.error,
                       finished=self.at)

    def write(self, queue: JobQueue, job: str) -> None:
        """Move the queue entry to the ending (blocking).

        Raises:
            ArchiveError: the queue still cannot take it. JobStateError, NotFoundError: the
                entry is not ``running`` any more.
        """
        queue.move(job, self.state, now=self.at, outcome=self.outcome, error=self.error,
                   allowed=(q.RUNNING, q.CANCELLING))


# -- helpers --------------------------------------------------------------------------------------

_BLANK = QueuedJob(job="", name="", task="", base_dir="", workspace="", goal="", model=None,
                   state=q.QUEUED, outcome=None, error=None, submitted=0.0, started=None,
                   finished=None, runs=0, seq=0)


def _archive_meta(data_dir: Path, job: str) -> tuple[dict[str, Any], str]:
    """The archive's metadata that a queue entry needs, and "" or why it cannot be read."""
    keys = ("status", "stopped_by", "resumes", "goal", "task", "task_record")
    try:
        with Archive.open(data_dir, job, create=False) as archive:
            return {key: archive.get_meta(key) for key in keys}, ""
    except GlidingError as exc:
        return {}, exc.message


def _archived_jobs(data_dir: Path) -> list[str]:
    root = data_dir / "jobs"
    if not root.is_dir():
        return []
    return [d.name for d in root.iterdir() if _job_time(d.name) and
            (d / ARCHIVE_FILE).is_file()]


def _has_events(data_dir: Path, job: str) -> bool:
    """Whether ``job`` has a daemon events file: the daemon queued it."""
    return (data_dir / q.EVENTS_DIR / f"{job}.jsonl").is_file()


def _evented_jobs(data_dir: Path) -> list[str]:
    """Every job with a daemon events file."""
    events = data_dir / q.EVENTS_DIR
    if not events.is_dir():
        return []
    return [p.stem for p in events.glob("*.jsonl") if _job_time(p.stem)]


def _ended(data_dir: Path, job: str, state: Any) -> bool:
    """Whether a job without an archive had ended (cancelled before it ran, refused at its
    start): so the damaged queue said, else its events file's last event."""
    if state is not None:
        return state in q.ENDED
    path = data_dir / q.EVENTS_DIR / f"{job}.jsonl"
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 65536))
            lines = handle.read().splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        with contextlib.suppress(ValueError, AttributeError):
            return json.loads(line).get("event") in q.TERMINAL
    return False


def _move(src: Path, dst: Path) -> None:
    """Rename a SQLite file with its ``-wal`` and ``-shm`` (so they still go together).

    Raises:
        ArchiveError: a rename failed.
    """
    for suffix in SIDECARS:
        try:
            os.replace(f"{src}{suffix}", f"{dst}{suffix}")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ArchiveError(f"cannot move {src}{suffix} to {dst}{suffix}: "
                               f"{exc.strerror or exc}",
                               hint="check that the data dir is writable") from exc


def _free_name(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... when taken: a damaged file is never replaced."""
    found, n = path, 1
    while any(Path(f"{found}{s}").exists() for s in SIDECARS):
        n += 1
        found = path.with_name(f"{path.name}-{n}")
    return found


def _job_time(job: str) -> float | None:
    """The time a job id starts with (``20260101-120000-abcdef``); None: not a job id."""
    try:
        stamp, _tail = job.rsplit("-", 1)
        return float(calendar.timegm(time.strptime(stamp, "%Y%m%d-%H%M%S")))
    except ValueError:
        return None


def _mtime(path: Path) -> float | None:
    times = []
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            times.append(os.stat(f"{path}{suffix}").st_mtime)
    return max(times) if times else None


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
