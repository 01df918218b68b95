"""The daemon's HTTP API over a ``JobService``, and ``serve``, what ``gliding daemon`` runs.

    POST /v1/jobs                    {"task": <task file text>, "name"?, "model"?, "base_dir"?}
                                     → 201 {"job", "state": "queued"}
    GET  /v1/jobs?limit&offset       the queue, newest first
    GET  /v1/jobs/{job}              state, outcome, error, times, progress (turns per role,
                                     tokens, cost) from its archive
    GET  /v1/jobs/{job}/events       Server-Sent Events: the past ones (``after=<seq>`` or
                                     ``Last-Event-ID``), then live ones until the job's end;
                                     ``follow=false``: the past only
    POST /v1/jobs/{job}/cancel       queued: never starts; running: stops at its next await
    POST /v1/jobs/{job}/fork         {"at": "DA/3", "workspace"?} → 201: a new job from that
                                     step, its workspace restored (daemon/fork.py)
    POST /v1/jobs/{job}/interrupt    running: its current model or tool call stops, the job
                                     is paused (a steer or resume runs it on)
    POST /v1/jobs/{job}/resume       queue an interrupted, paused or cancelled job again
    GET  /v1/jobs/{job}/approvals    the tool calls that asked a person, with their answers
    POST /v1/jobs/{job}/approvals/{id}  {"approve", "note"?, "digest"?}: answer one waiting
                                     call (agents/approvals.py); the job need not be running
    POST /v1/jobs/{job}/steer        {"message"} → 202 {"job", "steer"}: appended before the
                                     next model call of one of its sessions (agents/steer.py);
                                     a paused job is queued again with it
    GET  /v1/jobs/{job}/board?node&limit  the job's blackboard around ``node`` (or its whole
                                     graph, up to ``limit`` triples) as nodes and edges
    GET  /v1/iri?iri&offset&limit    a page of an archived item (as the read_result tool)
    POST /v1/dashboard/links         → 201 {"path": "/login?once=...", "expires_at"}: a
                                     one-time login link of the dashboard (``gliding dashboard``)
    GET  /v1/schedules               the recurring jobs, by name, with their next due time
    POST /v1/schedules               {"name", "cron", "task", "task_name"?, "tz"?, "missed"?,
                                     "overlap"?, "model"?, "base_dir"?} → 201 the schedule
                                     (daemon/schedule_runner.py); 409: the name is taken
    DELETE /v1/schedules/{name}      drop it (its jobs stay) → the schedule it was
    GET  /v1/health                  {"status": "ok"}: no token needed, nothing revealed
    GET  /v1/openapi.json            this API's OpenAPI document
    GET  /                           the web dashboard, or its login form (daemon/dashboard.py);
                                     POST /login, GET /login?once=, POST /logout, /static/...

Every endpoint but health wants ``Authorization: Bearer <token>``, the token of
``<data_dir>/daemon.token`` (compared in constant time), or the dashboard's session cookie
(then a POST or DELETE also wants the page's CSRF header: 403 without); without either: 401.
Every response carries the dashboard's CSP (``dashboard.SecurityHeaders``). Every error is JSON
``{"error": {"code", "message", "hint"}}`` from a GlidingError (``status_of`` maps its class to
the status); a bug is one bounded log line (no frame's locals) and a 500. A request body may
have MAX_BODY_BYTES, an offset or event number MAX_OFFSET; a request over TCP whose ``Host``
is not this daemon's is refused (``hosts.HostCheck``: DNS rebinding). ``serve`` binds
loopback unless ``daemon.host`` says otherwise (then it warns), also ``daemon.socket`` (mode
0600), writes ``<data_dir>/daemon.json`` once it listens and removes it when it stops; one
daemon a data directory (``DaemonLock``).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import structlog
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gliding import __version__
from gliding.agents.approvals import NOTE_CHARS
from gliding.agents.steer import STEER_CHARS
from gliding.config.settings import Settings
from gliding.config.yamlsource import USER_FILE_MAX_BYTES
from gliding.core.events import EVENTS
from gliding.core.text import error_line, traceback_text
from gliding.daemon import queue as q
from gliding.daemon.dashboard import (
    CSRF_HEADER,
    SESSION_COOKIE,
    CSRFRefused,
    SecurityHeaders,
    Sessions,
    add_pages,
    check_csrf,
)
from gliding.daemon.dashboard_graph import board_graph
from gliding.daemon.events import DROPPED
from gliding.daemon.hosts import HostCheck
from gliding.daemon.jobs import DaemonLock, JobBusy, stop_error
from gliding.daemon.queue import JobStateError
from gliding.daemon.reading import job_record
from gliding.daemon.schedule import Schedule, ScheduleExists
from gliding.daemon.service import MAX_OFFSET, JobService, ServiceStopping
from gliding.errors import GlidingError, NotFoundError, SandboxError, UsageError
from gliding.tools.sandbox import Sandbox

log = structlog.get_logger("gliding.daemon")

MAX_BODY_BYTES = 2 * USER_FILE_MAX_BYTES  # a task file's text, JSON-escaped
MAX_PAGE_BYTES = 64_000
PAGE_BYTES = 16_000
MAX_LISTED = 1000
PING_S = 15.0  # an SSE comment this often keeps idle streams open through proxies
SHUTDOWN_GRACE_S = 5  # connections still open this long after a stop are closed


class AuthError(GlidingError):
    """No token, or not the daemon's."""

    code = "auth.failed"


