"""Declaring MCP servers: validation through the loader (file and line in the message), what
a server's process is given (environment, arguments, directory), which roles get its group.
No server runs here."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import MCPServerSettings, MCPSettings
from gliding.errors import ConfigError
from gliding.tools.groups import job_groups
from gliding.tools.mcp.client import MCPGroup, mcp_groups, role_groups, server_target
from gliding.tools.mcp.session import HttpTarget, StdioTarget


@pytest.mark.parametrize(("server", "message"), [
    ("{command: node, url: 'http://h/mcp'}", "give either command"),
    ("{}", "give either command"),
    ("{url: 'ftp://h/mcp'}", "must be an http:// or https:// URL"),
    ("{url: 'http://h/mcp', args: [x]}", "args, env, pass_env and cwd are for a command"),
    ("{command: node, headers: {A: b}}", "headers are for a url server"),
    ("{command: node, roles: [XA]}", "XA"),
    ("{command: node, timeout_s: 0}", "greater than 0"),
    ("{command: node, bogus: 1}", "unknown key 'bogus'"),
])
def test_a_bad_server_is_a_config_error_naming_it(tmp_path: Path, server: str,
                                                  message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"mcp:\n  servers:\n    fs: {server}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings(config, env={})
    assert f"{config}:" in caught.value.message and "mcp.servers.fs" in caught.value.message


@pytest.mark.parametrize("name", ["GitHub", "a b", "", "x" * 33, "ünï", "a.b"])
def test_a_server_name_must_be_lowercase_letters_digits_dash_or_underscore(
        tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="server name .* must be 1-32 characters"):
        MCPSettings(servers={name: MCPServerSettings(command="node")})
    MCPSettings(servers={"file-system_2": MCPServerSettings(command="node")})


def test_the_defaults_declare_no_server_and_bound_every_call() -> None:
    settings = MCPSettings()
    assert settings.servers == {}
    assert (settings.timeout_s, settings.startup_timeout_s, settings.max_result_bytes) == (
        30.0, 30.0, 1 << 20)
    assert MCPServerSettings(command="x").roles == ("DA",)


def test_a_stdio_server_gets_the_allow_list_its_pass_env_and_its_env(tmp_path: Path) -> None:
    environ = {"PATH": "/bin", "HOME": "/home/me", "OPENAI_API_KEY": "sk-1",
               "GITHUB_TOKEN": "ghp-1", "GLIDING_LLM__MODEL": "m"}
    server = MCPServerSettings(command="srv", args=("--root", "{workspace}/src"),
                               env={"DATA": "{workspace}/data", "PATH": "/opt/bin"},
                               pass_env=("GITHUB_TOKEN", "ABSENT"))
    target = server_target(server, tmp_path, ("PATH", "HOME", "TZ"), environ)
    assert isinstance(target, StdioTarget)
    assert target.env == {"PATH": "/opt/bin", "HOME": "/home/me", "GITHUB_TOKEN": "ghp-1",
                          "DATA": f"{tmp_path}/data"}
    assert (target.command, target.args) == ("srv", ("--root", f"{tmp_path}/src"))
    assert target.cwd == tmp_path


def test_cwd_is_the_workspace_unless_given_relative_to_it_or_absolute(tmp_path: Path) -> None:
    def cwd(value: str | None, workspace: Path | None = tmp_path) -> Path | None:
        target = server_target(MCPServerSettings(command="x", cwd=value), workspace, (), {})
        assert isinstance(target, StdioTarget)
        return target.cwd

    assert cwd(None) == tmp_path
    assert cwd("sub") == tmp_path / "sub"
    assert cwd("/srv/data") == Path("/srv/data")
    assert cwd("{workspace}/x") == tmp_path / "x"
    assert cwd(None, workspace=None) is None


def test_an_http_server_is_its_url_and_headers() -> None:
    target = server_target(MCPServerSettings(url="https://h/mcp", headers={"A": "b"}), None,
                           ("PATH",), {"PATH": "/bin"})
    assert isinstance(target, HttpTarget)
    assert (target.url, target.headers) == ("https://h/mcp", {"A": "b"})


def test_a_task_server_replaces_a_configured_one_of_the_same_name() -> None:
    settings = MCPSettings(servers={"a": MCPServerSettings(command="one"),
                                    "b": MCPServerSettings(command="two")})
    groups = mcp_groups(settings, {"b": MCPServerSettings(command="three"),
                                   "c": MCPServerSettings(url="http://h/mcp")})
    assert [(g.name, g.server.command) for g in groups] == [
        ("mcp_a", "one"), ("mcp_b", "three"), ("mcp_c", None)]


def test_each_role_gets_the_groups_of_the_servers_that_name_it() -> None:
    settings = MCPSettings()
    groups = [MCPGroup(n, s, settings) for n, s in {
        "always": MCPServerSettings(command="x", on_demand=False),
        "checker": MCPServerSettings(command="x", roles=("DA", "CA"), on_demand=False),
        "lazy": MCPServerSettings(command="x"),  # on demand unless the config says otherwise
    }.items()]
    assert role_groups(groups, "DA") == (("mcp_always", "mcp_checker"), ("mcp_lazy",))
    assert role_groups(groups, "CA") == (("mcp_checker",), ())
    assert role_groups(groups, "PA") == ((), ())


def test_an_mcp_group_a_role_names_but_the_job_lacks_is_unavailable_not_an_error() -> None:
    declared = MCPGroup("here", MCPServerSettings(command="x"), MCPSettings())
    tools = job_groups(mcp=[declared], asked=["read", "mcp_here", "mcp_elsewhere"])
    assert "mcp_elsewhere" in tools.unavailable and "mcp_here" not in tools.unavailable
    assert tools.toolset(["read", "mcp_elsewhere", "mcp_here"]).names[:1] == ("read_file",)
    assert tools.group("mcp_here") is declared
