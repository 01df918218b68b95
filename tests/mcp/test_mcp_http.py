"""An MCP server over streamable HTTP as a tool group: a small Python server written with the
SDK's MCPServer, started by the test on a free loopback port."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.config.settings import MCPServerSettings, ToolSettings
from gliding.testing.servers import free_port
from gliding.tools.base import ToolContext, ToolGroupManager
from tests.mcp.mcp_support import group, http_server

pytestmark = pytest.mark.heavy  # a server process of its own


def test_an_http_server_lists_its_tools_and_answers_calls(tmp_path: Path) -> None:
    with http_server(tmp_path) as url:
        plain = group(MCPServerSettings(url=url), "web")
        with_headers = group(MCPServerSettings(url=url, headers={"X-Gliding": "1"}), "web2")
        manager = ToolGroupManager([plain, with_headers])

        async def main() -> list[tuple[bool, str]]:
            await manager.open()
            try:
                tools = manager.toolset(["mcp_web", "mcp_web2"])
                assert tools.names == ("web__shout", "web__fail", "web__header",
                                       "web2__shout", "web2__fail", "web2__header")
                assert tools.get("web__shout").parameters == {  # type: ignore[union-attr]
                    "type": "object", "required": ["text"],
                    "properties": {"text": {"title": "Text", "type": "string"}}}
                ctx = ToolContext(tmp_path, ToolSettings())
                return [(o.ok, o.output) for o in (
                    await tools.call("web__shout", {"text": "hi"}, ctx),
                    await tools.call("web2__shout", {"text": "with headers"}, ctx),
                    await tools.call("web__fail", {"reason": "no luck"}, ctx),
                    await tools.call("web__header", {"name": "X-Gliding"}, ctx),
                    await tools.call("web2__header", {"name": "X-Gliding"}, ctx))]
            finally:
                await manager.aclose()

        results = anyio.run(main)
    assert results == [(True, "HI"), (True, "WITH HEADERS"),
                       (False, "error: fail (server web): Error executing tool fail: no luck"),
                       (True, "(none)"), (True, "1")]


def test_an_http_server_that_is_not_there_leaves_its_group_unavailable() -> None:
    g = group(MCPServerSettings(url=f"http://127.0.0.1:{free_port()}/mcp"), "gone",
              startup_timeout_s=5)

    async def main() -> None:
        await g.open()
        await g.aclose()

    anyio.run(main)
    assert g.tools == ()
    assert g.unavailable == "server gone did not start: All connection attempts failed"
