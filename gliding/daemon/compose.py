"""Wire one job: the model backend, the job's L0 archive and lock, an in-process bus, the agent
worker, ingestion, the tool groups and the supervisor's runner; run it, or resume it.

``run_job`` starts a job; ``resume_job`` continues an interrupted one from its last journaled
transition (turns and tool results already archived are replayed, not paid or run again).
Both use the process's ``Runtime`` when given one (a daemon running many jobs), else open one
for the job.

Before anything of a job is written its workspace is checked (``refuse_workspace``, and that
it can be written) and locked (``WorkspaceLock``). Whatever stops a job from outside its agents
comes out as one GlidingError with the stop recorded (``jobs.stop_error``, ``record_stop``).
What the agents work with is built in ``parts.py`` (the same on a ``gliding worker``); the
files DA wrote are archived at the end by ``artifacts.py``; the job's model is chosen by
``models.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog
from pydantic import ValidationError

from gliding.agents.roles import RoleSpec, load_roles
from gliding.agents.tracing import Tracer
from gliding.agents.worker import AgentWorker, JobAgents
from gliding.bus import topics
from gliding.bus.messages import Assignment, CheckReportMsg, JobEvent
from gliding.bus.port import Bus
from gliding.config.settings import Settings
from gliding.config.task import Task, task_from_record, task_record
from gliding.config.workspace_rule import HOME_DOT_HINT, WORKSPACE_HINT, workspace_refusal
from gliding.core.clock import Clock, SystemClock
from gliding.core.crashpoints import crash_point
from gliding.core.events import (
    JobFinished,
    JobSandbox,
    MCPServerUnavailable,
    ToolchainRefused,
    WorkspaceChanged,
)
from gliding.core.ids import new_job_id
from gliding.daemon import artifacts, fork, parts
from gliding.daemon.board import JobBoard, job_board
from gliding.daemon.jobs import FINISHED, JobLock, WorkspaceLock, record_stop, stop_error
from gliding.daemon.models import build_llm, check_cost_budget
from gliding.daemon.runtime import Runtime, open_bus
from gliding.errors import ArchiveError, ProviderUnavailable, TaskFileError, ToolError, UsageError
from gliding.llm.port import LLM, backend_kind
from gliding.memory.archive.journal import ArchiveJournal, last_entry
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive, archive_path
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.ingest.ingestor import Ingestor
from gliding.memory.ingest.service import IngestService
from gliding.memory.recall.access import MemoryAccess
from gliding.scheduler import policy, supervisor
from gliding.scheduler.report import JobReport, build_report
from gliding.scheduler.runner import JobRunner, Verifier
from gliding.scheduler.supervisor import Command, SupervisorState, Verify
from gliding.tools.base import ToolContext
from gliding.tools.netguard import Policy, check_url_host
from gliding.tools.protected import git_paths
from gliding.tools.sandbox import Sandbox
from gliding.tools.snapshot import Snapshot, snapshot
from gliding.tools.snapshot import mark as workspace_mark
from gliding.tools.toolchain import resolve_toolchain

log = structlog.get_logger("gliding.daemon")

INGEST_DRAIN_S = 30.0  # how long a finished job waits for ingestion to catch up


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
            created or written. TaskFileError: the workspace is one no job may have
            (``refuse_workspace``), or the task has a cost budget and a model without a price
            (``check_cost_budget``). WorkspaceBusy: another job of the data directory works in
            it. In these cases nothing of the job is written. ArchiveError: the archive cannot
            be written, the disk is full (the job stops as ``interrupted``; ``gliding resume``
            may continue it). GlidingError: any other error that stopped the job, as one
            message (recorded the same way).
    """
    chosen = model or task.model or settings.llm.model
    backend = llm or build_llm(chosen, settings)
    await anyio.to_thread.run_sync(check_cost_budget, task, settings,  # refused: nothing
                                   backend.name if llm else chosen)  # is written
    roles = await anyio.to_thread.run_sync(load_roles)  # role files: YAML read from disk
    clock = clock or SystemClock()
    job = job_id or new_job_id(clock.now())
    _check_workspace(task, settings, create=True)
    sandbox = await job_sandbox(job, task, settings, on_event)  # refused: nothing is written
    parts.with_task_groups({}, task)  # an unknown tool group is refused before anything is written
    check_agents(settings)
    fresh = not archive_path(settings.data_dir, job).exists()
    with WorkspaceLock(settings.data_dir, task.workspace, job), \
            Archive.open(settings.data_dir, job) as archive:  # a bad data dir writes nothing
        try:
            task.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if fresh:
                _discard(archive)
            raise UsageError(f"cannot create workspace {task.workspace}: "
                             f"{exc.strerror or exc}") from exc
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
                                         on_event, runtime, sandbox), state, commands,
                                    resumed=False)
    return JobHandle(report, archive_path(settings.data_dir, job), backend.name)


