"""Workspace snapshots for forks: a restored workspace holds every file byte for byte with its
time (whatever the workspace's .gitattributes ask for), a repository of its own inside the
workspace (even one with no commit, which git add refuses) is left out and breaks nothing, a
git killed at its timeout leaves no lock behind, and only an empty directory is restored into."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gliding.errors import UsageError
from gliding.tools import workspace_history as wh
from gliding.tools.snapshot import mark


def test_a_snapshot_restores_every_byte_and_time(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / ".gitattributes").write_text("* text eol=crlf ident\n")
    (ws / "src" / "a.txt").write_bytes(b"line one\nline two $Id: keep me $\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "sub").mkdir()
    subprocess.run(["git", "init", "-q", str(ws / "sub")], check=True)  # no commit
    (ws / "sub" / "inner.txt").write_text("of its own")
    store, index = tmp_path / "data" / wh.STORE, tmp_path / "job" / wh.INDEX
    index.parent.mkdir()
    Path(f"{index}.lock").write_text("")  # as a git killed at its timeout leaves it
    taken = wh.record(store, index, ws)
    assert taken is not None
    dest = tmp_path / "fork"
    wh.restore(store, taken.tree, taken.files, dest)
    assert (dest / "src" / "a.txt").read_bytes() == b"line one\nline two $Id: keep me $\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert not (dest / "sub").exists()  # a repository of its own is left out
    assert wh.nested_repositories(taken.files) == ["sub"]
    for name in ("src/a.txt", "run.sh", ".gitattributes"):
        assert (dest / name).stat().st_mtime_ns == (ws / name).stat().st_mtime_ns
    (ws / "sub" / "inner.txt").unlink()  # without the nested repository, the marks agree
    subprocess.run(["rm", "-rf", str(ws / "sub")], check=True)
    assert mark(dest) == mark(ws)
    with pytest.raises(UsageError, match="not an empty directory"):
        wh.restore(store, taken.tree, taken.files, ws)
