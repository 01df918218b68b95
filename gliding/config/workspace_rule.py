"""Where a job may work: ``workspace_refusal``, the rule every workspace passes.

The agents and their commands may change or delete anything in their workspace, so it may not
be ``/``, a system directory, a directory everyone's files are in, a home directory or one
holding it, the data directory, nor (unless the host says ``tools.allow_home_dot_workspaces``)
a home's dot-directory (``home_dot_dir``). ``task.load_task_text`` applies it when a task file
is read, and ``daemon.compose`` again on real paths when the job is queued or starts; both
name ``WORKSPACE_HINT`` or ``HOME_DOT_HINT`` as what to do instead.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

WORKSPACE_HINT = ("give the job a directory of its own, e.g. workspace: workspace "
                  "(next to the task file)")
HOME_DOT_HINT = (f"{WORKSPACE_HINT}; a host that means it sets "
                 "tools.allow_home_dot_workspaces: true (docs/config.md)")

SYSTEM_TREES = tuple(Path(p) for p in (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr", "/System", "/Library", "/private/etc"))
"""Directories the system lives in: no workspace is one of them or inside one."""

SHARED_DIRS = tuple(Path(p) for p in (
    "/home", "/root", "/tmp", "/var", "/var/tmp", "/var/lib", "/var/log", "/var/cache",
    "/opt", "/srv", "/mnt", "/media", "/snap", "/Users", "/Volumes", "/Applications",
    "/private", "/private/tmp", "/private/var"))
"""Directories that hold everyone's files: a workspace may lie below one, not be one."""


HOMES_BELOW = (Path("/home"), Path("/Users"))
"""Directories whose children are home directories (``/home/<user>``)."""


def workspace_refusal(workspace: Path, *, home: Path | None = None,
                      data_dir: Path | None = None,
                      allow_home_dot_dirs: bool = False) -> str | None:
    """Why no job may work in ``workspace`` (absolute and resolved, symlinks followed), or None.

    The agents (and their commands, read-write) may change or delete anything in their
    workspace, so it may not be ``/``, a system directory or a directory inside one
    (``SYSTEM_TREES``), a directory everyone's files are in (``SHARED_DIRS``), the home
    directory (``home``, default: ``$HOME`` and the password database's, resolved) or a
    directory holding it, nor the data directory or a directory inside it (the archives; given
    by the job's runner). Unless ``allow_home_dot_dirs`` (``tools.allow_home_dot_workspaces``)
    it may not lie in a top-level dot-entry of a home directory either (``home_dot_dir``:
    ``~/.ssh``, ``~/.config``, ``~/.aws``, ...: credentials and configuration). A data
    directory inside the workspace is allowed: the sandbox and the file tools keep it out.
    """
    if workspace == Path(workspace.anchor):
        return "the root directory"
    for tree in SYSTEM_TREES:
        if workspace == tree or workspace.is_relative_to(tree):
            return f"a system directory ({tree})" if workspace == tree else (
                f"inside the system directory {tree}")
    if workspace in SHARED_DIRS:
        return "a directory shared by everyone's files"
    homes = (home,) if home is not None else _user_homes()
    for own in homes:
        if own == Path(own.anchor):
            continue
        if workspace == own:
            return "the home directory"
        if own.is_relative_to(workspace):
            return f"a directory that holds the home directory {own}"
    if data_dir is not None and (workspace == data_dir or workspace.is_relative_to(data_dir)):
        return f"inside the data directory {data_dir}, where the job archives are"
    dot = None if allow_home_dot_dirs else home_dot_dir(workspace, homes)
    if dot is not None:
        return (f"inside {dot}, a dot-directory of a home directory (credentials and "
                "configuration live there)")
    return None


def home_dot_dir(path: Path, homes: tuple[Path, ...]) -> Path | None:
    """The top-level dot-entry of a home directory that ``path`` is or lies in (``~/.ssh``,
    ``/home/bob/.config``), or None. Homes are ``homes``, ``/root`` and the child of
    ``/home`` or ``/Users`` that ``path`` lies in."""
    found = [*homes, Path("/root")]
    for parent in HOMES_BELOW:
        if path.is_relative_to(parent) and len(path.parts) > len(parent.parts):
            found.append(parent / path.parts[len(parent.parts)])
    for home in found:
        if home != Path(home.anchor) and path.is_relative_to(home) and path != home:
            top = path.parts[len(home.parts)]
            if top.startswith("."):
                return home / top
    return None


def _user_homes() -> tuple[Path, ...]:
    """This user's home directories, resolved: ``$HOME`` and the password database's."""
    found: list[Path] = []
    with contextlib.suppress(RuntimeError, OSError):  # no HOME and no passwd entry
        found.append(Path.home().resolve())
    with contextlib.suppress(ImportError, KeyError, OSError, RuntimeError):  # none for the uid
        import pwd  # noqa: PLC0415 - POSIX only

        found.append(Path(pwd.getpwuid(os.getuid()).pw_dir).resolve())
    return tuple(dict.fromkeys(h for h in found if h.is_absolute()))


