"""Jobs of a data directory: who runs them, and how they stand.

A running job holds an exclusive ``flock`` on ``<data_dir>/jobs/<job>/running.lock``; the
kernel drops it when the process ends, however it ends (``kill -9`` included). So a job whose
archive still says ``running`` but whose lock is free was interrupted, and ``gliding resume``
may continue it; a job whose lock is held runs elsewhere and may not be resumed twice.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gliding.errors import ArchiveError, GlidingError, UsageError
from gliding.memory.archive import ARCHIVE_FILE, Archive

LOCK_FILE = "running.lock"
FINISHED = ("success", "failed", "escalated", "budget_exceeded", "error")


class JobBusy(UsageError):
    """The job is being run by another process."""


class JobLock:
    """The exclusive right to run one job; ``with JobLock(dir):`` or ``acquire``/``release``."""

    def __init__(self, job_dir: Path) -> None:
        self.path = job_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> JobLock:
        """Take the lock for this process.

        Raises:
            JobBusy: another process holds it. ArchiveError: the lock file cannot be made.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ArchiveError(f"cannot create {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise JobBusy(f"job {self.path.parent.name} is running in another process "
                          f"(pid {holder})", hint="wait for it, or stop that process") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def held_elsewhere(self) -> bool:
        """Whether another process holds the lock right now (this one does not take it)."""
        if not self.path.exists():
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def __enter__(self) -> JobLock:
        return self.acquire()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


@dataclass(frozen=True)
class JobInfo:
    job: str
    status: str  # running | interrupted | success | failed | ... | unreadable
    goal: str
    model: str
    resumes: int


def list_jobs(data_dir: Path) -> list[JobInfo]:
    """Every job of ``data_dir``, newest first (job ids start with their start time)."""
    root = data_dir / "jobs"
    if not root.is_dir():
        return []
    out = []
    for job_dir in sorted(root.iterdir(), reverse=True):
        if not (job_dir / ARCHIVE_FILE).is_file():
            continue
        out.append(job_info(data_dir, job_dir.name))
    return out


def job_info(data_dir: Path, job: str) -> JobInfo:
    try:
        with Archive.open(data_dir, job, create=False) as archive:
            status = str(archive.get_meta("status", "running"))
            goal = str(archive.get_meta("goal", ""))
            model = str(archive.get_meta("model", ""))
            resumes = int(archive.get_meta("resumes", 0))
    except GlidingError:
        return JobInfo(job, "unreadable", "", "", 0)
    if status not in FINISHED and not JobLock(data_dir / "jobs" / job).held_elsewhere():
        status = "interrupted"
    return JobInfo(job, status, goal, model, resumes)
