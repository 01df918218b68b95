"""The pure supervisor: properties over generated agent behaviour, plus the documented flows.

The property test drives ``supervisor.step`` with a generated crew: each awaited assignment gets a
plausible answer (random check verdicts, AA decisions among the offered options, now and then a
``budget`` or ``failed`` status, now and then ``TimeUp``), with foreign, late, duplicate and
mistyped messages injected between the real answers. An independent model of what the run
should have decided (last check results, AA's last word, why it stopped) is the oracle for the
outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gliding.bus.messages import (
    AnswerMsg,
    ArtifactMsg,
    Assignment,
    CheckOutcome,
    CheckReportMsg,
    DecisionMsg,
    PlanMsg,
    TurnLine,
    UsageWire,
)
from gliding.config.roles import auto_roles
from gliding.scheduler import policy, supervisor
from gliding.scheduler.supervisor import (
    Command,
    Emit,
    Finished,
    Ignored,
    Input,
    SupervisorState,
    TimeUp,
    Verify,
)

JOB = "j1"
ROLES = ("PA", "DA", "CA", "AA")
CHECK_NAMES = ("file a.txt exists", "file b.txt contains 'B'", "pytest passes")
_ANSWER_CLASS = {"PA": PlanMsg, "DA": ArtifactMsg, "CA": CheckReportMsg, "AA": DecisionMsg,
                 supervisor.RUNNER: CheckReportMsg}


def roundtrip(state: SupervisorState) -> SupervisorState:
    return SupervisorState.model_validate_json(state.model_dump_json())


def issued(commands: list[Command]) -> list[Assignment | Verify]:
    return [c for c in commands if isinstance(c, Assignment | Verify)]


def last_issued(commands: list[Command]) -> Assignment | Verify | None:
    found = issued(commands)
    return found[-1] if found else None


def passed_of(results: tuple[CheckOutcome, ...] | list[CheckOutcome]) -> bool | None:
    return all(r.passed for r in results) if results else None


def outcome_of(check: str, status: str) -> CheckOutcome:
    return CheckOutcome(check=check, status=status, evidence=f"{check}: {status}",
                        expected="B" if "contains" in check else None,
                        remedy=f"Make sure {check}")


def minimal(cls: type[AnswerMsg], *, job: str, role: str, cycle: int,
            attempt: int) -> AnswerMsg:
    """An answer of class ``cls`` with the given correlation keys and nothing else."""
    keys = {"job": job, "role": role, "cycle": cycle, "attempt": attempt}
    if cls is PlanMsg:
        return PlanMsg(**keys, steps=["a step"])
    if cls is ArtifactMsg:
        return ArtifactMsg(**keys, summary="wrote", written={"x.txt": "urn:x"}, turns=7)
    if cls is CheckReportMsg:
        return CheckReportMsg(**keys, results=[outcome_of("x", "pass")], passed=True)
    return DecisionMsg(**keys, decision="done", report="looks done")


# ---- the generated crew ---------------------------------------------------------------------
CALM = st.sampled_from(("finished",) * 4 + ("turn_cap",))
STATUS = st.sampled_from(("finished",) * 12 + ("turn_cap", "turn_cap", "budget", "failed"))
USAGE = st.builds(UsageWire, prompt_tokens=st.integers(0, 500),
                  completion_tokens=st.integers(0, 500), cached_tokens=st.integers(0, 100),
                  cost_usd=st.floats(0, 1, allow_nan=False, allow_infinity=False))


def check_results(data: st.DataObject, checks: tuple[str, ...]) -> list[CheckOutcome]:
    return [outcome_of(c, data.draw(st.sampled_from(("fail", "pass")))) for c in checks]


def answer(data: st.DataObject, want: Assignment | Verify, checks: tuple[str, ...],
           status: st.SearchStrategy[str] = STATUS) -> AnswerMsg:
    """A plausible answer to ``want``; ``status`` says how the agent's session ends."""
    if isinstance(want, Verify):
        results = check_results(data, checks)
        return CheckReportMsg(job=JOB, role=supervisor.RUNNER, cycle=want.cycle,
                              attempt=want.attempt, results=results,
                              passed=all(r.passed for r in results), verified_by="runner")
    turns = data.draw(st.integers(0, 4))
    common = {
        "job": want.job, "role": want.role, "cycle": want.cycle, "attempt": want.attempt,
        "status": data.draw(status), "turns": turns, "usage": data.draw(USAGE),
        "lines": [TurnLine(role=want.role, turn=want.turn_base + i, summary=f"turn {i}",
                           iri=f"urn:{want.role}:{want.turn_base + i}") for i in range(turns)],
    }
    if common["status"] != "finished":
        common["error"] = data.draw(st.sampled_from((None, "agent gave up")))
    if want.role == "PA":
        steps = data.draw(st.lists(st.sampled_from(("read", "write", "test")), max_size=3))
        return PlanMsg(**common, steps=steps)
    if want.role == "DA":
        written = data.draw(st.dictionaries(st.sampled_from(("a.txt", "b.txt")),
                                            st.just(f"urn:da:{want.cycle}:{want.attempt}")))
        return ArtifactMsg(**common, summary="did it", written=written, files=sorted(written))
    if want.role == "CA":
        results = check_results(data, checks)
        return CheckReportMsg(**common, results=results, passed=all(r.passed for r in results))
    assert want.role == "AA", want
    assert want.options, "AA must be offered a choice"
    decision = data.draw(st.sampled_from(want.options))
    return DecisionMsg(**common, decision=decision, report=f"AA chose {decision}")


