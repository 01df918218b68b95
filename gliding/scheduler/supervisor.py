"""The supervisor as a pure state machine: ``step(state, input) -> (state, commands)``.

It owns the PDCA flow of one job and nothing else: which role works next and on what, when CA's
verdict sends work back to DA (bounded corrections), when AA's decision starts another cycle
(bounded cycles), and the outcome. It does no I/O and keeps no hidden state: ``SupervisorState``
is a frozen pydantic model that serialises to JSON (the runner journals it after every
transition, so a killed job resumes from the last one).

Inputs: an agent's answer (``PlanMsg``, ``ArtifactMsg``, ``CheckReportMsg``, ``DecisionMsg``),
the runner's own check report (``CheckReportMsg`` with role ``runner``, answering ``Verify``),
and ``TimeUp``. An answer is accepted only when it answers the assignment the state waits for
(same job, role, cycle and attempt, and the answer type of that role); anything else comes
back as ``Ignored`` and changes nothing, so no answer is accepted twice.

Commands: ``Assignment`` (publish it), ``Verify`` (run the task's checks, for a pipeline
without CA or a job that stopped before CA), ``Emit`` (a progress event), ``Ignored`` (log it)
and ``Finished`` (the outcome is known; nothing follows).

    start ─► [PA] ─► DA ─► [CA] ──fail, corrections left──► DA (correction) ─► [CA] ...
                              └─pass / no corrections left─► [AA] ─another_cycle, cycles left─► PA
                                                                └─done / escalate─► [Verify] ─► end
An answer whose agent ran out of budget or failed ends the job the same way (Verify if no
check ran yet, then Finished); so does TimeUp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
from gliding.scheduler import policy

RUNNER = "runner"  # the role name of the runner's own check report (answering Verify)
_ANSWER_OF = {"PA": PlanMsg, "DA": ArtifactMsg, "CA": CheckReportMsg, "AA": DecisionMsg,
              RUNNER: CheckReportMsg}


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Verify(_Value):
    """Run the task's checks and answer with a CheckReportMsg of role ``runner``."""

    kind: Literal["verify"] = "verify"
    cycle: int
    attempt: int


class Emit(_Value):
    kind: Literal["emit"] = "emit"
    event: str
    data: dict[str, object] = Field(default_factory=dict)


class Ignored(_Value):
    kind: Literal["ignored"] = "ignored"
    reason: str


class Finished(_Value):
    kind: Literal["finished"] = "finished"
    outcome: policy.Outcome


class TimeUp(_Value):
    """The job's wall-time budget ran out."""

    kind: Literal["time_up"] = "time_up"
    reason: str


Command = Assignment | Verify | Emit | Ignored | Finished
Input = PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg | TimeUp


class RoleTotals(_Value):
    """What one role spent over the whole job."""

    turns: int = 0
    usage: UsageWire = UsageWire()
    context_tokens: int = 0
    baseline_tokens: int = 0
    schema_tokens: int = 0


class SupervisorState(_Value):
    """Everything the supervisor knows about one job; JSON-serialisable, never mutated."""

    job: str
    goal: str
    roles: tuple[str, ...]
    pipeline_kind: str
    pipeline_reason: str
    checks: tuple[str, ...]  # each check's description
    max_corrections: int
    max_cycles: int
    cycle: int = 0
    attempt: int = 0  # corrections so far in this cycle
    corrections: int = 0  # over the whole job
    plan: tuple[str, ...] = ()
    feedback: str = ""  # why the last cycle failed, for the next one
    results: tuple[CheckOutcome, ...] = ()
    verified_by: str = "none"
    decision: str | None = None
    report: str = ""
    written: dict[str, str] = Field(default_factory=dict)  # path -> IRI of the writing result
    totals: dict[str, RoleTotals] = Field(default_factory=dict)
    lines: tuple[TurnLine, ...] = ()
    waiting: Assignment | None = None
    verifying: Verify | None = None
    stopped: Literal["budget", "error"] | None = None
    stop_reason: str | None = None
    outcome: policy.Outcome | None = None
    accepted: int = 0  # answers taken so far

    @property
    def passed(self) -> bool | None:
        return all(r.passed for r in self.results) if self.results else None


def start(job: str, goal: str, choice: policy.PipelineChoice, checks: Sequence[str], *,
          max_corrections: int, max_cycles: int) -> tuple[SupervisorState, list[Command]]:
    """The first state of a job and what to do first."""
    state = SupervisorState(job=job, goal=goal, roles=choice.roles, pipeline_kind=choice.kind,
                            pipeline_reason=choice.reason, checks=tuple(checks),
                            max_corrections=max_corrections, max_cycles=max_cycles, cycle=1)
    event = Emit(event="job.started", data={"pipeline": list(choice.roles), "kind": choice.kind,
                                            "reason": choice.reason, "goal": goal})
    state, commands = _begin_cycle(state)
    return state, [event, *commands]


