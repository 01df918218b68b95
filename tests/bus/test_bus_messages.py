"""Bus messages: JSON wire round-trip for every type, discriminated decoding, frozen values."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding.bus.messages import (
    MESSAGE_TYPES,
    AgentDone,
    ArchivedMsg,
    ArtifactMsg,
    Assignment,
    CheckOutcome,
    CheckReportMsg,
    DecisionMsg,
    JobEvent,
    PlanMsg,
    PlanStep,
    from_json,
    plan_steps,
    to_json,
)
from gliding.errors import BusError
from gliding.testing.bus_contract import EXAMPLE_MESSAGES

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
counts = st.integers(min_value=0, max_value=10_000)
texts = st.text(max_size=40)
iris = st.lists(st.text(max_size=30), max_size=4)

any_message = st.one_of(
    st.builds(
        Assignment, job=texts, role=texts, cycle=counts, attempt=counts, goal=texts,
        instructions=texts, options=st.lists(texts, max_size=3), turn_base=counts,
        step=st.none() | texts,
    ),
    st.builds(PlanMsg, job=texts, cycle=counts, steps=iris, turn_iri=st.none() | texts),
    st.builds(PlanMsg, job=texts, cycle=counts, notes=iris, steps=st.lists(
        iris.flatmap(lambda ids: st.fixed_dictionaries({
            "id": st.sampled_from(["a", "b", "c d", "", "1"]), "text": texts,
            "dependsOn": st.just(ids)})) | texts, max_size=5)),
    st.builds(
        ArtifactMsg, job=texts, cycle=counts, attempt=counts, summary=texts, files=iris,
        iris=iris, status=st.sampled_from(["finished", "turn_cap", "budget", "failed"]),
        turns=counts, written=st.dictionaries(texts, texts, max_size=3), step=st.none() | texts,
    ),
    st.builds(
        CheckReportMsg, job=texts, cycle=counts, attempt=counts,
        results=st.lists(st.builds(CheckOutcome, check=texts,
                                   status=st.sampled_from(["pass", "fail"]), evidence=texts,
                                   expected=st.none() | texts, remedy=texts,
                                   path=st.none() | texts), max_size=3),
        passed=st.booleans(), notes=texts,
    ),
    st.builds(ArchivedMsg, job=texts, iri=texts, kind=st.sampled_from(["turn", "result"]),
              role=texts, turn=counts, summary=texts, turn_iri=texts),
    st.builds(
        DecisionMsg, job=texts, cycle=counts,
        decision=st.sampled_from(["done", "another_cycle", "escalate"]), report=texts,
    ),
    st.builds(AgentDone, job=texts, role=texts, status=texts, turns=counts, summary=texts),
    st.builds(JobEvent, job=texts, event=texts, data=json_objects),
)


def test_examples_cover_every_message_type() -> None:
    assert {type(m) for m in EXAMPLE_MESSAGES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("message", EXAMPLE_MESSAGES, ids=lambda m: type(m).__name__)
def test_every_type_round_trips_through_json(message: Any) -> None:
    text = message.to_json()
    back = from_json(text)
    assert type(back) is type(message)
    assert back == message
    assert from_json(text.encode("utf-8")) == message
    assert to_json(message) == text


@given(any_message)
def test_any_message_round_trips_through_json(message: Any) -> None:
    back = from_json(message.to_json())
    assert type(back) is type(message)
    assert back == message


def test_type_field_names_the_class() -> None:
    types = [m.model_fields["type"].default for m in MESSAGE_TYPES]
    assert len(set(types)) == len(MESSAGE_TYPES)
    assert '"type":"decision"' in EXAMPLE_MESSAGES[5].to_json()


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        '{"job": "j1", "event": "x", "data": {}}',  # no type
        '{"type": "gossip", "job": "j1"}',  # unknown type
        '{"type": "decision", "job": "j1", "cycle": 1, "decision": "maybe", "report": ""}',
        '{"type": "agent_done", "job": "j1", "role": "DA", "status": "ok", "turns": -1,'
        ' "summary": ""}',
        '{"type": "job_event", "job": "j1", "event": "x", "data": {}, "extra": 1}',
    ],
)
def test_bad_wire_data_raises_bus_error(data: str) -> None:
    with pytest.raises(BusError, match="not a valid bus message"):
        from_json(data)


def test_to_json_refuses_a_non_message() -> None:
    with pytest.raises(BusError, match="not a bus message"):
        to_json({"type": "job_event"})  # type: ignore[arg-type]


def test_messages_are_frozen() -> None:
    event = JobEvent(job="j1", event="turn.done")
    with pytest.raises(pydantic.ValidationError):
        event.job = "j2"  # type: ignore[misc]
    assert event.job == "j1"


# ---- plans with dependencies ---------------------------------------------------------------
def test_plain_string_steps_still_decode_and_run_in_order() -> None:
    old = '{"type": "plan", "job": "j1", "cycle": 1, "steps": ["read spec", "write code"]}'
    plan = from_json(old)
    assert isinstance(plan, PlanMsg) and plan.texts == ["read spec", "write code"]
    assert plan.steps == [PlanStep(id="1", text="read spec"),
                          PlanStep(id="2", text="write code", depends_on=["1"])]
    assert from_json(plan.to_json()) == plan


def test_plan_steps_are_mended_with_notes() -> None:
    steps, notes = plan_steps([
        {"id": "a", "text": "write a.py", "dependsOn": ["b", "ghost"]},
        {"id": "b", "text": "write b.py", "depends_on": "a"},  # a cycle: a → b kept
        {"id": "a", "text": "write a.py again", "dependsOn": ["c"]},  # a repeat of id a
        {"text": " write  b.py"},  # a repeat of b's text
        {"id": "c?", "text": "write c.py", "dependsOn": [1]},  # by place; id cleaned
        "  ",
        {"id": "x"}])
    assert steps == [PlanStep(id="a", text="write a.py", depends_on=["b", "c"]),
                     PlanStep(id="b", text="write b.py"),
                     PlanStep(id="c", text="write c.py")]
    assert notes == ["step 3 repeats step a: merged", "step 4 repeats step b: merged",
                     "step 7 has no text: dropped", "step a: unknown dependency 'ghost' dropped",
                     "step b: dependency on a dropped (it would close a cycle)",
                     "step c: dependency on a dropped (it would close a cycle)"]
    assert plan_steps(steps) == (steps, [])  # mending a mended plan changes nothing


def test_a_plan_step_id_is_checked() -> None:
    with pytest.raises(pydantic.ValidationError):
        PlanStep(id="a/b", text="x")
    assert from_json(PlanMsg(job="j", cycle=1, steps=[{"id": "a/b", "text": "x"}]).to_json()
                     ).steps == [PlanStep(id="a_b", text="x")]  # type: ignore[union-attr]
