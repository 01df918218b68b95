"""kill -9 of a real ``gliding run`` mid-job, then ``gliding jobs`` and ``gliding resume``: the job
shows as interrupted, resumes to the outcome of an uninterrupted run, and no step ran twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

GLIDING = Path(sys.executable).parent / "gliding"
STEPS = 4

TASK = f"""\
goal: Append step-1 .. step-{STEPS} to log.txt
workspace: ws
pipeline: [PA, DA, CA, AA]
checks:
  - command: "test $(wc -l < log.txt) -eq {STEPS} && test $(sort -u log.txt | wc -l) -eq {STEPS}"
"""
REPLIES = (
    "PA:\n  - finish: {steps: [append]}\nDA:\n"
    + "".join(f'  - bash: {{command: "echo step-{k} >> log.txt && sleep 0.3"}}\n'
              for k in range(1, STEPS + 1))
    + "  - finish: {summary: done}\nCA:\n  - run_checks: {}\n  - finish: {notes: ok}\n"
    "AA:\n  - finish: {decision: done, report: ok}\n")


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GLIDING), *args, "--data-dir", "data"], cwd=tmp, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def archived_results(tmp: Path) -> int:
    dbs = list((tmp / "data" / "jobs").glob("*/archive.sqlite3"))
    if not dbs:
        return 0
    db = sqlite3.connect(dbs[0])
    try:
        return int(db.execute("SELECT COUNT(*) FROM entries WHERE kind = 'result'")
                   .fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


@pytest.mark.heavy
def test_kill9_mid_job_then_resume(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    proc = subprocess.Popen([str(GLIDING), "run", "task.yaml", "--model", "scripted:replies.yaml",
                             "--data-dir", "data", "-q"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    # killed while step 3 runs, once its echo is done (in its sleep): a kill between the
    # call's start and its echo would leave the step unknown, and the scripted replies have no
    # turn to redo it
    log = tmp_path / "ws" / "log.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
            archived_results(tmp_path) >= 2 and log.exists()
            and len(log.read_text().split()) >= 3):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert archived_results(tmp_path) >= 2

    listed = cli(tmp_path, "jobs")
    assert listed.returncode == 0, listed.stderr
    job, status = listed.stdout.split()[:2]
    assert status == "interrupted"

    resumed = cli(tmp_path, "resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert "Outcome: SUCCESS" in resumed.stdout
    lines = (tmp_path / "ws" / "log.txt").read_text().split()
    assert sorted(lines) == [f"step-{k}" for k in range(1, STEPS + 1)]  # each step once

    again = cli(tmp_path, "resume", job)
    assert again.returncode == 0
    assert f"job {job} already finished: success" in again.stdout
    as_json = cli(tmp_path, "resume", job, "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout) == {"job": job, "outcome": "success",
                                          "already_finished": True}
    assert cli(tmp_path, "jobs").stdout.split()[1] == "success"
