"""The supervisor as a pure state machine: ``step(state, input) -> (state, commands)``.

It owns the PDCA flow of one job and nothing else: which role works next and on what, when CA's
verdict sends work back to DA (bounded corrections), when AA's decision starts another cycle
(bounded cycles), and the outcome. It does no I/O and keeps no hidden state: ``SupervisorState``
is a frozen pydantic model that serialises to JSON (the runner journals it after every
transition, so a killed job resumes from the last one).

Inputs: an agent's answer (``PlanMsg``, ``ArtifactMsg``, ``CheckReportMsg``, ``DecisionMsg``),
the runner's own check report (``CheckReportMsg`` with role ``runner``, answering ``Verify``),
and ``TimeUp``. An answer is accepted only when it answers an assignment the state waits for
(same job, role, cycle, attempt and step, and the answer type of that role); anything else
comes back as ``Ignored`` and changes nothing, so no answer is accepted twice.

Commands: ``Assignment`` (publish it), ``Verify`` (run the task's checks, for a pipeline
without CA or a job that stopped before CA), ``Emit`` (a progress event), ``Ignored`` (log it)
and ``Finished`` (the outcome is known; nothing follows).

    start ─► [PA] ─► DA ─► [CA] ──fail, corrections left──► DA (correction) ─► [CA] ...
                              └─pass / no corrections left─► [AA] ─another_cycle, cycles left─► PA
                                                                └─done / escalate─► [Verify] ─► end
The boxes are phases: each is played by the pipeline's role of that phase in the role registry
(``gliding.config.roles``; PA, DA, CA and AA ship), and a role's phase fixes the answer type
the supervisor accepts from it. An answer whose agent ran out of budget, failed or was stopped
by a guard of the agent loop (``loop_detected``, ``compaction_stalled``) ends the job the same
way (Verify if no check ran yet, then Finished, the outcome saying why); so does TimeUp.

The exploratory pipeline (``pipeline_kind`` "exploratory") does the DA part per plan step:

    [PA] ─► DA×N: every step whose dependencies are done, at most max_parallel at once ─►
            (all steps done) ─► [CA] ─fail─► DA (one correction session, as above) ─► [CA] ...

The single-assignment phases wait in ``waiting``; the step DAs in ``running`` (each answer is
matched by its step too), and a step is ``done`` when its DA's answer is accepted. ``pending``
gives every outstanding command, so a resumed job re-issues them all. A step DA whose
session ran out of budget or failed stops the job as above; the others' answers are then
ignored.
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
    PlanStep,
    TurnLine,
    UsageWire,
)
from gliding.config.roles import Phase, entry, pick
from gliding.core import events
from gliding.core.text import error_line
from gliding.scheduler import policy

RUNNER = "runner"  # the role name of the runner's own check report (answering Verify)
EXPLORATORY = "exploratory"  # the pipeline kind whose DA part runs per plan step
_ANSWER_OF_PHASE: dict[Phase, type[AnswerMsg]] = {
    "plan": PlanMsg, "do": ArtifactMsg, "check": CheckReportMsg, "act": DecisionMsg}
# an agent's status that stops the job, and why (a turn cap does not: the job goes on)
_STOPS: dict[str, policy.Stop] = {"budget": "budget", "failed": "error",
                                  "loop_detected": "loop_detected",
                                  "compaction_stalled": "compaction_stalled"}


def _answer_of(role: str) -> type[AnswerMsg]:
    """The answer type ``role`` replies with (its phase's; the runner's is a check report)."""
    return CheckReportMsg if role == RUNNER else _ANSWER_OF_PHASE[entry(role).phase]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Verify(_Value):
    """Run the task's checks and answer with a CheckReportMsg of role ``runner``."""

    kind: Literal["verify"] = "verify"
    cycle: int
    attempt: int


class Emit(_Value):
    """Publish a job event (one of ``gliding.core.events``)."""

    kind: Literal["emit"] = "emit"
    event: str
    data: dict[str, object] = Field(default_factory=dict)

    @classmethod
    def of(cls, event: events.Event) -> Emit:
        return cls(event=event.name, data=events.event_data(event))


class Ignored(_Value):
    kind: Literal["ignored"] = "ignored"
    reason: str


class Interrupted(_Value):
    """No model answered the assignment (an agent on a worker said ``unavailable``): the job
    stops interrupted, its state as it was (resume asks the assignment again)."""

    kind: Literal["interrupted"] = "interrupted"
    reason: str


class Finished(_Value):
    kind: Literal["finished"] = "finished"
    outcome: policy.Outcome


