"""ResilientLLM on fake time: retries with waits it is told of, faults not worth a retry at once,
fallbacks in turn, ProviderUnavailable when every model is spent; and ByRole's routing."""

from __future__ import annotations

import random
from collections.abc import Sequence

import anyio
import pytest

from gliding.core.messages import Completion, Message, Usage
from gliding.errors import LLMError, ProviderError, ProviderUnavailable
from gliding.llm.faults import RetryPolicy
from gliding.llm.port import LLMRequest, ProviderNotice
from gliding.llm.resilient import ResilientLLM
from gliding.llm.routing import ByRole


class FakeTime:
    """A clock that moves only when the wrapper sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Flaky:
    """Raises the scripted errors in order, then answers (and records each call)."""

    def __init__(self, name: str, errors: Sequence[Exception] = (), *,
                 cost_s: float = 0.0, clock: FakeTime | None = None) -> None:
        self._name = name
        self.errors = list(errors)
        self.calls = 0
        self.cost_s, self.clock = cost_s, clock

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, request: LLMRequest) -> Completion:
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost_s
        if self.errors:
            raise self.errors.pop(0)
        return Completion(Message("assistant", f"hello from {self._name}"), Usage(1, 1), 0.0,
                          self._name)


def fault(kind: str, status: int | None = None, retry_after: float | None = None
          ) -> ProviderError:
    return ProviderError(f"m: {kind}", kind=kind, status=status, retry_after_s=retry_after)


def ask(llm: ResilientLLM | ByRole, *, role: str = "DA", time_left_s: float | None = None
        ) -> tuple[Completion, list[ProviderNotice]]:
    notices: list[ProviderNotice] = []

    async def notify(n: ProviderNotice) -> None:
        notices.append(n)

    request = LLMRequest((Message("user", "hi"),), meta={"role": role},
                         time_left_s=time_left_s, notify=notify)

    async def main() -> Completion:
        return await llm.complete(request)

    return anyio.run(main), notices


def resilient(models: Sequence[Flaky], clock: FakeTime, **policy: float) -> ResilientLLM:
    return ResilientLLM(models, RetryPolicy(**policy), sleep=clock.sleep,  # type: ignore[arg-type]
                        monotonic=clock.monotonic, rng=random.Random(7))


def test_a_429_then_success_is_a_success_with_one_retry_notice() -> None:
    clock = FakeTime()
    primary = Flaky("anthropic/x", [fault("rate_limited", 429)])

    completion, notices = ask(resilient([primary], clock))

    assert completion.model == "anthropic/x" and primary.calls == 2
    assert [(n.kind, n.model, n.fault, n.retry, n.retries) for n in notices] == [
        ("retry", "anthropic/x", "429 rate limited", 1, 5)]
    assert clock.slept == [notices[0].delay_s] and 0.0 <= clock.slept[0] < 1.0


def test_retry_after_is_waited_as_the_provider_asked() -> None:
    clock = FakeTime()
    primary = Flaky("m", [fault("rate_limited", 429, retry_after=3.0),
                          fault("overloaded", 529), fault("timeout")])

    completion, notices = ask(resilient([primary], clock))

    assert completion.model == "m" and primary.calls == 4
    assert clock.slept[0] == 3.0
    assert [n.fault for n in notices] == ["429 rate limited", "529 overloaded", "timed out"]


def test_a_401_fails_at_once_and_no_fallback_is_tried() -> None:
    clock = FakeTime()
    primary = Flaky("m", [fault("auth", 401)])
    fallback = Flaky("f")

    with pytest.raises(ProviderError) as caught:
        ask(resilient([primary, fallback], clock))

    assert caught.value.kind == "auth" and not isinstance(caught.value, ProviderUnavailable)
    assert (primary.calls, fallback.calls, clock.slept) == (1, 0, [])  # no wait, no fallback


def test_other_llm_errors_pass_through_untouched() -> None:
    primary = Flaky("local", [LLMError("local model file not found")])
    with pytest.raises(LLMError, match="not found") as caught:
        ask(resilient([primary, Flaky("f")], FakeTime()))
    assert type(caught.value) is LLMError and primary.calls == 1


def test_exhausted_retries_fall_back_to_the_next_model() -> None:
    clock = FakeTime()
    primary = Flaky("openai/primary", [fault("server", 503)] * 10)
    fallback = Flaky("openai/fallback")

    completion, notices = ask(resilient([primary, fallback], clock, max_attempts=3))

    assert completion.model == "openai/fallback"
    assert (primary.calls, fallback.calls) == (3, 1)
    assert [n.kind for n in notices] == ["retry", "retry", "fallback"]
    assert notices[-1].next_model == "openai/fallback" and notices[-1].fault == "503 server error"


def test_every_model_spent_is_provider_unavailable_naming_each() -> None:
    clock = FakeTime()
    models = [Flaky("a", [fault("connection")] * 10), Flaky("b", [fault("server", 500)] * 10)]

    with pytest.raises(ProviderUnavailable) as caught:
        ask(resilient(models, clock, max_attempts=4))

    assert [m.calls for m in models] == [4, 4]
    assert "a: connection failed (4 call(s)" in caught.value.message
    assert "b: 500 server error (4 call(s)" in caught.value.message
    assert caught.value.hint is not None and "gliding resume" in caught.value.hint
    assert isinstance(caught.value, LLMError)


def test_max_total_s_moves_on_to_the_fallback_early() -> None:
    clock = FakeTime()
    primary = Flaky("p", [fault("timeout")] * 10, cost_s=10.0, clock=clock)
    fallback = Flaky("f")

    completion, _ = ask(resilient([primary, fallback], clock, max_attempts=10,
                                  max_total_s=25.0))

    assert completion.model == "f"
    assert primary.calls == 3  # 10 s a call: the third starts at 20.6 s, none after 25 s
    assert clock.now == pytest.approx(30.0 + sum(clock.slept))


def test_no_wait_outlasts_the_job_wall_budget() -> None:
    clock = FakeTime()
    primary = Flaky("p", [fault("rate_limited", 429, retry_after=20.0)] * 3)

    with pytest.raises(ProviderUnavailable):
        ask(resilient([primary], clock), time_left_s=15.0)

    assert primary.calls == 1 and clock.slept == []


def test_by_role_sends_each_role_to_its_model() -> None:
    default, planner = Flaky("job-model"), Flaky("planner")
    router = ByRole(default, {"PA": planner})

    assert router.name == "job-model"
    assert ask(router, role="PA")[0].model == "planner"
    assert ask(router, role="DA")[0].model == "job-model"


def test_a_model_whose_retries_ran_out_is_skipped_while_it_cools_down() -> None:
    clock = FakeTime()
    primary = Flaky("p", [fault("server", 503)] * 10)
    fallback = Flaky("f")
    llm = resilient([primary, fallback], clock, max_attempts=2, cooldown_s=30.0)

    first, _ = ask(llm)
    second, notices = ask(llm)
    clock.now += 31.0
    third, _ = ask(llm)

    assert (first.model, second.model, third.model) == ("f", "f", "f")
    assert notices == []  # skipped at once, nothing retried
    assert (primary.calls, fallback.calls) == (4, 3)  # 2, then 0, then 2 once it cooled down


def test_when_every_model_cools_down_all_are_tried_again() -> None:
    clock = FakeTime()
    models = [Flaky("a", [fault("server", 500)] * 3), Flaky("b", [fault("server", 500)] * 1)]
    llm = resilient(models, clock, max_attempts=1, cooldown_s=600.0)

    with pytest.raises(ProviderUnavailable):
        ask(llm)
    completion, _ = ask(llm)

    assert completion.model == "b" and [m.calls for m in models] == [2, 2]


def test_retry_and_fallback_events_read_as_progress_lines() -> None:
    from gliding.bus.messages import JobEvent
    from gliding.daemon.render import progress_line

    common = {"role": "DA", "session": "DA", "turn": 3, "model": "anthropic/x"}
    retry = JobEvent(job="j", event="llm.retry", data={
        **common, "fault": "429 rate limited", "retry": 2, "retries": 5, "delay_s": 3.14,
        "next_model": ""})
    fallback = JobEvent(job="j", event="llm.fallback", data={
        **common, "fault": "overloaded", "retry": 0, "retries": 0, "delay_s": 0.0,
        "next_model": "openai/y"})

    assert progress_line(retry) == "[DA] model anthropic/x: 429 rate limited, retry 2/5 in 3.1s"
    assert progress_line(fallback) == ("[DA] model anthropic/x: overloaded, retries spent → "
                                       "falling back to openai/y")