def noise(data: st.DataObject, real: AnswerMsg, accepted: list[AnswerMsg]) -> Input:
    """A message that must not be taken: a duplicate, or the real answer with one key wrong."""
    kinds = ["foreign", "role", "cycle", "attempt", "type"] + (["duplicate"] * 2 if accepted
                                                                else [])
    kind = data.draw(st.sampled_from(kinds))
    if kind == "duplicate":
        return data.draw(st.sampled_from(accepted))
    if kind == "foreign":
        return real.model_copy(update={"job": data.draw(st.sampled_from(("j2", "j10", "")))})
    if kind == "role":
        other = [r for r in (*ROLES, supervisor.RUNNER, "XA") if r != real.role]
        return real.model_copy(update={"role": data.draw(st.sampled_from(other))})
    if kind == "cycle":
        lower = [real.cycle - 1] if real.cycle > 0 else []
        cycle = data.draw(st.sampled_from([*lower, real.cycle + 1, real.cycle + 3]))
        return real.model_copy(update={"cycle": cycle})
    if kind == "attempt":
        lower = [real.attempt - 1] if real.attempt > 0 else []
        return real.model_copy(update={"attempt": data.draw(st.sampled_from(
            [*lower, real.attempt + 1]))})
    cls = data.draw(st.sampled_from([c for c in (PlanMsg, ArtifactMsg, CheckReportMsg,
                                                 DecisionMsg) if c is not type(real)]))
    return minimal(cls, job=real.job, role=real.role, cycle=real.cycle, attempt=real.attempt)


@dataclass
class Model:
    """What the run should have decided, kept apart from the supervisor's own state."""

    max_cycles: int
    results: tuple[CheckOutcome, ...] = ()
    decision: str | None = None
    stopped: str | None = None
    ca_reported: bool = False
    verify_issued: bool = False
    turns: dict[str, int] = field(default_factory=dict)
    corrections: dict[int, int] = field(default_factory=dict)

    def take(self, state: SupervisorState, m: Input) -> None:
        """Record an input the supervisor accepted in ``state`` (the state before it)."""
        if isinstance(m, TimeUp):  # an earlier stop keeps its reason (a failed role: error)
            self.stopped = self.stopped or "budget"
            return
        if m.role != supervisor.RUNNER:
            self.turns[m.role] = self.turns.get(m.role, 0) + m.turns
        if state.verifying is not None:
            assert isinstance(m, CheckReportMsg)
            self.results = tuple(m.results)
            return
        if m.status in ("budget", "failed"):
            self.stopped = "budget" if m.status == "budget" else "error"
            return
        if isinstance(m, CheckReportMsg):
            self.results, self.ca_reported = tuple(m.results), True
        if isinstance(m, DecisionMsg):
            last = m.decision == "another_cycle" and m.cycle >= self.max_cycles
            self.decision = "escalate" if last else m.decision


@st.composite
def jobs(draw: st.DrawFn) -> tuple[policy.PipelineChoice, tuple[str, ...], int, int]:
    roles = draw(st.one_of(  # mostly the pipelines auto picks, which have the most paths
        st.sampled_from((policy.STANDARD,) * 3 + (policy.EMERGENCY,) * 2 + (policy.SIMPLE,))
        .map(auto_roles),
        st.sets(st.sampled_from(ROLES)).map(lambda rs: tuple(r for r in ROLES if r in rs))))
    checks = tuple(draw(st.lists(st.sampled_from(CHECK_NAMES), unique=True,
                                 min_size=draw(st.sampled_from((0, 1, 1))), max_size=3)))
    return (policy.PipelineChoice(roles, "explicit", "generated"), checks,
            draw(st.integers(0, 3)), draw(st.integers(1, 3)))


