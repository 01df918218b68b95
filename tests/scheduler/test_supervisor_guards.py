"""A role stopped by a guard of the agent loop ends the job with the guard's name as its outcome,
like a spent budget: the checks run once for the report, then the job finishes; re-reads add
up per role in the journaled totals."""

from __future__ import annotations

import pytest

from gliding.bus.messages import ArtifactMsg, CheckReportMsg, PlanMsg
from gliding.scheduler import policy, supervisor
from gliding.scheduler.report import build_report
from gliding.scheduler.supervisor import Finished, SupervisorState, Verify
from tests.scheduler.test_supervisor import (
    SIMPLE,
    begin,
    keys,
    only_assignment,
    only_verify,
    report,
    roundtrip,
)

GUARDS = ("loop_detected", "compaction_stalled")


@pytest.mark.parametrize("guard", GUARDS)
def test_a_guard_stop_verifies_then_finishes_with_the_guards_outcome(guard: str) -> None:
    state, commands = begin()
    state, commands = supervisor.step(state, PlanMsg(**keys(only_assignment(commands)),
                                                     steps=["s"]))
    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(only_assignment(commands)), summary="", status=guard,
        error="loop detected: read_file(...) 3 times in a row", rereads=2))

    assert commands == [Verify(cycle=1, attempt=0)]  # the checks run once, for the report
    assert state.stopped == guard
    state = roundtrip(state)  # the journal keeps it
    state, commands = supervisor.step(state, report(only_verify(commands), "fail"))
    assert commands[-1] == Finished(outcome=guard)  # type: ignore[arg-type]
    assert supervisor.pending(state) == []

    done = build_report(state, artifacts=(), wall_s=0.0)
    assert done.outcome == guard and done.stopped is not None
    assert done.stopped.startswith("loop detected: read_file")
    assert done.rereads == {"DA": 2}


@pytest.mark.parametrize("guard", GUARDS)
def test_a_guard_stop_of_a_job_without_checks_finishes_at_once(guard: str) -> None:
    state, commands = begin(choice=SIMPLE, checks=())
    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(only_assignment(commands)), summary="", status=guard, error="why"))
    assert commands[-1] == Finished(outcome=guard)  # type: ignore[arg-type]


def test_a_turn_cap_is_no_stop() -> None:
    state, commands = begin(choice=SIMPLE, checks=())
    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(only_assignment(commands)), summary="", status="turn_cap"))
    assert commands[-1] == Finished(outcome="success") and state.stopped is None


def test_every_stop_has_its_outcome_and_an_older_journal_still_loads() -> None:
    assert [policy.outcome(True, "done", s) for s in ("budget", *GUARDS, "error")] == [
        "budget_exceeded", *GUARDS, "error"]
    state, _ = begin()
    old = state.model_dump(mode="json")
    old["totals"] = {"DA": {"turns": 2}}  # written before re-reads were counted
    assert SupervisorState.model_validate(old).totals["DA"].rereads == 0
    check = CheckReportMsg(job="j", role="CA", cycle=1, results=[], passed=True)
    assert check.rereads == 0
