"""``gliding mcp``: Gliding as an MCP server, a front door beside the CLI (docs/mcp.md).

    server.py     the tools it serves (run_job, list_jobs, read_iri, recall, knowledge_query)
                  over stdio or streamable HTTP with a bearer token

MCP servers whose tools Gliding's agents use are a tool backend: ``gliding.tools.mcp``.
"""
