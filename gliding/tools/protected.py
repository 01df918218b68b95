"""What inside a workspace the job's tools may not change: the data directory and the git
directory.

- The **data directory** (job archives, the blackboard), where it lies inside the workspace:
  hidden from commands (``Sandbox.hidden``: an empty tmpfs over it) and refused to the file
  tools, reading or writing (``tool_guard``). One ``write_file`` into its blackboard once
  damaged the board every later job of the data directory opens.
- The **git directory** the workspace has when the job starts (``git_paths``): its hooks and
  its config run on the host at the user's next ``git`` command (``core.fsmonitor``,
  ``core.pager``, a hook), and so does whatever a ``commondir`` or a ``.git`` file would point
  it to. Unless the task says ``git_writes: true`` it is read-only to the job: bound read-only
  over the workspace in the sandbox (``Sandbox.readonly``; a mount point also cannot be
  renamed or removed) and refused to the file tools' writes. The whole directory, not only
  ``hooks`` and ``config``: a missing ``hooks``, a ``commondir`` or a ``config.worktree`` made
  beside them would do the same, and nothing can be bound over a path without creating it on
  the host first. A repository a command makes during the job (``git init``) is the job's own.

Paths are real paths: symlinks followed, ``..`` resolved (``workspace.locate`` hands the guard
the path it actually walked).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from gliding.errors import ConfinementError
from gliding.tools.base import ToolContext
from gliding.tools.workspace import Guard, is_inside

MAX_POINTER_BYTES = 4096  # of a .git file or a commondir: one line of a path
MAX_SUBMODULES = 256  # submodule checkouts whose .git files are kept read-only
_GITDIR = re.compile(r"\Agitdir: *(.+?)\s*\Z")
_SUBMODULE_PATH = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.MULTILINE)
GIT_HINT = ("its hooks and config would run on the host at the user's next git command; a "
            "task whose job should change them says git_writes: true (docs/config.md)")


def git_paths(workspace: Path) -> tuple[Path, ...]:
    """The real paths of the workspace's git directory as it is now: ``.git`` (a directory,
    or a ``gitdir:`` file and the directory it names), the ``commondir`` such a directory
    names, and the ``.git`` files of the submodule checkouts ``.gitmodules`` lists; only
    those inside the workspace (commands see nothing outside it), none inside another.
    Reads a few small files; creates nothing."""
    root = os.path.realpath(workspace)
    found: list[str] = []
    _add_git(os.path.join(root, ".git"), root, found)
    for sub in _submodule_paths(root):
        _add_git(os.path.join(root, sub, ".git"), root, found)
    kept = [p for p in found if not any(q != p and is_inside(q, p) for q in found)]
    return tuple(Path(p) for p in dict.fromkeys(kept))


def _add_git(dot: str, root: str, found: list[str]) -> None:
    """Add the git directory at ``dot`` (a ``.git`` entry) to ``found``: the directory, or
    the ``gitdir:`` file and the directory it names, with the ``commondir`` of each."""
    try:
        mode = os.lstat(dot).st_mode
    except OSError:
        return
    real = os.path.realpath(dot)
    if not is_inside(root, real):
        return
    if stat.S_ISREG(mode) or (stat.S_ISLNK(mode) and os.path.isfile(real)):
        found.append(real)
        target = _pointer(real, "gitdir")
        gitdirs = [] if target is None else [target]
    else:
        gitdirs = [real] if os.path.isdir(real) else []
    for gitdir in gitdirs:
        common = _pointer(os.path.join(gitdir, "commondir"), "commondir", base=gitdir)
        for where in (gitdir, common):  # never the workspace itself (a "gitdir: .")
            if (where is not None and where != root and is_inside(root, where)
                    and os.path.isdir(where)):
                found.append(where)


def _pointer(path: str, kind: str, *, base: str | None = None) -> str | None:
    """The real path a ``.git`` file (``gitdir: <path>``) or a ``commondir`` file names,
    relative to ``base`` (default: the file's directory); None when there is none."""
    text = _head(path, MAX_POINTER_BYTES).strip()
    if kind == "gitdir":
        match = _GITDIR.match(text)
        text = match.group(1) if match else ""
    if not text or "\x00" in text:
        return None
    return os.path.realpath(os.path.join(base or os.path.dirname(path), text))


def _submodule_paths(root: str) -> list[str]:
    """The checkout paths ``.gitmodules`` lists (at most MAX_SUBMODULES), relative ones."""
    text = _head(os.path.join(root, ".gitmodules"), 1 << 20)
    paths = (p.strip('"') for p in _SUBMODULE_PATH.findall(text))
    return [p for p in paths if p and "\x00" not in p and not os.path.isabs(p)][:MAX_SUBMODULES]


def _head(path: str, limit: int) -> str:
    """The first ``limit`` bytes of the regular file ``path`` as text; "" when it is missing
    or not a regular file (a FIFO is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def tool_guard(workspace: Path, *, hidden: Iterable[Path] = (), readonly: Sequence[Path] = (),
               write: bool) -> Guard:
    """The guard (``workspace.locate``) of one file tool call in ``workspace``: it refuses
    every path inside ``hidden`` (the data directory), and, for a tool that writes, inside
    ``readonly`` (the git directory, ``git_paths``)."""
    root = os.path.realpath(workspace)
    closed = [(p, os.path.realpath(p)) for p in hidden]
    kept = [os.path.realpath(p) for p in readonly] if write else []

    def guard(rel: str, given: str) -> None:
        real = os.path.normpath(os.path.join(root, rel))
        for shown, where in closed:
            if is_inside(where, real):
                raise ConfinementError(
                    f"path {given!r} leads into the data directory {shown} (job archives and "
                    "the blackboard): the tools neither read nor write it",
                    hint="work on the project's files; the data directory is Gliding's own")
        for where in kept:
            if is_inside(where, real):
                name = os.path.relpath(where, root)
                raise ConfinementError(
                    f"path {given!r} leads into the workspace's git directory ({name}), "
                    "read-only to this job", hint=GIT_HINT)

    return guard


def context_guard(ctx: ToolContext, *, write: bool) -> Guard:
    """``tool_guard`` for a call with ``ctx``: the data directory is its sandbox's ``hidden``,
    the git directory its ``readonly`` (a context without a sandbox has neither)."""
    box = ctx.sandbox
    return tool_guard(ctx.workspace, hidden=box.hidden if box else (),
                      readonly=box.readonly if box else (), write=write)


def reachable(guard: Guard | None, rel: str) -> bool:
    """Whether ``guard`` lets a walk reach the real path ``rel`` (from the workspace root)."""
    if guard is None:
        return True
    try:
        guard(rel, rel)
    except ConfinementError:
        return False
    return True
