"""Private files: what a daemon, a worker, an MCP server or ``gliding run`` writes is its
owner's alone.

``private_files(data_dir)`` is what those commands run under: the process's umask is 077 while
it runs (files are born 0600, directories 0700: the queue, the events, the archives, the
blackboard, the keys, the begin marks; the agents' commands inherit it, so a file a command
makes in the workspace is 0600 too, while ``write_file`` keeps making 0644 files), and the data
directory an earlier Gliding left world-readable (0644 files, 0755 directories) is tightened
at start (``tighten``: group and other permissions taken off everything in it), with one log
line saying how many entries changed; once the directory itself is 0700 nothing in it can be
reached by others, and it is not walked again. The old umask comes back when the command ends (an
in-process caller, such as a test, gets its own back).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

log = structlog.get_logger("gliding.daemon")

PRIVATE_UMASK = 0o077
_OTHERS = stat.S_IRWXG | stat.S_IRWXO


@contextmanager
def private_files(data_dir: Path) -> Iterator[None]:
    """Run the body under umask 077, ``data_dir`` tightened first (``tighten``)."""
    old = os.umask(PRIVATE_UMASK)
    try:
        changed = tighten(data_dir)
        if changed:  # once: the directory is private from now on (info: a command's
            # stderr stays its own; log_level info shows it)
            log.info("data_dir.tightened", data_dir=str(data_dir), entries=changed,
                     note="group and other permissions removed (files 0600, dirs 0700)")
        yield
    finally:
        os.umask(old)


def tighten(data_dir: Path) -> int:
    """Take group and other permissions off ``data_dir`` and everything in it; how many
    entries changed. Symlinks are neither followed nor changed, and an entry that cannot be
    changed (another owner's) is left as it is: this is best effort, never a reason not to
    start. Nothing happens when ``data_dir`` does not exist yet (it is born private), nor when
    it is private already (0700: nobody else can reach anything in it, so the walk, a stat
    an entry, is not paid on every start)."""
    try:
        st = os.lstat(data_dir)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode) or not st.st_mode & _OTHERS:
        return 0
    changed = _tighten_one(str(data_dir))
    for root, dirs, files in os.walk(data_dir, followlinks=False, onerror=lambda exc: None):
        for name in (*dirs, *files):
            changed += _tighten_one(os.path.join(root, name))
    return changed


def _tighten_one(path: str) -> int:
    """1 when ``path`` had group or other permissions and now has none, else 0."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & _OTHERS:
            return 0
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~_OTHERS, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return 0
    return 1
