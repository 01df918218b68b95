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

The four answers (plan, artifact, check_report, decision) share the fields of ``Answer``: the
``job``, ``role``, ``cycle`` and ``attempt`` of the Assignment they answer (the supervisor
correlates them by these and ignores anything else), how the agent's session ended (``status``,
``error``), what it spent (``turns``, ``usage``) and one line per turn (``lines``).

``BusMessage`` is their union; ``to_json`` / ``from_json`` give the wire form that network
backends send. The models are frozen; their dict and list fields are shared, not copied, between
in-process subscribers, so receivers must not mutate them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter, ValidationError

from gliding.errors import BusError

AgentStatus = Literal["finished", "turn_cap", "budget", "failed"]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> str:
        """The JSON wire form, ``type`` included; ``from_json`` reads it back."""
        return self.model_dump_json()


class Assignment(_Message):
    """Supervisor -> agent: the work of one role in one cycle and attempt.

    ``options`` restricts AA's decision; ``turn_base`` is how many turns the role used before
    this assignment, so turn numbers (and their L0 IRIs) are the same when a job resumes.
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


class UsageWire(_Message):
    """Tokens and cost, as the wire carries them (``core.messages.Usage`` in code)."""

    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    cached_tokens: NonNegativeInt = 0
    cost_usd: float = 0.0


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


class PlanMsg(Answer):
    """PA -> supervisor: the plan's steps; ``turn_iri`` points at the full turn in L0."""

    type: Literal["plan"] = "plan"
    role: str = "PA"
    steps: list[str]
    turn_iri: str | None = None


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
    """Progress for observers: ``event`` is a dotted name (``role.started``, ``turn.done``)."""

    type: Literal["job_event"] = "job_event"
    job: str
    event: str
    data: dict[str, Any] = Field(default_factory=dict)


BusMessage = Annotated[
    Assignment | PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg | AgentDone | ArchivedMsg
    | JobEvent,
    Field(discriminator="type"),
]
"""Any message the bus carries, discriminated by ``type``."""

AnswerMsg = PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg
"""What an agent answers an Assignment with."""

MESSAGE_TYPES: tuple[type[_Message], ...] = (
    Assignment,
    PlanMsg,
    ArtifactMsg,
    CheckReportMsg,
    DecisionMsg,
    AgentDone,
    ArchivedMsg,
    JobEvent,
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