def step(state: SupervisorState, message: Input) -> tuple[SupervisorState, list[Command]]:
    """The state after ``message`` and the commands it leads to."""
    if state.outcome is not None:
        return state, [Ignored(reason=f"job already finished ({state.outcome})")]
    if isinstance(message, TimeUp):  # an earlier stop keeps its reason; a cut-off Verify reruns
        state = state.model_copy(update={"stopped": state.stopped or "budget",
                                         "stop_reason": state.stop_reason or message.reason,
                                         "waiting": None, "verifying": None})
        return _finish(state)
    problem = _mismatch(state, message)
    if problem:
        return state, [Ignored(reason=problem)]
    offered = state.waiting.options if state.waiting is not None else []
    state = _account(state, message)
    if state.verifying is not None:
        assert isinstance(message, CheckReportMsg)
        state = state.model_copy(update={"verifying": None, "results": tuple(message.results),
                                         "verified_by": message.verified_by})
        return _finish(state)
    if message.status in ("budget", "failed"):
        stopped: Literal["budget", "error"] = "budget" if message.status == "budget" else "error"
        state = state.model_copy(update={"stopped": stopped,
                                         "stop_reason": message.error or message.status})
        return _finish(state)
    if isinstance(message, PlanMsg):
        state = state.model_copy(update={"plan": tuple(message.steps) or (state.goal,)})
        return _after_plan(state)
    if isinstance(message, ArtifactMsg):
        return _after_do(state)
    if isinstance(message, CheckReportMsg):
        return _after_report(state, message)
    if offered and message.decision not in offered:  # not a choice it had: the safe reading
        message = message.model_copy(update={"decision": "done" if "done" in offered
                                              else "escalate"})
    return _after_decision(state, message)


def pending(state: SupervisorState) -> Command | None:
    """The command a resumed job must carry out again: the assignment or check run it waits
    for (None when it waits for nothing)."""
    return state.waiting or state.verifying


# ---- transitions ---------------------------------------------------------------------------
def _mismatch(state: SupervisorState, m: AnswerMsg) -> str:
    key = f"{type(m).__name__} of {m.role} for job {m.job}, cycle {m.cycle}, attempt {m.attempt}"
    want = state.waiting or state.verifying
    if want is None:
        return f"{key}: nothing is awaited"
    role = state.waiting.role if state.waiting else RUNNER
    if (m.job, m.role, m.cycle, m.attempt) != (state.job, role, want.cycle, want.attempt):
        return f"{key}: awaiting {role} cycle {want.cycle} attempt {want.attempt}"
    if not isinstance(m, _ANSWER_OF[role]):
        return f"{key}: {role} answers with {_ANSWER_OF[role].__name__}"
    return ""


def _account(state: SupervisorState, m: AnswerMsg) -> SupervisorState:
    """Take what every answer carries: spending, turn lines, files written."""
    totals = dict(state.totals)
    if m.role != RUNNER:
        t = totals.get(m.role, RoleTotals())
        u = t.usage
        totals[m.role] = RoleTotals(
            turns=t.turns + m.turns,
            usage=UsageWire(prompt_tokens=u.prompt_tokens + m.usage.prompt_tokens,
                            completion_tokens=u.completion_tokens + m.usage.completion_tokens,
                            cached_tokens=u.cached_tokens + m.usage.cached_tokens,
                            cost_usd=u.cost_usd + m.usage.cost_usd),
            context_tokens=t.context_tokens + m.context_tokens,
            baseline_tokens=t.baseline_tokens + m.baseline_tokens,
            schema_tokens=max(t.schema_tokens, m.schema_tokens))
    written = dict(state.written)
    if isinstance(m, ArtifactMsg):
        written.update(m.written)
    return state.model_copy(update={"totals": totals, "lines": (*state.lines, *m.lines),
                                    "written": written, "waiting": None,
                                    "accepted": state.accepted + 1})


def _ask(state: SupervisorState, role: str, text: str,
         options: Sequence[str] = ()) -> tuple[SupervisorState, list[Command]]:
    used = state.totals.get(role, RoleTotals()).turns
    a = Assignment(job=state.job, role=role, cycle=state.cycle, attempt=state.attempt,
                   goal=state.goal, instructions=text, options=list(options), turn_base=used)
    return state.model_copy(update={"waiting": a}), [a]


