"""The daemon's job service: the jobs of one data directory, queued, run and watched.

    submit    validate the task text (``load_task_text``), its tool groups and its model
              first; a bad one is a UsageError and nothing is queued
    dispatch  start queued jobs oldest first (those to resume before new ones), at most
              ``daemon.max_jobs`` at once and never two in one workspace, in one task group,
              all on the process's one ``Runtime``, through ``compose.run_job(job_id=...)`` or,
              once a job has an archive, ``compose.resume_job``
    events    every JobEvent of a job, numbered (``seq``) and time-stamped, is appended to
              ``<data_dir>/daemon/events/<job>.jsonl`` on a worker thread and only then handed
              to the job's subscribers; so whatever a subscriber saw is in the file, and a
              client that reconnects with ``after=<seq>`` misses nothing and sees nothing twice
              (even across a daemon restart). A file holds MAX_LOG_BYTES at most (past that
              only the final events are kept; one event's data is clipped at MAX_EVENT_BYTES).
              A subscriber's buffer holds SUBSCRIBER_BUFFER events: one that falls further
              behind is disconnected (its stream ends with a ``dropped`` marker) rather than
              stall the job or the other subscribers; it reconnects with ``after``.
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
    shutdown  ``stop``: no new submissions, every running job cancelled at its next await
              (archive ``interrupted``, queue state still ``running``), so the next start
              resumes it

The reading helpers ``archived_status`` and ``read_page`` are shared with the MCP server; the
files (queue, events) are ``gliding.daemon.queue``'s. Blocking work (the queue, archives,
event files) runs on worker threads. (Past 600 lines: dispatch, the runs, cancel and the
event streams share one state, the running jobs and their logs, and each step of a job's end
touches all of it; split up, each half would reach into the other's.)
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
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
from anyio.streams.memory import MemoryObjectSendStream

from gliding.bus.messages import JobEvent
from gliding.config.settings import Settings
from gliding.config.task import load_task_text
from gliding.core.ids import new_job_id
from gliding.core.iri import job_iri, parse_iri
from gliding.core.text import clip, error_line
from gliding.daemon import queue as q
from gliding.daemon.compose import (
    JobHandle,
    build_llm,
    check_cost_budget,
    check_model_file,
    refuse_task,
    resume_job,
    run_job,
)
from gliding.daemon.jobs import CANCELLED_BY, SUSPENDED_BY, job_info, record_stop
from gliding.daemon.jobs import FINISHED as OUTCOMES
from gliding.daemon.queue import TERMINAL, JobQueue, JobStateError, QueuedJob
from gliding.daemon.reconcile import Unsettled, ended_in_archive, open_queue
from gliding.daemon.runtime import Runtime
from gliding.errors import GlidingError, IRIError, NotFoundError, TaskFileError, UsageError
from gliding.llm.port import free_backend
from gliding.memory.archive.store import Archive, CallRecord, archive_path, open_for_iri
from gliding.tools.groups import GROUP_NAMES, known_group

log = structlog.get_logger("gliding.daemon")

MAX_EVENT_BYTES = 16_000  # one event's JSON line; a larger one keeps its name, not its data
MAX_LOG_BYTES = 8 << 20  # one job's events file; past it only TERMINAL events are written
SUBSCRIBER_BUFFER = 256  # events a subscriber may lag behind before it is disconnected
MAX_NAME_CHARS = 200  # a submitted task file's name
MAX_OFFSET = 2**53 - 1  # an offset or event number past this is refused, not tried (a JSON
# number larger still loses its precision; 10**30 overflowed SQLite, 10**5000 str())
STOP_GRACE_S = 60.0  # how long stop waits for cancelled jobs to reach their safe point
QUEUE_RETRY_S = 1.0  # a queue read that failed (disk full, locked) is tried again after this
DROPPED = "stream.dropped"
"""The marker that ends a subscriber's stream when it fell SUBSCRIBER_BUFFER events behind."""


