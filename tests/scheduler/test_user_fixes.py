"""What a new user tripped over: turn caps from role files, per-role and completion budgets,
reports that contradicted themselves, failures hidden until the end, two unexplained token
totals, and a used workspace passing on the first run's file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gliding.bus.messages import JobEvent
from gliding.core.checks import FileContains
from gliding.daemon.render import progress_line, report_dict, report_text
from gliding.testing import ScriptedLLM, call
from tests.scheduler.test_runner import make_task, run

# two calls in turn: never the same call three times in a row (scheduler.loop_limit)
LOOKING = [call("list_dir", path="."), call("list_dir", path="./")] * 10


def test_a_role_files_max_turns_applies_when_the_task_sets_none(tmp_path: Path) -> None:
    llm = ScriptedLLM({"DA": LOOKING})
    report = run(make_task(tmp_path, pipeline=("DA",), turns={}, checks=()), llm, tmp_path).report
    assert report is not None
    (da,) = report.roles
    assert da.turns == 6  # roles/DA.yaml max_turns, not a task-file default


def test_a_task_turn_cap_still_overrides_the_role_file(tmp_path: Path) -> None:
    llm = ScriptedLLM({"DA": [call("list_dir", path=".")] * 20})
    report = run(make_task(tmp_path, pipeline=("DA",), turns={"DA": 2}, checks=()), llm,
                 tmp_path).report
    assert report is not None and report.roles[0].turns == 2


def test_a_per_role_prompt_budget_stops_only_when_that_role_spends_it(tmp_path: Path) -> None:
    llm = ScriptedLLM({"PA": [call("finish", steps=["look"])],
                       "DA": [call("list_dir", path=".")] * 20})
    report = run(make_task(tmp_path, prompt_tokens={"DA": 700}), llm, tmp_path).report
    assert report is not None
    assert report.outcome == "budget_exceeded"
    assert "DA's prompt token budget of 700 spent" in (report.stopped or "")
    roles = {r.role: r for r in report.roles}
    assert roles["PA"].turns == 1 and roles["DA"].usage.prompt_tokens >= 700


def test_completion_tokens_count_against_their_own_budget(tmp_path: Path) -> None:
    chatty = [call("write_file", path=f"a{i}.txt", content="x" * 400)  # ~100 completion tokens
              for i in range(10)]
    llm = ScriptedLLM({"PA": [call("finish", steps=["write"])], "DA": chatty})
    report = run(make_task(tmp_path, completion_tokens=250), llm, tmp_path).report
    assert report is not None
    assert report.outcome == "budget_exceeded"
    assert "completion token budget of 250 spent" in (report.stopped or "")
    assert report.total.completion_tokens >= 250


def test_a_report_never_says_escalate_and_every_check_passed_without_explaining(
        tmp_path: Path) -> None:
    llm = ScriptedLLM({
        "DA": [call("write_file", path="hello.txt", content="Hello, World!"),
               call("finish", summary="ok")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="escalate", report="not sure")],
    })
    task = make_task(tmp_path, pipeline=("DA", "CA", "AA"),
                     checks=(FileContains("hello.txt", "Hello, World!"),))
    handle = run(task, llm, tmp_path)
    assert handle.report is not None and handle.report.outcome == "success"
    text = report_text(report_dict(handle.report, archive="a", model="m"))
    assert "Outcome: SUCCESS — every check passed (verified by CA)" in text
    assert "AA's decision: escalate (not taken: every check passed) — not sure" in text


def test_a_failing_check_shows_in_the_progress_lines_when_it_fails(tmp_path: Path) -> None:
    events: list[JobEvent] = []
    llm = ScriptedLLM({
        "DA": [call("write_file", path="hello.txt", content="nope"), call("finish", summary="x"),
               call("write_file", path="hello.txt", content="Hello, World!"),
               call("finish", summary="fixed")],
        "CA": [call("run_checks"), call("finish", notes="wrong"), call("run_checks"),
               call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="fixed")],
    })
    task = make_task(tmp_path, pipeline=("DA", "CA", "AA"),
                     checks=(FileContains("hello.txt", "Hello, World!"),))
    report = run(task, llm, tmp_path, on_event=events.append).report
    assert report is not None and report.outcome == "success"
    lines = [line for e in events if (line := progress_line(e))]
    failed = next(line for line in lines if line.startswith("[CA] FAIL"))
    assert "file hello.txt contains 'Hello, World!'" in failed and "→ correct" in failed
    assert lines.index(failed) < len(lines) - 3  # shown when it happened, not at the end


def test_the_report_says_which_checked_files_the_job_wrote_and_which_it_found(
        tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "old.txt").write_text("Hello, World!")  # a first run's file
    llm = ScriptedLLM({"DA": [call("write_file", path="new.txt", content="Hello, World!"),
                              call("finish", summary="wrote new.txt")]})
    task = make_task(tmp_path, pipeline=("DA",), checks=(
        FileContains("old.txt", "Hello, World!"), FileContains("new.txt", "Hello, World!"),
        FileContains("gone.txt", "x")))
    report = run(task, llm, tmp_path).report
    assert report is not None
    assert report.checked_files == {"old.txt": "found unchanged",
                                    "new.txt": "written by this job", "gone.txt": "missing"}
    text = report_text(report_dict(report, archive="a", model="m"))
    assert ("Checked files: old.txt (found unchanged), new.txt (written by this job), "
            "gone.txt (missing)") in text


def test_the_two_token_totals_are_told_apart_and_schema_tokens_are_reported(
        tmp_path: Path) -> None:
    llm = ScriptedLLM({"DA": [call("list_dir", path="."), call("finish", summary="ok")]})
    report = run(make_task(tmp_path, pipeline=("DA",), checks=()), llm, tmp_path).report
    assert report is not None
    data: dict[str, Any] = report_dict(report, archive="a", model="m")
    assert data["roles"][0]["schema_tokens"] > 100  # DA's tools cost tokens in every prompt
    text = report_text(data)
    assert "Tokens and cost per role (as the model reported them):" in text
    assert "Context engine: the prompts it built came to" in text
    assert "the table counts the model's own tokenizer" in text


def test_a_job_that_cannot_reach_the_blackboard_is_not_offered_the_knowledge_tools(
        tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = ScriptedLLM({"DA": [call("list_dir", path="."), call("finish", summary="ok")]})
    report = run(make_task(tmp_path, pipeline=("DA",), checks=()), llm, tmp_path,
                 **{"memory.blackboard.url": f"http://127.0.0.1:{port}"}).report
    assert report is not None and report.outcome == "success"
    offered = {t.name for r in llm.requests for t in r.tools}
    assert "kg_search" not in offered and "knowledge_query" not in offered
    assert "read_result" in offered  # the archive's own tools stay


def test_a_job_with_a_blackboard_is_offered_the_knowledge_tools(tmp_path: Path) -> None:
    llm = ScriptedLLM({"DA": [call("list_dir", path="."), call("finish", summary="ok")]})
    run(make_task(tmp_path, pipeline=("DA",), checks=()), llm, tmp_path)
    assert "kg_search" in {t.name for t in llm.requests[0].tools}


@pytest.mark.heavy  # a thousand model turns: about five seconds
def test_a_job_without_an_event_listener_never_stalls_on_its_own_events(
        tmp_path: Path) -> None:
    from gliding.testing import text

    llm = ScriptedLLM({"DA": [text("thinking")] * 1010 + [call("list_dir", path="."),
                                                          call("finish", summary="ok")]})
    task = make_task(tmp_path, pipeline=("DA",), turns={"DA": 1012}, checks=(),
                     wall_time_s=120)
    report = run(task, llm, tmp_path).report  # no on_event: nobody reads job/<job>/events
    assert report is not None and report.outcome == "success"
    assert report.roles[0].turns == 1012
