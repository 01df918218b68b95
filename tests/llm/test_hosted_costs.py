"""Honest costs of hosted models, against a fake OpenAI server on 127.0.0.1 (litellm's
``openai/<model>`` with ``OPENAI_BASE_URL`` pointing at it; nothing leaves the machine).

A call to a model without a price, and how a job on one reports its cost (text, JSON,
progress lines); a job with ``llm.prices``; and the refusal of a cost budget such a job could
not keep: ``gliding run``, ``gliding resume`` and the daemon's submit, before anything is
written. What ``llm.max_tokens``, ``llm.roles`` and ``llm.prices`` do to one call is in
tests/settings_effects/test_settings_llm_costs.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.core.messages import Message
from gliding.core.prices import call_cost
from gliding.daemon.compose import resume_job, run_job
from gliding.daemon.models import build_llm
from gliding.daemon.render import progress_line, report_dict, report_text
from gliding.errors import TaskFileError
from gliding.llm.hosted import litellm_price
from gliding.llm.port import LLMRequest
from gliding.memory.archive.store import Archive
from tests.cli.cli_support import invoke, tree
from tests.daemon.daemon_support import serving
from tests.llm.openai_fake import MODEL, PRICES, FakeOpenAI, serve_fake_openai


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with serve_fake_openai(monkeypatch) as fake:
        yield fake


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def settings(tmp: Path, **llm: Any) -> Settings:
    return load_settings(env={}, overrides={"data_dir": str(tmp / "data"),
                                            **{f"llm.{k}": v for k, v in llm.items()}})


def request(role: str = "DA") -> LLMRequest:
    return LLMRequest(messages=(Message("user", "Write hello.txt"),), meta={"role": role})


TASK = """\
goal: Create hello.txt containing "Hello"
pipeline: [DA]
model: {model}
{budgets}checks:
  - file_contains: {{path: hello.txt, text: Hello}}
