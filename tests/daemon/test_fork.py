"""Forking a finished job from one of its steps: the new job's workspace is restored as that
step left it (file times included), the steps up to it replay from the copied archive (no tool
runs again: each step wrote a random number, and the fork keeps the old ones), and the job runs
on live from the next step. A step without a snapshot, an unknown step, or a workspace that is
not empty is refused, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from gliding.errors import NotFoundError, UsageError
from gliding.memory.archive.store import Archive
from gliding.tools import workspace_history
from tests.daemon.daemon_support import TASK, serving, wait_for, write_replies

STEPS = 'DA:\n' + ''.join(f'  - bash: {{command: "echo step-{k} $RANDOM >> trace.txt"}}\n'
                          for k in range(1, 5)) + '  - finish: {summary: done}\n'


def test_a_fork_restores_the_workspace_and_replays_the_steps_up_to_it(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", STEPS)

    async def main() -> tuple[str, dict, dict]:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_for(service, job, "finished")
            entry, held = await service.fork(job, "DA/2")
            done = await wait_for(service, entry.job, "finished")
            return job, held, done

    job, held, done = anyio.run(main)
    assert done["outcome"] == "success", done
    old = (tmp_path / "ws" / "trace.txt").read_text().splitlines()
    new = (Path(done["workspace"]) / "trace.txt").read_text().splitlines()
    assert Path(done["workspace"]) == tmp_path / f"ws-fork-{done['job'][-6:]}"
    assert [line.split()[0] for line in new] == ["step-1", "step-2", "step-3", "step-4"]
    assert new[:2] == old[:2]  # replayed from the archive, not run again
    assert held["step"] == "DA/2" and held["calls"] == 2
    with Archive.open(tmp_path / "data", done["job"], create=False) as archive:
        results = {i.iri.rsplit("/", 1)[1]: archive.get(i.iri).text()
                   for i in archive.list(kind="result")}
        assert archive.get_meta("forked_from") == {"job": job, "step": "DA/2"}
        assert int(archive.get_meta("resumes")) == 1
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        assert results["DA-1-0"] == archive.get(f"gliding://job/{job}/result/DA-1-0").text()
    assert sorted(results) == ["DA-1-0", "DA-2-0", "DA-3-0", "DA-4-0"]


def test_a_fork_without_a_snapshot_or_step_or_empty_workspace_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_replies(tmp_path, "r.yaml", STEPS)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "kept.txt").write_text("mine")

    async def main() -> None:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_for(service, job, "finished")
            with pytest.raises(UsageError, match="names no step"):
                await service.fork(job, "turn three")
            with pytest.raises(NotFoundError, match="has no step DA/9"):
                await service.fork(job, "DA/9")
            with pytest.raises(UsageError, match="is not an empty directory"):
                await service.fork(job, "DA/2", str(tmp_path / "busy"))
            monkeypatch.setattr(workspace_history, "MAX_BYTES", 0)  # no snapshot is taken
            job2 = (await service.submit(TASK.format(workspace="ws2"), model=model)).job
            await wait_for(service, job2, "finished")
            with pytest.raises(UsageError, match="no snapshot of job .* holds it as step DA/2"):
                await service.fork(job2, "DA/2")
            total, _ = await service.jobs()
            assert total == 2  # nothing was queued

    anyio.run(main)
    assert (tmp_path / "busy" / "kept.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path / "data" / "jobs")) == sorted(
        p.name for p in (tmp_path / "data" / "jobs").iterdir())
    assert len(list((tmp_path / "data" / "jobs").iterdir())) == 2
    assert not list(tmp_path.glob("ws-fork-*")) and not list(tmp_path.glob("ws2-fork-*"))
