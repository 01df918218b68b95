"""The toolchain of the command sandbox: the interpreters and tools a command finds, read-only.

The sandbox (``sandbox.py``) mounts the system directories and the workspace; the Python a
user works with (pyenv, conda, ``~/.local``, a virtual environment outside the workspace) lives
elsewhere, and Debian has no ``python`` at all, so ``python -m pytest`` would exit 127. Here the
sandbox is given what the host resolves, and nothing that holds a secret:

- ``resolve_toolchain`` (the thin shell) reads the host: the ``PATH`` and ``VIRTUAL_ENV`` of
  Gliding's own process (``tools.toolchain.auto``; ``gliding run``: the caller's), with pyenv's
  shims replaced by the version directories they stand for (``PYENV_VERSION``, else
  ``.python-version`` from the workspace up, else ``$PYENV_ROOT/version``); the interpreters
  that ``python``, ``python3``, ``pip``, ``pip3`` and ``pytest`` run on, asked once each
  (``-I -S``, from ``/``) for ``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix`` and the
  user site, and believed only where each prefix is an installation; a task's ``venv:`` and
  ``mounts:`` where the host's ``tools.toolchain.allow`` admits their real paths; the
  operator's ``tools.toolchain.mounts``. Nothing a sandboxed command could have written (the
  workspace, the data directory) is ever run on the host: a venv there is read as text
  (``pyvenv.cfg``) and only its base, outside, is asked;
- ``plan`` (pure) decides what of it is mounted read-only and the sandbox's ``PATH``, and why
  anything is refused; ``mount_refusal`` is the rule: never ``/``, a home directory (every one
  of the host) or a directory holding one, below a home nothing but a toolchain's directories
  (``toolchain_shape``: pyenv versions, ``~/.local/bin``, ``~/.local/lib/pythonX.Y``, venvs,
  conda environments), never a credential or configuration directory (``SECRETS_IN_HOME``,
  ``SECRET_NAMES``), the data directory, a directory holding the workspace, ``/etc``,
  ``/proc`` and the like;
- ``Toolchain.recheck``, before every command: a mount swapped for a symlink since the check
  stops the command (bubblewrap would follow it).

The result is a ``Toolchain``, part of the frozen ``Sandbox``: its mounts and ``PATH``, the
``VIRTUAL_ENV`` and ``PYTHONUSERBASE`` it sets, a ``python`` link where only ``python3``
exists, and the line ``describe`` adds to the job's first progress line.

Past 600 lines: the rule, the host read and the probe's distrust of what it runs are one
threat model, read and reviewed together.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from gliding.config.settings import ToolSettings
from gliding.config.task import Task
from gliding.errors import TaskFileError, ToolError

log = structlog.get_logger(__name__)

# what the sandbox mounts whatever the toolchain (sandbox.py binds these itself)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
LINK_DIR = "/run/gliding/bin"  # in the sandbox's own /run: the `python` link, last in PATH
COMMANDS = ("python", "python3", "pip", "pip3", "pytest")  # whose interpreters are asked
PROBE_TIMEOUT_S = 10.0

SECRETS_IN_HOME = (
    ".ssh", ".aws", ".azure", ".config", ".docker", ".gnupg", ".kube", ".netrc",
    ".git-credentials", ".gitconfig", ".pypirc", ".npmrc", ".yarnrc", ".pgpass", ".my.cnf",
    ".password-store", ".vault-token", ".terraform.d", ".oci", ".m2", ".gradle", ".gliding",
    ".mozilla", ".thunderbird", ".local/share/keyrings", ".cache/huggingface",
    ".cargo/credentials", ".cargo/credentials.toml", ".bash_history", ".zsh_history",
    ".python_history",
)
"""Paths under the home directory that hold credentials, configuration or history: never
mounted, nor anything inside them or holding them (``~/.local`` holds ``~/.local/share/keyrings``,
so only ``~/.local/bin`` and ``~/.local/lib/pythonX.Y`` can be)."""

SECRET_NAMES = frozenset((
    ".ssh", ".aws", ".azure", ".config", ".docker", ".gnupg", ".kube", ".netrc",
    ".git-credentials", ".pypirc", ".npmrc", ".pgpass", ".password-store", ".vault-token",
    ".gliding",
))
"""Directory names refused anywhere in a path (another user's home, another project's data)."""

FORBIDDEN_TREES = tuple(Path(p) for p in (
    "/etc", "/proc", "/sys", "/dev", "/run", "/boot", "/var/run", "/var/log", "/var/lib",
    "/var/mail", "/var/spool", "/var/backups", "/var/cache", "/private/etc",
    "/private/var/run"))
"""System trees nothing is mounted from (what the sandbox needs of /etc it binds itself)."""

SHARED_DIRS = tuple(Path(p) for p in (
    "/home", "/root", "/tmp", "/var", "/var/tmp", "/srv", "/mnt", "/media", "/snap", "/Users",
    "/Volumes", "/private", "/private/tmp", "/private/var"))
"""Directories everyone's files are in: something below one may be mounted, never it whole."""

