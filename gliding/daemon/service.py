"""The daemon's job service: the jobs of one data directory, queued, run and watched.

    submit    validate the task text (``load_task_text``), its tool groups and its model
              first; a bad one is a UsageError and nothing is queued
    dispatch  start queued jobs oldest first (those to resume before new ones), at most
              ``daemon.max_jobs`` at once and never two in one workspace, in one task group,
              all on the process's one ``Runtime``, through ``compose.run_job(job_id=...)`` or,
              once a job has an archive, ``compose.resume_job``
    events    every event of a job, its run's and the daemon's own (``gliding.core.events``),
              goes to the job's event log (``gliding.daemon.events``): numbered, written, then
              streamed to its subscribers
    cancel    a queued job never starts; a running one has its cancel scope cancelled: it
              stops at its next await, its archive says ``interrupted`` (``stopped_by``: the
              cancel request), its queue state ``cancelled``, and no restart resumes it;
              ``resume`` (or ``gliding resume JOB`` without a daemon) continues it
    resume    an interrupted or cancelled job is queued again; its run resumes its archive
    startup   jobs the queue still has running (the daemon was killed) are queued again
              ahead of the others and resumed from their journals, unless their archive says
              they ended (the queue could not be written then: ``reconcile.ended_in_archive``);
              ``cancelling`` ones become ``cancelled``; a damaged queue file is moved aside and
              the queue rebuilt from the archives (``reconcile.open_queue``, one warning)
    disk full a job's ending the queue cannot take is kept in memory, shown by ``get`` and
              ``jobs``, and written once the queue takes writes again (``_settle_later``)
    schedules recurring jobs (``schedule_runner``): a loop in the service's task group that
              submits each due run as ``submit`` does; kept in ``daemon/schedules.sqlite3``
    shutdown  ``stop``: no new submissions, every running job cancelled at its next await
              (archive ``interrupted``, queue state still ``running``), so the next start
              resumes it

Reading an archive (``archived_status``, ``read_page``) is ``gliding.daemon.reading``'s, shared
with the MCP server; the event log is ``gliding.daemon.events``'; the files (queue, events) are
``gliding.daemon.queue``'s. Blocking work (the queue, archives, event files) runs on worker
threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gliding.agents import approvals
from gliding.agents.steer import post_steer
from gliding.bus.messages import JobEvent
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task_text, task_from_record
from gliding.core import events
from gliding.core.ids import new_job_id
from gliding.core.iri import job_iri, parse_iri
from gliding.core.text import clip, error_line
from gliding.daemon import fork
from gliding.daemon import queue as q
from gliding.daemon.compose import (
    JobHandle,
    refuse_task,
    refuse_workspace,
    resume_job,
    run_job,
)
from gliding.daemon.events import EventLog
from gliding.daemon.jobs import CANCELLED_BY, PAUSED_BY, SUSPENDED_BY, record_stop
from gliding.daemon.jobs import FINISHED as OUTCOMES
from gliding.daemon.models import build_llm, check_cost_budget, check_model_file
from gliding.daemon.queue import JobQueue, JobStateError, QueuedJob
from gliding.daemon.reading import archived_status, job_record, read_page
from gliding.daemon.reconcile import Unsettled, ended_in_archive, open_queue
from gliding.daemon.runtime import Runtime
from gliding.daemon.schedule_runner import ScheduleRunner
from gliding.errors import GlidingError, IRIError, NotFoundError, TaskFileError, UsageError
from gliding.memory.archive.store import Archive, archive_path
from gliding.memory.board.blackboard import Blackboard
from gliding.tools.groups import GROUP_NAMES, known_group

log = structlog.get_logger("gliding.daemon")

MAX_NAME_CHARS = 200  # a submitted task file's name
MAX_OFFSET = 2**53 - 1  # an offset or event number past this is refused, not tried (a JSON
# number larger still loses its precision; 10**30 overflowed SQLite, 10**5000 str())
STOP_GRACE_S = 60.0  # how long stop waits for cancelled jobs to reach their safe point
QUEUE_RETRY_S = 1.0  # a queue read that failed (disk full, locked) is tried again after this


class ServiceStopping(UsageError):
    """The daemon is shutting down: it takes no new work."""

    code = "daemon.stopping"


@dataclass(frozen=True)
class CheckedTask:
    """A task file ``check_task`` found usable, as ``submit`` queues it."""

    name: str
    base_dir: Path
    model: str | None  # with a relative scripted: replies file made absolute
    task: Task


@dataclass
class _Active:
    """A job this daemon runs now."""

    entry: QueuedJob
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reason: str = ""  # "cancel", "pause" or "shutdown" once its scope is cancelled

    def cancel(self, reason: str, *, override: tuple[str, ...] = ()) -> None:
        """Stop the run for ``reason``; the first reason stands, unless it is one of
        ``override`` (a cancel after an interrupt: the job ends cancelled, not paused)."""
        self.reason = reason if not self.reason or self.reason in override else self.reason
        self.scope.cancel()


class JobService:
    """The jobs of ``settings.data_dir``; serve with ``async with service.running():``.

    Every method raises GlidingError when it fails: UsageError (a bad task, model or
    argument), NotFoundError (no such job), JobStateError (not in a state for it),
    ServiceStopping, ArchiveError (the queue or an archive cannot be used).
    """

    def __init__(self, settings: Settings, *, base_dir: Path | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir
        self.base_dir = (base_dir or Path.cwd()).resolve()
        self.max_jobs = settings.daemon.max_jobs
        self._now = now
        self._queue: JobQueue | None = None
        self._runtime: Runtime | None = None
        self._tg: TaskGroup | None = None
        self._active: dict[str, _Active] = {}
        self._steering = anyio.Lock()  # one steer written at a time: they are numbered
        self._forking = anyio.Lock()  # one fork written at a time
        self.events_log = EventLog(self.data_dir, now)
        self._wake_dispatch = anyio.Event()
        self._jobs_done = anyio.Event()
        self._unsettled: dict[str, Unsettled] = {}  # endings the queue could not take yet
        self._wake_settler = anyio.Event()
        self.stopping = False
        self.schedules = ScheduleRunner(self.data_dir, self, now)  # recurring jobs

    # -- serving ------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[JobService]:
        """Open the queue and the runtime, recover what a killed daemon left running, and
        run jobs until the context ends; then ``stop`` and wait for the jobs to reach a safe
        point (at most STOP_GRACE_S), write the last events and close everything.

        Raises:
            ArchiveError: the queue cannot be opened. GlidingError: the runtime cannot.
        """
        opened, rebuilt = await anyio.to_thread.run_sync(open_queue, self.data_dir, self._now())
        self._queue = opened
        if rebuilt is not None:
            log.warning("daemon.queue.rebuilt", **rebuilt.fields())
        try:
            await anyio.to_thread.run_sync(partial(
                (self.data_dir / q.EVENTS_DIR).mkdir, parents=True, exist_ok=True))
            await self._recover()
            await self.schedules.open()
            async with Runtime.open(self.settings) as runtime:
                self._runtime = runtime
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self.events_log.write,
                                  lambda: self.stopping and not self._active)
                    tg.start_soon(self._dispatch)
                    tg.start_soon(self._settle_later)
                    tg.start_soon(self.schedules.run)
                    try:
                        yield self
                    finally:
                        with anyio.CancelScope(shield=True):
                            self.stop()
                            with anyio.move_on_after(STOP_GRACE_S):
                                while self._active:
                                    await self._jobs_done.wait()
                            tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.events_log.drain()
                    self.events_log.close_subscribers(None)
                    await self._settle_pending()  # a last try; else the next start does it
        finally:
            self._runtime = None
            queue, self._queue = self._queue, None
            with anyio.CancelScope(shield=True):
                await self.schedules.close()
                await anyio.to_thread.run_sync(queue.close)

    def stop(self) -> None:
        """Take no new work; cancel every running job (it resumes at the next start)."""
        self.stopping = True
        for active in list(self._active.values()):
            active.cancel("shutdown")
        self._wake_dispatch.set()
        self.schedules.wake()
        self.events_log.wake()
        self.events_log.close_subscribers(None)  # the streams end now: the daemon goes away

    @property
    def queue(self) -> JobQueue:
        if self._queue is None:
            raise UsageError("the job service is not running (JobService.running)")
        return self._queue

    async def _q(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))

    # -- submitting ---------------------------------------------------------------------------

    async def check_task(self, text: str, name: str = "task.yaml", *,
                         model: str | None = None, base_dir: str | None = None) -> CheckedTask:
        """What ``submit`` would queue, once the task, its tool groups and its model are known
        to be usable (a schedule checks its task this way when it is added).

        Raises:
            TaskFileError: the task does not validate, its workspace is one no job may have
                on this host (``refuse_task``), or it has a cost budget and a model
                without a price (``check_cost_budget``). UsageError: a bad name, base_dir or
                model (or replies file).
        """
        name = _task_name(name)
        base = self.base_dir
        if base_dir is not None:
            base = Path(base_dir)
            if "\x00" in base_dir:
                raise UsageError("base_dir has a NUL byte: no directory has one",
                                 hint="the directory of the task file, e.g. /home/me/project")
            if not base.is_absolute():
                raise UsageError(f"base_dir must be an absolute path, got {base_dir!r}",
                                 hint="the directory of the task file, e.g. /home/me/project")
        task = await anyio.to_thread.run_sync(load_task_text, text, name, base)
        await anyio.to_thread.run_sync(refuse_task, task, self.settings)  # this host's
        for role, groups in task.tool_groups.items():
            unknown = [g for g in groups if not known_group(g)]
            if unknown:
                raise TaskFileError(
                    f"{name}: tool_groups.{role}: unknown tool group "
                    f"{', '.join(repr(g) for g in unknown)}",
                    hint=f"tool groups: {', '.join(GROUP_NAMES)}, or mcp_<server>")
        model = _model_spec(model, base)
        chosen = model or task.model or self.settings.llm.model
        await anyio.to_thread.run_sync(build_llm, chosen, self.settings)  # refused now
        await anyio.to_thread.run_sync(check_model_file, chosen)
        await anyio.to_thread.run_sync(check_cost_budget, task, self.settings, chosen)
        return CheckedTask(name, base, model, task)

    async def submit(self, text: str, name: str = "task.yaml", *, model: str | None = None,
                     base_dir: str | None = None) -> QueuedJob:
        """Queue the task file ``text`` (named ``name`` in messages; its relative workspace
        and a relative ``scripted:`` replies file taken from ``base_dir``, an absolute path,
        default the daemon's working directory) once ``check_task`` finds it usable.

        Raises:
            As ``check_task``. ServiceStopping. ArchiveError.
        """
        if self.stopping:
            raise ServiceStopping("the daemon is stopping: it takes no new jobs",
                                  hint="submit again once it runs again")
        checked = await self.check_task(text, name, model=model, base_dir=base_dir)
        name, base, model, task = checked.name, checked.base_dir, checked.model, checked.task
        for _ in range(8):  # a job id drawn twice in one second: draw again
            try:
                entry: QueuedJob = await self._q(
                    self.queue.add, new_job_id(self._now()), name=name, task=text,
                    base_dir=str(base), workspace=str(task.workspace), goal=task.goal,
                    model=model, now=self._now())
                break
            except JobStateError:
                continue
        else:
            raise UsageError("could not draw a free job id", hint="submit again")
        await self.events_log.emit(entry.job, events.JobQueued(
            name_=name, goal=clip(task.goal, 300), model=model))
        self._wake_dispatch.set()
        return entry

    async def fork(self, job: str, at: str, workspace: str | None = None
                   ) -> tuple[QueuedJob, dict[str, Any]]:
        """Queue a new job made from ``job`` up to its step ``at`` (``daemon/fork.py``), its
        workspace restored into ``workspace`` (absolute; default ``<job's workspace>-fork-
        <the new job's last 6 characters>``): it replays the steps up to ``at`` and runs on
        from there. Returns the new job and what the fork holds.

        Raises:
            UsageError: no such step, no snapshot of its workspace, a workspace that is not a
                new or empty directory (or one no job may have here); nothing is written then.
            NotFoundError, IRIError, ServiceStopping, ArchiveError.
        """
        if self.stopping:
            raise ServiceStopping("the daemon is stopping: it takes no new jobs",
                                  hint="fork once it runs again")
        old = await self.get(job)
        fork.step_name(at, job)  # a bad step is refused before anything is looked at
        new_id = new_job_id(self._now())
        while archive_path(self.data_dir, new_id).exists():  # drawn twice in one second
            await anyio.sleep(0.01)
            new_id = new_job_id(self._now())
        if workspace is not None and ("\x00" in workspace or not Path(workspace).is_absolute()):
            raise UsageError(f"the fork's workspace must be an absolute path, got {workspace!r}")
        dest = Path(workspace) if workspace else Path(f"{old.workspace}-fork-{new_id[-6:]}")

        existed = dest.exists()
        was_empty = existed and dest.is_dir() and not dest.is_symlink() and not any(
            dest.iterdir())

        def write() -> dict[str, Any]:
            with Archive.open(self.data_dir, job, create=False) as before:
                task = task_from_record(before.get_meta("task_record") or {})
                refuse_workspace(dataclasses.replace(task, workspace=dest), self.settings)
                with Archive.open(self.data_dir, new_id, create=True) as after:
                    return fork.fork_archive(before, after, at, dest, self.data_dir)

        def undo() -> None:  # nothing of a fork that failed is left
            shutil.rmtree(archive_path(self.data_dir, new_id).parent, ignore_errors=True)
            if not existed:
                shutil.rmtree(dest, ignore_errors=True)
            elif was_empty:  # empty it again
                for child in dest.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)

        try:
            async with self._forking:  # one fork written at a time
                held = await anyio.to_thread.run_sync(write)
            entry: QueuedJob = await self._q(
                self.queue.add, new_id, name=old.name, task=old.task, base_dir=old.base_dir,
                workspace=str(dest), goal=old.goal, model=old.model, now=self._now())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(undo)
            raise
        await self.events_log.emit(new_id, events.JobQueued(
            name_=old.name, goal=clip(old.goal, 300), model=old.model, resume=True))
        log.info("daemon.job.forked", job=new_id, forked_from=job, step=held["step"])
        self._wake_dispatch.set()
        return entry, held

    # -- reading ------------------------------------------------------------------------------

    async def get(self, job: str) -> QueuedJob:
        """Raises: IRIError: a malformed job id. NotFoundError: no such job."""
        job_iri(job)
        entry: QueuedJob | None = await self._q(self.queue.get, job)
        if entry is None:
            raise NotFoundError(f"no job {job!r} in the daemon's queue ({self.data_dir})",
                                hint="gliding jobs lists the jobs")
        return self._as_it_stands(entry)

    def _as_it_stands(self, entry: QueuedJob) -> QueuedJob:
        """``entry`` with the ending the queue could not take yet, if it has one."""
        ending = self._unsettled.get(entry.job)
        return entry if ending is None else ending.view(entry)

    async def jobs(self, limit: int = 50, offset: int = 0) -> tuple[int, list[QueuedJob]]:
        """How many jobs the queue has, and ``limit`` of them from ``offset``, newest first."""
        total: int = await self._q(self.queue.count)
        found: list[QueuedJob] = await self._q(self.queue.newest, limit, offset)
        return total, [self._as_it_stands(entry) for entry in found]

    async def status(self, job: str) -> dict[str, Any]:
        """The job as the queue has it, with its progress from its archive (turns per role,
        tokens, cost) once it has one."""
        entry = await self.get(job)
        archived = await anyio.to_thread.run_sync(archived_status, self.data_dir, job)
        out = job_record(entry)
        out["progress"] = None if archived is None else {
            k: archived[k] for k in ("turns", "turns_by_role", "last_turn", "tokens",
                                     "resumes")} | {"archive_status": archived["status"]}
        out["archive"] = None if archived is None else archived["archive"]
        # a job of an earlier daemon too
        out["events"] = (await self.events_log.of(job)).next_seq - 1
        out["approvals_waiting"] = [r for r in await anyio.to_thread.run_sync(
            self._approvals, job) if r["answer"] is None]
        return out

    async def events(self, job: str, *, after: int = 0, follow: bool = True
                     ) -> AsyncIterator[dict[str, Any]]:
        """The job's events numbered above ``after``, and with ``follow`` those to come
        (``EventLog.stream``; none to come once the daemon stops).

        Raises (before the first event): NotFoundError, IRIError.
        """
        await self.get(job)
        async for record in self.events_log.stream(job, after=after,
                                                   follow=follow and not self.stopping):
            yield record

    def running_jobs(self) -> list[str]:
        """The jobs this daemon runs right now."""
        return list(self._active)

    def blackboard(self) -> Blackboard | None:
        """The process's blackboard (L2), shared by its jobs; None when it could not be
        opened, or before ``running``."""
        return self._runtime.board if self._runtime is not None else None

    async def read(self, iri: str, offset: int, limit: int) -> dict[str, Any]:
        """Bytes ``offset`` .. ``offset + limit`` of an archived item (``read_page``).

        Raises:
            IRIError: not an item's IRI. NotFoundError: no such job or item. UsageError:
                ``offset`` is past its end. ArchiveError.
        """
        parsed = parse_iri(iri.strip())
        if parsed.kind is None:
            raise IRIError(f"{iri} names a job, not an archived item",
                           hint="add the item, e.g. /artifact/hello.txt or /turn/DA/1")
        return await anyio.to_thread.run_sync(read_page, self.data_dir, str(parsed), offset,
                                              limit)

    # -- cancel and resume --------------------------------------------------------------------

    async def cancel(self, job: str) -> QueuedJob:
        """Cancel ``job``: queued, it never starts; running, it stops at its next await.

        Raises:
            JobStateError: it finished or was cancelled already. NotFoundError, IRIError.
            ArchiveError: the queue cannot take the job's ending yet (the disk is full).
        """
        await self._settle_now(job)
        for _ in range(8):  # the dispatcher may start it meanwhile: look again
            entry = await self.get(job)
            try:
                if entry.state == q.QUEUED and job not in self._active:
                    entry = await self._q(self.queue.move, job, q.CANCELLED, now=self._now(),
                                          allowed=(q.QUEUED,), error="cancelled before it ran")
                    await self.events_log.emit(job, events.JobCancelled(ran=False))
                    self.events_log.close_subscribers(job)
                    return entry
                if entry.state in (q.QUEUED, q.RUNNING) and job in self._active:
                    if entry.state == q.RUNNING:
                        entry = await self._q(self.queue.move, job, q.CANCELLING,
                                              allowed=(q.RUNNING,))
                    if job in self._active:  # a cancel overrides a pause on its way
                        self._active[job].cancel("cancel", override=("pause",))
                    return entry
                if entry.state == q.CANCELLING:
                    return entry
                if entry.state == q.PAUSED:
                    entry = await self._q(self.queue.move, job, q.CANCELLED, now=self._now(),
                                          allowed=(q.PAUSED,), error="cancelled while paused")
                    await anyio.to_thread.run_sync(_record_stop, self.data_dir, job,
                                                   CANCELLED_BY)  # what a rebuild reads
                    await self.events_log.emit(job, events.JobCancelled(ran=True))
                    self.events_log.close_subscribers(job)
                    return entry
                if entry.state == q.INTERRUPTED:
                    entry = await self._q(self.queue.move, job, q.CANCELLED, now=self._now(),
                                          allowed=(q.INTERRUPTED,), error=entry.error)
                    return entry
            except JobStateError:
                await anyio.sleep(0.01)
                continue
            raise JobStateError(f"job {job} is {entry.state}: there is nothing to cancel",
                                hint="only queued or running jobs can be cancelled")
        raise JobStateError(f"job {job} changed state while it was being cancelled",
                            hint="look at its status and ask again")

    async def interrupt(self, job: str) -> QueuedJob:
        """Pause a running ``job``: its model or tool call in progress stops now (a tool call
        cut off is reported to the model as interrupted when the job runs on), and it stays
        ``paused`` until a steer or ``resume`` queues it again.

        Raises:
            JobStateError: it is not running. NotFoundError, IRIError.
        """
        await self._settle_now(job)
        entry = await self.get(job)
        active = self._active.get(job)
        if entry.state != q.RUNNING or active is None:
            raise JobStateError(f"job {job} is {entry.state}: only a running job can be "
                                "interrupted", hint="cancel a queued job instead"
                                if entry.state == q.QUEUED else None)
        active.cancel("pause")
        log.info("daemon.job.interrupted", job=job)
        return entry

    async def steer(self, job: str, message: str) -> str:
        """Archive ``message`` as ``job``'s next steer (``agents/steer.py``): one of its
        sessions appends it before its next model call. Returns its IRI.

        Raises:
            JobStateError: the job is not running. UsageError: the message is blank or too
                long, or the job took its last steer. NotFoundError, IRIError, ArchiveError.
        """
        entry = await self.get(job)
        if entry.state not in (q.RUNNING, q.PAUSED):
            raise JobStateError(f"job {job} is {entry.state}: only a running or paused job "
                                "can be steered", hint="resume it first (gliding resume JOB)"
                                if entry.state in (q.INTERRUPTED, q.CANCELLED) else None)

        def write() -> str:
            with Archive.open(self.data_dir, job, create=False) as archive:
                return post_steer(archive, message)

        async with self._steering:
            iri = await anyio.to_thread.run_sync(write)
        log.info("daemon.job.steered", job=job, steer=iri)
        if entry.state == q.PAUSED:  # a steer runs a paused job on, with the message
            with contextlib.suppress(JobStateError):  # resumed meanwhile
                await self.resume(job)
        return iri

    async def approvals(self, job: str) -> list[dict[str, Any]]:
        """The job's approval requests, oldest first, each with its answer (None: waiting);
        [] for a job that never asked (or has no archive yet).

        Raises:
            NotFoundError, IRIError, ArchiveError.
        """
        await self.get(job)
        return await anyio.to_thread.run_sync(self._approvals, job)

    def _approvals(self, job: str) -> list[dict[str, Any]]:
        try:
            with Archive.open(self.data_dir, job, create=False) as archive:
                return approvals.listed(archive)
        except NotFoundError:  # no archive yet
            return []

    async def answer(self, job: str, approval: str | None, *, approve: bool, note: str = "",
                     digest: str | None = None) -> dict[str, Any]:
        """Approve or deny a call of ``job`` waiting for a person (``agents/approvals.py``):
        ``approval`` names it (None: the only one waiting); ``digest``, when given, must be
        the one of the call the person saw. The job need not run: a job stopped while it
        waited finds the answer when it resumes. Returns the request with its answer.

        Raises:
            JobStateError: the job is finished, the request was answered already, or the
                digest differs. UsageError: no ``approval`` while none or several wait, or the
                note is too long. NotFoundError, IRIError, ArchiveError.
        """
        entry = await self.get(job)
        if entry.state == q.FINISHED:
            raise JobStateError(f"job {job} is {entry.state}: nothing of it waits any more")

        def write() -> dict[str, Any]:
            with Archive.open(self.data_dir, job, create=False) as archive:
                return approvals.answer(archive, approval, approve=approve, note=note,
                                        bound=digest)

        found = await anyio.to_thread.run_sync(write)  # the archive keeps the first answer
        log.info("daemon.job.approval.answered", job=job, approval=found["approval"],
                 approved=approve)
        return found

    async def resume(self, job: str) -> QueuedJob:
        """Queue an interrupted or cancelled job again; its run resumes its archive.

        Raises:
            JobStateError: it is queued, running or finished. NotFoundError. ServiceStopping.
            ArchiveError: the queue cannot take the job's ending yet (the disk is full).
        """
        if self.stopping:
            raise ServiceStopping("the daemon is stopping: it takes no new work",
                                  hint="resume the job once the daemon runs again")
        await self.get(job)
        await self._settle_now(job)
        entry: QueuedJob = await self._q(self.queue.move, job, q.QUEUED,
                                         allowed=(q.INTERRUPTED, q.CANCELLED, q.PAUSED))
        await self.events_log.emit(job, events.JobQueued(resume=True))
        self._wake_dispatch.set()
        return entry

    # -- running ------------------------------------------------------------------------------

    async def _recover(self) -> None:
        """Queue again what a killed daemon left running, unless its archive says it ended
        (the queue could not be written then, e.g. on a full disk); finish what it was
        cancelling."""
        for entry in await self._q(self.queue.in_state, q.RUNNING, q.CANCELLING):
            if entry.state == q.CANCELLING:
                await self._q(self.queue.move, entry.job, q.CANCELLED, now=self._now(),
                              error="cancelled (the daemon stopped while cancelling it)")
                await anyio.to_thread.run_sync(_record_stop, self.data_dir, entry.job,
                                               CANCELLED_BY)
                await self.events_log.emit(entry.job, events.JobCancelled(ran=True))
            elif ended := await anyio.to_thread.run_sync(ended_in_archive, self.data_dir,
                                                         entry):
                state, outcome, error = ended
                await self._q(self.queue.move, entry.job, state, now=self._now(),
                              outcome=outcome, error=error)
                log.warning("daemon.job.reconciled", job=entry.job, state=state,
                            outcome=outcome, error=error,
                            why="its archive says it ended; the queue did not")
            else:
                await self._q(self.queue.move, entry.job, q.QUEUED)
                log.info("daemon.job.recovered", job=entry.job, runs=entry.runs)
        for entry in await self._q(self.queue.in_state, q.QUEUED):
            (await self.events_log.of(entry.job)).open = True  # its streams follow what comes

    async def _dispatch(self) -> None:
        while not self.stopping:
            self._wake_dispatch = anyio.Event()
            free = self.max_jobs - len(self._active)
            if free > 0:
                busy = {a.entry.workspace for a in self._active.values()}
                try:
                    pending: list[QueuedJob] = await self._q(self.queue.pending)
                except GlidingError as exc:  # the queue cannot be read now: try again soon
                    log.warning("daemon.queue.unreadable", error=exc.message)
                    with anyio.move_on_after(QUEUE_RETRY_S):
                        await self._wake_dispatch.wait()
                    continue
                for entry in pending:
                    if free <= 0 or self.stopping:
                        break
                    if entry.job in self._active or entry.workspace in busy:
                        continue  # one job a workspace: it waits for the one running there
                    active = _Active(entry)
                    self._active[entry.job] = active  # before the await: cancel finds it
                    try:
                        active.entry = await self._q(self.queue.move, entry.job, q.RUNNING,
                                                     now=self._now(), allowed=(q.QUEUED,))
                    except (JobStateError, NotFoundError):
                        del self._active[entry.job]  # cancelled meanwhile
                        continue
                    except GlidingError as exc:
                        del self._active[entry.job]
                        log.warning("daemon.dispatch.failed", job=entry.job,
                                    error=exc.message)
                        continue
                    busy.add(entry.workspace)
                    free -= 1
                    assert self._tg is not None
                    self._tg.start_soon(self._run, active)
            await self._wake_dispatch.wait()

    async def _run(self, active: _Active) -> None:
        entry = active.entry
        job = entry.job
        handle: JobHandle | None = None
        error: GlidingError | None = None
        try:
            log_ = await self.events_log.of(job)
            with active.scope:
                self.events_log.record(log_, events.JobDispatched.name, events.event_data(
                    events.JobDispatched(run=entry.runs, running=len(self._active))))
                handle = await self._execute(entry, partial(self.events_log.on_event, log_))
        except GlidingError as exc:
            error = exc
        except Exception as exc:  # a bug in one job must stop neither the daemon nor the others
            log.exception("daemon.job.crashed", job=job)
            error = GlidingError(f"the job stopped on an internal error: {type(exc).__name__}: "
                                 f"{clip(str(exc), 300)}")
        with anyio.CancelScope(shield=True):
            try:
                await self._settle(active, handle, error)
            except GlidingError as exc:
                log.warning("daemon.job.unsettled", job=job, error=exc.message)
            finally:
                self._active.pop(job, None)
                self._jobs_done.set()
                self._jobs_done = anyio.Event()
                self._wake_dispatch.set()
                self.events_log.wake()

    async def _execute(self, entry: QueuedJob, on_event: Callable[[JobEvent], None]
                       ) -> JobHandle:
        """Resume the job from its archive when it has one that was set up; else start it."""
        if await anyio.to_thread.run_sync(_set_up, self.data_dir, entry.job):
            return await resume_job(entry.job, self.settings, on_event=on_event,
                                    runtime=self._runtime)
        task = await anyio.to_thread.run_sync(load_task_text, entry.task, entry.name,
                                              Path(entry.base_dir))
        return await run_job(task, self.settings, model=entry.model, on_event=on_event,
                             job_id=entry.job, runtime=self._runtime)

    async def _settle(self, active: _Active, handle: JobHandle | None,
                      error: GlidingError | None) -> None:
        """Record how the run ended: in the queue, the archive (a stop) and the events."""
        job, now = active.entry.job, self._now()
        reason = active.reason
        if reason == "pause" and handle is None:
            try:
                await self._end(job, Unsettled(q.PAUSED, now, error=PAUSED_BY, stop=PAUSED_BY))
            except JobStateError:  # a cancel came while the pause took (cancelling): it wins
                reason = "cancel"
        if handle is not None:
            outcome = handle.report.outcome if handle.report else handle.finished_before
            await self._end(job, Unsettled(q.FINISHED, now, outcome=outcome))
            if handle.report is None:  # resumed a job that had finished: say so
                await self.events_log.emit(job, events.JobFinished(outcome=outcome))
        elif reason == "cancel":
            await self._end(job, Unsettled(q.CANCELLED, now, error="cancelled while it ran"))
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, CANCELLED_BY)
            await self.events_log.emit(job, events.JobCancelled(ran=True))
        elif reason == "pause":  # paused in the queue above
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, PAUSED_BY)
            await self.events_log.emit(job, events.JobPaused(reason=PAUSED_BY))
        elif reason == "shutdown":
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, SUSPENDED_BY)
            await self.events_log.emit(job, events.JobSuspended(reason="the daemon stopped"))
            return  # queue state stays running: the next start resumes it
        else:
            assert error is not None
            why = error_line(error.message)
            await self._end(job, Unsettled(q.INTERRUPTED, now, error=why, stop=why))
            await self.events_log.emit(job, events.JobStopped(
                code=error.code, error=error_line(error.message), hint=error.hint))
        self.events_log.close_subscribers(job)

    async def _end(self, job: str, ending: Unsettled) -> None:
        """Move the job's queue entry to its ending; when the queue cannot take it (the disk
        is full), keep the ending (``get`` and ``jobs`` show it) for ``_settle_later``."""
        try:
            await self._q(ending.write, self.queue, job)
        except (JobStateError, NotFoundError):
            raise
        except GlidingError as exc:
            self._unsettled[job] = ending
            log.warning("daemon.job.unsettled", job=job, state=ending.state,
                        error=exc.message, then="written once the queue takes writes again")
            self._wake_settler.set()

    async def _settle_now(self, job: str) -> None:
        """Write the job's kept ending to the queue (and its stop to its archive, which may
        have failed as well), if it has one.

        Raises:
            ArchiveError: the queue still cannot take it.
        """
        ending = self._unsettled.get(job)
        if ending is None:
            return
        with contextlib.suppress(JobStateError, NotFoundError):  # out of running already
            await self._q(ending.write, self.queue, job)
        self._unsettled.pop(job, None)
        log.info("daemon.job.settled", job=job, state=ending.state)
        if ending.stop is not None:
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, ending.stop)

    async def _settle_pending(self) -> None:
        """Try to write every kept ending once; those the queue still refuses stay kept."""
        for job in list(self._unsettled):
            try:
                await self._settle_now(job)
            except GlidingError:
                return  # the queue still takes no writes

    async def _settle_later(self) -> None:
        """Every QUEUE_RETRY_S while endings are kept, try to write them."""
        while True:
            await self._wake_settler.wait()
            self._wake_settler = anyio.Event()
            while self._unsettled:
                await anyio.sleep(QUEUE_RETRY_S)
                await self._settle_pending()


def _task_name(name: str) -> str:
    """A submitted task's name: a file name (its directory dropped), printable, bounded."""
    base = os.path.basename(str(name or "").strip()) or "task.yaml"
    if len(base) > MAX_NAME_CHARS or any(not ch.isprintable() for ch in base):
        raise UsageError("the task's name must be a file name of printable characters, at "
                         f"most {MAX_NAME_CHARS}", hint='e.g. "name": "task.yaml"')
    return base


def _model_spec(model: str | None, base: Path) -> str | None:
    """``model`` with a relative ``scripted:`` replies file made absolute from ``base``."""
    if model is None or not model.strip():
        return None
    model = model.strip()
    if model.startswith("scripted:"):
        path = Path(model.split(":", 1)[1]).expanduser()
        if path.parts and not path.is_absolute():
            return f"scripted:{base / path}"
    return model


def _set_up(data_dir: Path, job: str) -> bool:
    """Whether the job has an archive with its task recorded (so it is resumed)."""
    if not archive_path(data_dir, job).is_file():
        return False
    try:
        with Archive.open(data_dir, job, create=False) as archive:
            return bool(archive.get_meta("task_record"))
    except GlidingError:
        return True  # resume_job says what is wrong with it


def _record_stop(data_dir: Path, job: str, why: str) -> None:
    """Write in the job's archive (if it has one) that it stopped, and why."""
    if not archive_path(data_dir, job).is_file():
        return
    try:
        with Archive.open(data_dir, job, create=False) as archive:
            if str(archive.get_meta("status", "running")) not in OUTCOMES:
                record_stop(archive, GlidingError(why))
    except GlidingError as exc:
        log.warning("daemon.job.stop.unrecorded", job=job, error=exc.message)
