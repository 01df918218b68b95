"""Every mcp.* key, set through the real loader (a config file or GLIDING_* variables), and
the effect it has on a real server (the pinned server-everything, node).

It may move beside the other settings-effect tests (tests/settings_effects/) as it is: its
helpers come from ``tests.mcp.mcp_support`` by package path.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import MCPServerSettings, MCPSettings
from gliding.errors import ConfigError
from gliding.tools.mcp.client import MCPGroup, mcp_groups
from tests.mcp.mcp_support import everything

pytestmark = pytest.mark.heavy  # node servers

def _servers_json(delay_s: float = 0) -> str:
    server = everything()
    if delay_s:  # a server slow to answer: it starts after the delay
        command = " ".join(json.dumps(part) for part in (server.command, *server.args))
        server = MCPServerSettings(command="/bin/sh", args=("-c", f"sleep {delay_s}; exec "
                                                            f"{command}"))
    return json.dumps({"everything": server.model_dump(include={"command", "args"})})


def _load(tmp_path: Path, **env: str) -> MCPSettings:
    return load_settings(None, env={"GLIDING_DATA_DIR": str(tmp_path / "data"), **env}).mcp


def _use(settings: MCPSettings, tool: str, arguments: dict[str, object]) -> tuple[MCPGroup,
                                                                                  str]:
    (group,) = mcp_groups(settings, env_allow=("PATH",))

    async def main() -> str:
        await group.open()
        try:
            if group.unavailable:
                return ""
            try:
                return (await group.call(tool, arguments)).text
            except Exception as exc:  # noqa: BLE001 - the model sees any tool error as text
                return f"error: {exc}"
        finally:
            await group.aclose()

    return group, anyio.run(main)


def test_mcp_servers_from_the_config_file_become_tool_groups(tmp_path: Path) -> None:
    server = everything()
    config = tmp_path / "config.yaml"
    config.write_text(f"mcp:\n  servers:\n    everything:\n"
                      f"      command: {json.dumps(server.command)}\n"
                      f"      args: {json.dumps(list(server.args))}\n      roles: [DA, CA]\n",
                      encoding="utf-8")
    settings = load_settings(config, env={}).mcp
    assert settings.servers["everything"].roles == ("DA", "CA")

    group, text = _use(settings, "echo", {"message": "from the config file"})

    assert group.name == "mcp_everything" and "everything__echo" in [t.name for t in
                                                                      group.tools]
    assert text == "Echo: from the config file"


def test_mcp_servers_from_the_environment_is_a_json_object(tmp_path: Path) -> None:
    group, text = _use(_load(tmp_path, GLIDING_MCP__SERVERS=_servers_json()), "echo",
                       {"message": "from the environment"})
    assert text == "Echo: from the environment"
    with pytest.raises(ConfigError, match="GLIDING_MCP__SERVERS.*not a JSON object"):
        _load(tmp_path, GLIDING_MCP__SERVERS="{nope")
    with pytest.raises(ConfigError, match="server name 'Bad!' must be"):
        _load(tmp_path, GLIDING_MCP__SERVERS='{"Bad!": {"command": "x"}}')


def test_mcp_timeout_s_is_how_long_a_call_may_take(tmp_path: Path) -> None:
    slow = {"duration": 2, "steps": 1}
    _, short = _use(_load(tmp_path, GLIDING_MCP__SERVERS=_servers_json(),
                          GLIDING_MCP__TIMEOUT_S="0.5"), "trigger-long-running-operation", slow)
    _, enough = _use(_load(tmp_path, GLIDING_MCP__SERVERS=_servers_json(),
                           GLIDING_MCP__TIMEOUT_S="20"), "trigger-long-running-operation", slow)
    assert short.startswith("error: trigger-long-running-operation timed out after 0.5s")
    assert enough.startswith("Long running operation completed")


def test_mcp_startup_timeout_s_is_how_long_a_server_may_take_to_start(tmp_path: Path) -> None:
    slow_start = _servers_json(delay_s=2)
    impatient, _ = _use(_load(tmp_path, GLIDING_MCP__SERVERS=slow_start,
                              GLIDING_MCP__STARTUP_TIMEOUT_S="0.5"), "echo", {"message": "x"})
    patient, text = _use(_load(tmp_path, GLIDING_MCP__SERVERS=slow_start,
                               GLIDING_MCP__STARTUP_TIMEOUT_S="20"), "echo", {"message": "x"})
    assert (impatient.unavailable or "").startswith(
        "server everything did not start: no answer within 0.5s (mcp.startup_timeout_s)")
    assert impatient.tools == ()
    assert patient.unavailable is None and text == "Echo: x"


def test_mcp_max_result_bytes_caps_the_text_a_call_returns(tmp_path: Path) -> None:
    big = {"message": "y" * 5000}
    _, capped = _use(_load(tmp_path, GLIDING_MCP__SERVERS=_servers_json(),
                           GLIDING_MCP__MAX_RESULT_BYTES="1024"), "echo", big)
    _, whole = _use(_load(tmp_path, GLIDING_MCP__SERVERS=_servers_json()), "echo", big)
    assert capped.startswith("Echo: yyy") and capped.endswith(
        "[cut: the result was 5006 bytes; only the first 1024 were kept "
        "(mcp.max_result_bytes)]")
    assert len(capped.split("\n[cut: ")[0].encode()) == 1024
    assert whole == "Echo: " + "y" * 5000


def test_mcp_task_pass_env_names_what_a_task_server_may_take(tmp_path: Path) -> None:
    from gliding.config.task import load_task_text
    from gliding.daemon.compose import refuse_servers
    from gliding.errors import TaskFileError

    text = ("goal: g\nworkspace: ws\nmcp_servers:\n  gh:\n    command: /bin/true\n"
            "    pass_env: [GITHUB_TOKEN]\n")
    task = load_task_text(text, "task.yaml", tmp_path)
    default = load_settings(None, env={"GLIDING_DATA_DIR": str(tmp_path / "data")})
    with pytest.raises(TaskFileError, match="GITHUB_TOKEN may not be passed"):
        refuse_servers(task, default)
    named = load_settings(None, env={"GLIDING_DATA_DIR": str(tmp_path / "data"),
                                     "GLIDING_MCP__TASK_PASS_ENV": "GITHUB_TOKEN"})
    assert named.mcp.task_pass_env == ("GITHUB_TOKEN",)
    refuse_servers(task, named)  # named by the host: the task's server may take it
