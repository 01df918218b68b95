"""The agent worker: serves one job's roles on the bus.

For each role it subscribes to ``job/<job>/agent/<ROLE>``; on an Assignment it runs the step
loop (``loop.run_agent``) and answers on ``job/<job>/result/<ROLE>`` with the typed message that
carries everything the supervisor needs, by the role's phase (``gliding.config.roles``; the
roles that ship are named):

    PA  PlanMsg         the plan's steps, strings or {id, text, dependsOn} objects, made well
                        formed (``core.plan``: repeats merged, unknown dependencies dropped,
                        cycles broken, with notes); the goal if none
    DA  ArtifactMsg     the files it wrote and the IRI of the result that wrote each
    CA  CheckReportMsg  the verdicts of its own run_checks call (``verified_by`` "CA"); when it
                        finished without one, the checks run once here ("CA (auto)")
    AA  DecisionMsg     its decision, held to the assignment's options (the safe reading of
                        the evidence when it gave none)

Every answer also says how the session ended, what it spent and one line per turn, and
carries the assignment's ``step``. The worker shares nothing with the supervisor but the bus.

Assignments run concurrently, up to ``concurrency`` per role (the exploratory pipeline's step
DAs; the supervisor never has more than one assignment of the other roles outstanding). Each
runs its own agent session: a step DA's session is named ``DA.<cycle>.<step>``
(``core.iri.step_session``), so its turn and result IRIs are its own, and the same on resume.
An assignment that arrives again while its session still runs (a duplicate delivery) is
dropped: the running session answers it. Budgets are shared through the job's one
BudgetTracker; every session checks it before each model call and has at most one call in
flight, so concurrent sessions overspend a spent budget by at most one call each, i.e. by
``concurrency`` calls (the same bound as one session with one call in flight, times the
sessions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import structlog

from gliding.agents.approvals import Approvals
from gliding.agents.hooks import Hooks
from gliding.agents.loop import AgentEnv, AgentResult, run_agent
from gliding.agents.roles import RoleSpec
from gliding.agents.steer import Steering
from gliding.agents.tracing import NO_TRACES, Tracer
from gliding.bus import topics
from gliding.bus.messages import (
    AnswerMsg,
    ArtifactMsg,
    Assignment,
    CheckReportMsg,
    DecisionMsg,
    JobEvent,
    PlanMsg,
    TurnLine,
    UsageWire,
    plan_steps,
)
from gliding.bus.port import Bus
from gliding.config.roles import entry
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core import events
from gliding.core.budget import BudgetTracker
from gliding.core.clock import Clock
from gliding.core.crashpoints import crash_point
from gliding.core.iri import step_session
from gliding.core.messages import ToolSpec
from gliding.core.text import error_line, traceback_text
from gliding.errors import ProviderUnavailable
from gliding.llm.port import LLM
from gliding.memory.archive.port import ArchivePort
from gliding.tools.base import ToolContext, ToolGroupManager
from gliding.tools.checks import ChecksGroup, outcomes_in
from gliding.tools.sandbox import Sandbox

log = structlog.get_logger("gliding.agent")

WRITING_TOOLS = ("write_file", "edit_file")
DECISIONS = ("done", "another_cycle", "escalate")


@dataclass
class JobAgents:
    """What the agents of one job share; built by the composition root."""

    job: str
    workspace: Path
    llm: LLM
    roles: dict[str, RoleSpec]
    tools: ToolGroupManager
    checks: ChecksGroup
    archive: ArchivePort
    budget: BudgetTracker
    bus: Bus
    clock: Clock
    settings: Settings
    counter: TokenCounter
    # the assignment -> the role's L3 briefing (once what came before it is on the board)
    briefing: Callable[[Assignment], Awaitable[str]] | None = None
    began_dir: Path | None = None  # where bash marks that a command began (resume reads it)
    sandbox: Sandbox | None = None  # what confines commands; None: the one the settings ask for
    board: BoardUpdates | None = None  # what a session is shown between turns (coherence)
    worker: str | None = None  # the `gliding worker` these agents run on; None: the job's own
    hooks: Hooks | None = None  # the job's hooks on this host (agents/hooks.py)
    approvals: Approvals | None = None  # calls that wait for a person's yes (approvals.py)
    # a tool call's step and the workspace's mark after it -> a snapshot (daemon/fork.py)
    snapshots: Callable[[str, str], Awaitable[None]] | None = None
    tracer: Tracer = NO_TRACES  # the job's spans on this host (agents/tracing.py)
    trace_parent: str = ""  # on a worker: the job span's traceparent, its sessions' parent


class BoardUpdates(Protocol):
    """The job's blackboard as a session sees it change (``daemon/board.JobBoard``)."""

    def updates(self, session: str, role: str, briefing: str) -> Callable[[], Awaitable[str]]:
        """A callable giving what changed since the session last looked ("" if nothing): the
        first time, since ``briefing`` (what its system prompt shows)."""
        ...

    def end(self, session: str) -> None:
        """The session is over: forget what it was shown."""
        ...


