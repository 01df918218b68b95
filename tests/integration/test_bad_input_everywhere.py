"""Bad input through every front end at once — the daemon's API, ``gliding`` and the MCP
server (in process, through the SDK's client) — as issue 20's attacker sent it: a NUL byte,
a FIFO where a file is expected, a file the server can read but the caller must not see, a
bug in a tool. Each is a 400, an exit 2 or a tool error of a few lines, answered at once,
quoting nothing of the file and printing no traceback; nothing is queued or written."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from structlog.testing import capture_logs

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.api import build_app
from gliding.errors import TaskFileError, UsageError
from gliding.llm.scripted import FileScriptedLLM
from gliding.mcp.server import build_server
from gliding.mcp.service import Service
from tests.cli.cli_support import CLIResult, invoke
from tests.daemon.daemon_support import replies, serving, write_replies

pytestmark = pytest.mark.timeout(300)
TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HANG_S = 20.0  # hang protection only (a refusal takes milliseconds): no speed is tested
SECRET = "S3CRET-hash-9f8e7d"
# files a caller may name but must not read through an error message
SECRET_FILES = {
    "shadow": f"root:$6${SECRET}:20228:0:99999:7:::\nbob:*:20228:0:99999:7:::\n",
    "yaml": f"password: {SECRET}\ntoken: {SECRET}\n",
    "env": f"API_KEY={SECRET}\n",
    "list": f"- {SECRET}\n",
    "broken": f"{SECRET}: [unclosed\n",
    "keys": f"{SECRET}: 1\n",
}


@asynccontextmanager
async def daemon_api(tmp: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(tmp) as service:
        app = await anyio.to_thread.run_sync(build_app, service, TOKEN)  # CPU, off the loop
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            yield c


@asynccontextmanager
async def mcp_client(tmp: Path) -> AsyncIterator[Client]:
    settings = load_settings(env={}, overrides={"data_dir": str(tmp / "mcp-data"),
                                                "memory.vectors.enabled": False})
    service = Service(settings, base_dir=tmp)
    async with service.running(), Client(build_server(service)) as client:
        yield client


async def submit(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(HANG_S):
        answer = await client.post("/v1/jobs", headers=AUTH, json=body)
    assert answer.status_code == 400, (body, answer.text)
    return dict(answer.json()["error"])


async def tool_error(client: Client, tool: str, args: dict[str, Any]) -> str:
    with anyio.fail_after(HANG_S):
        result = await client.call_tool(tool, args)
    assert result.is_error, (tool, args, result)
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and len(text.splitlines()) <= 3, text
    return str(text)


def cli(tmp: Path, *args: str) -> CLIResult:
    return invoke(list(args), cwd=tmp)  # a hang is the module's pytest timeout


def exit_2(result: CLIResult, expected: str) -> str:
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result
    assert expected in result.stderr, result
    return result.stderr


def test_low_nul_byte_everywhere(tmp_path: Path) -> None:
    """A NUL byte crashed every front end (a ValueError far from the input: 500 with seconds of
    traceback, exit 1 "internal error", a 220-line MCP traceback). Now each says where it is."""
    model = write_replies(tmp_path, "r.yaml", replies())
    nul_task = 'goal: x\nworkspace: "ws\\0evil"\n'
    nul_venv = 'goal: x\nvenv: "/opt/v\\0"\n'
    nul_check = 'goal: x\nchecks:\n  - command: "true\\0"\n'

    async def api() -> None:
        async with daemon_api(tmp_path) as client:
            for body, expected in (
                    ({"task": nul_task, "model": model}, "task.yaml:2: workspace: a NUL byte"),
                    ({"task": nul_venv, "model": model}, "task.yaml:2: venv: a NUL byte"),
                    ({"task": nul_check, "model": model}, "checks[0].command: a NUL byte"),
                    ({"task": "goal: x\n", "model": model, "base_dir": "/tmp/a\x00b"},
                     "base_dir has a NUL byte"),
                    ({"task": "goal: x\n", "model": "scripted:/tmp/a\x00b"},
                     "has a control character"),
                    ({"task": "goal: x\n", "model": "local:/m\x00.gguf"},
                     "has a control character"),
                    ({"task": "goal: x\n", "name": "t\x00.yaml", "model": model},
                     "printable characters")):
                assert expected in (await submit(client, body))["message"]
            assert (await client.get("/v1/jobs", headers=AUTH)).json()["total"] == 0

    async def mcp() -> None:
        with capture_logs() as logs:
            async with mcp_client(tmp_path) as client:
                for args, expected in (
                        ({"task_yaml": nul_task, "model": model}, "workspace: a NUL byte"),
                        ({"task_path": "task\x00.yaml", "model": model}, "has a NUL byte"),
                        ({"task_yaml": "goal: x\n", "model": "scripted:r\x00.yaml"},
                         "has a control character")):
                    assert expected in await tool_error(client, "run_job", args)
                    assert expected in await tool_error(client, "submit_job", args)
        assert not [e for e in logs if e["event"] == "mcp.tool.crashed"], logs

    anyio.run(api)
    anyio.run(mcp)
    (tmp_path / "task.yaml").write_text(nul_task, encoding="utf-8")
    exit_2(cli(tmp_path, "run", "task.yaml", "--model", model, "--data-dir", "data"),
           "task.yaml:2: workspace: a NUL byte (\\0) is not allowed")
    (tmp_path / "config.yaml").write_text('data_dir: "d\\0"\n', encoding="utf-8")
    (tmp_path / "ok.yaml").write_text("goal: x\n", encoding="utf-8")
    exit_2(cli(tmp_path, "run", "ok.yaml", "--model", model),
           "config.yaml:1: data_dir: a NUL byte (\\0) is not allowed in a config file")
    assert not (tmp_path / "workspace").exists() and not list(tmp_path.glob("ws*"))
    assert not (tmp_path / "data" / "jobs").exists()  # the daemon's, which queued nothing


def test_low_fifo_refused(tmp_path: Path) -> None:
    """A FIFO as a replies file or task file held a worker thread until someone wrote to it
    (the daemon's, the MCP server's); now it is refused before a byte is read."""
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    (tmp_path / "task.yaml").write_text("goal: x\n", encoding="utf-8")
    expected = "is a FIFO, not a regular file"

    # refused, not read: a blocked open would wait for a writer until the test's timeout
    with pytest.raises(TaskFileError, match=expected):
        load_task(fifo)
    with pytest.raises(UsageError, match=expected):
        FileScriptedLLM(fifo)

    async def api() -> None:
        async with daemon_api(tmp_path) as client:
            error = await submit(client, {"task": "goal: x\n", "model": f"scripted:{fifo}"})
            assert expected in error["message"]

    async def mcp() -> None:
        async with mcp_client(tmp_path) as client:
            assert expected in await tool_error(client, "run_job", {"task_path": str(fifo)})
            assert expected in await tool_error(client, "submit_job", {
                "task_path": "task.yaml", "model": f"scripted:{fifo}"})

    anyio.run(api)
    anyio.run(mcp)
    exit_2(cli(tmp_path, "run", str(fifo), "--data-dir", "data"), expected)
    exit_2(cli(tmp_path, "run", "task.yaml", "--model", f"scripted:{fifo}", "--data-dir",
               "data"), expected)


def test_low_error_does_not_quote_files(tmp_path: Path) -> None:
    """``scripted:/etc/shadow`` answered with its first line (``unknown role 'root:...'``):
    a file that is no replies or task file is refused without a word of its content."""
    paths = {}
    for name, text in SECRET_FILES.items():
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text(text, encoding="utf-8")
    (tmp_path / "task.yaml").write_text("goal: x\n", encoding="utf-8")
    seen: list[str] = []

    async def api() -> None:
        async with daemon_api(tmp_path) as client:
            for path in paths.values():
                error = await submit(client, {"task": "goal: x\n",
                                              "model": f"scripted:{path}"})
                seen.append(error["message"] + str(error["hint"]))

    async def mcp() -> None:
        async with mcp_client(tmp_path) as client:
            for path in paths.values():
                seen.append(await tool_error(client, "submit_job", {"task_path": str(path)}))
                seen.append(await tool_error(client, "submit_job", {
                    "task_path": "task.yaml", "model": f"scripted:{path}"}))

    anyio.run(api)
    anyio.run(mcp)
    for path in paths.values():
        seen.append(cli(tmp_path, "run", str(path), "--data-dir", "data").stderr)
    assert len(seen) == 4 * len(paths)
    for text in seen:
        assert SECRET not in text, text
        assert str(tmp_path) in text  # each names the file it refused


def test_mcp_a_bug_is_a_short_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """An error no tool expects (a bug) is a tool error of two lines and one bounded log line,
    not the SDK's traceback; the server answers the next call."""
    async def broken(self: Service, limit: int) -> dict[str, Any]:
        raise ValueError("boom\n" + "x" * 1_000_000)

    monkeypatch.setattr(Service, "jobs", broken)

    async def main() -> None:
        with capture_logs() as logs:
            async with mcp_client(tmp_path) as client:
                text = await tool_error(client, "list_jobs", {})
                assert "internal error: ValueError: boom\n  hint: " in text and len(text) < 700
                status = await client.call_tool("job_status", {"job": "20260101-000000-a"})
                assert status.is_error and "no job" in status.content[0].text  # type: ignore[union-attr]
        crashed = [e for e in logs if e["event"] == "mcp.tool.crashed"]
        assert len(crashed) == 1 and len(crashed[0]["exception"]) < 10_000
        assert json.dumps(crashed[0], default=str).count("\n") == 0  # data, not printed text

    anyio.run(main)