class BodyTooLarge(UsageError):
    code = "request.too_large"


def status_of(error: GlidingError) -> int:
    """The HTTP status of ``error`` (a UsageError not named here: 400)."""
    if isinstance(error, AuthError):
        return 401
    if isinstance(error, CSRFRefused):
        return 403
    if isinstance(error, BodyTooLarge):
        return 413
    if isinstance(error, ServiceStopping):
        return 503
    if isinstance(error, JobStateError | JobBusy | ScheduleExists):
        return 409
    if isinstance(error, NotFoundError):
        return 404
    if isinstance(error, UsageError):
        return 400
    return 500


# -- the wire -----------------------------------------------------------------------------------

class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitIn(_Wire):
    task: str = Field(description="The task file's text (YAML), at most 256 KiB.")
    name: str = Field("task.yaml", description="The task file's name, for messages.")
    model: str | None = Field(None, description=(
        "local, local:/path.gguf, scripted:replies.yaml or a litellm string (default: the "
        "task's, else llm.model)."))
    base_dir: str | None = Field(None, description=(
        "Absolute directory a relative workspace (and scripted replies file) is taken from; "
        "default: the daemon's working directory."))


class SteerIn(_Wire):
    message: str = Field(min_length=1, max_length=STEER_CHARS, description=(
        "What to tell the running job: appended as a user message before the next model call "
        "of one of its sessions, and kept in its archive (replayed on resume)."))


class SteerOut(_Wire):
    job: str
    steer: str = Field(description="The message's IRI in the job's archive.")


class AnswerIn(_Wire):
    approve: bool = Field(description="true: the call runs, unchanged; false: it is not run")
    note: str = Field("", max_length=NOTE_CHARS, description=(
        "What the agent is told with the answer (why not, what to do instead)."))
    digest: str | None = Field(None, pattern="^[0-9a-f]{64}$", description=(
        "The request's digest as shown: refused (409) when the waiting call is another one."))


class Answer(_Wire):
    approved: bool
    by: str = Field(description="person, or timeout (approvals.timeout_s passed)")
    note: str
    at: float | None


class ApprovalOut(_Wire):
    """A tool call that asked for a person's approval (agents/approvals.py)."""

    approval: str = Field(description="Its id: <session>-<turn>")
    tool: str
    arguments: dict[str, Any] = Field(description="Exactly the arguments it runs with")
    digest: str = Field(description="SHA-256 of the tool and arguments: an answer binds to it")
    role: str
    session: str
    turn: int | None
    reason: str = Field(description="Why the policy asks")
    asked_at: float | None
    deadline: float | None = Field(description="Unix time when, unanswered, it is denied")
    answer: Answer | None = Field(description="None while it waits")


class Approvals(_Wire):
    job: str
    approvals: list[ApprovalOut]