HOMES_BELOW = (Path("/home"), Path("/Users"))
"""Directories whose every child is taken for a home directory (with ``/root``, the user's
home and every home of the password database)."""

_CONDA = re.compile(r"(mini|ana)conda\d*|miniforge\d*|mambaforge\d*|micromamba|\.conda|conda")
_PYTHON_LIB = re.compile(r"python\d+\.\d+t?")
IN_HOME = ("toolchain directories only: ~/.pyenv/versions/<v>, ~/.local/bin, "
           "~/.local/lib/pythonX.Y, a virtual environment, a conda environment or a conda "
           "installation's bin, lib and include")


# --- the pure part ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Python:
    """One interpreter as its probe saw it."""

    command: Path  # as found: /x/.venv/bin/python, /usr/bin/python3
    prefix: Path  # sys.prefix (the venv, for a venv's python); real paths all
    base_prefix: Path  # sys.base_prefix: the installation
    version: str  # "3.11"
    exec_prefix: Path | None = None  # sys.exec_prefix, where it differs from prefix
    user_lib: Path | None = None  # ~/.local/lib/python3.11, where it exists
    user_base: Path | None = None  # ~/.local: PYTHONUSERBASE, so the sandbox finds user_lib

    @property
    def prefixes(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(p for p in (self.prefix, self.base_prefix, self.exec_prefix)
                                   if p is not None))


@dataclass(frozen=True)
class Refusal:
    """A path the sandbox does not get, and why."""

    path: Path
    what: str  # "PATH entry", "venv", "prefix of /x/bin/python", "user site", "mount"
    why: str

    def __str__(self) -> str:
        return f"{self.path} ({self.what}): {self.why}"


@dataclass(frozen=True)
class Request:
    """What ``plan`` decides from; every path absolute, symlinks resolved by the caller."""

    path: tuple[Path, ...]  # the PATH, in order, pyenv shims already replaced
    home: Path | None
    data_dir: Path
    workspace: Path
    venv: Path | None = None
    pythons: tuple[Python, ...] = ()
    mounts: tuple[Path, ...] = ()  # the operator's and the task's (allowed) extra paths
    mount_path: bool = True  # False (tools.toolchain.auto off): PATH entries are not mounted
    homes: tuple[Path, ...] = ()  # every home directory of the host besides ``home``
    venvs: tuple[Path, ...] = ()  # directories the caller found a pyvenv.cfg in


@dataclass(frozen=True)
class Plan:
    mounts: tuple[Path, ...]  # read-only, at the same path; none inside another
    path: tuple[Path, ...]  # the sandbox's PATH
    refused: tuple[Refusal, ...]
    user_base: Path | None = None  # PYTHONUSERBASE, when a user site is mounted


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _system(path: Path) -> bool:
    return any(_inside(path, Path(d)) for d in SYSTEM_DIRS)


def homes_of(path: Path, home: Path | None, homes: Iterable[Path] = ()) -> tuple[Path, ...]:
    """The home directories the rule guards for ``path``: the user's (``home``), ``homes``
    (the password database's), ``/root``, and the child of ``/home`` or ``/Users`` that
    ``path`` lies in; never ``/`` nor a system directory (``bin``'s home is ``/bin``)."""
    found = [home, *homes, Path("/root")]
    for parent in HOMES_BELOW:
        if path.is_relative_to(parent) and len(path.parts) > len(parent.parts):
            found.append(parent / path.parts[len(parent.parts)])
    return tuple(dict.fromkeys(
        h for h in found if h is not None and h.is_absolute() and h != Path(h.anchor)
        and (h not in SHARED_DIRS or h == Path("/root")) and not _system(h)
        and not any(_inside(h, t) for t in FORBIDDEN_TREES)))


