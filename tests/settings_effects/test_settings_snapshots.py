"""tools.snapshots: a real (scripted) job keeps its workspace after each step that changed it
in the data directory's git store, and a fork restores it; false keeps none, and a fork of
that job is refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gliding.daemon.fork import fork_archive
from gliding.errors import UsageError
from gliding.memory.archive.store import Archive
from gliding.testing import call
from tests.settings_effects.effects_support import run_scripted, settings_from, write_task

TASK = "goal: Write two lines\npipeline: [DA]\n"


def script() -> dict[str, list]:
    return {"DA": [call("bash", command="echo one > out.txt"),
                   call("bash", command="echo two >> out.txt"),
                   call("finish", summary="wrote")]}


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


def fork_at_first_step(tmp: Path, job: str) -> Path:
    dest = tmp / "fork"
    with Archive.open(tmp / "data", job, create=False) as old, \
            Archive.open(tmp / "data", "20260101-000000-f0f0f0", create=True) as new:
        fork_archive(old, new, "DA/1", dest, tmp / "data")
    return dest


def test_snapshots_default_true_keeps_each_step_for_a_fork(tmp: Path) -> None:
    job = run_scripted(write_task(tmp, TASK), settings_from(tmp), script())
    assert job.handle.report.outcome == "success"
    name = job.handle.report.job
    with Archive.open(tmp / "data", name, create=False) as archive:
        kept = [i.iri.rsplit("/", 1)[1] for i in archive.list(kind="snapshot")]
        first = json.loads(archive.get(f"gliding://job/{name}/snapshot/DA-1").text())
    assert kept == ["start", "DA-1", "DA-2"] and (tmp / "data" / "workspaces.git").is_dir()
    assert list(first["files"]) == ["out.txt"]
    assert (fork_at_first_step(tmp, name) / "out.txt").read_text() == "one\n"


def test_snapshots_false_keeps_none_and_a_fork_is_refused(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_TOOLS__SNAPSHOTS": "false"})
    job = run_scripted(write_task(tmp, TASK), settings, script())
    name = job.handle.report.job
    with Archive.open(tmp / "data", name, create=False) as archive:
        assert archive.list(kind="snapshot") == []
    assert not (tmp / "data" / "workspaces.git").exists()
    with pytest.raises(UsageError, match="no snapshot of job .* holds it as step DA/1"):
        fork_at_first_step(tmp, name)
