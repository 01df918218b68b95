"""Wire one job: the model backend, the job's L0 archive and lock, an in-process bus, the agent
worker, ingestion, the tool groups and the supervisor's runner; run it, or resume it.

``run_job`` starts a job; ``resume_job`` continues an interrupted one from its last journaled
transition (turns and tool results already archived are replayed, not paid or run again).
Both use the process's ``Runtime`` when given one (a daemon running many jobs), else open one
for the job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog
from pydantic import ValidationError

from gliding.agents.roles import RoleSpec, load_roles
from gliding.agents.worker import AgentWorker, JobAgents
from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import Assignment, CheckReportMsg, JobEvent
from gliding.config.settings import Settings
from gliding.config.task import Task, task_from_record, task_record
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.clock import Clock, SystemClock
from gliding.core.ids import new_job_id
from gliding.core.iri import record_iri
from gliding.core.messages import Usage
from gliding.daemon.jobs import FINISHED, JobLock
from gliding.daemon.runtime import Runtime
from gliding.errors import ArchiveError, GlidingError, UsageError
from gliding.llm.port import LLM, backend_kind
from gliding.memory.archive import Archive, archive_path
from gliding.memory.archive_port import LocalArchive
from gliding.memory.ingest import Ingestor
from gliding.memory.ingest_service import IngestService
from gliding.memory.journal import ArchiveJournal, last_entry
from gliding.scheduler import policy, supervisor
from gliding.scheduler.report import JobReport, build_report
from gliding.scheduler.runner import JobRunner, Verifier
from gliding.scheduler.supervisor import Command, SupervisorState, Verify
from gliding.tools.base import ToolContext
from gliding.tools.checks import ChecksGroup
from gliding.tools.groups import job_groups
from gliding.tools.snapshot import MAX_FILES, Snapshot, snapshot
from gliding.tools.snapshot import mark as workspace_mark

log = structlog.get_logger("gliding.daemon")

INGEST_DRAIN_S = 30.0  # how long a finished job waits for ingestion to catch up


def build_llm(model: str, settings: Settings) -> LLM:
    """The backend a model string names: ``local``, ``local:<gguf>``, ``scripted:<replies>``
    or a litellm string.

    Raises:
        UsageError: ``scripted`` without a file, or a replies file that cannot be used.
        LLMError: the local model file is missing.
    """
    kind = backend_kind(model)
    if kind == "local":
        from gliding.llm.local import LocalLLM

        path = Path(model.split(":", 1)[1]).expanduser() if ":" in model else None
        return LocalLLM(settings.llm.local, path)
    if kind == "scripted":
        from gliding.llm.scripted import FileScriptedLLM

        if ":" not in model or not model.split(":", 1)[1]:
            raise UsageError("the scripted model needs its replies file",
                             hint="--model scripted:replies.yaml (docs/config.md)")
        return FileScriptedLLM(Path(model.split(":", 1)[1]).expanduser())
    from gliding.llm.hosted import HostedLLM

    return HostedLLM(model, timeout_s=settings.llm.timeout_s)


@dataclass(frozen=True)
class JobHandle:
    report: JobReport | None  # None: resume found the job already finished
    archive: Path
    model: str
    finished_before: str | None = None  # the outcome a finished job already had


async def run_job(task: Task, settings: Settings, *, model: str | None = None,
                  llm: LLM | None = None, on_event: Callable[[JobEvent], None] | None = None,
                  clock: Clock | None = None, job_id: str | None = None,
                  runtime: Runtime | None = None) -> JobHandle:
    """Run ``task`` to its outcome. Model precedence: ``llm`` > ``model`` > task > settings.

    Raises:
        UsageError: the model string or replies file is unusable, or the workspace cannot be
            created (nothing is written then). ArchiveError: the archive cannot be written
            (the job stops; ``gliding resume`` may continue it).
    """
    chosen = model or task.model or settings.llm.model
    backend = llm or build_llm(chosen, settings)
    roles = load_roles()
    clock = clock or SystemClock()
    job = job_id or new_job_id(clock.now())
    with Archive.open(settings.data_dir, job) as archive:  # first: a bad data dir writes nothing
        try:
            task.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create workspace {task.workspace}: {exc}") from exc
        with JobLock(archive.path.parent):
            start = await anyio.to_thread.run_sync(snapshot, task.workspace, settings.data_dir)
            meta = (("task", str(task.source)), ("task_record", task_record(task)),
                    ("model", backend.name),
                    # what resume builds the model from: a replies file absolute
                    ("model_spec", backend.name if llm or backend_kind(chosen) == "scripted"
                     else chosen),
                    ("goal", task.goal), ("status", "running"), ("workspace_start", start))
            state, commands = _first_state(job, task, settings)
            await anyio.to_thread.run_sync(_set_meta, archive, (  # all or nothing
                *meta, ("pipeline", list(state.roles))))
            report = await _execute(_Job(task, settings, backend, roles, clock, archive, start,
                                         on_event, runtime), state, commands, resumed=False)
    return JobHandle(report, archive_path(settings.data_dir, job), backend.name)


async def resume_job(job: str, settings: Settings, *, llm: LLM | None = None,
                     on_event: Callable[[JobEvent], None] | None = None,
                     clock: Clock | None = None, runtime: Runtime | None = None) -> JobHandle:
    """Continue ``job`` from its last journaled transition.

    Raises:
        NotFoundError: the data directory has no such job. JobBusy: it runs elsewhere.
        ArchiveError: its archive or journal is damaged. UsageError: its model is unusable.
    """
    clock = clock or SystemClock()
    with Archive.open(settings.data_dir, job, create=False) as archive:
        with JobLock(archive.path.parent):
            status = str(archive.get_meta("status", "running"))
            model_spec = str(archive.get_meta("model_spec") or archive.get_meta("model") or "")
            if status in FINISHED:
                return JobHandle(None, archive.path, model_spec, finished_before=status)
            record = archive.get_meta("task_record")
            if not record:
                raise ArchiveError(f"job {job} was stopped before it was set up",
                                   hint="nothing of it ran: run its task file again")
            task = task_from_record(record)
            backend = llm or build_llm(model_spec, settings)
            start: Snapshot = archive.get_meta("workspace_start") or {}
            entry = last_entry(archive)
            commands: list[Command] = []
            if entry is None:  # killed before its first transition: start it over
                state, commands = _first_state(job, task, settings)
            else:
                try:
                    state = SupervisorState.model_validate(entry.state)
                except ValidationError as exc:
                    raise ArchiveError(f"the journal of job {job} is damaged: {exc}") from exc
            changed = await anyio.to_thread.run_sync(_changed_since, archive, task.workspace,
                                                     settings.data_dir)
            await anyio.to_thread.run_sync(_set_meta, archive, (
                ("resumes", int(archive.get_meta("resumes", 0)) + 1),
                ("pipeline", list(state.roles))))
            run = _Job(task, settings, backend, load_roles(), clock, archive, start, on_event,
                       runtime, workspace_changed=changed,
                       journaled=entry.n if entry is not None else 0)
            report = await _execute(run, state, commands, resumed=entry is not None)
    return JobHandle(report, archive_path(settings.data_dir, job), backend.name)


def _set_meta(archive: Archive, items: tuple[tuple[str, Any], ...]) -> None:
    with archive.batch():
        for key, value in items:
            archive.set_meta(key, value)


def _first_state(job: str, task: Task,
                 settings: Settings) -> tuple[SupervisorState, list[Command]]:
    choice = policy.choose_pipeline(task.goal, task.pipeline, has_checks=bool(task.checks),
                                    simple_max_words=settings.scheduler.simple_goal_max_words)
    return supervisor.start(job, task.goal, choice, [c.describe() for c in task.checks],
                            max_corrections=settings.scheduler.max_corrections,
                            max_cycles=settings.scheduler.max_cycles)


@dataclass
class _Job:
    task: Task
    settings: Settings
    llm: LLM
    roles: dict[str, RoleSpec]
    clock: Clock
    archive: Archive
    start: Snapshot
    on_event: Callable[[JobEvent], None] | None
    runtime: Runtime | None
    workspace_changed: bool = False
    journaled: int = 0  # journal entries an earlier run wrote (the next one is journaled + 1)


async def _execute(j: _Job, state: SupervisorState, commands: list[Command], *,
                   resumed: bool) -> JobReport:
    """Run the job; a GlidingError from inside its task groups comes out as itself."""
    try:
        return await _execute_grouped(j, state, commands, resumed=resumed)
    except BaseExceptionGroup as group:
        first = _first_error(group)
        if first is None:
            raise
        raise first from group


def _first_error(group: BaseExceptionGroup[Any]) -> GlidingError | None:
    for exc in group.exceptions:
        if isinstance(exc, GlidingError):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (inner := _first_error(exc)) is not None:
            return inner
    return None


async def _execute_grouped(j: _Job, state: SupervisorState, commands: list[Command], *,
                           resumed: bool) -> JobReport:
    job, task, settings, archive = state.job, j.task, j.settings, j.archive
    async with _runtime(j.runtime, settings) as rt:
        bus = InProcessBus()
        port = LocalArchive(archive, settings.data_dir)
        budget = BudgetTracker(limits_of(task), started_at=j.clock.monotonic())
        for call in await port.calls():  # what earlier runs of the job already paid
            budget.record(call.role, Usage(call.prompt_tokens, call.completion_tokens,
                                           call.cached_tokens, call.cost_usd))
        checks = ChecksGroup(task.checks)
        tools = job_groups(checks=checks, reader=port, iri_base=f"gliding://job/{job}/",
                           knowledge=rt.access())
        ingest = None
        if rt.knowledge is not None and rt.projector is not None:
            ingestor = Ingestor(rt.knowledge.board, archive, job,
                                on_write=rt.projector.invalidate)
            ingest = IngestService(ingestor, archive, task.goal)
            if resumed:
                await anyio.to_thread.run_sync(ingest.catch_up)

        async def briefing(a: Assignment) -> str:
            if ingest is not None:
                await ingest.caught_up(a)
            return await anyio.to_thread.run_sync(rt.briefing, a.role, job, task.goal)

        kit = JobAgents(job=job, workspace=task.workspace, llm=j.llm, roles=j.roles, tools=tools,
                        checks=checks, archive=port, budget=budget, bus=bus, clock=j.clock,
                        settings=settings, counter=rt.counter,
                        briefing=briefing if rt.projector is not None else None,
                        began_dir=_began_dir(archive))
        worker = AgentWorker(kit, state.roles)

        async def verify(command: Verify) -> CheckReportMsg:
            results = await checks.run(ToolContext(task.workspace, settings.tools))
            return CheckReportMsg(job=job, role=supervisor.RUNNER, cycle=command.cycle,
                                  attempt=command.attempt, results=results,
                                  passed=all(r.passed for r in results), verified_by="runner")

        journal = ArchiveJournal(archive, after=j.journaled,
                                 fingerprint=lambda: workspace_mark(task.workspace,
                                                                    settings.data_dir))
        started = j.clock.monotonic()
        await tools.open()  # the groups acquire what they own; closed however the job ends
        try:
            final = await _drive(j, state, commands, resumed, bus, worker, ingest, journal,
                                 verify)
        finally:
            with anyio.CancelScope(shield=True):
                await tools.aclose()
                await bus.aclose()
    assert final.outcome is not None
    artifacts = await anyio.to_thread.run_sync(_archive_artifacts, archive, task.workspace,
                                               final.written)
    await anyio.to_thread.run_sync(archive.set_meta, "status", final.outcome)
    checked = await anyio.to_thread.run_sync(_checked_files, task, j.start)
    return build_report(final, artifacts=artifacts, wall_s=j.clock.monotonic() - started,
                        checked_files=checked,
                        resumed=int(archive.get_meta("resumes", 0)),
                        workspace_changed=j.workspace_changed)


async def _drive(j: _Job, state: SupervisorState, commands: list[Command], resumed: bool,
                 bus: InProcessBus, worker: AgentWorker, ingest: IngestService | None,
                 journal: ArchiveJournal, verify: Verifier) -> SupervisorState:
    """Start ingestion, the agents and the event forwarding; run the supervisor to its end."""
    job = state.job
    agents = anyio.CancelScope()

    async def serve_agents(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        with agents:
            await worker.serve(task_status=task_status)

    async with bus.subscribe(topics.events(job), max_buffer=1000) as events:
        async with anyio.create_task_group() as tg:
            forwarded = anyio.Event()  # always drained: a full buffer would stall the job
            tg.start_soon(_forward, events, j.on_event or _ignore, forwarded)
            if ingest is not None:
                await tg.start(ingest.serve, bus)
            await tg.start(serve_agents)
            if j.workspace_changed:
                await bus.publish(topics.events(job), JobEvent(
                    job=job, event="job.workspace_changed", data={}))
            runner = JobRunner(bus, verify, journal, j.task.wall_time_s,
                               stop_agents=agents.cancel)
            final = await (runner.resume(state) if resumed else runner.run(state, commands))
            agents.cancel()
            if ingest is not None:
                with anyio.move_on_after(INGEST_DRAIN_S):
                    await ingest.done.wait()
            with anyio.move_on_after(INGEST_DRAIN_S):
                await forwarded.wait()  # every event up to job.finished was shown
            tg.cancel_scope.cancel()
    return final


@asynccontextmanager
async def _runtime(given: Runtime | None, settings: Settings) -> AsyncIterator[Runtime]:
    if given is not None:
        yield given
        return
    async with Runtime.open(settings) as runtime:
        yield runtime


def _began_dir(archive: Archive) -> Path:
    path = archive.path.parent / "began"
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"cannot create {path}: {exc}") from exc
    return path


def limits_of(task: Task) -> Limits:
    """The task's budgets as the budget tracker reads them."""
    def split(value: Any) -> tuple[Any, dict[str, Any]]:
        return (None, dict(value)) if isinstance(value, dict) else (value, {})

    prompt, role_prompt = split(task.prompt_tokens)
    completion, role_completion = split(task.completion_tokens)
    cost, role_cost = split(task.cost_usd)
    return Limits(turns=dict(task.turns), prompt_tokens=prompt, completion_tokens=completion,
                  cost_usd=cost, wall_time_s=task.wall_time_s, role_prompt_tokens=role_prompt,
                  role_completion_tokens=role_completion, role_cost_usd=role_cost)