async def resume_job(job: str, settings: Settings, *, llm: LLM | None = None,
                     on_event: Callable[[JobEvent], None] | None = None,
                     clock: Clock | None = None, runtime: Runtime | None = None) -> JobHandle:
    """Continue ``job`` from its last journaled transition.

    Raises:
        NotFoundError: the data directory has no such job. JobBusy: it runs elsewhere.
        WorkspaceBusy: another job works in its workspace. ArchiveError: its archive or
        journal is damaged, or it cannot be written. UsageError: its model is unusable.
        TaskFileError: its workspace is one no job may have, or it has a cost budget and a
        model without a price. GlidingError: any other error that stopped it (recorded as for
        ``run_job``).
    """
    clock = clock or SystemClock()
    check_agents(settings)
    with Archive.open(settings.data_dir, job, create=False) as archive, ExitStack() as stack:
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
            await anyio.to_thread.run_sync(check_cost_budget, task, settings, model_spec)
            _check_workspace(task, settings, create=False)
            workspace_lock = WorkspaceLock(settings.data_dir, task.workspace, job).acquire()
            stack.callback(workspace_lock.release)
            sandbox = await job_sandbox(job, task, settings, on_event)
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
            changed = await anyio.to_thread.run_sync(artifacts.changed_since, archive,
                                                     task.workspace, settings.data_dir)
            await anyio.to_thread.run_sync(_set_meta, archive, (
                ("resumes", int(archive.get_meta("resumes", 0)) + 1), ("status", "running"),
                ("stopped_by", ""), ("pipeline", list(state.roles))))
            roles = await anyio.to_thread.run_sync(load_roles)
            run = _Job(task, settings, backend, roles, clock, archive, start, on_event,
                       runtime, sandbox, workspace_changed=changed,
                       journaled=entry.n if entry is not None else 0)
            report = await _execute(run, state, commands, resumed=entry is not None)
    return JobHandle(report, archive_path(settings.data_dir, job), backend.name)


def _check_workspace(task: Task, settings: Settings, *, create: bool) -> None:
    """Refuse a workspace no job may have, or one this process cannot write (or create, with
    ``create``), before anything of the job is written.

    Raises:
        TaskFileError: no job may have it on this host (``refuse_task``). UsageError:
            it (or, not there yet, the directory it would be made in) is not writable.
    """
    real = refuse_task(task, settings)
    existing = next((p for p in (real, *real.parents) if p.exists()), None)
    if existing is None or (existing != real and not create):
        return  # resume: a workspace deleted since is made again by the first tool that writes
    if not existing.is_dir():
        raise UsageError(f"cannot create workspace {real}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        message = (f"the workspace {real} is not writable" if existing == real else
                   f"cannot create workspace {real}: {existing} is not writable")
        raise UsageError(message, hint="give the job a workspace it can write to")