def check_invariants(state: SupervisorState) -> None:
    assert 1 <= state.cycle <= state.max_cycles
    assert 0 <= state.attempt <= state.max_corrections
    assert state.corrections <= state.max_corrections * state.max_cycles
    assert state.waiting is None or state.verifying is None
    if state.outcome is not None:
        assert state.waiting is None and state.verifying is None
    if state.waiting is not None:
        w = state.waiting
        assert (w.job, w.cycle, w.attempt) == (state.job, state.cycle, state.attempt)
        assert w.role in state.roles
    if state.verifying is not None:
        assert state.checks, "Verify without checks to run"


def check_commands(before: SupervisorState | None, state: SupervisorState,
                   commands: list[Command], model: Model) -> None:
    """What one transition issued is well formed and agrees with the model."""
    assert len(issued(commands)) <= 1
    if any(isinstance(c, Finished) for c in commands):
        assert isinstance(commands[-1], Finished) and not issued(commands)
        assert commands[-2] == Emit(event="job.finished", data={"outcome": state.outcome})
    for c in commands:
        if isinstance(c, Verify):
            model.verify_issued = True
            assert state.verifying == c and (c.cycle, c.attempt) == (state.cycle, state.attempt)
        if isinstance(c, Assignment):
            assert state.waiting == c and c.goal == state.goal
            assert c.turn_base == model.turns.get(c.role, 0)
            if c.role == "AA":
                assert c.options == list(policy.decision_options(state.passed))
            else:
                assert c.options == []
            if c.role == "DA" and c.attempt > 0:  # a correction: only right after a failed CA
                model.corrections[c.cycle] = model.corrections.get(c.cycle, 0) + 1
                assert before is not None and before.waiting is not None
                assert before.waiting.role == "CA" and state.passed is False
                remedies = "; ".join(r.remedy for r in state.results if not r.passed)
                assert c.instructions.startswith(f"Goal: {remedies}\n")
        if isinstance(c, Finished):
            assert c.outcome in get_args(policy.Outcome)
            assert c.outcome == state.outcome
            assert c.outcome == policy.outcome(state.passed, state.decision, state.stopped)


def assert_ignored(state: SupervisorState, message: Input) -> None:
    after, commands = supervisor.step(state, message)
    assert after == state, f"{message!r} changed the state"
    assert len(commands) == 1 and isinstance(commands[0], Ignored), commands


@settings(max_examples=300, deadline=None)
@given(job=jobs(), data=st.data())
@pytest.mark.heavy
def test_any_crew_leads_to_one_bounded_outcome(
        job: tuple[policy.PipelineChoice, tuple[str, ...], int, int],
        data: st.DataObject) -> None:
    choice, checks, max_corrections, max_cycles = job
    model = Model(max_cycles=max_cycles)
    state, commands = supervisor.start(JOB, "make the files", choice, checks,
                                       max_corrections=max_corrections, max_cycles=max_cycles)
    assert commands[0] == Emit(event="job.started", data={
        "pipeline": list(choice.roles), "kind": "explicit", "reason": "generated",
        "goal": "make the files"})
    check_commands(None, state, commands, model)
    last = last_issued(commands)
    accepted: list[AnswerMsg] = []
    calm = data.draw(st.sampled_from((True, True, False)))  # never out of budget nor time
    timed_out = False
    # PA + DA + CA + AA per cycle, DA and CA again per correction, one Verify, one TimeUp
    bound = max_cycles * (4 + 2 * max_corrections) + 2
    for _ in range(bound + 1):
        check_invariants(state)
        assert roundtrip(state) == state
        state = roundtrip(state)  # drive the machine from the journaled form
        if state.outcome is not None:
            break
        assert supervisor.pending(state) == ([last] if last is not None else [])
        assert last is not None, "the job waits for nothing but has not finished"
        real = answer(data, last, checks, CALM if calm else STATUS)
        for _ in range(data.draw(st.integers(0, 3))):
            assert_ignored(state, noise(data, real, accepted))
        message: Input = real
        if not calm and not timed_out and data.draw(st.integers(0, 19)) == 0:
            message = TimeUp(reason="wall time budget of 1s spent")  # the runner sends one
            timed_out = True
        before = state
        state, commands = supervisor.step(before, message)
        assert not any(isinstance(c, Ignored) for c in commands), commands
        if isinstance(message, TimeUp):
            must_verify = not before.results and bool(checks)  # a cut-off Verify reruns
            assert isinstance(commands[0], Verify) if must_verify else (
                isinstance(commands[-1], Finished)), commands
        else:
            assert state.accepted == before.accepted + 1
            accepted.append(message)
        model.take(before, message)
        check_commands(before, state, commands, model)
        last = last_issued(commands)
    else:
        raise AssertionError(f"no outcome after {bound} answers: {state!r}")

    assert isinstance(commands[-1], Finished)
    event(f"outcome {state.outcome}")
    event(f"cycles {state.cycle}, corrections {state.corrections}")
    assert state.outcome == policy.outcome(passed_of(model.results), model.decision,
                                           model.stopped)
    assert state.results == model.results
    assert all(n <= max_corrections for n in model.corrections.values())
    assert state.corrections == sum(model.corrections.values())
    assert {r: t.turns for r, t in state.totals.items()} == {
        r: n for r, n in model.turns.items()}
    assert supervisor.pending(state) == []
    if checks and not model.ca_reported:
        assert model.verify_issued, "checks were never run"
    if not checks:
        assert not model.verify_issued
    # a finished job takes nothing more
    for m in [*accepted[-3:], TimeUp(reason="late")]:
        assert_ignored(state, m)


