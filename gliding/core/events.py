"""Job events: the one vocabulary of progress news, for every emitter and every client.

An event is a frozen dataclass here; its ``name`` (dotted, ``role.started``) and its fields
are what travels: a ``JobEvent`` on the bus carries ``event`` (the name), ``data`` (the fields,
``event_data``) and ``schema`` (``SCHEMA_VERSION``); the daemon writes the same, numbered, to
its event log and streams it as Server-Sent Events (docs/daemon.md, "Job events").

The agent loop, the worker, the supervisor, the dispatcher and the composition root build
events from these classes; the daemon adds its own (``job.queued`` ...). Clients (the CLI's
progress lines and ``gliding logs``, the MCP server) look events up with ``parse``; a name
they do not know, or fields of another shape, is news from a newer Gliding or a forged
message: ``parse`` gives None and the client skips it, never fails on it.

``SCHEMA_VERSION`` grows when a field is removed or changes its meaning; adding an event or an
optional field keeps it. Optional fields (default None) are left out of ``data`` when unset.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

SCHEMA_VERSION = 1
"""The version of the event vocabulary, carried by every JobEvent and every streamed record."""


@dataclass(frozen=True)
class Event:
    """One kind of job event; subclasses set ``name`` and declare the fields."""

    name: ClassVar[str]


# -- the supervisor: the PDCA flow of a job ----------------------------------------------------

@dataclass(frozen=True)
class JobStarted(Event):
    name: ClassVar[str] = "job.started"
    pipeline: list[str]  # the roles, in order
    kind: str  # standard, emergency, simple, exploratory, explicit
    reason: str
    goal: str


@dataclass(frozen=True)
class PlanNotes(Event):
    name: ClassVar[str] = "plan.notes"
    cycle: int
    notes: list[str]  # how the plan was made well formed (repeats merged, cycles broken)


@dataclass(frozen=True)
class CheckReport(Event):
    name: ClassVar[str] = "check.report"
    passed: bool
    next: str  # correct, give_up, ... (scheduler.policy.after_check)
    cycle: int
    attempt: int
    failed: list[str]  # "<check>: <evidence>" of each failed check


@dataclass(frozen=True)
class JobFinished(Event):
    name: ClassVar[str] = "job.finished"
    outcome: str | None  # success, failure, ...; null when a resumed job had ended unrecorded


# -- the agents -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoleStarted(Event):
    name: ClassVar[str] = "role.started"
    role: str
    cycle: int
    attempt: int
    step: str | None = None  # a plan step's DA (exploratory pipeline)
    session: str | None = None  # its session, with the step
    worker: str | None = None  # the `gliding worker` running it; None: the job's process


@dataclass(frozen=True)
class RoleFinished(Event):
    name: ClassVar[str] = "role.finished"
    role: str
    status: str  # finished, turn_cap, budget, loop_detected, compaction_stalled, failed, ...
    turns: int
    replayed: int  # turns read back from the archive on resume
    step: str | None = None
    session: str | None = None
    worker: str | None = None


@dataclass(frozen=True)
class Turn(Event):
    name: ClassVar[str] = "turn"
    role: str
    session: str
    turn: int
    action: str
    summary: str
    prompt_tokens: int
    completion_tokens: int
    job_prompt_tokens: int
    job_completion_tokens: int
    job_cost_usd: float  # the calls whose price is known
    job_unpriced_calls: int
    cost_free: str | None = None  # the model's backend when it costs nothing (local, scripted)
    # the prompt Gliding built for this call vs the naive one (the session's whole history,
    # appended), in the context engine's tokens; what of it was cached: as the provider
    # reported (cached_source "provider"), else as a prefix cache would have (``simulated``,
    # context/prompt_meter.py); the session's compactions so far
    built_tokens: int | None = None
    naive_tokens: int | None = None
    cached_tokens: int | None = None
    cached_source: str | None = None
    compactions: int | None = None


@dataclass(frozen=True)
class GuardTripped(Event):
    """A guard of the agent loop stopped a session; the job ends with ``reason`` as its
    outcome (``loop_detected``: the same tool call too often in a row; ``compaction_stalled``:
    compaction cannot keep the prompt under the window's high-water mark)."""

    name: ClassVar[str] = "guard.tripped"
    role: str
    session: str
    turn: int
    reason: str  # loop_detected or compaction_stalled
    detail: str  # what tripped it, one line


@dataclass(frozen=True)
class MemoryWithheld(Event):
    """A worker runs an assignment without the knowledge tools (``kg_search``,
    ``knowledge_query``, ``recall`` of earlier jobs): it cannot reach the job's blackboard, and
    its own store would answer every query with nothing."""

    name: ClassVar[str] = "memory.withheld"
    role: str
    worker: str
    reason: str  # one line: why, and what would give the tools back


@dataclass(frozen=True)
class LLMRetry(Event):
    name: ClassVar[str] = "llm.retry"
    role: str
    session: str
    turn: int
    model: str
    fault: str
    retry: int
    retries: int
    delay_s: float
    next_model: str | None = None


@dataclass(frozen=True)
class LLMFallback(LLMRetry):
    name: ClassVar[str] = "llm.fallback"


@dataclass(frozen=True)
class ModelDelta(Event):
    """A piece of a model's reply as it streams in (``llm.stream``): the turn's reply so far
    is the ``text`` of its deltas in ``seq`` order since the turn's last ``model.discarded``.
    Pieces are batched (``gliding/agents/streaming.py``), not one a token."""

    name: ClassVar[str] = "model.delta"
    session: str
    turn: int
    seq: int  # 1, 2, ... within the turn, never reset
    text: str
    tool: str | None = None  # the text is of this tool call's JSON arguments; None: content


@dataclass(frozen=True)
class ModelDiscarded(Event):
    """The deltas of a turn since its last ``model.discarded`` are void: the call that sent
    them failed mid-way (a stream cut), and is retried or fails the turn."""

    name: ClassVar[str] = "model.discarded"
    session: str
    turn: int
    reason: str  # what happened, e.g. "connection failed"
    chars: int  # the characters of the deltas made void


# -- the composition root and the dispatcher --------------------------------------------------

@dataclass(frozen=True)
class JobSandbox(Event):
    name: ClassVar[str] = "job.sandbox"
    confined: bool
    line: str  # what the sandbox hides and allows


@dataclass(frozen=True)
class ToolchainRefused(Event):
    name: ClassVar[str] = "job.toolchain.refused"
    path: str
    what: str
    why: str


@dataclass(frozen=True)
class WorkspaceChanged(Event):
    name: ClassVar[str] = "job.workspace_changed"


@dataclass(frozen=True)
class MCPServerUnavailable(Event):
    name: ClassVar[str] = "mcp.server.unavailable"
    server: str
    reason: str


@dataclass(frozen=True)
class Steered(Event):
    name: ClassVar[str] = "steer.taken"
    session: str  # the session whose next model call got it
    turn: int
    steer: str  # its IRI in L0
    text: str  # the message, one line, clipped


@dataclass(frozen=True)
class ApprovalRequested(Event):
    name: ClassVar[str] = "approval.requested"
    session: str
    turn: int
    approval: str  # its id (<session>-<turn>): gliding approve JOB --id ID
    tool: str
    arguments: str  # the arguments as JSON, one line, clipped
    digest: str  # SHA-256 of the tool and its whole arguments: what an answer binds to
    reason: str  # why the policy asks
    deadline: float  # Unix time when an unanswered call is denied


@dataclass(frozen=True)
class ApprovalAnswered(Event):
    name: ClassVar[str] = "approval.answered"
    session: str
    turn: int
    approval: str
    approved: bool
    by: str  # person, or timeout
    note: str | None = None  # what the person said, one line, clipped


@dataclass(frozen=True)
class HookRefused(Event):
    name: ClassVar[str] = "hook.refused"
    hook: str  # its command, one line, clipped
    tool: str
    session: str
    turn: int
    reason: str  # what it said on stderr


@dataclass(frozen=True)
class HookFailed(Event):
    name: ClassVar[str] = "hook.failed"
    hook: str
    point: str  # before_tool, after_tool, before_compaction, after_compaction, role_end, job_end
    error: str  # how it ended (exit code, timeout) and what it said
    tool: str | None = None


@dataclass(frozen=True)
class WorkGranted(Event):
    name: ClassVar[str] = "work.granted"
    key: str  # the assignment's work key
    worker: str  # the worker the job's dispatcher granted it to
    role: str
    cycle: int
    attempt: int
    step: str | None = None
    session: str | None = None


@dataclass(frozen=True)
class WorkLapsed(Event):
    name: ClassVar[str] = "work.lapsed"
    key: str  # the assignment's work key
    worker: str
    silent_s: float


# -- the daemon's own ---------------------------------------------------------------------------

@dataclass(frozen=True)
class JobQueued(Event):
    name: ClassVar[str] = "job.queued"
    name_: str | None = dataclasses.field(default=None, metadata={"key": "name"})
    goal: str | None = None
    model: str | None = None  # the model it was submitted with
    resume: bool | None = None  # queued again to resume


@dataclass(frozen=True)
class JobDispatched(Event):
    name: ClassVar[str] = "job.dispatched"
    run: int
    running: int


@dataclass(frozen=True)
class JobCancelled(Event):
    name: ClassVar[str] = "job.cancelled"
    ran: bool


@dataclass(frozen=True)
class JobPaused(Event):
    name: ClassVar[str] = "job.paused"
    reason: str  # who paused it, and what runs it on


@dataclass(frozen=True)
class JobStopped(Event):
    name: ClassVar[str] = "job.stopped"
    code: str
    error: str
    hint: str | None = None


@dataclass(frozen=True)
class JobSuspended(Event):
    name: ClassVar[str] = "job.suspended"
    reason: str


@dataclass(frozen=True)
class StreamDropped(Event):
    name: ClassVar[str] = "stream.dropped"
    reason: str


EVENTS: dict[str, type[Event]] = {cls.name: cls for cls in (
    JobStarted, PlanNotes, CheckReport, JobFinished, RoleStarted, RoleFinished, Turn,
    GuardTripped, MemoryWithheld, LLMRetry, LLMFallback, ModelDelta, ModelDiscarded,
    JobSandbox, ToolchainRefused,
    WorkspaceChanged, MCPServerUnavailable, Steered, ApprovalRequested, ApprovalAnswered,
    HookRefused, HookFailed, WorkGranted,
    WorkLapsed, JobQueued, JobDispatched, JobCancelled, JobPaused, JobStopped, JobSuspended,
    StreamDropped)}
"""Every event, by name."""


def event_data(event: Event) -> dict[str, Any]:
    """The fields of ``event`` as the wire carries them (optional ones left out when unset)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if value is None and f.default is None:
            continue
        out[f.metadata.get("key", f.name)] = value
    return out


def parse(name: str, data: Any) -> Event | None:
    """The event ``name`` with ``data``, or None when the name is unknown or the data has
    another shape (a newer Gliding's event, or a forged one): the caller skips it."""
    cls = EVENTS.get(name)
    if cls is None or not isinstance(data, dict):
        return None
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("key", f.name)
        if key in data:
            kwargs[f.name] = data[key]
    try:
        return cls(**kwargs)
    except TypeError:  # a required field missing
        return None


def field_names(cls: type[Event]) -> list[str]:
    """The data keys of ``cls``, as documented (optional ones marked with ``?``)."""
    return [f.metadata.get("key", f.name) + ("?" if f.default is None else "")
            for f in dataclasses.fields(cls)]
