"""Helpers for the MCP tests: the reference servers (installed by scripts/setup.sh), a small
streamable-HTTP server written with the SDK's MCPServer, and process checks.

The node servers are the ones pinned in tests/mcp/package.json (and its lock); a test that
needs them skips only when node itself is missing, and fails, saying to run scripts/setup.sh,
when node is there but the servers are not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gliding.config.settings import MCPServerSettings, MCPSettings
from gliding.testing.servers import free_port
from gliding.tools.mcp.client import MCPGroup

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULES = ROOT / ".cache" / "mcp-servers" / "node_modules"
PINS: dict[str, str] = json.loads((HERE / "package.json").read_text("utf-8"))["dependencies"]
EVERYTHING = "@modelcontextprotocol/server-everything"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"
START_TIMEOUT_S = 20.0


def node() -> str:
    """The node binary; skips the test when there is none."""
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed: the reference MCP servers are node programs "
                    "(install node 20+, then scripts/setup.sh installs them)")
    return found


def server_js(package: str) -> str:
    """The entry script of a pinned reference server; fails when it is not installed."""
    node()
    home = MODULES / package
    try:
        version = json.loads((home / "package.json").read_text("utf-8"))["version"]
    except (OSError, ValueError, KeyError):
        pytest.fail(f"{package} is not installed in {MODULES}: run scripts/setup.sh")
    if version != PINS[package]:
        pytest.fail(f"{package} {version} is installed, tests/mcp/package.json pins "
                    f"{PINS[package]}: run scripts/setup.sh")
    return str(home / "dist" / "index.js")


def everything(pidfile: Path | None = None, **more: Any) -> MCPServerSettings:
    """server-everything over stdio; with ``pidfile``, its pid is written there (a shell
    writes its own pid, then execs node in its place)."""
    js = server_js(EVERYTHING)
    if pidfile is None:
        return MCPServerSettings(command=node(), args=(js, "stdio"), **more)
    script = f'echo $$ > "{pidfile}"; exec "{node()}" "{js}" stdio'
    return MCPServerSettings(command="/bin/sh", args=("-c", script), **more)


def filesystem(*roots: str, **more: Any) -> MCPServerSettings:
    """server-filesystem over stdio, allowed into ``roots``."""
    return MCPServerSettings(command=node(), args=(server_js(FILESYSTEM), *roots), **more)


def group(server: MCPServerSettings, name: str = "everything", *,
          workspace: Path | None = None, env_allow: tuple[str, ...] = ("PATH", "HOME"),
          **settings: Any) -> MCPGroup:
    """The tool group of ``server`` under ``name``, not yet open."""
    return MCPGroup(name, server, MCPSettings(**settings), workspace=workspace,
                    env_allow=env_allow)


def read_pid(pidfile: Path) -> int:
    return int(pidfile.read_text("ascii").strip())


def alive(pid: int) -> bool:
    """Whether process ``pid`` or anything of its process group (pgid == pid) still exists."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            return True
        return True
    return False


HTTP_SERVER = '''
"""A streamable-HTTP MCP server for tests (the SDK's MCPServer)."""
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("gliding-test", log_level="WARNING")


@app.tool()
def shout(text: str) -> str:
    """Upper-cases text."""
    return text.upper()


@app.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(reason)


@app.tool()
def header(name: str, ctx: Context) -> str:
    """The value of request header ``name`` ("(none)" when absent)."""
    return (ctx.headers or {}).get(name.lower(), "(none)")


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
'''


@contextmanager
def http_server(directory: Path) -> Iterator[str]:
    """Run the HTTP test server on a free loopback port; yield its endpoint URL, stop it."""
    script = directory / "http_server.py"
    script.write_text(HTTP_SERVER, encoding="utf-8")
    port = free_port()
    log = (directory / "http_server.log").open("wb")
    proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("the HTTP MCP test server did not start: "
                                + (directory / "http_server.log").read_text("utf-8")[-2000:])
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()
