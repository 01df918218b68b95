"""Workspace locks: one job per workspace, and nested workspaces exclude each other (a job in
``w`` and one in ``w/sub`` would write the same files), while workspaces side by side do not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gliding.daemon.jobs import WorkspaceBusy, WorkspaceLock


def test_nested_workspaces_exclude_each_other_and_siblings_do_not(tmp_path: Path) -> None:
    data, w = tmp_path / "data", tmp_path / "w"
    (w / "a" / "deep").mkdir(parents=True)
    (w / "b").mkdir()
    with WorkspaceLock(data, w / "a", "job-a"), WorkspaceLock(data, w / "b", "job-b"):
        with pytest.raises(WorkspaceBusy, match="holds the workspace of a running job"):
            WorkspaceLock(data, w, "outer").acquire()
        with pytest.raises(WorkspaceBusy, match=r"is inside the workspace .*/w/a of job job-a"):
            WorkspaceLock(data, w / "a" / "deep", "inner").acquire()
        with pytest.raises(WorkspaceBusy, match="is in use by job job-a"):
            WorkspaceLock(data, w / "a", "again").acquire()
    with WorkspaceLock(data, w, "outer"):  # all released: the enclosing one is free now
        with pytest.raises(WorkspaceBusy, match=r"inside the workspace .*/w of job outer"):
            WorkspaceLock(data, w / "b", "inner").acquire()


def test_a_refusal_leaves_no_lock_and_no_descriptor_behind(tmp_path: Path) -> None:
    data, w = tmp_path / "data", tmp_path / "w"
    (w / "sub").mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))
    with WorkspaceLock(data, w / "sub", "inner"):
        for _ in range(5):
            with pytest.raises(WorkspaceBusy):
                WorkspaceLock(data, w, "outer").acquire()
    assert len(os.listdir("/proc/self/fd")) == before
    WorkspaceLock(data, w, "outer").acquire().release()


def test_another_process_holding_an_enclosing_workspace_is_named(tmp_path: Path) -> None:
    data, w = tmp_path / "data", tmp_path / "w"
    (w / "sub").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from gliding.daemon.jobs import WorkspaceLock; "
         f"WorkspaceLock(Path({str(data)!r}), Path({str(w)!r}), 'held').acquire(); "
         "print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(WorkspaceBusy, match=f"of job held \\(pid {holder.pid}\\)"):
            WorkspaceLock(data, w / "sub", "inner").acquire()
    finally:
        holder.communicate("", timeout=30)
    WorkspaceLock(data, w / "sub", "inner").acquire().release()
