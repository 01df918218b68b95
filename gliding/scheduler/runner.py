"""The async runner: carries out the supervisor policy for one job over the memory bus.

Each role runs as its own task that listens on ``job/<job>/agent/<ROLE>`` for an Assignment and
answers on ``job/<job>/result/<ROLE>`` with a typed message (PlanMsg, ArtifactMsg,
CheckReportMsg, DecisionMsg). The supervisor only publishes and receives: agents never call one
another. Progress events go to ``job/<job>/events`` for whoever displays them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from gliding.agents.loop import AgentEnv, AgentResult, TurnSummary, run_agent
from gliding.agents.roles import RoleSpec
from gliding.bus.messages import (
    ArtifactMsg,
    Assignment,
    CheckReportMsg,
    DecisionMsg,
    JobEvent,
    PlanMsg,
)
from gliding.bus.port import Bus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.checks import Check, CheckResult
from gliding.core.clock import Clock, SystemClock
from gliding.core.iri import parse_iri, record_iri
from gliding.core.messages import ToolSpec, Usage
from gliding.errors import GlidingError, NotFoundError
from gliding.llm.port import LLM
from gliding.memory.archive import Archive, open_for_iri
from gliding.memory.blackboard import Value
from gliding.memory.ingest import Ingestor
from gliding.memory.knowledge import KnowledgeMemory
from gliding.memory.projection import Projector
from gliding.memory.search import Hit
from gliding.memory.vocabulary import NS
from gliding.scheduler import policy
from gliding.tools.base import ToolContext, ToolGroupManager
from gliding.tools.checks import run_checks_on
from gliding.tools.knowledge import hit_line

log = structlog.get_logger("gliding.scheduler")

WRITING_TOOLS = ("write_file", "edit_file")
KG_SEARCH_K = 8  # nodes a kg_search answers with unless the model asks for another number
KNOWLEDGE_QUERY_TIMEOUT_S = 10.0
_GL_PREFIX_RE = re.compile(r"PREFIX\s+gl:", re.IGNORECASE)


@dataclass(frozen=True)
class JobSpec:
    job: str
    goal: str
    workspace: Path
    checks: tuple[Check, ...]
    pipeline: str | tuple[str, ...]
    limits: Limits


@dataclass(frozen=True)
class RoleUsage:
    role: str
    turns: int
    usage: Usage


@dataclass(frozen=True)
class JobReport:
    job: str
    outcome: str
    pipeline: policy.PipelineChoice
    cycles: int
    corrections: int
    checks: tuple[CheckResult, ...]
    checks_verified_by: str
    decision: str | None
    report: str
    plan: tuple[str, ...]
    roles: tuple[RoleUsage, ...]
    artifacts: tuple[tuple[str, str], ...]
    turns: tuple[TurnSummary, ...]
    stopped: str | None
    wall_s: float
    total: Usage = field(default_factory=Usage)
    context_tokens: dict[str, tuple[int, int]] = field(default_factory=dict)


class JobRunner:
    """Runs one job to its outcome; the caller owns the archive, the bus and the model."""

    def __init__(self, spec: JobSpec, *, settings: Settings, llm: LLM, archive: Archive,
                 bus: Bus, roles: dict[str, RoleSpec], tools: ToolGroupManager,
                 clock: Clock | None = None, ingestor: Ingestor | None = None,
                 projector: Projector | None = None,
                 knowledge: KnowledgeMemory | None = None) -> None:
        self.spec = spec
        self.settings = settings
        self.llm = llm
        self.archive = archive
        self.bus = bus
        self.roles = roles
        self.tools = tools
        self.clock = clock or SystemClock()
        self.ingestor = ingestor
        self.projector = projector
        self.knowledge = knowledge  # long-term memory for the knowledge tools (may be None)
        self.budget = BudgetTracker(spec.limits, started_at=self.clock.monotonic())
        self.turns: list[TurnSummary] = []
        self.written: dict[str, str] = {}  # path -> IRI of the result that wrote it
        self.stopped: str | None = None
        self.stop_reason: str | None = None
        self._tool_ctx = ToolContext(spec.workspace, settings.tools, {
            "checks": spec.checks,
            "read_archived": self._read_archived,
            "iri_base": f"gliding://job/{spec.job}/",
            **(self._knowledge_tools(knowledge) if knowledge is not None else {}),
        })
        self.counter = TokenCounter(settings.context.tokenizer)
        self.context_tokens: dict[str, list[int]] = {}  # role -> [engine tokens, baseline]
        self._last_checks: list[CheckResult] = []

    # ---- the supervisor ---------------------------------------------------------------
    async def run(self) -> JobReport:
        spec, sched = self.spec, self.settings.scheduler
        choice = policy.choose_pipeline(spec.goal, spec.pipeline, has_checks=bool(spec.checks),
                                        simple_max_words=sched.simple_goal_max_words)
        self.archive.set_meta("goal", spec.goal)
        self.archive.set_meta("pipeline", list(choice.roles))
        self.archive.set_meta("status", "running")
        await self._event("job.started", {"pipeline": list(choice.roles), "kind": choice.kind,
                                          "reason": choice.reason, "goal": spec.goal})
        self._ingest("job_node", spec.goal)
        started = self.clock.monotonic()
        state: dict[str, Any] = {"plan": (), "checks": (), "decision": None, "report": "",
                                 "cycles": 0, "corrections": 0, "verified_by": "none"}
        wall = spec.limits.wall_time_s
        with anyio.move_on_after(wall if wall is not None else float("inf")) as deadline:
            async with self.bus.subscribe(f"job/{spec.job}/result/+") as results:
                async with anyio.create_task_group() as tg:
                    for role in dict.fromkeys(choice.roles):
                        await tg.start(self._agent_task, role)
                    try:
                        await self._supervise(choice.roles, results, state)
                    finally:
                        tg.cancel_scope.cancel()
        if deadline.cancelled_caught:
            self.stopped, self.stop_reason = "budget", f"wall time budget of {wall:g}s spent"
        if not state["checks"] and spec.checks:
            state["checks"] = tuple(await run_checks_on(spec.checks, spec.workspace,
                                                        self.settings.tools))
            state["verified_by"] = "runner"
        passed = all(r.passed for r in state["checks"]) if state["checks"] else None
        out = policy.outcome(passed, state["decision"], self.stopped)
        artifacts = self._archive_artifacts()
        for path, iri in artifacts:
            self._ingest("artifact", path, iri)
        self._ingest("job_node", spec.goal, out)
        self.archive.set_meta("status", out)
        report = JobReport(
            job=spec.job, outcome=out, pipeline=choice, cycles=state["cycles"],
            corrections=state["corrections"], checks=tuple(state["checks"]),
            checks_verified_by=state["verified_by"], decision=state["decision"],
            report=state["report"] or (self.stop_reason or ""), plan=tuple(state["plan"]),
            roles=tuple(RoleUsage(r, self.budget.turns.get(r, 0),
                                  self.budget.by_role.get(r, Usage()))
                        for r in dict.fromkeys(choice.roles)),
            artifacts=artifacts, turns=tuple(self.turns), stopped=self.stop_reason,
            wall_s=self.clock.monotonic() - started, total=self.budget.usage,
            context_tokens={r: (v[0], v[1]) for r, v in self.context_tokens.items()},
        )
        await self._event("job.finished", {"outcome": out})
        return report

    async def _supervise(self, roles: Sequence[str], results: Any, state: dict[str, Any]) -> None:
        sched = self.settings.scheduler
        feedback = ""
        while state["cycles"] < sched.max_cycles:
            state["cycles"] += 1
            cycle = state["cycles"]
            if "PA" in roles:
                plan = await self._ask("PA", cycle, 0, self._pa_text(feedback), results)
                if plan is None:
                    return
                state["plan"] = tuple(plan.steps)
            correction = ""
            attempt = 0  # corrections in this cycle
            while True:
                if "DA" in roles:
                    done = await self._ask("DA", cycle, attempt,
                                           self._da_text(state["plan"], feedback, correction),
                                           results)
                    if done is None:
                        return
                if "CA" not in roles:
                    break
                report = await self._ask("CA", cycle, attempt, self._ca_text(), results)
                if report is None:
                    return
                state["checks"] = tuple(self._last_checks)
                state["verified_by"] = "CA" if report.notes != "auto" else "CA (auto)"
                step = policy.after_check(report.passed, attempt, sched.max_corrections)
                await self._event("check.report", {"passed": report.passed, "next": step,
                                                   "cycle": cycle, "attempt": attempt})
                if step != "correct" or "DA" not in roles:
                    break
                state["corrections"] += 1
                attempt += 1
                correction = _correction_text(self._last_checks)
            if "AA" not in roles:
                return
            passed = all(r.passed for r in state["checks"]) if state["checks"] else None
            decision = await self._ask("AA", cycle, attempt, self._aa_text(state["checks"]),
                                       results, options=policy.decision_options(passed))
            if decision is None:
                return
            state["decision"], state["report"] = decision.decision, decision.report
            nxt = policy.after_decision(decision.decision, cycle, sched.max_cycles)
            if nxt != "next_cycle":
                if nxt == "escalate":
                    state["decision"] = "escalate"
                return
            feedback = f"Cycle {cycle} did not succeed. AA said: {decision.report}\n" + (
                _failures_text(state["checks"]))

    async def _ask(self, role: str, cycle: int, attempt: int, text: str, results: Any,
                   options: tuple[str, ...] | None = None) -> Any:
        """Publish an Assignment to ``role`` and wait for its typed answer (None: job stops)."""
        if self.stopped:
            return None
        context = {"options": list(options)} if options else {}
        await self.bus.publish(f"job/{self.spec.job}/agent/{role}", Assignment(
            job=self.spec.job, role=role, cycle=cycle, attempt=attempt, goal=self.spec.goal,
            instructions=text, context=context))
        _topic, message = await results.receive()
        return None if self.stopped else message

    # ---- the agents -------------------------------------------------------------------
    async def _agent_task(self, role: str, *, task_status: Any = anyio.TASK_STATUS_IGNORED
                          ) -> None:
        spec = self.roles[role]
        async with self.bus.subscribe(f"job/{self.spec.job}/agent/{role}") as inbox:
            task_status.started()
            while True:
                _topic, assignment = await inbox.receive()
                if not isinstance(assignment, Assignment):
                    continue  # only assignments are addressed to an agent's inbox
                answer = await self._act(spec, assignment)
                await self.bus.publish(f"job/{self.spec.job}/result/{role}", answer)

    async def _act(self, spec: RoleSpec, a: Assignment) -> Any:
        options = a.context.get("options")
        if options:
            spec = _restrict_decision(spec, options)
        env = AgentEnv(
            job=self.spec.job, role=spec, llm=self.llm,
            toolset=self.tools.toolset(spec.tool_groups), tool_ctx=self._tool_ctx,
            archive=self.archive, budget=self.budget, bus=self.bus,
            now=self.clock.monotonic, max_turns=self.spec.limits.turns.get(spec.name,
                                                                         spec.max_turns),
            context=self.settings.context, counter=self.counter,
            extra_system=self._briefing(spec.name),
        )
        await self._event("role.started", {"role": spec.name, "cycle": a.cycle,
                                           "attempt": a.attempt})
        result = await run_agent(env, a.instructions)
        self.turns.extend(result.summaries)
        for t in result.summaries:
            self._ingest("turn", t.role, t.turn, t.iri, t.summary)
        for record in result.tools:
            self._ingest("tool_result", record, record.turn_iri or None)
        spent = self.context_tokens.setdefault(spec.name, [0, 0])
        spent[0] += result.prompt_tokens
        spent[1] += result.baseline_tokens
        if result.status == "budget":
            self.stopped, self.stop_reason = "budget", result.error
        elif result.status == "failed":
            self.stopped, self.stop_reason = "error", result.error
        await self._event("role.finished", {"role": spec.name, "status": result.status,
                                            "turns": result.turns})
        return await self._answer(spec.name, a, result)

    async def _answer(self, role: str, a: Assignment, r: AgentResult) -> Any:
        job, cycle = self.spec.job, a.cycle
        last_iri = r.summaries[-1].iri if r.summaries else None
        if role == "PA":
            raw = r.finish.get("steps", [])
            steps = list(dict.fromkeys(" ".join(str(s).split()) for s in
                                       (raw if isinstance(raw, list) else [raw])))
            steps = [s for s in steps if s]
            self._ingest("plan", cycle, steps or [self.spec.goal], last_iri)
            return PlanMsg(job=job, cycle=cycle, steps=steps or [self.spec.goal],
                           turn_iri=last_iri)
        if role == "DA":
            files = []
            for t in r.tools:
                if t.name in WRITING_TOOLS and t.ok and isinstance(t.arguments.get("path"), str):
                    files.append(t.arguments["path"])
                    self.written[t.arguments["path"]] = t.iri
            return ArtifactMsg(job=job, cycle=cycle, attempt=a.attempt,
                               summary=str(r.finish.get("summary", "")), files=files,
                               iris=[t.iri for t in r.tools], status=r.status)
        if role == "CA":
            ran = any(t.name == "run_checks" for t in r.tools)
            results = await run_checks_on(self.spec.checks, self.spec.workspace,
                                          self.settings.tools)
            self._last_checks = results
            self._ingest("check_report", cycle, a.attempt, results)
            return CheckReportMsg(
                job=job, cycle=cycle, attempt=a.attempt, passed=all(x.passed for x in results),
                results=[{"check": x.check.describe(), "status": x.status,
                          "evidence": x.evidence, "expected": x.expected} for x in results],
                notes=str(r.finish.get("notes", "")) if ran else "auto")
        decision = str(r.finish.get("decision") or "")
        options = a.context.get("options") or ["done", "another_cycle", "escalate"]
        if decision not in options:  # the AA never decided: pick the safe reading of the evidence
            decision = "done" if "done" in options else "escalate"
        self._ingest("decision", cycle, decision, str(r.finish.get("report") or ""))
        return DecisionMsg(job=job, cycle=cycle, decision=decision,
                           report=str(r.finish.get("report") or r.error or ""))

    # ---- texts each role is handed ----------------------------------------------------
    def _checks_text(self) -> str:
        if not self.spec.checks:
            return ""
        return "Success checks:\n" + "\n".join(f"- {c.describe()}" for c in self.spec.checks)

    def _pa_text(self, feedback: str) -> str:
        return "\n\n".join(x for x in (f"Goal: {self.spec.goal}", self._checks_text(),
                                       feedback) if x)

    def _da_text(self, plan: Sequence[str], feedback: str, correction: str) -> str:
        if correction:  # the failed checks lead, as the goal of this attempt
            return "\n\n".join(p for p in (
                correction, f"Original goal: {self.spec.goal}", self._checks_text()) if p)
        parts = [f"Goal: {self.spec.goal}"]
        if plan:
            parts.append("Plan:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(plan, 1)))
        parts += [self._checks_text(), feedback]
        return "\n\n".join(p for p in parts if p)

    def _ca_text(self) -> str:
        files = ", ".join(sorted(self.written)) or "none reported"
        return f"Goal: {self.spec.goal}\n\nFiles DA wrote: {files}\n\n{self._checks_text()}"

    def _aa_text(self, checks: Sequence[CheckResult]) -> str:
        lines = [f"Goal: {self.spec.goal}", "", "Check report:"]
        lines += [f"- {r.status.upper()} {r.check.describe()}: {r.evidence}" for r in checks]
        if not checks:
            lines.append("- no checks were run")
        return "\n".join(lines)

    # ---- bookkeeping ------------------------------------------------------------------
    def _briefing(self, role: str) -> str:
        """The role's L3 view of the blackboard, and for PA what earlier jobs recorded about
        the goal; "" when there is nothing (no board, nothing yet, or it failed)."""
        budget = self.settings.memory.recall.briefing_tokens
        if self.projector is None or budget <= 0:
            return ""
        graph = f"gliding://job/{self.spec.job}"
        parts = []
        try:
            text = self.projector.briefing(role, graph, budget)
            if text:
                parts.append(f"Blackboard (what the team recorded so far):\n{text}")
        except GlidingError as exc:
            log.warning("blackboard.projection.failed", job=self.spec.job, role=role,
                        error=exc.message)
        if role == "PA" and self.knowledge is not None:
            try:
                earlier = self.knowledge.brief(self.spec.goal, budget // 2,
                                               exclude_graphs=[graph])
            except GlidingError as exc:
                log.warning("knowledge.brief.failed", job=self.spec.job, error=exc.message)
            else:
                if earlier.text:
                    parts.append(f"Earlier jobs (long-term memory):\n{earlier.text}")
        return "\n\n".join(parts)

    def _ingest(self, what: str, *args: Any) -> None:
        """Write to the blackboard (L2) if there is one; its failure never stops the job."""
        if self.ingestor is None:
            return
        try:
            getattr(self.ingestor, what)(*args)
        except GlidingError as exc:
            log.warning("blackboard.ingest.failed", job=self.spec.job, what=what,
                        error=exc.message)

    def _knowledge_tools(self, knowledge: KnowledgeMemory) -> dict[str, Any]:
        """The callables recall, kg_search and knowledge_query reach long-term memory through.

        They raise GlidingError on a refused query or a failing store; the tools hand that to
        the model as an error, so a knowledge failure never stops the job. Queries are not held
        to this job's graph: reading every job's graph is what shared memory is for.
        """
        budget = self.settings.memory.recall.budget_tokens

        def knowledge_recall(query: str) -> str:
            return knowledge.recall(query, budget, touch=True).text

        def kg_search(query: str, k: int = KG_SEARCH_K) -> list[Hit]:
            kept: list[Hit] = []
            for hit in knowledge.search(query, k=k):
                lines = [hit_line(h) for h in kept]

                def fits(text: str, hit: Hit = hit, lines: list[str] = lines) -> bool:
                    line = hit_line(dataclasses.replace(hit, text=text))
                    return self.counter.count("\n".join([*lines, line])) <= budget

                text = _clip_words(hit.text, fits)
                if text:
                    kept.append(dataclasses.replace(hit, text=text))
                if text != hit.text:
                    break  # the budget is spent
            return kept

        def knowledge_query(sparql: str) -> list[dict[str, Value]]:
            if "gl:" in sparql and not _GL_PREFIX_RE.search(sparql):
                sparql = f"PREFIX gl: <{NS}>\n{sparql}"
            return knowledge.query(sparql, timeout_s=KNOWLEDGE_QUERY_TIMEOUT_S)

        return {"knowledge_recall": knowledge_recall, "kg_search": kg_search,
                "knowledge_query": knowledge_query}

    def _read_archived(self, iri: str) -> str:
        """An archived item of this job, or of an earlier job of the same data directory (what
        recall and kg_search point at); for a blackboard node (a step, a check, a decision)
        its latest revision's JSON-LD. Raises GlidingError when there is none."""
        if parse_iri(iri).job == self.spec.job:
            return _read_from(self.archive, iri)
        other, _ = open_for_iri(self.settings.data_dir, iri)
        with other:
            return _read_from(other, iri)

    def _archive_artifacts(self) -> tuple[tuple[str, str], ...]:
        out = []
        for path in sorted(self.written):
            target = self.spec.workspace / path
            if not target.is_file():
                continue
            iri = str(record_iri(self.spec.job, "artifact", path))
            self.archive.put(iri, target.read_bytes(), kind="artifact",
                             media_type="application/octet-stream",
                             meta={"path": path, "written_by": self.written[path]})
            out.append((path, iri))
        return tuple(out)

    async def _event(self, event: str, data: dict[str, Any]) -> None:
        log.info(event, job=self.spec.job, **data)
        await self.bus.publish(f"job/{self.spec.job}/events",
                               JobEvent(job=self.spec.job, event=event, data=data))


