"""A whole PA → DA → CA → AA job on a ScriptedLLM through ``run_job`` (what ``gliding run`` calls),
then the report as the CLI renders it; and ``gliding run --model scripted:replies.yaml`` itself,
once as the real console script end to end and once in process for a failed job's exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import JobHandle, run_job
from gliding.daemon.render import progress_line, report_dict, report_text
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from tests.cli.cli_support import invoke, run_cli

CONTENT = "Hello, World! ✓ ünïcode\n"
TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: [PA, DA, CA, AA]
checks:
  - file_exists: hello.txt
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""


def hello_script() -> ScriptedLLM:
    return ScriptedLLM({
        "PA": [call("finish", steps=["Write hello.txt with write_file"])],
        "DA": [call("write_file", path="hello.txt", content=CONTENT),
               call("finish", summary="wrote hello.txt")],
        "CA": [call("run_checks"), call("finish", notes="all checks pass")],
        "AA": [call("finish", decision="done", report="hello.txt is as asked")],
    })


@dataclass(frozen=True)
class Ran:
    handle: JobHandle
    llm: ScriptedLLM
    events: list[JobEvent]
    tmp: Path


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ran:
    monkeypatch.chdir(tmp_path)  # no stray ./config.yaml; relative paths land in tmp
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": "data"})
    llm = hello_script()
    events: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings, llm=llm,
                                       on_event=events.append))
    return Ran(handle, llm, events, tmp_path)


def test_the_job_succeeds_and_writes_the_file(job: Ran) -> None:
    handle, llm, tmp = job.handle, job.llm, job.tmp
    report = handle.report

    assert report.outcome == "success"
    assert report.pipeline.roles == ("PA", "DA", "CA", "AA")
    assert (report.cycles, report.corrections, report.stopped) == (1, 0, None)
    assert report.plan == ("Write hello.txt with write_file",)
    assert (report.decision, report.report) == ("done", "hello.txt is as asked")
    assert report.checks_verified_by == "CA"
    assert [r.passed for r in report.checks] == [True, True]
    assert (tmp / "workspace" / "hello.txt").read_text(encoding="utf-8") == CONTENT
    assert all(llm.remaining(role) == 0 for role in ("PA", "DA", "CA", "AA"))
    assert handle.model == "scripted"
    assert handle.archive == tmp / "data" / "jobs" / report.job / "archive.sqlite3"
    assert handle.archive.is_file()


def test_every_role_has_its_own_token_counts(job: Ran) -> None:
    handle, llm = job.handle, job.llm
    report = handle.report
    by_role = {r.role: r for r in report.roles}

    assert list(by_role) == ["PA", "DA", "CA", "AA"]
    assert {role: r.turns for role, r in by_role.items()} == {"PA": 1, "DA": 2, "CA": 2, "AA": 1}
    for r in by_role.values():
        assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, r
    assert report.total.prompt_tokens == sum(r.usage.prompt_tokens for r in report.roles)
    assert report.total.completion_tokens == sum(r.usage.completion_tokens for r in report.roles)
    assert len(llm.requests) == 6


def test_artifacts_are_archived_byte_exact(job: Ran) -> None:
    handle, tmp = job.handle, job.tmp
    report = handle.report

    assert [path for path, _ in report.artifacts] == ["hello.txt"]
    with Archive.open(tmp / "data", report.job, create=False) as archive:
        for path, iri in report.artifacts:
            item = archive.get(iri)
            assert item.kind == "artifact"
            assert item.content == (tmp / "workspace" / path).read_bytes()
            assert item.content == CONTENT.encode()
            assert item.meta["path"] == path
            # the artifact points back at the tool result that wrote it, which is archived too
            assert archive.get(item.meta["written_by"]).meta["tool"] == "write_file"


def test_every_turn_is_archived_as_json(job: Ran) -> None:
    handle, tmp = job.handle, job.tmp
    report = handle.report

    assert [(t.role, t.turn) for t in report.turns] == [
        ("PA", 1), ("DA", 1), ("DA", 2), ("CA", 1), ("CA", 2), ("AA", 1)]
    with Archive.open(tmp / "data", report.job, create=False) as archive:
        for summary in report.turns:
            item = archive.get(summary.iri)
            assert item.kind == "turn"
            body = json.loads(item.text())
            assert (body["role"], body["turn"]) == (summary.role, summary.turn)
            assert body["prompt"][0]["role"] == "system"
            assert body["reply"]["role"] == "assistant"
            assert body["usage"]["prompt_tokens"] > 0
        assert archive.get_meta("status") == "success"
        assert archive.get_meta("pipeline") == ["PA", "DA", "CA", "AA"]


def test_the_ledger_has_one_row_per_model_call(job: Ran) -> None:
    handle, llm, tmp = job.handle, job.llm, job.tmp
    report = handle.report

    with Archive.open(tmp / "data", report.job, create=False) as archive:
        calls = archive.calls()
    assert len(calls) == len(llm.requests) == 6
    assert [(c.role, c.turn) for c in calls] == [
        (str(r.meta["role"]), int(r.meta["turn"])) for r in llm.requests]
    assert [c.turn_iri for c in calls] == [t.iri for t in report.turns]
    for role in report.roles:
        rows = [c for c in calls if c.role == role.role]
        assert sum(c.prompt_tokens for c in rows) == role.usage.prompt_tokens
        assert sum(c.completion_tokens for c in rows) == role.usage.completion_tokens
    assert {c.model for c in calls} == {"scripted"}


def test_progress_events_render_as_lines(job: Ran) -> None:
    events = job.events
    lines = [line for e in events if (line := progress_line(e))]

    assert (": sandbox: bubblewrap (workspace read-write, system read-only, no home, "
            "no network, 256 processes, 8192 MB, 600 CPU s); toolchain ") in lines[0]
    assert lines[1].endswith(
        "pipeline PA → DA → CA → AA (explicit: pipeline given in the task file)")
    assert "[CA] all checks passed → accept" in lines
    assert any(line.startswith("[DA turn 1] write_file(") for line in lines)


def test_report_dict_has_tokens_per_role_and_check_evidence(job: Ran) -> None:
    handle = job.handle
    report = handle.report

    data = report_dict(report, archive=str(handle.archive), model=handle.model)

    json.dumps(data)  # what --json prints must serialise
    assert data["outcome"] == "success"
    assert {r["role"]: (r["prompt_tokens"], r["completion_tokens"]) for r in data["roles"]} == {
        r.role: (r.usage.prompt_tokens, r.usage.completion_tokens) for r in report.roles}
    assert all(r["prompt_tokens"] > 0 for r in data["roles"])
    assert data["total"]["prompt_tokens"] == report.total.prompt_tokens
    assert [c["evidence"] for c in data["checks"]] == [
        f"hello.txt exists ({len(CONTENT.encode())} bytes)", "found 'Hello, World!' at line 1"]
    assert data["artifacts"] == [{"path": "hello.txt", "iri": report.artifacts[0][1]}]
    assert [t["iri"] for t in data["turns"]] == [t.iri for t in report.turns]


def test_report_text_shows_tokens_per_role_and_check_evidence(job: Ran) -> None:
    handle = job.handle
    report = handle.report

    text = report_text(report_dict(report, archive=str(handle.archive), model=handle.model))

    assert "Outcome: SUCCESS" in text
    assert "Pipeline: PA → DA → CA → AA (explicit), cycles 1, corrections 0" in text
    assert "evidence: found 'Hello, World!' at line 1" in text
    assert f"evidence: hello.txt exists ({len(CONTENT.encode())} bytes)" in text
    lines = text.splitlines()
    for r in report.roles:
        row = next(line for line in lines if line.split()[:1] == [r.role])
        assert row.split()[1:4] == [str(r.turns), str(r.usage.prompt_tokens),
                                   str(r.usage.completion_tokens)], row
    total = next(line for line in lines if line.split()[:1] == ["all"])
    assert total.split()[1:3] == [str(report.total.prompt_tokens),
                                  str(report.total.completion_tokens)]
    assert report.artifacts[0][1] in text
    assert str(handle.archive) in text


# --- gliding run --model scripted:FILE --------------------------------------------------------

REPLIES = """\
PA:
  - finish: {steps: ["Write hello.txt with write_file"]}
