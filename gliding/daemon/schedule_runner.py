"""The daemon's recurring jobs: add, list and remove schedules, and the loop that submits
their runs through the job service, as ``POST /v1/jobs`` does.

    add      the name, cron expression, zone and policies checked (``schedule.check``), the
             task checked as a submission is (``JobService.check_task``), then kept
             (``ScheduleStore``); nothing is kept when one of them is refused
    loop     wakes at the next due time of any schedule (at least every RECHECK_S, so a wall
             clock set forward or back is noticed), and for each schedule acts on
             ``schedule.decide``: a job named ``<schedule>@<local time>`` is submitted, or the
             due time is skipped (missed, or overlap: its last job still queued or running);
             one log line each: ``daemon.schedule.submitted``, ``.skipped``, ``.failed``
    time     the daemon's ``now`` (seconds since the epoch; tests give a virtual clock) and
             anyio's sleeps (virtual under ``gliding.testing.clock.autojump``)

A due time is recorded as acted on (``ScheduleStore.advance``) before its job is submitted: a
``kill -9`` between the two loses that one run and never runs it twice. A submission refused
(the task's model gone, the workspace refused) is a ``daemon.schedule.failed`` line; the
schedule goes on at its next due time. Blocking work (the store, cron arithmetic) runs on
worker threads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog

from gliding.daemon import schedule as sch
from gliding.daemon.queue import CANCELLING, QUEUED, RUNNING, QueuedJob
from gliding.daemon.schedule import Schedule
from gliding.daemon.schedule_store import ScheduleStore
from gliding.errors import GlidingError, UsageError

log = structlog.get_logger("gliding.daemon")

RECHECK_S = 60.0  # the loop reads the clock at least this often
RETRY_S = 1.0  # after the store could not be read or written
ACTIVE = (QUEUED, RUNNING, CANCELLING)  # overlaps the next run (paused: waits for a person)


class Checked(Protocol):
    """A task the job service would queue (``CheckedTask``)."""

    @property
    def name(self) -> str: ...
    @property
    def base_dir(self) -> Path: ...
    @property
    def model(self) -> str | None: ...


class Jobs(Protocol):
    """What the runner needs of the job service (``JobService``; a fake in tests)."""

    stopping: bool

    async def check_task(self, text: str, name: str = ..., *, model: str | None = ...,
                         base_dir: str | None = ...) -> Checked: ...

    async def submit(self, text: str, name: str = ..., *, model: str | None = ...,
                     base_dir: str | None = ...) -> QueuedJob: ...

    async def get(self, job: str) -> QueuedJob: ...


class ScheduleRunner:
    """The schedules of ``data_dir``: ``await open()``, ``run()`` in a task group, ``close()``.

    Every method raises GlidingError: ScheduleError (a bad name, expression, zone, policy),
    ScheduleExists, NotFoundError (no such schedule), TaskFileError or UsageError (a task the
    job service refuses), ArchiveError (the store cannot be used).
    """

    def __init__(self, data_dir: Path, jobs: Jobs, now: Callable[[], float]) -> None:
        self.data_dir = data_dir
        self._jobs = jobs
        self._now = now
        self._store: ScheduleStore | None = None
        self._wake = anyio.Event()
        self._lock = anyio.Lock()  # a tick and an add or remove do not interleave

    async def open(self) -> None:
        """Raises: ArchiveError: the store cannot be opened."""
        self._store = await anyio.to_thread.run_sync(ScheduleStore.open, self.data_dir)

    async def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            await anyio.to_thread.run_sync(store.close)

    @property
    def store(self) -> ScheduleStore:
        if self._store is None:
            raise UsageError("the daemon's schedules are not open (ScheduleRunner.open)")
        return self._store

    async def _s(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(partial(fn, *args))

    # -- the book ----------------------------------------------------------------------------

    async def add(self, name: str, cron: str, task: str, *, task_name: str = "task.yaml",
                  tz: str = "UTC", missed: str = "skip", overlap: str = "skip",
                  model: str | None = None, base_dir: str | None = None) -> Schedule:
        """Keep a new schedule; its first due time is the first after now."""
        now = self._now()
        cron = " ".join(cron.split())
        await self._s(sch.check, name, cron, tz, missed, overlap, now)
        checked = await self._jobs.check_task(task, task_name, model=model, base_dir=base_dir)
        schedule = Schedule(name, cron, tz, missed, overlap, task, checked.name,
                            str(checked.base_dir), checked.model, created=now, last_due=now,
                            last_job=None)
        async with self._lock:
            await self._s(self.store.add, schedule)
        log.info("daemon.schedule.added", schedule=name, cron=cron, tz=tz, missed=missed,
                 overlap=overlap, task=checked.name)
        self._wake.set()
        return schedule

    async def schedules(self) -> list[tuple[Schedule, float | None]]:
        """Every schedule, by name, with its next due time (None: never again)."""
        found: list[Schedule] = await self._s(self.store.all)
        return await self._s(_with_next, found, self._now())

    async def next_due(self, schedule: Schedule) -> float | None:
        """Its next due time after now (None: never again)."""
        [(_s, due)] = await self._s(_with_next, [schedule], self._now())
        return due

    async def remove(self, name: str) -> Schedule:
        """Drop a schedule (the jobs it submitted stay). Raises: NotFoundError."""
        async with self._lock:
            gone: Schedule = await self._s(self.store.remove, name)
        log.info("daemon.schedule.removed", schedule=name)
        self._wake.set()
        return gone

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Submit the schedules' runs until cancelled (or the job service stops)."""
        while not self._jobs.stopping:
            self._wake = anyio.Event()
            try:
                wait = await self.tick()
            except GlidingError as exc:  # the store cannot be read or written now
                log.warning("daemon.schedule.store.failed", error=exc.message)
                wait = RETRY_S
            with anyio.move_on_after(wait):
                await self._wake.wait()

    def wake(self) -> None:
        """Look at the schedules now (the clock was moved; a test)."""
        self._wake.set()

    async def tick(self) -> float:
        """Act on what is due now; the seconds until the next look.

        Raises:
            ArchiveError: the store cannot be read, or a due time cannot be recorded.
        """
        async with self._lock:
            now = self._now()
            schedules: list[Schedule] = await self._s(self.store.all)
            for schedule in schedules:
                if self._jobs.stopping:
                    break
                await self._act(schedule, now)
            later = [due for _s, due in await self._s(_with_next, schedules, now)
                     if due is not None]
        return max(0.0, min([RECHECK_S, *(due - self._now() for due in later)]))

    async def _act(self, schedule: Schedule, now: float) -> None:
        name = schedule.name
        try:
            decision: sch.Decision = await self._s(sch.decide, schedule, now)
        except GlidingError as exc:
            log.warning("daemon.schedule.failed", schedule=name, error=exc.message)
            return
        if decision.due is None:
            return
        due = decision.due
        when = _local(due, schedule.tz)
        if not decision.run:
            await self._s(self.store.advance, name, due)
            log.info("daemon.schedule.skipped", schedule=name, due=when, why="missed",
                     policy="missed: skip")
            return
        if schedule.overlap == "skip" and await self._active(schedule.last_job):
            await self._s(self.store.advance, name, due)
            log.info("daemon.schedule.skipped", schedule=name, due=when, why="overlap",
                     job=schedule.last_job, policy="overlap: skip")
            return
        await self._s(self.store.advance, name, due)  # first: a kill loses it, never doubles it
        job_name = sch.run_name(name, due, schedule.tz)
        try:
            entry = await self._jobs.submit(schedule.task, job_name, model=schedule.model,
                                            base_dir=schedule.base_dir)
        except GlidingError as exc:
            log.warning("daemon.schedule.failed", schedule=name, due=when, code=exc.code,
                        error=exc.message, hint=exc.hint)
            return
        await self._s(self.store.advance, name, due, entry.job)
        log.info("daemon.schedule.submitted", schedule=name, due=when, job=entry.job,
                 name=job_name, catch_up=decision.missed)

    async def _active(self, job: str | None) -> bool:
        """Whether ``job`` is still queued or running (one the queue lost is not)."""
        if job is None:
            return False
        try:
            entry = await self._jobs.get(job)
        except GlidingError:
            return False
        return entry.state in ACTIVE


def _with_next(schedules: list[Schedule], now: float) -> list[tuple[Schedule, float | None]]:
    """Each schedule with its next due time after ``now`` (None: never, or it no longer
    reads)."""
    out = []
    for schedule in schedules:
        try:
            out.append((schedule, sch.next_due(schedule.cron, schedule.tz, now)))
        except GlidingError:
            out.append((schedule, None))
    return out


def _local(at: float, tz: str) -> str:
    return datetime.fromtimestamp(at, sch.zone(tz)).isoformat(timespec="minutes")