class TimeUp(_Value):
    """The job's wall-time budget ran out."""

    kind: Literal["time_up"] = "time_up"
    reason: str


Command = Assignment | Verify | Emit | Ignored | Interrupted | Finished
Input = PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg | TimeUp


class RoleTotals(_Value):
    """What one role spent over the whole job."""

    turns: int = 0
    usage: UsageWire = UsageWire()
    context_tokens: int = 0
    baseline_tokens: int = 0
    schema_tokens: int = 0
    rereads: int = 0  # calls repeating one whose result the prompt no longer held whole


class StepDone(_Value):
    """What the DA of one plan step reported (exploratory pipeline)."""

    summary: str = ""
    files: tuple[str, ...] = ()


class SupervisorState(_Value):
    """Everything the supervisor knows about one job; JSON-serialisable, never mutated.

    Fields added after the first release have defaults, so older journals still load."""

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
    stopped: policy.Stop | None = None
    stop_reason: str | None = None
    outcome: policy.Outcome | None = None
    accepted: int = 0  # answers taken so far
    max_parallel: int = 1  # exploratory: step assignments outstanding at once, at most
    plan_steps: tuple[PlanStep, ...] = ()  # exploratory: this cycle's plan as a graph
    running: tuple[Assignment, ...] = ()  # exploratory: the step assignments awaited
    done_steps: dict[str, StepDone] = Field(default_factory=dict)  # step id -> its report
    step_turns: dict[str, int] = Field(default_factory=dict)  # role -> turns of step sessions

    @property
    def passed(self) -> bool | None:
        return all(r.passed for r in self.results) if self.results else None


def start(job: str, goal: str, choice: policy.PipelineChoice, checks: Sequence[str], *,
          max_corrections: int, max_cycles: int,
          max_parallel: int = 1) -> tuple[SupervisorState, list[Command]]:
    """The first state of a job and what to do first (``max_parallel``: the exploratory
    pipeline's bound on step DAs at work at once)."""
    state = SupervisorState(job=job, goal=goal, roles=choice.roles, pipeline_kind=choice.kind,
                            pipeline_reason=choice.reason, checks=tuple(checks),
                            max_corrections=max_corrections, max_cycles=max_cycles, cycle=1,
                            max_parallel=max(1, max_parallel))
    event = Emit.of(events.JobStarted(pipeline=list(choice.roles), kind=choice.kind,
                                      reason=choice.reason, goal=goal))
    state, commands = _begin_cycle(state)
    return state, [event, *commands]


def step(state: SupervisorState, message: Input) -> tuple[SupervisorState, list[Command]]:
    """The state after ``message`` and the commands it leads to."""
    if state.outcome is not None:
        return state, [Ignored(reason=f"job already finished ({state.outcome})")]
    if isinstance(message, TimeUp):  # an earlier stop keeps its reason; a cut-off Verify reruns
        state = state.model_copy(update={"stopped": state.stopped or "budget",
                                         "stop_reason": state.stop_reason or message.reason,
                                         "waiting": None, "verifying": None, "running": ()})
        return _finish(state)
    problem = _mismatch(state, message)
    if problem:
        return state, [Ignored(reason=problem)]
    if message.status == "unavailable":
        return state, [Interrupted(reason=message.error or "no model answered")]
    offered = state.waiting.options if state.waiting is not None else []
    was_step = bool(state.running)
    state = _account(state, message)
    if state.verifying is not None:
        assert isinstance(message, CheckReportMsg)
        state = state.model_copy(update={"verifying": None, "results": tuple(message.results),
                                         "verified_by": message.verified_by})
        return _finish(state)
    state = _step_done(state, message) if was_step else state.model_copy(
        update={"waiting": None})
    stopped = _STOPS.get(message.status)
    if stopped is not None:
        state = state.model_copy(update={"stopped": stopped, "stop_reason": error_line(
            message.error or message.status)})  # a line, however long the error it carried
        return _finish(state)
    if isinstance(message, PlanMsg):
        state = state.model_copy(update={"plan": tuple(message.texts) or (state.goal,)})
        if state.pipeline_kind == EXPLORATORY:
            state = state.model_copy(update={"plan_steps": tuple(message.steps)})
        notes = [Emit.of(events.PlanNotes(cycle=state.cycle, notes=list(message.notes)))
                 ] if message.notes else []
        state, commands = _after_plan(state)
        return state, [*notes, *commands]
    if isinstance(message, ArtifactMsg):
        return _fan_out(state) if was_step else _after_do(state)
    if isinstance(message, CheckReportMsg):
        return _after_report(state, message)
    if offered and message.decision not in offered:  # not a choice it had: the safe reading
        message = message.model_copy(update={"decision": "done" if "done" in offered
                                              else "escalate"})
    return _after_decision(state, message)