class ServiceStopping(UsageError):
    """The daemon is shutting down: it takes no new work."""

    code = "daemon.stopping"


@dataclass
class _Log:
    """A job's event log: the next number and the file's size, and who watches it."""

    job: str
    path: Path
    next_seq: int
    size: int
    subscribers: list[_Subscriber] = field(default_factory=list)
    dropped: int = 0  # events not written: the file was full
    open: bool = False  # more events may come: a subscriber follows (else it gets the past)


@dataclass
class _Subscriber:
    send: MemoryObjectSendStream[dict[str, Any]]
    dropped: bool = False


@dataclass
class _Active:
    """A job this daemon runs now."""

    entry: QueuedJob
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    reason: str = ""  # "cancel" or "shutdown" once its scope is cancelled

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
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
        self._logs: dict[str, _Log] = {}
        self._logs_lock = anyio.Lock()
        # events to write, in order; a None record: end the log's streams once written
        self._pending: list[tuple[_Log, dict[str, Any] | None, str]] = []
        self._written = anyio.Event()  # set (and replaced) after each batch is written
        self._wake_writer = anyio.Event()
        self._wake_dispatch = anyio.Event()
        self._jobs_done = anyio.Event()
        self._unsettled: dict[str, Unsettled] = {}  # endings the queue could not take yet
        self._wake_settler = anyio.Event()
        self.stopping = False

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
            async with Runtime.open(self.settings) as runtime:
                self._runtime = runtime
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._write_events)
                    tg.start_soon(self._dispatch)
                    tg.start_soon(self._settle_later)
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
                    await self._drain()
                    self._close_subscribers(None)
                    await self._settle_pending()  # a last try; else the next start does it
        finally:
            self._runtime = None
            queue, self._queue = self._queue, None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(queue.close)

    def stop(self) -> None:
        """Take no new work; cancel every running job (it resumes at the next start)."""
        self.stopping = True
        for active in list(self._active.values()):
            active.cancel("shutdown")
        self._wake_dispatch.set()
        self._wake_writer.set()
        self._close_subscribers(None)  # the streams end now: the daemon is going away

    @property
    def queue(self) -> JobQueue:
        if self._queue is None:
            raise UsageError("the job service is not running (JobService.running)")
        return self._queue

    async def _q(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))

    # -- submitting ---------------------------------------------------------------------------

    async def submit(self, text: str, name: str = "task.yaml", *, model: str | None = None,
                     base_dir: str | None = None) -> QueuedJob:
        """Queue the task file ``text`` (named ``name`` in messages; its relative workspace
        and a relative ``scripted:`` replies file taken from ``base_dir``, an absolute path,
        default the daemon's working directory) once it, its tool groups and its model are
        known to be usable.

        Raises:
            TaskFileError: the task does not validate, its workspace is one no job may have
                on this host (``refuse_task``), or it has a cost budget and a model
                without a price (``check_cost_budget``). UsageError: a bad name, base_dir or
                model (or replies file). ServiceStopping. ArchiveError.
        """
        if self.stopping:
            raise ServiceStopping("the daemon is stopping: it takes no new jobs",
                                  hint="submit again once it runs again")
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
        await self._emit(entry.job, "job.queued", {"name": name, "goal": clip(task.goal, 300),
                                                    "model": model})
        self._wake_dispatch.set()
        return entry

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
        out["events"] = (await self._log_of(job)).next_seq - 1  # a job of an earlier daemon too
        return out

    def running_jobs(self) -> list[str]:
        """The jobs this daemon runs right now."""
        return list(self._active)

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
                    await self._emit(job, "job.cancelled", {"ran": False})
                    self._close_subscribers(job)
                    return entry
                if entry.state in (q.QUEUED, q.RUNNING) and job in self._active:
                    if entry.state == q.RUNNING:
                        entry = await self._q(self.queue.move, job, q.CANCELLING,
                                              allowed=(q.RUNNING,))
                    if job in self._active:
                        self._active[job].cancel("cancel")
                    return entry
                if entry.state == q.CANCELLING:
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
                                         allowed=(q.INTERRUPTED, q.CANCELLED))
        await self._emit(job, "job.queued", {"resume": True})
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
                await self._emit(entry.job, "job.cancelled", {"ran": True})
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
            (await self._log_of(entry.job)).open = True  # its streams follow what comes

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
            log_ = await self._log_of(job)
            with active.scope:
                self._record(log_, "job.dispatched", {"run": entry.runs,
                                                      "running": len(self._active)})
                handle = await self._execute(entry, partial(self._on_event, log_))
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
                self._wake_writer.set()

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
        if handle is not None:
            outcome = handle.report.outcome if handle.report else handle.finished_before
            await self._end(job, Unsettled(q.FINISHED, now, outcome=outcome))
            if handle.report is None:  # resumed a job that had finished: say so
                await self._emit(job, "job.finished", {"outcome": outcome})
        elif active.reason == "cancel":
            await self._end(job, Unsettled(q.CANCELLED, now, error="cancelled while it ran"))
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, CANCELLED_BY)
            await self._emit(job, "job.cancelled", {"ran": True})
        elif active.reason == "shutdown":
            await anyio.to_thread.run_sync(_record_stop, self.data_dir, job, SUSPENDED_BY)
            await self._emit(job, "job.suspended", {"reason": "the daemon stopped"})
            return  # queue state stays running: the next start resumes it
        else:
            assert error is not None
            why = error_line(error.message)
            await self._end(job, Unsettled(q.INTERRUPTED, now, error=why, stop=why))
            await self._emit(job, "job.stopped", {"code": error.code,
                                                  "error": error_line(error.message),
                                                  "hint": error.hint})
        self._close_subscribers(job)

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

    # -- events -------------------------------------------------------------------------------

    async def _log_of(self, job: str) -> _Log:
        """The job's event log, opened (its end found) on first use; kept while the daemon
        runs (a few hundred bytes a job)."""
        found = self._logs.get(job)
        if found is not None:
            return found
        async with self._logs_lock:
            found = self._logs.get(job)
            if found is None:
                path = self.data_dir / q.EVENTS_DIR / f"{job}.jsonl"
                last, size = await anyio.to_thread.run_sync(q.events_end, path,
                                                                 4 * MAX_EVENT_BYTES)
                found = self._logs[job] = _Log(job, path, last + 1, size)
        return found

    async def _emit(self, job: str, event: str, data: dict[str, Any]) -> None:
        self._record(await self._log_of(job), event, data)

    def _on_event(self, log_: _Log, event: JobEvent) -> None:
        try:
            self._record(log_, event.event, event.data)
        except Exception:  # an event that cannot be kept must not stop the job
            log.exception("daemon.event.failed", job=log_.job, event=event.event)

    def _record(self, log_: _Log, event: str, data: dict[str, Any]) -> None:
        """Number the event and queue it for the writer (on the event loop, no I/O)."""
        record = {"seq": log_.next_seq, "at": self._now(), "job": log_.job, "event": event,
                  "data": data}
        line = json.dumps(record, ensure_ascii=False, default=str)
        if len(line.encode()) > MAX_EVENT_BYTES:
            record["data"] = {"clipped": True, "bytes": len(line.encode())}
            line = json.dumps(record, ensure_ascii=False, default=str)
        size = len(line.encode()) + 1
        if log_.size + size > MAX_LOG_BYTES and event not in TERMINAL:
            log_.dropped += 1
            return
        log_.next_seq += 1
        log_.size += size
        log_.open = True
        self._pending.append((log_, record, line))
        self._wake_writer.set()

    async def _write_events(self) -> None:
        """Write the queued events, batch by batch, then hand each to its subscribers."""
        while True:
            await self._wake_writer.wait()
            self._wake_writer = anyio.Event()
            await self._drain()
            if self.stopping and not self._active and not self._pending:
                return

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                with anyio.CancelScope(shield=True):  # a batch taken is written, or warned of
                    await anyio.to_thread.run_sync(
                        q.append_events, [(lg.path, line) for lg, rec, line in batch
                                          if rec is not None])
            except OSError as exc:  # events are news: the job goes on without them
                log.warning("daemon.events.unwritten", error=str(exc), events=len(batch))
            for log_, record, line in batch:
                self._fan_out(log_, record, line)
            self._written.set()
            self._written = anyio.Event()

    def _fan_out(self, log_: _Log, record: dict[str, Any] | None, line: str) -> None:
        if record is None:  # the end of a run: its streams end after what came before
            self._end_streams(log_, still_open=int(line) != log_.next_seq)
            return
        for sub in list(log_.subscribers):
            try:
                sub.send.send_nowait(record)
            except anyio.WouldBlock:  # it fell behind: disconnect it, never wait for it
                sub.dropped = True
                sub.send.close()
                log_.subscribers.remove(sub)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log_.subscribers.remove(sub)

    def _end_streams(self, log_: _Log, *, still_open: bool = False) -> None:
        log_.open = still_open  # events recorded after the end mark: another run began
        for sub in log_.subscribers:
            sub.send.close()
        log_.subscribers.clear()

    def _close_subscribers(self, job: str | None) -> None:
        """End the streams of ``job``'s subscribers once they got what was recorded before
        (through the writer); every job's at once (None: the daemon stops)."""
        if job is None:
            for log_ in self._logs.values():
                self._end_streams(log_)
            return
        found = self._logs.get(job)
        if found is not None:
            self._pending.append((found, None, str(found.next_seq)))
            self._wake_writer.set()

    async def events(self, job: str, *, after: int = 0, follow: bool = True
                     ) -> AsyncIterator[dict[str, Any]]:
        """The job's events numbered above ``after``: those written so far and, ``follow``,
        the ones to come until a TERMINAL event or the end of the job's run (or of the
        daemon). A stream that fell behind ends with a DROPPED marker
        (``{"event": DROPPED, "after": <the last seq it got>}``): reconnect with that.

        Raises (before the first event): NotFoundError, IRIError.
        """
        await self.get(job)
        log_ = await self._log_of(job)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](SUBSCRIBER_BUFFER)
        sub = _Subscriber(send)
        if follow and log_.open and not self.stopping:
            log_.subscribers.append(sub)  # before reading the file: nothing falls between
        else:
            send.close()  # the past only
        last = after
        try:
            past = await anyio.to_thread.run_sync(q.read_events, log_.path, after)
            for record in past:
                last = record["seq"]
                yield record
            if not follow:
                return
            async for record in receive:
                if record["seq"] <= last:
                    continue  # read from the file already
                last = record["seq"]
                yield record
                if record["event"] in TERMINAL:
                    return
            if sub.dropped:
                yield {"event": DROPPED, "job": job, "after": last,
                       "data": {"reason": f"fell {SUBSCRIBER_BUFFER} events behind"}}
        finally:
            if sub in log_.subscribers:
                log_.subscribers.remove(sub)
            send.close()
            receive.close()


