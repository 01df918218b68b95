"""What a job leaves in its workspace: the files its checks name, whether the workspace changed
behind a resumed job's back, and the files DA wrote archived as the job's artifacts.

Archiving never follows a symlink, reads only regular files, none larger than
MAX_ARTIFACT_BYTES and not more than MAX_ARTIFACTS_BYTES in all; a file that cannot be archived
is named in the report with the reason, never an error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

from gliding.config.task import Task
from gliding.core.iri import record_iri
from gliding.errors import ArchiveError
from gliding.memory.archive.store import Archive
from gliding.tools.snapshot import MAX_FILES, Snapshot
from gliding.tools.snapshot import mark as workspace_mark

log = structlog.get_logger("gliding.daemon")

MAX_ARTIFACT_BYTES = 16 << 20  # a written file larger than this is not archived (noted)


MAX_ARTIFACTS_BYTES = 64 << 20  # all of a job's archived files together, at most


def checked_files(task: Task, start: Snapshot) -> dict[str, str]:
    """Each checked file: written (or changed) by this job, found unchanged, or missing (or,
    past a start snapshot cut at MAX_FILES, present without knowing who wrote it)."""
    out: dict[str, str] = {}
    for check in task.checks:
        path = getattr(check, "path", None)
        if not isinstance(path, str):
            continue
        key = str(Path(path))
        try:
            st = (task.workspace / key).lstat()
        except OSError:
            out[path] = "missing"
            continue
        if key not in start and len(start) >= MAX_FILES:
            out[path] = "present (the workspace is too big to tell who wrote it)"
        elif start.get(key) == [st.st_size, st.st_mtime_ns]:
            out[path] = "found unchanged"
        else:
            out[path] = "written by this job"
    return out


def changed_since(archive: Archive, workspace: Path, data_dir: Path) -> bool:
    """Whether the workspace differs from what the job last recorded (journal or tool result).
    A change is reported, not trusted: the resumed agents see the workspace as it is now."""
    recorded = ""
    for item in archive.list():
        mark = item.meta.get("workspace")
        if item.kind in ("journal", "result") and isinstance(mark, str) and mark:
            recorded = mark
    if not recorded:
        return False
    changed = workspace_mark(workspace, data_dir) != recorded
    if changed:
        log.warning("job.workspace.changed", job=archive.job, workspace=str(workspace))
    return changed


def archive_artifacts(archive: Archive, workspace: Path, written: dict[str, str]
                       ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """Archive the files the job wrote; ``(archived (path, IRI), skipped (path, why))``.

    Never follows a symlink (neither the file nor a directory above it may be one that leads
    out of the workspace), reads only regular files, none larger than MAX_ARTIFACT_BYTES and
    not more than MAX_ARTIFACTS_BYTES in all. A file that cannot be archived is skipped with
    the reason, never an error: the job's outcome is recorded whatever its files are.
    """
    out: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    root = os.path.realpath(workspace)
    total = 0
    for path in sorted(written):
        try:
            content, why = _artifact_bytes(root, path, MAX_ARTIFACTS_BYTES - total)
        except OSError as exc:
            content, why = None, f"cannot be read: {exc.strerror or exc}"
        if content is None:
            if why:
                skipped.append((path, why))
            continue
        iri = str(record_iri(archive.job, "artifact", path))
        try:
            archive.put(iri, content, kind="artifact", media_type="application/octet-stream",
                        meta={"path": path, "written_by": written[path]})
        except (ArchiveError, OSError) as exc:  # a resumed job whose artifact changed; disk
            message = exc.message if isinstance(exc, ArchiveError) else str(exc)
            log.warning("artifact.archive.failed", job=archive.job, path=path, error=message)
            skipped.append((path, f"not archived: {message[:200]}"))
            continue
        total += len(content)
        out.append((path, iri))
    return tuple(out), tuple(skipped)


def _artifact_bytes(root: str, path: str, room: int) -> tuple[bytes | None, str]:
    """The content of ``path`` (relative to the workspace ``root``, a real path), or None and
    why not ("" when there is nothing there to mention: removed, or a directory).

    Raises:
        OSError: the file cannot be opened or read.
    """
    target = os.path.join(root, path)
    parent = os.path.realpath(os.path.dirname(target))
    if parent != root and os.path.commonpath([root, parent]) != root:
        return None, f"lies behind a symbolic link that leads out of the workspace ({parent})"
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None, ""
    if stat.S_ISLNK(st.st_mode):
        return None, f"a symbolic link (to {os.readlink(target)}); links are not followed"
    if stat.S_ISDIR(st.st_mode):
        return None, ""
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    limit = min(MAX_ARTIFACT_BYTES, room)
    if st.st_size > limit:
        return None, _too_big(st.st_size, limit)
    fd = os.open(os.path.join(parent, os.path.basename(target)),
                 os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None, "not a regular file"
        content = handle.read(limit + 1)  # it may have grown since lstat
    if len(content) > limit:
        return None, _too_big(len(content), limit)
    return content, ""


def _too_big(size: int, limit: int) -> str:
    if limit < MAX_ARTIFACT_BYTES:
        return (f"{size} bytes: the job's archived files may take {MAX_ARTIFACTS_BYTES} bytes "
                "in all")
    return f"{size} bytes, larger than the {MAX_ARTIFACT_BYTES} bytes an archived file may have"
