"""``gliding mcp``: Gliding as an MCP server, for MCP clients (Claude Code, IDEs).

    run_job(task_yaml | task_path, model?)     run a job to its end: its report (outcome, why,
                                               checks, artifacts with IRIs, tokens), progress
    submit_job(task_yaml | task_path, model?)  start it in the background: its id at once
    job_status(job)                            how it stands, turns and tokens so far
    list_jobs(limit?)                          the data directory's jobs, newest first
    read_iri(iri, offset?, limit?)             an archived item's bytes, a page at a time
    recall(query, budget_tokens?)              long-term memory, as an agent's recall gets it
    knowledge_query(sparql, limit?)            a read-only SPARQL query over the blackboard

Every answer is a JSON object (structured content and its text), bounded in size. ``Service``
owns what the tools act on: the settings (``data_dir``), one ``Runtime`` (blackboard, knowledge
index) opened on first need and shared by every job, and the task group the jobs run in, which
outlives any request: a job goes on while the client polls, or after a ``run_job`` call is
cancelled. When the server stops, running jobs are cancelled and show as interrupted (``gliding
resume JOB`` continues them). Blocking work runs on worker threads. A bad argument, unknown job
or IRI, malformed task or refused query is an MCP tool error result saying what to do next; the
server goes on. An inline ``task_yaml``'s relative workspace is the server's working directory's.
Over HTTP every request must bear the token in ``<data_dir>/mcp.token`` (``BearerOnly``).

``serve`` is what ``gliding mcp`` calls; ``python -m gliding.mcp.server`` runs it without the
CLI. Past 400 lines because the service and its MCP face live together: each tool is the few
lines that bind a service method to its schema.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from gliding import __version__
from gliding.bus.messages import JobEvent
from gliding.cli.render import progress_line, report_dict
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task, load_task_text
from gliding.core.ids import new_job_id
from gliding.core.iri import job_iri, parse_iri
from gliding.core.text import ERROR_CHARS, clip, error_line, traceback_text
from gliding.daemon.compose import build_llm, check_cost_budget, check_model_file, run_job
from gliding.daemon.jobs import FINISHED, list_jobs
from gliding.daemon.runtime import Runtime, blackboard_path
from gliding.daemon.service import MAX_OFFSET, bounded
from gliding.daemon.service import archived_status as _archived_status
from gliding.daemon.service import read_page as _read_page
from gliding.daemon.service import utf8_page as _utf8_page  # noqa: F401  (its old home)
from gliding.errors import GlidingError, IRIError, NotFoundError, TaskFileError, UsageError
from gliding.memory.archive.store import archive_path
from gliding.memory.board.blackboard import check_read_only_query

log = structlog.get_logger("gliding.mcp")

MAX_ANSWER_CHARS = 20_000  # one answer's JSON (read_iri: its page's bytes, below)
STRING_CHARS = 600  # a long string of an answer that did not fit
MAX_TASK_CHARS = 100_000  # an inline task_yaml
PAGE_BYTES = 16_000  # read_iri's default page
MAX_PAGE_BYTES = 32_000
MAX_QUERY_ROWS = 200
MAX_RECALL_TOKENS = 4_000
MAX_LISTED_JOBS = 100
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
        if event.event == "job.started":  # its archive is written by then
            self.started.set()
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
        except Exception as exc:  # a bug in one job must stop neither the server nor the others
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

    async def _task(self, task_yaml: str | None, task_path: str | None) -> Task:
        if (task_yaml is None) == (task_path is None):
            raise UsageError("give exactly one of task_yaml (the task file's text) and "
                             "task_path (a task file on the server's machine)")
        if task_path is not None:
            try:
                path = self.base_dir / Path(task_path).expanduser()
            except RuntimeError as exc:  # ~user without a home
                raise TaskFileError(f"task_path: cannot use {task_path[:200]!r}: {exc}") from exc
            return await anyio.to_thread.run_sync(load_task, path)
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


def _clipped(text: str, lines: int = 40) -> str:
    """An error message kept to ``lines`` lines of at most ERROR_CHARS characters each."""
    kept = [clip(line, ERROR_CHARS) for line in text.splitlines()[:lines]]
    return "\n".join(kept) + ("\n..." if len(text.splitlines()) > lines else "")


def _bounded(data: Any, limit: int = MAX_ANSWER_CHARS) -> Any:
    """``data`` if its JSON fits ``limit`` characters; else with its longest lists halved,
    then its long strings clipped to STRING_CHARS (``service.bounded``)."""
    return bounded(data, limit, STRING_CHARS)


# -- MCP ---------------------------------------------------------------------------------------

TaskYaml = Annotated[str | None, Field(description=(
    "The task file's text (YAML: goal, workspace, pipeline, budgets, checks). A relative "
    "workspace is taken from the server's working directory."))]
TaskPath = Annotated[str | None, Field(description=(
    "A task file on the server's machine (a relative path: from the server's working "
    "directory)."))]
Model = Annotated[str | None, Field(description=(
    "local, local:/path.gguf, scripted:replies.yaml or a litellm model string (default: the "
    "task's model, else llm.model)."))]
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
RUN = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)

_F = TypeVar("_F", bound=Callable[..., Awaitable[dict[str, Any]]])


def build_server(service: Service) -> MCPServer:
    """The MCP server whose tools call ``service`` (which the caller runs)."""
    server = MCPServer("gliding", version=__version__, log_level="WARNING", instructions=(
        "Gliding runs a task (a goal with checks) through a team of LLM agents (Plan, Do, "
        "Check, Act) and archives every byte under gliding:// IRIs. run_job waits for the "
        "report; submit_job returns a job id at once (poll job_status). read_iri reads an "
        "archived item back exactly; recall and knowledge_query read long-term memory."))

    def tool(annotations: ToolAnnotations) -> Callable[[_F], _F]:
        def register(fn: _F) -> _F:  # the docstring as one paragraph
            return server.tool(description=" ".join((fn.__doc__ or "").split()),
                               annotations=annotations)(fn)
        return register

    async def answer(work: Awaitable[dict[str, Any]], *, bound: bool = True) -> dict[str, Any]:
        """The tool's answer; any failure a tool error of a few lines (a bug too: logged as
        one bounded line, so the SDK never prints its traceback)."""
        try:
            result = await work
        except GlidingError as exc:
            raise ToolError(_clipped(str(exc))) from exc
        except Exception as exc:
            log.error("mcp.tool.crashed", error=error_line(f"{type(exc).__name__}: {exc}"),
                      exception=traceback_text(exc))
            raise ToolError(error_line(f"internal error: {type(exc).__name__}: {exc}") +
                            "\n  hint: this is a bug in Gliding; the server's log has the "
                            "traceback") from exc
        return _bounded(result) if bound else result

    @tool(RUN)
    async def run_job(ctx: Context, task_yaml: TaskYaml = None, task_path: TaskPath = None,
                      model: Model = None) -> dict[str, Any]:
        """Run a Gliding job to its end and return its report: outcome, why, checks,
        artifacts (with IRIs for read_iri), tokens and cost per role. Give task_yaml or
        task_path. If this call is cancelled or times out, the job goes on: poll job_status."""
        async def progress(n: int, line: str) -> None:
            await ctx.report_progress(n, None, line)

        async def work() -> dict[str, Any]:
            return await service.wait(await service.submit(task_yaml, task_path, model),
                                      progress)

        return await answer(work())

    @tool(RUN)
    async def submit_job(task_yaml: TaskYaml = None, task_path: TaskPath = None,
                         model: Model = None) -> dict[str, Any]:
        """Start a Gliding job in the background of this server and return its id at once;
        poll job_status(job) until finished is true. The job runs as long as the server."""
        async def work() -> dict[str, Any]:
            run = await service.submit(task_yaml, task_path, model)
            return {"job": run.job, "status": "running",
                    "archive": str(archive_path(service.settings.data_dir, run.job))}

        return await answer(work())

    @tool(READ)
    async def job_status(job: Annotated[str, Field(description=(
            "A job id, e.g. 20261129-113758-a1b2c3"))]) -> dict[str, Any]:
        """How a job stands: status (starting, running, interrupted, success, failed,
        escalated, budget_exceeded, error), outcome, turns and tokens so far, and the report
        once a job this server ran has finished."""
        return await answer(service.status(job.strip()))

    @tool(READ)
    async def list_jobs(limit: Annotated[int, Field(ge=1, le=MAX_LISTED_JOBS)] = 20
                        ) -> dict[str, Any]:
        """The jobs of the server's data directory, newest first, with status and goal."""
        return await answer(service.jobs(limit))

    @tool(READ)
    async def read_iri(
        iri: Annotated[str, Field(description=(
            "gliding://job/<job>/<kind>/<name>, e.g. an artifact IRI from a report"))],
        offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="The first byte")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE_BYTES, description="Bytes")] = PAGE_BYTES,
    ) -> dict[str, Any]:
        """Read an archived item (artifact, turn, tool result, record) back exactly, a page of
        bytes at a time: content is UTF-8 text (a page ends on a character boundary) or
        base64 (encoding says which); next_offset starts the next page (null at the end)."""
        return await answer(service.read(iri, offset, limit), bound=False)

    @tool(READ)
    async def recall(
        query: Annotated[str, Field(description="What to remember, e.g. a question")],
        budget_tokens: Annotated[int | None, Field(ge=1, le=MAX_RECALL_TOKENS, description=(
            "Tokens of text (default memory.recall.budget_tokens)"))] = None,
    ) -> dict[str, Any]:
        """What long-term memory holds about query: the goals, turns, results, plans, checks
        and decisions of every job, ranked by hybrid recall, as an agent's recall gets them."""
        return await answer(service.recall(query, budget_tokens))

    @tool(READ)
    async def knowledge_query(
        sparql: Annotated[str, Field(description=(
            "SELECT, ASK or CONSTRUCT; each job is a named graph (GRAPH ?g { ... }); the gl: "
            "prefix is predeclared. Updates are refused."))],
        limit: Annotated[int, Field(ge=1, le=MAX_QUERY_ROWS, description="Most rows")] = 50,
    ) -> dict[str, Any]:
        """A read-only SPARQL query over the blackboard: long-term memory, every job."""
        return await answer(service.query(sparql, limit))

    return server