DA:
  - write_file: {path: hello.txt, content: "Hello, World! ✓ ünïcode\\n"}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: all checks pass}
AA:
  - finish: {decision: done, report: hello.txt is as asked}
"""


def test_gliding_run_of_a_scripted_job_from_the_console_script(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")

    result = run_cli(["run", "task.yaml", "--model", "scripted:replies.yaml",
                      "--data-dir", "data", "--json"], cwd=tmp_path)

    assert result.code == 0, result
    data = json.loads(result.out)
    assert data["outcome"] == "success", data
    assert data["model"] == f"scripted:{tmp_path / 'replies.yaml'}"
    assert [c["status"] for c in data["checks"]] == ["pass", "pass"], data["checks"]
    assert (tmp_path / "workspace" / "hello.txt").read_text(encoding="utf-8") == CONTENT
    assert Path(data["archive"]).is_file()
    assert "[CA] all checks passed → accept" in result.stderr  # progress lines, not on stdout
    assert "Traceback" not in result.stderr


def test_gliding_run_of_a_job_that_fails_is_exit_1(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(  # DA has no reply: its first model call fails
        "PA:\n  - finish: {steps: [write hello.txt]}\n", encoding="utf-8")

    result = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml",
                     "--data-dir", "data", "-q"], cwd=tmp_path)

    assert result.code == 1, result
    assert "Outcome: ERROR" in result.out, result
    assert "Traceback" not in result.stderr
