"""Workspace confinement: model-supplied relative paths reach files inside the workspace only.

Two ways in:

- ``resolve_in_workspace`` turns a path into a real path string (every symlink followed, with
  os.path.realpath) and refuses it when that lies outside. It is a check, not a handle: what
  the path names may change before it is used, so it serves callers that pass the path on
  (a check's ``path``, a glob's literal prefix), never ones that open it.
- ``locate`` walks the path one component at a time from an open descriptor of the workspace
  root, each directory opened with O_NOFOLLOW relative to the one before (``dir_fd=``), and
  follows a symlink only by reading it and walking its target the same way; the file itself
  is opened with O_NOFOLLOW | O_NONBLOCK. A symlink swapped in at any moment therefore cannot
  lead the walk out, a FIFO does not block the open, and the descriptor that comes back is
  re-checked through /proc/self/fd, which also catches a directory moved out mid-walk. The
  file tools read and write only through such descriptors.

Both take a ``guard``: called with the real path (from the root, every link resolved) of
each directory the walk enters or makes and of what it finds, before anything is made or
opened for the caller; it raises ConfinementError for a place inside the workspace the tools
may not reach (``protected.tool_guard``: the data directory, a read-only git directory).

A hard link inside the workspace to a file outside it cannot be told apart from an inside file
by any path, so ``open_regular`` (what the file tools read through) refuses a regular file with
more than one link; replacing such a file by name (write_file) is fine, since that changes
the workspace's link only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gliding.errors import ConfinementError, ToolError

_HINT = "use a path relative to the workspace root, e.g. 'src/main.py'"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NODE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_LINKS = 40  # symlinks followed in one path, as the kernel's ELOOP limit
MAX_TRIES = 8  # times one path is walked again when it changed underfoot

Guard = Callable[[str, str], None]
"""``guard(real, given)`` raises ConfinementError when the real path ``real`` ('/'-separated,
from the workspace root, "." for the root), reached while walking the path ``given`` (as the
model wrote it, for the message), may not be reached by the tool walking it."""


def workspace_root(workspace: Path) -> str:
    """The real path of the workspace, as a string without a trailing separator."""
    return os.path.realpath(os.fspath(workspace))


def is_inside(root: str, real: str) -> bool:
    """True when the real path ``real`` is ``root`` or lies below it (both already realpath'd)."""
    return real == root or os.path.commonpath([root, real]) == root


def check_path(rel: object, what: str = "path") -> str:
    """``rel`` when it is a relative path string without a NUL byte.

    Raises:
        ConfinementError: not a string, a NUL byte in it, or absolute.
    """
    if not isinstance(rel, str):
        raise ConfinementError(
            f"{what} must be a string, got {type(rel).__name__}: {rel!r}", hint=_HINT
        )
    if "\x00" in rel:
        raise ConfinementError(
            f"{what} {rel!r} contains a NUL byte", hint=f"{_HINT}; drop the NUL byte"
        )
    if os.path.isabs(rel):
        raise ConfinementError(
            f"{what} {rel!r} is absolute; tools only reach files inside the workspace",
            hint=_HINT,
        )
    return rel


def resolve_in_workspace(workspace: Path, rel: str, *, must_exist: bool = False) -> Path:
    """The real path of ``rel`` inside ``workspace`` (a check only: see the module docstring).

    Raises:
        ConfinementError: ``rel`` is not a string, holds a NUL byte, is absolute, or resolves
            (after following every symlink) to a place outside the workspace.
        ToolError: ``must_exist`` and nothing exists at the path, or the path changed while
            it was being resolved.
    """
    check_path(rel)
    root = workspace_root(workspace)
    try:
        real = os.path.realpath(os.path.join(root, rel or "."))
    except OSError as exc:  # a link replaced between its lstat and its readlink
        raise ToolError(f"path {rel!r} changed while it was being resolved: {exc.strerror}",
                        hint="try again") from exc
    if not is_inside(root, real):
        raise ConfinementError(
            f"path {rel!r} resolves to {real}, outside the workspace {root}",
            hint=f"{_HINT}; '..' and symlinks may not leave the workspace",
        )
    if must_exist and not os.path.exists(real):
        raise ToolError(
            f"no such file: {rel}", hint="call list_dir or glob to see what exists"
        )
    return Path(real)


def display_path(rel: str) -> str:
    """How a path the model gave is shown back to it: normalised, with '/' separators."""
    return os.path.normpath(rel or ".").replace(os.sep, "/")


@dataclass
class Located:
    """Where a path led: the directory holding it (``dir_fd``) and its ``name`` there, and,
    when something is there, its stat (``st``) and, when it may be read, that thing opened
    (``fd``, O_RDONLY | O_NONBLOCK).

    ``name`` is "" for the workspace root itself. ``real`` is the path from the root with every
    link resolved. Close it (or use it as a context manager) to close the descriptors.
    """

    dir_fd: int
    name: str
    real: str
    fd: int | None
    st: os.stat_result | None

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    def close(self) -> None:
        """Close both descriptors; closing twice is harmless."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Located:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def locate(workspace: Path, rel: str, *, make_dirs: bool = False,
           guard: Guard | None = None) -> Located:
    """Walk ``rel`` from the workspace root without ever leaving it (see the module docstring).

    ``make_dirs`` creates missing parent directories (inside, by the same walk). ``guard``
    sees every directory entered or made and the place found, first (module docstring).

    Raises:
        ConfinementError: a bad path (``check_path``), one that '..' or a symlink leads out,
            or one ``guard`` refuses.
        ToolError: a parent that is missing (without ``make_dirs``) or not a directory, too
            many symlinks, or a path that kept changing while it was walked.
    """
    check_path(rel)
    root = workspace_root(workspace)
    for _ in range(MAX_TRIES):
        found = _walk(root, rel, make_dirs, guard)
        if found is not None:
            return found
    raise ToolError(f"path {rel!r} kept changing while it was opened",
                    hint="something else is renaming it; try again when it stops")


def open_regular(workspace: Path, rel: str, guard: Guard | None = None) -> Located:
    """``locate`` for reading a regular file: anything else is refused before one byte is read.

    Raises:
        ConfinementError: as ``locate``, or a file with several hard links (module docstring).
        ToolError: as ``locate``, nothing there, a directory, or a FIFO, socket or device.
    """
    found = locate(workspace, rel, guard=guard)
    shown = display_path(rel)
    try:
        if found.st is None:
            raise ToolError(f"no such file: {shown}",
                            hint="call list_dir or glob to see what exists")
        mode = found.st.st_mode
        if stat.S_ISDIR(mode):
            raise ToolError(f"{shown} is a directory", hint="call list_dir to see its entries")
        if not stat.S_ISREG(mode):
            raise ToolError(f"{shown} is a {_kind(mode)}, not a regular file",
                            hint="the file tools read regular files only")
        if found.fd is None:
            raise ToolError(f"cannot read {shown}: permission denied")
        if found.st.st_nlink > 1:
            raise ConfinementError(
                f"{shown} has {found.st.st_nlink} hard links; another of them may lie outside "
                "the workspace, so the file tools do not read it",
                hint=f"if the file is yours, give it its own copy: cp {shown} {shown}.copy && "
                     f"mv {shown}.copy {shown}",
            )
    except BaseException:
        found.close()
        raise
    return found


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _walk(root: str, rel: str, make_dirs: bool, guard: Guard | None) -> Located | None:
    """One walk of ``rel``; None when the path changed underfoot and should be walked again."""
    def check(*parts: str) -> None:
        if guard is not None:
            guard("/".join([*names, *parts]) or ".", display_path(rel))

    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise ToolError(f"cannot open the workspace {root}: {exc.strerror}") from exc
    dirs, names = [root_fd], list[str]()  # the open directories from the root down, and their names
    todo = list(reversed(rel.split("/")))  # components still to walk, next one last
    links = 0
    try:
        while True:
            while todo and todo[-1] in ("", "."):
                todo.pop()
            if not todo:  # the path ended in '..': the directory it came back to is the target
                if not names:
                    check()
                    return _found(root, dirs, names, "", os.dup(root_fd))
                name = names.pop()  # opened as a parent: open it again as the target
                os.close(dirs.pop())
                todo.append(name)
                continue
            part = todo.pop()
            if part == "..":
                if not names:
                    raise ConfinementError(
                        f"path {rel!r} climbs out of the workspace {root}",
                        hint=f"{_HINT}; '..' may not leave the workspace")
                names.pop()
                os.close(dirs.pop())
                continue
            last = all(p in ("", ".") for p in todo)
            flags = _NODE_FLAGS if last else _DIR_FLAGS
            try:
                fd = os.open(part, flags, dir_fd=dirs[-1])
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    check(part)
                    if last:
                        return _found(root, dirs, names, part, None)
                    if not make_dirs:
                        raise ToolError(f"no such file: {display_path(rel)}",
                                        hint="call list_dir or glob to see what exists") from exc
                    with contextlib.suppress(FileExistsError):  # made meanwhile: walked as is
                        os.mkdir(part, 0o777, dir_fd=dirs[-1])
                    todo.append(part)
                    continue
                if last and exc.errno == errno.EACCES:  # there, but not ours to read
                    try:
                        st = os.stat(part, dir_fd=dirs[-1], follow_symlinks=False)
                    except OSError:
                        return None  # gone again: walk again
                    if not stat.S_ISLNK(st.st_mode):
                        check(part)
                        return _found(root, dirs, names, part, None, st)
                elif exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise ToolError(f"cannot open {display_path(rel)}: {exc.strerror}") from exc
                try:
                    target = os.readlink(part, dir_fd=dirs[-1])
                except OSError:
                    if exc.errno == errno.ENOTDIR and not last:
                        raise ToolError(f"{'/'.join([*names, part])} is not a directory, so "
                                        f"{display_path(rel)} cannot exist") from exc
                    return None  # a link a moment ago, not now: walk again
                links += 1
                if links > MAX_LINKS:
                    raise ToolError(f"path {rel!r} goes through more than {MAX_LINKS} symlinks",
                                    hint="a symlink loop?") from exc
                if os.path.isabs(target):
                    inside = _inside_part(root, target)
                    if inside is None:
                        raise ConfinementError(
                            f"path {rel!r} leads through the symlink "
                            f"{'/'.join([*names, part])} to {target}, outside the workspace "
                            f"{root}", hint=f"{_HINT}; symlinks may not leave the workspace"
                        ) from exc
                    for fd in dirs[1:]:
                        os.close(fd)
                    del dirs[1:], names[:]
                    target = inside
                todo.extend(reversed(target.split("/")))
                continue
            try:
                check(part)
            except BaseException:
                os.close(fd)
                raise
            if last:
                return _found(root, dirs, names, part, fd)
            dirs.append(fd)
            names.append(part)
    finally:
        for fd in dirs:
            os.close(fd)


def _inside_part(root: str, target: str) -> str | None:
    """The workspace-relative path an absolute symlink target names, if it names one inside
    (also when it reaches the workspace through other links, as tmp dirs often do); the walk
    then walks that relative path, so this is only a string and may race harmlessly."""
    for candidate in (os.path.normpath(target), os.path.realpath(target)):
        if is_inside(root, candidate):
            return os.path.relpath(candidate, root)
    return None


def _found(root: str, dirs: list[int], names: list[str], name: str, fd: int | None,
           st: os.stat_result | None = None) -> Located:
    """The Located for ``name`` in ``dirs[-1]`` (its descriptors its own), re-checked where the
    kernel says the descriptor is, so a directory renamed out of the workspace mid-walk is
    caught."""
    real = "/".join([*names, name] if name else names) or "."
    dir_fd = os.dup(dirs[-1])
    try:
        st = os.fstat(fd) if fd is not None else st
        where = _kernel_path(fd if fd is not None else dir_fd)
        if where is not None and not is_inside(root, where.removesuffix(" (deleted)")):
            raise ConfinementError(f"{real} moved out of the workspace while it was opened",
                                   hint="try again when nothing else is renaming it")
    except BaseException:
        os.close(dir_fd)
        if fd is not None:
            os.close(fd)
        raise
    return Located(dir_fd, name, real, fd, st)


def _kernel_path(fd: int) -> str | None:
    """Where the kernel says ``fd`` is; None where /proc is not mounted (the walk alone then
    confines)."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return where if where.startswith("/") else None
