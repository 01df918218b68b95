"""The workspace's content after each step of a job, so that ``gliding fork`` can restore it.

A job's own process (not a ``gliding worker``: its workspace is on another host) adds the
workspace to a git object store, ``<data_dir>/workspaces.git`` (bare, one for the data
directory, so that content is kept once for all jobs and a fork of a fork finds its trees;
the workspace's own ``.git``, if any, is neither read nor changed). When the job starts, and
after each tool call that changed the workspace (its size-and-mtime mark, ``snapshot.py``,
moved), ``record`` adds the workspace to that store (``git add -A`` with an index of the
job's own, then ``git write-tree``: unchanged files cost nothing) and returns the tree with
every file's size and mtime; the caller archives both in L0 (``snapshot`` entries), so a
snapshot belongs to the step that made it. ``restore`` writes a tree into an empty directory
and gives each file its recorded mtime back, so the restored workspace has the very mark the
step recorded (a resumed fork sees no change behind its back), unless a snapshot left some out
(below).

What a snapshot leaves out: files the workspace's ``.gitignore`` files ignore, the
workspace's own ``.git``, a directory holding a repository of its own (a clone: git would keep
a reference, not its files), empty directories, the data directory when it lies in the
workspace, and every file of a workspace over ``MAX_FILES`` files or ``MAX_BYTES`` bytes (then
no snapshot is taken: a fork from that step is refused). A restored workspace that misses
some of these differs from the step's mark, and the forked job says its workspace changed.
Files are kept byte for byte: the store's own attributes (``AS_THEY_ARE``) override what a
workspace's ``.gitattributes`` asks for (end-of-line conversion, ``$Id$``, filters). git runs
with no system or global config, no hooks and no prompts, so nothing in the workspace decides
what runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gliding.errors import UsageError
from gliding.tools.snapshot import MAX_FILES, Snapshot, snapshot

MAX_BYTES = 512 << 20  # a workspace larger than this is not snapshotted
GIT_TIMEOUT_S = 120.0
STORE = "workspaces.git"  # in the data directory
# the store's info/attributes: no end-of-line conversion, $Id$ expansion, filter or encoding a
# workspace's .gitattributes asks for; a file is kept, and restored, byte for byte
AS_THEY_ARE = "* -text -eol -ident -filter -working-tree-encoding\n"
INDEX = "workspace.index"  # in the job's directory


@dataclass(frozen=True)
class Recorded:
    """A snapshot: the git tree of the workspace, and every file's size and mtime."""

    tree: str
    files: Snapshot


def _env(store: Path, work_tree: Path, index: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(store),
            "GIT_DIR": str(store), "GIT_WORK_TREE": str(work_tree), "GIT_INDEX_FILE": str(index),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _git(env: dict[str, str], *args: str, stdin: bytes | None = None) -> bytes:
    """Run git; its stdout. Raises UsageError with what it said when it fails."""
    git = shutil.which("git")
    if git is None:
        raise UsageError("workspace snapshots need git, and there is none on PATH")
    try:
        done = subprocess.run([git, "-c", "core.hooksPath=" + os.devnull, "-c",
                               "core.autocrlf=false", "-c", "core.fsmonitor=false", *args],
                              env=env, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"git {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UsageError(f"git {args[0]} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def nested_repositories(files: Snapshot) -> list[str]:
    """The directories of ``files`` (workspace-relative) that hold a git repository of their
    own (a ``.git`` directory with a HEAD, or a ``.git`` file), the workspace's own left out."""
    roots = set()
    for path in files:
        parts = path.split(os.sep)
        for n, part in enumerate(parts[1:], start=1):
            if part == ".git" and (n == len(parts) - 1 or parts[n + 1:] == ["HEAD"]):
                roots.add(os.sep.join(parts[:n]))
    return sorted(roots)


def record(store: Path, index: Path, workspace: Path, skip: Path | None = None
           ) -> Recorded | None:
    """Add ``workspace`` (without ``skip``, the data directory) to the object store ``store``
    (made when missing) through the job's ``index``; None when the workspace is missing or
    too large to keep (blocking).

    Raises:
        UsageError: git is missing or failed.
    """
    if not workspace.is_dir():
        return None
    files = snapshot(workspace, skip)
    if len(files) >= MAX_FILES or sum(size for size, _ in files.values()) > MAX_BYTES:
        return None
    if not (store / "HEAD").is_file():  # two jobs may make it at once: init is idempotent
        bare = {k: v for k, v in _env(store, workspace, index).items()
                if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        _git(bare, "init", "--bare", "-q", str(store))
    attributes = store / "info" / "attributes"
    if not attributes.is_file():  # they win over the workspace's own .gitattributes
        attributes.parent.mkdir(exist_ok=True)
        attributes.write_text(AS_THEY_ARE)
    env = _env(store, workspace, index)
    spec = ["--", "."]
    if skip is not None:
        inside = os.path.relpath(os.path.realpath(skip), os.path.realpath(workspace))
        if not inside.startswith(".."):
            spec.append(f":(exclude){inside}")
    # a repository of its own in the workspace (a clone, or `git init` with no commit, which
    # git add refuses outright) is left out: git would keep a reference, not its files
    spec += [f":(exclude){root}" for root in nested_repositories(files)]
    Path(f"{index}.lock").unlink(missing_ok=True)  # a git killed at its timeout left it
    _git(env, "add", "-A", "--ignore-errors", *spec)
    tree = _git(env, "write-tree").decode().strip()
    return Recorded(tree, files)


def restore(store: Path, tree: str, files: Snapshot, dest: Path) -> None:
    """Write ``tree`` of ``store`` into ``dest`` (absent, or an empty directory) and give each
    file its recorded mtime (blocking).

    Raises:
        UsageError: ``dest`` is not empty, or git failed (the tree is not in the store).
    """
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists and is not an empty directory",
                         hint="fork into a new workspace directory (--workspace)")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gliding-fork-") as scratch:
        env = _env(store, dest, Path(scratch) / "index")
        _git(env, "read-tree", tree)
        _git(env, "checkout-index", "-a", "-f")
    for path, (_size, mtime_ns) in files.items():
        full = dest / path
        if full.is_file() and not full.is_symlink():
            os.utime(full, ns=(mtime_ns, mtime_ns))
