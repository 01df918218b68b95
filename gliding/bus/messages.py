"""The typed messages of the memory bus and their JSON wire form.

Every message is a frozen pydantic model with a ``type`` discriminator that does not depend on the
topic it travels on, so a message decodes to the same class wherever it is received:

    type            class            direction
    assignment      Assignment       supervisor -> agent: what to do this cycle/attempt
    plan            PlanMsg          PA -> supervisor: the plan steps
    artifact        ArtifactMsg      DA -> supervisor: files written, the results that wrote them
    check_report    CheckReportMsg   CA -> supervisor: per-check verdicts with evidence
    decision        DecisionMsg      AA -> supervisor: done, another cycle, or escalate
    agent_done      AgentDone        agent -> observers: the agent finished its session
    archived        ArchivedMsg      agent -> ingestion: a turn or tool result reached L0
    job_event       JobEvent         anyone -> observers: progress (role started, turn done ...)
    work            WorkItem         dispatcher -> worker pool: an assignment offered (with the
                                     task record, model and briefing a remote worker needs)
    claim           Claim            worker -> dispatcher: I take it (or ``declined``: full)
    grant           GrantMsg         dispatcher -> worker: it is yours, or it is not
    heartbeat       Heartbeat        worker -> dispatchers: alive, holding these keys
    archive_request ArchiveRequest   worker -> the job's process: an L0 operation (bytes base64)
    archive_reply   ArchiveReply     the job's process -> worker: its result or error
    knowledge_request KnowledgeRequest  worker -> the job's process: recall, kg_search or a
                                     read-only query of the job's long-term memory
    knowledge_reply KnowledgeReply   the job's process -> worker: its result or error
    coherence       CoherenceMsg     cache <-> directory: one MESI protocol message
                                     (``memory/coherence/protocol.py`` names its kinds)

The four answers (plan, artifact, check_report, decision) share the fields of ``Answer``: the
``job``, ``role``, ``cycle``, ``attempt`` and ``step`` of the Assignment they answer (the
supervisor correlates them by these and ignores anything else), how the agent's session ended
(``status``, ``error``), what it spent (``turns``, ``usage``) and one line per turn (``lines``).

The archive and knowledge requests share the fields of ``Request`` (``id``, ``job``, ``worker``,
``op``, ``args``), their replies those of ``Reply`` (``id``, ``ok``, ``result``, ``code``,
``error``).

``BusMessage`` is their union; ``to_json`` / ``from_json`` give the wire form that network
backends send. The models are frozen; their dict and list fields are shared, not copied, between
in-process subscribers, so receivers must not mutate them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from gliding.core.events import SCHEMA_VERSION, Event, event_data
from gliding.core.plan import STEP_ID, normalize_steps
from gliding.errors import BusError

AgentStatus = Literal["finished", "turn_cap", "budget", "loop_detected", "compaction_stalled",
                      "failed", "unavailable"]
# "unavailable": no model answered (ProviderUnavailable on a worker): the job stops
# interrupted, resumable, and the assignment is asked again on resume; "loop_detected" and
# "compaction_stalled": a guard of the agent loop stopped the session (the job's outcome)


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> str:
        """The JSON wire form, ``type`` included; ``from_json`` reads it back."""
        return self.model_dump_json()


class Assignment(_Message):
    """Supervisor -> agent: the work of one role in one cycle and attempt.

    ``options`` restricts AA's decision; ``turn_base`` is how many turns the role used before
    this assignment, so turn numbers (and their L0 IRIs) are the same when a job resumes.
    ``step`` is the id of the plan step a DA of the exploratory pipeline works on (None: the
    whole plan); the answer carries it back, and the DA's session is named after it.
    """

    type: Literal["assignment"] = "assignment"
    job: str
    role: str
    cycle: NonNegativeInt
    attempt: NonNegativeInt
    goal: str
    instructions: str
    options: list[str] = Field(default_factory=list)
    turn_base: NonNegativeInt = 0
    step: str | None = None


class UsageWire(_Message):
    """Tokens and cost, as the wire carries them (``core.messages.Usage`` in code)."""

    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    cached_tokens: NonNegativeInt = 0
    cost_usd: float = 0.0  # of the calls whose cost is known
    unpriced_calls: NonNegativeInt = 0  # calls whose cost nobody knows (no price for the model)


class TurnLine(_Message):
    """One turn of an agent for the report: what it did, and the full turn's IRI in L0."""

    role: str
    turn: NonNegativeInt
    summary: str
    iri: str