def job_record(entry: QueuedJob) -> dict[str, Any]:
    """A queue entry as the API shows it (the task text left out)."""
    return {"job": entry.job, "name": entry.name, "goal": entry.goal, "model": entry.model,
            "workspace": entry.workspace, "state": entry.state, "outcome": entry.outcome,
            "error": entry.error, "submitted": entry.submitted, "started": entry.started,
            "finished": entry.finished, "runs": entry.runs}


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


# -- reading archives (shared with the MCP server) ---------------------------------------------

def archived_status(data_dir: Path, job: str) -> dict[str, Any] | None:
    """How the archive of ``job`` says it stands; None when it has none."""
    path = archive_path(data_dir, job)
    if not path.is_file():
        return None
    info = job_info(data_dir, job)
    with Archive.open(data_dir, job, create=False) as archive:
        turns = archive.list(kind="turn")
        calls = archive.calls()
    by_role: dict[str, int] = {}
    for item in turns:
        role = str(item.meta.get("role", "?"))
        by_role[role] = by_role.get(role, 0) + 1
    return {"job": job, "status": info.status,
            "outcome": info.status if info.status in OUTCOMES else None,
            "goal": info.goal, "model": info.model, "resumes": info.resumes,
            "turns": len(turns), "turns_by_role": by_role,
            "last_turn": turns[-1].iri if turns else None,
            "tokens": {"prompt": sum(c.prompt_tokens for c in calls),
                       "completion": sum(c.completion_tokens for c in calls),
                       **_ledger_cost(calls, info.model)},
            "archive": str(path)}


