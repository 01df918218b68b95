"""MCP servers as tool groups: each server declared in ``mcp.servers`` (or a task's
``mcp_servers``) is one ``MCPGroup`` named ``mcp_<name>``, whose tools are the server's.

    open()    start the server (stdio) or connect to it (HTTP) and list its tools, within
              mcp.startup_timeout_s. A server that fails leaves the group without tools and
              ``unavailable`` saying why (logged as mcp.server.unavailable): never a job crash.
              A server lends at most its ``max_tools`` tools, whose schemas take at most
              ``max_schema_tokens``: the tools it lists past them are refused (``refused``;
              logged once as mcp.server.tools_refused), so no server can fill every prompt.
    a call    the server's tool ``t`` is our tool ``<name>__t``; the arguments are checked
              against its schema, the call has mcp.timeout_s (or the server's timeout_s), the
              result is rendered to text (render.py) and capped at mcp.max_result_bytes; an
              ``isError`` result, a timeout or a dead server is a ToolError, which the model
              reads as ``error: ...``. One message from the server is bounded before it is
              parsed (stdio.py, http.py): a longer one fails its call, not the session.
    aclose()  stop the server; a stdio server's process group is gone when it returns.

A stdio server gets only the variables named by tools.env_allow (in the sandbox: those that do
not look like secrets, as commands get them) and its own ``pass_env`` from Gliding's
environment, then its ``env``: no API key of Gliding's reaches it unless named.
``{workspace}`` in its args, env and cwd is the job's workspace, which is also where it runs
unless ``cwd`` says otherwise. A server a task declares (``mcp_servers``) runs inside the job's
command sandbox when that is confined (``confined.py``); the host's own ``mcp.servers`` run as
configured. A task's HTTP server (``url``) is reached only at addresses the SSRF guard of
``web_fetch`` allows (public ones, or those tools.web.allow admits: ``guard``); the host's
own may be anywhere. A server that exits mid-job is not restarted: its calls fail with
"server <name> exited: ..." for the rest of the job (docs/mcp.md says why).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import structlog
from mcp import types

from gliding.config.settings import MCPServerSettings, MCPSettings
from gliding.errors import ToolError
from gliding.tools.base import Tool, ToolContext, ToolGroup, ToolOutput
from gliding.tools.groups import MCP_PREFIX
from gliding.tools.mcp import schema
from gliding.tools.mcp.confined import Confined
from gliding.tools.mcp.render import cap, render
from gliding.tools.mcp.session import HttpTarget, Session, StdioTarget, Target
from gliding.tools.mcp.stdio import message_limit
from gliding.tools.netguard import Policy
from gliding.tools.sandbox import Sandbox
from gliding.tools.shell import filtered_env

log = structlog.get_logger("gliding.mcp")

WORKSPACE = "{workspace}"


def group_name(server: str) -> str:
    """The tool group of server ``server``: ``mcp_<server>``."""
    return f"{MCP_PREFIX}{server}"


class MCPGroup(ToolGroup):
    """The tools of one MCP server, and the server itself (started by ``open``); with a
    confined ``sandbox`` (a task's own server), a stdio server runs inside it, in
    ``workspace``."""

    def __init__(self, name: str, server: MCPServerSettings, settings: MCPSettings, *,
                 workspace: Path | None = None, env_allow: Sequence[str] = (),
                 environ: Mapping[str, str] | None = None,
                 sandbox: Sandbox | None = None, guard: Policy | None = None) -> None:
        super().__init__(group_name(name), (), description=f"tools of MCP server {name}")
        self.server_name = name
        self.server = server
        self.timeout_s = server.timeout_s or settings.timeout_s
        self.max_result_bytes = settings.max_result_bytes
        self.unavailable: str | None = None  # why open() found no server; None otherwise
        self.refused: tuple[str, ...] = ()  # tools the server listed past its bounds
        self.session = Session(name, server_target(server, workspace, env_allow,
                                                   os.environ if environ is None else environ,
                                                   sandbox, guard),
                               startup_timeout_s=settings.startup_timeout_s,
                               max_message_bytes=message_limit(settings.max_result_bytes))
        target = self.session.target  # whether its program runs in the command sandbox
        self.sandboxed = isinstance(target, StdioTarget) and target.confined is not None
        self._opened = False

    async def open(self) -> None:
        """Start the server and take its tools. Raises nothing (cancellation aside): a server
        that cannot start leaves the group empty and ``unavailable`` set."""
        if self._opened:
            return
        self._opened = True
        began = time.monotonic()
        try:
            listed = await self.session.start()
        except ToolError as exc:
            self.unavailable = exc.message
            log.warning("mcp.server.unavailable", server=self.server_name, reason=exc.message)
            return
        self.tools = self._tools(listed)
        log.info("mcp.server.started", server=self.server_name, tools=len(self.tools),
                 seconds=round(time.monotonic() - began, 2),
                 transport="stdio" if self.session.stdio else "http",
                 sandboxed=self.sandboxed)

    async def aclose(self) -> None:
        """Stop the server (a stdio process is gone when this returns). Raises nothing."""
        with anyio.CancelScope(shield=True):
            await self.session.aclose()

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolOutput:
        """Call the server's tool ``tool`` (its own name) and render the result.

        Raises:
            ToolError: an ``isError`` result (its text is the message), a timeout, a protocol
                error, or a server that is not running or has exited.
        """
        result = await self.session.call(tool, arguments, self.timeout_s)
        text, cut = cap(render(result.content, result.structured_content),
                        self.max_result_bytes)
        if result.is_error:  # the tool's own failure: the server is still there
            raise ToolError(f"{tool} (server {self.server_name}): {text}")
        data = {"mcp": {"server": self.server_name, "tool": tool, "cut": cut,
                        "content": [block.type for block in result.content]}}
        return ToolOutput(text, data)

    def _tools(self, listed: Sequence[types.Tool]) -> tuple[Tool, ...]:
        names = schema.tool_names(self.server_name, [t.name for t in listed])
        tools = [Tool(name=names[t.name],
                      description=schema.description(t.title, t.description, self.server_name),
                      parameters=schema.parameters(t.input_schema),
                      run=self._runner(t.name),
                      idempotent=schema.idempotent(t.annotations))
                 for t in listed]
        kept, refused = schema.bounded([(t, schema.tokens(t.name, t.description, t.parameters))
                                        for t in tools],
                                       self.server.max_tools, self.server.max_schema_tokens)
        self.refused = tuple(t.name for t in refused)
        if refused:
            log.warning("mcp.server.tools_refused", server=self.server_name, listed=len(tools),
                        kept=len(kept), refused=len(refused), max_tools=self.server.max_tools,
                        max_schema_tokens=self.server.max_schema_tokens,
                        first_refused=self.refused[:5])
        return tuple(kept)

    def _runner(self, tool: str) -> Any:
        async def run(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
            return await self.call(tool, arguments)

        return run

    def __repr__(self) -> str:
        state = f"unavailable: {self.unavailable}" if self.unavailable else \
            f"{len(self.tools)} tools"
        return f"MCPGroup({self.name!r}, {state})"


def server_target(server: MCPServerSettings, workspace: Path | None,
                  env_allow: Sequence[str], environ: Mapping[str, str],
                  sandbox: Sandbox | None = None, guard: Policy | None = None) -> Target:
    """Where ``server`` is: the program with its environment and directory (inside ``sandbox``
    when that is confined), or the URL (reached only where ``guard`` allows, given one).

    Raises:
        ValueError: a confined ``sandbox`` without the ``workspace`` it binds.
    """
    if server.url is not None:
        return HttpTarget(server.url, server.headers, guard)
    assert server.command is not None  # MCPServerSettings: command or url
    confined = None
    if sandbox is not None and sandbox.confined:
        if workspace is None:
            raise ValueError("a server in the command sandbox needs the job's workspace")
        confined = Confined(sandbox, workspace)

    def fill(text: str) -> str:
        return text.replace(WORKSPACE, str(workspace)) if workspace is not None else text

    own = {key: fill(value) for key, value in server.env.items()}
    passed = {key: environ[key] for key in server.pass_env if key in environ}
    if confined is not None:  # tools.env_allow as commands get it: no name like a secret's
        env = confined.env({**filtered_env(env_allow, environ), **passed}, own)
    else:
        env = {key: environ[key] for key in env_allow if key in environ} | passed | own
    cwd = Path(fill(server.cwd)) if server.cwd is not None else workspace
    if cwd is not None and workspace is not None and not cwd.is_absolute():
        cwd = workspace / cwd
    return StdioTarget(fill(server.command), [fill(a) for a in server.args], env, cwd,
                       confined)


def mcp_groups(settings: MCPSettings, extra: Mapping[str, MCPServerSettings] | None = None,
               *, workspace: Path | None = None, env_allow: Sequence[str] = (),
               environ: Mapping[str, str] | None = None,
               sandbox: Sandbox | None = None, guard: Policy | None = None
               ) -> list[MCPGroup]:
    """One group per server of ``settings.servers`` and ``extra`` (a task's own servers,
    which replace a configured server of the same name), not yet open. A server of ``extra``
    runs in ``sandbox`` (the job's command sandbox) when that is confined, or is reached only
    where ``guard`` allows; the host's own run as its config says."""
    extra = extra or {}
    servers = {**settings.servers, **extra}
    return [MCPGroup(name, server, settings, workspace=workspace, env_allow=env_allow,
                     environ=environ, sandbox=sandbox if name in extra else None,
                     guard=guard if name in extra else None)
            for name, server in servers.items()]


def role_groups(groups: Iterable[MCPGroup], role: str) -> tuple[tuple[str, ...],
                                                                   tuple[str, ...]]:
    """The MCP groups ``role`` gets: (always offered, loadable with tool_search)."""
    chosen = [g for g in groups if role in g.server.roles]
    return (tuple(g.name for g in chosen if not g.server.on_demand),
            tuple(g.name for g in chosen if g.server.on_demand))
