"""llm.max_tokens, llm.roles and llm.prices: what litellm is asked for, and what a hosted call
costs. Calls go to the fake OpenAI server of tests/llm/openai_fake.py on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import Settings
from gliding.config.task import Task
from gliding.core.messages import Message
from gliding.daemon.models import build_llm, check_cost_budget
from gliding.errors import TaskFileError
from gliding.llm.port import LLMRequest
from tests.llm.openai_fake import MODEL, FakeOpenAI, serve_fake_openai
from tests.settings_effects.effects_support import settings_from

DEFAULTS = Settings().llm


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with serve_fake_openai(monkeypatch) as fake:
        yield fake


def request(role: str = "DA") -> LLMRequest:
    return LLMRequest(messages=(Message("user", "Write hello.txt"),), meta={"role": role})


# --- llm.max_tokens ---------------------------------------------------------------------------


def test_max_tokens_default_is_4096_not_the_models_maximum(tmp_path: Path,
                                                           fake_openai: FakeOpenAI) -> None:
    assert DEFAULTS.max_tokens == 4096
    llm = build_llm(MODEL, settings_from(tmp_path))
    anyio.run(llm.complete, request())
    assert fake_openai.requests[-1]["max_tokens"] == 4096


def test_max_tokens_is_what_litellm_sends(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    settings = settings_from(tmp_path, {"GLIDING_LLM__MAX_TOKENS": "300"})
    anyio.run(build_llm(MODEL, settings).complete, request())
    assert fake_openai.requests[-1]["max_tokens"] == 300


# --- llm.roles --------------------------------------------------------------------------------


def test_roles_max_tokens_caps_that_roles_calls_only(tmp_path: Path,
                                                     fake_openai: FakeOpenAI) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("llm:\n  max_tokens: 300\n  roles:\n    CA: {max_tokens: 50}\n")
    llm = build_llm(MODEL, settings_from(tmp_path, config=config))
    for role in ("DA", "CA", "AA"):
        anyio.run(llm.complete, request(role))
    assert [r["max_tokens"] for r in fake_openai.requests] == [300, 50, 300]


def test_roles_from_the_environment_is_a_json_object(tmp_path: Path,
                                                     fake_openai: FakeOpenAI) -> None:
    settings = settings_from(tmp_path, {"GLIDING_LLM__ROLES": '{"DA": {"max_tokens": 77}}'})
    anyio.run(build_llm(MODEL, settings).complete, request("DA"))
    assert fake_openai.requests[-1]["max_tokens"] == 77


# --- llm.prices -------------------------------------------------------------------------------


def test_prices_cost_a_call_cached_tokens_at_the_cache_price(tmp_path: Path,
                                                             fake_openai: FakeOpenAI) -> None:
    without = anyio.run(build_llm(MODEL, settings_from(tmp_path)).complete, request())
    assert (without.usage.cost_usd, without.usage.unpriced_calls) == (0.0, 1)  # unknown

    config = tmp_path / "config.yaml"
    config.write_text(f"llm:\n  prices:\n    {MODEL}: {{input: 3.0, output: 15.0, "
                      "cache_read: 0.3}\n")
    priced = anyio.run(build_llm(MODEL, settings_from(tmp_path, config=config)).complete,
                       request())
    # 1200 prompt tokens, 1000 of them read from the cache, 40 completion tokens
    assert priced.usage.unpriced_calls == 0
    assert priced.usage.cost_usd == pytest.approx((200 * 3.0 + 1000 * 0.3 + 40 * 15.0) / 1e6)


def test_prices_let_a_cost_budget_through(tmp_path: Path) -> None:
    task = Task(goal="g", workspace=tmp_path / "ws", model=MODEL, pipeline=("DA",), turns={},
                prompt_tokens=None, cost_usd=0.5, wall_time_s=None, checks=(),
                source=tmp_path / "task.yaml")
    with pytest.raises(TaskFileError, match=f"no price is known for {MODEL}"):
        check_cost_budget(task, settings_from(tmp_path))
    check_cost_budget(task, settings_from(tmp_path, {
        "GLIDING_LLM__PRICES": f'{{"{MODEL}": {{"input": 3, "output": 15}}}}'}))
