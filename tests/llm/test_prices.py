"""Prices and costs: the arithmetic (gliding.core.prices), how a cost total is shown, where a
model's price comes from (gliding.llm.prices), and a cost budget that ends a job, or cannot be
kept because a call had no price (gliding.core.budget)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding.config.settings import PriceSettings, Settings
from gliding.config.task import Task
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.messages import Usage
from gliding.core.prices import CostTotal, Price, call_cost
from gliding.errors import TaskFileError
from gliding.llm.hosted import litellm_price
from gliding.llm.prices import (
    models_the_job_may_call,
    price_of,
    refuse_unpriced_cost_budget,
    settings_price,
)

HAIKU = Price(input=0.8, output=4.0, cache_read=0.08, cache_write=1.0)


# --- the arithmetic ---------------------------------------------------------------------------


def test_a_call_costs_its_tokens_at_the_prices_per_million() -> None:
    cost = call_cost(HAIKU, prompt_tokens=1_000_000, completion_tokens=500_000)
    assert cost == pytest.approx(0.8 + 2.0)


def test_cached_prompt_tokens_are_charged_at_the_cache_prices() -> None:
    # 10000 prompt tokens of which 6000 read from the cache and 3000 written to it
    cost = call_cost(HAIKU, prompt_tokens=10_000, completion_tokens=200,
                     cache_read_tokens=6_000, cache_write_tokens=3_000)
    expected = (1_000 * 0.8 + 6_000 * 0.08 + 3_000 * 1.0 + 200 * 4.0) / 1e6
    assert cost == pytest.approx(expected)


def test_without_cache_prices_cached_tokens_cost_as_input() -> None:
    plain = Price(input=2.0, output=8.0)
    assert call_cost(plain, prompt_tokens=1000, completion_tokens=0, cache_read_tokens=400,
                     cache_write_tokens=100) == pytest.approx(1000 * 2.0 / 1e6)


def test_cache_counts_past_the_prompt_are_not_paid_twice() -> None:
    cost = call_cost(HAIKU, prompt_tokens=100, completion_tokens=0, cache_read_tokens=500,
                     cache_write_tokens=500)
    assert cost == pytest.approx(100 * 0.08 / 1e6)  # all 100 read, nothing left to write


@given(prompt=st.integers(0, 10**7), completion=st.integers(0, 10**6),
       read=st.integers(0, 10**7), write=st.integers(0, 10**7))
def test_a_cost_lies_between_all_cheapest_and_all_dearest(prompt: int, completion: int,
                                                          read: int, write: int) -> None:
    cost = call_cost(HAIKU, prompt_tokens=prompt, completion_tokens=completion,
                     cache_read_tokens=read, cache_write_tokens=write)
    out = completion * HAIKU.output / 1e6
    assert out + prompt * 0.08 / 1e6 - 1e-9 <= cost <= out + prompt * 1.0 / 1e6 + 1e-9


# --- how a total is shown ---------------------------------------------------------------------


def test_a_known_cost_a_local_zero_and_an_unknown_cost_read_differently() -> None:
    assert CostTotal(0.01234).text() == "$0.0123"
    assert CostTotal(0.0).text() == "$0.0000"  # a hosted model priced at 0: a known 0
    assert CostTotal(0.0).text(free="local") == "$0 (local model)"
    assert CostTotal(0.0).cell(free="scripted") == "0 (scripted)"
    assert CostTotal(0.0, unpriced=3).text(free="local") == "unknown (3 calls unpriced)"
    assert CostTotal(0.0, unpriced=1).cell() == "unknown"
    assert CostTotal(0.5, unpriced=1).text() == "at least $0.5000 (1 call unpriced)"
    assert CostTotal(0.5, unpriced=2).cell() == ">=0.5000"
    assert not CostTotal(0.5, unpriced=2).known and CostTotal(0.5).known


def test_usage_sums_known_costs_and_counts_unpriced_calls() -> None:
    total = Usage(10, 5, 0, 0.25) + Usage(7, 1, 0, 0.0, unpriced_calls=1) + Usage(1, 1)
    assert (total.prompt_tokens, total.cost_usd, total.unpriced_calls) == (18, 0.25, 1)
    assert total.cost == CostTotal(0.25, 1)


# --- where a price comes from -----------------------------------------------------------------


def test_local_and_scripted_models_cost_a_known_zero_without_a_lookup() -> None:
    def never(model: str) -> Price | None:
        raise AssertionError(f"looked up {model}")

    assert price_of("local", {}, never) == Price(0.0, 0.0)
    assert price_of("local:/m/x.gguf", {}, never) == Price(0.0, 0.0)
    assert price_of("scripted:/r.yaml", {}, never) == Price(0.0, 0.0)


def test_llm_prices_win_over_the_cost_map() -> None:
    prices = {"openai/gpt-4o-mini": PriceSettings(input=1.0, output=2.0, cache_read=0.5)}
    assert settings_price("openai/gpt-4o-mini", prices) == Price(1.0, 2.0, 0.5, None)
    assert price_of("openai/gpt-4o-mini", prices, litellm_price) == Price(1.0, 2.0, 0.5, None)
    assert price_of("openai/other", prices, lambda m: None) is None


def test_litellm_knows_gpt_4o_mini_from_its_local_map() -> None:
    price = litellm_price("openai/gpt-4o-mini")
    assert price is not None and price.input > 0 and price.output > price.input


def test_litellm_knows_no_price_for_a_made_up_model() -> None:
    assert litellm_price("openai/no-such-model-anywhere") is None


# --- the refusal of a cost budget without prices ----------------------------------------------


def task(tmp_path: Path, *, cost: float | dict[str, float] | None = 1.0,
         model: str | None = "openai/no-such-model") -> Task:
    return Task(goal="g", workspace=tmp_path / "ws", model=model, pipeline=("DA",), turns={},
                prompt_tokens=None, cost_usd=cost, wall_time_s=None, checks=(),
                source=tmp_path / "task.yaml")


def test_a_cost_budget_with_an_unpriced_model_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError) as caught:
        refuse_unpriced_cost_budget(task(tmp_path, cost={"DA": 0.1}), Settings(),
                                    lookup=lambda m: None)
    assert caught.value.exit_code == 2
    assert "budgets.cost_usd: no price is known for openai/no-such-model" in caught.value.message
    assert caught.value.hint and "llm.prices" in caught.value.hint
    assert "'openai/no-such-model': {input:" in caught.value.hint


def test_a_price_in_the_settings_or_no_cost_budget_is_accepted(tmp_path: Path) -> None:
    priced = Settings.model_validate(
        {"llm": {"prices": {"openai/no-such-model": {"input": 1, "output": 2}}}})
    refuse_unpriced_cost_budget(task(tmp_path), priced, lookup=lambda m: None)
    refuse_unpriced_cost_budget(task(tmp_path, cost=None), Settings(), lookup=lambda m: None)
    refuse_unpriced_cost_budget(task(tmp_path, model="local"), Settings(),
                                lookup=lambda m: None)


def test_the_model_given_wins_over_the_tasks_and_the_settings(tmp_path: Path) -> None:
    settings = Settings.model_validate({"llm": {"model": "openai/from-settings"}})
    assert models_the_job_may_call(task(tmp_path), settings) == ["openai/no-such-model"]
    assert models_the_job_may_call(task(tmp_path, model=None), settings) == [
        "openai/from-settings"]
    assert models_the_job_may_call(task(tmp_path), settings, "local") == ["local"]


def test_fallbacks_and_the_roles_own_models_are_models_the_job_may_call(tmp_path: Path) -> None:
    settings = Settings.model_validate({"llm": {
        "fallbacks": ["openai/second", "local"],
        "roles": {"CA": {"model": "openai/checker", "fallbacks": ["openai/checker-2"]},
                  "DA": {"max_tokens": 100}}}})
    assert models_the_job_may_call(task(tmp_path), settings) == [
        "openai/no-such-model", "openai/second", "local", "openai/checker", "openai/checker-2"]
    with pytest.raises(TaskFileError, match="no price is known for openai/second, "
                                            "openai/checker, openai/checker-2"):
        refuse_unpriced_cost_budget(task(tmp_path), settings,
                                    lookup=lambda m: Price(1, 1) if "no-such" in m else None)


# --- a cost budget in the ledger --------------------------------------------------------------


def test_a_cost_budget_ends_the_job_once_spent() -> None:
    budget = BudgetTracker(Limits(cost_usd=0.01, role_cost_usd={"DA": 0.004}), started_at=0.0)
    budget.record("PA", Usage(1000, 100, 0, 0.003))
    assert budget.exhausted(1.0, "DA") is None
    budget.record("DA", Usage(1000, 100, 0, 0.005))
    assert budget.exhausted(1.0, "PA") is None
    assert budget.exhausted(1.0, "DA") == "DA's cost budget of $0.0040 exceeded"
    budget.record("CA", Usage(1000, 100, 0, 0.003))
    assert budget.exhausted(1.0) == "cost budget of $0.0100 exceeded"


def test_an_unpriced_call_means_a_cost_budget_cannot_be_kept() -> None:
    budget = BudgetTracker(Limits(cost_usd=1.0), started_at=0.0)
    budget.record("DA", Usage(1000, 100, 0, 0.0, unpriced_calls=1))
    assert budget.exhausted(1.0) == ("cost budget of $1.0000 cannot be kept: 1 call had no "
                                     "price (set llm.prices for the model)")
    without = BudgetTracker(Limits(), started_at=0.0)
    without.record("DA", Usage(1000, 100, 0, 0.0, unpriced_calls=1))
    assert without.exhausted(1.0, "DA") is None  # no cost budget: nothing to keep