class ScheduleIn(_Wire):
    name: str = Field(description="1-64 letters, digits, '.', '_' or '-'; names its jobs "
                                  "(<name>@<local time>).")
    cron: str = Field(max_length=200, description=(
        "Five fields: minute hour day-of-month month day-of-week (cronsim, as Debian's "
        "cron), e.g. '*/15 * * * *'."))
    task: str = Field(description="The task file's text (YAML), checked as POST /v1/jobs does.")
    task_name: str = Field("task.yaml", description="The task file's name, for messages.")
    tz: str = Field("UTC", max_length=100, description="The IANA time zone the expression is "
                                                       "read in, e.g. Europe/Paris.")
    missed: Literal["skip", "once"] = Field("skip", description=(
        "Due times missed while the daemon was down: skip (none run) or once (one "
        "catch-up run at the start)."))
    overlap: Literal["skip", "queue"] = Field("skip", description=(
        "A due time while its last job is queued or running: skip it, or queue a job."))
    model: str | None = Field(None, description="As POST /v1/jobs.")
    base_dir: str | None = Field(None, description="As POST /v1/jobs.")


class ScheduleOut(_Wire):
    name: str
    cron: str
    tz: str
    missed: str
    overlap: str
    task_name: str
    base_dir: str
    model: str | None
    created: float = Field(description="Seconds since the epoch")
    last_due: float = Field(description="The last due time acted on (created, at first)")
    last_job: str | None = Field(description="The last job it submitted")
    next_due: float | None = Field(description="Its next due time; null: never again")


class ScheduleList(_Wire):
    schedules: list[ScheduleOut]


class ForkIn(_Wire):
    at: str = Field(min_length=1, max_length=300, description=(
        "The step to fork from: a turn, DA/3 (session/turn), or its IRI"))
    workspace: str | None = Field(None, max_length=4096, description=(
        "Where the fork's workspace is restored (absolute; absent or empty). Default: the "
        "old job's workspace with -fork-<6 characters of the new job's id>"))


class Forked(_Wire):
    job: str
    state: str
    forked_from: str
    step: str = Field(description="The step it was forked at (session/turn)")
    entries: int = Field(description="L0 entries copied (replayed, not run again)")
    calls: int = Field(description="Model calls of the ledger copied (already paid)")
    workspace: str
    snapshot: str = Field(description="The IRI of the workspace snapshot restored")


class Submitted(_Wire):
    job: str
    state: str


class JobOut(_Wire):
    job: str
    name: str
    goal: str
    model: str | None
    workspace: str
    state: Literal["queued", "running", "cancelling", "cancelled", "finished", "interrupted",
                   "paused"]
    outcome: str | None = Field(description="success, failed, escalated, budget_exceeded, "
                                            "loop_detected, compaction_stalled, error: once "
                                            "finished")
    error: str | None = Field(description="What stopped or cancelled it")
    submitted: float = Field(description="Seconds since the epoch")
    started: float | None
    finished: float | None
    runs: int = Field(description="How often the daemon started it (a resume counts)")


class JobList(_Wire):
    total: int
    offset: int
    jobs: list[JobOut]


class Tokens(_Wire):
    prompt: int
    completion: int
    cost_usd: float | None = Field(description="USD; null when some call had no price")
    cost_known: bool = True
    cost_usd_at_least: float = Field(0.0, description="USD of the calls with a known cost")
    unpriced_calls: int = 0
    unpriced_models: list[str] = Field(default_factory=list,
                                       description="Models of the calls without a price")
    cost_free: str | None = Field(None, description="local or scripted: the job's model "
                                                    "costs nothing by nature")


class Progress(_Wire):
    turns: int
    turns_by_role: dict[str, int]
    last_turn: str | None
    tokens: Tokens
    resumes: int
    archive_status: str


class JobStatus(JobOut):
    progress: Progress | None = Field(description="From its archive, once it has one")
    archive: str | None
    events: int | None = Field(description="The last event's number, when known")
    approvals_waiting: list[ApprovalOut] = Field(description=(
        "Tool calls waiting for a person's approval (gliding approve / deny)"))


class EventOut(_Wire):
    """The data of every SSE event (its ``id`` is ``seq``, its ``event`` the name)."""

    seq: int
    at: float
    job: str
    event: str
    data: dict[str, Any]


class Page(_Wire):
    iri: str
    kind: str
    media_type: str
    size: int
    sha256: str
    offset: int
    length: int
    next_offset: int | None
    encoding: Literal["utf-8", "base64"]
    content: str
    meta: dict[str, Any]


class LinkOut(_Wire):
    path: str = Field(description="/login?once=<secret>: opens a dashboard session, once")
    expires_at: float = Field(description="Unix time when the link stops working")


