"""Read-back tools: one family for every archived result, parameterised by IRI.

- ``read_result(iri, offset, limit)``: characters ``offset`` .. ``offset + limit`` of the
  archived text, exactly as stored (pages concatenate back to the original byte for byte);
- ``grep_result(iri, pattern)``: the lines of the archived text matching a regex, numbered;
- ``recall(query)``: two labelled sections, each left out when it has nothing: earlier turns
  of this session that left the prompt, found by their summary (L1), and what long-term memory
  holds about ``query`` — every job's blackboard nodes, by hybrid recall within
  ``memory.recall.budget_tokens`` — or ``nothing found``.

``MemoryGroup`` (the "memory" tool group) owns what they read: an ``ArchiveReader`` (this job's
L0 archive and earlier jobs' of the same data directory), the job's IRI base (so the relative
IRIs of the history block work too) and, when the job has a blackboard, long-term memory
(``KnowledgeAccess``, called on a worker thread since the first recall may load the embedder).
The session's own chain comes with each call (``ToolContext.session``).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import anyio

from gliding.errors import GlidingError, ToolError
from gliding.tools.base import Tool, ToolContext, ToolGroup, prop, schema
from gliding.tools.knowledge import KnowledgeAccess

PAGE_CHARS = 4000
MAX_MATCHES = 100
SESSION_LABEL = "Earlier turns of this session:"
KNOWLEDGE_LABEL = "Long-term memory (what the team and earlier jobs recorded):"


class ArchiveReader(Protocol):
    """Reads archived items back as text."""

    async def read_text(self, iri: str) -> str:
        """The item at ``iri`` (of this job or an earlier one; for a blackboard node its latest
        revision's JSON-LD). Raises GlidingError (NotFoundError, IRIError) when there is none."""
        ...


class MemoryGroup(ToolGroup):
    """The "memory" group: read_result, grep_result and recall."""

    def __init__(self, reader: ArchiveReader | None, iri_base: str = "",
                 knowledge: KnowledgeAccess | None = None) -> None:
        self.reader, self.iri_base, self.knowledge = reader, iri_base, knowledge
        super().__init__("memory", [
            Tool(READ_RESULT.name, READ_RESULT.description, READ_RESULT.parameters,
                 self._read_result),
            Tool(GREP_RESULT.name, GREP_RESULT.description, GREP_RESULT.parameters,
                 self._grep_result),
            Tool(RECALL.name, RECALL.description, RECALL.parameters, self._recall),
        ], "read archived results back by IRI; recall earlier turns and jobs")

    def _resolve(self, iri: str) -> str:
        iri = iri.strip().strip("<>")
        if not iri.startswith("gliding://") and self.iri_base:
            iri = self.iri_base + iri.lstrip("/")
        return iri

    async def _archived(self, iri: str) -> str:
        if self.reader is None:
            raise ToolError("no archive is attached to this session")
        try:
            return await self.reader.read_text(self._resolve(iri))
        except GlidingError as exc:
            raise ToolError(exc.message, hint=exc.hint) from exc

    async def _read_result(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = await self._archived(args["iri"])
        offset = int(args.get("offset") or 0)
        limit = int(args.get("limit") or PAGE_CHARS)
        if offset < 0 or limit <= 0:
            raise ToolError("offset must be >= 0 and limit > 0")
        page = text[offset: offset + limit]
        end = offset + len(page)
        more = (f"\n[characters {offset}-{end} of {len(text)}; next: offset={end}]"
                if end < len(text) else "")
        return page + more

    async def _grep_result(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = await self._archived(args["iri"])
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

    async def _recall(self, args: dict[str, Any], ctx: ToolContext) -> str:
        query = str(args["query"])
        session, knowledge = ctx.session, self.knowledge
        if session is None and knowledge is None:
            raise ToolError("recall is not available in this session")
        sections: list[str] = []
        if session is not None:
            found = session.recall(query).strip()
            if found:
                sections.append(f"{SESSION_LABEL}\n{found}")
        failure: GlidingError | None = None
        if knowledge is not None:
            try:
                found = str(await anyio.to_thread.run_sync(knowledge.recall, query)).strip()
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


async def _unbound(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("this tool needs the memory group of a job (MemoryGroup)")


READ_RESULT = Tool(
    "read_result", "Read an archived result by IRI, a page of characters at a time.",
    schema(["iri"], iri=prop("string", "IRI of the archived result"),
           offset=prop("integer", "first character, default 0"),
           limit=prop("integer", f"characters, default {PAGE_CHARS}")),
    _unbound)
GREP_RESULT = Tool(
    "grep_result", "Lines of an archived result matching a regex.",
    schema(["iri", "pattern"], iri=prop("string", "IRI of the archived result"),
           pattern=prop("string", "Python regular expression")),
    _unbound)
RECALL = Tool(
    "recall", "Recall earlier turns of this session and what earlier jobs recorded.",
    schema(["query"], query=prop("string", "words to look for")),
    _unbound)
