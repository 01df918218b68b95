"""``gliding mcp``: Gliding as an MCP server, a front door beside the CLI (docs/mcp.md).

    server.py          the tools it serves (run_job, list_jobs, read_iri, recall,
                       knowledge_query) over stdio or streamable HTTP
    service.py         what the tools act on: the jobs, the shared runtime, reading back
    http_transport.py  streamable HTTP: the listening socket, the bearer token, uvicorn

MCP servers whose tools Gliding's agents use are a tool backend: ``gliding.tools.mcp``.
"""
