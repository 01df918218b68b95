"""Read-back tools: one family for every archived result, parameterised by IRI.

- ``read_result(iri, offset, limit)``: characters ``offset`` .. ``offset + limit`` of the
  archived text (``limit`` at most ``PAGE_CHARS``), exactly as stored (pages concatenate back
  to the original byte for byte), and a one-line notice where more follows;
- ``grep_result(iri, pattern)``: the lines of the archived text matching a regex, numbered,
  each cut at 300 characters, at most ``MAX_MATCHES`` of them and ``PAGE_CHARS`` characters in
  all (a notice counts the rest). The regex runs on a worker thread with the time limits of
  grep (``search.search_lines``), so a pattern that backtracks ends with an error;
- ``recall(query)``: two labelled sections, each left out when it has nothing: earlier turns
  of this session that left the prompt, found by their summary (L1), and what long-term memory
  holds about ``query`` — every job's blackboard nodes, by hybrid recall within
  ``memory.recall.budget_tokens`` — or ``nothing found``.

``MemoryGroup`` (the "memory" tool group) owns what they read: an ``ArchiveReader`` (this job's
L0 archive and earlier jobs' of the same data directory), the job's IRI base (so the relative
IRIs of the history block work too) and, when the job has a blackboard, long-term memory
(``KnowledgeAccess``, called on a worker thread since the first recall may load the embedder).
The session's own chain comes with each call (``ToolContext.session``). A pattern or query is
quoted back cut short (``shown_pattern``): the model sent it, and an answer stays small.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from gliding.core.text import clip
from gliding.errors import GlidingError, ToolError
from gliding.tools.base import CALL_TIMEOUT_S, Tool, ToolContext, ToolGroup, prop, schema
from gliding.tools.knowledge import KnowledgeAccess
from gliding.tools.search import compile_regex, search_lines, shown_pattern

PAGE_CHARS = 4000  # a read_result page and a grep_result answer, at most
MAX_MATCHES = 100
MATCH_CHARS = 300  # one matching line as grep_result shows it
RECALL_TIMEOUT_S = 120.0  # the first recall may load the embedder
ERROR_CHARS = 1000  # an archive error's message, and its hint, as the model sees them
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
                 self._read_result, timeout_s=READ_RESULT.timeout_s),
            Tool(GREP_RESULT.name, GREP_RESULT.description, GREP_RESULT.parameters,
                 self._grep_result, timeout_s=GREP_RESULT.timeout_s),
            Tool(RECALL.name, RECALL.description, RECALL.parameters, self._recall,
                 timeout_s=RECALL.timeout_s),
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
        except GlidingError as exc:  # its message may quote the IRI the model sent: cut short
            raise ToolError(clip(exc.message, ERROR_CHARS),
                            hint=clip(exc.hint, ERROR_CHARS) if exc.hint else None) from exc

    async def _read_result(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = await self._archived(args["iri"])
        offset = int(args.get("offset") or 0)
        limit = int(args.get("limit") or PAGE_CHARS)
        if offset < 0 or limit <= 0:
            raise ToolError("offset must be >= 0 and limit > 0")
        limit = min(limit, PAGE_CHARS)
        page = text[offset: offset + limit]
        end = offset + len(page)
        more = (f"\n[characters {offset}-{end} of {len(text)}; next: offset={end}]"
                if end < len(text) else "")
        return page + more

    async def _grep_result(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text = await self._archived(args["iri"])
        pattern = compile_regex(args["pattern"])
        hits = await anyio.to_thread.run_sync(
            lambda: [f"{n}: {line[:MATCH_CHARS]}" for n, line in search_lines(
                pattern, text.splitlines(), "the archived result", ctx.deadline)])
        if not hits:
            return f"no line matches {shown_pattern(args['pattern'])}"
        return _bounded_lines(hits)

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
                found = str(await anyio.to_thread.run_sync(knowledge.recall, query,
                                                           abandon_on_cancel=True)).strip()
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
        return ("\n\n".join(sections) if sections
                else f"nothing found for {shown_pattern(query)}")


def _bounded_lines(hits: list[str]) -> str:
    """The first hits that fit ``MAX_MATCHES`` lines and ``PAGE_CHARS`` characters together
    with the notice counting the rest."""
    kept: list[str] = []
    used = 0
    for hit in hits[:MAX_MATCHES]:
        notice = len(f"\n[{len(hits)} more matches; narrow the pattern]")
        if used + len(hit) + 1 + notice > PAGE_CHARS:
            break
        kept.append(hit)
        used += len(hit) + 1
    rest = len(hits) - len(kept)
    return "\n".join(kept) + (f"\n[{rest} more matches; narrow the pattern]" if rest else "")


async def _unbound(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("this tool needs the memory group of a job (MemoryGroup)")


READ_RESULT = Tool(
    "read_result", "Read an archived result by IRI, a page of characters at a time.",
    schema(["iri"], iri=prop("string", "IRI of the archived result"),
           offset=prop("integer", "first character, default 0"),
           limit=prop("integer", f"characters, default and at most {PAGE_CHARS}")),
    _unbound, timeout_s=CALL_TIMEOUT_S)
GREP_RESULT = Tool(
    "grep_result", "Lines of an archived result matching a regex.",
    schema(["iri", "pattern"], iri=prop("string", "IRI of the archived result"),
           pattern=prop("string", "Python regular expression")),
    _unbound, timeout_s=CALL_TIMEOUT_S)
RECALL = Tool(
    "recall", "Recall earlier turns of this session and what earlier jobs recorded.",
    schema(["query"], query=prop("string", "words to look for")),
    _unbound, timeout_s=RECALL_TIMEOUT_S)
