"""``gliding mcp``: Gliding as an MCP server, for MCP clients (Claude Code, IDEs).

    run_job(task_yaml | task_path, model?)     run a job to its end: its report (outcome, why,
                                               checks, artifacts with IRIs, tokens), progress
    submit_job(task_yaml | task_path, model?)  start it in the background: its id at once
    job_status(job)                            how it stands, turns and tokens so far
    list_jobs(limit?)                          the data directory's jobs, newest first
    read_iri(iri, offset?, limit?)             an archived item's bytes, a page at a time
    recall(query, budget_tokens?)              long-term memory, as an agent's recall gets it
    knowledge_query(sparql, limit?)            a read-only SPARQL query over the blackboard

Here each tool is the few lines that bind a ``Service`` method (``service.py``: the jobs, the
shared runtime, reading back) to its schema. Every answer is a JSON object (structured content
and its text), bounded in size. A bad argument, unknown job or IRI, malformed task or refused
query is an MCP tool error result saying what to do next; the server goes on. Over HTTP
(``http_transport.py``) every request must bear the token in ``<data_dir>/mcp.token``.

``serve`` is what ``gliding mcp`` calls; ``python -m gliding.mcp.server`` runs it without the
CLI.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import structlog
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from gliding import __version__
from gliding.config.settings import Settings
from gliding.core.text import ERROR_CHARS, clip, error_line, traceback_text
from gliding.daemon.reading import bounded
from gliding.daemon.service import MAX_OFFSET
from gliding.errors import GlidingError, UsageError
from gliding.mcp.http_transport import listening_socket, mcp_token, serve_http
from gliding.mcp.service import Service
from gliding.memory.archive.store import archive_path

log = structlog.get_logger("gliding.mcp")

MAX_ANSWER_CHARS = 20_000  # one answer's JSON (read_iri: its page's bytes, below)
STRING_CHARS = 600  # a long string of an answer that did not fit
PAGE_BYTES = 16_000  # read_iri's default page
MAX_PAGE_BYTES = 32_000
MAX_QUERY_ROWS = 200
MAX_RECALL_TOKENS = 4_000
MAX_LISTED_JOBS = 100


def _clipped(text: str, lines: int = 40) -> str:
    """An error message kept to ``lines`` lines of at most ERROR_CHARS characters each."""
    kept = [clip(line, ERROR_CHARS) for line in text.splitlines()[:lines]]
    return "\n".join(kept) + ("\n..." if len(text.splitlines()) > lines else "")


def _bounded(data: Any, limit: int = MAX_ANSWER_CHARS) -> Any:
    """``data`` if its JSON fits ``limit`` characters; else with its longest lists halved,
    then its long strings clipped to STRING_CHARS (``daemon.reading.bounded``)."""
    return bounded(data, limit, STRING_CHARS)


# -- MCP ---------------------------------------------------------------------------------------

TaskYaml = Annotated[str | None, Field(description=(
    "The task file's text (YAML: goal, workspace, pipeline, budgets, checks). A relative "
    "workspace is taken from the server's working directory."))]
TaskPath = Annotated[str | None, Field(description=(
    "A task file on the server's machine (a relative path: from the server's working "
    "directory)."))]
Model = Annotated[str | None, Field(description=(
    "local, local:/path.gguf, scripted:replies.yaml or a litellm model string (default: the "
    "task's model, else llm.model)."))]
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
RUN = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)

_F = TypeVar("_F", bound=Callable[..., Awaitable[dict[str, Any]]])


def build_server(service: Service) -> MCPServer:
    """The MCP server whose tools call ``service`` (which the caller runs)."""
    server = MCPServer("gliding", version=__version__, log_level="WARNING", instructions=(
        "Gliding runs a task (a goal with checks) through a team of LLM agents (Plan, Do, "
        "Check, Act) and archives every byte under gliding:// IRIs. run_job waits for the "
        "report; submit_job returns a job id at once (poll job_status). read_iri reads an "
        "archived item back exactly; recall and knowledge_query read long-term memory."))

    def tool(annotations: ToolAnnotations) -> Callable[[_F], _F]:
        def register(fn: _F) -> _F:  # the docstring as one paragraph
            return server.tool(description=" ".join((fn.__doc__ or "").split()),
                               annotations=annotations)(fn)
        return register

    async def answer(work: Awaitable[dict[str, Any]], *, bound: bool = True) -> dict[str, Any]:
        """The tool's answer; any failure a tool error of a few lines (a bug too: logged as
        one bounded line, so the SDK never prints its traceback)."""
        try:
            result = await work
        except GlidingError as exc:
            raise ToolError(_clipped(str(exc))) from exc
        except Exception as exc:
            log.error("mcp.tool.crashed", error=error_line(f"{type(exc).__name__}: {exc}"),
                      exception=traceback_text(exc))
            raise ToolError(error_line(f"internal error: {type(exc).__name__}: {exc}") +
                            "\n  hint: this is a bug in Gliding; the server's log has the "
                            "traceback") from exc
        return _bounded(result) if bound else result

    @tool(RUN)
    async def run_job(ctx: Context, task_yaml: TaskYaml = None, task_path: TaskPath = None,
                      model: Model = None) -> dict[str, Any]:
        """Run a Gliding job to its end and return its report: outcome, why, checks,
        artifacts (with IRIs for read_iri), tokens and cost per role. Give task_yaml or
        task_path. If this call is cancelled or times out, the job goes on: poll job_status."""
        async def progress(n: int, line: str) -> None:
            await ctx.report_progress(n, None, line)

        async def work() -> dict[str, Any]:
            return await service.wait(await service.submit(task_yaml, task_path, model),
                                      progress)

        return await answer(work())

    @tool(RUN)
    async def submit_job(task_yaml: TaskYaml = None, task_path: TaskPath = None,
                         model: Model = None) -> dict[str, Any]:
        """Start a Gliding job in the background of this server and return its id at once;
        poll job_status(job) until finished is true. The job runs as long as the server."""
        async def work() -> dict[str, Any]:
            run = await service.submit(task_yaml, task_path, model)
            return {"job": run.job, "status": "running",
                    "archive": str(archive_path(service.settings.data_dir, run.job))}

        return await answer(work())

    @tool(READ)
    async def job_status(job: Annotated[str, Field(description=(
            "A job id, e.g. 20261129-113758-a1b2c3"))]) -> dict[str, Any]:
        """How a job stands: status (starting, running, interrupted, success, failed,
        escalated, budget_exceeded, loop_detected, compaction_stalled, error), outcome, turns
        and tokens so far, and the report once a job this server ran has finished."""
        return await answer(service.status(job.strip()))

    @tool(READ)
    async def list_jobs(limit: Annotated[int, Field(ge=1, le=MAX_LISTED_JOBS)] = 20
                        ) -> dict[str, Any]:
        """The jobs of the server's data directory, newest first, with status and goal."""
        return await answer(service.jobs(limit))

    @tool(READ)
    async def read_iri(
        iri: Annotated[str, Field(description=(
            "gliding://job/<job>/<kind>/<name>, e.g. an artifact IRI from a report"))],
        offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="The first byte")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE_BYTES, description="Bytes")] = PAGE_BYTES,
    ) -> dict[str, Any]:
        """Read an archived item (artifact, turn, tool result, record) back exactly, a page of
        bytes at a time: content is UTF-8 text (a page ends on a character boundary) or
        base64 (encoding says which); next_offset starts the next page (null at the end)."""
        return await answer(service.read(iri, offset, limit), bound=False)

    @tool(READ)
    async def recall(
        query: Annotated[str, Field(description="What to remember, e.g. a question")],
        budget_tokens: Annotated[int | None, Field(ge=1, le=MAX_RECALL_TOKENS, description=(
            "Tokens of text (default memory.recall.budget_tokens)"))] = None,
    ) -> dict[str, Any]:
        """What long-term memory holds about query: the goals, turns, results, plans, checks
        and decisions of every job, ranked by hybrid recall, as an agent's recall gets them."""
        return await answer(service.recall(query, budget_tokens))

    @tool(READ)
    async def knowledge_query(
        sparql: Annotated[str, Field(description=(
            "SELECT, ASK or CONSTRUCT; each job is a named graph (GRAPH ?g { ... }); the gl: "
            "prefix is predeclared. Updates are refused."))],
        limit: Annotated[int, Field(ge=1, le=MAX_QUERY_ROWS, description="Most rows")] = 50,
    ) -> dict[str, Any]:
        """A read-only SPARQL query over the blackboard: long-term memory, every job."""
        return await answer(service.query(sparql, limit))

    return server