"""


def write_task(tmp: Path, *, budgets: str = "", model: str = MODEL) -> Path:
    path = tmp / "task.yaml"
    path.write_text(TASK.format(model=model, budgets=budgets), encoding="utf-8")
    return path


# --- one call ---------------------------------------------------------------------------------


def test_a_model_in_litellms_cost_map_is_priced_by_it(tmp: Path, fake_openai: FakeOpenAI) -> None:
    completion = anyio.run(build_llm("openai/gpt-4o-mini", settings(tmp)).complete, request())
    price = litellm_price("openai/gpt-4o-mini")
    assert price is not None and completion.usage.unpriced_calls == 0
    assert completion.usage.cost_usd == pytest.approx(call_cost(
        price, prompt_tokens=1200, completion_tokens=40, cache_read_tokens=1000))


def test_a_call_to_a_model_without_a_price_has_an_unknown_cost_not_zero(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    completion = anyio.run(build_llm(MODEL, settings(tmp)).complete, request())
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (1200, 40, 1000)
    assert (usage.cost_usd, usage.unpriced_calls) == (0.0, 1)
    assert usage.cost.text() == "unknown (1 call unpriced)"


# --- a job on a model without a price ---------------------------------------------------------


def test_a_job_without_a_price_reports_its_cost_as_unknown(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    events: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(load_task(write_task(tmp)), settings(tmp),
                                       on_event=events.append))
    report = handle.report
    assert report is not None and report.outcome == "success"
    assert report.total.unpriced_calls == 2 and report.unpriced_models == (MODEL,)

    data = report_dict(report, archive=str(handle.archive), model=handle.model)
    assert data["total"]["cost_usd"] is None
    assert (data["total"]["cost_known"], data["total"]["unpriced_calls"]) == (False, 2)
    assert data["unpriced_models"] == [MODEL] and data["cost_free"] is None
    assert data["roles"][0]["cost_usd"] is None
    text = report_text(data)
    assert "$0.0000" not in text and " 0.0000" not in text
    assert (f"Cost: unknown (2 calls unpriced): no price is known for {MODEL}; give it one in "
            "llm.prices") in text
    da_row = next(line for line in text.splitlines() if line.startswith("  DA "))
    assert "unknown" in da_row
    lines = [line for e in events if e.event == "turn" and (line := progress_line(e))]
    assert lines and all("unknown (" in line and "$" not in line for line in lines)
    with Archive.open(tmp / "data", report.job, create=False) as archive:
        assert [c.priced for c in archive.calls()] == [False, False]


def test_a_job_with_llm_prices_reports_what_it_cost(tmp: Path, fake_openai: FakeOpenAI) -> None:
    handle = anyio.run(lambda: run_job(load_task(write_task(tmp)),
                                       settings(tmp, prices=PRICES)))
    report = handle.report
    assert report is not None
    data = report_dict(report, archive=str(handle.archive), model=handle.model)
    per_call = (200 * 3.0 + 1000 * 0.3 + 40 * 15.0) / 1e6
    assert data["total"]["cost_usd"] == pytest.approx(2 * per_call)
    assert data["total"]["cost_known"] and data["unpriced_models"] == []
    assert f"{2 * per_call:.4f}" in report_text(data)


def test_a_cost_budget_with_llm_prices_runs_and_stops_the_job_when_spent(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    path = write_task(tmp, budgets="budgets:\n  cost_usd: 0.001\n")  # one call costs 0.0015
    handle = anyio.run(lambda: run_job(load_task(path), settings(tmp, prices=PRICES)))
    report = handle.report
    assert report is not None and report.outcome == "budget_exceeded"
    assert report.stopped == "cost budget of $0.0010 exceeded"
    assert len(fake_openai.requests) == 1


# --- refused before anything is written -------------------------------------------------------


def test_gliding_run_refuses_a_cost_budget_for_a_model_without_a_price(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    write_task(tmp, budgets="budgets:\n  cost_usd: 0.5\n")
    result = invoke(["run", "task.yaml", "--data-dir", "data"], cwd=tmp)
    assert result.code == 2, result.stderr
    assert f"task.yaml: budgets.cost_usd: no price is known for {MODEL}" in result.stderr
    assert f"llm.prices: {{'{MODEL}': {{input:" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree(tmp) == {"task.yaml"}  # no data dir, no job, no workspace
    assert fake_openai.requests == []


def test_gliding_run_takes_the_cost_budget_once_the_model_has_a_price(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    write_task(tmp, budgets="budgets:\n  cost_usd: 0.5\n")
    (tmp / "config.yaml").write_text(
        f"llm:\n  prices:\n    {MODEL}: {{input: 3.0, output: 15.0, cache_read: 0.3}}\n")
    result = invoke(["run", "task.yaml", "--data-dir", "data", "--json"], cwd=tmp)
    assert result.code == 0, result.stderr
    data = json.loads(result.out)
    assert data["outcome"] == "success" and data["total"]["cost_known"] is True
    assert data["total"]["cost_usd"] == pytest.approx(2 * (200 * 3 + 1000 * 0.3 + 40 * 15) / 1e6)


def test_gliding_run_json_says_the_cost_is_unknown(tmp: Path, fake_openai: FakeOpenAI) -> None:
    write_task(tmp)
    result = invoke(["run", "task.yaml", "--data-dir", "data", "--json", "-q"], cwd=tmp)
    assert result.code == 0, result.stderr
    total = json.loads(result.out)["total"]
    assert (total["cost_usd"], total["cost_known"], total["unpriced_calls"]) == (None, False, 2)


def test_resume_refuses_a_cost_budget_the_settings_no_longer_price(
        tmp: Path, fake_openai: FakeOpenAI) -> None:
    path = write_task(tmp, budgets="budgets:\n  cost_usd: 0.5\n")
    handle = anyio.run(lambda: run_job(load_task(path), settings(tmp, prices=PRICES)))
    assert handle.report is not None
    job = handle.report.job
    with Archive.open(tmp / "data", job, create=False) as archive:
        archive.set_meta("status", "interrupted")
    asked = len(fake_openai.requests)
    with pytest.raises(TaskFileError, match=f"no price is known for {MODEL}"):
        anyio.run(lambda: resume_job(job, settings(tmp)))
    assert len(fake_openai.requests) == asked


def test_the_daemon_refuses_to_queue_a_cost_budget_without_a_price(tmp: Path) -> None:
    text = TASK.format(model=MODEL, budgets="budgets:\n  cost_usd: 0.5\n")

    async def main() -> None:
        async with serving(tmp) as service:
            with pytest.raises(TaskFileError, match=f"no price is known for {MODEL}"):
                await service.submit(text, "mine.yaml")
            assert await service.jobs() == (0, [])

    anyio.run(main)
    assert not (tmp / "workspace").exists()
