"""The service behind ``gliding mcp``'s tools: the jobs and memory of one data directory.

``Service`` owns what the tools act on: the settings (``data_dir``), one ``Runtime``
(blackboard, knowledge index) opened on first need and shared by every job, and the task group
the jobs run in, which outlives any request: a job goes on while the client polls, or after a
``run_job`` call is cancelled. When the server stops, running jobs are cancelled and show as
interrupted (``gliding resume JOB`` continues them). Blocking work runs on worker threads.
Every method raises a GlidingError saying what to do next; ``server.py`` turns it into an MCP
tool error. An inline ``task_yaml``'s relative workspace is the server's working directory's.
Kept apart from the MCP SDK wiring (``server.py``): nothing here imports the SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from gliding.bus.messages import JobEvent
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task, load_task_text
from gliding.core.events import JobStarted, ModelDelta, ModelDiscarded
from gliding.core.ids import new_job_id
from gliding.core.iri import job_iri, parse_iri
from gliding.core.text import error_line, traceback_text
from gliding.daemon.compose import run_job
from gliding.daemon.jobs import FINISHED, list_jobs
from gliding.daemon.models import build_llm, check_cost_budget, check_model_file
from gliding.daemon.reading import archived_status as _archived_status
from gliding.daemon.reading import read_page as _read_page
from gliding.daemon.render import progress_line, report_dict
from gliding.daemon.runtime import Runtime, blackboard_path
from gliding.errors import GlidingError, IRIError, NotFoundError, TaskFileError, UsageError
from gliding.memory.archive.store import archive_path
from gliding.memory.board.blackboard import check_read_only_query

log = structlog.get_logger("gliding.mcp")

MAX_TASK_CHARS = 100_000  # an inline task_yaml
KEPT_REPORTS = 100  # finished jobs whose report job_status still has (the archive has the rest)
PROGRESS_BUFFER = 64  # progress lines a slow client may lag behind; later ones are dropped
INLINE = "task_yaml"  # how an inline task is named in messages and in the job's record


@dataclass
class _Run:
    """A job this server started, as it stands in this process."""

    job: str
    started: anyio.Event = field(default_factory=anyio.Event)  # job.started, or its end
    done: anyio.Event = field(default_factory=anyio.Event)
    report: dict[str, Any] | None = None
    failure: GlidingError | None = None
    watchers: list[MemoryObjectSendStream[JobEvent]] = field(default_factory=list)

    def on_event(self, event: JobEvent) -> None:
        if event.event == JobStarted.name:  # its archive is written by then
            self.started.set()
        if event.event in (ModelDelta.name, ModelDiscarded.name):
            return  # streamed model text: too many pieces for progress notifications
        for send in list(self.watchers):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                pass  # progress is best effort: a client that lags misses lines
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.watchers.remove(send)

    def end(self) -> None:
        self.started.set()
        self.done.set()
        for send in self.watchers:
            send.close()
        self.watchers.clear()


class Service:
    """The jobs and memory of one data directory, as the MCP tools use them. Serve with
    ``async with service.running():``; every method raises GlidingError when it fails."""

    def __init__(self, settings: Settings, *, base_dir: Path | None = None) -> None:
        self.settings = settings
        self.base_dir = (base_dir or Path.cwd()).resolve()
        self._runs: dict[str, _Run] = {}
        self._jobs: TaskGroup | None = None
        self._outer: TaskGroup | None = None
        self._runtime: tuple[Runtime, anyio.Event] | None = None  # with what closes it
        self._runtime_lock = anyio.Lock()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Service]:
        """Serve until the context ends; then cancel the running jobs, and close the runtime
        after them (they use it)."""
        async with anyio.create_task_group() as outer:
            self._outer = outer
            try:
                async with anyio.create_task_group() as jobs:
                    self._jobs = jobs
                    try:
                        yield self
                    finally:
                        jobs.cancel_scope.cancel()
            finally:
                self._jobs = None
                if self._runtime is not None:
                    self._runtime[1].set()

    # -- jobs ----------------------------------------------------------------------------------

    async def submit(self, task_yaml: str | None, task_path: str | None,
                     model: str | None) -> _Run:
        """Start a job in the background once its task and model are known to be usable.

        Raises:
            UsageError: neither or both of task_yaml and task_path; a bad task or model.
            GlidingError: the job failed before it started (e.g. no sandbox here).
        """
        if self._jobs is None:
            raise UsageError("the server is not running jobs (Service.running)")
        task = await self._task(task_yaml, task_path)
        # A bad model string or replies file is refused now; a hosted backend's import is paid
        # here, on a worker thread, rather than on the event loop inside run_job.
        chosen = model or task.model or self.settings.llm.model
        await anyio.to_thread.run_sync(build_llm, chosen, self.settings)
        await anyio.to_thread.run_sync(check_model_file, chosen)
        await anyio.to_thread.run_sync(check_cost_budget, task, self.settings, chosen)
        data_dir = self.settings.data_dir
        try:  # the shared blackboard opens in it before the first job does
            await anyio.to_thread.run_sync(partial(data_dir.mkdir, parents=True, exist_ok=True))
        except OSError as exc:
            raise UsageError(f"cannot create the data directory {data_dir}: {exc}",
                             hint="check data_dir or --data-dir") from exc
        runtime = await self._shared_runtime()
        run = _Run(new_job_id())
        self._forget_old_runs()
        self._runs[run.job] = run
        self._jobs.start_soon(self._run, run, task, model, runtime)
        await run.started.wait()
        if run.failure is not None and not await anyio.to_thread.run_sync(
                archive_path(data_dir, run.job).exists):
            del self._runs[run.job]  # nothing of it was written: as if never submitted
            raise run.failure
        return run

    async def _run(self, run: _Run, task: Task, model: str | None, runtime: Runtime) -> None:
        try:
            handle = await run_job(task, self.settings, model=model, on_event=run.on_event,
                                   job_id=run.job, runtime=runtime)
        except GlidingError as exc:
            run.failure = exc
        except Exception as exc:  # noqa: BLE001 - a bug in one job must stop neither the server nor the others
            log.error("mcp.job.crashed", job=run.job, exception=traceback_text(exc))
            run.failure = GlidingError(error_line(f"internal error: {type(exc).__name__}: "
                                                  f"{exc}"))
        else:
            assert handle.report is not None  # a new job always has one
            run.report = report_dict(handle.report, archive=str(handle.archive),
                                     model=handle.model)
        finally:
            run.end()

    def _forget_old_runs(self) -> None:
        finished = [job for job, run in self._runs.items() if run.done.is_set()]
        for job in finished[: max(0, len(finished) - KEPT_REPORTS)]:
            del self._runs[job]

    async def wait(self, run: _Run, progress: Callable[[int, str], Awaitable[None]] | None = None
                   ) -> dict[str, Any]:
        """The report of ``run`` once it ends; ``progress(n, line)`` for its n-th progress
        line on the way (a role started, a turn, a check report).

        Raises:
            GlidingError: the job stopped on an error instead of ending with a report.
        """
        if progress is not None and not run.done.is_set():
            send, receive = anyio.create_memory_object_stream[JobEvent](PROGRESS_BUFFER)
            run.watchers.append(send)
            lines = 0
            async with receive:
                async for event in receive:
                    if line := progress_line(event):
                        lines += 1
                        await progress(lines, line)
        await run.done.wait()
        if run.report is None:
            raise GlidingError(f"job {run.job} stopped: {run.failure}",
                               hint=f"job_status shows how it stands; gliding resume {run.job} "
                                    "continues it if it is interrupted")
        return run.report

    def _load_path(self, task_path: str) -> Task:
        """The task file at ``task_path`` (relative to the server's directory, ``~`` expanded).

        Raises:
            TaskFileError: the path cannot be used, or the file is no valid task.
        """
        try:
            path = self.base_dir / Path(task_path).expanduser()
        except RuntimeError as exc:  # ~user without a home
            raise TaskFileError(f"task_path: cannot use {task_path[:200]!r}: {exc}") from exc
        return load_task(path)

    async def _task(self, task_yaml: str | None, task_path: str | None) -> Task:
        if (task_yaml is None) == (task_path is None):
            raise UsageError("give exactly one of task_yaml (the task file's text) and "
                             "task_path (a task file on the server's machine)")
        if task_path is not None:
            return await anyio.to_thread.run_sync(self._load_path, task_path)
        assert task_yaml is not None
        if len(task_yaml) > MAX_TASK_CHARS:
            raise TaskFileError(f"{INLINE} is longer than {MAX_TASK_CHARS} characters")
        return await anyio.to_thread.run_sync(_inline_task, task_yaml, self.base_dir)

    async def status(self, job: str) -> dict[str, Any]:
        """How ``job`` stands: its status, outcome, turns and tokens so far.

        Raises:
            IRIError: a malformed job id. NotFoundError: no such job. ArchiveError.
        """
        job_iri(job)  # a malformed id never names a path
        run = self._runs.get(job)
        out = await anyio.to_thread.run_sync(_archived_status, self.settings.data_dir, job)
        if out is None:
            if run is None:
                raise NotFoundError(f"no job {job!r} in {self.settings.data_dir}",
                                    hint="list_jobs shows the jobs of this data directory")
            out = {"job": job, "status": "error" if run.done.is_set() else "starting",
                   "turns": 0}  # "error": it stopped before its archive was written
        if run is not None and run.failure is not None:
            out["error"] = str(run.failure)  # its status says whether it may be resumed
        if run is not None and run.report is not None:
            out["report"] = run.report
        # a job this server runs has recorded its outcome a moment before its report exists:
        # it is finished once the report is (or the run failed), not before
        finishing = run is not None and not run.done.is_set()
        out["running"] = out["status"] in ("running", "starting") or finishing
        out["finished"] = out["status"] in FINISHED and not finishing
        return out

    async def jobs(self, limit: int) -> dict[str, Any]:
        found = await anyio.to_thread.run_sync(list_jobs, self.settings.data_dir)
        return {"data_dir": str(self.settings.data_dir), "count": len(found),
                "jobs": [vars(info) for info in found[:limit]]}

    # -- reading back ---------------------------------------------------------------------------

    async def read(self, iri: str, offset: int, limit: int) -> dict[str, Any]:
        """Bytes ``offset`` .. ``offset + limit`` of an archived item, exactly.

        Raises:
            IRIError: not an item's IRI. NotFoundError: no such job or item. ArchiveError.
            UsageError: ``offset`` is past the item's end.
        """
        parsed = parse_iri(iri.strip())
        if parsed.kind is None:
            raise IRIError(f"{iri} names a job, not an archived item",
                           hint="add the item, e.g. /artifact/hello.txt or /turn/DA/1 (the "
                                "report lists them); job_status shows a job")
        return await anyio.to_thread.run_sync(_read_page, self.settings.data_dir, str(parsed),
                                              offset, limit)

    async def recall(self, query: str, budget_tokens: int | None) -> dict[str, Any]:
        """What long-term memory holds about ``query``, within ``budget_tokens``.

        Raises:
            UsageError: a blank query, or no long-term memory. NotFoundError: no blackboard.
        """
        if not query.strip():
            raise UsageError("recall needs a query: the words to remember by")
        knowledge = (await self._memory()).knowledge
        assert knowledge is not None  # _memory checked
        budget = budget_tokens or self.settings.memory.recall.budget_tokens
        packed = await anyio.to_thread.run_sync(knowledge.recall, query, budget)
        return {"query": query, "items": len(packed.ids), "tokens": packed.tokens,
                "text": packed.text, "ids": list(packed.ids)}

    async def query(self, sparql: str, limit: int) -> dict[str, Any]:
        """Rows of a read-only SPARQL query; updates are refused before any store sees them.

        Raises:
            QueryError: the query is refused or malformed. UsageError, NotFoundError: as recall.
        """
        checked = check_read_only_query(sparql, max_limit=limit)
        access = (await self._memory()).access()
        assert access is not None  # _memory checked
        rows = await anyio.to_thread.run_sync(access.query, checked.text)
        return {"form": checked.form, "count": len(rows),
                "rows": [{k: _json_value(v) for k, v in row.items()} for row in rows]}

    # -- the shared runtime ---------------------------------------------------------------------

    async def _memory(self) -> Runtime:
        settings = self.settings
        if not settings.memory.blackboard.url and not await anyio.to_thread.run_sync(
                blackboard_path(settings.data_dir).exists):
            raise NotFoundError(f"no blackboard in {settings.data_dir}: no job has run there",
                                hint="run a job first, or start the server with --data-dir")
        runtime = await self._shared_runtime()
        if runtime.knowledge is None:
            raise UsageError(
                f"long-term memory is not available: the blackboard of {settings.data_dir} "
                "could not be opened (another process may hold it; see the server's log)",
                hint="ask again once that process has ended, or share a SPARQL endpoint "
                     "(memory.blackboard.url)")
        return runtime

    async def _shared_runtime(self) -> Runtime:
        """The runtime this server's jobs and queries share, opened on first need; one that
        came without its blackboard is opened again once none of its jobs runs.

        Raises:
            GlidingError: the runtime cannot be opened (Runtime.open).
        """
        async with self._runtime_lock:
            if self._runtime is not None and self._runtime[0].board is None and all(
                    run.done.is_set() for run in self._runs.values()):
                self._runtime[1].set()
                self._runtime = None
            if self._runtime is None:
                if self._outer is None:
                    raise UsageError("the server is not running (Service.running)")
                stop = anyio.Event()
                self._runtime = (await self._outer.start(self._keep_runtime, stop), stop)
            return self._runtime[0]

    async def _keep_runtime(self, stop: anyio.Event, *,
                            task_status: TaskStatus[Runtime] = anyio.TASK_STATUS_IGNORED
                            ) -> None:
        opened = False
        try:
            async with Runtime.open(self.settings) as runtime:
                task_status.started(runtime)
                opened = True
                await stop.wait()
        except GlidingError as exc:
            if not opened:
                raise  # to whoever asked for it
            log.warning("mcp.runtime.close.failed", error=exc.message)


def _inline_task(text: str, base_dir: Path) -> Task:
    """An inline task file: validated as a file is (``load_task_text``), its workspace taken
    from ``base_dir``. Raises TaskFileError (naming ``task_yaml`` and the line)."""
    return load_task_text(text, INLINE, base_dir)


def _json_value(value: Any) -> Any:
    """A blackboard result term as JSON: an IRI as its text, a typed literal as its parts."""
    iri = getattr(value, "iri", None)
    if isinstance(iri, str):
        return iri
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return {k: v for k, v in vars(value).items() if v is not None}
