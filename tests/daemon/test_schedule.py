"""Schedules as pure arithmetic: due times in a zone across DST (as Debian's cron), the latest
due time after a long gap, what ``decide`` does on time, missed (skip, once), the refusals,
and the names of the jobs a schedule submits."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.daemon.schedule import (
    ON_TIME_S,
    Schedule,
    ScheduleError,
    check,
    decide,
    latest_due,
    next_due,
    run_name,
    scheduled_by,
)

PARIS = "Europe/Paris"


def at(text: str, tz: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


def names(cron: str, start: str, count: int, tz: str) -> list[str]:
    out, t = [], at(start, tz)
    for _ in range(count):
        found = next_due(cron, tz, t)
        assert found is not None
        out.append(run_name("s", found, tz))
        t = found
    return out


def schedule(cron: str = "*/15 * * * *", *, last_due: float, missed: str = "skip",
             tz: str = "UTC") -> Schedule:
    return Schedule("s", cron, tz, missed, "skip", "goal: x\n", "task.yaml", "/w", None,
                    created=last_due, last_due=last_due, last_job=None)


def test_a_fixed_time_runs_once_a_day_across_both_dst_changes() -> None:
    # spring: 02:30 does not exist on 29 March; it runs at the first minute after the gap
    assert names("30 2 * * *", "2026-03-28T12:00", 3, PARIS) == [
        "s@2026-03-29T03:00+02:00", "s@2026-03-30T02:30+02:00", "s@2026-03-31T02:30+02:00"]
    # autumn: 02:30 happens twice on 25 October; it runs at the first
    assert names("30 2 * * *", "2026-10-24T12:00", 3, PARIS) == [
        "s@2026-10-25T02:30+02:00", "s@2026-10-26T02:30+01:00", "s@2026-10-27T02:30+01:00"]


def test_a_starred_expression_counts_real_time_across_dst() -> None:
    assert names("*/30 * * * *", "2026-03-29T01:00", 3, PARIS) == [
        "s@2026-03-29T01:30+01:00", "s@2026-03-29T03:00+02:00", "s@2026-03-29T03:30+02:00"]
    assert names("*/30 * * * *", "2026-10-25T01:50", 5, PARIS) == [
        "s@2026-10-25T02:00+02:00", "s@2026-10-25T02:30+02:00", "s@2026-10-25T02:00+01:00",
        "s@2026-10-25T02:30+01:00", "s@2026-10-25T03:00+01:00"]


def test_latest_due_after_a_long_gap_is_found_in_a_few_steps() -> None:
    assert latest_due("*/15 * * * *", "UTC", at("2020-01-01T00:00"),
                      at("2026-03-01T10:07")) == at("2026-03-01T10:00")
    assert latest_due("* * 1 * *", "UTC", at("2026-01-01T00:00"),
                      at("2026-03-20T10:07")) == at("2026-03-01T23:59")
    assert latest_due("0 9 * * *", "UTC", at("2026-03-01T09:00"),
                      at("2026-03-01T23:00")) is None  # nothing after the last one


@settings(max_examples=60, deadline=None)
@given(cron=st.sampled_from(["*/7 * * * *", "0 */5 * * *", "30 2 * * *", "15 9 * * MON-FRI",
                             "0 0 1 * *"]),
       tz=st.sampled_from(["UTC", PARIS, "America/New_York"]),
       start=st.integers(1_700_000_000, 1_900_000_000), gap=st.integers(0, 40 * 86400))
def test_latest_due_agrees_with_stepping_forward_one_due_time_at_a_time(
        cron: str, tz: str, start: int, gap: int) -> None:
    now, expected, t = start + gap, None, float(start)
    while (found := next_due(cron, tz, t)) is not None and found <= now:
        expected = t = found
    assert latest_due(cron, tz, start, now) == expected


def test_decide_on_time_missed_skip_and_missed_once() -> None:
    last = at("2026-03-01T10:00")
    nothing = decide(schedule(last_due=last), at("2026-03-01T10:14"))
    assert (nothing.due, nothing.run) == (None, False)
    on_time = decide(schedule(last_due=last), at("2026-03-01T10:15") + ON_TIME_S)
    assert (on_time.due, on_time.missed, on_time.run) == (at("2026-03-01T10:15"), False, True)
    later = at("2026-03-01T13:07")  # the daemon was down from 10:05 to 13:07
    skipped = decide(schedule(last_due=last), later)
    assert (skipped.due, skipped.missed, skipped.run) == (at("2026-03-01T13:00"), True, False)
    caught_up = decide(schedule(last_due=last, missed="once"), later)
    assert (caught_up.due, caught_up.missed, caught_up.run) == (at("2026-03-01T13:00"), True,
                                                                 True)


@pytest.mark.parametrize(("fields", "says"), [
    (("bad name!", "* * * * *", "UTC", "skip", "skip"), "is not a name"),
    (("s", "*/15 * * *", "UTC", "skip", "skip"), "has 4 fields, not 5"),
    (("s", "0 0 * * * *", "UTC", "skip", "skip"), "has 6 fields, not 5"),
    (("s", "61 * * * *", "UTC", "skip", "skip"), "Bad minute"),
    (("s", "0 0 30 2 *", "UTC", "skip", "skip"), "Bad day-of-month"),
    (("s", "* * * * *", "Mars/Olympus", "skip", "skip"), "unknown time zone 'Mars/Olympus'"),
    (("s", "* * * * *", "../../etc/passwd", "skip", "skip"), "unknown time zone"),
    (("s", "* * * * *", "UTC", "twice", "skip"), "missed policy 'twice'"),
    (("s", "* * * * *", "UTC", "skip", "kill"), "overlap policy 'kill'"),
])
def test_what_no_schedule_may_have_is_refused_with_a_hint(
        fields: tuple[str, str, str, str, str], says: str) -> None:
    with pytest.raises(ScheduleError) as raised:
        check(*fields, now=at("2026-03-01T10:00"))
    assert says in raised.value.message and raised.value.hint
    assert raised.value.code == "schedule.invalid"


def test_job_names_say_which_schedule_and_when() -> None:
    assert run_name("nightly", at("2026-12-04T02:30", PARIS), PARIS) == (
        "nightly@2026-12-04T02:30+01:00")
    assert scheduled_by("nightly@2026-12-04T02:30+01:00") == "nightly"
    assert scheduled_by("task.yaml") is None and scheduled_by("a@b.yaml") is None
