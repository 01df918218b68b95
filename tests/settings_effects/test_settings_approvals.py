"""approvals.*: which calls of a real (scripted) job wait for a person's yes; an approved call
runs, a call no one answers is denied at approvals.timeout_s and the agent reads why; the
default asks nothing, so scripted jobs never stall."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import anyio
import pytest

from gliding.agents.approvals import answer
from gliding.bus.messages import JobEvent
from gliding.daemon.compose import run_job
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from tests.settings_effects.effects_support import Job, run_scripted, settings_from, write_task

TASK = "goal: Keep kept.txt\npipeline: [DA]\n"


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


def script() -> dict[str, list]:
    return {"DA": [call("bash", command="echo kept > kept.txt"),
                   call("bash", command="rm -rf kept.txt"),
                   call("finish", summary="tried")]}


def asked(job: Job) -> list[str]:
    return [e.data["arguments"] for e in job.events if e.event == "approval.requested"]


def test_ask_default_nothing_runs_every_call_unasked(tmp: Path) -> None:
    job = run_scripted(write_task(tmp, TASK), settings_from(tmp), script())
    assert job.handle.report.outcome == "success", job.handle.report
    assert asked(job) == [] and not (tmp / "workspace" / "kept.txt").exists()


def test_ask_everything_waits_for_each_call_and_an_approved_one_runs(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_APPROVALS__ASK": "everything"})
    llm, events = ScriptedLLM(script()), []

    def approve_first_deny_second(event: JobEvent) -> None:
        events.append(event)
        if event.event == "approval.requested":  # a person, in another process
            verdict = event.data["approval"].endswith("-1")

            def say() -> None:
                with Archive.open(settings.data_dir, event.job, create=False) as archive:
                    answer(archive, event.data["approval"], approve=verdict,
                           note="" if verdict else "keep it")

            threading.Thread(target=say).start()

    handle = anyio.run(lambda: run_job(write_task(tmp, TASK), settings, llm=llm,
                                       on_event=approve_first_deny_second))
    job = Job(handle, llm, events)
    assert job.handle.report.outcome == "success", job.handle.report
    assert asked(job) == [json.dumps({"command": "echo kept > kept.txt"}),
                          json.dumps({"command": "rm -rf kept.txt"})]
    assert (tmp / "workspace" / "kept.txt").read_text() == "kept\n"  # the rm was denied
    last = job.llm.requests[-1].messages[-1].content
    assert last == "error: a person denied this call: keep it; it was not run"


def test_allow_rules_let_their_calls_run_unasked(tmp: Path) -> None:
    settings = settings_from(tmp, {
        "GLIDING_APPROVALS__ASK": "unmatched", "GLIDING_APPROVALS__TIMEOUT_S": "0.2",
        "GLIDING_APPROVALS__ALLOW": json.dumps([{"tool": "bash", "command": "echo * > *.txt"}])})
    job = run_scripted(write_task(tmp, TASK), settings, script())
    assert asked(job) == [json.dumps({"command": "rm -rf kept.txt"})]
    assert (tmp / "workspace" / "kept.txt").read_text() == "kept\n"


def test_timeout_s_denies_an_unanswered_call_and_the_agent_is_told(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_APPROVALS__ASK": "everything",
                                   "GLIDING_APPROVALS__TIMEOUT_S": "0.3"})
    job = run_scripted(write_task(tmp, TASK), settings, script())
    answered = [e.data for e in job.events if e.event == "approval.answered"]
    assert [(a["approved"], a["by"]) for a in answered] == [(False, "timeout")] * 2
    assert not (tmp / "workspace" / "kept.txt").exists()
    told = job.llm.requests[2].messages[-1].content  # what the model read after the rm
    assert told.startswith("error: no one approved this call within 0.3s (approvals.timeout_s)")
