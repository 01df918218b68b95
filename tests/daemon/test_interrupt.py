"""Interrupting a running job: its tool call in progress stops at once, the job is ``paused``
(its status, a ``job.paused`` event, its archive), and a steer or a resume runs it on: the call
cut off is reported to the model as interrupted, not run twice, and the steer reaches the next
model call. The queue of an older Gliding (version 1, whose states lacked ``paused``) is
rebuilt in place, every job kept."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from gliding.daemon import queue as q
from gliding.errors import JobStateError
from gliding.memory.archive.store import Archive
from tests.daemon.daemon_support import (
    TASK,
    events_of,
    replies,
    serving,
    wait_event,
    wait_for,
    write_replies,
)

SLOW = 'DA:\n  - bash: {command: "echo one >> trace.txt && sleep 30 && echo late >> trace.txt"}\n' \
       '  - bash: {command: "echo two >> trace.txt"}\n  - finish: {summary: done}\n'


def test_an_interrupted_job_stops_its_call_now_and_a_steer_runs_it_on(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", SLOW)

    async def main() -> tuple[str, float, list[dict]]:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_event(service, job, "role.started")
            trace = tmp_path / "ws" / "trace.txt"
            with anyio.fail_after(60):
                while not trace.exists():
                    await anyio.sleep(0.05)
            asked = time.monotonic()
            await service.interrupt(job)
            paused = await wait_for(service, job, "paused", "finished")
            took = time.monotonic() - asked
            assert paused["state"] == "paused", paused
            with pytest.raises(JobStateError, match="only a running job can be interrupted"):
                await service.interrupt(job)
            await service.steer(job, "Go on with step two")
            return job, took, await events_of(service, job)

    job, took, seen = anyio.run(main)
    assert took < 25  # the 30 s sleep was cut off, not waited for
    names = [e["event"] for e in seen]
    assert "job.paused" in names and names[-1] == "job.finished", names
    assert seen[-1]["data"] == {"outcome": "success"}
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["one", "two"]
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        first = archive.get(f"gliding://job/{job}/result/DA-1-0").text()
        assert first.startswith("error: interrupted: the job stopped while this call ran")
        turn = archive.get(f"gliding://job/{job}/turn/DA/2").text()
    assert "Go on with step two" in turn  # the steer reached the next model call


def test_resume_runs_a_paused_job_on(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=6, sleep_s=0.5))

    async def main() -> dict:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_event(service, job, "turn")
            await service.interrupt(job)
            await wait_for(service, job, "paused")
            await service.resume(job)
            return await wait_for(service, job, "finished")

    done = anyio.run(main)
    assert done["outcome"] == "success" and done["runs"] == 2
    lines = (tmp_path / "ws" / "trace.txt").read_text().split()
    assert lines[-1] == "step-6" and len(lines) == len(set(lines))


def test_a_version_1_queue_is_rebuilt_with_every_job_kept(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    old_schema = q._SCHEMA.replace(", 'paused'", "")
    assert "'paused'" not in old_schema
    db = sqlite3.connect(path)
    db.executescript(old_schema)
    db.execute("INSERT INTO jobs (job, name, task, base_dir, workspace, goal, state, submitted) "
               "VALUES ('20260101-000000-aaaaaa', 't.yaml', 'goal: g', '/', '/ws', 'g', "
               "'interrupted', 1.0)")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    with pytest.raises(sqlite3.IntegrityError):  # the old table refuses the new state
        db.execute("UPDATE jobs SET state = 'paused'")
    db.close()
    queue = q.JobQueue(path)
    try:
        [entry] = queue.in_state(q.INTERRUPTED)
        assert entry.job == "20260101-000000-aaaaaa" and entry.goal == "g"
        queue.move(entry.job, q.QUEUED, allowed=(q.INTERRUPTED,))
        queue.move(entry.job, q.RUNNING, now=2.0, allowed=(q.QUEUED,))
        assert queue.move(entry.job, q.PAUSED, allowed=(q.RUNNING,)).state == q.PAUSED
    finally:
        queue.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (q.QUEUE_VERSION,)
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'jobs_v1'").fetchone() is None
    db.close()


def test_a_paused_job_can_be_cancelled_and_a_cancel_overrides_a_pause(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", SLOW)

    async def main() -> tuple[dict, dict]:
        async with serving(tmp_path) as service:
            first = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_event(service, first, "role.started")
            await service.interrupt(first)
            await wait_for(service, first, "paused")
            await service.cancel(first)
            paused_then_cancelled = await wait_for(service, first, "cancelled")
            second = (await service.submit(TASK.format(workspace="ws2"), model=model)).job
            await wait_event(service, second, "role.started")
            await service.interrupt(second)
            await service.cancel(second)  # before the pause took: the cancel wins
            cancelled = await wait_for(service, second, "cancelled", "paused")
            return paused_then_cancelled, cancelled

    paused_then_cancelled, cancelled = anyio.run(main)
    assert paused_then_cancelled["error"] == "cancelled while paused"
    assert cancelled["state"] == "cancelled", cancelled
    with Archive.open(tmp_path / "data", paused_then_cancelled["job"], create=False) as archive:
        assert "cancelled" in str(archive.get_meta("stopped_by"))


def test_a_damaged_version_1_queue_is_refused_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (seq INTEGER PRIMARY KEY, job TEXT)")  # columns missing
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with pytest.raises(q.QueueDamaged, match="cannot be upgraded"):
        q.JobQueue(path)
