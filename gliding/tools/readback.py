"""Read-back tools: one family for every archived result, parameterised by IRI.

- ``read_result(iri, offset, limit)``: characters ``offset`` .. ``offset + limit`` of the
  archived text, exactly as stored (pages concatenate back to the original byte for byte);
- ``grep_result(iri, pattern)``: the lines of the archived text matching a regex, numbered;
- ``recall(query)``: earlier turns of this session that left the prompt, found by their summary.

These tools never import the archive: the runner puts a reader into ``ToolContext.extra``:
``extra["read_archived"]`` (IRI -> text; raises a GlidingError when absent), ``extra["recall"]``
(query -> text) and ``extra["iri_base"]`` (``gliding://job/<job>/``, so the relative IRIs of
the history block work too).
"""

from __future__ import annotations

import re
from typing import Any

from gliding.errors import GlidingError, ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema

PAGE_CHARS = 4000
MAX_MATCHES = 100


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
    recall = ctx.extra.get("recall")
    if recall is None:
        raise ToolError("recall is not available in this session")
    return str(recall(str(args["query"])))


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
    "recall", "Find earlier turns that left the prompt.",
    schema(["query"], query=prop("string", "words to look for")),
    _recall)