def _clip_words(text: str, fits: Callable[[str], bool]) -> str:
    """``text`` if it ``fits``, else the most of its first words (and "…") that do, or ""."""
    if fits(text):
        return text
    words = text.split()
    low, high = 0, len(words) - 1
    while low < high:  # the most words whose clipped text fits
        mid = (low + high + 1) // 2
        if fits(" ".join(words[:mid]) + "…"):
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low]) + "…" if low else ""


def _read_from(archive: Archive, iri: str) -> str:
    try:
        item = archive.get(iri)
    except NotFoundError:
        revisions = [e for e in archive.list(kind="node") if e.meta.get("node") == iri]
        if not revisions:
            raise
        item = archive.get(revisions[-1].iri)
    return (item.content or b"").decode("utf-8", errors="replace")


def _correction_text(results: Sequence[CheckResult]) -> str:
    """DA's goal after a failed check: the remedy of each failure, then CA's evidence."""
    failed = [r for r in results if not r.passed]
    goal = "; ".join(r.check.remedy() for r in failed)
    steps = "\n".join(f"{i}. {r.check.remedy()}" for i, r in enumerate(failed, 1))
    return f"Goal: {goal}\n\nPlan:\n{steps}\n\nEvidence from CA:\n" + _failures_text(failed)


def _failures_text(results: Sequence[CheckResult]) -> str:
    lines = []
    for r in results:
        if not r.passed:
            line = f"- FAIL {r.check.describe()}: {r.evidence}"
            if r.expected is not None:
                line += f"\n  expected text: {r.expected}"
            lines.append(line)
    return "\n".join(lines)


def _restrict_decision(spec: RoleSpec, options: Sequence[str]) -> RoleSpec:
    params = dict(spec.finish.parameters)
    props = dict(params.get("properties", {}))
    if "decision" in props:
        props["decision"] = {**props["decision"], "enum": list(options)}
    params["properties"] = props
    return dataclasses.replace(spec, finish=ToolSpec("finish", spec.finish.description, params))