def refuse_workspace(task: Task, settings: Settings) -> Path:
    """The real path of the task's workspace, unless no job may have it on this host
    (``workspace_refusal``: symlinks followed now, not only when the task file was read; a
    home's dot-directories only where ``tools.allow_home_dot_workspaces`` allows them). Reads
    the file system, creates nothing.

    Raises:
        TaskFileError: the reason, naming the task file, with what to do instead.
    """
    real = Path(os.path.realpath(task.workspace))
    data_dir = Path(os.path.realpath(settings.data_dir))
    refused = workspace_refusal(real, data_dir=data_dir, allow_home_dot_dirs=True)
    hint = WORKSPACE_HINT
    if refused is None and not settings.tools.allow_home_dot_workspaces:
        refused = workspace_refusal(real, data_dir=data_dir)
        hint = HOME_DOT_HINT
    if refused:
        raise TaskFileError(f"{task.source}: workspace: {task.workspace} is {real}, {refused}",
                            hint=hint)
    return real


def refuse_task(task: Task, settings: Settings) -> Path:
    """The real path of the task's workspace, unless this host refuses the task: its workspace
    (``refuse_workspace``) or its own MCP servers (``refuse_servers``).

    Raises:
        TaskFileError: the reason, naming the task file, with what to do instead.
    """
    real = refuse_workspace(task, settings)
    refuse_servers(task, settings)
    return real


def refuse_servers(task: Task, settings: Settings) -> None:
    """Refuse what a task's own MCP servers would take from this host: a variable of
    Gliding's environment (``pass_env``) that ``mcp.task_pass_env`` does not name (an API key
    a server with the network could send anywhere), or a URL at an address the SSRF guard of
    ``web_fetch`` refuses (loopback, private, link-local: ``tools.web.allow`` admits more; a
    host name is checked again at every connection).

    Raises:
        TaskFileError: the server and what it asked for, with where to allow it.
    """
    policy = Policy.of(settings.tools.web.allow)
    allowed = set(settings.mcp.task_pass_env)
    for name, server in task.mcp_servers.items():
        taken = [key for key in server.pass_env if key not in allowed]
        if taken:
            raise TaskFileError(
                f"{task.source}: mcp_servers.{name}.pass_env: {', '.join(taken)} may not be "
                "passed from this host's environment to a task's own server",
                hint="name the variables in mcp.task_pass_env of the host's config.yaml, or "
                     "declare the server in its mcp.servers")
        host = urlsplit(server.url).hostname if server.url is not None else None
        if host is not None:
            try:
                check_url_host(host, policy)
            except ToolError as exc:
                raise TaskFileError(
                    f"{task.source}: mcp_servers.{name}.url: {exc.message}",
                    hint="a task's own server must be at a public address; declare a local "
                         "one in the host's mcp.servers, or allow it with tools.web.allow"
                ) from None


def _discard(archive: Archive) -> None:
    """Remove the new archive of a job that never started (nothing of it ran or was kept)."""
    archive.close()
    shutil.rmtree(archive.path.parent, ignore_errors=True)


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
                            max_cycles=settings.scheduler.max_cycles,
                            max_parallel=settings.scheduler.max_parallel)


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
    sandbox: Sandbox
    workspace_changed: bool = False
    journaled: int = 0  # journal entries an earlier run wrote (the next one is journaled + 1)


async def _execute(j: _Job, state: SupervisorState, commands: list[Command], *,
                   resumed: bool) -> JobReport:
    """Run the job. Whatever stops it comes out as one GlidingError, its first real cause
    (``stop_error``), after the stop is recorded in the archive (``record_stop``);
    cancellation and KeyboardInterrupt go on as they are."""
    try:
        return await _execute_grouped(j, state, commands, resumed=resumed)
    except BaseException as exc:
        error = stop_error(exc, state.job)
        if error is None:
            raise
        if isinstance(error, ProviderUnavailable) and error.job is None:
            error = ProviderUnavailable(
                f"job {state.job} interrupted: {error.message}", job=state.job,
                reason=error.message,
                hint=f"run `gliding resume {state.job}` once the provider answers (archived "
                     "turns and tool results are replayed, not run again)")
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(record_stop, j.archive, error)
        if error is exc:
            raise
        raise error from exc


