"""MCP servers as tool backends: the only package that imports the ``mcp`` SDK's client side.

    client.py     MCP servers as tool groups: ``MCPGroup``, one per server (docs/mcp.md)
    session.py    one server's SDK session, on an event loop of its own
    stdio.py      the stdio transport, bounding one message before it is parsed
    http.py       the streamable-HTTP transport, bounded and behind the SSRF guard
    confined.py   a task's own stdio server started inside the job's command sandbox
    schema.py     a server's tool listing as our Tool names and JSON schemas (pure)
    render.py     a tool result as the text the model reads (pure)

Gliding as an MCP server, the other direction, is a front door: ``gliding.mcp``.
"""