def pending(state: SupervisorState) -> list[Assignment | Verify]:
    """The commands a resumed job must carry out again: every step assignment outstanding, or
    the assignment or check run it waits for (none when it waits for nothing)."""
    if state.running:
        return list(state.running)
    return [c for c in (state.waiting, state.verifying) if c is not None]


# ---- transitions ---------------------------------------------------------------------------
def _mismatch(state: SupervisorState, m: AnswerMsg) -> str:
    key = f"{type(m).__name__} of {m.role} for job {m.job}, cycle {m.cycle}, attempt {m.attempt}"
    if m.step is not None:
        key += f", step {m.step}"
    if state.running:
        for a in state.running:
            if (m.job, m.role, m.cycle, m.attempt, m.step) == (
                    state.job, a.role, a.cycle, a.attempt, a.step):
                cls = _answer_of(a.role)
                return "" if isinstance(m, cls) else f"{key}: {a.role} answers with {cls.__name__}"
        if m.step in state.done_steps and (m.job, m.cycle) == (state.job, state.cycle):
            return f"{key}: step {m.step} is done already"
        steps = ", ".join(str(a.step) for a in state.running)
        return f"{key}: awaiting DA for steps {steps} of cycle {state.cycle}"
    want = state.waiting or state.verifying
    if want is None:
        return f"{key}: nothing is awaited"
    role = state.waiting.role if state.waiting else RUNNER
    step = state.waiting.step if state.waiting else None
    if (m.job, m.role, m.cycle, m.attempt, m.step) != (state.job, role, want.cycle,
                                                       want.attempt, step):
        return f"{key}: awaiting {role} cycle {want.cycle} attempt {want.attempt}"
    if not isinstance(m, _answer_of(role)):
        return f"{key}: {role} answers with {_answer_of(role).__name__}"
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
                            cost_usd=u.cost_usd + m.usage.cost_usd,
                            unpriced_calls=u.unpriced_calls + m.usage.unpriced_calls),
            context_tokens=t.context_tokens + m.context_tokens,
            baseline_tokens=t.baseline_tokens + m.baseline_tokens,
            schema_tokens=max(t.schema_tokens, m.schema_tokens),
            rereads=t.rereads + m.rereads)
    written = dict(state.written)
    if isinstance(m, ArtifactMsg):
        written.update(m.written)
    return state.model_copy(update={"totals": totals, "lines": (*state.lines, *m.lines),
                                    "written": written, "accepted": state.accepted + 1})


def _step_done(state: SupervisorState, m: AnswerMsg) -> SupervisorState:
    """``m`` answered one of the running step assignments: that step is done."""
    summary = m.summary if isinstance(m, ArtifactMsg) else ""
    files = tuple(m.files or m.written) if isinstance(m, ArtifactMsg) else ()
    assert m.step is not None
    step_turns = dict(state.step_turns)
    step_turns[m.role] = step_turns.get(m.role, 0) + m.turns
    return state.model_copy(update={
        "running": tuple(a for a in state.running if a.step != m.step),
        "done_steps": {**state.done_steps, m.step: StepDone(summary=summary, files=files)},
        "step_turns": step_turns})


def _ask(state: SupervisorState, role: str, text: str,
         options: Sequence[str] = ()) -> tuple[SupervisorState, list[Command]]:
    used = state.totals.get(role, RoleTotals()).turns - state.step_turns.get(role, 0)
    a = Assignment(job=state.job, role=role, cycle=state.cycle, attempt=state.attempt,
                   goal=state.goal, instructions=text, options=list(options), turn_base=used)
    return state.model_copy(update={"waiting": a}), [a]