async def _execute_grouped(j: _Job, state: SupervisorState, commands: list[Command], *,
                           resumed: bool) -> JobReport:
    job, task, settings, archive = state.job, j.task, j.settings, j.archive
    async with _runtime(j.runtime, settings) as rt, open_bus(settings) as bus, \
            _job_board(rt, bus, archive, job, settings, resumed=resumed) as (store, jb):
        auth = getattr(bus, "auth", None)
        if auth is not None:  # until a dispatcher grants work, no worker speaks for the job
            auth.policy = _no_workers
        port = LocalArchive(archive, settings.data_dir)
        snapshots = fork.Snapshots(port, job, task.workspace, settings.data_dir,
                                   archive.path.parent) if settings.tools.snapshots else None
        if snapshots is not None:
            await snapshots.start()
        budget, checks, mcp, roles, tools = await parts.agent_parts(job, task, settings, j.roles,
                                                              port, rt, j.clock, j.sandbox)
        ingest = None
        if store is not None:
            writer = jb.writer if jb is not None else DirectWriter(store)
            ingest = IngestService(Ingestor(store.board, archive, job, writer), archive,
                                   task.goal)
            if resumed:
                await ingest.catch_up(store)

        async def briefing(a: Assignment) -> str:
            if ingest is not None:
                await ingest.caught_up(a)
            board = await jb.briefing(a.role) if jb is not None else None
            return await anyio.to_thread.run_sync(
                functools.partial(rt.briefing, a.role, job, task.goal, board=board,
                                  focus=f"{a.goal}\n{a.instructions}"))

        kit = JobAgents(job=job, workspace=task.workspace, llm=j.llm, roles=roles, tools=tools,
                        checks=checks, archive=port, budget=budget, bus=bus, clock=j.clock,
                        settings=settings, counter=rt.counter,
                        briefing=briefing if rt.projector is not None else None,
                        began_dir=_began_dir(archive), sandbox=j.sandbox, board=jb,
                        hooks=parts.job_hooks(job, task, settings, j.sandbox, bus),
                        approvals=parts.job_approvals(job, task, settings, port, j.clock, bus),
                        snapshots=snapshots.after if snapshots is not None else None,
                        # off the loop: the first one imports the OpenTelemetry SDK
                        tracer=await anyio.to_thread.run_sync(Tracer,
                                                              settings.traces.endpoint))
        worker = AgentWorker(kit, state.roles, concurrency=settings.scheduler.max_parallel)

        async def verify(command: Verify) -> CheckReportMsg:
            results = await checks.run(ToolContext(task.workspace, settings.tools,
                                                   sandbox=j.sandbox))
            return CheckReportMsg(job=job, role=supervisor.RUNNER, cycle=command.cycle,
                                  attempt=command.attempt, results=results,
                                  passed=all(r.passed for r in results), verified_by="runner")

        journal = ArchiveJournal(archive, after=j.journaled,
                                 fingerprint=lambda: workspace_mark(task.workspace,
                                                                    settings.data_dir))
        started = j.clock.monotonic()
        await tools.open()  # the groups acquire what they own; closed however the job ends
        for group in mcp:  # a server that did not start is news, not a failure
            if group.unavailable is not None and j.on_event is not None:
                j.on_event(JobEvent.of(job, MCPServerUnavailable(
                    server=group.server_name, reason=group.unavailable)))
        try:
            with kit.tracer.span("gliding.job", {"gliding.job.id": job,
                                                 "gen_ai.conversation.id": job}) as span:
                final = await _drive(j, state, commands, resumed, bus, worker, ingest,
                                     journal, verify, rt.access())
                span.set_attributes({"gliding.job.outcome": str(final.outcome)})
            if kit.hooks is not None:
                await kit.hooks.job_end(final.outcome)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _close(job, tools, bus, quiet=True)  # the error in flight is the news
                await anyio.to_thread.run_sync(kit.tracer.close)
            raise
        with anyio.CancelScope(shield=True):
            await _close(job, tools, bus, quiet=False)
            await anyio.to_thread.run_sync(kit.tracer.close)
        board_updates = dataclasses.asdict(jb.views.stats) if jb is not None else {}
    assert final.outcome is not None
    archived, skipped = await anyio.to_thread.run_sync(artifacts.archive_artifacts, archive,
                                                       task.workspace, final.written)
    await anyio.to_thread.run_sync(archive.set_meta, "status", final.outcome)
    checked = await anyio.to_thread.run_sync(artifacts.checked_files, task, j.start)
    report = build_report(final, artifacts=archived, wall_s=j.clock.monotonic() - started,
                          checked_files=checked, skipped_artifacts=skipped,
                          resumed=int(archive.get_meta("resumes", 0)),
                          workspace_changed=j.workspace_changed)
    calls = await anyio.to_thread.run_sync(archive.calls)
    unpriced = tuple(sorted({c.model for c in calls if not c.priced}))
    return dataclasses.replace(report, board_updates=board_updates, unpriced_models=unpriced)


