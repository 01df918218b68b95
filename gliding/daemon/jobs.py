"""Jobs of a data directory: who runs them, and how they stand.

A running job holds an exclusive ``flock`` on ``<data_dir>/jobs/<job>/running.lock``; the
kernel drops it when the process ends, however it ends (``kill -9`` included). So a job whose
archive still says ``running`` but whose lock is free was interrupted, and ``gliding resume``
may continue it; a job whose lock is held runs elsewhere and may not be resumed twice.

A running job also holds its workspace: an ``flock`` on
``<data_dir>/workspaces/<sha256 of the workspace's real path>.lock`` (``WorkspaceLock``), taken
before anything of the job is written, so a second job on the same workspace and data
directory is refused (``WorkspaceBusy``) instead of editing the same files at the same time.

An error that stops a job from outside its agents (the archive cannot be written, the disk is
full, a bug) is one ``GlidingError`` (``stop_error`` picks the first real cause out of task
groups and cleanup errors) and is recorded in the archive (``record_stop``: status
``interrupted``, so ``gliding resume`` may continue it once the cause is fixed, and
``stopped_by``, the message).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import get_args

import anyio
import structlog

from gliding.errors import ArchiveError, BusError, GlidingError, UsageError
from gliding.memory.archive.store import ARCHIVE_FILE, Archive
from gliding.scheduler.policy import Outcome

LOCK_FILE = "running.lock"
WORKSPACE_LOCKS = "workspaces"
FINISHED: tuple[str, ...] = get_args(Outcome)
"""The statuses of a job that finished: its outcomes."""
STOPPED = "interrupted"
"""The status ``record_stop`` writes: not finished, so ``gliding resume`` may continue it."""
SUSPENDED_BY = "the daemon stopped; it resumes the job when it starts again"
"""The ``stopped_by`` of a job the daemon stopped when it stopped itself (it resumes it)."""
CANCELLED_BY = "cancelled by a cancel request to the daemon"
"""The ``stopped_by`` of a job cancelled through the daemon (it stays cancelled)."""
PAUSED_BY = "paused by an interrupt request to the daemon; a steer or resume runs it on"
"""The ``stopped_by`` of a job paused through the daemon (it stays paused)."""

log = structlog.get_logger("gliding.daemon")

# The lock files this process holds. A flock belongs to the open file, which a forked child
# shares (a blackboard query runs in one): the child closes its copies at once, so that a lock
# its parent releases is free at once, not when the child ends.
_HELD: set[int] = set()


def _drop_held_locks() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_held_locks)

_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


class JobBusy(UsageError):
    """The job is being run by another process."""


class WorkspaceBusy(JobBusy):
    """Another job (of this data directory) works in the workspace."""

    code = "workspace.busy"


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
        _HELD.add(fd)
        return self

    def release(self) -> None:
        if self._fd is not None:
            _HELD.discard(self._fd)
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


DAEMON_LOCK = Path("daemon") / "daemon.lock"


class DaemonBusy(UsageError):
    """Another daemon serves the data directory."""

    code = "daemon.busy"


class DaemonLock(JobLock):
    """The right to be the one daemon of a data directory: an ``flock`` on
    ``<data_dir>/daemon/daemon.lock`` (its file holds the holder's pid), held like a job's
    lock (the kernel drops it however the daemon ends; forked children close their copy)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / DAEMON_LOCK.parent)
        self.path = data_dir / DAEMON_LOCK

    def acquire(self) -> DaemonLock:
        """Take the lock for this process (it creates ``<data_dir>/daemon/``).

        Raises:
            DaemonBusy: another daemon holds it. ArchiveError: it cannot be made.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArchiveError(f"cannot create {self.path.parent}: {exc.strerror or exc}",
                               hint="check that the data dir is writable") from exc
        try:
            super().acquire()
        except JobBusy as exc:
            pid = exc.message.rsplit("(pid ", 1)[-1].rstrip(")")
            raise DaemonBusy(f"a daemon already serves {self.path.parent.parent} (pid {pid})",
                             hint="use that one (gliding submit), or stop it first") from None
        return self


class WorkspaceLock:
    """The exclusive right to work in one workspace, among the jobs of one data directory.

    ``with WorkspaceLock(data_dir, workspace, job):``; the lock file holds ``<pid> <job>`` of
    its holder, for the message of the job that is refused. Nested workspaces exclude each
    other too (a job in ``/w`` and one in ``/w/sub`` would write the same files): a job holds
    its workspace's lock exclusively and each enclosing directory's shared, so jobs side by
    side (``/w/a``, ``/w/b``) go on together.
    """

    def __init__(self, data_dir: Path, workspace: Path, job: str) -> None:
        self.workspace = Path(os.path.realpath(workspace))
        self.dir = data_dir / WORKSPACE_LOCKS
        self.path = self._file(self.workspace)
        self.job = job
        self._fd: int | None = None
        self._shared: list[int] = []

    def _file(self, path: Path) -> Path:
        return self.dir / f"{hashlib.sha256(os.fsencode(path)).hexdigest()[:32]}.lock"

    def _open(self, path: Path) -> int:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ArchiveError(f"cannot use the data dir: cannot create {self.dir}: "
                               f"{exc.strerror or exc}",
                               hint="check that the data dir is writable") from exc

    def acquire(self) -> WorkspaceLock:
        """Take the lock for this process (it creates ``<data_dir>/workspaces/``, nothing else).

        Raises:
            WorkspaceBusy: another job holds it, one that encloses it, or one inside it.
                ArchiveError: the data directory is not usable (a lock file cannot be made).
        """
        try:
            for outer in self.workspace.parents:
                fd = self._open(self._file(outer))
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise self._busy(fd, f"workspace {self.workspace} is inside the workspace "
                                         f"{outer} of job {{job}} (pid {{pid}})") from None
                self._shared.append(fd)
                _HELD.add(fd)
            fd = self._open(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:  # shared holders only: jobs whose workspaces lie inside this one
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise self._busy(fd, f"workspace {self.workspace} is in use by job {{job}} "
                                         "(pid {pid})") from None
                os.close(fd)
                raise WorkspaceBusy(
                    f"workspace {self.workspace} holds the workspace of a running job (a "
                    "directory inside it); two jobs there would overwrite each other's files",
                    hint="wait for that job to finish, or give this task another workspace",
                ) from None
        except BaseException:
            self._release_shared()
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.job}".encode())
        self._fd = fd
        _HELD.add(fd)
        return self

    @staticmethod
    def _busy(fd: int, what: str) -> WorkspaceBusy:
        """The refusal naming the exclusive holder of ``fd``'s lock file (closed here)."""
        holder = os.read(fd, 200).decode(errors="replace").split()
        os.close(fd)
        pid, job = (holder + ["?", "?"])[:2]
        return WorkspaceBusy(
            what.format(job=job, pid=pid) + "; two jobs in one workspace would overwrite "
            "each other's files",
            hint="wait for that job to finish, or give this task another workspace")

    def _release_shared(self) -> None:
        for fd in self._shared:
            _HELD.discard(fd)
            os.close(fd)
        self._shared = []

    def release(self) -> None:
        if self._fd is not None:
            _HELD.discard(self._fd)
            os.close(self._fd)  # closing drops the flock; the file stays for the next job
            self._fd = None
        self._release_shared()

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _cancelled() -> type[BaseException]:
    """The running event loop's cancellation exception (asyncio's when no loop runs: the CLI
    sorts an error out after ``anyio.run`` returned)."""
    try:
        return anyio.get_cancelled_exc_class()
    except RuntimeError:  # no loop (anyio's NoEventLoopError is a RuntimeError)
        import asyncio

        return asyncio.CancelledError


