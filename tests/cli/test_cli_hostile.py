"""What reaches the terminal when a model (or a user's typo) is hostile: escape sequences and
spoofed report lines are shown escaped, ``log_format: json`` makes every stderr line JSON,
number options out of range are exit 2 with one message, and an error that is not a
GlidingError is still one message and an exit code."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from gliding.bus.messages import JobEvent
from gliding.core.logs import configure_logging, terminal_safe
from gliding.daemon.render import json_text, progress_line
from tests.cli.cli_support import CLIResult, invoke, tree

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but \t and \n
SPOOF = "\x1b[2J\x1b[H\rOutcome: SUCCESS — every check passed\n\x1b]0;pwned\x07\bx"


# --- escaping ----------------------------------------------------------------------------------


def test_terminal_safe_escapes_every_control_character_visibly() -> None:
    assert terminal_safe(SPOOF) == ("\\x1b[2J\\x1b[H\\rOutcome: SUCCESS — every check passed"
                                    "\\n\\x1b]0;pwned\\x07\\bx")
    assert terminal_safe("a\u202eb\u2028c\x9bd") == "a\\u202eb\\u2028c\\x9bd"
    assert terminal_safe("two\nlines\tand tab", one_line=False) == "two\nlines\tand tab"
    assert terminal_safe("Grüße ✓ → 世界") == "Grüße ✓ → 世界"  # printable text stays


@pytest.mark.parametrize(("event", "data"), [
    ("turn", {"role": "DA", "turn": 1, "summary": SPOOF, "prompt_tokens": 1,
              "job_prompt_tokens": 1, "job_cost_usd": 0.0}),
    ("check.report", {"passed": False, "failed": [SPOOF], "next": "retry"}),
    ("job.started", {"pipeline": ["DA"], "kind": "auto", "reason": SPOOF}),
    ("role.finished", {"role": "DA", "status": SPOOF, "turns": 1}),
])
def test_a_progress_line_is_one_line_without_raw_controls(event: str,
                                                          data: dict[str, object]) -> None:
    line = progress_line(JobEvent(job="j", event=event, data=data))

    assert line is not None
    assert "\n" not in line and "\r" not in line
    assert not RAW_CONTROL.search(line), repr(line)
    assert "\\x1b[2J" in line and not line.startswith("Outcome")


def test_json_text_escapes_what_json_leaves_raw() -> None:
    text = json_text({"report": "a\x9b2Jb\u202e\x7f ü"}, indent=None)

    assert text == '{"report": "a\\u009b2Jb\\u202e\\u007f ü"}'
    assert json.loads(text) == {"report": "a\x9b2Jb\u202e\x7f ü"}


# --- a whole job whose model writes escapes and a spoofed outcome ------------------------------

TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: [PA, DA, CA, AA]
checks:
  - file_contains: {path: hello.txt, text: "Hello, World!"}
"""
REPLIES = r"""
PA:
  - finish: {steps: ["write it\e[2J\rOutcome: SUCCESS"]}
DA:
  - write_file: {path: hello.txt, content: "nope\e]0;pwned\a\n"}
  - finish: {summary: "done\b\b\b\bSUCCESS\nOutcome: SUCCESS"}
CA:
  - run_checks: {}
  - finish: {notes: "x\e[1A"}
AA:
  - finish: {decision: escalate, report: "all good\nOutcome: SUCCESS — every check passed\
      \u009b2J\e[1A"}
"""
ONE_CYCLE = {"GLIDING_SCHEDULER__MAX_CORRECTIONS": "0", "GLIDING_SCHEDULER__MAX_CYCLES": "1"}


def spoofed_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> CLIResult:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    return invoke(["run", "task.yaml", "--model", "scripted:replies.yaml", "--data-dir", "data",
                   *args], cwd=tmp_path, env={**ONE_CYCLE, **(env or {})})


def test_model_text_cannot_spoof_the_report_or_reach_the_terminal_raw(tmp_path: Path) -> None:
    result = spoofed_run(tmp_path)

    assert result.code == 1, result
    outcome_lines = [line for line in result.out.splitlines() if line.startswith("Outcome")]
    assert outcome_lines == ["Outcome: ESCALATED — 1 of 1 checks failed: file hello.txt "
                             "contains 'Hello, World!' (AA escalated)"]
    assert "all good\\nOutcome: SUCCESS — every check passed\\x9b2J\\x1b[1A" in result.out
    for stream in (result.out, result.stderr):
        assert not RAW_CONTROL.search(stream), repr(stream)
    assert "Traceback" not in result.stderr


