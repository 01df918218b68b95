"""The toolchain's mount rule and plan, pure: what of the host a sandboxed command may see
read-only, and why anything is refused.

``mount_refusal`` is the rule: never ``/``, a home directory (every one of the host) or a
directory holding one, below a home nothing but a toolchain's directories (``toolchain_shape``:
pyenv versions, ``~/.local/bin``, ``~/.local/lib/pythonX.Y``, venvs, conda environments), never
a credential or configuration directory (``SECRETS_IN_HOME``, ``SECRET_NAMES``), the data
directory, a directory holding the workspace, ``/etc``, ``/proc`` and the like. ``plan`` applies
it to a ``Request`` (what ``toolchain.resolve_toolchain`` read of the host) and decides the
read-only mounts, the sandbox's ``PATH`` and the refusals; ``allowed`` matches a task's paths
against ``tools.toolchain.allow``; ``pyenv_names`` reads pyenv's version files.

Apart from the host read so that the rule can be read, reviewed and property-tested on its own:
nothing here touches the file system or runs anything.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# what the sandbox mounts whatever the toolchain (sandbox.py binds these itself)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

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


# --- the rule and the plan --------------------------------------------------------------------


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


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or lies below it."""
    return path == root or path.is_relative_to(root)


def in_system(path: Path) -> bool:
    """Whether ``path`` lies in a system directory the sandbox mounts anyway."""
    return any(inside(path, Path(d)) for d in SYSTEM_DIRS)


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
        and (h not in SHARED_DIRS or h == Path("/root")) and not in_system(h)
        and not any(inside(h, t) for t in FORBIDDEN_TREES)))


def toolchain_shape(path: Path, home: Path, venvs: Iterable[Path] = ()) -> bool:
    """Whether ``path``, below the home directory ``home``, is a toolchain directory (or lies
    in one): ``~/.pyenv/versions/<v>``, ``~/.local/bin``, ``~/.local/lib/pythonX.Y``, uv's
    Pythons, ``~/.cargo/bin``, ``~/.rustup/toolchains/<x>``, a conda installation's
    ``envs/<name>``, ``bin``, ``lib`` or ``include``, or one of ``venvs`` (directories the
    caller found a ``pyvenv.cfg`` in) below the home."""
    if any(inside(path, v) and v != home and v.is_relative_to(home) for v in venvs):
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
        if inside(path, tree):
            return f"inside {tree}, which the sandbox keeps out"
    if path in SHARED_DIRS:
        return "a directory shared by everyone's files"
    if data_dir is not None and (inside(path, data_dir) or data_dir.is_relative_to(path)):
        return f"{'inside' if inside(path, data_dir) else 'holds'} the data directory {data_dir}"
    guarded = homes_of(path, home, homes)
    for h in guarded:
        if path == h:
            return "the home directory" if h == home else f"the home directory {h}"
        if h.is_relative_to(path):
            return f"holds the home directory {h}"
    if home is not None and home in guarded:
        for name in SECRETS_IN_HOME:
            secret = home / name
            if inside(path, secret) or secret.is_relative_to(path):
                return (f"{'inside' if inside(path, secret) else 'holds'} ~/{name}, "
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
        if in_system(path) or inside(path, r.workspace):  # in the sandbox already
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
        if not any(inside(path, outer) for outer in kept):
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


