"""The agent worker: serves one job's roles on the bus.

For each role it subscribes to ``job/<job>/agent/<ROLE>``; on an Assignment it runs the step
loop (``loop.run_agent``) and answers on ``job/<job>/result/<ROLE>`` with the typed message that
carries everything the supervisor needs:

    PA  PlanMsg         the plan's steps (blank and repeated steps dropped; the goal if none)
    DA  ArtifactMsg     the files it wrote and the IRI of the result that wrote each
    CA  CheckReportMsg  the verdicts of its own run_checks call (``verified_by`` "CA"); when it
                        finished without one, the checks run once here ("CA (auto)")
    AA  DecisionMsg     its decision, held to the assignment's options (the safe reading of
                        the evidence when it gave none)

Every answer also says how the session ended, what it spent and one line per turn. The worker
shares nothing with the supervisor but the bus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from gliding.agents.loop import AgentEnv, AgentResult, run_agent
from gliding.agents.roles import RoleSpec
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
)
from gliding.bus.port import Bus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker
from gliding.core.clock import Clock
from gliding.core.messages import ToolSpec
from gliding.llm.port import LLM
from gliding.memory.archive_port import ArchivePort
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


class AgentWorker:
    """Answers the assignments of ``roles`` for one job, one at a time per role."""

    def __init__(self, kit: JobAgents, roles: Sequence[str]) -> None:
        self.kit = kit
        self.roles = tuple(dict.fromkeys(roles))

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe to every role's inbox, report ready, then serve until cancelled."""
        async with anyio.create_task_group() as tg:
            for role in self.roles:
                await tg.start(self._serve_role, role)
            task_status.started()

    async def _serve_role(self, role: str, *,
                          task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        kit = self.kit
        async with kit.bus.subscribe(topics.agent(kit.job, role)) as inbox:
            task_status.started()
            while True:
                _topic, assignment = await inbox.receive()
                if not isinstance(assignment, Assignment) or assignment.job != kit.job:
                    continue  # only this job's assignments are addressed to the inbox
                try:
                    answer = await self.act(assignment)
                except Exception as exc:  # a bug or a failing store ends the role, not the job
                    log.error("agent.crashed", job=kit.job, role=role,
                              error=f"{type(exc).__name__}: {exc}")
                    answer = failed_answer(assignment, f"{type(exc).__name__}: {exc}")
                await kit.bus.publish(topics.result(kit.job, role), answer)

    async def act(self, a: Assignment) -> AnswerMsg:
        """Run the role's session for ``a`` and build its answer."""
        kit = self.kit
        spec = kit.roles[a.role]
        if a.options:
            spec = restrict_decision(spec, a.options)
        briefing = await kit.briefing(a) if kit.briefing is not None else ""
        on_demand = {name: kit.tools.toolset([name]) for name in spec.tool_groups_on_demand
                     if name not in kit.tools.unavailable and kit.tools.group(name)}
        env = AgentEnv(
            job=kit.job, role=spec, llm=kit.llm, toolset=kit.tools.toolset(spec.tool_groups),
            tool_ctx=ToolContext(kit.workspace, kit.settings.tools, sandbox=kit.sandbox),
            archive=kit.archive,
            budget=kit.budget, bus=kit.bus, now=kit.clock.monotonic,
            max_turns=kit.budget.limits.turns.get(spec.name, spec.max_turns),
            context=kit.settings.context, counter=kit.counter, extra_system=briefing,
            turn_base=a.turn_base, on_demand=on_demand, began_dir=kit.began_dir,
            data_dir=kit.settings.data_dir)
        await self._event("role.started", {"role": spec.name, "cycle": a.cycle,
                                           "attempt": a.attempt})
        result = await run_agent(env, a.instructions)
        await self._event("role.finished", {"role": spec.name, "status": result.status,
                                            "turns": result.turns,
                                            "replayed": result.replayed_turns})
        return await self._answer(a, result)

    async def _answer(self, a: Assignment, r: AgentResult) -> AnswerMsg:
        u = r.usage
        common: dict[str, Any] = {
            "job": a.job, "role": a.role, "cycle": a.cycle, "attempt": a.attempt,
            "status": r.status, "error": r.error, "turns": r.turns,
            "usage": UsageWire(prompt_tokens=u.prompt_tokens,
                               completion_tokens=u.completion_tokens,
                               cached_tokens=u.cached_tokens, cost_usd=u.cost_usd),
            "lines": [TurnLine(role=t.role, turn=t.turn, summary=t.summary, iri=t.iri)
                      for t in r.summaries],
            "context_tokens": r.prompt_tokens, "baseline_tokens": r.baseline_tokens,
            "schema_tokens": r.schema_tokens,
        }
        if a.role == "PA":
            raw = r.finish.get("steps", [])
            steps = list(dict.fromkeys(" ".join(str(s).split()) for s in
                                       (raw if isinstance(raw, list) else [raw])))
            steps = [s for s in steps if s] or [a.goal]
            last_iri = r.summaries[-1].iri if r.summaries else None
            return PlanMsg(**common, steps=steps, turn_iri=last_iri)
        if a.role == "DA":
            written: dict[str, str] = {}
            for t in r.tools:
                path = t.arguments.get("path")
                if t.name in WRITING_TOOLS and t.ok and isinstance(path, str):
                    written[path] = t.iri
            return ArtifactMsg(**common, summary=str(r.finish.get("summary", "")),
                               files=list(written), written=written,
                               iris=[t.iri for t in r.tools])
        if a.role == "CA":
            ran = [t for t in r.tools if t.name == "run_checks" and t.ok]
            outcomes = outcomes_in(ran[-1].data) if ran else None
            verified_by = "CA"
            if outcomes is None:  # CA finished without checking: run them once, here
                outcomes = await self.kit.checks.run(ToolContext(
                    self.kit.workspace, self.kit.settings.tools, sandbox=self.kit.sandbox))
                verified_by = "CA (auto)"
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

    async def _event(self, event: str, data: dict[str, Any]) -> None:
        log.info(event, job=self.kit.job, **data)
        await self.kit.bus.publish(topics.events(self.kit.job),
                                   JobEvent(job=self.kit.job, event=event, data=data))


def failed_answer(a: Assignment, error: str) -> AnswerMsg:
    """The answer of a role whose session crashed: status failed, the error, nothing done."""
    common: dict[str, Any] = {"job": a.job, "role": a.role, "cycle": a.cycle,
                              "attempt": a.attempt, "status": "failed", "error": error}
    if a.role == "PA":
        return PlanMsg(**common, steps=[])
    if a.role == "DA":
        return ArtifactMsg(**common, summary="")
    if a.role == "CA":
        return CheckReportMsg(**common, results=[], passed=False)
    return DecisionMsg(**common, decision="escalate", report=error)


def restrict_decision(spec: RoleSpec, options: Sequence[str]) -> RoleSpec:
    """``spec`` whose finish tool accepts only ``options`` as its decision."""
    params = dict(spec.finish.parameters)
    props = dict(params.get("properties", {}))
    if "decision" in props:
        props["decision"] = {**props["decision"], "enum": list(options)}
    params["properties"] = props
    return dataclasses.replace(spec, finish=ToolSpec("finish", spec.finish.description, params))