_Key = tuple[str, str, int, int, int]  # role, step ("" for none), cycle, attempt, turn_base


class AgentWorker:
    """Answers the assignments of ``roles`` for one job, up to ``concurrency`` at once per
    role."""

    def __init__(self, kit: JobAgents, roles: Sequence[str], *, concurrency: int = 1) -> None:
        self.kit = kit
        self.steering = Steering(kit.archive, kit.job)  # every session's, one cache
        self.roles = tuple(dict.fromkeys(roles))
        self.concurrency = max(1, concurrency)
        self._running: set[_Key] = set()  # the assignments whose sessions run now

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe to every role's inbox, report ready, then serve until cancelled."""
        async with anyio.create_task_group() as tg:
            for role in self.roles:
                await tg.start(self._serve_role, role)
            task_status.started()

    async def _serve_role(self, role: str, *,
                          task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        kit = self.kit
        limiter = anyio.CapacityLimiter(self.concurrency)
        async with kit.bus.subscribe(topics.agent(kit.job, role)) as inbox, \
                anyio.create_task_group() as sessions:
            task_status.started()
            while True:
                _topic, assignment = await inbox.receive()
                if not isinstance(assignment, Assignment) or assignment.job != kit.job:
                    continue  # only this job's assignments are addressed to the inbox
                key = (role, assignment.step or "", assignment.cycle, assignment.attempt,
                       assignment.turn_base)
                if key in self._running:
                    log.info("agent.assignment.duplicate", job=kit.job, role=role,
                             step=assignment.step, cycle=assignment.cycle)
                    continue
                self._running.add(key)
                sessions.start_soon(self._serve_one, assignment, key, limiter)

    async def _serve_one(self, assignment: Assignment, key: _Key,
                         limiter: anyio.CapacityLimiter) -> None:
        kit, role = self.kit, assignment.role
        try:
            async with limiter:
                try:
                    answer = await self.act(assignment)
                except ProviderUnavailable:
                    raise  # no model answers: the job stops interrupted (resumable), unanswered
                except Exception as exc:  # noqa: BLE001 - a bug or a failing store ends the role, not the job
                    error = error_line(f"{type(exc).__name__}: {exc}")
                    log.error("agent.crashed", job=kit.job, role=role, error=error,
                              exception=traceback_text(exc))
                    answer = failed_answer(assignment, error)
                await kit.bus.publish(topics.result(kit.job, role), answer)
        finally:
            self._running.discard(key)

    async def act(self, a: Assignment) -> AnswerMsg:
        """Run the role's session for ``a`` and build its answer."""
        kit = self.kit
        spec = kit.roles[a.role]
        if a.options:
            spec = restrict_decision(spec, a.options)
        briefing = await kit.briefing(a) if kit.briefing is not None else ""
        update, seen = None, f"{session_of(a) or a.role}@{a.cycle}.{a.attempt}.{a.turn_base}"
        if kit.board is not None:
            update = kit.board.updates(seen, a.role, briefing)
        # loadable: a group with tools (an MCP server that did not start has none) that the
        # role does not carry anyway (its file or the task may name it in tool_groups)
        loadable = [name for name in spec.tool_groups_on_demand if name not in spec.tool_groups
                    and name not in kit.tools.unavailable and kit.tools.group(name)]
        on_demand = {name: tools for name in loadable
                     if (tools := kit.tools.toolset([name])).tools}
        env = AgentEnv(
            job=kit.job, role=spec, llm=kit.llm, toolset=kit.tools.toolset(spec.tool_groups),
            tool_ctx=ToolContext(kit.workspace, kit.settings.tools, sandbox=kit.sandbox),
            archive=kit.archive,
            budget=kit.budget, bus=kit.bus, now=kit.clock.monotonic,
            max_turns=kit.budget.limits.turns.get(spec.name, spec.max_turns),
            context=kit.settings.context, counter=kit.counter, extra_system=briefing,
            turn_base=a.turn_base, on_demand=on_demand, began_dir=kit.began_dir,
            data_dir=kit.settings.data_dir, session=session_of(a) if a.step else "",
            board_update=update, loop_limit=kit.settings.scheduler.loop_limit,
            hooks=kit.hooks, steering=self.steering, tracer=kit.tracer,
            approvals=kit.approvals, snapshots=kit.snapshots)
        step, session = (a.step, env.session) if a.step else (None, None)
        await self._event(events.RoleStarted(role=spec.name, cycle=a.cycle, attempt=a.attempt,
                                             step=step, session=session, worker=kit.worker))
        crash_point(f"role.start:{spec.name}")
        try:
            with kit.tracer.span(f"invoke_agent {spec.name}", {
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": spec.name,
                    "gliding.session": session_of(a), "gliding.cycle": a.cycle,
                    "gliding.attempt": a.attempt, **({"gliding.step": a.step} if a.step
                                                     else {})},
                    parent=kit.trace_parent) as span:
                result = await run_agent(env, a.instructions)
                span.set_attributes({"gliding.status": result.status,
                                     "gliding.turns": result.turns})
        finally:
            if kit.board is not None:
                kit.board.end(seen)
        crash_point(f"role.end:{spec.name}")
        if kit.hooks is not None:
            await kit.hooks.role_end(role=spec.name, session=session_of(a), status=result.status,
                                     turns=result.turns)
        await self._event(events.RoleFinished(role=spec.name, status=result.status,
                                              turns=result.turns,
                                              replayed=result.replayed_turns, step=step,
                                              session=session, worker=kit.worker))
        return await self._answer(a, result)

    async def _answer(self, a: Assignment, r: AgentResult) -> AnswerMsg:
        u = r.usage
        common: dict[str, Any] = {
            "job": a.job, "role": a.role, "cycle": a.cycle, "attempt": a.attempt,
            "status": r.status, "error": None if r.error is None else error_line(r.error),
            "turns": r.turns,
            "usage": UsageWire(prompt_tokens=u.prompt_tokens,
                               completion_tokens=u.completion_tokens,
                               cached_tokens=u.cached_tokens, cost_usd=u.cost_usd,
                               unpriced_calls=u.unpriced_calls),
            "lines": [TurnLine(role=t.role, turn=t.turn, summary=t.summary, iri=t.iri)
                      for t in r.summaries],
            "context_tokens": r.prompt_tokens, "baseline_tokens": r.baseline_tokens,
            "schema_tokens": r.schema_tokens, "step": a.step, "rereads": r.rereads,
        }
        phase = entry(a.role).phase
        if phase == "plan":
            steps, notes = plan_steps(r.finish.get("steps", []))
            if notes:
                log.info("plan.normalised", job=a.job, cycle=a.cycle, notes=notes)
            last_iri = r.summaries[-1].iri if r.summaries else None
            return PlanMsg(**common, steps=steps or [a.goal], turn_iri=last_iri, notes=notes)
        if phase == "do":
            written: dict[str, str] = {}
            for t in r.tools:
                path = t.arguments.get("path")
                if t.name in WRITING_TOOLS and t.ok and isinstance(path, str):
                    written[path] = t.iri
            return ArtifactMsg(**common, summary=str(r.finish.get("summary", "")),
                               files=list(written), written=written,
                               iris=[t.iri for t in r.tools])
        if phase == "check":
            ran = [t for t in r.tools if t.name == "run_checks" and t.ok]
            outcomes = outcomes_in(ran[-1].data) if ran else None
            verified_by = a.role
            if outcomes is None:  # it finished without checking: run them once, here
                outcomes = await self.kit.checks.run(ToolContext(
                    self.kit.workspace, self.kit.settings.tools, sandbox=self.kit.sandbox))
                verified_by = f"{a.role} (auto)"
            return CheckReportMsg(**common, results=outcomes,
                                  passed=all(o.passed for o in outcomes),
                                  notes=str(r.finish.get("notes", "")) if ran else "auto",
                                  verified_by=verified_by)
        decision = str(r.finish.get("decision") or "")
        options = a.options or list(DECISIONS)
        if decision not in options:  # the AA never decided: pick the safe reading of the evidence
            decision = "done" if "done" in options else "escalate"
        return DecisionMsg(**common, decision=decision,
                           report=str(r.finish.get("report") or r.error or ""))

    async def _event(self, event: events.Event) -> None:
        message = JobEvent.of(self.kit.job, event)
        log.info(message.event, job=self.kit.job, **message.data)
        await self.kit.bus.publish(topics.events(self.kit.job), message)


def failed_answer(a: Assignment, error: str, *,
                  status: Literal["failed", "unavailable"] = "failed") -> AnswerMsg:
    """The answer of a role whose session crashed: status failed, the error, nothing done
    (``unavailable``: no model answered, and the job stops interrupted, resumable). The error
    is kept to one line (``error_line``)."""
    error = error_line(error)
    common: dict[str, Any] = {"job": a.job, "role": a.role, "cycle": a.cycle,
                              "attempt": a.attempt, "status": status, "error": error,
                              "step": a.step}
    phase = entry(a.role).phase
    if phase == "plan":
        return PlanMsg(**common, steps=[])
    if phase == "do":
        return ArtifactMsg(**common, summary="")
    if phase == "check":
        return CheckReportMsg(**common, results=[], passed=False)
    return DecisionMsg(**common, decision="escalate", report=error)


def session_of(a: Assignment) -> str:
    """The name of the agent session that works on ``a``: its role, or for a plan step
    ``<ROLE>.<cycle>.<step>``."""
    return step_session(a.role, a.cycle, a.step) if a.step else a.role


def restrict_decision(spec: RoleSpec, options: Sequence[str]) -> RoleSpec:
    """``spec`` whose finish tool accepts only ``options`` as its decision."""
    params = dict(spec.finish.parameters)
    props = dict(params.get("properties", {}))
    if "decision" in props:
        props["decision"] = {**props["decision"], "enum": list(options)}
    params["properties"] = props
    return dataclasses.replace(spec, finish=ToolSpec("finish", spec.finish.description, params))
