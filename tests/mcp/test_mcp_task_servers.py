"""What a task file's own MCP servers may take from the host (issue 20): no variable of
Gliding's environment the host's ``mcp.task_pass_env`` does not name, and no address the SSRF
guard of ``web_fetch`` refuses (checked before the job for an IP literal, at every connection
for a name). The host's own ``mcp.servers`` are not limited so."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import MCPServerSettings, MCPSettings, Settings
from gliding.config.task import load_task_text
from gliding.daemon.compose import refuse_servers, refuse_task
from gliding.errors import TaskFileError
from gliding.tools.mcp.client import mcp_groups
from gliding.tools.netguard import Policy


def _task(tmp_path: Path, server: str):
    return load_task_text(f"goal: g\nworkspace: ws\nmcp_servers:\n  s:\n{server}", "task.yaml",
                          tmp_path)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A loopback TCP port that counts the connections made to it (and closes them)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    accepted: list[int] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], accepted
    done.set()
    thread.join(5)
    sock.close()


def test_a_task_server_passing_a_host_variable_is_refused_unless_the_host_names_it(
        tmp_path: Path) -> None:
    task = _task(tmp_path, "    command: /bin/true\n    pass_env: [AWS_SECRET_ACCESS_KEY]\n")
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(TaskFileError, match="AWS_SECRET_ACCESS_KEY may not be passed") as err:
        refuse_task(task, settings)
    assert "mcp.task_pass_env" in (err.value.hint or "")
    allowed = settings.model_copy(update={"mcp": MCPSettings(
        task_pass_env=("AWS_SECRET_ACCESS_KEY",))})
    refuse_servers(task, allowed)


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]", "10.0.0.5", "169.254.169.254",
                                  "0177.0.0.1"])
def test_a_task_server_at_a_private_address_is_refused_before_the_job(
        tmp_path: Path, host: str) -> None:
    task = _task(tmp_path, f"    url: http://{host}:8000/mcp\n")
    settings = Settings(data_dir=tmp_path / "data")
    try:
        refuse_servers(task, settings)
    except TaskFileError as exc:
        assert "mcp_servers.s.url" in exc.message
    else:  # 0177.0.0.1 is no IP literal to the guard: a name, checked at connect
        assert host == "0177.0.0.1"
    allowed = settings.model_copy(update={"tools": settings.tools.model_copy(update={
        "web": settings.tools.web.model_copy(update={"allow": ("0.0.0.0/0", "::/0")})})})
    refuse_servers(task, allowed)  # the operator allowed it


def test_a_task_server_by_name_is_refused_at_connect_and_the_hosts_own_is_not(
        tmp_path: Path, listener: tuple[int, list[int]]) -> None:
    port, accepted = listener
    url = f"http://localhost:{port}/mcp"
    server = MCPServerSettings(url=url)
    settings = MCPSettings(startup_timeout_s=5)
    (own,) = mcp_groups(settings.model_copy(update={"servers": {"own": server}}))
    (task_server,) = mcp_groups(settings, {"s": server}, guard=Policy())

    async def main() -> None:
        for group in (task_server, own):
            await group.open()
            await group.aclose()

    anyio.run(main)
    assert task_server.unavailable is not None
    assert "refused to connect to localhost" in task_server.unavailable
    assert "loopback" in task_server.unavailable
    assert own.unavailable is not None  # no MCP server there, but it was reached
    assert accepted, "the host's own server at a loopback name is connected to"