def test_the_json_report_carries_no_raw_control_character(tmp_path: Path) -> None:
    result = spoofed_run(tmp_path, "--json", "-q")

    assert not RAW_CONTROL.search(result.out), repr(result.out)
    data = json.loads(result.out)
    assert data["report"] == "all good\nOutcome: SUCCESS — every check passed\x9b2J\x1b[1A"


# --- log_format: json --------------------------------------------------------------------------


def json_lines(stderr: str) -> list[dict[str, object]]:
    lines = stderr.splitlines()
    assert lines
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line on stderr: {line!r}")
    return parsed


def test_with_log_format_json_every_stderr_line_of_a_job_is_json(tmp_path: Path) -> None:
    result = spoofed_run(tmp_path, env={"GLIDING_LOG_FORMAT": "json",
                                        "GLIDING_LOG_LEVEL": "info"})

    assert result.code == 1, result
    records = json_lines(result.stderr)
    progress = [r for r in records if r["event"] == "job.progress"]
    assert {r["kind"] for r in progress} >= {"job.started", "turn", "role.finished"}
    assert any(str(r["message"]).startswith("[AA turn 1]") for r in progress)
    assert any(r["event"] == "role.started" for r in records)  # structlog's own lines
    assert not RAW_CONTROL.search(result.stderr)


def test_with_log_format_json_an_error_is_a_json_line(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("goal: x\nbudgets: {turns: 0}\n", encoding="utf-8")

    result = invoke(["run", "task.yaml", "--data-dir", "data"], cwd=tmp_path,
                    env={"GLIDING_LOG_FORMAT": "json"})

    assert result.code == 2, result
    [record] = json_lines(result.stderr)
    assert record["event"] == "cli.error" and record["level"] == "error"
    assert record["exit_code"] == 2 and record["code"] == "task.invalid"
    assert "budgets.turns: must be from 1 to" in str(record["error"])
    assert tree(tmp_path) == {"task.yaml"}


def test_with_log_format_json_library_log_records_are_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = list(root.handlers)
    try:
        configure_logging("info", "json")
        logging.getLogger("some.library").warning("careful: %s", "\x1b[2J")
    finally:
        configure_logging("warning", "console")
        root.handlers[:] = saved

    [record] = json_lines(capsys.readouterr().err)
    assert record == {**record, "event": "log.record", "level": "warning",
                      "logger": "some.library", "message": "careful: \x1b[2J"}


def test_console_log_lines_escape_model_text(tmp_path: Path) -> None:
    result = spoofed_run(tmp_path, env={"GLIDING_LOG_LEVEL": "info"})

    assert "role.started" in result.stderr  # log lines are there, and escaped
    assert not RAW_CONTROL.search(result.stderr), repr(result.stderr)


# --- number options ----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    (["memory", "query", "ASK {}", "--timeout", "inf"], "--timeout must be from 0.001 to 3600"),
    (["memory", "query", "ASK {}", "--timeout", "nan"], "--timeout must be from 0.001 to 3600"),
    (["memory", "query", "ASK {}", "--timeout", "-1"], "--timeout must be from 0.001 to 3600"),
    (["memory", "query", "ASK {}", "--limit", "0"], "--limit must be from 1 to 100000"),
    (["memory", "search", "x", "-k", "-5"], "--top must be from 1 to 1000, got -5"),
    (["memory", "search", "x", "-k", "1000000"], "--top must be from 1 to 1000"),
    (["memory", "recall", "x", "--budget", "-1", "--no-vectors"],
     "--budget must be from 1 to 1000000"),
])
def test_a_number_option_out_of_range_is_exit_2(tmp_path: Path, args: list[str],
                                                expected: str) -> None:
    result = invoke([*args, "--data-dir", "data"], cwd=tmp_path)

    assert result.code == 2, result
    assert result.stderr.startswith(f"error: {expected}"), result
    assert "Traceback" not in result.stderr
    assert tree(tmp_path) == set()
