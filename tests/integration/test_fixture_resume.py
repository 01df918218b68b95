"""Jobs that older commits left in their data directories (``tests/fixtures/<commit>/``, made by
``make_fixtures.sh``) resume with today's ``gliding resume``: a finished one says it finished,
one killed with ``kill -9`` in the middle of DA's third turn ends ``success`` with no tool run
twice (each step's line once in log.txt, as ``scripts/bench_resume.py`` counts re-executions)
and no model turn paid twice; its archive is migrated to today's schema in place."""

from __future__ import annotations

import collections
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gliding.memory.archive.schema import SCHEMA_VERSION

GLIDING = Path(sys.executable).parent / "gliding"
FIXTURES = Path(__file__).parents[1] / "fixtures"
CASES = [(made.parent.name, case) for made in sorted(FIXTURES.glob("*/fixtures.json"))
         for case in ("finished", "killed")]
STEPS = [f"step-{k}" for k in range(1, 5)]

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]


def unpack(commit: str, case: str, root: Path) -> str:
    """The fixture's job directory at ``root``; its job id.

    The archive records absolute paths (the task file, the workspace, the replies file): the
    root they were made under becomes ``root`` in its job table, and nothing else changes.
    """
    made = json.loads((FIXTURES / commit / "fixtures.json").read_text(encoding="utf-8"))
    job, old_root = made["cases"][case]["job"], made["cases"][case]["root"]
    with tarfile.open(FIXTURES / commit / f"{case}.tar.gz") as tar:
        tar.extractall(root, filter="data")
    db = sqlite3.connect(archive_of(root, job))
    try:
        with db:
            db.execute("UPDATE job SET value = replace(value, ?, ?)", (old_root, str(root)))
    finally:
        db.close()
    return job


def archive_of(root: Path, job: str) -> Path:
    return root / "data" / "jobs" / job / "archive.sqlite3"


def archived(root: Path, job: str) -> dict[str, Any]:
    db = sqlite3.connect(archive_of(root, job))
    try:
        turns = collections.Counter(r[0] for r in db.execute("SELECT turn_iri FROM calls"))
        results = [bytes(r[0]) for r in db.execute(
            "SELECT content FROM entries WHERE kind = 'result'")]
        return {
            "status": json.loads(db.execute(
                "SELECT value FROM job WHERE key = 'status'").fetchone()[0]),
            "repaid_turns": sum(n - 1 for n in turns.values() if n > 1),
            "interrupted": sum(1 for r in results if r.startswith(b"error: interrupted")),
            "version": db.execute("PRAGMA user_version").fetchone()[0],
        }
    finally:
        db.close()


@pytest.mark.parametrize(("commit", "case"), CASES)
def test_a_job_of_an_older_commit_resumes(tmp_path: Path, commit: str, case: str) -> None:
    job = unpack(commit, case, tmp_path)

    done = subprocess.run([str(GLIDING), "resume", job, "--data-dir", "data", "--json", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["outcome"] == "success"
    lines = collections.Counter((tmp_path / "ws" / "log.txt").read_text().split())
    assert sum(n - 1 for n in lines.values() if n > 1) == 0  # no tool re-executed
    assert sorted(lines) == STEPS
    after = archived(tmp_path, job)
    assert (after["status"], after["repaid_turns"], after["version"]) == (
        "success", 0, SCHEMA_VERSION)
    if case == "finished":
        assert report["already_finished"] is True
        assert after["interrupted"] == 0
    else:  # step 3's command had begun: not run again, the model is told it was cut off
        assert report["resumed"] == 1
        assert after["interrupted"] == 1