class BoardNode(_Wire):
    iri: str
    type: str = Field(description="Its rdf:type's local name; empty when not known")


class BoardEdge(_Wire):
    source: str
    target: str
    property: str = Field(description="The property's local name")


class BoardProperty(_Wire):
    property: str
    value: str = Field(description="A literal of the node, clipped to 300 characters")


class BoardOut(_Wire):
    job: str
    graph: str = Field(description="The job's named graph on the blackboard")
    node: str | None = Field(description="The node it is drawn around; null: the whole graph")
    nodes: list[BoardNode]
    edges: list[BoardEdge]
    properties: list[BoardProperty] = Field(description="The literals of ``node``")


class Health(_Wire):
    status: Literal["ok"]


class ErrorDetail(_Wire):
    code: str
    message: str
    hint: str | None


class ErrorOut(_Wire):
    error: ErrorDetail


_BEARER = HTTPBearer(auto_error=False, description="The token in <data_dir>/daemon.token")
_COOKIE = APIKeyCookie(name=SESSION_COOKIE, auto_error=False, description=(
    f"The web dashboard's session; a POST or DELETE also needs the {CSRF_HEADER} header"))
# (module level: the route signatures are strings under `from __future__ import annotations`,
# which FastAPI evaluates in this module's namespace)


def error_response(error: GlidingError, status: int | None = None) -> JSONResponse:
    status = status or status_of(error)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = {"error": {"code": error.code, "message": error.message, "hint": error.hint}}
    return JSONResponse(body, status_code=status, headers=headers)


# -- the app ------------------------------------------------------------------------------------