def toolchain_shape(path: Path, home: Path, venvs: Iterable[Path] = ()) -> bool:
    """Whether ``path``, below the home directory ``home``, is a toolchain directory (or lies
    in one): ``~/.pyenv/versions/<v>``, ``~/.local/bin``, ``~/.local/lib/pythonX.Y``, uv's
    Pythons, ``~/.cargo/bin``, ``~/.rustup/toolchains/<x>``, a conda installation's
    ``envs/<name>``, ``bin``, ``lib`` or ``include``, or one of ``venvs`` (directories the
    caller found a ``pyvenv.cfg`` in) below the home."""
    if any(_inside(path, v) and v != home and v.is_relative_to(home) for v in venvs):
        return True
    rel = path.relative_to(home).parts
    match rel:
        case (".pyenv", "versions", _, *_) | (".local", "bin", *_) | (".cargo", "bin", *_):
            return True
        case (".rustup", "toolchains", _, *_) | (".local", "share", "uv", "python", _, *_):
            return True
        case (".local", "lib", lib, *_):
            return bool(_PYTHON_LIB.fullmatch(lib))
        case (conda, "envs", _, *_):
            return bool(_CONDA.fullmatch(conda))
        case (conda, "bin" | "lib" | "include", *_):
            return bool(_CONDA.fullmatch(conda))
    return False


def conda_root(path: Path, homes: Iterable[Path]) -> bool:
    """Whether ``path`` is a conda installation's root right below a home (``~/miniconda3``):
    of it only ``bin``, ``lib`` and ``include`` are mounted (it holds ``.condarc``, the
    package cache and every other environment)."""
    return bool(_CONDA.fullmatch(path.name)) and path.parent in homes


def mount_refusal(path: Path, *, home: Path | None, data_dir: Path | None,
                  workspace: Path | None, homes: Iterable[Path] = (),
                  venvs: Iterable[Path] = ()) -> str | None:
    """Why ``path`` (absolute, symlinks resolved) may not be mounted in the sandbox, or None.

    Below any home directory (``homes_of``) only toolchain directories (``toolchain_shape``;
    ``venvs``: directories the caller found a ``pyvenv.cfg`` in) may be mounted."""
    path = Path(os.path.normpath(path))
    if not path.is_absolute():
        return "not an absolute path"
    if path == Path(path.anchor):
        return "the root directory"
    for tree in FORBIDDEN_TREES:
        if _inside(path, tree):
            return f"inside {tree}, which the sandbox keeps out"
    if path in SHARED_DIRS:
        return "a directory shared by everyone's files"
    if data_dir is not None and (_inside(path, data_dir) or data_dir.is_relative_to(path)):
        return f"{'inside' if _inside(path, data_dir) else 'holds'} the data directory {data_dir}"
    guarded = homes_of(path, home, homes)
    for h in guarded:
        if path == h:
            return "the home directory" if h == home else f"the home directory {h}"
        if h.is_relative_to(path):
            return f"holds the home directory {h}"
    if home is not None and home in guarded:
        for name in SECRETS_IN_HOME:
            secret = home / name
            if _inside(path, secret) or secret.is_relative_to(path):
                return (f"{'inside' if _inside(path, secret) else 'holds'} ~/{name}, "
                        "which holds credentials or configuration")
    named = SECRET_NAMES.intersection(path.parts)
    if named:
        return (f"inside a {min(named)} directory, which holds credentials, configuration "
                "or Gliding's data")
    venvs = tuple(venvs)
    for h in guarded:
        if path.is_relative_to(h) and not toolchain_shape(path, h, venvs):
            where = "~" if h == home else str(h)
            return f"inside the home directory {where}, of which are mounted {IN_HOME}"
    if workspace is not None and workspace != path and workspace.is_relative_to(path):
        return "holds the workspace (its neighbours would be visible)"
    return None


