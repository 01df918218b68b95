"""The exploratory pipeline in the pure supervisor: PA → DA per plan step, in parallel as the
dependencies allow (at most max_parallel at once) → CA → AA.

The property test drives it with random plans (random dependency graphs, with unknown ids,
cycles and repeats for the plan normalisation to mend) and answers the outstanding
assignments in a random order, with duplicates and strays in between."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.bus.messages import (
    AnswerMsg,
    ArtifactMsg,
    Assignment,
    CheckOutcome,
    CheckReportMsg,
    DecisionMsg,
    PlanMsg,
    PlanStep,
)
from gliding.config.roles import auto_roles
from gliding.scheduler import policy, supervisor
from gliding.scheduler.supervisor import (
    Command,
    Emit,
    Finished,
    Ignored,
    SupervisorState,
    TimeUp,
    Verify,
)

JOB = "j1"
EXPLORATORY = policy.PipelineChoice(auto_roles(policy.EXPLORATORY), "exploratory", "test")
CHECK = "file a.txt exists"


def roundtrip(state: SupervisorState) -> SupervisorState:
    return SupervisorState.model_validate_json(state.model_dump_json())


def begin(max_parallel: int = 2, checks: tuple[str, ...] = (CHECK,), max_corrections: int = 1,
          max_cycles: int = 1) -> tuple[SupervisorState, list[Command]]:
    return supervisor.start(JOB, "Write the files", EXPLORATORY, checks,
                            max_corrections=max_corrections, max_cycles=max_cycles,
                            max_parallel=max_parallel)


def assignments(commands: list[Command]) -> list[Assignment]:
    return [c for c in commands if isinstance(c, Assignment)]


def keys(a: Assignment) -> dict[str, object]:
    return {"job": a.job, "role": a.role, "cycle": a.cycle, "attempt": a.attempt,
            "step": a.step}


def did(a: Assignment, summary: str = "", status: str = "finished",
        turns: int = 2) -> ArtifactMsg:
    assert a.step is not None
    path = f"{a.step}.txt"
    return ArtifactMsg(**keys(a), summary=summary or f"wrote {path}", status=status,
                       written={path: f"urn:{a.step}"}, files=[path], turns=turns)


def report(a: Assignment, passed: bool) -> CheckReportMsg:
    r = CheckOutcome(check=CHECK, status="pass" if passed else "fail", evidence="e",
                     remedy="Write the file a.txt")
    return CheckReportMsg(**keys(a), results=[r], passed=passed)


def test_independent_steps_run_at_once_up_to_max_parallel() -> None:
    state, commands = begin(max_parallel=2)
    [pa] = assignments(commands)
    assert pa.instructions.endswith(supervisor.PARALLEL_HINT)
    plan = PlanMsg(**keys(pa), steps=[{"id": "a", "text": "write a.txt"},
                                      {"id": "b", "text": "write b.txt"},
                                      {"id": "c", "text": "write c.txt"}])
    state, commands = supervisor.step(state, plan)
    first = assignments(commands)
    assert [(a.role, a.step, a.attempt, a.turn_base) for a in first] == [
        ("DA", "a", 0, 0), ("DA", "b", 0, 0)]
    assert supervisor.pending(state) == first
    assert "Your step (1 of 3, id a): write a.txt" in first[0].instructions
    assert "Goal: Write the files" in first[0].instructions
    assert "Checks on your files:\n- file a.txt exists" in first[0].instructions
    assert "Checks on" not in first[1].instructions  # b.txt has no check

    state, commands = supervisor.step(state, did(first[1]))  # b first: any order
    [c] = assignments(commands)
    assert c.step == "c" and [a.step for a in state.running] == ["a", "c"]
    state, commands = supervisor.step(state, did(first[1]))  # again: never taken twice
    assert len(commands) == 1 and isinstance(commands[0], Ignored)
    assert "step b is done already" in commands[0].reason

    state, commands = supervisor.step(state, did(c))
    assert assignments(commands) == []  # a still runs: no CA yet
    state, commands = supervisor.step(state, did(first[0]))
    [ca] = assignments(commands)
    assert ca.role == "CA" and "Files DA wrote: a.txt, b.txt, c.txt" in ca.instructions
    assert state.totals["DA"].turns == 6 and state.step_turns == {"DA": 6}
    assert set(state.done_steps) == {"a", "b", "c"}


def test_a_step_waits_for_its_dependencies_and_hears_what_they_did() -> None:
    state, commands = begin(max_parallel=4)
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[
        {"id": "data", "text": "write data.csv"},
        {"id": "code", "text": "write load.py"},
        {"id": "report", "text": "write report.md from both", "dependsOn": ["data", "code"]}]))
    assert [a.step for a in assignments(commands)] == ["data", "code"]
    data, code = assignments(commands)
    state, commands = supervisor.step(state, did(data, "wrote 3 rows"))
    assert assignments(commands) == []
    state, commands = supervisor.step(state, did(code, "wrote the loader"))
    [rep] = assignments(commands)
    assert rep.step == "report"
    assert ("Done before it:\n- data: wrote 3 rows (files: data.txt)\n"
            "- code: wrote the loader (files: code.txt)") in rep.instructions


def test_plain_string_steps_run_one_after_another() -> None:
    state, commands = begin(max_parallel=4)
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=["one", "two"]))
    [one] = assignments(commands)
    assert one.step == "1"
    state, commands = supervisor.step(state, did(one))
    [two] = assignments(commands)
    assert two.step == "2" and "- 1: wrote 1.txt" in two.instructions


def test_a_failed_step_stops_the_job_and_the_others_are_ignored() -> None:
    state, commands = begin(max_parallel=3, checks=())
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[
        {"id": "a", "text": "A"}, {"id": "b", "text": "B"}]))
    a, b = assignments(commands)
    state, commands = supervisor.step(state, did(a, status="budget"))
    assert commands[-1] == Finished(outcome="budget_exceeded")
    assert state.running == () and supervisor.pending(state) == []
    after, commands = supervisor.step(state, did(b))
    assert after == state and isinstance(commands[0], Ignored)


def test_a_failed_check_sends_one_correction_da_numbered_after_the_step_sessions() -> None:
    state, commands = begin(max_parallel=2)
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[
        {"id": "a", "text": "A"}, {"id": "b", "text": "B"}]))
    for a in assignments(commands):
        state, commands = supervisor.step(state, did(a, turns=3))
    [ca] = assignments(commands)
    state, commands = supervisor.step(state, report(ca, passed=False))
    [fix] = assignments(commands)
    assert (fix.role, fix.step, fix.attempt) == ("DA", None, 1)
    assert fix.turn_base == 0  # the DA session's own turns: the step sessions had theirs
    assert supervisor.pending(state) == [fix]
    state, commands = supervisor.step(state, ArtifactMsg(**keys(fix), summary="fixed", turns=2))
    [ca2] = assignments(commands)
    assert (ca2.role, ca2.attempt) == ("CA", 1)


def test_an_empty_plan_is_one_step_the_goal() -> None:
    state, commands = begin()
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[]))
    [only] = assignments(commands)
    assert only.step == "1" and "Your step (1 of 1, id 1): Write the files" in only.instructions
    assert "Other DAs" not in only.instructions


def test_resume_reissues_every_outstanding_step() -> None:
    state, commands = begin(max_parallel=3)
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[
        {"id": x, "text": x} for x in "abcd"]))
    state, _ = supervisor.step(state, did(assignments(commands)[1]))
    journaled = roundtrip(state)
    assert supervisor.pending(journaled) == list(journaled.running)
    assert [a.step for a in journaled.running] == ["a", "c", "d"]


def test_an_old_journal_without_the_new_fields_still_loads() -> None:
    standard = policy.PipelineChoice(auto_roles(policy.STANDARD), "standard", "r")
    state, _ = supervisor.start(JOB, "g", standard,
                                (), max_corrections=1, max_cycles=1)
    old = state.model_dump(mode="json")
    for field in ("max_parallel", "plan_steps", "running", "done_steps", "step_turns"):
        del old[field]
    assert old["waiting"]["role"] == "PA"
    del old["waiting"]["step"]
    loaded = SupervisorState.model_validate(old)
    assert loaded == state and supervisor.pending(loaded) == [state.waiting]


# ---- the property -------------------------------------------------------------------------
@st.composite
def raw_plans(draw: st.DrawFn) -> list[object]:
    """Plans as PA might give them: objects with random dependencies (earlier, later, unknown
    or themselves: cycles too), plain strings and repeats."""
    n = draw(st.integers(1, 7))
    ids = [f"s{i}" for i in range(n)]
    items: list[object] = []
    for i in range(n):
        if draw(st.integers(0, 5)) == 0:
            items.append(f"step {i}")
            continue
        deps = draw(st.lists(st.sampled_from([*ids, "zz", "1"]), max_size=3))
        items.append({"id": ids[i], "text": f"step {i}", "dependsOn": deps})
    if draw(st.booleans()):
        items.append(draw(st.sampled_from(items)))  # a repeat
    return items


@settings(max_examples=200, deadline=None)
@given(plan=raw_plans(), max_parallel=st.integers(1, 4), cycles=st.integers(1, 2),
       data=st.data())
@pytest.mark.heavy
def test_random_dags_and_answer_orders(plan: list[object], max_parallel: int, cycles: int,
                                       data: st.DataObject) -> None:
    state, commands = begin(max_parallel=max_parallel, max_cycles=cycles, max_corrections=1)
    assigned: dict[int, list[str]] = {}  # cycle -> steps assigned, in order
    reached_ca: set[int] = set()
    accepted: list[AnswerMsg] = []
    graph: dict[str, tuple[str, ...]] = {}
    for _ in range(200):
        state = roundtrip(state)
        if state.outcome is not None:
            break
        out = supervisor.pending(state)
        assert out, "waits for nothing but has not finished"
        assert len(state.running) <= max_parallel
        for a in assignments(commands):
            if a.step is not None:
                assert a.step not in assigned.setdefault(a.cycle, []), "assigned twice"
                assert all(d in state.done_steps for d in graph[a.step]), "before its deps"
                assigned[a.cycle].append(a.step)
            if a.role == "CA" and a.attempt == 0:
                assert sorted(assigned[a.cycle]) == sorted(graph), "CA before every step"
                reached_ca.add(a.cycle)
        if state.running:
            assert out == list(state.running)
        want = data.draw(st.sampled_from(out))
        message: AnswerMsg
        if isinstance(want, Verify):
            message = CheckReportMsg(job=JOB, role=supervisor.RUNNER, cycle=want.cycle,
                                     attempt=want.attempt, results=[], passed=True)
        elif want.role == "PA":
            planned = PlanMsg(**keys(want), steps=plan)
            graph = {s.id: tuple(s.depends_on) for s in planned.steps}
            message = planned
        elif want.role == "DA":
            message = ArtifactMsg(**keys(want), summary="did", turns=1,
                                  written={f"{want.step}.txt": "urn:x"})
        elif want.role == "CA":
            message = report(want, data.draw(st.booleans()))
        else:
            message = DecisionMsg(**keys(want), decision=data.draw(st.sampled_from(want.options)),
                                  report="r")
        strays: list[AnswerMsg] = [*accepted, ArtifactMsg(job=JOB, cycle=state.cycle,
                                                          step="nope", summary="")]
        if data.draw(st.booleans()) and accepted:  # a duplicate, or a step nobody runs
            after, ignored = supervisor.step(state, data.draw(st.sampled_from(strays)))
            assert after == state and len(ignored) == 1 and isinstance(ignored[0], Ignored)
        state, commands = supervisor.step(state, message)
        assert not any(isinstance(c, Ignored) for c in commands), commands
        accepted.append(message)
    else:
        raise AssertionError(f"no outcome: {state!r}")
    assert isinstance(commands[-1], Finished)
    for cycle in assigned:
        assert cycle in reached_ca, "every cycle that planned reaches CA"
    assert state.running == ()


def test_time_up_clears_the_running_steps() -> None:
    state, commands = begin(max_parallel=2, checks=())
    [pa] = assignments(commands)
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=[
        {"id": "a", "text": "A"}, {"id": "b", "text": "B"}]))
    state, commands = supervisor.step(state, TimeUp(reason="wall time budget of 1s spent"))
    assert state.running == () and commands[-1] == Finished(outcome="budget_exceeded")
    assert Emit(event="job.finished", data={"outcome": "budget_exceeded"}) in commands


def test_plan_notes_are_an_event() -> None:
    state, commands = begin()
    [pa] = assignments(commands)
    steps, notes = [PlanStep(id="a", text="A")], ["step a: unknown dependency 'x' dropped"]
    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=steps, notes=notes))
    assert commands[0] == Emit(event="plan.notes", data={"cycle": 1, "notes": notes})
