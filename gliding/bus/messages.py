"""The typed messages of the memory bus and their JSON wire form.

Every message is a frozen pydantic model with a ``type`` discriminator that does not depend on the
topic it travels on, so a message decodes to the same class wherever it is received:

    type            class            direction
    assignment      Assignment       supervisor -> agent: what to do this cycle/attempt
    plan            PlanMsg          PA -> supervisor: the plan steps
    artifact        ArtifactMsg      DA -> supervisor: what was produced
    check_report    CheckReportMsg   CA -> supervisor: per-check verdicts with evidence
    decision        DecisionMsg      AA -> supervisor: done, another cycle, or escalate
    agent_done      AgentDone        agent -> supervisor: the agent finished its session
    job_event       JobEvent         anyone -> observers: progress (role started, turn done ...)

``BusMessage`` is their union; ``to_json`` / ``from_json`` give the wire form that network
backends send. The models are frozen; their dict and list fields are shared, not copied, between
in-process subscribers, so receivers must not mutate them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter, ValidationError

from gliding.errors import BusError


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> str:
        """The JSON wire form, ``type`` included; ``from_json`` reads it back."""
        return self.model_dump_json()


class Assignment(_Message):
    """Supervisor -> agent: the work of one role in one cycle and attempt."""

    type: Literal["assignment"] = "assignment"
    job: str
    role: str
    cycle: NonNegativeInt
    attempt: NonNegativeInt
    goal: str
    instructions: str
    context: dict[str, Any] = Field(default_factory=dict)


class PlanMsg(_Message):
    """PA -> supervisor: the plan's steps; ``turn_iri`` points at the full turn in L0."""

    type: Literal["plan"] = "plan"
    job: str
    cycle: NonNegativeInt
    steps: list[str]
    turn_iri: str | None = None


class ArtifactMsg(_Message):
    """DA -> supervisor: what one attempt produced (files in the workspace, IRIs in L0)."""

    type: Literal["artifact"] = "artifact"
    job: str
    cycle: NonNegativeInt
    attempt: NonNegativeInt
    summary: str
    files: list[str] = Field(default_factory=list)
    iris: list[str] = Field(default_factory=list)
    status: str


class CheckReportMsg(_Message):
    """CA -> supervisor: one entry per check, ``{check, status, evidence, expected}``."""

    type: Literal["check_report"] = "check_report"
    job: str
    cycle: NonNegativeInt
    attempt: NonNegativeInt
    results: list[dict[str, Any]]
    passed: bool
    notes: str = ""


class DecisionMsg(_Message):
    """AA -> supervisor: finish, run another PDCA cycle, or hand the job to a human."""

    type: Literal["decision"] = "decision"
    job: str
    cycle: NonNegativeInt
    decision: Literal["done", "another_cycle", "escalate"]
    report: str


class AgentDone(_Message):
    """Agent -> supervisor: the agent's session ended (``status`` says how)."""

    type: Literal["agent_done"] = "agent_done"
    job: str
    role: str
    status: str
    turns: NonNegativeInt
    summary: str


class JobEvent(_Message):
    """Progress for observers: ``event`` is a dotted name (``role.started``, ``turn.done``)."""

    type: Literal["job_event"] = "job_event"
    job: str
    event: str
    data: dict[str, Any] = Field(default_factory=dict)


BusMessage = Annotated[
    Assignment | PlanMsg | ArtifactMsg | CheckReportMsg | DecisionMsg | AgentDone | JobEvent,
    Field(discriminator="type"),
]
"""Any message the bus carries, discriminated by ``type``."""

MESSAGE_TYPES: tuple[type[_Message], ...] = (
    Assignment,
    PlanMsg,
    ArtifactMsg,
    CheckReportMsg,
    DecisionMsg,
    AgentDone,
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