async def _drive(j: _Job, state: SupervisorState, commands: list[Command], resumed: bool,
                 bus: Bus, worker: AgentWorker, ingest: IngestService | None,
                 journal: ArchiveJournal, verify: Verifier,
                 knowledge: MemoryAccess | None = None) -> SupervisorState:
    """Start ingestion, the agents and the event forwarding; run the supervisor to its end."""
    job = state.job
    agents = anyio.CancelScope()

    async def serve_agents(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        with agents:
            if j.settings.daemon.agents == "workers":  # on `gliding worker`s, over the broker
                await _serve_remote(j, bus, worker, resumed=resumed, knowledge=knowledge,
                                    task_status=task_status)
            else:
                await worker.serve(task_status=task_status)

    async with bus.subscribe(topics.events(job), max_buffer=1000) as events:
        async with anyio.create_task_group() as tg:
            forwarded = anyio.Event()  # always drained: a full buffer would stall the job
            tg.start_soon(_forward, events, j.on_event or _ignore, forwarded)
            if ingest is not None:
                await tg.start(ingest.serve, bus)
            await tg.start(serve_agents)
            if j.workspace_changed:
                await bus.publish(topics.events(job),
                                  JobEvent.of(job, WorkspaceChanged()))
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


async def _serve_remote(j: _Job, bus: Bus, worker: AgentWorker, *, resumed: bool,
                        knowledge: MemoryAccess | None = None,
                        task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    """The job's side of agents on workers: the dispatcher that hands its assignments out,
    the archive server that writes what workers without the archive file send, and, with a
    blackboard, the knowledge server that answers their recall and knowledge tools (a worker
    without a shared endpoint reaches the job's board through it). A resumed job first waits
    1.5 heartbeats for workers still holding its work to say so."""
    from gliding.daemon.dispatch import Dispatcher
    from gliding.memory.archive.bus import ArchiveServer
    from gliding.memory.recall.bus import KnowledgeServer

    archive, settings = j.archive, j.settings
    model = await anyio.to_thread.run_sync(archive.get_meta, "model_spec")
    origin = await anyio.to_thread.run_sync(os.path.realpath, settings.data_dir)
    dispatcher = Dispatcher(bus, archive.job, task_record=task_record(j.task),
                            model=str(model or j.llm.name),
                            origin=origin,
                            lease_s=settings.daemon.lease_s, briefing=worker.kit.briefing,
                            expect_s=1.5 * settings.daemon.heartbeat_s if resumed else 0.0,
                            coherence_lease_s=settings.memory.coherence.lease_s
                            if worker.kit.board is not None else 0.0,
                            trace=worker.kit.tracer.traceparent())  # the job's span is current
    server = ArchiveServer(bus, LocalArchive(archive, settings.data_dir))
    auth = getattr(bus, "auth", None)
    if auth is not None:  # from now on, workers may say what the dispatcher grants them
        auth.policy = dispatcher.policy
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        if knowledge is not None:
            await tg.start(KnowledgeServer(bus, archive.job, knowledge).serve)
        await tg.start(dispatcher.serve)
        task_status.started()


def _no_workers(topic: str, sender: str, message: Any) -> str | None:
    return "this job's agents run in its own process"


def check_agents(settings: Settings) -> None:
    """Refuse agents on workers without a broker to reach them through.

    Raises:
        UsageError: ``daemon.agents`` is ``workers`` and ``bus.url`` is not set.
    """
    if settings.daemon.agents == "workers" and settings.bus.url is None:
        raise UsageError("daemon.agents is 'workers' but bus.url names no MQTT broker",
                         hint="set bus.url (e.g. mqtt://127.0.0.1:1883) and start "
                              "`gliding worker --broker URL`, or set daemon.agents: local")


async def _close(job: str, tools: Any, bus: Bus, *, quiet: bool) -> None:
    """Close the tool groups, then the bus, each even when the other fails. ``quiet``: an
    error is on its way out already, so a failure here is logged, not raised over it."""

    async def teardown_point() -> None:  # a crash here must not keep anything below open
        crash_point("teardown")

    first: BaseException | None = None
    for close in (teardown_point, tools.aclose, bus.aclose):
        try:
            await close()
        except Exception as exc:  # noqa: BLE001 - each closes even when another fails
            if quiet:
                log.warning("job.close.failed", job=job, error=str(exc)[:300])
            elif first is None:
                first = exc
    if first is not None:
        raise first


@asynccontextmanager
async def _job_board(rt: Runtime, bus: Bus, archive: Archive, job: str, settings: Settings, *,
                     resumed: bool) -> AsyncIterator[tuple[JobNodeStore | None, JobBoard | None]]:
    """The job's node store, where every board write ends and which the projector and long-term
    memory listen to, and its coherent blackboard (``daemon/board.py``; None when coherence is
    off); both None without a board. A resumed job's directory waits out old leases only when
    workers (other processes) may hold them."""
    if rt.knowledge is None or rt.projector is None:
        yield None, None
        return
    store = JobNodeStore(rt.knowledge.board, archive, job)
    store.listen(rt.projector.written)
    store.listen(rt.knowledge.observe)
    remote = resumed and settings.daemon.agents == "workers"
    async with job_board(bus, store, settings, rt.counter.count, resumed=remote) as jb:
        yield store, jb


@asynccontextmanager
async def _runtime(given: Runtime | None, settings: Settings) -> AsyncIterator[Runtime]:
    if given is not None:
        yield given
        return
    async with Runtime.open(settings) as runtime:
        yield runtime


async def job_sandbox(job: str, task: Task, settings: Settings,
                   on_event: Callable[[JobEvent], None] | None) -> Sandbox:
    """The sandbox of the job's commands, after checking it can run (the data directory is
    hidden from them and from the file tools; the git directory the workspace has now is
    read-only to both unless the task says ``git_writes``), with the toolchain this process's
    PATH and VIRTUAL_ENV and the task's venv and mounts give it; the first event says what
    confines them, the next ones what of the toolchain was left out.

    Raises:
        SandboxError: bubblewrap cannot run here and tools.sandbox is not off.
        TaskFileError: the task's venv or mounts are not allowed on this host, or are missing.
    """
    toolchain = await anyio.to_thread.run_sync(functools.partial(
        resolve_toolchain, settings.tools, task, data_dir=settings.data_dir,
        environ=dict(os.environ)))
    readonly = () if task.git_writes else await anyio.to_thread.run_sync(
        git_paths, task.workspace)
    sandbox = Sandbox.of(settings.tools, network=task.network, hidden=(settings.data_dir,),
                         toolchain=toolchain, readonly=readonly)
    await anyio.to_thread.run_sync(sandbox.require)
    if on_event is not None:
        on_event(JobEvent.of(job, JobSandbox(confined=sandbox.confined,
                                                    line=sandbox.describe())))
        for left in toolchain.refused if sandbox.confined else ():
            on_event(JobEvent.of(job, ToolchainRefused(
                path=str(left.path), what=left.what, why=left.why)))
    return sandbox


def _began_dir(archive: Archive) -> Path:
    path = archive.path.parent / "began"
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"cannot create {path}: {exc}") from exc
    return path


def _ignore(event: JobEvent) -> None:
    return None


async def _forward(events: Any, on_event: Callable[[JobEvent], None],
                   done: anyio.Event) -> None:
    while True:
        _topic, event = await events.receive()
        on_event(event)
        if event.event == JobFinished.name:
            done.set()