def _checked_files(task: Task, start: Snapshot) -> dict[str, str]:
    """Each checked file: written (or changed) by this job, found unchanged, or missing (or,
    past a start snapshot cut at MAX_FILES, present without knowing who wrote it)."""
    out: dict[str, str] = {}
    for check in task.checks:
        path = getattr(check, "path", None)
        if not isinstance(path, str):
            continue
        key = str(Path(path))
        try:
            st = (task.workspace / key).lstat()
        except OSError:
            out[path] = "missing"
            continue
        if key not in start and len(start) >= MAX_FILES:
            out[path] = "present (the workspace is too big to tell who wrote it)"
        elif start.get(key) == [st.st_size, st.st_mtime_ns]:
            out[path] = "found unchanged"
        else:
            out[path] = "written by this job"
    return out


def _changed_since(archive: Archive, workspace: Path, data_dir: Path) -> bool:
    """Whether the workspace differs from what the job last recorded (journal or tool result).
    A change is reported, not trusted: the resumed agents see the workspace as it is now."""
    recorded = ""
    for item in archive.list():
        mark = item.meta.get("workspace")
        if item.kind in ("journal", "result") and isinstance(mark, str) and mark:
            recorded = mark
    if not recorded:
        return False
    changed = workspace_mark(workspace, data_dir) != recorded
    if changed:
        log.warning("job.workspace.changed", job=archive.job, workspace=str(workspace))
    return changed


def _archive_artifacts(archive: Archive, workspace: Path,
                       written: dict[str, str]) -> tuple[tuple[str, str], ...]:
    out = []
    for path in sorted(written):
        target = workspace / path
        if not target.is_file():
            continue
        iri = str(record_iri(archive.job, "artifact", path))
        try:
            archive.put(iri, target.read_bytes(), kind="artifact",
                        media_type="application/octet-stream",
                        meta={"path": path, "written_by": written[path]})
        except ArchiveError as exc:  # a resumed job whose artifact was archived, then changed
            log.warning("artifact.archive.failed", job=archive.job, path=path,
                        error=exc.message)
            continue
        out.append((path, iri))
    return tuple(out)


def _ignore(event: JobEvent) -> None:
    return None


async def _forward(events: Any, on_event: Callable[[JobEvent], None],
                   done: anyio.Event) -> None:
    while True:
        _topic, event = await events.receive()
        on_event(event)
        if event.event == "job.finished":
            done.set()