def plan(request: Request) -> Plan:
    """The read-only mounts, the PATH and the refusals for ``request``; reads nothing."""
    r = request
    mounts: list[Path] = []
    refused: list[Refusal] = []

    def take(path: Path, what: str, *, mount: bool = True) -> bool:
        path = Path(os.path.normpath(path))
        why = mount_refusal(path, home=r.home, data_dir=r.data_dir, workspace=r.workspace,
                            homes=r.homes, venvs=r.venvs)
        if why is not None:
            refused.append(Refusal(path, what, why))
            return False
        if _system(path) or _inside(path, r.workspace):  # in the sandbox already
            return True
        if mount:
            mounts.append(path)
        return mount

    path: list[Path] = []
    if r.venv is not None and take(r.venv, "venv"):
        path.append(Path(os.path.normpath(r.venv / "bin")))
    for entry in r.path:
        entry = Path(os.path.normpath(entry))
        if entry not in path and take(entry, "PATH entry", mount=r.mount_path):
            path.append(entry)
    user_base = None
    for python in r.pythons:
        for prefix in python.prefixes:
            if conda_root(prefix, homes_of(prefix, r.home, r.homes)):  # its parts, not it
                for part in ("bin", "lib", "include"):
                    take(prefix / part, f"prefix of {python.command}")
            else:
                take(prefix, f"prefix of {python.command}")
        if python.user_lib is not None and take(python.user_lib, "user site"):
            user_base = user_base or python.user_base
    for extra in r.mounts:
        take(extra, "mount")
    unique = {(f.path, f.what): f for f in refused}
    return Plan(_outermost(mounts), tuple(path), tuple(unique.values()), user_base)


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """``paths`` without duplicates and without those inside another, sorted."""
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not any(_inside(path, outer) for outer in kept):
            kept.append(path)
    return tuple(kept)


