"""How a job's cost is shown: a local or scripted model's known $0, a priced hosted model's
cost and an unknown one, in the report (text and JSON), the progress lines and ``gliding
status`` (the daemon's ``archived_status``). Jobs run on ScriptedLLM; one named like a hosted
model with ``cost_per_call=None`` stands for a model without a price."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import JobHandle, run_job
from gliding.daemon.reading import archived_status
from gliding.daemon.render import progress_line, report_dict, report_text, status_text
from gliding.testing import ScriptedLLM, call

TASK = """\
goal: Create hello.txt containing "Hello"
pipeline: [DA]
checks:
  - file_contains: {path: hello.txt, text: Hello}
"""


def da(name: str, cost: float | None) -> ScriptedLLM:
    return ScriptedLLM({"DA": [call("write_file", path="hello.txt", content="Hello"),
                               call("finish", summary="wrote hello.txt")]},
                       name=name, cost_per_call=cost)


def run(tmp: Path, llm: ScriptedLLM) -> tuple[JobHandle, list[JobEvent]]:
    (tmp / "task.yaml").write_text(TASK, encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": str(tmp / "data")})
    events: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(load_task(tmp / "task.yaml"), settings, llm=llm,
                                       on_event=events.append))
    return handle, events


def ledger_tokens(tmp: Path, job: str) -> dict[str, Any]:
    """``progress.tokens`` of ``gliding status``: what the job's ledger says."""
    status = archived_status(tmp / "data", job)
    assert status is not None
    return dict(status["tokens"])


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def progress(events: list[JobEvent]) -> list[str]:
    return [line for e in events if e.event == "turn" and (line := progress_line(e))]


def test_a_scripted_model_costs_a_known_zero(tmp: Path) -> None:
    handle, events = run(tmp, da("scripted", 0.0))
    assert handle.report is not None
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    assert (data["total"]["cost_usd"], data["total"]["cost_known"]) == (0.0, True)
    assert data["cost_free"] == "scripted" and data["unpriced_models"] == []
    text = report_text(data)
    assert "  all " in text and "0 (scripted)" in text and "unknown" not in text
    assert all(line.endswith("$0 (scripted model)") for line in progress(events))
    tokens = ledger_tokens(tmp, handle.report.job)
    assert (tokens["cost_usd"], tokens["cost_known"], tokens["cost_free"]) == (0.0, True,
                                                                               "scripted")
    status = status_text({"job": handle.report.job, "state": "finished", "progress": {
        "turns": 2, "turns_by_role": {"DA": 2}, "tokens": tokens, "archive_status": "success"}})
    assert "$0 (scripted model)" in status


def test_a_local_model_shows_its_zero_as_local() -> None:
    line = progress_line(JobEvent(job="j", event="turn", data={
        "role": "DA", "turn": 1, "summary": "s", "prompt_tokens": 1, "job_prompt_tokens": 1,
        "job_cost_usd": 0.0, "job_unpriced_calls": 0, "cost_free": "local"}))
    assert line is not None and line.endswith("| prompt 1 tok, job 1 tok, $0 (local model)")


def test_a_hosted_model_with_a_cost_shows_it(tmp: Path) -> None:
    handle, events = run(tmp, da("openai/priced", 0.25))
    assert handle.report is not None
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    assert (data["total"]["cost_usd"], data["cost_free"]) == (0.5, None)
    assert "   0.5000" in report_text(data)
    assert progress(events)[-1].endswith("$0.5000")


def test_a_model_without_a_price_is_unknown_everywhere(tmp: Path) -> None:
    handle, events = run(tmp, da("openai/unpriced", None))
    report = handle.report
    assert report is not None and report.unpriced_models == ("openai/unpriced",)
    data = report_dict(report, archive=str(handle.archive), model=handle.model)
    assert data["roles"][0]["cost_usd"] is None and data["total"]["cost_usd"] is None
    assert data["total"]["cost_usd_at_least"] == 0.0
    assert [line.rsplit(", ", 1)[-1] for line in progress(events)] == [
        "unknown (1 call unpriced)", "unknown (2 calls unpriced)"]

    tokens = ledger_tokens(tmp, report.job)
    assert tokens["cost_usd"] is None and tokens["unpriced_models"] == ["openai/unpriced"]
    status = status_text({"job": report.job, "state": "finished", "progress": {
        "turns": 2, "turns_by_role": {"DA": 2}, "tokens": tokens, "archive_status": "success"}})
    assert "tokens:    prompt" in status and ", unknown (2 calls unpriced)" in status
    assert "unpriced:  openai/unpriced (no price known; give it one in llm.prices)" in status
    assert "$" not in status
