"""Knowledge tools: the team's long-term memory (the blackboard, L2), searched and queried.

- ``kg_search(query, k?)``: the blackboard nodes that best match ``query`` by hybrid search
  (words, meaning, graph), best first, one line each: ``<type> <iri>: <text>``;
- ``knowledge_query(sparql)``: a read-only SPARQL query over the blackboard — every job's named
  graph, reached with ``GRAPH ?g { ... }`` — one line per row of ``var=value`` pairs (IRIs as
  they are, strings quoted).

Like the read-back tools these never import the memory package: the runner puts callables into
``ToolContext.extra``: ``extra["kg_search"]`` ((query, k=None) -> hits, each with ``type``,
``iri`` and ``text``; the runner's default k and token budget apply when ``k`` is left out) and
``extra["knowledge_query"]`` (sparql -> rows, dicts of variable -> value, where an IRI value has
an ``iri`` and another typed literal a ``value``). They run on a worker thread, so a slow query
or the first search (which may load the embedder) does not stall the event loop. A GlidingError
from either — a refused or malformed query, a timeout, a store that failed — comes back to the
model as ``error: <message>`` with its hint. Every answer is at most ``MAX_CHARS`` characters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import anyio

from gliding.core.text import clip, one_line
from gliding.errors import GlidingError, ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema

MAX_CHARS = 4000  # one answer, notices included
MAX_K = 50
VALUE_CHARS = 200  # one value of a query row
LINE_CHARS = 600  # one row or one hit


def hit_line(hit: Any) -> str:
    """``<type> <iri>: <text>`` on one line (``hit`` has ``type``, ``iri`` and ``text``)."""
    text = " ".join(str(getattr(hit, "text", "")).split())
    return clip(f"{getattr(hit, 'type', '?')} {getattr(hit, 'iri', '?')}: {text}", LINE_CHARS)


def render_value(value: Any) -> str:
    """An IRI as it is, a number or boolean as SPARQL writes it, any other literal quoted."""
    iri = getattr(value, "iri", None)
    if isinstance(iri, str):
        return iri
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = getattr(value, "value", value)
    quoted = json.dumps(one_line(str(text), VALUE_CHARS), ensure_ascii=False)
    language = getattr(value, "language", None)
    return f"{quoted}@{language}" if isinstance(language, str) and language else quoted


def render_row(row: Mapping[str, Any]) -> str:
    """``var=value`` pairs of one result row on one line (unbound variables are absent)."""
    return clip(" ".join(f"{k}={render_value(v)}" for k, v in row.items()) or "(empty row)",
                 LINE_CHARS)


def bounded(lines: Iterable[str], noun: str, limit: int = MAX_CHARS) -> str:
    """``lines`` joined while they fit ``limit`` characters, then ``[N more <noun>]``."""
    lines = list(lines)
    kept: list[str] = []
    used = 0
    for line in lines:
        notice = len(f"\n[{len(lines)} more {noun}]")
        if used + len(line) + 1 + notice > limit:
            break
        kept.append(line)
        used += len(line) + 1
    rest = len(lines) - len(kept)
    return "\n".join(kept) + (f"\n[{rest} more {noun}]" if rest else "")


async def _call(ctx: ToolContext, key: str, what: str, *args: Any, **kwargs: Any) -> Any:
    function: Callable[..., Any] | None = ctx.extra.get(key)
    if function is None:
        raise ToolError(f"{what} is not available in this session",
                        hint="the job has no blackboard (see the blackboard.unavailable log)")
    try:
        return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))
    except GlidingError as exc:
        raise ToolError(exc.message, hint=exc.hint) from exc


async def _kg_search(args: dict[str, Any], ctx: ToolContext) -> str:
    query = str(args["query"]).strip()
    if not query:
        raise ToolError("kg_search: query is empty", hint="pass the words to look for")
    k = args.get("k")
    if k is not None and k < 1:
        raise ToolError(f"kg_search: k must be at least 1, got {k}")
    more = {} if k is None else {"k": min(int(k), MAX_K)}
    hits = await _call(ctx, "kg_search", "long-term memory", query, **more)
    if not hits:
        return f"nothing found for {query!r}"
    return bounded((hit_line(h) for h in hits), "hits")


async def _knowledge_query(args: dict[str, Any], ctx: ToolContext) -> str:
    sparql = str(args["sparql"])
    rows = await _call(ctx, "knowledge_query", "the blackboard", sparql)
    if not rows:
        note = "" if "GRAPH" in sparql.upper() else (
            " (nodes sit in one named graph per job: match them inside GRAPH ?g { ... })")
        return "no rows" + note
    return bounded((render_row(r) for r in rows), "rows")


KG_SEARCH = Tool(
    "kg_search", "Search the team's long-term memory (every job) by words and meaning.",
    schema(["query"], query=prop("string", "what to look for"),
           k=prop("integer", f"how many nodes, at most {MAX_K}")),
    _kg_search)
KNOWLEDGE_QUERY = Tool(
    "knowledge_query", "Read-only SPARQL over the blackboard; rows as var=value lines.",
    schema(["sparql"], sparql=prop(
        "string", "SELECT, ASK, CONSTRUCT or DESCRIBE; gl: is predeclared; "
                  "nodes sit in GRAPH ?g { ... }")),
    _knowledge_query)