def allowed(path: Path, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (absolute, without ``..``) is one of ``patterns`` or lies below one.

    A pattern is an absolute path (``~`` expanded), matched component by component: a
    component may be a shell pattern (``*``, ``?``, ``[...]``) and stands for exactly one
    component of ``path``, never for ``/`` nor ``..``. ``/`` itself admits nothing."""
    if not path.is_absolute() or ".." in path.parts:
        return False
    parts = Path(os.path.normpath(path)).parts
    for pattern in patterns:
        pat = Path(os.path.normpath(os.path.expanduser(pattern)))
        if not pat.is_absolute() or pat == Path(pat.anchor) or ".." in pat.parts:
            continue
        head = parts[:len(pat.parts)]
        if len(head) == len(pat.parts) and all(
                fnmatch.fnmatchcase(part, want)
                for part, want in zip(head, pat.parts, strict=True)):
            return True
    return False


def pyenv_names(env_version: str | None, local: str | None, global_: str | None) -> list[str]:
    """The pyenv versions a shim runs, in order: ``PYENV_VERSION`` (``a:b``), else the nearest
    ``.python-version``, else ``$PYENV_ROOT/version``; each file a list of names, ``#`` lines
    skipped. ``system`` stands for the PATH after the shims."""
    if env_version:
        return [v for v in env_version.split(":") if v.strip()]
    for text in (local, global_):
        if text is not None:
            names = [w for line in text.splitlines() if not line.lstrip().startswith("#")
                     for w in line.split()]
            if names:
                return names
    return ["system"]


# --- the value the sandbox holds ------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """What a sandboxed command gets besides the system: read-only mounts, its PATH, a venv."""

    mounts: tuple[Path, ...] = ()  # read-only, at the same path
    path: tuple[str, ...] = ()  # the sandbox's PATH; empty: the filtered PATH as it is
    links: tuple[tuple[str, str], ...] = ()  # (link in the sandbox, its target)
    venv: Path | None = None
    user_base: Path | None = None  # PYTHONUSERBASE
    python: str | None = None  # what `python` runs: "python 3.11 at /root/.pyenv/versions/3.11.7"
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
        """E.g. ``toolchain python 3.11 at /root/.pyenv/versions/3.11.7, venv /w/.venv, 2 paths
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
        task_venv = _real(environ["VIRTUAL_ENV"])
    source = environ.get("PATH", DEFAULT_PATH) if "PATH" in settings.env_allow else DEFAULT_PATH
    entries = _resolve_path(source, environ if conf.auto else {}, workspace)
    if not conf.auto:  # only what is there anyway: no interpreter elsewhere is asked
        entries = [e for e in entries if _system(e) or _inside(e, workspace)]
    extra = tuple(_real(os.path.expanduser(m)) for m in conf.mounts) + task_mounts
    venvs = _venv_dirs([*entries, *extra, *([task_venv] if task_venv else [])], homes, home)
    refuse = functools.partial(refuse, venvs=venvs)
    search = ([task_venv / "bin"] if task_venv is not None else []) + list(entries)
    pythons = _pythons(search, task_venv, refuse, home, writable)
    venvs = _venv_dirs([p for py in pythons for p in py.prefixes], homes, home, venvs)
    request = Request(
        path=tuple(entries), home=home, data_dir=data, workspace=workspace, venv=task_venv,
        pythons=pythons, mount_path=conf.auto, mounts=extra, homes=homes, venvs=venvs)
    decided = plan(request)
    # a mount is a real path as it was checked, else recheck() would stop every command
    moved = [m for m in decided.mounts if _real(m) != m]
    decided = Plan(tuple(m for m in decided.mounts if m not in moved), decided.path,
                   decided.refused + tuple(Refusal(m, "mount", f"leads to {_real(m)} (a symlink)")
                                           for m in moved), decided.user_base)
    path = [str(p) for p in decided.path]
    links: list[tuple[str, str]] = []
    if _find("python", decided.path) is None and (py3 := _find("python3", decided.path)):
        links.append((f"{LINK_DIR}/python", str(py3)))
        path.append(LINK_DIR)
    toolchain = Toolchain(
        mounts=decided.mounts, path=tuple(path), links=tuple(links),
        venv=task_venv if task_venv is not None and not any(
            f.what == "venv" for f in decided.refused) else None,
        user_base=decided.user_base, python=_python_line(decided.path, pythons),
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
    return tuple(dict.fromkeys(_real(h) for h in found if h is not None and h.is_absolute()))


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


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
    return str(Path(_real(Path(*parts[:glob])), *parts[glob:]))


def _task_paths(task: Task, allow: Sequence[str], refuse: functools.partial[str | None]
                ) -> tuple[Path | None, tuple[Path, ...]]:
    """The task's venv and mounts, real paths, once this host admits them: the real path
    (symlinks followed) must match an allow entry (its own symlinks followed too)."""
    patterns = [_real_pattern(p) for p in allow]

    def admit(key: str, given: Path) -> Path:
        if not given.is_absolute() or ".." in given.parts:
            raise TaskFileError(f"{task.source}: {key}: {given} is not an absolute path "
                                "without '..'")
        real = _real(given)
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
    entries = [_real(e) for e in source.split(":") if e and os.path.isabs(e)]
    roots |= {e.parent for e in entries if e.name == "shims" and _pyenv_root(e.parent)}
    out: list[Path] = []
    for entry in entries:
        root = next((r for r in roots if _inside(entry, r)), None)
        if root is None or _inside(entry, root / "versions"):
            out.append(entry)
        elif entry == root / "shims" and environ:
            out += _pyenv_bins(root, environ, workspace)
        # else pyenv's own commands (bin, plugins): they need the whole root
    return out


def _pyenv_root(path: str | Path | None) -> Path | None:
    if not path:
        return None
    root = _real(path)
    return root if (root / "versions").is_dir() and (root / "shims").is_dir() else None


def _pyenv_bins(root: Path, environ: Mapping[str, str], workspace: Path) -> list[Path]:
    local = None
    for folder in (workspace, *workspace.parents):
        local = _read_small(folder / ".python-version")
        if local is not None:
            break
    versions = root / "versions"
    bins = []
    for name in pyenv_names(environ.get("PYENV_VERSION"), local,
                            _read_small(root / "version")):
        if name == "system":
            continue
        found = _real(versions / name)
        if not found.is_dir():  # pyenv takes a prefix too: 3.11 is the newest 3.11.x
            found = max((p for p in _listdir(versions) if p.name.startswith(f"{name}.")),
                        key=lambda p: _natural(p.name), default=found)
        if found.is_relative_to(_real(versions)) and (found / "bin").is_dir():
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


def _read_small(path: Path, limit: int = 4096) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return None


def _find(name: str, path: Sequence[Path]) -> Path | None:
    for folder in path:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


_SHEBANG_EXEC = re.compile(r"^'''exec' (\S+)", re.MULTILINE)


def _interpreter_of(script: Path, search: Sequence[Path]) -> Path | None:
    """The interpreter a script's ``#!`` line names (``env NAME`` looked up in ``search``;
    pip's ``'''exec'`` form for long paths too)."""
    head = _read_small(script, 1024)
    if head is None or not head.startswith("#!"):
        return None
    words = head[2:].splitlines()[0].split()
    if not words:
        return None
    if words[0] == "/bin/sh" and (long := _SHEBANG_EXEC.search(head)):
        return Path(long.group(1))
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return _find(words[-1], search)
    return Path(words[0]) if "python" in os.path.basename(words[0]) else None


def _pythons(search: Sequence[Path], venv: Path | None, refuse: functools.partial[str | None],
             home: Path | None, writable: Sequence[Path]) -> tuple[Python, ...]:
    """Ask each interpreter the commands in ``COMMANDS`` run on (the first of each name in
    ``search``) and the venv's; one in a place never mounted is not run, nor one a sandboxed
    command could have written (``writable``): of a venv there only its base is asked."""
    found: list[Path] = [venv / "bin" / "python"] if venv is not None else []
    for name in COMMANDS:
        command = _find(name, search)
        if command is None:
            continue
        if name.startswith("python"):
            found.append(command)
        elif _untrusted(command, writable) is None:  # a script's #! names its interpreter
            found.append(_interpreter_of(command, search) or command)
        elif _venv_of(command) is not None:  # pip or pytest of a venv the job could write
            found.append(command.parent / "python")
    pythons: dict[Path, Python] = {}  # by the command as found: a venv's python links to its base
    for command in found:
        if command in pythons:
            continue
        why = _untrusted(command, writable)
        probed = (_asked(command, refuse, home) if why is None
                  else _through_base(command, refuse, home, writable))
        if why is not None:
            log.info("sandbox.toolchain.not_run", command=str(command), why=why,
                     base=None if probed is None else str(probed.base_prefix))
        if probed is not None:
            pythons[command] = probed
    return tuple(pythons.values())


def _venv_of(command: Path) -> Path | None:
    """The venv ``command`` (``<venv>/bin/<name>``, as found, links not followed) is in."""
    venv = Path(os.path.normpath(command.parent.parent))
    return venv if (venv / "pyvenv.cfg").is_file() else None


def _venv_config(venv: Path) -> dict[str, list[str]]:
    """``pyvenv.cfg``'s ``key = value`` lines, read as text (nothing of the venv runs): every
    value of each key, in order (Python reads the first ``home``; all are checked)."""
    text = _read_small(venv / "pyvenv.cfg", 1 << 20) or ""
    config: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config.setdefault(key.strip().lower(), []).append(value.strip())
    return config


def _untrusted(command: Path, writable: Sequence[Path]) -> str | None:
    """Why ``command`` must not run on the host: it, its real path, or the ``home`` of a
    ``pyvenv.cfg`` it reads (next to it, or one directory up) lies where a sandboxed command
    can write. None: it may be asked."""
    real = _real(command)
    seen: list[tuple[str, Path]] = [("it", command), ("its real path", real),
                                    ("its directory", _real(command.parent))]
    for folder in dict.fromkeys((command.parent, command.parent.parent, real.parent,
                                 real.parent.parent)):
        if (folder / "pyvenv.cfg").is_file():
            seen.append(("its pyvenv.cfg", _real(folder / "pyvenv.cfg")))
            for base in _venv_config(folder).get("home", []):
                if not os.path.isabs(base):  # relative to whatever cwd reads it: refused
                    return f"the home of its pyvenv.cfg, {base!r}, is not an absolute path"
                seen.append(("the home of its pyvenv.cfg", _real(base)))
    for what, path in seen:
        for root in writable:
            if _inside(path, root):
                return f"{what}, {path}, lies in {root}, which sandboxed commands write"
    return None


def _through_base(command: Path, refuse: functools.partial[str | None], home: Path | None,
                  writable: Sequence[Path]) -> Python | None:
    """``command`` of a venv a sandboxed command could write, known without running it: its
    ``pyvenv.cfg`` read as text, the base interpreter its ``home`` names asked where that
    lies outside what commands write; the venv itself is in the workspace already."""
    venv = _venv_of(command)
    if venv is None:
        return None
    config = _venv_config(venv)
    base_bin = next(iter(config.get("home", [])), None)
    if not base_bin or not os.path.isabs(base_bin):
        return None
    version = next(iter(config.get("version", config.get("version_info", []))), "")
    major_minor = ".".join(version.split(".")[:2])
    names = [f"python{major_minor}"] if major_minor else []
    base = _find_first([*names, "python3", "python"], Path(base_bin))
    if base is None or _untrusted(base, writable) is not None:
        return None
    probed = _asked(base, refuse, home)
    if probed is None:
        return None
    return Python(command, _real(venv), probed.base_prefix, probed.version,
                  probed.exec_prefix if probed.exec_prefix != probed.base_prefix else None,
                  probed.user_lib, probed.user_base)


def _find_first(names: Sequence[str], folder: Path) -> Path | None:
    for name in names:
        if (found := _find(name, [folder])) is not None:
            return found
    return None


def _asked(command: Path, refuse: functools.partial[str | None],
           home: Path | None) -> Python | None:
    """``command``'s probe, where its directory may be mounted and what it says is
    plausible; a venv's prefix is its directory, whatever it says."""
    real = _real(command)
    if not real.is_file() or "python" not in real.name:
        return None
    if refuse(_real(command.parent)) is not None or refuse(real.parent) is not None:
        return None  # plan refuses its directory; it is not run on the host either
    probed = _probe(str(command), str(real), real.stat().st_mtime_ns, str(home or ""))
    if probed is None:
        return None
    venv = _venv_of(command)
    if venv is not None:
        probed = Python(command, _real(venv), probed.base_prefix, probed.version,
                        probed.exec_prefix, probed.user_lib, probed.user_base)
    return _plausible(probed, real)


def _plausible(python: Python, real: Path) -> Python | None:
    """``python`` as its probe reported it, where every prefix is an installation's (it holds
    ``lib/pythonX.Y``, or the interpreter is in its ``bin``) and the user site is
    ``<user base>/lib/pythonX.Y``; None (and a warning) where a prefix is not."""
    if not re.fullmatch(r"\d+\.\d+", python.version):
        return None
    for prefix in python.prefixes:
        if not (real.parent == prefix / "bin"
                or (prefix / "lib" / f"python{python.version}").is_dir()):
            log.warning("sandbox.toolchain.implausible_prefix", command=str(python.command),
                        prefix=str(prefix))
            return None
    if python.user_lib is not None and (
            python.user_base is None
            or python.user_lib != python.user_base / "lib" / f"python{python.version}"):
        return Python(python.command, python.prefix, python.base_prefix, python.version,
                      python.exec_prefix)
    if python.user_lib is None or python.user_base is None:
        return python
    return Python(python.command, python.prefix, python.base_prefix, python.version,
                  python.exec_prefix, _real(python.user_lib), _real(python.user_base))


_PROBE = ("import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix if "
          "hasattr(sys, 'base_prefix') else sys.prefix, sys.exec_prefix, "
          "'%d.%d' % sys.version_info[:2], site.getuserbase(), "
          "site.getusersitepackages()]))")


@functools.lru_cache(maxsize=64)
def _probe(command: str, real: str, mtime_ns: int, home: str) -> Python | None:
    """``command``'s prefixes, version and user site; asked once per binary and version of it.
    ``-I -S``, cwd ``/`` and a minimal environment: no PYTHON* variable, user site, ``.pth``
    file or module of the cwd takes part (the caller runs nothing a sandboxed command wrote)."""
    env = {"PATH": DEFAULT_PATH, "HOME": home or "/nonexistent", "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(  # noqa: S603 - an interpreter no sandboxed command could write
            [command, "-I", "-S", "-c", _PROBE], capture_output=True, timeout=PROBE_TIMEOUT_S,
            cwd="/", env=env, check=False, stdin=subprocess.DEVNULL)
        values = json.loads(done.stdout.decode("utf-8", errors="replace"))
        prefix, base, exec_prefix, version, user_base, user_site = (str(v) for v in values)
    except (OSError, subprocess.TimeoutExpired, ValueError, TypeError) as exc:
        log.warning("sandbox.toolchain.probe_failed", command=command, error=str(exc))
        return None
    lib = Path(user_site).parent
    has_lib = lib.is_absolute() and lib.is_dir()
    return Python(Path(command), _real(prefix), _real(base), version,
                  None if exec_prefix == prefix else _real(exec_prefix),
                  lib if has_lib else None, Path(user_base) if has_lib else None)


def _python_line(path: Sequence[Path], pythons: Sequence[Python]) -> str | None:
    """What ``python`` (else ``python3``) runs in the sandbox, in words."""
    command = _find("python", path) or _find("python3", path)
    if command is None:
        return None
    for python in pythons:
        if python.command == command:
            return f"python {python.version} at {python.base_prefix}"
    return f"python at {command}"
