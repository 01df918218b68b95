"""The toolchain of the command sandbox: the interpreters and tools a command finds, read-only.

The sandbox (``sandbox.py``) mounts the system directories and the workspace; the Python a
user works with (pyenv, conda, ``~/.local``, a virtual environment outside the workspace) lives
elsewhere, and Debian has no ``python`` at all, so ``python -m pytest`` would exit 127. Here the
sandbox is given what the host resolves, and nothing that holds a secret:

- ``resolve_toolchain`` (the thin shell) reads the host: the ``PATH`` and ``VIRTUAL_ENV`` of
  Gliding's own process (``tools.toolchain.auto``; ``gliding run``: the caller's), with pyenv's
  shims replaced by the version directories they stand for (``PYENV_VERSION``, else
  ``.python-version`` from the workspace up, else ``$PYENV_ROOT/version``); the interpreters
  that ``python``, ``python3``, ``pip``, ``pip3`` and ``pytest`` run on (``toolchain_probe.py``
  asks them, and never runs what a sandboxed command could have written); a task's ``venv:``
  and ``mounts:`` where the host's ``tools.toolchain.allow`` admits their real paths; the
  operator's ``tools.toolchain.mounts``;
- ``toolchain_plan.plan`` (pure) decides what of it is mounted read-only and the sandbox's
  ``PATH``, and why anything is refused (``toolchain_plan.mount_refusal`` is the rule);
- ``Toolchain.recheck``, before every command: a mount swapped for a symlink since the check
  stops the command (bubblewrap would follow it).

The result is a ``Toolchain``, part of the frozen ``Sandbox``: its mounts and ``PATH``, the
``VIRTUAL_ENV`` and ``PYTHONUSERBASE`` it sets, a ``python`` link where only ``python3``
exists, and the line ``describe`` adds to the job's first progress line.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from gliding.config.settings import ToolSettings
from gliding.config.task import Task
from gliding.errors import TaskFileError, ToolError
from gliding.tools.toolchain_plan import (
    DEFAULT_PATH,
    Plan,
    Refusal,
    Request,
    allowed,
    homes_of,
    in_system,
    inside,
    mount_refusal,
    plan,
    pyenv_names,
)
from gliding.tools.toolchain_probe import (
    ask_pythons,
    find_command,
    python_line,
    read_small,
    real_path,
)

log = structlog.get_logger(__name__)

LINK_DIR = "/run/gliding/bin"  # in the sandbox's own /run: the `python` link, last in PATH


# --- the value the sandbox holds ------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """What a sandboxed command gets besides the system: read-only mounts, its PATH, a venv."""

    mounts: tuple[Path, ...] = ()  # read-only, at the same path
    path: tuple[str, ...] = ()  # the sandbox's PATH; empty: the filtered PATH as it is
    links: tuple[tuple[str, str], ...] = ()  # (link in the sandbox, its target)
    venv: Path | None = None
    user_base: Path | None = None  # PYTHONUSERBASE
    python: str | None = None  # what `python` runs: "python 3.11 at ~/.pyenv/versions/3.11.7"
    refused: tuple[Refusal, ...] = field(default=(), compare=False)

    def env(self, base: Mapping[str, str], *, confined: bool) -> dict[str, str]:
        """``base`` with the sandbox's PATH (unconfined: the venv's bin put first), VIRTUAL_ENV
        and PYTHONUSERBASE."""
        env = dict(base)
        if confined and self.path:
            env["PATH"] = ":".join(self.path)
        elif self.venv is not None:
            env["PATH"] = ":".join(p for p in (str(self.venv / "bin"), env.get("PATH")) if p)
        if self.venv is not None:
            env["VIRTUAL_ENV"] = str(self.venv)
        if confined and self.user_base is not None:
            env["PYTHONUSERBASE"] = str(self.user_base)
        return env

    def recheck(self) -> None:
        """Refuse when a mount is no longer the real path it was checked as: bubblewrap
        follows symlinks when it mounts, so one swapped in since ``resolve_toolchain`` (by
        whoever can write its parent) would expose what it points to. A mount that is gone
        is left out by ``--ro-bind-try``.

        Raises:
            ToolError: a mount or a directory above it is now a symlink.
        """
        for mount in self.mounts:
            now = os.path.realpath(mount)
            if now != str(mount) or os.path.islink(mount):
                raise ToolError(
                    f"the toolchain path {mount} changed since the job started: it now leads "
                    f"to {now}; the command was not run",
                    hint="find out who replaced it; restart the job to check the toolchain "
                         "again")

    def bwrap_args(self) -> list[str]:
        args: list[str] = []
        for mount in self.mounts:
            args += ["--ro-bind-try", str(mount), str(mount)]
        for link, target in self.links:
            args += ["--symlink", target, link]
        return args

    def describe(self) -> str:
        """E.g. ``toolchain python 3.11 at ~/.pyenv/versions/3.11.7, venv /w/.venv, 2 paths
        read-only``."""
        parts = [self.python or "no python"]
        if self.venv is not None:
            parts.append(f"venv {self.venv}")
        if self.mounts:
            parts.append(f"{len(self.mounts)} path{'s' if len(self.mounts) != 1 else ''} "
                         "read-only")
        return "toolchain " + ", ".join(parts)


# --- the shell: what the host resolves -----------------------------------------------------


def resolve_toolchain(settings: ToolSettings, task: Task | None, *, data_dir: Path,
                      environ: Mapping[str, str], home: Path | None = None) -> Toolchain:
    """The toolchain of ``task``'s commands on this host, ``environ`` being Gliding's own
    environment (``gliding run``: the caller's).

    Nothing a sandboxed command can write (the workspace, the data directory) is ever run
    here: an interpreter there, or one whose ``pyvenv.cfg`` points there, is not asked; a
    venv inside the workspace is read as text, and only its base, outside, is asked.

    Raises:
        TaskFileError: the task's ``venv:`` or ``mounts:`` names a path this host's
            ``tools.toolchain.allow`` does not admit, that does not exist, that is not a
            virtual environment (``venv:``), or that may never be mounted (``mount_refusal``).
    """
    conf = settings.toolchain
    home = home if home is not None else _home()
    homes = _homes(home)
    data = Path(os.path.realpath(data_dir))
    workspace = Path(os.path.realpath(task.workspace)) if task is not None else Path("/nonexistent")
    writable = (workspace, data)  # what a sandboxed command (this job's or a past one's) wrote
    refuse = functools.partial(mount_refusal, home=home, data_dir=data, workspace=workspace,
                               homes=homes)
    task_venv, task_mounts = (_task_paths(task, conf.allow, refuse) if task is not None
                              else (None, ()))
    if task_venv is None and conf.auto and environ.get("VIRTUAL_ENV"):
        task_venv = real_path(environ["VIRTUAL_ENV"])
    source = environ.get("PATH", DEFAULT_PATH) if "PATH" in settings.env_allow else DEFAULT_PATH
    entries = _resolve_path(source, environ if conf.auto else {}, workspace)
    if not conf.auto:  # only what is there anyway: no interpreter elsewhere is asked
        entries = [e for e in entries if in_system(e) or inside(e, workspace)]
    extra = tuple(real_path(os.path.expanduser(m)) for m in conf.mounts) + task_mounts
    venvs = _venv_dirs([*entries, *extra, *([task_venv] if task_venv else [])], homes, home)
    refuse = functools.partial(refuse, venvs=venvs)
    search = ([task_venv / "bin"] if task_venv is not None else []) + list(entries)
    pythons = ask_pythons(search, task_venv, refuse, home, writable)
    venvs = _venv_dirs([p for py in pythons for p in py.prefixes], homes, home, venvs)
    request = Request(
        path=tuple(entries), home=home, data_dir=data, workspace=workspace, venv=task_venv,
        pythons=pythons, mount_path=conf.auto, mounts=extra, homes=homes, venvs=venvs)
    decided = plan(request)
    # a mount is a real path as it was checked, else recheck() would stop every command
    moved = [m for m in decided.mounts if real_path(m) != m]
    decided = Plan(tuple(m for m in decided.mounts if m not in moved), decided.path,
                   decided.refused + tuple(
                       Refusal(m, "mount", f"leads to {real_path(m)} (a symlink)")
                       for m in moved), decided.user_base)
    path = [str(p) for p in decided.path]
    links: list[tuple[str, str]] = []
    if find_command("python", decided.path) is None and (
            py3 := find_command("python3", decided.path)):
        links.append((f"{LINK_DIR}/python", str(py3)))
        path.append(LINK_DIR)
    toolchain = Toolchain(
        mounts=decided.mounts, path=tuple(path), links=tuple(links),
        venv=task_venv if task_venv is not None and not any(
            f.what == "venv" for f in decided.refused) else None,
        user_base=decided.user_base, python=python_line(decided.path, pythons),
        refused=decided.refused)
    log.debug("sandbox.toolchain", mounts=[str(m) for m in toolchain.mounts], path=path,
              refused=[str(f) for f in toolchain.refused])
    return toolchain


def _home() -> Path | None:
    try:
        return Path(os.path.realpath(Path.home()))
    except (RuntimeError, OSError):  # no HOME and no passwd entry
        return None


def _homes(home: Path | None) -> tuple[Path, ...]:
    """Every home directory of the password database and ``$HOME``, real paths."""
    found = [home, Path(os.environ["HOME"]) if os.environ.get("HOME") else None]
    try:
        import pwd  # noqa: PLC0415 - POSIX only

        found += [Path(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir]
    except (ImportError, OSError):
        pass
    return tuple(dict.fromkeys(real_path(h) for h in found if h is not None and h.is_absolute()))


def _venv_dirs(paths: Iterable[Path], homes: Sequence[Path], home: Path | None,
               known: Sequence[Path] = ()) -> tuple[Path, ...]:
    """The directories below a home, from each of ``paths`` up, that hold a ``pyvenv.cfg``."""
    found = list(known)
    for path in paths:
        for h in homes_of(path, home, homes):
            if not path.is_relative_to(h):
                continue
            for folder in (path, *path.parents):
                if folder == h or not folder.is_relative_to(h):
                    break
                if (folder / "pyvenv.cfg").is_file():
                    found.append(folder)
    return tuple(dict.fromkeys(found))


_HINT = ("the host decides which paths a task may mount: add the path (or a pattern such as "
         "/srv/venvs/*) to tools.toolchain.allow in its config.yaml "
         "(GLIDING_TOOLS__TOOLCHAIN__ALLOW); docs/tools.md, 'The toolchain'")


def _real_pattern(pattern: str) -> str:
    """An allow entry with its literal leading components resolved (symlinks followed), as
    the real paths it is matched against are."""
    parts = Path(os.path.normpath(os.path.expanduser(pattern))).parts
    glob = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")),
                len(parts))
    if not parts or glob == 0:
        return pattern
    return str(Path(real_path(Path(*parts[:glob])), *parts[glob:]))


def _task_paths(task: Task, allow: Sequence[str], refuse: functools.partial[str | None]
                ) -> tuple[Path | None, tuple[Path, ...]]:
    """The task's venv and mounts, real paths, once this host admits them: the real path
    (symlinks followed) must match an allow entry (its own symlinks followed too)."""
    patterns = [_real_pattern(p) for p in allow]

    def admit(key: str, given: Path) -> Path:
        if not given.is_absolute() or ".." in given.parts:
            raise TaskFileError(f"{task.source}: {key}: {given} is not an absolute path "
                                "without '..'")
        real = real_path(given)
        if not allowed(real, patterns):
            held = f"it allows only {', '.join(allow)}" if allow else "it allows none"
            shown = given if real == given else f"{given} (that is {real})"
            raise TaskFileError(f"{task.source}: {key}: {shown} is not allowed on this host "
                                f"(tools.toolchain.allow: {held})", hint=_HINT)
        if not real.exists():
            raise TaskFileError(f"{task.source}: {key}: {given} does not exist on this host")
        is_venv = (real / "pyvenv.cfg").is_file()
        why = refuse(real, venvs=(real,) if is_venv else ())
        if why is not None:
            raise TaskFileError(f"{task.source}: {key}: {given} is {real}, which is never "
                                f"mounted: {why}")
        return real

    venv = admit("venv", task.venv) if task.venv is not None else None
    if venv is not None and not ((venv / "pyvenv.cfg").is_file()
                                 or (venv / "conda-meta").is_dir()):
        raise TaskFileError(f"{task.source}: venv: {task.venv} is not a virtual environment "
                            "(no pyvenv.cfg)", hint="python -m venv DIR makes one")
    return venv, tuple(admit(f"mounts[{i}]", m) for i, m in enumerate(task.mounts))


def _resolve_path(source: str, environ: Mapping[str, str], workspace: Path) -> list[Path]:
    """The PATH entries, absolute and real, pyenv's shims replaced by the versions they run
    (only with ``environ``: tools.toolchain.auto), pyenv's own commands left out."""
    roots = {p for p in (_pyenv_root(environ.get("PYENV_ROOT")),) if p is not None}
    entries = [real_path(e) for e in source.split(":") if e and os.path.isabs(e)]
    roots |= {e.parent for e in entries if e.name == "shims" and _pyenv_root(e.parent)}
    out: list[Path] = []
    for entry in entries:
        root = next((r for r in roots if inside(entry, r)), None)
        if root is None or inside(entry, root / "versions"):
            out.append(entry)
        elif entry == root / "shims" and environ:
            out += _pyenv_bins(root, environ, workspace)
        # else pyenv's own commands (bin, plugins): they need the whole root
    return out


def _pyenv_root(path: str | Path | None) -> Path | None:
    if not path:
        return None
    root = real_path(path)
    return root if (root / "versions").is_dir() and (root / "shims").is_dir() else None


def _pyenv_bins(root: Path, environ: Mapping[str, str], workspace: Path) -> list[Path]:
    local = None
    for folder in (workspace, *workspace.parents):
        local = read_small(folder / ".python-version")
        if local is not None:
            break
    versions = root / "versions"
    bins = []
    for name in pyenv_names(environ.get("PYENV_VERSION"), local,
                            read_small(root / "version")):
        if name == "system":
            continue
        found = real_path(versions / name)
        if not found.is_dir():  # pyenv takes a prefix too: 3.11 is the newest 3.11.x
            found = max((p for p in _listdir(versions) if p.name.startswith(f"{name}.")),
                        key=lambda p: _natural(p.name), default=found)
        if found.is_relative_to(real_path(versions)) and (found / "bin").is_dir():
            bins.append(found / "bin")
    return bins


def _natural(name: str) -> list[tuple[int, str]]:
    return [(int(part), "") if part.isdigit() else (-1, part)
            for part in re.split(r"(\d+)", name)]


def _listdir(folder: Path) -> list[Path]:
    try:
        return [folder / n for n in os.listdir(folder)]
    except OSError:
        return []


