"""The workspace's hard edges through whole jobs and every front end (issue 20, items 7 and
10): a workspace in a home's dot-directory is refused by ``gliding run``, the daemon and MCP
``run_job`` before anything is created; a data directory inside the workspace is refused to
the file tools of a real job, so a job cannot damage the board every later job opens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from structlog.testing import capture_logs

from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.daemon.compose import run_job
from gliding.daemon.runtime import blackboard_path
from gliding.daemon.service import JobService
from gliding.errors import TaskFileError
from gliding.mcp.server import build_server
from gliding.mcp.service import Service
from gliding.testing import ScriptedLLM, call
from tests.cli.cli_support import invoke

pytestmark = pytest.mark.timeout(300)
REPLIES = "DA:\n  - write_file: {path: a.txt, content: hi}\n  - finish: {summary: done}\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    return home


def settings_in(tmp: Path, data_dir: Path | None = None) -> Settings:
    return load_settings(env={}, overrides={"data_dir": str(data_dir or tmp / "data"),
                                            "memory.vectors.enabled": False})


def task_text(workspace: str) -> str:
    return f"goal: Write a.txt\npipeline: [DA]\nworkspace: {workspace}\nbudgets: {{turns: 9}}\n"


def made(home: Path, tmp: Path) -> list[str]:
    """What exists under the home's .ssh and the data directory (both should stay empty)."""
    return sorted(str(p) for p in [*(home / ".ssh").rglob("*"), *(tmp / "data").rglob("*")])


# --- item 7: every front end refuses a workspace in a home's dot-directory ---------------------


def test_gliding_run_refuses_a_workspace_in_dot_ssh_with_exit_2(tmp_path: Path,
                                                                home: Path) -> None:
    (tmp_path / "task.yaml").write_text(task_text("~/.ssh/ws"))
    (tmp_path / "r.yaml").write_text(REPLIES)

    result = invoke(["run", "task.yaml", "--model", "scripted:r.yaml", "--data-dir", "data",
                     "-q"], cwd=tmp_path, env={"HOME": str(home)})

    assert result.code == 2, result
    assert f"is {home}/.ssh/ws, inside {home}/.ssh, a dot-directory" in result.stderr
    assert "tools.allow_home_dot_workspaces" in result.stderr and "Traceback" not in result.stderr
    assert made(home, tmp_path) == [] and not (tmp_path / "data").exists()


def test_the_daemon_refuses_it_at_submission_and_queues_nothing(tmp_path: Path,
                                                                home: Path) -> None:
    (tmp_path / "r.yaml").write_text(REPLIES)

    async def main() -> tuple[int, list[Any]]:
        service = JobService(settings_in(tmp_path), base_dir=tmp_path)
        async with service.running():
            with pytest.raises(TaskFileError, match="a dot-directory of a home directory"):
                await service.submit(task_text("~/.ssh/ws"),
                                     model=f"scripted:{tmp_path / 'r.yaml'}")
            with pytest.raises(TaskFileError, match=r"is .*/home/\.aws/x/ws, inside .*/\.aws, a"):
                await service.submit(task_text("ws"), base_dir=str(home / ".aws" / "x"),
                                     model=f"scripted:{tmp_path / 'r.yaml'}")
            return await service.jobs()

    assert anyio.run(main) == (0, [])
    assert [p for p in made(home, tmp_path) if "/.ssh/" in p] == []
    assert not (home / ".aws").exists()


def test_mcp_run_job_refuses_it_and_creates_nothing(tmp_path: Path, home: Path) -> None:
    (tmp_path / "r.yaml").write_text(REPLIES)
    (home / "ws").symlink_to(home / ".ssh")  # a symlink is followed

    async def main() -> list[str]:
        service = Service(settings_in(tmp_path), base_dir=tmp_path)
        answers = []
        async with service.running(), Client(build_server(service)) as client:
            for workspace in ("~/.ssh/ws", "~/ws"):
                result = await client.call_tool("run_job", {
                    "task_yaml": task_text(workspace),
                    "model": f"scripted:{tmp_path / 'r.yaml'}"})
                assert result.is_error, result
                answers.append(result.content[0].text)  # type: ignore[union-attr]
        return answers

    answers = anyio.run(main)
    assert all("a dot-directory of a home directory" in a for a in answers), answers
    assert f"is {home}/.ssh, inside {home}/.ssh" in answers[1]
    assert [p for p in made(home, tmp_path) if "/.ssh/" in p] == []


# --- item 10: the data directory inside the workspace, in a real job ---------------------------


def test_a_job_cannot_reach_its_data_directory_and_later_jobs_keep_their_board(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data").symlink_to(".gliding")
    settings = settings_in(tmp_path, data_dir=ws / ".gliding")  # gliding run in a project
    (tmp_path / "task.yaml").write_text(task_text("ws"))
    task = load_task(tmp_path / "task.yaml")
    attacks = [call("write_file", path=".gliding/blackboard/CURRENT", content="garbage"),
               call("write_file", path="data/blackboard/CURRENT", content="garbage"),
               call("edit_file", path=".gliding/blackboard/CURRENT", old="MANIFEST", new="x"),
               call("read_file", path=".gliding/blackboard/CURRENT"),
               call("list_dir", path=".gliding/jobs")]
    first = ScriptedLLM({"DA": [*attacks, call("write_file", path="a.txt", content="hi"),
                                call("finish", summary="done")]})
    second = ScriptedLLM({"DA": [call("write_file", path="b.txt", content="hi"),
                                 call("finish", summary="done")]})

    with capture_logs() as logs:
        handles = [anyio.run(lambda llm=llm: run_job(task, settings, llm=llm))  # type: ignore[misc]
                   for llm in (first, second)]

    assert [h.report.outcome for h in handles if h.report] == ["success", "success"]
    prompt = first.requests[-1].messages  # the role's example first, then this job's turns
    start = next(i for i, m in enumerate(prompt) if m.content.startswith("Goal: Write a.txt"))
    answers = [m.content for m in prompt[start:] if m.role == "tool"]
    assert len(answers) == 6, answers
    assert all(a.startswith("error: path ") and "leads into the data directory" in a
               for a in answers[:5]), answers
    assert answers[5] == "wrote 2 bytes to a.txt"
    current = (blackboard_path(settings.data_dir) / "CURRENT").read_text()
    assert current.startswith("MANIFEST-")
    assert [e for e in logs if e["event"] == "blackboard.unavailable"] == []
    assert (ws / "b.txt").read_text() == "hi"
