"""Read-back tools: one family for every archived result, parameterised by IRI.

- ``read_result(iri, offset, limit)``: characters ``offset`` .. ``offset + limit`` of the
  archived text, exactly as stored (pages concatenate back to the original byte for byte);
- ``grep_result(iri, pattern)``: the lines of the archived text matching a regex, numbered;
- ``recall(query)``: two labelled sections, each left out when it has nothing: earlier turns
  of this session that left the prompt, found by their summary (L1), and what long-term memory
  holds about ``query`` — every job's blackboard nodes, by hybrid recall within
  ``memory.recall.budget_tokens`` — or ``nothing found``.

These tools never import the archive: the runner puts a reader into ``ToolContext.extra``:
``extra["read_archived"]`` (IRI -> text; raises a GlidingError when absent), ``extra["recall"]``
(query -> text: the session's chain, set per agent by the agent loop; "" for none),
``extra["knowledge_recall"]`` (query -> text, "" for none; raises a GlidingError when the store
fails; run on a worker thread, since the first recall may load the embedder) and
``extra["iri_base"]`` (``gliding://job/<job>/``, so the relative IRIs of the history block work
too).
"""

from __future__ import annotations

import re
from typing import Any

import anyio

from gliding.errors import GlidingError, ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema

PAGE_CHARS = 4000
MAX_MATCHES = 100
SESSION_LABEL = "Earlier turns of this session:"
KNOWLEDGE_LABEL = "Long-term memory (what the team and earlier jobs recorded):"


def _resolve(iri: str, ctx: ToolContext) -> str:
    iri = iri.strip().strip("<>")
    base = str(ctx.extra.get("iri_base", ""))
    if not iri.startswith("gliding://") and base:
        iri = base + iri.lstrip("/")
    return iri


def _archived(iri: str, ctx: ToolContext) -> str:
    reader = ctx.extra.get("read_archived")
    if reader is None:
        raise ToolError("no archive is attached to this session")
    try:
        return str(reader(_resolve(iri, ctx)))
    except GlidingError as exc:
        raise ToolError(exc.message, hint=exc.hint) from exc


async def _read_result(args: dict[str, Any], ctx: ToolContext) -> str:
    text = _archived(args["iri"], ctx)
    offset = int(args.get("offset") or 0)
    limit = int(args.get("limit") or PAGE_CHARS)
    if offset < 0 or limit <= 0:
        raise ToolError("offset must be >= 0 and limit > 0")
    page = text[offset: offset + limit]
    end = offset + len(page)
    more = (f"\n[characters {offset}-{end} of {len(text)}; next: offset={end}]"
            if end < len(text) else "")
    return page + more


async def _grep_result(args: dict[str, Any], ctx: ToolContext) -> str:
    text = _archived(args["iri"], ctx)
    try:
        pattern = re.compile(args["pattern"])
    except re.error as exc:
        raise ToolError(f"bad regular expression {args['pattern']!r}: {exc}") from exc
    hits = [f"{n}: {line[:300]}" for n, line in enumerate(text.splitlines(), 1)
            if pattern.search(line)]
    if not hits:
        return f"no line matches {args['pattern']!r}"
    shown = hits[:MAX_MATCHES]
    more = f"\n[{len(hits) - MAX_MATCHES} more matches]" if len(hits) > MAX_MATCHES else ""
    return "\n".join(shown) + more


async def _recall(args: dict[str, Any], ctx: ToolContext) -> str:
    query = str(args["query"])
    session, knowledge = ctx.extra.get("recall"), ctx.extra.get("knowledge_recall")
    if session is None and knowledge is None:
        raise ToolError("recall is not available in this session")
    sections: list[str] = []
    if session is not None:
        found = str(session(query)).strip()
        if found:
            sections.append(f"{SESSION_LABEL}\n{found}")
    failure: GlidingError | None = None
    if knowledge is not None:
        try:
            found = str(await anyio.to_thread.run_sync(knowledge, query)).strip()
        except GlidingError as exc:
            failure = exc
        else:
            if found:
                sections.append(f"{KNOWLEDGE_LABEL}\n{found}")
    if failure is not None:
        if not sections:
            raise ToolError(f"long-term memory failed: {failure.message}",
                            hint=failure.hint) from failure
        sections.append(f"[long-term memory failed: {failure.message}]")
    return "\n\n".join(sections) if sections else f"nothing found for {query!r}"


READ_RESULT = Tool(
    "read_result", "Read an archived result by IRI, a page of characters at a time.",
    schema(["iri"], iri=prop("string", "IRI of the archived result"),
           offset=prop("integer", "first character, default 0"),
           limit=prop("integer", f"characters, default {PAGE_CHARS}")),
    _read_result)
GREP_RESULT = Tool(
    "grep_result", "Lines of an archived result matching a regex.",
    schema(["iri", "pattern"], iri=prop("string", "IRI of the archived result"),
           pattern=prop("string", "Python regular expression")),
    _grep_result)
RECALL = Tool(
    "recall", "Recall earlier turns of this session and what earlier jobs recorded.",
    schema(["query"], query=prop("string", "words to look for")),
    _recall)