Transport = Literal["stdio", "http"]


async def serve_async(settings: Settings, *, transport: Transport = "stdio",
                      host: str = "127.0.0.1", port: int = 8000, base_dir: Path | None = None,
                      announce: Callable[[str], None] | None = None) -> None:
    """Serve until the client leaves (stdio: its end of the pipe closes) or, over HTTP, until
    SIGINT or SIGTERM; ``announce(url)`` once HTTP listens.

    Raises:
        UsageError: the HTTP port cannot be listened on.
    """
    service = Service(settings, base_dir=base_dir)
    server = build_server(service)
    sock = listening_socket(host, port) if transport == "http" else None  # refused before serving
    token = mcp_token(settings.data_dir) if sock is not None else ""
    log.info("mcp.serving", transport=transport, data_dir=str(settings.data_dir))
    async with service.running():
        if sock is not None:
            await serve_http(server, sock, announce or (lambda url: None), token)
        else:
            await server.run_stdio_async()


def serve(settings: Settings, *, transport: str = "stdio", port: int = 8000,
          announce: Callable[[str], None] | None = None) -> None:
    """``gliding mcp``: serve over stdio, or streamable HTTP at http://127.0.0.1:PORT/mcp
    (``announce(url)`` once it listens). The embedding model loads from its packaged files,
    never the Hugging Face hub (HF_HUB_OFFLINE, as ``gliding memory recall`` sets it).

    Raises:
        UsageError: an unknown transport, a port out of range or one in use.
    """
    if transport not in ("stdio", "http"):
        raise UsageError(f"unknown transport {transport!r}", hint="use stdio or http")
    if not 1 <= port <= 65535:
        raise UsageError(f"port {port} is out of range", hint="use 1-65535")
    mode: Transport = "http" if transport == "http" else "stdio"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    anyio.run(partial(serve_async, settings, transport=mode, port=port, announce=announce))


def main(argv: list[str] | None = None) -> None:
    """``python -m gliding.mcp.server [--config F] [--data-dir D] [--transport T] [--port N]``:
    ``gliding mcp`` without the CLI."""
    from gliding.config.loader import load_settings
    from gliding.core.logs import configure_logging
    from gliding.daemon.private import private_files

    parser = argparse.ArgumentParser(prog="python -m gliding.mcp.server",
                                     description="Serve Gliding to MCP clients.")
    parser.add_argument("--config", "-c", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--transport", default="stdio")  # checked by serve: stdio or http
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config, overrides={"data_dir": str(args.data_dir)}
                                 if args.data_dir else {})
        configure_logging(settings.log_level, settings.log_format)
        with private_files(settings.data_dir):  # files 0600, directories 0700
            serve(settings, transport=args.transport, port=args.port,
                  announce=lambda url: print(f"gliding mcp: serving at {url} (bearer token "
                                             f"in {settings.data_dir / 'mcp.token'})",
                                             file=sys.stderr))
    except GlidingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    main()