def _ledger_cost(calls: list[CallRecord], model: str | None) -> dict[str, Any]:
    """What the ledger says the calls cost: ``cost_usd`` null when some had no price (then
    ``cost_usd_at_least`` sums the others), the models without one, and ``cost_free``
    (``local`` or ``scripted``: the job's model costs nothing by nature)."""
    unpriced = [c for c in calls if not c.priced]
    at_least = round(sum(c.cost_usd for c in calls), 6)
    return {"cost_usd": None if unpriced else at_least, "cost_known": not unpriced,
            "cost_usd_at_least": at_least, "unpriced_calls": len(unpriced),
            "unpriced_models": sorted({c.model for c in unpriced}),
            "cost_free": free_backend(model or "")}


def read_page(data_dir: Path, iri: str, offset: int, limit: int) -> dict[str, Any]:
    """Bytes ``offset`` .. ``offset + limit`` of the archived item ``iri``: UTF-8 text (a
    page ends on a character boundary) or base64, and where the next page starts.

    Raises:
        IRIError, NotFoundError, ArchiveError: as ``open_for_iri`` and ``Archive.get``.
        UsageError: ``offset`` is past the item's end.
    """
    archive, parsed = open_for_iri(data_dir, iri)
    with archive:
        item = archive.get(str(parsed))
    content = item.content or b""
    if offset > len(content):
        raise UsageError(f"offset {offset} is past the end of {iri} ({len(content)} bytes)",
                         hint="read from offset 0, or a next_offset an earlier page gave")
    page = content[offset: offset + limit]
    text = utf8_page(page)
    if text is not None:
        page = text.encode("utf-8")
    end = offset + len(page)
    return {"iri": item.iri, "kind": item.kind, "media_type": item.media_type,
            "size": item.size, "sha256": item.sha256, "offset": offset, "length": len(page),
            "next_offset": end if end < len(content) else None,
            "encoding": "utf-8" if text is not None else "base64",
            "content": text if text is not None else base64.b64encode(page).decode("ascii"),
            "meta": bounded(item.meta, 2_000)}