# ---- examples -------------------------------------------------------------------------------
STANDARD = policy.PipelineChoice(auto_roles(policy.STANDARD), "standard", "default")
EMERGENCY = policy.PipelineChoice(auto_roles(policy.EMERGENCY), "emergency", "fix")
SIMPLE = policy.PipelineChoice(auto_roles(policy.SIMPLE), "simple", "short")
CHECKS = ("file hello.txt contains 'Hi'",)


def keys(a: Assignment | Verify, role: str | None = None) -> dict[str, object]:
    return {"job": JOB, "role": role or getattr(a, "role", supervisor.RUNNER),
            "cycle": a.cycle, "attempt": a.attempt}


def only_assignment(commands: list[Command]) -> Assignment:
    [a] = [c for c in commands if isinstance(c, Assignment)]
    return a


def only_verify(commands: list[Command]) -> Verify:
    [v] = [c for c in commands if isinstance(c, Verify)]
    return v


def next_step(commands: list[Command]) -> object:
    """What the ``check.report`` event says follows the check report."""
    [e] = [c for c in commands if isinstance(c, Emit) and c.event == "check.report"]
    return e.data["next"]


def report(a: Assignment | Verify, status: str, role: str | None = None) -> CheckReportMsg:
    r = CheckOutcome(check=CHECKS[0], status=status, evidence="hello.txt holds 'Ho'",
                     expected="Hi", remedy="Write the file hello.txt containing the text 'Hi'")
    by = "runner" if isinstance(a, Verify) and role is None else "CA"
    return CheckReportMsg(**keys(a, role), results=[r], passed=status == "pass",
                          verified_by=by)


def begin(choice: policy.PipelineChoice = STANDARD, checks: tuple[str, ...] = CHECKS,
          max_corrections: int = 2, max_cycles: int = 2
          ) -> tuple[SupervisorState, list[Command]]:
    return supervisor.start(JOB, "Say hi", choice, checks, max_corrections=max_corrections,
                            max_cycles=max_cycles)


def test_standard_flow_ends_in_success() -> None:
    state, commands = begin()
    pa = only_assignment(commands)
    assert (pa.role, pa.cycle, pa.attempt) == ("PA", 1, 0)
    assert pa.instructions.startswith("Goal: Say hi\n\nSuccess checks:\n- file hello.txt")

    state, commands = supervisor.step(state, PlanMsg(**keys(pa), steps=["write hello.txt"]))
    da = only_assignment(commands)
    assert da.role == "DA" and "Plan:\n1. write hello.txt" in da.instructions
    assert state.plan == ("write hello.txt",)

    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(da), summary="wrote it", written={"hello.txt": "urn:r1"}, turns=2))
    ca = only_assignment(commands)
    assert ca.role == "CA" and "Files DA wrote: hello.txt" in ca.instructions

    state, commands = supervisor.step(state, report(ca, "pass"))
    assert commands[0] == Emit(event="check.report", data={
        "passed": True, "next": "accept", "cycle": 1, "attempt": 0, "failed": []})
    aa = only_assignment(commands)
    assert aa.role == "AA" and aa.options == ["done", "escalate"]
    assert "- PASS file hello.txt contains 'Hi'" in aa.instructions

    state, commands = supervisor.step(state, DecisionMsg(**keys(aa), decision="done",
                                                         report="all good"))
    assert commands == [Emit(event="job.finished", data={"outcome": "success"}),
                        Finished(outcome="success")]
    assert (state.outcome, state.accepted, state.cycle, state.corrections) == (
        "success", 4, 1, 0)
    assert state.written == {"hello.txt": "urn:r1"} and state.totals["DA"].turns == 2
    assert state.verified_by == "CA" and state.report == "all good"


