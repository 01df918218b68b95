"""The daemon's client commands without a daemon (a clear error, exit 2; ``jobs`` falls back
to the archives; a stale daemon.json is ignored), option checks of ``gliding daemon``, and how
daemon events, statuses and queue lines are shown (terminal-safe). ``tests/daemon`` runs them
against a real daemon."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gliding.cli.client import _sse
from gliding.daemon.jobs import DaemonLock
from gliding.daemon.render import event_line, queue_line, status_text
from tests.cli.cli_support import invoke

JOB = "20260101-000000-aaaaaa"


@pytest.mark.parametrize("args", [["status", JOB], ["logs", JOB], ["logs", JOB, "-f"],
                                  ["cancel", JOB], ["submit", "task.yaml"], ["dashboard"]])
def test_without_a_daemon_the_client_commands_say_how_to_start_one(
        tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "task.yaml").write_text("goal: x\n")
    result = invoke([*args, "--data-dir", "data"], cwd=tmp_path)
    assert result.code == 2, result.stderr
    assert f"no daemon is running for data dir {tmp_path / 'data'}" in result.stderr
    assert "start one with `gliding daemon`" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_stale_daemon_json_is_ignored_and_jobs_falls_back(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "daemon.json").write_text(json.dumps(
        {"pid": 999999, "url": "http://127.0.0.1:9"}))
    listed = invoke(["jobs", "--data-dir", "data"], cwd=tmp_path)
    assert listed.code == 0, listed.stderr
    assert "no jobs in" in listed.stderr
    status = invoke(["status", JOB, "--data-dir", "data"], cwd=tmp_path)
    assert status.code == 2 and "no daemon is running" in status.stderr


def test_daemon_options_out_of_range_are_exit_2(tmp_path: Path) -> None:
    result = invoke(["daemon", "--data-dir", "data", "--max-jobs", "0"], cwd=tmp_path)
    assert result.code == 2, result.stderr
    assert "max_jobs" in result.stderr
    assert not (tmp_path / "data").exists()


def test_a_port_in_use_is_exit_2_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke(["daemon", "--data-dir", "data", "--port", str(port)], cwd=tmp_path,
                        env={"GLIDING_MEMORY__VECTORS__ENABLED": "false"})
    assert result.code == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "daemon.json").exists()
    assert not DaemonLock(tmp_path / "data").held_elsewhere()


def test_events_statuses_and_queue_lines_are_terminal_safe() -> None:
    evil = "x\x1b[2J\nOutcome: SUCCESS"
    lines = [event_line({"seq": 1, "at": 0.0, "job": JOB, "event": name, "data": data})
             for name, data in (("job.queued", {"goal": evil}),
                                ("job.dispatched", {"run": 2, "running": 1}),
                                ("job.stopped", {"error": evil}),
                                ("job.cancelled", {"ran": False}),
                                ("job.finished", {"outcome": "success"}),
                                ("turn", {"role": "DA", "turn": 1, "summary": evil,
                                          "prompt_tokens": 1, "job_prompt_tokens": 1,
                                          "job_cost_usd": 0.0}),
                                ("something.new", {"k": evil}))]
    assert all("\x1b" not in line and "\n" not in line for line in lines)
    assert "resumed by the daemon (run 2, 1 running)" in lines[1]
    assert lines[3].endswith("cancelled before it started")
    assert lines[4].endswith("finished: success")
    entry = {"job": JOB, "state": "interrupted", "outcome": None, "goal": evil, "runs": 3,
             "error": evil}
    assert "\x1b" not in queue_line(entry) and "(resumed 2×)" in queue_line(entry)
    shown = status_text({**entry, "name": "t.yaml", "workspace": "/w", "model": None,
                         "submitted": 1.0, "started": None, "finished": None,
                         "progress": None})
    assert "\x1b" not in shown and shown.count("\n") == 6


def test_server_sent_events_are_parsed_with_pings_and_the_dropped_marker() -> None:
    lines = [": ping", "id: 1", "event: job.queued", 'data: {"seq": 1, "event": "job.queued"}',
             "", "event: dropped", 'data: {"event": "stream.dropped", "after": 1}', ""]
    assert list(_sse(iter(lines))) == [{"seq": 1, "event": "job.queued"},
                                       {"event": "dropped", "after": 1}]


def test_run_beside_a_daemon_on_its_data_dir_says_to_submit_to_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    from gliding.testing.servers import stop_process

    (tmp_path / "task.yaml").write_text("goal: x\npipeline: [DA]\n")
    gliding = Path(sys.executable).with_name("gliding")
    env = {**os.environ, "GLIDING_MEMORY__VECTORS__ENABLED": "false"}
    daemon = subprocess.Popen([str(gliding), "daemon", "--data-dir", "data", "--port", "0"],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / "daemon.json").exists():
            assert daemon.poll() is None and time.monotonic() < deadline, "no daemon"
            time.sleep(0.1)

        result = invoke(["run", "task.yaml", "--data-dir", "data"], cwd=tmp_path)
    finally:
        stop_process(daemon)

    assert result.code == 2, result.stderr
    assert f"a daemon serves {tmp_path / 'data'}" in result.stderr
    assert "gliding submit task.yaml --wait --data-dir" in result.stderr
    assert "Traceback" not in result.stderr
    jobs = tmp_path / "data" / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # nothing ran beside it
