"""The toolchain's interpreters, asked on the host: the Python each of ``python``, ``python3``,
``pip``, ``pip3`` and ``pytest`` runs on, its prefixes and its user site.

Each interpreter is asked once (``-I -S``, from ``/``, a minimal environment) for
``sys.prefix``, ``sys.base_prefix``, ``sys.exec_prefix`` and the user site, and believed only
where each prefix is an installation (``_plausible``). Nothing a sandboxed command could have
written (the workspace, the data directory) is ever run here: an interpreter there, or one
whose ``pyvenv.cfg`` points there, is not asked (``_untrusted``); a venv there is read as text
and only its base, outside, is asked (``_through_base``). This is the one place the toolchain
runs programs on the host, kept apart so that its distrust is read whole.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import structlog

from gliding.tools.toolchain_plan import DEFAULT_PATH, Python, inside

log = structlog.get_logger(__name__)

COMMANDS = ("python", "python3", "pip", "pip3", "pytest")  # whose interpreters are asked
PROBE_TIMEOUT_S = 10.0


def real_path(path: str | Path) -> Path:
    """``path`` absolute, every symlink followed."""
    return Path(os.path.realpath(path))


def read_small(path: Path, limit: int = 4096) -> str | None:
    """The first ``limit`` characters of a text file, or None where it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return None


def find_command(name: str, path: Sequence[Path]) -> Path | None:
    """The first executable file ``name`` in the directories ``path``, as ``PATH`` finds it."""
    for folder in path:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


_SHEBANG_EXEC = re.compile(r"^'''exec' (\S+)", re.MULTILINE)


def _interpreter_of(script: Path, search: Sequence[Path]) -> Path | None:
    """The interpreter a script's ``#!`` line names (``env NAME`` looked up in ``search``;
    pip's ``'''exec'`` form for long paths too)."""
    head = read_small(script, 1024)
    if head is None or not head.startswith("#!"):
        return None
    words = head[2:].splitlines()[0].split()
    if not words:
        return None
    if words[0] == "/bin/sh" and (long := _SHEBANG_EXEC.search(head)):
        return Path(long.group(1))
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return find_command(words[-1], search)
    return Path(words[0]) if "python" in os.path.basename(words[0]) else None


def ask_pythons(search: Sequence[Path], venv: Path | None, refuse: functools.partial[str | None],
             home: Path | None, writable: Sequence[Path]) -> tuple[Python, ...]:
    """Ask each interpreter the commands in ``COMMANDS`` run on (the first of each name in
    ``search``) and the venv's; one in a place never mounted is not run, nor one a sandboxed
    command could have written (``writable``): of a venv there only its base is asked."""
    found: list[Path] = [venv / "bin" / "python"] if venv is not None else []
    for name in COMMANDS:
        command = find_command(name, search)
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
    text = read_small(venv / "pyvenv.cfg", 1 << 20) or ""
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
    real = real_path(command)
    seen: list[tuple[str, Path]] = [("it", command), ("its real path", real),
                                    ("its directory", real_path(command.parent))]
    for folder in dict.fromkeys((command.parent, command.parent.parent, real.parent,
                                 real.parent.parent)):
        if (folder / "pyvenv.cfg").is_file():
            seen.append(("its pyvenv.cfg", real_path(folder / "pyvenv.cfg")))
            for base in _venv_config(folder).get("home", []):
                if not os.path.isabs(base):  # relative to whatever cwd reads it: refused
                    return f"the home of its pyvenv.cfg, {base!r}, is not an absolute path"
                seen.append(("the home of its pyvenv.cfg", real_path(base)))
    for what, path in seen:
        for root in writable:
            if inside(path, root):
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
    return Python(command, real_path(venv), probed.base_prefix, probed.version,
                  probed.exec_prefix if probed.exec_prefix != probed.base_prefix else None,
                  probed.user_lib, probed.user_base)


def _find_first(names: Sequence[str], folder: Path) -> Path | None:
    for name in names:
        if (found := find_command(name, [folder])) is not None:
            return found
    return None


def _asked(command: Path, refuse: functools.partial[str | None],
           home: Path | None) -> Python | None:
    """``command``'s probe, where its directory may be mounted and what it says is
    plausible; a venv's prefix is its directory, whatever it says."""
    real = real_path(command)
    if not real.is_file() or "python" not in real.name:
        return None
    if refuse(real_path(command.parent)) is not None or refuse(real.parent) is not None:
        return None  # plan refuses its directory; it is not run on the host either
    probed = _probe(str(command), str(real), real.stat().st_mtime_ns, str(home or ""))
    if probed is None:
        return None
    venv = _venv_of(command)
    if venv is not None:
        probed = Python(command, real_path(venv), probed.base_prefix, probed.version,
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
                  python.exec_prefix, real_path(python.user_lib), real_path(python.user_base))


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
    return Python(Path(command), real_path(prefix), real_path(base), version,
                  None if exec_prefix == prefix else real_path(exec_prefix),
                  lib if has_lib else None, Path(user_base) if has_lib else None)


def python_line(path: Sequence[Path], pythons: Sequence[Python]) -> str | None:
    """What ``python`` (else ``python3``) runs in the sandbox, in words."""
    command = find_command("python", path) or find_command("python3", path)
    if command is None:
        return None
    for python in pythons:
        if python.command == command:
            return f"python {python.version} at {python.base_prefix}"
    return f"python at {command}"
