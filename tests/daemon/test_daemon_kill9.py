"""``gliding daemon`` as a real process: three jobs submitted with ``gliding submit --wait``,
the daemon ``kill -9``-ed while they run and started again; every job finishes with success,
none is lost, no step ran twice, and the ``submit --wait`` clients ride through the restart.
On the way: what the CLI says with no daemon, a second daemon refused, the unix socket, and
a clean stop on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.cli_support import clean_env, gliding_script
from tests.daemon.daemon_support import TASK, replies

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(400)]
STEPS = 4
ENV = clean_env({"HF_HUB_OFFLINE": "1", "GLIDING_MEMORY__VECTORS__ENABLED": "false"})


def gliding(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(gliding_script()), *args, "--data-dir", "data"], cwd=tmp,
                          text=True, capture_output=True, timeout=timeout, env=ENV)


def start_daemon(tmp: Path, log: str, *extra: str) -> tuple[subprocess.Popen[bytes], Any]:
    info_file = tmp / "data" / "daemon.json"
    with contextlib.suppress(OSError):
        info_file.unlink()
    with (tmp / log).open("wb") as out:  # the daemon has its own copy of the file
        proc = subprocess.Popen([str(gliding_script()), "daemon", "--data-dir", "data",
                                 "--port", "0", *extra], cwd=tmp, stdout=out,
                                stderr=subprocess.STDOUT, env=ENV)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / log).read_text()
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError):
            time.sleep(0.05)
            continue
        if info.get("pid") == proc.pid:
            return proc, info
    raise AssertionError(f"the daemon did not start: {(tmp / log).read_text()}")


def archived_results(tmp: Path) -> int:
    total = 0
    for db_path in (tmp / "data" / "jobs").glob("*/archive.sqlite3"):
        db = sqlite3.connect(db_path)
        try:
            total += int(db.execute("SELECT COUNT(*) FROM entries WHERE kind = 'result'")
                         .fetchone()[0])
        except sqlite3.Error:
            pass
        finally:
            db.close()
    return total


def test_kill9_of_the_daemon_loses_no_job(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        (tmp_path / f"t{i}.yaml").write_text(TASK.format(workspace=f"ws{i}"))
    (tmp_path / "slow.yaml").write_text(replies(steps=STEPS, sleep_s=0.7))

    missing = gliding(tmp_path, "status", "20260101-000000-aaaaaa")
    assert missing.returncode == 2
    assert "no daemon is running for data dir" in missing.stderr
    assert "start one with `gliding daemon`" in missing.stderr

    daemon, info = start_daemon(tmp_path, "daemon1.log")
    assert info["url"].startswith("http://127.0.0.1:")
    assert (tmp_path / "data" / "daemon.token").stat().st_mode & 0o777 == 0o600
    clients = [subprocess.Popen([str(gliding_script()), "submit", f"t{i}.yaml", "--model",
                                 "scripted:slow.yaml", "--wait", "--data-dir", "data"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=ENV) for i in (1, 2, 3)]
    deadline = time.monotonic() + 120
    while archived_results(tmp_path) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    assert archived_results(tmp_path) >= 2

    down = gliding(tmp_path, "status", "20260101-000000-aaaaaa")  # daemon.json is stale now
    assert down.returncode == 2 and "no daemon is running" in down.stderr
    offline = gliding(tmp_path, "jobs")  # falls back to the archives
    assert offline.returncode == 0, offline.stderr
    assert "interrupted" in offline.stdout

    socket_path = tmp_path / "d.sock"
    daemon, info = start_daemon(tmp_path, "daemon2.log", "--socket", str(socket_path))
    try:
        assert info["socket"] == str(socket_path)
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path))) as uds:
            assert uds.get("http://daemon/v1/health").json() == {"status": "ok"}
            assert uds.get("http://daemon/v1/jobs").status_code == 401

        second = gliding(tmp_path, "daemon", "--port", "0", timeout=60)
        assert second.returncode == 2 and "a daemon already serves" in second.stderr

        outs = [c.communicate(timeout=240) for c in clients]
        for client, (out, err) in zip(clients, outs, strict=True):
            assert client.returncode == 0, (out, err)
            job, outcome = out.split()[-2:]
            assert outcome == "success", err
        listed = gliding(tmp_path, "jobs", "--json")
        assert listed.returncode == 0, listed.stderr
        jobs = [json.loads(line) for line in listed.stdout.splitlines()]
        assert len(jobs) == 3
        assert {(j["state"], j["outcome"]) for j in jobs} == {("finished", "success")}
        assert any(j["runs"] == 2 for j in jobs)  # the kill caught at least one mid-run
        for i in (1, 2, 3):
            lines = (tmp_path / f"ws{i}" / "trace.txt").read_text().split()
            assert len(lines) == len(set(lines)), lines  # no step ran twice
            assert lines[-1] == f"step-{STEPS}"

        status = gliding(tmp_path, "status", jobs[0]["job"])
        assert status.returncode == 0 and "state:     finished (success)" in status.stdout
        logs = gliding(tmp_path, "logs", jobs[0]["job"])
        assert logs.returncode == 0 and "finished: success" in logs.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
    assert code == 0, (tmp_path / "daemon2.log").read_text()
    assert not (tmp_path / "data" / "daemon.json").exists()
    assert not socket_path.exists()
