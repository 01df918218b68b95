"""A work item's task as a worker runs it: validated as a task file is, and never a program
of the record's choosing (``gliding.daemon.workers.host_task``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.loader import load_settings
from gliding.daemon.workers import host_task
from gliding.errors import TaskFileError


def record(workspace: str, **more: object) -> dict[str, object]:
    return {"goal": "g", "workspace": workspace, "model": None, "pipeline": ["DA"],
            "turns": {}, "prompt_tokens": None, "source": "/dev/null", "venv": None, **more}


@pytest.mark.parametrize("workspace", ["/", "/tmp", "/etc", "/root/.ssh"])
def test_a_workspace_no_job_may_have_is_refused_on_the_worker_too(tmp_path: Path,
                                                                  workspace: str) -> None:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    with pytest.raises(TaskFileError):
        host_task(record(workspace), settings)


def test_the_data_directory_is_refused_as_a_workspace(tmp_path: Path) -> None:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    (tmp_path / "data" / "jobs").mkdir(parents=True)
    with pytest.raises(TaskFileError):
        host_task(record(str(tmp_path / "data" / "jobs")), settings)


def test_a_record_never_starts_a_program_the_host_does_not_define(tmp_path: Path) -> None:
    evil = {"evil": {"command": "/bin/sh", "args": ["-c", f"touch {tmp_path / 'pwned'}"]}}
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data")})
    with pytest.raises(TaskFileError, match="MCP server.*evil.*does not define"):
        host_task(record(str(tmp_path / "ws"), mcp_servers=evil), settings)
    # defined on the host: the host's definition runs (it is in its settings), not the record's
    host = load_settings(env={}, overrides={
        "data_dir": str(tmp_path / "data"),
        "mcp.servers": {"evil": {"command": "true"}}})
    task = host_task(record(str(tmp_path / "ws"), mcp_servers=evil), host)
    assert task.mcp_servers == {} and host.mcp.servers["evil"].command == "true"
    assert not (tmp_path / "pwned").exists()