def _begin_cycle(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    plan = pick(state.roles, "plan")
    if plan is not None:
        return _ask(state, plan, _pa_text(state))
    return _after_plan(state)


def _after_plan(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    do = pick(state.roles, "do")
    if do is not None and state.pipeline_kind == EXPLORATORY:
        steps = state.plan_steps or tuple(PlanStep(id=str(i), text=t) for i, t in
                                          enumerate(state.plan or (state.goal,), 1))
        return _fan_out(state.model_copy(update={"plan_steps": steps, "done_steps": {},
                                                 "running": ()}))
    if do is not None:
        return _ask(state, do, _da_text(state, ""))
    return _after_do(state)


def _fan_out(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    """Assign every step whose dependencies are done, while fewer than ``max_parallel`` are
    running, in plan order; once every step is done, go on to the checks."""
    done, steps = state.done_steps, state.plan_steps
    if all(s.id in done for s in steps) and not state.running:
        return _after_do(state)
    busy = {a.step for a in state.running}
    ready = [s for s in steps if s.id not in done and s.id not in busy
             and all(d in done for d in s.depends_on)]
    if not ready and not state.running:  # only a plan that is not a DAG: never stall on it
        ready = [s for s in steps if s.id not in done][:1]
    room = max(1, state.max_parallel) - len(state.running)
    do = pick(state.roles, "do")
    assert do is not None  # only a pipeline with a do role fans out
    new = [Assignment(job=state.job, role=do, cycle=state.cycle, attempt=state.attempt,
                      goal=state.goal, instructions=_step_text(state, s), step=s.id)
           for s in ready[:max(0, room)]]
    return state.model_copy(update={"running": (*state.running, *new)}), list(new)


def _after_do(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    check = pick(state.roles, "check")
    if check is not None:
        return _ask(state, check, _ca_text(state))
    return _after_checks(state)


def _after_report(state: SupervisorState,
                  m: CheckReportMsg) -> tuple[SupervisorState, list[Command]]:
    state = state.model_copy(update={"results": tuple(m.results), "verified_by": m.verified_by})
    nxt = policy.after_check(m.passed, state.attempt, state.max_corrections)
    do = pick(state.roles, "do")
    if nxt == "correct" and do is None:
        nxt = "give_up"
    event = Emit.of(events.CheckReport(
        passed=m.passed, next=nxt, cycle=state.cycle, attempt=state.attempt,
        failed=[f"{r.check}: {r.evidence}" for r in m.results if not r.passed]))
    if nxt != "correct":
        state, commands = _after_checks(state)
        return state, [event, *commands]
    state = state.model_copy(update={"attempt": state.attempt + 1,
                                     "corrections": state.corrections + 1})
    assert do is not None  # "correct" needs a do role
    state, commands = _ask(state, do, _da_text(state, correction_text(state.results)))
    return state, [event, *commands]


def _after_checks(state: SupervisorState) -> tuple[SupervisorState, list[Command]]:
    act = pick(state.roles, "act")
    if act is not None:
        return _ask(state, act, _aa_text(state), policy.decision_options(state.passed))
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
        return state.model_copy(update={"verifying": verify, "waiting": None,
                                        "running": ()}), [verify]
    out = policy.outcome(state.passed, state.decision, state.stopped)
    state = state.model_copy(update={"outcome": out, "waiting": None, "verifying": None,
                                     "running": ()})
    return state, [Emit.of(events.JobFinished(outcome=out)), Finished(outcome=out)]


# ---- what each role is handed --------------------------------------------------------------
def _checks_text(state: SupervisorState) -> str:
    if not state.checks:
        return ""
    return "Success checks:\n" + "\n".join(f"- {c}" for c in state.checks)


PARALLEL_HINT = ("Steps that need no other step run at the same time, each on its own DA: "
                 "give each as {id, text} with dependsOn the ids of the steps it needs.")


def _pa_text(state: SupervisorState) -> str:
    hint = PARALLEL_HINT if state.pipeline_kind == EXPLORATORY else ""
    return "\n\n".join(x for x in (f"Goal: {state.goal}", _checks_text(state), hint,
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


def _step_text(state: SupervisorState, step: PlanStep) -> str:
    """A step DA's assignment: the goal, its step, what the steps before it produced, and the
    checks that name a file its text names (the others are other DAs' business)."""
    place = next(i for i, s in enumerate(state.plan_steps, 1) if s.id == step.id)
    parts = [f"Goal: {state.goal}",
             f"Your step ({place} of {len(state.plan_steps)}, id {step.id}): {step.text}"]
    before = []
    for dep in step.depends_on:
        did = state.done_steps.get(dep)
        if did is not None:
            line = f"- {dep}: {did.summary or 'done'}"
            if did.files:
                line += f" (files: {', '.join(did.files)})"
            before.append(line)
    if before:
        parts.append("Done before it:\n" + "\n".join(before))
    files = set(policy.files_named(step.text))
    mine = [c for c in state.checks if files & set(policy.files_named(c))]
    if mine:
        parts.append("Checks on your files:\n" + "\n".join(f"- {c}" for c in mine))
    if len(state.plan_steps) > 1:
        parts.append("Other DAs do the other steps. Do only yours, then call finish.")
    parts.append(state.feedback)
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
