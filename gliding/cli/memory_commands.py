"""``gliding memory``: read the archive (L0) and the blackboard back: ``show``, ``query``,
``search``, ``recall``, ``graph`` (docs/memory.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gliding.cli.common import (
    bounded,
    data_dir_of,
    memory_app,
    say,
    settings_of,
)

if TYPE_CHECKING:
    pass


@memory_app.command("show")
def memory_show(
    iri: str = typer.Argument(..., help="gliding://job/<job>/...; #L12 or #L12-14 at the end "
                              "prints those lines only"),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    meta: bool = typer.Option(False, "--meta", help="Print the entry's metadata, not content."),
) -> None:
    """Print an archived item back, byte-exact (or the lines an IRI's #L fragment names, as
    recall shows a line's provenance and read_result reads it)."""
    from gliding.core.iri import parse_iri
    from gliding.errors import IRIError
    from gliding.memory.archive.store import open_for_iri
    from gliding.tools.readback import line_fragment

    settings = settings_of(data_dir_of(data_dir))
    lines = line_fragment(iri)
    iri = iri.strip().strip("<>").partition("#")[0]
    parsed_iri = parse_iri(iri)
    if parsed_iri.kind is None:
        raise IRIError(f"{iri} names a job, not an archived item",
                       hint="add the item, e.g. /turn/DA/1 or /result/DA-1-0")
    archive, parsed = open_for_iri(settings.data_dir, iri)
    with archive:
        item = archive.get(str(parsed))
    if meta:
        typer.echo(json.dumps({"iri": item.iri, "kind": item.kind, "sha256": item.sha256,
                               "size": item.size, "media_type": item.media_type,
                               "created_at": item.created_at, "meta": item.meta}, indent=2))
        return
    assert item.content is not None
    content = item.content
    if lines is not None:
        content = _lines_of(content, *lines, iri)
    sys.stdout.buffer.write(content)
    sys.stdout.buffer.flush()


def _lines_of(content: bytes, start: int, end: int, iri: str) -> bytes:
    """Lines ``start``..``end`` (from 1) of an archived item, with their own line ends, as
    ``read_result`` numbers them. Raises UsageError past the item's last line."""
    from gliding.errors import UsageError

    held = content.decode("utf-8", errors="replace").splitlines(keepends=True)
    if start > len(held):
        raise UsageError(f"{iri} has {len(held)} lines, not {start}",
                         hint=f"lines run from 1 to {len(held)}")
    return "".join(held[start - 1:end]).encode("utf-8")


@memory_app.command("query")
def memory_query(
    sparql: str = typer.Argument(..., help="A read-only SPARQL query (SELECT, ASK, CONSTRUCT)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    limit: int = typer.Option(100, "--limit", help="Most rows, 1 to 100000 (a LIMIT is added "
                              "or capped)."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds before the query stops "
                                    "(0.001 to 3600)."),
) -> None:
    """Query the blackboard (L2) of a data directory; rows print as JSON lines."""

    from gliding.memory.board.blackboard import check_read_only_query

    settings = settings_of(data_dir_of(data_dir))
    bounded("--limit", limit, 1, 100_000)
    bounded("--timeout", timeout_s, 0.001, 3600)
    checked = check_read_only_query(sparql, max_limit=limit)
    board = _open_board(data_dir, settings)
    try:
        rows = board.query(checked.text, timeout_s=timeout_s)
    finally:
        board.close()
    from gliding.daemon.render import json_text

    for row in rows:
        typer.echo(json_text(row, indent=None, default=_plain))


@memory_app.command("search")
def memory_search(
    text: str = typer.Argument(..., help="Words to look for."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    k: int = typer.Option(10, "--top", "-k", help="How many nodes to show (1 to 1000)."),
    no_vectors: bool = typer.Option(False, "--no-vectors",
                                    help="Words and graph only (no embedding model)."),
) -> None:
    """Search the blackboard's nodes of every job (facts, results, turns, steps, checks,
    decisions, artifacts) the way an agent's kg_search does: hybrid recall's scores."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gliding.context.tokens import TokenCounter
    from gliding.daemon.runtime import open_knowledge

    overrides = data_dir_of(data_dir)
    if no_vectors:
        overrides["memory.vectors.enabled"] = False
    settings = settings_of(overrides)
    bounded("--top", k, 1, 1000)
    board = _open_board(data_dir, settings)
    try:
        knowledge = open_knowledge(board, settings,
                                   TokenCounter(settings.context.tokenizer).count)
        try:
            hits = knowledge.search(text, k=k)
        finally:
            knowledge.close()
    finally:
        board.close()
    from gliding.core.logs import terminal_safe

    if not hits:
        say("no node matches")
    for hit in hits:
        typer.echo(terminal_safe(f"{hit.score:7.3f}  {hit.type:<11} {hit.iri}") + "\n         "
                   + terminal_safe(hit.text))


@memory_app.command("recall")
def memory_recall(
    text: str = typer.Argument(..., help="What to remember, e.g. a question."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    budget: int | None = typer.Option(None, "--budget", "-b",
                                      help="Tokens, 1 to 1000000 (default "
                                      "memory.recall.budget_tokens)."),
    no_vectors: bool = typer.Option(False, "--no-vectors",
                                    help="Words and graph only (no embedding model)."),
) -> None:
    """What an agent's recall(query) would get from long-term memory: the blackboard's turns,
    results, steps, checks and decisions of every job, ranked by hybrid recall."""
    import os


    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gliding.context.tokens import TokenCounter
    from gliding.daemon.runtime import open_knowledge

    overrides = data_dir_of(data_dir)
    if no_vectors:
        overrides["memory.vectors.enabled"] = False
    settings = settings_of(overrides)
    if budget is not None:
        bounded("--budget", budget, 1, 1_000_000)
    board = _open_board(data_dir, settings)
    try:
        knowledge = open_knowledge(board, settings,
                                   TokenCounter(settings.context.tokenizer).count)
        try:
            packed = knowledge.recall(text, budget or settings.memory.recall.budget_tokens)
        finally:
            knowledge.close()
    finally:
        board.close()
    from gliding.core.logs import terminal_safe

    if not packed.ids:
        say("nothing recalled")
        return
    typer.echo(terminal_safe(packed.text, one_line=False))
    say(f"[{len(packed.ids)} items, {packed.tokens} tokens]", items=len(packed.ids),
         tokens=packed.tokens)


@memory_app.command("graph")
def memory_graph(
    iri: str = typer.Argument(..., help="The node, e.g. gliding://job/<job>/plan/1."),
    png: Path = typer.Option(..., "--png", help="Write the picture here."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
) -> None:
    """Draw a node's 1-hop neighbourhood on the blackboard as a PNG."""

    from gliding.cli.picture import draw, neighbourhood
    from gliding.memory.board.vocabulary import check_iri

    check_iri(iri)
    board = _open_board(data_dir)
    try:
        rows = neighbourhood(board, iri)
    finally:
        board.close()
    draw(iri, rows, png)
    typer.echo(f"{len(rows)} edges drawn to {png}")


def _open_board(data_dir: Path | None, settings: Any = None) -> Any:
    from gliding.daemon.runtime import blackboard_path
    from gliding.errors import NotFoundError
    from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard

    settings = settings or settings_of(data_dir_of(data_dir))
    if settings.memory.blackboard.url:
        from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard

        return SparqlEndpointBlackboard.for_oxigraph(settings.memory.blackboard.url)
    path = blackboard_path(settings.data_dir)
    if not path.exists():
        raise NotFoundError(f"no blackboard in {settings.data_dir}",
                            hint="run a job first, or pass --data-dir")
    return OxigraphBlackboard.open(path)


def _plain(value: Any) -> Any:
    """Blackboard result values (Ref, TypedLiteral) as JSON."""
    if hasattr(value, "iri"):
        return value.iri
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)
