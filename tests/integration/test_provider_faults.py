"""Whole scripted jobs through ``gliding run`` on litellm (``openai/fake-model``, ``llm.api_base``
at the fake provider on 127.0.0.1): one that meets 429s and finishes with every bash step run
once, one whose provider goes down mid-job and stays down (the job ends ``interrupted``, exit 1,
with the command to resume it) and that ``gliding resume`` finishes once the provider is back,
replaying the archived turns instead of running them again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gliding.testing.fake_provider import FakeProvider, FaultPlan
from tests.cli.cli_support import CLIResult, invoke

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]

TASK = """\
goal: Append two lines to log.txt
workspace: ws
pipeline: [PA, DA, CA, AA]
checks:
  - command: "test $(wc -l < log.txt) -eq 2"
"""
REPLIES = """\
PA:
  - finish: {steps: [append the lines]}
DA:
  - bash: {command: "echo one >> log.txt"}
  - bash: {command: "echo two >> log.txt"}
  - finish: {summary: appended}
CA:
  - run_checks: {}
  - finish: {notes: ok}
AA:
  - finish: {decision: done, report: two lines}
"""
FAST_RETRIES = {"GLIDING_LLM__RETRY__INITIAL_S": "0.01", "GLIDING_LLM__RETRY__MAX_S": "0.05"}


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    return tmp_path


def gliding(tmp: Path, fp: FakeProvider, *args: str, **env: str) -> CLIResult:
    return invoke([*args, "--data-dir", "data"], cwd=tmp, env={
        "GLIDING_LLM__API_BASE": fp.url, "OPENAI_API_KEY": "dummy",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1,localhost",
        "HTTP_PROXY": "", "HTTPS_PROXY": "", "http_proxy": "", "https_proxy": "",
        "OPENAI_API_BASE": "http://127.0.0.1:9/v1",  # llm.api_base must win over it
        **FAST_RETRIES, **env})


def test_a_job_meeting_429s_succeeds_with_each_step_run_once(tmp: Path) -> None:
    plan = FaultPlan(rate=0.5, seed=3, mix={"429": 1, "429_ra": 1}, retry_after_s=1)
    with FakeProvider(tmp / "replies.yaml", faults=plan) as fp:
        result = gliding(tmp, fp, "run", "task.yaml", "--model", "openai/fake-model")

    assert result.code == 0, result.stderr
    assert "Outcome: SUCCESS" in result.out
    assert fp.counts["429"] + fp.counts["429_ra"] >= 2 and fp.counts["ok"] == 7
    assert "model openai/fake-model: 429 rate limited, retry 1/5 in" in result.stderr
    assert (tmp / "ws" / "log.txt").read_text() == "one\ntwo\n"  # no step ran twice
    assert all(r.path.endswith("/chat/completions") for r in fp.requests)


def test_a_provider_down_interrupts_the_job_and_resume_finishes_it(tmp: Path) -> None:
    down = FaultPlan.down("503", start_after=2)  # PA's turn and DA's first pass, then nothing
    with FakeProvider(tmp / "replies.yaml", faults=down) as fp:
        stopped = gliding(tmp, fp, "run", "task.yaml", "--model", "openai/fake-model",
                          GLIDING_LLM__RETRY__MAX_ATTEMPTS="3")
        job = next((tmp / "data" / "jobs").iterdir()).name
        listed = gliding(tmp, fp, "jobs", "--json")
        fp.faults = None  # the provider is back
        resumed = gliding(tmp, fp, "resume", job)
        again = gliding(tmp, fp, "resume", job)

    assert stopped.code == 1, stopped.stderr
    assert "Outcome: INTERRUPTED" in stopped.out
    assert f"Resume: gliding resume {job}" in stopped.out
    assert "503 server error, retry 2/2" in stopped.stderr
    assert "no model answered" in stopped.stderr and "llm.unavailable" not in stopped.out
    info = json.loads(listed.out.splitlines()[0])
    assert info["status"] == "interrupted" and "no model answered" in info["stopped_by"]
    assert fp.counts["503"] == 3  # DA's second turn: three calls, no more

    assert resumed.code == 0, resumed.stderr
    assert "Outcome: SUCCESS" in resumed.out
    assert "[DA] finished after 3 turn(s), 1 replayed from the archive" in resumed.stderr
    assert (tmp / "ws" / "log.txt").read_text() == "one\ntwo\n"  # "one" was not run again
    assert "already finished: success" in again.out
