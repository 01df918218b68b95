"""``gliding run`` of a scripted job whose DA makes the same call three times in a row: the job
ends ``loop_detected`` (exit 1), in the report's text, in ``--json`` and in the progress lines,
and ``gliding resume`` does not run it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.cli_support import invoke, run_cli

pytestmark = pytest.mark.timeout(300)
TASK = "goal: Write hello.txt\npipeline: [DA]\nchecks:\n  - file_exists: hello.txt\n"
LOOPING = """\
DA:
  - read_file: {path: notes.txt}
  - read_file: {path: notes.txt}
  - read_file: {path: notes.txt}
  - write_file: {path: hello.txt, content: never written}
  - finish: {summary: never reached}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(LOOPING, encoding="utf-8")
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("nothing new here\n", encoding="utf-8")
    return tmp_path


def test_a_looping_job_ends_loop_detected_in_json(project: Path) -> None:
    result = run_cli(["run", "task.yaml", "--model", "scripted:replies.yaml",
                      "--data-dir", "data", "--json"], cwd=project)

    assert result.code == 1, result
    data = json.loads(result.out)
    assert data["outcome"] == "loop_detected", data
    assert data["stopped"].startswith("loop detected: read_file(")
    assert "3 times in a row" in data["stopped"]
    assert data["why"] == f"stopped: {data['stopped']}"
    assert [c["status"] for c in data["checks"]] == ["fail"]  # verified once, for the report
    assert data["checks_verified_by"] == "runner"
    assert not (project / "workspace" / "hello.txt").exists()
    assert [t["turn"] for t in data["turns"]] == [1, 2, 3]
    assert "not run" in data["turns"][-1]["summary"]
    assert data["context"]["post_compaction_rereads"] == 0  # notes.txt stayed whole
    # the progress stream on stderr: the guard's event and the role's status
    assert "stopped, loop_detected: loop detected: read_file(" in result.stderr
    assert "[DA] loop_detected after 3 turn(s)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_looping_job_says_so_in_the_report_and_stays_finished(project: Path) -> None:
    result = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml",
                     "--data-dir", "data", "-q"], cwd=project)

    assert result.code == 1, result
    assert "Outcome: LOOP_DETECTED — stopped: loop detected: read_file(" in result.out
    assert "Stopped: loop detected: read_file(" in result.out
    assert "Traceback" not in result.stderr

    (job,) = [p.name for p in (project / "data" / "jobs").iterdir()]
    again = invoke(["resume", job, "--data-dir", "data", "--json"], cwd=project)
    assert json.loads(again.out) == {"job": job, "outcome": "loop_detected",
                                     "already_finished": True}, again