class Answer(_Message):
    """What every answer to an Assignment carries besides its own result."""

    job: str
    role: str
    cycle: NonNegativeInt
    attempt: NonNegativeInt = 0
    status: AgentStatus = "finished"
    error: str | None = None
    turns: NonNegativeInt = 0
    usage: UsageWire = UsageWire()
    lines: list[TurnLine] = Field(default_factory=list)
    context_tokens: NonNegativeInt = 0  # prompts the context engine built, cl100k
    baseline_tokens: NonNegativeInt = 0  # the same prompts had every message been appended
    schema_tokens: NonNegativeInt = 0  # the tool schemas of the role's last prompt
    step: str | None = None  # the plan step of the Assignment answered (exploratory DA)
    # calls that repeated an earlier call whose result the prompt no longer held whole
    rereads: int = Field(0, ge=0, le=1_000_000)  # post-compaction re-reads of the session


class PlanStep(_Message):
    """One plan step: its ``id``, its text and the ids of the steps to be done before it."""

    id: str = Field(pattern=STEP_ID.pattern)
    text: str = Field(min_length=1)
    depends_on: list[str] = Field(default_factory=list)


class PlanMsg(Answer):
    """PA -> supervisor: the plan's steps; ``turn_iri`` points at the full turn in L0.

    ``steps`` accepts plain strings (each depending on the one before) and step objects, and
    is always well formed (``core.plan.normalize_steps``: unique ids, known dependencies, no
    cycle); ``notes`` say what PA's plan needed changing for that.
    """

    type: Literal["plan"] = "plan"
    role: str = "PA"
    steps: list[PlanStep]
    turn_iri: str | None = None
    notes: list[str] = Field(default_factory=list)

    @field_validator("steps", mode="before")
    @classmethod
    def _well_formed(cls, value: Any) -> list[PlanStep]:
        return plan_steps(value)[0]

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.steps]


def plan_steps(raw: Any) -> tuple[list[PlanStep], list[str]]:
    """``core.plan.normalize_steps`` of ``raw`` (step objects, dicts or strings) as PlanSteps,
    with its notes."""
    items = raw if isinstance(raw, list | tuple) else [raw]
    plain = [s.model_dump() if isinstance(s, PlanStep) else s for s in items]
    steps, notes = normalize_steps(plain)
    return [PlanStep(id=i, text=t, depends_on=list(d)) for i, t, d in steps], notes


class ArtifactMsg(Answer):
    """DA -> supervisor: what one attempt produced: ``written`` maps each file DA wrote in the
    workspace to the IRI of the tool result that wrote it; ``iris`` are all its results."""

    type: Literal["artifact"] = "artifact"
    role: str = "DA"
    summary: str
    files: list[str] = Field(default_factory=list)
    written: dict[str, str] = Field(default_factory=dict)
    iris: list[str] = Field(default_factory=list)


class CheckOutcome(_Message):
    """The verdict on one success check, with the evidence it rests on."""

    check: str  # its description, e.g. "file hello.txt contains 'Hi'"
    status: Literal["pass", "fail"]
    evidence: str
    expected: str | None = None
    remedy: str = ""  # what would make it pass, e.g. "Write the file hello.txt containing ..."
    path: str | None = None  # the workspace file it is about, if any

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class CheckReportMsg(Answer):
    """CA -> supervisor: one CheckOutcome per check; ``verified_by`` says who ran them ("CA"
    when CA's run_checks call did, "CA (auto)" when CA finished without it)."""

    type: Literal["check_report"] = "check_report"
    role: str = "CA"
    results: list[CheckOutcome]
    passed: bool
    notes: str = ""
    verified_by: str = "CA"


