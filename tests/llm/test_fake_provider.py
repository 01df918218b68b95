"""The fake provider (gliding.testing.fake_provider) through the real litellm path: HostedLLM
with ``api_base`` pointing at it on 127.0.0.1. Each injected fault comes back as the
ProviderError kind the retry policy expects, after exactly one request (litellm retries nothing
behind our back); answers follow the replies file by role; every request body is recorded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.core.messages import Completion, Message, ToolSpec
from gliding.errors import ProviderError, ProviderUnavailable
from gliding.llm.faults import RetryPolicy
from gliding.llm.hosted import HostedLLM
from gliding.llm.port import LLMRequest
from gliding.llm.resilient import ResilientLLM
from gliding.testing.fake_provider import FakeProvider, FaultPlan

pytestmark = pytest.mark.heavy  # litellm's import alone takes seconds on two cores

BASH = ToolSpec("bash", "Run a command.", {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
REPLIES: dict[str, list[dict[str, Any]]] = {
    "DA": [{"bash": {"command": f"echo {n}"}} for n in range(1, 30)],
    "PA": [{"finish": {"steps": ["one"]}}]}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_API_BASE",
                 "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def request(role: str = "DA") -> LLMRequest:
    return LLMRequest((Message("system", f"You are {role}, the agent.\n\nRules: be brief."),
                       Message("user", "Goal: say hi")), tools=(BASH,),
                      tool_choice="required", meta={"role": role})


def complete(llm: HostedLLM | ResilientLLM, req: LLMRequest | None = None) -> Completion:
    async def main() -> Completion:
        return await llm.complete(req or request())

    return anyio.run(main)


@pytest.mark.parametrize("model", ["openai/fake-model", "anthropic/claude-fake"])
def test_answers_by_role_in_order_and_records_the_exact_body(model: str, tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    with FakeProvider(REPLIES, record=record) as fp:
        llm = HostedLLM(model, timeout_s=5, api_base=fp.url, api_key="sk-secret-dummy")
        first, second = complete(llm), complete(llm)
        planned = complete(llm, request("PA"))

    assert [c.message.tool_calls[0].arguments for c in (first, second)] == [
        {"command": "echo 1"}, {"command": "echo 2"}]
    assert planned.message.tool_calls[0].name == "finish"
    assert [r.role for r in fp.requests] == ["DA", "DA", "PA"]
    assert fp.counts == {"ok": 3} and fp.remaining("DA") == len(REPLIES["DA"]) - 2
    body = fp.requests[0].json()
    assert body["model"] == model.split("/", 1)[1]
    assert "You are DA" in json.dumps(body)
    assert all("sk-secret-dummy" not in json.dumps(r.headers) for r in fp.requests)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["body"].encode() for line in lines] == [r.body for r in fp.requests]


@pytest.mark.parametrize(("fault", "kind", "status"), [
    ("429", "rate_limited", 429), ("429_ra", "rate_limited", 429), ("500", "server", 500),
    ("503", "server", 503), ("529", "overloaded", 529), ("drop", "connection", None),
    ("slow", "timeout", None),
])
@pytest.mark.parametrize("model", ["openai/fake-model", "anthropic/claude-fake"])
def test_each_fault_is_one_request_and_the_kind_the_policy_expects(
        model: str, fault: str, kind: str, status: int | None) -> None:
    # a slow reply holds its connection 600 s, far past pytest's timeout (120 s): were leaving
    # the `with` (stopping the server) to wait for that reply in flight, the test would fail
    plan = FaultPlan(rate=1.0, mix={fault: 1.0}, retry_after_s=2, slow_s=600.0)
    with FakeProvider(REPLIES, faults=plan) as fp:
        llm = HostedLLM(model, timeout_s=0.5, api_base=fp.url, api_key="dummy")
        with pytest.raises(ProviderError) as caught:
            complete(llm)

    error = caught.value
    assert error.kind == kind
    if not (model.startswith("anthropic/") and fault == "529"):  # litellm says 500 there
        assert error.status == status
    assert error.retry_after_s == (2.0 if fault == "429_ra" else None)
    assert len(fp.requests) == 1 and fp.counts == {fault: 1}  # litellm did not retry
    assert fp.remaining("DA") == len(REPLIES["DA"])  # a fault uses up no reply


def test_retry_after_as_an_http_date() -> None:
    plan = FaultPlan(rate=1.0, mix={"429_ra": 1.0}, retry_after_s=30, retry_after_date=True)
    with FakeProvider(REPLIES, faults=plan) as fp:
        with pytest.raises(ProviderError) as caught:
            complete(HostedLLM("openai/fake-model", api_base=fp.url, api_key="dummy"))
    assert caught.value.retry_after_s == pytest.approx(30, abs=2)


def test_an_unreachable_server_is_a_connection_fault() -> None:
    with FakeProvider(REPLIES) as fp:
        url = fp.url  # nothing listens there once it stopped
    with pytest.raises(ProviderError) as caught:
        complete(HostedLLM("openai/fake-model", timeout_s=2, api_base=url, api_key="dummy"))
    assert caught.value.kind == "connection"


def test_a_bad_model_or_missing_reply_is_not_retryable() -> None:
    with FakeProvider({"PA": [{"finish": {"steps": ["x"]}}]}) as fp:
        with pytest.raises(ProviderError) as caught:
            complete(HostedLLM("openai/fake-model", api_base=fp.url, api_key="dummy"))
    assert caught.value.kind == "bad_request" and caught.value.hint


def test_seeded_faults_are_retried_until_every_reply_came_back() -> None:
    """30% of calls fail with the whole mix; the wrapper gets every reply in order."""
    plan = FaultPlan(rate=0.3, seed=11, slow_s=2.0)
    with FakeProvider(REPLIES, faults=plan) as fp:
        hosted = HostedLLM("openai/fake-model", timeout_s=0.3, api_base=fp.url, api_key="x")
        llm = ResilientLLM([hosted], RetryPolicy(max_attempts=12, initial_s=0.01, max_s=0.05),
                           rng=random.Random(1))
        answers = [complete(llm) for _ in range(12)]

    assert [a.message.tool_calls[0].arguments["command"] for a in answers] == [
        f"echo {n}" for n in range(1, 13)]
    assert fp.counts["ok"] == 12 and sum(fp.counts.values()) > 12


def test_a_model_that_is_down_falls_back_to_the_next() -> None:
    plan = FaultPlan(down_models=("primary",))
    with FakeProvider(REPLIES, faults=plan) as fp:
        models = [HostedLLM(m, timeout_s=2, api_base=fp.url, api_key="x")
                  for m in ("openai/primary", "openai/fallback")]
        answer = complete(ResilientLLM(models, RetryPolicy(max_attempts=3, initial_s=0.01)))
        with pytest.raises(ProviderUnavailable):
            complete(ResilientLLM(models[:1], RetryPolicy(max_attempts=2, initial_s=0.01)))

    assert answer.model == "openai/fallback"
    assert [(r.model, r.fault) for r in fp.requests][:4] == [
        ("primary", "503"), ("primary", "503"), ("primary", "503"), ("fallback", None)]


@pytest.mark.parametrize(("fault", "kind"), [("401", "auth"), ("400", "bad_request")])
def test_a_fault_not_worth_retrying_fails_within_a_second(fault: str, kind: str) -> None:
    with FakeProvider(REPLIES, faults=FaultPlan.down(fault, start_after=1)) as fp:
        hosted = HostedLLM("openai/fake-model", timeout_s=5, api_base=fp.url, api_key="x")
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)

        llm = ResilientLLM([hosted, hosted], RetryPolicy(max_attempts=6), sleep=sleep)
        complete(HostedLLM("openai/fake-model", api_base=fp.url, api_key="x"),
                 request("PA"))  # the one reply before the fault starts
        with pytest.raises(ProviderError) as caught:
            complete(llm)

    assert caught.value.kind == kind and caught.value.hint
    assert fp.counts == {"ok": 1, fault: 1}  # one call: no retry, no fallback ...
    assert slept == []  # ... and no wait before failing
