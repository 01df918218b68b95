"""The toolchain of the command sandbox: the interpreters and tools a command finds, read-only.

The sandbox (``sandbox.py``) mounts the system directories and the workspace; the Python a
user works with (pyenv, conda, ``~/.local``, a virtual environment outside the workspace) lives
elsewhere, and Debian has no ``python`` at all, so ``python -m pytest`` would exit 127. Here the
sandbox is given what the host resolves, and nothing that holds a secret:

- ``resolve_toolchain`` (the thin shell) reads the host: the ``PATH`` and ``VIRTUAL_ENV`` of
  Gliding's own process (``tools.toolchain.auto``; ``gliding run``: the caller's), with pyenv's
  shims replaced by the version directories they stand for (``PYENV_VERSION``, else
  ``.python-version`` from the workspace up, else ``$PYENV_ROOT/version``); the interpreters
  that ``python``, ``python3``, ``pip``, ``pip3`` and ``pytest`` run on, asked once each for
  ``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix`` and the user site; a task's ``venv:``
  and ``mounts:`` where the host's ``tools.toolchain.allow`` admits them; the operator's
  ``tools.toolchain.mounts``;
- ``plan`` (pure) decides what of it is mounted read-only and the sandbox's ``PATH``, and why
  anything is refused; ``mount_refusal`` is the rule: never ``/``, the home directory or a
  directory holding it, a credential or configuration directory (``SECRETS_IN_HOME``,
  ``SECRET_NAMES``), the data directory, a directory holding the workspace, ``/etc``,
  ``/proc`` and the like.

The result is a ``Toolchain``, part of the frozen ``Sandbox``: its mounts and ``PATH``, the
``VIRTUAL_ENV`` and ``PYTHONUSERBASE`` it sets, a ``python`` link where only ``python3``
exists, and the line ``describe`` adds to the job's first progress line.
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
from gliding.errors import TaskFileError

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
    "/private/etc", "/private/var/run"))
"""System trees nothing is mounted from (what the sandbox needs of /etc it binds itself)."""

SHARED_DIRS = tuple(Path(p) for p in (
    "/home", "/root", "/tmp", "/var", "/var/tmp", "/srv", "/mnt", "/media", "/snap", "/Users",
    "/Volumes", "/private", "/private/tmp", "/private/var"))
"""Directories everyone's files are in: something below one may be mounted, never it whole."""


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


