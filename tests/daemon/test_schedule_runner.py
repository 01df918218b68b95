"""The schedule loop on virtual time (``autojump``: hours pass at once, no real sleep) over a
fake job service: runs at its due times, in its zone; the overlap policies; the missed
policies across a restart (the store is a real file, reopened); refusals keep nothing.

The tests wait for the fake's submissions, never on a deadline of their own: under autojump
the clock jumps to the nearest deadline whenever every task waits, a thread (the store's
SQLite calls) included."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
from structlog.testing import capture_logs

from gliding.daemon.queue import QueuedJob
from gliding.daemon.schedule import ScheduleError, ScheduleExists
from gliding.daemon.schedule_runner import ScheduleRunner
from gliding.errors import NotFoundError, TaskFileError
from gliding.testing.clock import LoopClock, autojump

TASK = "goal: Write the trace file\nworkspace: ws\n"


def at(text: str, tz: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


@dataclass(frozen=True)
class Checked:
    name: str
    base_dir: Path
    model: str | None


class FakeJobs:
    """Takes submissions; each job runs ``run_s`` virtual seconds; ``enough`` is set once
    ``want`` jobs were submitted."""

    def __init__(self, clock: LoopClock, want: int, run_s: float = 60.0) -> None:
        self.clock, self.want, self.run_s = clock, want, run_s
        self.stopping = False
        self.submitted: list[tuple[str, float]] = []  # (job name, when)
        self.enough = anyio.Event()

    async def check_task(self, text: str, name: str = "task.yaml", *,
                         model: str | None = None, base_dir: str | None = None) -> Checked:
        if "goal:" not in text:
            raise TaskFileError(f"{name}: goal: field required")
        return Checked(name, Path(base_dir or "/work"), model)

    async def submit(self, text: str, name: str = "task.yaml", *, model: str | None = None,
                     base_dir: str | None = None) -> QueuedJob:
        now = self.clock.now()
        self.submitted.append((name, now))
        if len(self.submitted) >= self.want:
            self.enough.set()
        return self._entry(f"job{len(self.submitted)}", name, now)

    async def get(self, job: str) -> QueuedJob:
        index = int(job.removeprefix("job")) - 1
        if index >= len(self.submitted):  # a job of the runner before the restart: ended
            raise NotFoundError(f"no job {job}")
        name, when = self.submitted[index]
        return self._entry(job, name, when)

    def _entry(self, job: str, name: str, when: float) -> QueuedJob:
        state = "running" if self.clock.now() < when + self.run_s else "finished"
        return QueuedJob(job, name, TASK, "/work", "/work/ws", "goal", None, state, None, None,
                         when, when, None, 1, 1)


async def run_until_enough(tmp: Path, start: float, want: int, run_s: float = 60.0,
                           add: dict[str, Any] | None = None) -> list[tuple[str, float]]:
    """Start a runner on ``tmp`` at virtual time ``start`` (adding a schedule first when
    ``add`` says so), run it until ``want`` jobs were submitted; those jobs."""
    clock = LoopClock(start)
    jobs = FakeJobs(clock, want, run_s)
    runner = ScheduleRunner(tmp, jobs, clock.now)
    await runner.open()
    try:
        if add is not None:
            await runner.add(**add)
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run)
            await jobs.enough.wait()
            tg.cancel_scope.cancel()
    finally:
        await runner.close()
    return jobs.submitted


def every_15(**more: Any) -> dict[str, Any]:
    return {"name": "s", "cron": "*/15 * * * *", "task": TASK} | more


def test_a_schedule_runs_at_its_due_times_on_virtual_time(tmp_path: Path) -> None:
    start = at("2026-03-01T10:02")
    submitted = autojump(run_until_enough, tmp_path, start, 4, 60.0, every_15())
    assert submitted == [(f"s@2026-03-01T{t}+00:00", at(f"2026-03-01T{t}"))
                         for t in ("10:15", "10:30", "10:45", "11:00")]


def test_a_schedule_in_a_zone_runs_in_its_local_time_across_spring_forward(
        tmp_path: Path) -> None:
    start = at("2026-03-28T12:00", "Europe/Paris")
    daily = {"name": "s", "cron": "30 2 * * *", "task": TASK, "tz": "Europe/Paris"}
    submitted = autojump(run_until_enough, tmp_path, start, 2, 60.0, daily)
    assert [name for name, _ in submitted] == ["s@2026-03-29T03:00+02:00",
                                               "s@2026-03-30T02:30+02:00"]
    assert [when for _, when in submitted] == [at("2026-03-29T03:00", "Europe/Paris"),
                                               at("2026-03-30T02:30", "Europe/Paris")]


def test_overlap_skip_starts_no_job_while_the_last_one_runs(tmp_path: Path) -> None:
    with capture_logs() as logs:  # each job runs 40 minutes: 10:30 and 10:45 are skipped
        submitted = autojump(run_until_enough, tmp_path, at("2026-03-01T10:02"), 2, 2400.0,
                             every_15())
    assert [name for name, _ in submitted] == ["s@2026-03-01T10:15+00:00",
                                               "s@2026-03-01T11:00+00:00"]
    skipped = [(e["due"], e["job"]) for e in logs if e["event"] == "daemon.schedule.skipped"]
    assert skipped == [("2026-03-01T10:30+00:00", "job1"), ("2026-03-01T10:45+00:00", "job1")]
    assert all(e["why"] == "overlap" for e in logs if e["event"] == "daemon.schedule.skipped")


def test_overlap_queue_submits_every_due_time(tmp_path: Path) -> None:
    submitted = autojump(run_until_enough, tmp_path, at("2026-03-01T10:02"), 3, 2400.0,
                         every_15(overlap="queue"))
    assert [name for name, _ in submitted] == [f"s@2026-03-01T{t}+00:00"
                                               for t in ("10:15", "10:30", "10:45")]


@pytest.mark.parametrize(("missed", "expected"), [
    ("skip", [("s@2026-03-01T13:15+00:00", "13:15")]),
    ("once", [("s@2026-03-01T13:00+00:00", "13:07"), ("s@2026-03-01T13:15+00:00", "13:15")]),
])
def test_runs_missed_while_the_daemon_was_down_follow_the_missed_policy(
        tmp_path: Path, missed: str, expected: list[tuple[str, str]]) -> None:
    first = autojump(run_until_enough, tmp_path, at("2026-03-01T10:02"), 1, 60.0,
                     every_15(missed=missed))
    assert [name for name, _ in first] == ["s@2026-03-01T10:15+00:00"]
    # the daemon is down from 10:16 to 13:07; a new runner reads the schedule from its file
    with capture_logs() as logs:
        again = autojump(run_until_enough, tmp_path, at("2026-03-01T13:07"), len(expected))
    assert again == [(name, at(f"2026-03-01T{t}")) for name, t in expected]
    if missed == "skip":
        assert [(e["due"], e["why"]) for e in logs if e["event"] == "daemon.schedule.skipped"
                ] == [("2026-03-01T13:00+00:00", "missed")]
    else:
        caught_up = [e for e in logs if e["event"] == "daemon.schedule.submitted"][0]
        assert caught_up["catch_up"] is True and caught_up["due"] == "2026-03-01T13:00+00:00"


def test_a_restart_within_seconds_of_a_due_time_runs_it_on_time(tmp_path: Path) -> None:
    autojump(run_until_enough, tmp_path, at("2026-03-01T10:02"), 1, 60.0, every_15())
    again = autojump(run_until_enough, tmp_path, at("2026-03-01T10:30") + 20, 1)
    assert again == [("s@2026-03-01T10:30+00:00", at("2026-03-01T10:30") + 20)]


def test_refusals_keep_nothing_and_list_and_remove_work(tmp_path: Path) -> None:
    async def main() -> None:
        clock = LoopClock(at("2026-03-01T10:02"))
        runner = ScheduleRunner(tmp_path, FakeJobs(clock, 1), clock.now)
        await runner.open()
        try:
            await runner.add(**every_15(tz="Europe/Paris"))
            for bad, error, says in (
                    (every_15(), ScheduleExists, "a schedule named s exists"),
                    (every_15(name="t", cron="*/15 * *"), ScheduleError, "not 5"),
                    (every_15(name="t", tz="Nowhere/City"), ScheduleError, "unknown time zone"),
                    (every_15(name="t", task="workspace: ws\n"), TaskFileError, "goal")):
                with pytest.raises(error, match=says):
                    await runner.add(**bad)
            [(kept, next_due)] = await runner.schedules()
            assert (kept.name, kept.tz, kept.last_job) == ("s", "Europe/Paris", None)
            assert next_due == at("2026-03-01T10:15")
            gone = await runner.remove("s")
            assert gone.name == "s" and await runner.schedules() == []
            with pytest.raises(Exception, match="no schedule named 's'"):
                await runner.remove("s")
        finally:
            await runner.close()

    anyio.run(main)
