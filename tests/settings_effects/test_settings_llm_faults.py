"""llm.api_base, llm.api_key_env, llm.fallbacks, llm.retry.* and the model/fallbacks of
llm.roles: each changed through the real loader, seen in what reaches the fake provider
(gliding.testing.fake_provider, on 127.0.0.1) through build_llm's model."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import Settings
from gliding.core.messages import Completion, Message
from gliding.daemon.models import build_llm
from gliding.errors import ProviderUnavailable, UsageError
from gliding.llm.port import LLMRequest, ProviderNotice
from gliding.testing.fake_provider import FakeProvider, FaultPlan
from tests.settings_effects.effects_support import settings_from

pytestmark = pytest.mark.heavy  # litellm's import alone takes seconds on two cores

DEFAULTS = Settings().llm
REPLIES = {"*": [{"finish": {"summary": f"reply {n}"}} for n in range(1, 200)],
           "PA": [{"finish": {"steps": ["planned"]}}] * 5}
FAST = {"GLIDING_LLM__RETRY__INITIAL_S": "0.01", "GLIDING_LLM__RETRY__MAX_S": "0.02"}


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def fp() -> Iterator[FakeProvider]:
    with FakeProvider(REPLIES) as provider:
        yield provider


def ask(settings: Settings, *, model: str = "openai/fake-model", role: str = "DA"
        ) -> tuple[Completion, list[ProviderNotice]]:
    notices: list[ProviderNotice] = []

    async def notify(notice: ProviderNotice) -> None:
        notices.append(notice)

    async def main() -> Completion:
        return await build_llm(model, settings).complete(LLMRequest(
            (Message("system", f"You are {role}, the agent."), Message("user", "go")),
            meta={"role": role}, notify=notify))

    return anyio.run(main), notices


def notices_of_a_failure(settings: Settings) -> list[ProviderNotice]:
    """What the model told of its retries before it gave up (ProviderUnavailable)."""
    notices: list[ProviderNotice] = []

    async def notify(notice: ProviderNotice) -> None:
        notices.append(notice)

    async def main() -> None:
        await build_llm("openai/fake-model", settings).complete(LLMRequest(
            (Message("system", "You are DA, the agent."), Message("user", "go")),
            meta={"role": "DA"}, notify=notify))

    with pytest.raises(ProviderUnavailable):
        anyio.run(main)
    return notices


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- llm.api_base -------------------------------------------------------------------------------


def test_api_base_is_where_hosted_calls_go_and_wins_over_litellms_variable(
        tmp: Path, fp: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULTS.api_base is None
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")  # nothing listens there

    completion, _ = ask(settings_from(tmp, {"GLIDING_LLM__API_BASE": fp.url,
                                            "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "1"}))
    with pytest.raises(ProviderUnavailable, match="connection failed"):
        ask(settings_from(tmp, {"GLIDING_LLM__RETRY__MAX_ATTEMPTS": "1"}))  # the variable's

    assert completion.message.tool_calls[0].arguments == {"summary": "reply 1"}
    assert [r.path for r in fp.requests] == ["/chat/completions"]


def test_api_base_must_be_an_http_url(tmp: Path) -> None:
    from gliding.errors import ConfigError

    with pytest.raises(ConfigError, match="llm.api_base"):
        settings_from(tmp, {"GLIDING_LLM__API_BASE": "127.0.0.1:8000"})


# --- llm.api_key_env ----------------------------------------------------------------------------


def test_api_key_env_names_the_variable_whose_key_is_sent(
        tmp: Path, fp: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULTS.api_key_env is None
    monkeypatch.setenv("MY_SERVER_KEY", "server-key")
    base = {"GLIDING_LLM__API_BASE": fp.url}

    ask(settings_from(tmp, base))
    ask(settings_from(tmp, {**base, "GLIDING_LLM__API_KEY_ENV": "MY_SERVER_KEY"}))
    monkeypatch.delenv("MY_SERVER_KEY")
    with pytest.raises(UsageError, match="MY_SERVER_KEY, which is not set"):
        ask(settings_from(tmp, {**base, "GLIDING_LLM__API_KEY_ENV": "MY_SERVER_KEY"}))

    assert [r.key_sha256 for r in fp.requests] == [sha("env-key"), sha("server-key")]


# --- llm.fallbacks ------------------------------------------------------------------------------


def test_fallbacks_answer_when_the_model_is_down(tmp: Path, fp: FakeProvider) -> None:
    assert DEFAULTS.fallbacks == ()
    fp.faults = FaultPlan(down_models=("fake-model",))
    base = {"GLIDING_LLM__API_BASE": fp.url, **FAST, "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "2"}

    with pytest.raises(ProviderUnavailable):
        ask(settings_from(tmp, base))
    completion, notices = ask(settings_from(tmp, {
        **base, "GLIDING_LLM__FALLBACKS": "openai/other-model, openai/third"}))

    assert completion.model == "openai/other-model"
    assert [n.kind for n in notices] == ["retry", "fallback"]
    assert notices[-1].next_model == "openai/other-model"
    assert [(r.model, r.fault) for r in fp.requests][-3:] == [
        ("fake-model", "503"), ("fake-model", "503"), ("other-model", None)]


# --- llm.retry.* -------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [1, 3])
def test_retry_max_attempts_is_how_often_one_model_is_called(
        tmp: Path, fp: FakeProvider, attempts: int) -> None:
    assert DEFAULTS.retry.max_attempts == 6
    fp.faults = FaultPlan.down("500")

    with pytest.raises(ProviderUnavailable, match=f"{attempts} call"):
        ask(settings_from(tmp, {"GLIDING_LLM__API_BASE": fp.url, **FAST,
                                "GLIDING_LLM__RETRY__MAX_ATTEMPTS": str(attempts)}))

    assert len(fp.requests) == attempts


@pytest.mark.parametrize("initial", [0.001, 0.2])
def test_retry_initial_s_is_the_ceiling_of_the_first_wait_doubling_after(
        tmp: Path, fp: FakeProvider, initial: float) -> None:
    assert DEFAULTS.retry.initial_s == 1.0
    fp.faults = FaultPlan.down("503")

    notices = notices_of_a_failure(settings_from(tmp, {
        "GLIDING_LLM__API_BASE": fp.url, "GLIDING_LLM__RETRY__INITIAL_S": str(initial),
        "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "5"}))

    assert [n.retry for n in notices] == [1, 2, 3, 4]
    assert all(n.delay_s <= initial * 2 ** (n.retry - 1) + 1e-3 for n in notices)
    if initial > 0.1:
        assert max(n.delay_s for n in notices) > 0.009  # above every 0.001-based ceiling


def test_retry_max_s_caps_a_retry_after(tmp: Path, fp: FakeProvider) -> None:
    assert DEFAULTS.retry.max_s == 30.0
    fp.faults = FaultPlan(rate=1.0, mix={"429_ra": 1}, retry_after_s=1)
    base = {"GLIDING_LLM__API_BASE": fp.url, "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "2"}

    capped = notices_of_a_failure(settings_from(tmp, {**base,
                                                      "GLIDING_LLM__RETRY__MAX_S": "0.05"}))
    asked = notices_of_a_failure(settings_from(tmp, base))

    assert [n.delay_s for n in capped] == [0.05]
    assert [n.delay_s for n in asked] == [1.0]  # the provider's Retry-After, under 30 s


def test_retry_max_total_s_bounds_the_time_one_model_takes(tmp: Path,
                                                           fp: FakeProvider) -> None:
    assert DEFAULTS.retry.max_total_s == 300.0
    fp.faults = FaultPlan.down("500")

    with pytest.raises(ProviderUnavailable):
        ask(settings_from(tmp, {"GLIDING_LLM__API_BASE": fp.url,
                                "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "100",
                                "GLIDING_LLM__RETRY__INITIAL_S": "0.1",
                                "GLIDING_LLM__RETRY__MAX_S": "0.1",
                                "GLIDING_LLM__RETRY__MAX_TOTAL_S": "0.5"}))

    # max_total_s, not the 100 attempts, ended the retries (its end is not timed here:
    # test_resilient.py checks the waits against max_total_s on a fake clock)
    assert 2 <= len(fp.requests) < 100


@pytest.mark.parametrize(("cooldown", "primary_calls"), [("60", 2), ("0", 4)])
def test_retry_cooldown_s_skips_a_model_whose_retries_ran_out(
        tmp: Path, fp: FakeProvider, cooldown: str, primary_calls: int) -> None:
    assert DEFAULTS.retry.cooldown_s == 60.0
    fp.faults = FaultPlan(down_models=("fake-model",))
    settings = settings_from(tmp, {
        "GLIDING_LLM__API_BASE": fp.url, **FAST, "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "2",
        "GLIDING_LLM__FALLBACKS": "openai/backup", "GLIDING_LLM__RETRY__COOLDOWN_S": cooldown})
    llm = build_llm("openai/fake-model", settings)

    async def twice() -> list[str]:
        request = LLMRequest((Message("system", "You are DA, the agent."),
                              Message("user", "go")), meta={"role": "DA"})
        return [(await llm.complete(request)).model for _ in range(2)]

    assert anyio.run(twice) == ["openai/backup"] * 2
    assert [r.model for r in fp.requests].count("fake-model") == primary_calls


# --- llm.roles.<ROLE>.model / .fallbacks -------------------------------------------------------


def test_roles_model_and_fallbacks_route_that_roles_calls(tmp: Path, fp: FakeProvider) -> None:
    fp.faults = FaultPlan(down_models=("pa-down",))
    settings = settings_from(tmp, {
        "GLIDING_LLM__API_BASE": fp.url, **FAST, "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "1",
        "GLIDING_LLM__ROLES": '{"PA": {"model": "openai/pa-down", '
                              '"fallbacks": ["openai/pa-backup"]}, '
                              '"CA": {"model": "openai/checker"}}'})

    planned, notices = ask(settings, role="PA")
    checked, _ = ask(settings, role="CA")
    done, _ = ask(settings, role="DA")

    assert (planned.model, checked.model, done.model) == (
        "openai/pa-backup", "openai/checker", "openai/fake-model")
    assert [n.kind for n in notices] == ["fallback"]
    assert [r.model for r in fp.requests] == ["pa-down", "pa-backup", "checker", "fake-model"]
