"""Knowledge tools: the team's long-term memory (the blackboard, L2), searched and queried.

- ``kg_search(query, k?)``: the blackboard nodes that best match ``query`` by hybrid search
  (words, meaning, graph), best first, one line each: ``<type> <iri>: <text>``;
- ``knowledge_query(sparql)``: a read-only SPARQL query over the blackboard — every job's named
  graph, reached with ``GRAPH ?g { ... }`` — one line per row of ``var=value`` pairs (IRIs as
  they are, strings quoted).

``KnowledgeGroup`` (the "knowledge" tool group) owns a ``KnowledgeAccess``: long-term memory
as the tools need it, implemented over the knowledge memory by
``gliding.memory.recall.access`` (these tools never import the memory package). Its calls
run on a worker thread, so a slow query or the first search (which may load the embedder) does
not stall the event loop. A GlidingError from either — a refused or malformed query, a
timeout, a store that failed — comes back to the model as ``error: <message>`` with its hint.
Every answer, errors included, is at most ``MAX_CHARS`` characters: lines are clipped, lists
are cut with a count of the rest, and what echoes the model's own input (the query of "nothing
found", an error's message) is clipped too. A job without a blackboard has no KnowledgeGroup:
its roles are not offered these tools.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import anyio

from gliding.core.text import clip, one_line
from gliding.errors import GlidingError, ToolError
from gliding.tools.base import Tool, ToolContext, ToolGroup, prop, schema

MAX_CHARS = 4000  # one answer, notices and errors included
MAX_K = 50
VALUE_CHARS = 200  # one value of a query row
LINE_CHARS = 600  # one row or one hit
ECHO_CHARS = 200  # the model's query, repeated in "nothing found for ..."
HINT_CHARS = 500  # an error's hint


def hit_line(hit: Any) -> str:
    """``<type> <iri>: <text>`` on one line of at most LINE_CHARS (``hit`` has ``type``, ``iri``
    and ``text``); the text is what gets cut, unless the IRI alone is too long."""
    kind = one_line(str(getattr(hit, "type", "?")), 40)
    iri = one_line(str(getattr(hit, "iri", "?")), LINE_CHARS)
    return clip(f"{kind} {iri}: " + " ".join(str(getattr(hit, "text", "")).split()), LINE_CHARS)


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
    """``lines`` joined while they fit ``limit`` characters, then ``[N more <noun>]``; never
    longer than ``limit``."""
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
    return clip("\n".join(kept) + (f"\n[{rest} more {noun}]" if rest else ""), limit)


def echo(text: str) -> str:
    """The model's own ``text`` repeated in an answer: quoted, on one line, clipped."""
    return repr(one_line(text, ECHO_CHARS))


class KnowledgeAccess(Protocol):
    """Long-term memory as the recall and knowledge tools use it (sync: called on a thread)."""

    def recall(self, query: str) -> str:
        """What memory holds about ``query``, packed into the recall budget; "" for nothing.
        Raises GlidingError when the store fails."""
        ...

    def search(self, query: str, k: int | None = None) -> Sequence[Any]:
        """Hits (each with ``type``, ``iri`` and ``text``), best first, within the budget.
        Raises GlidingError when the store fails."""
        ...

    def query(self, sparql: str) -> list[dict[str, Any]]:
        """Rows of a read-only SPARQL query. Raises GlidingError (refused, bad, timed out)."""
        ...


async def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))
    except GlidingError as exc:
        raise bounded_error(exc) from exc


def bounded_error(exc: GlidingError) -> ToolError:
    """``exc`` as a ToolError whose ``error: <message>\n  hint: <hint>`` fits MAX_CHARS."""
    hint = clip(exc.hint, HINT_CHARS) if exc.hint else None
    room = MAX_CHARS - len("error: ") - (len(f"\n  hint: {hint}") if hint else 0)
    return ToolError(clip(exc.message, room), hint=hint)


class KnowledgeGroup(ToolGroup):
    """The "knowledge" group: kg_search and knowledge_query over ``access``."""

    def __init__(self, access: KnowledgeAccess) -> None:
        self.access = access
        super().__init__("knowledge", [
            Tool(KG_SEARCH.name, KG_SEARCH.description, KG_SEARCH.parameters, self._kg_search),
            Tool(KNOWLEDGE_QUERY.name, KNOWLEDGE_QUERY.description, KNOWLEDGE_QUERY.parameters,
                 self._knowledge_query),
        ], "search and query the team's long-term memory (every job's blackboard)")

    async def _kg_search(self, args: dict[str, Any], ctx: ToolContext) -> str:
        query = str(args["query"]).strip()
        if not query:
            raise ToolError("kg_search: query is empty", hint="pass the words to look for")
        k = args.get("k")
        if k is not None and k < 1:
            raise ToolError(f"kg_search: k must be at least 1, got {clip(str(k), 40)}")
        hits = await _call(self.access.search, query, None if k is None else min(int(k), MAX_K))
        if not hits:
            return f"nothing found for {echo(query)}"
        return bounded((hit_line(h) for h in hits), "hits")

    async def _knowledge_query(self, args: dict[str, Any], ctx: ToolContext) -> str:
        sparql = str(args["sparql"])
        rows = await _call(self.access.query, sparql)
        if not rows:
            note = "" if "GRAPH" in sparql.upper() else (
                " (nodes sit in one named graph per job: match them inside GRAPH ?g { ... })")
            return "no rows" + note
        return bounded((render_row(r) for r in rows), "rows")


async def _unbound(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("long-term memory is not available in this session",
                    hint="the job has no blackboard (see the blackboard.unavailable log)")


KG_SEARCH = Tool(
    "kg_search", "Search the team's long-term memory (every job) by words and meaning.",
    schema(["query"], query=prop("string", "what to look for"),
           k=prop("integer", f"how many nodes, at most {MAX_K}")),
    _unbound)
KNOWLEDGE_QUERY = Tool(
    "knowledge_query", "Read-only SPARQL over the blackboard; rows as var=value lines.",
    schema(["sparql"], sparql=prop(
        "string", "SELECT, ASK, CONSTRUCT or DESCRIBE; gl: is predeclared; "
                  "nodes sit in GRAPH ?g { ... }")),
    _unbound)
