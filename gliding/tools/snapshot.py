"""What a workspace holds, cheaply: every file's size and modification time.

A job snapshots its workspace when it starts (to tell which checked files it wrote and which it
found already there) and whenever it journals (to notice, on resume, a workspace that changed
behind its back). Only metadata is read; at most ``MAX_FILES`` files are listed, so a huge tree
costs a bounded walk.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MAX_FILES = 20_000

Snapshot = dict[str, list[int]]  # relative path -> [size, mtime_ns]


def snapshot(workspace: Path, skip: Path | None = None) -> Snapshot:
    """Size and mtime of every regular file under ``workspace`` ({} if it does not exist),
    leaving out the directory ``skip`` (the data directory, when it lies in the workspace: its
    archives change with every write the job makes)."""
    out: Snapshot = {}
    root = os.fspath(workspace)
    skipped = os.path.realpath(skip) if skip is not None else None
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs
                         if os.path.realpath(os.path.join(here, d)) != skipped)
        for name in sorted(files):
            full = os.path.join(here, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            out[os.path.relpath(full, root)] = [st.st_size, st.st_mtime_ns]
            if len(out) >= MAX_FILES:
                return out
    return out


def fingerprint(snap: Snapshot) -> str:
    """A short digest of a snapshot: equal workspaces, equal fingerprints."""
    text = json.dumps(snap, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def mark(workspace: Path, skip: Path | None = None) -> str:
    """The fingerprint of the workspace as it is now (``skip`` as for ``snapshot``)."""
    return fingerprint(snapshot(workspace, skip))

