"""``gliding daemon`` as a real process: a job waiting for approval survives ``kill -9`` of the
daemon, waits again once the daemon is back (shown by ``gliding status``), runs the approved
call once after ``gliding approve``, and its agent reads the note of a ``gliding deny``."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.daemon.daemon_support import replies
from tests.daemon.test_approvals_daemon import ASKING
from tests.daemon.test_daemon_kill9 import gliding, start_daemon

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]


def waiting_line(tmp: Path, job: str, ident: str) -> str:
    """``gliding status JOB``'s line for the call ``ident`` once it waits (at most 120 s)."""
    deadline = time.monotonic() + 120
    out = ""
    while time.monotonic() < deadline:
        out = gliding(tmp, "status", job).stdout
        for line in out.splitlines():
            if line.startswith(f"waiting:   approval {ident}:"):
                return line
        time.sleep(0.1)
    raise AssertionError(f"{ident} never waited:\n{out}")


def result_text(tmp: Path, job: str, turn: int) -> str:
    db = sqlite3.connect(tmp / "data" / "jobs" / job / "archive.sqlite3")
    try:
        row = db.execute("SELECT content FROM entries WHERE iri = ?",
                         (f"gliding://job/{job}/result/DA-{turn}-0",)).fetchone()
    finally:
        db.close()
    return bytes(row[0]).decode()


def test_a_waiting_job_survives_kill9_and_goes_on_when_answered(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(ASKING)
    (tmp_path / "r.yaml").write_text(replies(steps=3))
    daemon, _info = start_daemon(tmp_path, "daemon1.log")
    try:
        sent = gliding(tmp_path, "submit", "t.yaml", "--model", "scripted:r.yaml")
        assert sent.returncode == 0, sent.stderr
        job = sent.stdout.split()[0]
        line = waiting_line(tmp_path, job, "DA-2")
        assert 'bash {"command": "echo step-2 >> trace.txt"}' in line
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)

    daemon, _info = start_daemon(tmp_path, "daemon2.log")
    try:
        waiting_line(tmp_path, job, "DA-2")  # resumed, and waiting again
        said = gliding(tmp_path, "approve", job, "--id", "DA-2", "--note", "step 2 is fine")
        assert said.returncode == 0, said.stderr
        assert said.stdout.strip() == (f'{job} DA-2 approved: bash {{"command": "echo step-2 '
                                       '>> trace.txt"}')
        waiting_line(tmp_path, job, "DA-3")
        twice = gliding(tmp_path, "approve", job, "--id", "DA-2")
        assert twice.returncode == 2 and "no call waiting for approval with id DA-2" in \
            twice.stderr
        said = gliding(tmp_path, "deny", job, "--id", "DA-3", "--note", "three is one too many")
        assert said.returncode == 0, said.stderr
        deadline = time.monotonic() + 120
        while "state:     finished" not in (status := gliding(tmp_path, "status", job).stdout):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        logs = gliding(tmp_path, "logs", job).stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["step-1", "step-2"]
    assert result_text(tmp_path, job, 2).endswith("(a person approved this call: step 2 is fine)")
    assert result_text(tmp_path, job, 3) == ("error: a person denied this call: three is one "
                                             "too many; it was not run")
    assert "waiting for approval DA-2: bash" in logs
    assert "approval DA-3 denied: three is one too many" in logs