def _begin_cycle(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    if "PA" in state.roles:
        return _ask(state, "PA", _pa_text(state))
    return _after_plan(state)


def _after_plan(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    if "DA" in state.roles:
        return _ask(state, "DA", _da_text(state, ""))
    return _after_do(state)


def _after_do(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    if "CA" in state.roles:
        return _ask(state, "CA", _ca_text(state))
    return _after_checks(state)


def _after_report(state: SupervisorState,
                  m: CheckReportMsg) -> tuple[SupervisorState, list[Command]]:
    state = state.model_copy(update={"results": tuple(m.results), "verified_by": m.verified_by})
    nxt = policy.after_check(m.passed, state.attempt, state.max_corrections)
    if nxt == "correct" and "DA" not in state.roles:
        nxt = "give_up"
    event = Emit(event="check.report", data={
        "passed": m.passed, "next": nxt, "cycle": state.cycle, "attempt": state.attempt,
        "failed": [f"{r.check}: {r.evidence}" for r in m.results if not r.passed]})
    if nxt != "correct":
        state, commands = _after_checks(state)
        return state, [event, *commands]
    state = state.model_copy(update={"attempt": state.attempt + 1,
                                     "corrections": state.corrections + 1})
    state, commands = _ask(state, "DA", _da_text(state, correction_text(state.results)))
    return state, [event, *commands]


def _after_checks(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    if "AA" in state.roles:
        return _ask(state, "AA", _aa_text(state), policy.decision_options(state.passed))
    return _finish(state)


def _after_decision(state: SupervisorState,
                    m: DecisionMsg) -> tuple[SupervisorState, list[Command]]:
    state = state.model_copy(update={"decision": m.decision, "report": m.report})
    nxt = policy.after_decision(m.decision, state.cycle, state.max_cycles)
    if nxt == "escalate":
        return _finish(state.model_copy(update={"decision": "escalate"}))
    if nxt == "done":
        return _finish(state)
    feedback = (f"Cycle {state.cycle} did not succeed. AA said: {m.report}\n"
                + failures_text(state.results))
    state = state.model_copy(update={"cycle": state.cycle + 1, "attempt": 0,
                                     "feedback": feedback})
    return _begin_cycle(state)


def _finish(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    if not state.results and state.checks and state.verifying is None and (
            state.verified_by == "none"):
        verify = Verify(cycle=state.cycle, attempt=state.attempt)
        return state.model_copy(update={"verifying": verify, "waiting": None}), [verify]
    out = policy.outcome(state.passed, state.decision, state.stopped)
    state = state.model_copy(update={"outcome": out, "waiting": None, "verifying": None})
    return state, [Emit(event="job.finished", data={"outcome": out}), Finished(outcome=out)]


# ---- what each role is handed --------------------------------------------------------------
def _checks_text(state: SupervisorState) -> str:
    if not state.checks:
        return ""
    return "Success checks:\n" + "\n".join(f"- {c}" for c in state.checks)


def _pa_text(state: SupervisorState) -> str:
    return "\n\n".join(x for x in (f"Goal: {state.goal}", _checks_text(state),
                                   state.feedback) if x)


def _da_text(state: SupervisorState, correction: str) -> str:
    if correction:  # the failed checks lead, as the goal of this attempt
        return "\n\n".join(p for p in (
            correction, f"Original goal: {state.goal}", _checks_text(state)) if p)
    parts = [f"Goal: {state.goal}"]
    if state.plan:
        parts.append("Plan:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(state.plan, 1)))
    parts += [_checks_text(state), state.feedback]
    return "\n\n".join(p for p in parts if p)


def _ca_text(state: SupervisorState) -> str:
    files = ", ".join(sorted(state.written)) or "none reported"
    return f"Goal: {state.goal}\n\nFiles DA wrote: {files}\n\n{_checks_text(state)}"


def _aa_text(state: SupervisorState) -> str:
    lines = [f"Goal: {state.goal}", "", "Check report:"]
    lines += [f"- {r.status.upper()} {r.check}: {r.evidence}" for r in state.results]
    if not state.results:
        lines.append("- no checks were run")
    return "\n".join(lines)


def correction_text(results: Sequence[CheckOutcome]) -> str:
    """DA's goal after a failed check: the remedy of each failure, then CA's evidence."""
    failed = [r for r in results if not r.passed]
    goal = "; ".join(r.remedy for r in failed)
    steps = "\n".join(f"{i}. {r.remedy}" for i, r in enumerate(failed, 1))
    return f"Goal: {goal}\n\nPlan:\n{steps}\n\nEvidence from CA:\n" + failures_text(failed)


def failures_text(results: Sequence[CheckOutcome]) -> str:
    lines = []
    for r in results:
        if not r.passed:
            line = f"- FAIL {r.check}: {r.evidence}"
            if r.expected is not None:
                line += f"\n  expected text: {r.expected}"
            lines.append(line)
    return "\n".join(lines)