def mount_refusal(path: Path, *, home: Path | None, data_dir: Path | None,
                  workspace: Path | None) -> str | None:
    """Why ``path`` (absolute, symlinks resolved) may not be mounted in the sandbox, or None."""
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
    if home is not None and home != Path(home.anchor):
        if path == home:
            return "the home directory"
        if home.is_relative_to(path):
            return f"holds the home directory {home}"
        for name in SECRETS_IN_HOME:
            secret = home / name
            if _inside(path, secret) or secret.is_relative_to(path):
                return (f"{'inside' if _inside(path, secret) else 'holds'} ~/{name}, "
                        "which holds credentials or configuration")
    named = SECRET_NAMES.intersection(path.parts)
    if named:
        return (f"inside a {min(named)} directory, which holds credentials, configuration "
                "or Gliding's data")
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
        why = mount_refusal(path, home=r.home, data_dir=r.data_dir, workspace=r.workspace)
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
    """Whether ``path`` is one of ``patterns`` (paths or shell patterns, ``~`` expanded) or
    lies below one."""
    text = str(path)
    for pattern in patterns:
        pat = os.path.normpath(os.path.expanduser(pattern))
        if fnmatch.fnmatchcase(text, pat) or fnmatch.fnmatchcase(text, pat.rstrip("/") + "/*"):
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

    Raises:
        TaskFileError: the task's ``venv:`` or ``mounts:`` names a path this host's
            ``tools.toolchain.allow`` does not admit, that does not exist, that is not a
            virtual environment (``venv:``), or that may never be mounted (``mount_refusal``).
    """
    conf = settings.toolchain
    home = home if home is not None else _home()
    data = Path(os.path.realpath(data_dir))
    workspace = Path(os.path.realpath(task.workspace)) if task is not None else Path("/nonexistent")
    task_venv, task_mounts = (_task_paths(task, conf.allow, home, data, workspace)
                              if task is not None else (None, ()))
    if task_venv is None and conf.auto and environ.get("VIRTUAL_ENV"):
        task_venv = _real(environ["VIRTUAL_ENV"])
    source = environ.get("PATH", DEFAULT_PATH) if "PATH" in settings.env_allow else DEFAULT_PATH
    entries = _resolve_path(source, environ if conf.auto else {}, workspace)
    if not conf.auto:  # only what is there anyway: no interpreter elsewhere is asked
        entries = [e for e in entries if _system(e) or _inside(e, workspace)]
    refuse = functools.partial(mount_refusal, home=home, data_dir=data, workspace=workspace)
    search = ([task_venv / "bin"] if task_venv is not None else []) + list(entries)
    pythons = _pythons(search, task_venv, refuse, home)
    request = Request(
        path=tuple(entries), home=home, data_dir=data, workspace=workspace, venv=task_venv,
        pythons=pythons, mount_path=conf.auto,
        mounts=(*(_real(os.path.expanduser(m)) for m in conf.mounts), *task_mounts))
    decided = plan(request)
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


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


_HINT = ("the host decides which paths a task may mount: add the path (or a pattern such as "
         "/srv/venvs/*) to tools.toolchain.allow in its config.yaml "
         "(GLIDING_TOOLS__TOOLCHAIN__ALLOW); docs/tools.md, 'The toolchain'")


def _task_paths(task: Task, allow: Sequence[str], home: Path | None, data_dir: Path,
                workspace: Path) -> tuple[Path | None, tuple[Path, ...]]:
    """The task's venv and mounts, real paths, once this host admits them."""
    def admit(key: str, given: Path) -> Path:
        real = _real(given)
        if not (allowed(given, allow) or allowed(real, allow)):
            held = f"it allows only {', '.join(allow)}" if allow else "it allows none"
            raise TaskFileError(f"{task.source}: {key}: {given} is not allowed on this host "
                                f"(tools.toolchain.allow: {held})", hint=_HINT)
        if not real.exists():
            raise TaskFileError(f"{task.source}: {key}: {given} does not exist on this host")
        why = mount_refusal(real, home=home, data_dir=data_dir, workspace=workspace)
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
             home: Path | None) -> tuple[Python, ...]:
    """Ask each interpreter the commands in ``COMMANDS`` run on (the first of each name in
    ``search``) and the venv's; one in a place never mounted is not run."""
    found: list[Path] = [venv / "bin" / "python"] if venv is not None else []
    for name in COMMANDS:
        command = _find(name, search)
        if command is None:
            continue
        found.append(command if name.startswith("python") else
                     _interpreter_of(command, search) or command)
    pythons: dict[Path, Python] = {}  # by the command as found: a venv's python links to its base
    for command in found:
        real = _real(command)
        if command in pythons or not real.is_file() or "python" not in real.name:
            continue
        if refuse(_real(command.parent)) is not None or refuse(real.parent) is not None:
            continue  # plan refuses its directory; it is not run on the host either
        probed = _probe(str(command), str(real), real.stat().st_mtime_ns, str(home or ""))
        if probed is not None:
            pythons[command] = probed
    return tuple(pythons.values())


_PROBE = ("import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix if "
          "hasattr(sys, 'base_prefix') else sys.prefix, sys.exec_prefix, "
          "'%d.%d' % sys.version_info[:2], site.getuserbase(), "
          "site.getusersitepackages()]))")


@functools.lru_cache(maxsize=64)
def _probe(command: str, real: str, mtime_ns: int, home: str) -> Python | None:
    """``command``'s prefixes, version and user site; asked once per binary and version of it.
    ``-E -s`` and cwd ``/``: no PYTHON* variable, user site or workspace module takes part."""
    env = {"PATH": DEFAULT_PATH, "HOME": home or "/nonexistent", "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(  # noqa: S603 - an interpreter the caller's PATH names
            [command, "-E", "-s", "-c", _PROBE], capture_output=True, timeout=PROBE_TIMEOUT_S,
            cwd="/", env=env, check=False, stdin=subprocess.DEVNULL)
        values = json.loads(done.stdout.decode("utf-8", errors="replace"))
        prefix, base, exec_prefix, version, user_base, user_site = (str(v) for v in values)
    except (OSError, subprocess.TimeoutExpired, ValueError, TypeError) as exc:
        log.warning("sandbox.toolchain.probe_failed", command=command, error=str(exc))
        return None
    lib = Path(user_site).parent
    has_lib = lib.is_dir()
    return Python(Path(command), _real(prefix), _real(base), version,
                  None if exec_prefix == prefix else _real(exec_prefix),
                  _real(lib) if has_lib else None, _real(user_base) if has_lib else None)


def _python_line(path: Sequence[Path], pythons: Sequence[Python]) -> str | None:
    """What ``python`` (else ``python3``) runs in the sandbox, in words."""
    command = _find("python", path) or _find("python3", path)
    if command is None:
        return None
    for python in pythons:
        if python.command == command:
            return f"python {python.version} at {python.base_prefix}"
    return f"python at {command}"
