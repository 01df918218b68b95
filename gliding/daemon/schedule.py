"""Recurring jobs: what a schedule is and when it is due. Pure values and arithmetic; the
daemon's loop that acts on them is ``schedule_runner``, their file ``schedule_store``.

A schedule has a name, a five-field cron expression (minute hour day-of-month month
day-of-week, read by cronsim the way Debian's cron reads it), an IANA time zone (default UTC)
the expression is read in, a task file's text, and two policies:

    missed   due times that passed while nothing could act on them (the daemon was down, the
             machine slept): ``skip`` (default) runs none of them, the next run is at the next
             due time; ``once`` runs one catch-up job, named after the latest one
    overlap  a due time that comes while the schedule's last job is still queued or running:
             ``skip`` (default) starts no job for it; ``queue`` submits one all the same (it
             waits in the queue: the daemon runs one job a workspace at once)

``decide(schedule, now)`` says what is due: the latest due time after the schedule's
``last_due`` and at most ``now``, whether it is on time (at most ON_TIME_S past: the loop woke
late, or the daemon came back within that) or missed, and so whether a job is submitted.

Daylight saving time (cronsim, as Debian's cron): an expression with a fixed minute and hour
(``30 2 * * *``) runs once a day whatever the clock does: a time the clock skips in spring
runs at the first minute after the gap, a time the clock passes twice in autumn runs at the
first pass. An expression whose minute or hour starts with ``*`` (``*/15 * * * *``) counts
real time: in spring the skipped hour has no runs, in autumn the repeated hour runs twice
(the job names differ by their UTC offset). UTC has no transitions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from gliding.errors import UsageError

MISSED = ("skip", "once")
OVERLAP = ("skip", "queue")
ON_TIME_S = 30.0  # a due time at most this far past is run as on time, not as missed
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RUN_NAME = re.compile(r"(?P<schedule>" + NAME.pattern + r")@\d{4}-\d\d-\d\dT\d\d:\d\d[+-]\d\d:\d\d")
SEARCH_FROM_S = 3600.0  # latest_due looks this far back first, then twice as far, ...


class ScheduleError(UsageError):
    """A schedule's name, cron expression, time zone or policy is not one the daemon takes."""

    code = "schedule.invalid"


class ScheduleExists(UsageError):
    """A schedule of that name is there already."""

    code = "schedule.exists"


@dataclass(frozen=True)
class Schedule:
    """One recurring job as the daemon keeps it. Times are seconds since the epoch."""

    name: str
    cron: str
    tz: str
    missed: str
    overlap: str
    task: str  # the task file's text
    task_name: str  # its file name, for messages
    base_dir: str  # where its relative workspace (and scripted replies file) is
    model: str | None
    created: float
    last_due: float  # the last due time acted on (run or skipped); ``created`` at first
    last_job: str | None  # the last job it submitted


@dataclass(frozen=True)
class Decision:
    """What ``decide`` found due."""

    due: float | None  # the latest due time after last_due, at most now; None: none
    missed: bool = False  # it is more than ON_TIME_S past
    run: bool = False  # a job is submitted for it (the overlap policy aside)


def zone(tz: str) -> tzinfo:
    """The time zone named ``tz`` (IANA, e.g. Europe/Paris; UTC needs no database).

    Raises:
        ScheduleError: no such zone in the system's time zone database (or tzdata's).
    """
    if tz == "UTC":
        return UTC
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone {tz!r}",
                            hint="an IANA name such as Europe/Paris or America/New_York; "
                                 "the system's zone database (or pip's tzdata) has them"
                            ) from exc


def check(name: str, cron: str, tz: str, missed: str, overlap: str, now: float) -> None:
    """Refuse what no schedule may have.

    Raises:
        ScheduleError: a bad name, cron expression (or one never due), zone or policy.
    """
    if not NAME.fullmatch(name):
        raise ScheduleError(f"schedule name {name[:80]!r} is not a name",
                            hint="1-64 letters, digits, '.', '_' or '-', starting with a "
                                 "letter or digit, e.g. nightly-report")
    if missed not in MISSED:
        raise ScheduleError(f"missed policy {missed[:40]!r} is not one of {', '.join(MISSED)}",
                            hint="skip: no catch-up run; once: one catch-up run")
    if overlap not in OVERLAP:
        raise ScheduleError(f"overlap policy {overlap[:40]!r} is not one of "
                            f"{', '.join(OVERLAP)}",
                            hint="skip: no job while the last one runs; queue: queue it")
    if next_due(cron, tz, now) is None:
        raise ScheduleError(f"cron expression {cron!r} is never due",
                            hint="no date matches it in the next 50 years")


def _iterate(cron: str, tz: str, after: float) -> CronSim:
    fields = cron.split()
    if len(fields) != 5:
        raise ScheduleError(f"cron expression {cron[:100]!r} has {len(fields)} fields, not 5",
                            hint="minute hour day-of-month month day-of-week, "
                                 "e.g. '*/15 * * * *'")
    try:
        return CronSim(" ".join(fields), datetime.fromtimestamp(after, zone(tz)))
    except CronSimError as exc:
        raise ScheduleError(f"cron expression {cron!r}: {exc}",
                            hint="minute hour day-of-month month day-of-week, "
                                 "e.g. '*/15 * * * *' or '30 2 * * MON-FRI'") from exc


def next_due(cron: str, tz: str, after: float) -> float | None:
    """The first due time after ``after``; None when there is none in 50 years.

    Raises:
        ScheduleError: a bad expression or zone.
    """
    try:
        return next(_iterate(cron, tz, after)).timestamp()
    except StopIteration:
        return None


def latest_due(cron: str, tz: str, after: float, now: float) -> float | None:
    """The last due time after ``after`` and at most ``now``; None when there is none.

    Steps forward only (as ``next_due``, so both agree across DST), from a start that goes back
    from ``now`` by doubling spans: a few steps whatever the gap.

    Raises:
        ScheduleError: a bad expression or zone.
    """
    first = next_due(cron, tz, after)
    if first is None or first > now:
        return None
    span = SEARCH_FROM_S
    while True:
        start = max(after, now - span)
        found = next_due(cron, tz, start)
        if found is not None and found <= now:
            break
        span *= 2
    steps = _iterate(cron, tz, found)
    for later in steps:
        if later.timestamp() > now:
            break
        found = later.timestamp()
    return found


def decide(schedule: Schedule, now: float) -> Decision:
    """What is due for ``schedule`` at ``now`` (see the module's docstring).

    Raises:
        ScheduleError: its expression or zone no longer reads (the zone database changed).
    """
    due = latest_due(schedule.cron, schedule.tz, schedule.last_due, now)
    if due is None:
        return Decision(None)
    missed = now - due > ON_TIME_S
    return Decision(due, missed=missed, run=not missed or schedule.missed == "once")


def run_name(schedule: str, due: float, tz: str) -> str:
    """The name of the job a schedule submits for a due time: ``<schedule>@<local time>``,
    e.g. ``nightly@2026-12-04T02:30+01:00`` (the offset tells autumn's repeated hour apart)."""
    return f"{schedule}@{datetime.fromtimestamp(due, zone(tz)).isoformat(timespec='minutes')}"


def scheduled_by(job_name: str) -> str | None:
    """The schedule that submitted a job of this name, if a schedule did."""
    found = RUN_NAME.fullmatch(job_name)
    return found["schedule"] if found else None