def stop_error(exc: BaseException, job: str | None = None) -> GlidingError | None:
    """The one error to report for ``exc``, which stopped a job: its first real cause.

    Task groups are searched leaf by leaf, and errors raised while another was being handled
    (a cleanup failing after the disk filled up) lead back to the earlier one. The first
    ``GlidingError`` or ``OSError`` wins, then any other error (a bug), then a ``BusError``
    (the bus closing under a task is a consequence, not a cause). An ``OSError`` or a bug is
    translated into a ``GlidingError`` whose message is one line. None: only cancellation,
    ``KeyboardInterrupt`` or ``SystemExit`` is in there, which must go on as it is.
    """
    found = leaves(exc)
    if any(isinstance(e, KeyboardInterrupt | SystemExit) for e in found):
        return None
    errors = [e for e in found if isinstance(e, Exception)
              and not isinstance(e, _cancelled())]
    if not errors:
        return None

    def rank(e: Exception) -> int:
        if isinstance(e, BusError):
            return 2
        return 0 if isinstance(e, GlidingError | OSError) else 1

    # an error raised while an earlier one was handled (a cleanup that failed) yields to it
    errors = [earlier for e in errors for earlier in (*_earlier_causes(e), e)]
    first = min(errors, key=rank)  # min keeps the earliest of a rank
    if isinstance(first, GlidingError):
        return first
    resume = f"; then gliding resume {job}" if job else ""
    if isinstance(first, OSError):
        where = f" ({first.filename})" if first.filename else ""
        if first.errno in (errno.ENOSPC, errno.EDQUOT):
            return ArchiveError(f"no space left on the device{where}",
                                hint=f"free some disk space{resume}")
        return ArchiveError(f"the job stopped: {first.strerror or first}{where}",
                            hint=f"fix the cause{resume}")
    return GlidingError(f"the job stopped on an internal error: {type(first).__name__}: "
                        f"{_one_line(str(first))}",
                        hint="this is a bug in Gliding; log_level debug shows the traceback")


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc``, groups flattened, in their order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def _earlier_causes(exc: BaseException) -> list[Exception]:
    """The GlidingErrors and storage OSErrors (disk full, read-only, I/O error) that were
    being handled when ``exc`` was raised (``__context__``, unless a ``raise ... from``
    replaced it), earliest first. Anything else there (an exception a library raised and
    handled itself, a missing file looked for) is no cause worth naming."""
    out: list[Exception] = []
    seen = {id(exc)}
    current: BaseException | None = exc
    while current is not None and current.__cause__ is None and not current.__suppress_context__:
        current = current.__context__
        if current is None or id(current) in seen:
            break
        seen.add(id(current))
        for leaf in leaves(current):
            if (isinstance(leaf, GlidingError) and not isinstance(leaf, BusError)) or (
                    isinstance(leaf, OSError) and leaf.errno in _STORAGE_ERRNOS):
                out.append(leaf)
    return out[::-1]


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record_stop(archive: Archive, error: GlidingError) -> None:
    """Write that the job stopped on ``error``: status ``interrupted`` and ``stopped_by``.
    Best effort: when the archive cannot take even that (the disk is full), the status stays
    ``running`` and the free job lock shows the job as interrupted all the same."""
    try:
        with archive.batch():
            archive.set_meta("status", STOPPED)
            archive.set_meta("stopped_by", _one_line(error.message))
    except (GlidingError, OSError) as exc:
        log.warning("job.status.unrecorded", job=archive.job, error=_one_line(str(exc)))


@dataclass(frozen=True)
class JobInfo:
    job: str
    status: str  # running | interrupted | success | failed | ... | unreadable
    goal: str
    model: str
    resumes: int
    stopped_by: str = ""  # what stopped an interrupted job, when it was recorded


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
            stopped_by = str(archive.get_meta("stopped_by", "") or "")
    except GlidingError:
        return JobInfo(job, "unreadable", "", "", 0)
    if status not in FINISHED and not JobLock(data_dir / "jobs" / job).held_elsewhere():
        status = "interrupted"
    if status != "interrupted":
        stopped_by = ""  # a resumed job that went on to finish, or runs again
    return JobInfo(job, status, goal, model, resumes, stopped_by)