def utf8_page(page: bytes) -> str | None:
    """``page`` as text, less the bytes of a character its end cuts in two (never all of it);
    None when it is not UTF-8 (e.g. it starts inside a character)."""
    if not page:
        return ""
    for cut in range(min(4, len(page))):
        try:
            return page[: len(page) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def bounded(data: Any, limit: int, string_chars: int = 600) -> Any:
    """``data`` if its JSON fits ``limit`` characters; else with its longest lists halved
    (``<key>_left_out`` counts what each lost), then its long strings clipped."""
    def size(value: Any) -> int:
        return len(json.dumps(value, ensure_ascii=False, default=str))

    if size(data) <= limit or not isinstance(data, dict):
        return data
    data = dict(data)
    for key in sorted((k for k, v in data.items() if isinstance(v, list)),
                      key=lambda k: -size(data[k])):
        full = len(data[key])
        while size(data) > limit and data[key]:
            data[key] = data[key][: len(data[key]) // 2]
            data[f"{key}_left_out"] = full - len(data[key])

    def clipped(value: Any) -> Any:
        if isinstance(value, str):
            return clip(value, string_chars)
        if isinstance(value, dict):
            return {k: clipped(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clipped(v) for v in value]
        return value

    return data if size(data) <= limit else clipped(data)

