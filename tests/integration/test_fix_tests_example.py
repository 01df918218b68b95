"""examples/fix-tests through the console script: a coding job whose check is
``python -m pytest -q``, run in the default sandbox (bubblewrap) by a caller whose pytest lives
only in their activated venv outside the workspace (the project's own venv plays it).

The example is copied to tmp (its ``repo/`` becomes the workspace, as ``run.sh`` does), so the
repository's tree is never touched. The second job's DA first leaves the bug: CA's check fails
with pytest's own output, and the correction loop fixes it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from gliding.memory.archive.store import Archive
from gliding.tools.sandbox import bwrap_problem
from tests.cli.cli_support import run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fix-tests"
VENV = Path(sys.prefix)

pytestmark = [
    pytest.mark.heavy,  # whole jobs in a subprocess, pytest in the sandbox
    pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap: {bwrap_problem()}"),
    pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests run in no venv"),
]

CORRECTED = """\
PA:
  - finish: {steps: ["Run the tests", "Fix calc.py"]}
DA:
  - bash: {command: "python -m pytest -q"}
  - finish: {summary: "ran the tests"}
  - bash: {command: "sed -i 's|(len(values) + 1)|len(values)|' calc.py"}
  - bash: {command: "python -m pytest -q"}
  - finish: {summary: "fixed mean()"}
CA:
  - run_checks: {}
  - finish: {notes: "pytest fails: mean() is off"}
  - run_checks: {}
  - finish: {notes: "pytest passes"}
AA:
  - finish: {decision: done, report: "fixed after one correction"}
"""


def _example(tmp: Path, replies: str | None = None) -> Path:
    """The example in ``tmp``: its task file, its replies, repo/ copied to workspace/."""
    shutil.copy(EXAMPLE / "task.yaml", tmp / "task.yaml")
    if replies is None:
        shutil.copy(EXAMPLE / "replies.yaml", tmp / "replies.yaml")
    else:
        (tmp / "replies.yaml").write_text(replies)
    shutil.copytree(EXAMPLE / "repo", tmp / "workspace")
    return tmp / "task.yaml"


def _run(tmp: Path, task: Path) -> tuple[int, dict, str]:
    # activated the way `. venv/bin/activate` does; no pyenv, no ~/.local on the PATH
    env = {"PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(VENV)}
    done = run_cli(["run", str(task), "--model", f"scripted:{tmp / 'replies.yaml'}",
                    "--data-dir", str(tmp / "data"), "--json"], cwd=tmp, env=env, timeout=300)
    return done.code, json.loads(done.out), done.stderr


def test_the_example_fixes_the_bug_and_pytest_passes_in_the_sandbox(tmp_path: Path) -> None:
    code, report, progress = _run(tmp_path, _example(tmp_path))

    assert code == 0, progress
    assert report["outcome"] == "success"
    command = report["checks"][0]
    assert command["status"] == "pass" and "2 passed" in command["evidence"]
    assert f"venv {os.path.realpath(VENV)}" in progress.splitlines()[0]
    assert "Traceback" not in progress
    assert "sum(values) / len(values)" in (tmp_path / "workspace/calc.py").read_text()


def test_a_first_attempt_that_leaves_the_bug_is_corrected_with_pytests_output(
        tmp_path: Path) -> None:
    code, report, progress = _run(tmp_path, _example(tmp_path, CORRECTED))

    assert code == 0, progress
    assert report["outcome"] == "success" and report["corrections"] == 1
    failed = next(line for line in progress.splitlines() if "[CA turn 1] run_checks()" in line)
    assert "FAIL command `python -m pytest -q`" in failed, failed
    with Archive.open(tmp_path / "data", report["job"], create=False) as archive:
        results = [archive.get(item.iri).text() for item in archive.list(kind="result")]
    first_check = next(r for r in results if "FAIL command" in r)  # what DA was sent back with
    assert "1 failed" in first_check and "assert 2.0 == 2.5" in first_check, first_check
    assert "2 passed" in report["checks"][0]["evidence"]