class DecisionMsg(Answer):
    """AA -> supervisor: finish, run another PDCA cycle, or hand the job to a human."""

    type: Literal["decision"] = "decision"
    role: str = "AA"
    decision: Literal["done", "another_cycle", "escalate"]
    report: str


class AgentDone(_Message):
    """Agent -> observers: the agent's session ended (``status`` says how)."""

    type: Literal["agent_done"] = "agent_done"
    job: str
    role: str
    status: str
    turns: NonNegativeInt
    summary: str


class ArchivedMsg(_Message):
    """Agent -> ingestion: an item reached L0 (``kind`` turn or result); the content stays in
    L0, ``summary`` is the turn's one line."""

    type: Literal["archived"] = "archived"
    job: str
    iri: str
    kind: Literal["turn", "result"]
    role: str
    turn: NonNegativeInt
    summary: str = ""
    turn_iri: str = ""


class JobEvent(_Message):
    """Progress for observers: ``event`` names one of ``gliding.core.events`` (``role.started``,
    ``turn``), ``data`` holds its fields, ``schema_version`` the vocabulary's version. An observer
    skips an event it does not know (``events.parse`` gives None)."""

    type: Literal["job_event"] = "job_event"
    job: str
    event: str
    data: dict[str, Any] = Field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def of(cls, job: str, event: Event) -> JobEvent:
        return cls(job=job, event=event.name, data=event_data(event))


# ---- jobs whose agents run on `gliding worker` processes (daemon/dispatch.py, workers.py) --
class WorkItem(_Message):
    """An assignment offered to the worker pool; ``key`` names it, ``epoch`` the hand-out."""

    type: Literal["work"] = "work"
    key: str
    epoch: PositiveInt
    assignment: Assignment
    task_record: dict[str, Any]
    model: str
    briefing: str = ""
    origin: str = ""  # the data directory of the job's process (a worker on its host shares it)
    # > 0: the job runs a coherence directory with this lease (a worker may read its board)
    coherence_lease_s: NonNegativeFloat = 0.0
    # the job span's W3C traceparent: a worker's spans join the job's trace ("": untraced)
    trace: str = Field("", pattern=r"^(00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})?$")


class Claim(_Message):
    """A worker asks for the key it was offered; ``declined``: it is full, offer it again."""

    type: Literal["claim"] = "claim"
    job: str
    key: str
    epoch: PositiveInt
    worker: str
    declined: bool = False


class GrantMsg(_Message):
    type: Literal["grant"] = "grant"
    job: str
    key: str
    epoch: PositiveInt
    worker: str
    granted: bool
    reason: str = ""
    item: str = ""  # granted: the digest of the offer (bus/auth.py), which the worker checks


class Heartbeat(_Message):
    """A worker is alive; ``held`` maps each key it works on to the epoch it was granted."""

    type: Literal["heartbeat"] = "heartbeat"
    worker: str
    roles: list[str] = Field(default_factory=list)
    held: dict[str, PositiveInt] = Field(default_factory=dict)
    free: NonNegativeInt = 0  # assignments it could take now


class Request(_Message):
    """Worker -> the job's process: operation ``op`` with ``args``, answered by a Reply of the
    same ``id`` on the worker's own topic (``bus/rpc.py``). Each kind narrows ``type`` and
    ``op``; declaring them here keeps the fields in wire order."""

    type: str
    id: str
    job: str
    worker: str
    op: str
    args: dict[str, Any] = Field(default_factory=dict)


class Reply(_Message):
    """The answer to the request ``id``: ``result`` (JSON values) or an error's code and text."""

    type: str
    id: str
    ok: bool
    result: Any = None
    code: str = ""
    error: str = ""