def test_failed_check_sends_da_the_remedy_as_its_goal() -> None:
    state, commands = begin(choice=EMERGENCY)
    da = only_assignment(commands)
    state, commands = supervisor.step(state, ArtifactMsg(**keys(da), summary="wrote", turns=3))
    ca = only_assignment(commands)
    state, commands = supervisor.step(state, report(ca, "fail"))

    assert next_step(commands) == "correct"
    again = only_assignment(commands)
    assert (again.role, again.cycle, again.attempt, again.turn_base) == ("DA", 1, 1, 3)
    assert again.instructions.startswith(
        "Goal: Write the file hello.txt containing the text 'Hi'\n\nPlan:\n1. Write the file")
    assert "- FAIL file hello.txt contains 'Hi': hello.txt holds 'Ho'\n  expected text: Hi" in (
        again.instructions)
    assert "Original goal: Say hi" in again.instructions
    assert (state.attempt, state.corrections) == (1, 1)
    # the first attempt's answer, arriving late, is not the answer to the correction
    assert_ignored(state, ArtifactMsg(**keys(da), summary="late"))


def test_corrections_stop_at_the_bound_and_aa_cannot_call_it_done() -> None:
    state, commands = begin(choice=EMERGENCY,
                            max_corrections=1)
    for attempt in (0, 1):
        da = only_assignment(commands)
        assert (da.role, da.attempt) == ("DA", attempt)
        state, commands = supervisor.step(state, ArtifactMsg(**keys(da), summary="tried"))
        state, commands = supervisor.step(state, report(only_assignment(commands), "fail"))
    aa = only_assignment(commands)
    assert aa.role == "AA" and aa.options == ["another_cycle", "escalate"]
    assert next_step(commands) == "give_up"
    state, commands = supervisor.step(state, DecisionMsg(**keys(aa), decision="escalate",
                                                         report="needs a human"))
    assert commands[-1] == Finished(outcome="escalated")


def test_another_cycle_past_the_last_one_escalates() -> None:
    state, commands = begin(choice=policy.PipelineChoice(("AA",), "explicit", "t"), checks=(),
                            max_cycles=2)
    for cycle in (1, 2):
        aa = only_assignment(commands)
        assert (aa.role, aa.cycle) == ("AA", cycle)
        assert aa.options == ["done", "another_cycle", "escalate"]  # no check ran
        state, commands = supervisor.step(state, DecisionMsg(
            **keys(aa), decision="another_cycle", report="not yet"))
    assert commands[-1] == Finished(outcome="escalated")
    assert state.decision == "escalate" and state.cycle == 2


def test_next_cycle_hands_pa_the_feedback() -> None:
    state, commands = begin(max_corrections=0)
    state, commands = supervisor.step(state, PlanMsg(**keys(only_assignment(commands)),
                                                     steps=[]))
    assert state.plan == ("Say hi",)  # an empty plan falls back to the goal
    state, commands = supervisor.step(state, ArtifactMsg(**keys(only_assignment(commands)),
                                                         summary="x"))
    state, commands = supervisor.step(state, report(only_assignment(commands), "fail"))
    aa = only_assignment(commands)
    state, commands = supervisor.step(state, DecisionMsg(**keys(aa), decision="another_cycle",
                                                         report="wrong text"))
    pa = only_assignment(commands)
    assert (pa.role, pa.cycle, pa.attempt) == ("PA", 2, 0)
    assert "Cycle 1 did not succeed. AA said: wrong text\n- FAIL file hello.txt" in (
        pa.instructions)


