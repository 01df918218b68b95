"""The daemon's job service in process, on the scripted model and the default command sandbox:
bounded concurrency, one job a workspace, refusals before anything is queued, cancel (queued
and running), resume, a restart after a stop, event replay and a slow subscriber."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.daemon import events as events_module
from gliding.daemon.queue import JobStateError
from gliding.errors import ArchiveError, NotFoundError, TaskFileError, UsageError
from gliding.memory.archive.store import Archive, archive_path
from tests.daemon.daemon_support import (
    TASK,
    events_of,
    replies,
    serving,
    wait_event,
    wait_for,
    write_replies,
)

pytestmark = pytest.mark.timeout(300)


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


@pytest.mark.heavy  # several jobs with sleeping steps: seconds
def test_jobs_run_at_most_max_jobs_at_once_and_all_succeed(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2, sleep_s=0.3))

    async def main() -> tuple[list[list[dict[str, Any]]], int]:
        async with serving(tmp_path, max_jobs=2) as service:
            jobs = [await service.submit(TASK.format(workspace=f"ws{i}"), model=model)
                    for i in range(5)]
            seen = 0

            async def watch() -> None:
                nonlocal seen
                while True:
                    seen = max(seen, len(service.running_jobs()))
                    await anyio.sleep(0.005)

            results: list[list[dict[str, Any]]] = [[] for _ in jobs]

            async def follow(i: int) -> None:
                results[i] = await events_of(service, jobs[i].job)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                async with anyio.create_task_group() as followers:
                    for i in range(len(jobs)):
                        followers.start_soon(follow, i)
                tg.cancel_scope.cancel()
            for job in jobs:
                status = await wait_for(service, job.job, "finished")
                assert status["outcome"] == "success"
                assert status["progress"]["turns_by_role"] == {"DA": 3}
            return results, seen

    results, seen = anyio.run(main)
    assert seen == 2  # the limit was reached, never passed
    spans = []
    for events in results:
        assert names(events)[0] == "job.queued" and names(events)[-1] == "job.finished"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        dispatched = next(e for e in events if e["event"] == "job.dispatched")
        assert dispatched["data"]["running"] <= 2
        spans.append((dispatched["at"], events[-1]["at"]))
    for start, _end in spans:  # at any job's start, at most 2 jobs were between start and end
        assert sum(1 for s, e in spans if s <= start < e) <= 2
    for i in range(5):
        assert (tmp_path / f"ws{i}" / "trace.txt").read_text().split() == ["step-1", "step-2"]


@pytest.mark.heavy  # several jobs with sleeping steps: seconds
def test_two_jobs_in_one_workspace_take_turns(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=1, sleep_s=0.3))

    async def main() -> list[list[dict[str, Any]]]:
        async with serving(tmp_path, max_jobs=4) as service:
            jobs = [await service.submit(TASK.format(workspace="shared"), model=model)
                    for _ in range(2)]
            return [await events_of(service, job.job) for job in jobs]

    first, second = anyio.run(main)
    assert first[-1]["data"] == {"outcome": "success"}
    assert second[-1]["data"] == {"outcome": "success"}
    started = next(e["at"] for e in second if e["event"] == "job.dispatched")
    assert started >= first[-1]["at"]  # the second began after the first had finished
    assert (tmp_path / "shared" / "trace.txt").read_text().split() == ["step-1", "step-1"]


def test_a_bad_task_or_model_is_refused_and_nothing_is_queued(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())
    (tmp_path / "bad.yaml").write_text("DA: [1, 2]\n")

    async def main() -> None:
        async with serving(tmp_path) as service:
            with pytest.raises(TaskFileError, match=r"mine\.yaml:2: budgets\.turns"):
                await service.submit("goal: x\nbudgets: {turns: -1}\n", "mine.yaml",
                                     model=model)
            with pytest.raises(TaskFileError, match="the task file is empty"):
                await service.submit("", model=model)
            with pytest.raises(TaskFileError, match="unknown tool group 'nope'"):
                await service.submit("goal: x\ntool_groups: {DA: [nope]}\n", model=model)
            with pytest.raises(UsageError, match="bad.yaml"):
                await service.submit(TASK.format(workspace="ws"), model="scripted:bad.yaml")
            with pytest.raises(UsageError, match="absolute"):
                await service.submit(TASK.format(workspace="ws"), model=model,
                                     base_dir="relative/dir")
            assert await service.jobs() == (0, [])
            with pytest.raises(NotFoundError):
                await service.status("20260101-000000-aaaaaa")

    anyio.run(main)
    assert not (tmp_path / "ws").exists()


@pytest.mark.heavy  # several jobs with sleeping steps: seconds
def test_cancel_a_queued_job_and_a_running_one(tmp_path: Path) -> None:
    slow = write_replies(tmp_path, "slow.yaml", replies(steps=4, sleep_s=0.5))

    async def main() -> tuple[str, str]:
        async with serving(tmp_path, max_jobs=1) as service:
            running = await service.submit(TASK.format(workspace="a"), model=slow)
            queued = await service.submit(TASK.format(workspace="b"), model=slow)
            await wait_event(service, running.job, "turn")
            cancelled = await service.cancel(queued.job)
            assert cancelled.state == "cancelled"
            await service.cancel(running.job)
            events = await events_of(service, running.job)
            assert names(events)[-1] == "job.cancelled"
            status = await wait_for(service, running.job, "cancelled")
            assert status["progress"]["archive_status"] == "interrupted"
            with pytest.raises(JobStateError, match="nothing to cancel"):
                await service.cancel(running.job)
            never = await events_of(service, queued.job)
            assert names(never) == ["job.queued", "job.cancelled"]
            return running.job, queued.job

    running, queued = anyio.run(main)
    assert not archive_path(tmp_path / "data", queued).exists()  # it never started
    with Archive.open(tmp_path / "data", running, create=False) as archive:
        assert archive.get_meta("status") == "interrupted"
        assert "cancel" in str(archive.get_meta("stopped_by"))

    async def restart() -> None:  # a restart resumes neither
        async with serving(tmp_path, max_jobs=1) as service:
            await anyio.sleep(0.5)
            assert service.running_jobs() == []
            assert (await service.get(running)).state == "cancelled"
            resumed = await service.resume(running)  # ... until asked to
            assert resumed.state == "queued"
            events = await events_of(service, running)
            assert events[-1]["event"] == "job.finished"
            assert events[-1]["data"] == {"outcome": "success"}
            assert (await wait_for(service, running, "finished"))["runs"] == 2
            with pytest.raises(JobStateError, match="is finished"):
                await service.resume(running)

    anyio.run(restart)
    lines = (tmp_path / "a" / "trace.txt").read_text().split()
    assert lines[0] == "step-1" and lines[-1] == "step-4" and len(set(lines)) == len(lines)


@pytest.mark.heavy  # several jobs with sleeping steps: seconds
def test_a_stopped_daemon_resumes_its_running_job_at_the_next_start(tmp_path: Path) -> None:
    slow = write_replies(tmp_path, "slow.yaml", replies(steps=3, sleep_s=0.4))

    async def first() -> str:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=slow)).job
            await wait_event(service, job, "turn")
        return job  # the context's end stopped the service mid-job

    job = anyio.run(first)

    async def second() -> list[dict[str, Any]]:
        async with serving(tmp_path) as service:
            status = await wait_for(service, job, "finished")
            assert (status["outcome"], status["runs"]) == ("success", 2)
            return [e async for e in service.events(job, follow=False)]

    events = anyio.run(second)
    assert "job.suspended" in names(events)
    runs = [e["data"]["run"] for e in events if e["event"] == "job.dispatched"]
    assert runs == [1, 2]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # one numbering
    lines = (tmp_path / "ws" / "trace.txt").read_text().split()
    assert len(lines) == len(set(lines))  # no step ran twice


def test_past_events_are_replayed_from_any_point(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())

    async def main() -> tuple[str, int]:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            live = await events_of(service, job)
            past = [e async for e in service.events(job, follow=False)]
            assert past == live
            later = [e async for e in service.events(job, after=3)]  # follow: it has ended
            assert later == live[3:]
            assert (await service.status(job))["events"] == len(live)
        return job, len(live)

    job, count = anyio.run(main)

    async def next_daemon() -> dict[str, Any]:
        async with serving(tmp_path) as service:
            return await service.status(job)

    assert anyio.run(next_daemon)["events"] == count  # a job of an earlier daemon: counted


def test_a_slow_subscriber_is_dropped_and_the_job_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "SUBSCRIBER_BUFFER", 2)
    model = write_replies(tmp_path, "r.yaml", replies(steps=3))

    async def main() -> None:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            stream = service.events(job)
            got = [await stream.__anext__()]  # then it stops reading
            await wait_for(service, job, "finished")  # the job did not wait for it
            got += [e async for e in stream]
            assert got[-1]["event"] == events_module.DROPPED
            assert got[-1]["after"] == got[-2]["seq"]
            rest = [e async for e in service.events(job, after=got[-1]["after"])]
            assert rest[-1]["event"] == "job.finished"
            assert [e["seq"] for e in got[:-1] + rest] == list(range(1, rest[-1]["seq"] + 1))

    anyio.run(main)


def test_a_queue_that_cannot_be_read_for_a_moment_does_not_stop_the_daemon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())

    async def main() -> dict[str, Any]:
        async with serving(tmp_path) as service:
            real = service.queue.pending
            failures = [ArchiveError("database is locked")]

            def flaky() -> Any:
                if failures:
                    raise failures.pop()
                return real()

            monkeypatch.setattr(service.queue, "pending", flaky)
            job = await service.submit(TASK.format(workspace="ws"), model=model)
            with anyio.fail_after(30):
                return await wait_for(service, job.job, "finished")

    assert anyio.run(main)["outcome"] == "success"
