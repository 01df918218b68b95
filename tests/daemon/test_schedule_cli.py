"""``gliding schedule add|list|rm`` against ``gliding daemon`` as a real process: clear
refusals (exit 2, nothing kept), the schedule kept across a ``kill -9`` of the daemon, and
removed. (The due-time runs themselves are tested on virtual time in test_schedule_runner.py
and through the API in test_schedule_api.py.)"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.cli_support import clean_env, gliding_script
from tests.daemon.daemon_support import TASK, replies

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]
ENV = clean_env({"HF_HUB_OFFLINE": "1", "GLIDING_MEMORY__VECTORS__ENABLED": "false"})


def gliding(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(gliding_script()), *args, "--data-dir", "data"], cwd=tmp,
                          text=True, capture_output=True, timeout=120, env=ENV)


def start_daemon(tmp: Path) -> subprocess.Popen[bytes]:
    info_file = tmp / "data" / "daemon.json"
    with contextlib.suppress(OSError):
        info_file.unlink()
    with (tmp / "daemon.log").open("ab") as out:
        proc = subprocess.Popen([str(gliding_script()), "daemon", "--data-dir", "data",
                                 "--port", "0"], cwd=tmp, stdout=out,
                                stderr=subprocess.STDOUT, env=ENV)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / "daemon.log").read_text()
        with contextlib.suppress(OSError, ValueError):
            if json.loads(info_file.read_text()).get("pid") == proc.pid:
                return proc
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not start: {(tmp / 'daemon.log').read_text()}")


def test_schedule_commands_against_a_real_daemon_across_a_kill_9(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK.format(workspace="ws"))
    (tmp_path / "r.yaml").write_text(replies())
    down = gliding(tmp_path, "schedule", "list")
    assert down.returncode == 2 and "no daemon is running" in down.stderr

    daemon = start_daemon(tmp_path)
    try:
        add = ["schedule", "add", "trace", "task.yaml", "--cron", "*/15 * * * *",
               "--tz", "Europe/Paris", "--model", "scripted:r.yaml"]
        added = gliding(tmp_path, *add)
        assert added.returncode == 0, added.stderr
        assert added.stdout.startswith("added trace  '*/15 * * * *' Europe/Paris  "
                                       "missed=skip overlap=skip  task.yaml  next 20")
        for args, says in (
                (add, "a schedule named trace exists"),
                (["schedule", "add", "t2", "task.yaml", "--cron", "*/15 * *"], "not 5"),
                (["schedule", "add", "t2", "task.yaml", "--cron", "* * * * *", "--tz",
                  "Paris"], "unknown time zone 'Paris'"),
                (["schedule", "add", "t2", "task.yaml", "--cron", "* * * * *", "--missed",
                  "twice"], "'twice' is not one of"),
                (["schedule", "add", "t2", "r.yaml", "--cron", "* * * * *"], "r.yaml")):
            refused = gliding(tmp_path, *args)
            assert refused.returncode == 2, (args, refused.stderr)
            assert says in refused.stderr and "Traceback" not in refused.stderr
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=30)

        daemon = start_daemon(tmp_path)
        listed = gliding(tmp_path, "schedule", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        [kept] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (kept["name"], kept["cron"], kept["tz"]) == ("trace", "*/15 * * * *",
                                                            "Europe/Paris")
        assert kept["model"] == f"scripted:{tmp_path / 'r.yaml'}"
        removed = gliding(tmp_path, "schedule", "rm", "trace")
        assert removed.returncode == 0 and "removed schedule trace" in removed.stdout
        again = gliding(tmp_path, "schedule", "rm", "trace")
        assert again.returncode == 3 and "no schedule named 'trace'" in again.stderr
        empty = gliding(tmp_path, "schedule", "list")
        assert empty.returncode == 0 and empty.stdout == "" and "no schedules" in empty.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