def test_budget_status_from_da_ends_in_budget_exceeded_after_verifying() -> None:
    state, commands = begin()
    state, commands = supervisor.step(state, PlanMsg(**keys(only_assignment(commands)),
                                                     steps=["s"]))
    da = only_assignment(commands)
    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(da), summary="ran out", status="budget", error="prompt tokens spent"))
    assert commands == [Verify(cycle=1, attempt=0)]
    assert state.stopped == "budget" and state.stop_reason == "prompt tokens spent"
    # CA's answer is not what a Verify waits for
    assert_ignored(state, report(only_verify(commands), "pass", role="CA"))
    state, commands = supervisor.step(state, report(only_verify(commands), "pass"))
    assert commands[-1] == Finished(outcome="budget_exceeded")
    assert state.verified_by == "runner"
    assert state.results[0].passed


def test_budget_status_without_checks_finishes_at_once() -> None:
    state, commands = begin(choice=SIMPLE,
                            checks=())
    state, commands = supervisor.step(state, ArtifactMsg(
        **keys(only_assignment(commands)), summary="x", status="budget"))
    assert commands[-1] == Finished(outcome="budget_exceeded")
    assert state.stop_reason == "budget"


def test_failed_agent_ends_in_error() -> None:
    state, commands = begin(checks=())
    state, commands = supervisor.step(state, PlanMsg(**keys(only_assignment(commands)),
                                                     steps=[], status="failed",
                                                     error="model unreachable"))
    assert commands[-1] == Finished(outcome="error")
    assert state.stop_reason == "model unreachable"


def test_pipeline_without_ca_verifies_before_finishing() -> None:
    state, commands = begin(choice=SIMPLE)
    da = only_assignment(commands)
    state, commands = supervisor.step(state, ArtifactMsg(**keys(da), summary="done"))
    assert commands == [Verify(cycle=1, attempt=0)] and supervisor.pending(state) == commands
    state, commands = supervisor.step(state, report(only_verify(commands), "fail"))
    assert commands[-1] == Finished(outcome="failed")


def test_time_up_verifies_when_no_check_ran_yet() -> None:
    state, _ = begin()
    state, commands = supervisor.step(state, TimeUp(reason="wall time budget of 5s spent"))
    assert commands == [Verify(cycle=1, attempt=0)]
    assert state.waiting is None and state.stopped == "budget"
    state, commands = supervisor.step(state, report(only_verify(commands), "pass"))
    assert commands[-1] == Finished(outcome="budget_exceeded")
    assert state.stop_reason == "wall time budget of 5s spent"


def test_time_up_after_a_check_report_finishes_at_once() -> None:
    state, commands = begin(choice=policy.PipelineChoice(("CA", "AA"), "explicit", "t"))
    state, commands = supervisor.step(state, report(only_assignment(commands), "pass"))
    state, commands = supervisor.step(state, TimeUp(reason="late"))
    assert commands[-1] == Finished(outcome="budget_exceeded")
    assert state.results and supervisor.pending(state) == []


def test_empty_pipeline_without_checks_finishes_in_start() -> None:
    state, commands = begin(choice=policy.PipelineChoice((), "explicit", "nothing"), checks=())
    assert commands[-1] == Finished(outcome="success") and state.outcome == "success"


def test_an_aa_decision_it_was_not_offered_gets_the_safe_reading() -> None:
    choice = policy.PipelineChoice(("DA", "CA", "AA"), "explicit", "test")
    state, _ = supervisor.start("j", "g", choice, ["c"], max_corrections=0, max_cycles=2)
    state, _ = supervisor.step(state, ArtifactMsg(job="j", cycle=1, summary="s"))
    failed = CheckOutcome(check="c", status="fail", evidence="no")
    state, commands = supervisor.step(state, CheckReportMsg(job="j", cycle=1, results=[failed],
                                                            passed=False))
    (ask,) = [c for c in commands if isinstance(c, Assignment)]
    assert ask.options == ["another_cycle", "escalate"]
    state, _ = supervisor.step(state, DecisionMsg(job="j", cycle=1, decision="done",
                                                  report="looks fine to me"))
    assert state.decision == "escalate" and state.outcome == "escalated"


def test_time_up_after_an_error_keeps_the_error() -> None:
    choice = policy.PipelineChoice(("DA",), "explicit", "test")
    state, _ = supervisor.start("j", "g", choice, ["c"], max_corrections=0, max_cycles=1)
    state, commands = supervisor.step(state, ArtifactMsg(job="j", cycle=1, summary="",
                                                         status="failed", error="model died"))
    assert isinstance(commands[0], Verify)
    state, commands = supervisor.step(state, TimeUp(reason="wall time budget of 1s spent"))
    assert isinstance(commands[0], Verify)  # the cut-off check run is made again
    assert state.stopped == "error" and state.stop_reason == "model died"