def build_app(service: JobService, token: str) -> FastAPI:
    """The API over ``service``, guarded by ``token``."""
    app = FastAPI(title="Gliding daemon", version=__version__, openapi_url=None, docs_url=None,
                  redoc_url=None, description="Jobs of one data directory: submit, watch, "
                  "cancel, resume; archived items read back by IRI (docs/daemon.md).")
    expected = token.encode()
    sessions = Sessions()

    async def authorized(request: Request,
                         credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                Depends(_BEARER)],
                         session: Annotated[str | None, Depends(_COOKIE)]) -> None:
        if credentials is None and (csrf := sessions.csrf_of(session)) is not None:
            check_csrf(request, csrf)  # the dashboard's page, logged in
            return
        if credentials is None:
            raise AuthError("this endpoint needs the daemon's token",
                            hint="send Authorization: Bearer <the token in "
                                 "<data_dir>/daemon.token>")
        if not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise AuthError("wrong token", hint="use the token in <data_dir>/daemon.token of "
                                                "the daemon's data directory")

    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422, 500, 503)}
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorized)], responses=errors)

    @app.exception_handler(GlidingError)
    async def gliding_error(request: Request, exc: GlidingError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """A body that does not fit the schema: 422; a bad query, path or header argument (an
        offset out of range): 400, as any other bad argument."""
        first = exc.errors()[0] if exc.errors() else {}
        loc = tuple(first.get("loc", ()))
        where = ".".join(str(p)[:100] for p in loc if p != "body")
        status = 422 if not loc or loc[0] == "body" else 400
        message = str(first.get("msg", "invalid"))[:300]
        return error_response(UsageError(f"{where or 'request'}: {message}",
                                         hint="see /v1/openapi.json"), status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, GlidingError):  # a body cut off while FastAPI read it
            return error_response(exc.__cause__)
        error = (NotFoundError("no such endpoint", hint="see /v1/openapi.json")
                 if exc.status_code == 404 else UsageError(str(exc.detail)))
        return error_response(error, exc.status_code)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        # one bounded line, whatever the logging setup: never the frames' locals, which for
        # one bad request took seconds to render on this loop and thousands of lines
        log.error("daemon.api.crashed", path=request.url.path[:200],
                  error=error_line(f"{type(exc).__name__}: {exc}"),
                  exception=traceback_text(exc))
        return error_response(GlidingError(f"internal error: {type(exc).__name__}",
                                           hint="this is a bug in Gliding; the daemon's log "
                                                "has the traceback"), 500)

    @app.get("/v1/health", response_model=Health, summary="Whether the daemon answers")
    async def health() -> dict[str, Any]:
        return {"status": "ok"}

    @v1.post("/jobs", status_code=201, response_model=Submitted, summary="Queue a job",
              )
    async def submit(body: SubmitIn) -> dict[str, Any]:
        entry = await service.submit(body.task, body.name, model=body.model,
                                     base_dir=body.base_dir)
        return {"job": entry.job, "state": entry.state}

    @v1.get("/jobs", response_model=JobList, summary="The queue, newest first")
    async def jobs(limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 50,
                   offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0) -> dict[str, Any]:
        total, found = await service.jobs(limit, offset)
        return {"total": total, "offset": offset, "jobs": [job_record(e) for e in found]}

    @v1.get("/jobs/{job}", response_model=JobStatus, summary="How a job stands",
             )
    async def status(job: str) -> dict[str, Any]:
        return await service.status(job)

    @v1.get("/jobs/{job}/events", summary="The job's events (Server-Sent Events)",
             response_class=EventSourceResponse,
             openapi_extra={"responses": {"200": {"description": (
                 "text/event-stream; each event's data is an EventOut; a stream that fell "
                 "behind ends with an event 'dropped' whose data has 'after')"),
                 "content": {"text/event-stream": {"schema": EventOut.model_json_schema()}}}}})
    async def events(job: str, after: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                     follow: bool = True,
                     last_event_id: Annotated[str | None, Header()] = None
                     ) -> EventSourceResponse:
        await service.get(job)  # 404 before the stream starts
        if last_event_id and last_event_id.isascii() and last_event_id.isdigit():
            if len(last_event_id) > 16 or int(last_event_id) > MAX_OFFSET:
                raise UsageError("Last-Event-ID is not an event number of this daemon",
                                 hint="send the id of the last event received")
            after = max(after, int(last_event_id))
        return EventSourceResponse(_sse(service, job, after, follow), ping=PING_S)

    @v1.post("/jobs/{job}/cancel", response_model=JobOut, summary="Cancel a job",
              )
    async def cancel(job: str) -> dict[str, Any]:
        return job_record(await service.cancel(job))

    @v1.post("/jobs/{job}/fork", response_model=Forked, status_code=201,
             summary="Start a new job from a journaled step of this one")
    async def fork_job(job: str, body: ForkIn) -> dict[str, Any]:
        entry, held = await service.fork(job, body.at, body.workspace)
        return {"job": entry.job, "state": entry.state, "forked_from": job,
                "workspace": entry.workspace, **held}

    @v1.post("/jobs/{job}/interrupt", response_model=JobOut,
             summary="Stop a running job's current model or tool call and pause it")
    async def interrupt(job: str) -> dict[str, Any]:
        return job_record(await service.interrupt(job))

    @v1.post("/jobs/{job}/steer", response_model=SteerOut, status_code=202,
             summary="Tell a running job something before its next model call")
    async def steer(job: str, body: SteerIn) -> dict[str, Any]:
        return {"job": job, "steer": await service.steer(job, body.message)}

    @v1.get("/jobs/{job}/approvals", response_model=Approvals,
            summary="The job's tool calls that asked for approval, with their answers")
    async def approvals(job: str) -> dict[str, Any]:
        return {"job": job, "approvals": await service.approvals(job)}

    @v1.post("/jobs/{job}/approvals/{approval}", response_model=ApprovalOut,
             summary="Approve or deny a tool call waiting for a person")
    async def answer(job: str, approval: Annotated[str, PathParam(max_length=300)],
                     body: AnswerIn) -> dict[str, Any]:
        return await service.answer(job, approval, approve=body.approve, note=body.note,
                                    digest=body.digest)

    @v1.post("/jobs/{job}/resume", response_model=JobOut,
              summary="Queue an interrupted or cancelled job again")
    async def resume(job: str) -> dict[str, Any]:
        return job_record(await service.resume(job))

    @v1.get("/schedules", response_model=ScheduleList, summary="The recurring jobs")
    async def schedules() -> dict[str, Any]:
        found = await service.schedules.schedules()
        return {"schedules": [_schedule_record(s, due) for s, due in found]}

    @v1.post("/schedules", status_code=201, response_model=ScheduleOut,
             summary="Add a recurring job")
    async def add_schedule(body: ScheduleIn) -> dict[str, Any]:
        added = await service.schedules.add(
            body.name, body.cron, body.task, task_name=body.task_name, tz=body.tz,
            missed=body.missed, overlap=body.overlap, model=body.model, base_dir=body.base_dir)
        return _schedule_record(added, await service.schedules.next_due(added))

    @v1.delete("/schedules/{name}", response_model=ScheduleOut,
               summary="Remove a recurring job (its jobs stay)")
    async def remove_schedule(name: str) -> dict[str, Any]:
        return _schedule_record(await service.schedules.remove(name), None)

    @v1.get("/iri", response_model=Page, summary="Read an archived item back")
    async def read_iri(iri: Annotated[str, Query(max_length=2000)],
                       offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                       limit: Annotated[int, Query(ge=1, le=MAX_PAGE_BYTES)] = PAGE_BYTES
                       ) -> dict[str, Any]:
        return await service.read(iri, offset, limit)

    @v1.get("/jobs/{job}/board", response_model=BoardOut,
            summary="The job's blackboard around a node, as nodes and edges")
    async def board(job: str, node: Annotated[str | None, Query(max_length=2000)] = None,
                    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 200
                    ) -> dict[str, Any]:
        await service.get(job)
        found = service.blackboard()
        if found is None:
            raise NotFoundError("this daemon has no blackboard",
                                hint="see memory.blackboard in the daemon's config")
        return await anyio.to_thread.run_sync(board_graph, found, job, node, limit)

    @v1.post("/dashboard/links", status_code=201, response_model=LinkOut,
             summary="A one-time login link of the web dashboard")
    async def dashboard_link(
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
    ) -> dict[str, Any]:
        if credentials is None:  # a session may not renew itself (nor outlive a logout)
            raise AuthError("a login link needs the daemon's token, not a dashboard session",
                            hint="run gliding dashboard on the daemon's host")
        once, expires = sessions.link()
        return {"path": f"/login?once={once}", "expires_at": expires}

    @v1.get("/openapi.json", include_in_schema=False)
    async def openapi() -> dict[str, Any]:
        return await anyio.to_thread.run_sync(app.openapi)  # built once, ~0.1 s of CPU

    app.include_router(v1)
    add_pages(app, sessions, token, [*EVENTS, "dropped"])
    app.add_middleware(_BodyLimit)
    app.add_middleware(HostCheck, configured=service.settings.daemon.host,
                       answer=error_response)
    app.add_middleware(SecurityHeaders)
    return app


def served_app(service: JobService, token: str) -> ASGIApp:
    """The app ``serve`` runs: ``build_app`` with the errors it answered kept from the server.
    Starlette re-raises every error it answered with a 500 (``crashed`` logged it as one
    bounded line), and uvicorn would log it again, as a whole traceback with the whole
    message (one provider error carried 806 KB). The security headers are added outside
    Starlette's error middleware too, so a 500 carries them."""
    app = SecurityHeaders(build_app(service, token))

    async def answered(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        except Exception:
            if scope["type"] != "http":
                raise

    return answered


def _schedule_record(schedule: Schedule, next_due: float | None) -> dict[str, Any]:
    """A schedule as the API shows it: all but its task's text."""
    out = {k: v for k, v in vars(schedule).items() if k != "task"}
    return out | {"next_due": next_due}


async def _sse(service: JobService, job: str, after: int, follow: bool
               ) -> AsyncIterator[ServerSentEvent]:
    async for record in service.events(job, after=after, follow=follow):
        if record["event"] == DROPPED:
            yield ServerSentEvent(event="dropped", data=json.dumps(record))
            return
        yield ServerSentEvent(data=json.dumps(record, ensure_ascii=False, default=str),
                              event=record["event"], id=str(record["seq"]))


class _BodyLimit:
    """Refuse a request body over MAX_BODY_BYTES (413, read no further)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = BodyTooLarge(f"the request body is larger than {MAX_BODY_BYTES} bytes",
                               hint="a task file may have 256 KiB")
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await error_response(too_big)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    raise too_big
            return message

        await self.app(scope, counted, send)


# -- serving ------------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _tcp_socket(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="check daemon.host (--host)") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port (0: any free one)") from exc
    return sock


def _unix_socket(path: Path) -> socket.socket:
    """A unix socket at ``path`` only its owner may connect to (mode 0600). A stale socket
    there is replaced; one that answers, or a file that is no socket, is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise UsageError(f"{path} exists and is not a socket", hint="pick another --socket")
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # nobody listens: a socket a killed daemon left
            else:
                raise UsageError(f"{path} is in use by another server",
                                 hint="pick another --socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # born 0600: nobody else can connect, not even for a moment
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {path}: {exc.strerror or exc}",
                         hint="pick another --socket") from exc
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


async def serve_async(settings: Settings, *, announce: Callable[[dict[str, Any]], None],
                      warn: Callable[[str], None], base_dir: Path | None = None) -> None:
    """Serve the daemon of ``settings.data_dir`` until SIGINT or SIGTERM; ``announce(info)``
    once it listens (what daemon.json says); ``warn(line)`` for a host that is not loopback.

    Raises:
        DaemonBusy: a daemon serves the data directory already. UsageError: the host, port
            or socket cannot be listened on. SandboxError: commands cannot be confined here.
        ArchiveError: the data directory, token or queue cannot be used.
    """
    import uvicorn

    daemon = settings.daemon
    data_dir = settings.data_dir
    if not is_loopback(daemon.host):
        warn(f"warning: the API listens on {daemon.host}, not only on this machine: anyone "
             "who reaches it and holds the token can run commands here (daemon.host)")
    lock = DaemonLock(data_dir).acquire()
    sockets: list[socket.socket] = []
    unix: Path | None = None
    try:
        token = await anyio.to_thread.run_sync(q.ensure_token, data_dir)
        await anyio.to_thread.run_sync(_require_sandbox, settings)
        sockets.append(_tcp_socket(daemon.host, daemon.port))
        if daemon.socket is not None:
            where = daemon.socket
            unix = await anyio.to_thread.run_sync(lambda: Path(where).expanduser().resolve())
            sockets.append(_unix_socket(unix))
        service = JobService(settings, base_dir=base_dir)
        async with service.running():
            class Server(uvicorn.Server):
                @contextlib.contextmanager
                def capture_signals(self) -> Iterator[None]:
                    yield  # the signals stop the service first (below)

            app = await anyio.to_thread.run_sync(served_app, service, token)  # 0.1-0.3 s of CPU
            server = Server(uvicorn.Config(
                app, log_config=None, access_log=False, lifespan="off",
                log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S))

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        log.info("daemon.stopping", signal=signal.Signals(signum).name)
                        service.stop()
                        server.should_exit = True
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_on_signal)
                done = anyio.Event()

                async def run_server() -> None:
                    try:
                        await server.serve(sockets=sockets)
                    finally:
                        done.set()

                tg.start_soon(run_server)
                while not server.started and not done.is_set():  # noqa: ASYNC110 - uvicorn
                    await anyio.sleep(0.01)  # sets a plain flag when it listens, no event
                if server.started:
                    info = {"pid": os.getpid(), "url": _url(sockets[0]),
                            "socket": str(unix) if unix else None, "started": time.time(),
                            "data_dir": str(data_dir), "version": __version__}
                    await anyio.to_thread.run_sync(q.write_info, data_dir, info)
                    log.info("daemon.serving", url=info["url"], socket=info["socket"],
                             max_jobs=daemon.max_jobs)
                    announce(info)
                await done.wait()
                service.stop()
                tg.cancel_scope.cancel()
    finally:
        q.remove_info(data_dir, os.getpid())
        for sock in sockets:
            sock.close()
        if unix is not None:
            with contextlib.suppress(OSError):
                unix.unlink()
        lock.release()


def _require_sandbox(settings: Settings) -> None:
    """Refuse to serve where no job could run its commands (SandboxError)."""
    try:
        Sandbox.of(settings.tools, hidden=(settings.data_dir,)).require()
    except SandboxError as exc:
        raise SandboxError(f"the daemon cannot start: {exc.message}", hint=exc.hint) from exc


def serve(settings: Settings, *, announce: Callable[[dict[str, Any]], None],
          warn: Callable[[str], None]) -> None:
    """``gliding daemon``: serve until SIGINT or SIGTERM, then exit cleanly (running jobs
    stop at a safe point and resume at the next start). Raises as ``serve_async``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    async def main() -> None:
        try:
            await serve_async(settings, announce=announce, warn=warn)
        except Exception as exc:  # one GlidingError, picked while a loop runs (stop_error)
            error = stop_error(exc)
            if error is None or error is exc:
                raise
            raise error from exc

    anyio.run(main)