ArchiveOp = Literal["put", "put_turn", "find", "read_text", "warm", "calls"]


class ArchiveRequest(Request):
    """One ``ArchivePort`` call of a worker's agent, for the job's process to carry out."""

    type: Literal["archive_request"] = "archive_request"
    op: ArchiveOp


class ArchiveReply(Reply):
    type: Literal["archive_reply"] = "archive_reply"


KnowledgeOp = Literal["ping", "recall", "search", "query"]


class KnowledgeRequest(Request):
    """One long-term memory call of a worker's agent, for the job's process to answer."""

    type: Literal["knowledge_request"] = "knowledge_request"
    op: KnowledgeOp


class KnowledgeReply(Reply):
    type: Literal["knowledge_reply"] = "knowledge_reply"


CoherenceKind = Literal[
    "read_miss", "write_request", "inv_ack", "downgrade_ack", "write_back", "depart",
    "fill", "write_ack", "invalidate", "downgrade",
]


class CoherenceMsg(_Message):
    """One message of the MESI protocol between an agent's cache and the directory.

    ``kind`` names the protocol message; the other fields are those it has (``sender``: the
    agent, for messages to the directory; ``grant``: S or E, for a fill). Unused fields keep
    their defaults.
    """

    type: Literal["coherence"] = "coherence"
    kind: CoherenceKind
    iri: str = Field(min_length=1, max_length=4096)
    sender: str = ""
    rid: NonNegativeInt = 0
    seq: NonNegativeInt = 0
    version: NonNegativeInt = 0
    value: str | None = None
    grant: Literal["S", "E"] | None = None
    kept: bool = False
    shared: bool = False


BusMessage = Annotated[
    Assignment | PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg | AgentDone | ArchivedMsg
    | JobEvent | WorkItem | Claim | GrantMsg | Heartbeat | ArchiveRequest | ArchiveReply
    | KnowledgeRequest | KnowledgeReply | CoherenceMsg,
    Field(discriminator="type"),
]
"""Any message the bus carries, discriminated by ``type``."""

AnswerMsg = PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg
"""What an agent answers an Assignment with."""

ReplyMsg = ArchiveReply | KnowledgeReply
"""What the process of a job answers a worker's Request with."""

MESSAGE_TYPES: tuple[type[_Message], ...] = (
    Assignment,
    PlanMsg,
    ArtifactMsg,
    CheckReportMsg,
    DecisionMsg,
    AgentDone,
    ArchivedMsg,
    JobEvent,
    WorkItem,
    Claim,
    GrantMsg,
    Heartbeat,
    ArchiveRequest,
    ArchiveReply,
    KnowledgeRequest,
    KnowledgeReply,
    CoherenceMsg,
)

_ADAPTER: TypeAdapter[BusMessage] = TypeAdapter(BusMessage)


def is_message(value: object) -> bool:
    """Whether ``value`` is one of the bus message types."""
    return isinstance(value, MESSAGE_TYPES)


def to_json(message: BusMessage) -> str:
    """The JSON wire form of ``message``.

    Raises:
        BusError: ``message`` is not a bus message.
    """
    if not is_message(message):
        raise BusError(
            f"{type(message).__name__} is not a bus message",
            hint="send one of gliding.bus.messages.MESSAGE_TYPES",
        )
    return message.to_json()


def from_json(data: str | bytes) -> BusMessage:
    """Decode a message from its wire form into the class its ``type`` names.

    Raises:
        BusError: ``data`` is not JSON, has an unknown ``type``, or does not validate.
    """
    try:
        return _ADAPTER.validate_json(data)
    except ValidationError as exc:
        raise BusError(
            f"not a valid bus message: {exc.error_count()} error(s): {exc.errors()[0]['msg']}",
            hint="the sender and receiver may run different Gliding versions",
        ) from exc