Transport = Literal["stdio", "http"]


async def serve_async(settings: Settings, *, transport: Transport = "stdio",
                      host: str = "127.0.0.1", port: int = 8000, base_dir: Path | None = None,
                      announce: Callable[[str], None] | None = None) -> None:
    """Serve until the client leaves (stdio: its end of the pipe closes) or, over HTTP, until
    SIGINT or SIGTERM; ``announce(url)`` once HTTP listens.

    Raises:
        UsageError: the HTTP port cannot be listened on.
    """
    service = Service(settings, base_dir=base_dir)
    server = build_server(service)
    sock = _listening(host, port) if transport == "http" else None  # refused before serving
    token = mcp_token(settings.data_dir) if sock is not None else ""
    log.info("mcp.serving", transport=transport, data_dir=str(settings.data_dir))
    async with service.running():
        if sock is not None:
            await _serve_http(server, sock, announce or (lambda url: None), token)
        else:
            await server.run_stdio_async()


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port") from exc
    return sock


class BearerOnly:
    """An ASGI app that lets through only HTTP requests bearing ``token`` (``Authorization:
    Bearer <token>``, compared in constant time); any other gets 401 and reaches nothing.
    ``run_job`` starts programs and ``read_iri`` reads archives: over HTTP anything on the host
    (a sandboxed command with network too) could call them, so no token, no call."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": {"code": "auth", "message": (
                    "missing or wrong bearer token" if given else "no bearer token"),
                    "hint": "send Authorization: Bearer <the token in <data_dir>/mcp.token>"}})
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


def mcp_token(data_dir: Path) -> str:
    """The bearer token of ``gliding mcp --transport http``: ``<data_dir>/mcp.token`` (0600),
    made the first time.

    Raises:
        UsageError: it cannot be read or made.
    """
    path = data_dir / "mcp.token"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            token = path.read_text(encoding="ascii").strip()
            if len(token) < 32:
                raise UsageError(f"{path} holds no usable token",
                                 hint="delete it; the next start makes a new one") from None
            return token
        token = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(token + "\n")
        return token
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read or make the MCP token {path}: {exc}") from exc


async def _serve_http(server: MCPServer, sock: socket.socket,
                      announce: Callable[[str], None], token: str) -> None:
    """Streamable HTTP at ``http://host:port/mcp`` on ``sock``, for requests bearing
    ``token``. uvicorn's own signal handling would end the process before the jobs are
    cancelled and the runtime closed; here a signal stops it gracefully and the caller cleans
    up."""
    import uvicorn  # the SDK's HTTP server

    class Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    host, port = sock.getsockname()[:2]
    app = BearerOnly(server.streamable_http_app(host=host), token)
    http = Uvicorn(uvicorn.Config(app, log_level="warning"))

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                http.should_exit = True
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal)
        announce(f"http://{host}:{port}/mcp")
        await http.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def serve(settings: Settings, *, transport: str = "stdio", port: int = 8000,
          announce: Callable[[str], None] | None = None) -> None:
    """``gliding mcp``: serve over stdio, or streamable HTTP at http://127.0.0.1:PORT/mcp
    (``announce(url)`` once it listens). The embedding model loads from its packaged files,
    never the Hugging Face hub (HF_HUB_OFFLINE, as ``gliding memory recall`` sets it).

    Raises:
        UsageError: an unknown transport, a port out of range or one in use.
    """
    if transport not in ("stdio", "http"):
        raise UsageError(f"unknown transport {transport!r}", hint="use stdio or http")
    if not 1 <= port <= 65535:
        raise UsageError(f"port {port} is out of range", hint="use 1-65535")
    mode: Transport = "http" if transport == "http" else "stdio"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    anyio.run(partial(serve_async, settings, transport=mode, port=port, announce=announce))


def main(argv: list[str] | None = None) -> None:
    """``python -m gliding.mcp.server [--config F] [--data-dir D] [--transport T] [--port N]``:
    ``gliding mcp`` without the CLI."""
    from gliding.cli.logs import configure_logging
    from gliding.config.loader import load_settings
    from gliding.daemon.private import private_files

    parser = argparse.ArgumentParser(prog="python -m gliding.mcp.server",
                                     description="Serve Gliding to MCP clients.")
    parser.add_argument("--config", "-c", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config, overrides={"data_dir": str(args.data_dir)}
                                 if args.data_dir else {})
        configure_logging(settings.log_level, settings.log_format)
        with private_files(settings.data_dir):  # files 0600, directories 0700
            serve(settings, transport=args.transport, port=args.port,
                  announce=lambda url: print(f"gliding mcp: serving at {url} (bearer token "
                                             f"in {settings.data_dir / 'mcp.token'})",
                                             file=sys.stderr))
    except GlidingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    main()
