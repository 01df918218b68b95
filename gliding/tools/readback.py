"""Read-back tools: one family for every archived result, parameterised by IRI.

- ``read_result(iri, offset, limit)``: characters ``offset`` .. ``offset + limit`` of the
  archived text (``limit`` at most ``PAGE_CHARS``), exactly as stored (pages concatenate back
  to the original byte for byte), and a one-line notice where more follows;
  ``read_result(iri, line_start, line_end)``: lines ``line_start`` .. ``line_end`` (1-based,
  inclusive, numbered as grep_result numbers them; ``line_end`` defaults to ``LINE_PAGE`` lines
  on and is capped at the last line) with their line ends, as many whole lines as fit
  ``PAGE_CHARS``, and the same kind of notice. An IRI may carry the lines as a fragment,
  ``#L12`` or ``#L12-14`` (how a fact's provenance names them): they apply when no argument
  picks characters or lines;
- ``grep_result(iri, pattern)``: the lines of the archived text matching a regex, numbered,
  each cut at 300 characters, at most ``MAX_MATCHES`` of them and ``PAGE_CHARS`` characters in
  all (a notice counts the rest). The regex runs on a worker thread with the time limits of
  grep (``search.search_lines``), so a pattern that backtracks ends with an error;
- ``recall(query)``: two labelled sections, each left out when it has nothing: earlier turns
  of this session that left the prompt, found by their summary (L1), and what long-term memory
  holds about ``query`` — every job's blackboard nodes, by hybrid recall within
  ``memory.recall.budget_tokens`` — or ``nothing found``;
- ``note(text, source)``: the agent records a finding, with the IRI or URL it comes from. The
  tool stores nothing: it checks both and says ``noted``; the call is archived like every call,
  its data holding the text and the resolved source, for ingestion to make a fact of it.

``MemoryGroup`` (the "memory" tool group) owns what they read: an ``ArchiveReader`` (this job's
L0 archive and earlier jobs' of the same data directory), the job's IRI base (so the relative
IRIs of the history block work too) and, when the job has a blackboard, long-term memory
(``KnowledgeAccess``, called on a worker thread since the first recall may load the embedder).
The session's own chain comes with each call (``ToolContext.session``). A pattern or query is
quoted back cut short (``shown_pattern``): the model sent it, and an answer stays small.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import anyio

from gliding.core.text import clip, one_line
from gliding.errors import GlidingError, ToolError
from gliding.tools.base import (
    CALL_TIMEOUT_S,
    Tool,
    ToolContext,
    ToolGroup,
    ToolOutput,
    prop,
    schema,
)
from gliding.tools.knowledge import KG_SEARCH, KNOWLEDGE_QUERY, KnowledgeAccess
from gliding.tools.search import compile_regex, search_lines, shown_pattern

PAGE_CHARS = 4000  # a read_result page and a grep_result answer, at most
LINE_PAGE = 100  # lines read_result gives from line_start when line_end is left out
MAX_MATCHES = 100
MATCH_CHARS = 300  # one matching line as grep_result shows it
RECALL_TIMEOUT_S = 120.0  # the first recall may load the embedder
ERROR_CHARS = 1000  # an archive error's message, and its hint, as the model sees them
NOTE_CHARS = 500  # a finding is one or two sentences
NOTED_CHARS = 80  # the finding as note's answer quotes it back
SOURCE_CHARS = 1000
SOURCE_SCHEMES = ("gliding://", "http://", "https://")
URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # what an absolute IRI starts with
LINE_FRAGMENT = re.compile(r"L([1-9][0-9]{0,8})(?:-([1-9][0-9]{0,8}))?")
SESSION_LABEL = "Earlier turns of this session:"
KNOWLEDGE_LABEL = "Long-term memory (what the team and earlier jobs recorded):"


class ArchiveReader(Protocol):
    """Reads archived items back as text."""

    async def read_text(self, iri: str) -> str:
        """The item at ``iri`` (of this job or an earlier one; for a blackboard node its latest
        revision's JSON-LD). Raises GlidingError (NotFoundError, IRIError) when there is none."""
        ...


class MemoryGroup(ToolGroup):
    """The "memory" group: read_result, grep_result, recall and note."""

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
            Tool(NOTE.name, NOTE.description, NOTE.parameters, self._note,
                 timeout_s=NOTE.timeout_s),
        ], "read archived results back by IRI; recall earlier turns and jobs; note findings")

    def _resolve(self, iri: str) -> str:
        """``iri`` made absolute against the job's base (the history block shows relative
        ones), its fragment kept: the archive reads without it, a note's source keeps it."""
        iri = iri.strip().strip("<>")
        if not iri.startswith("gliding://") and self.iri_base:
            iri = self.iri_base + iri.lstrip("/")
        return iri

    async def _archived(self, iri: str) -> str:
        if self.reader is None:
            raise ToolError("no archive is attached to this session")
        try:
            return await self.reader.read_text(self._resolve(iri).partition("#")[0])
        except GlidingError as exc:  # its message may quote the IRI the model sent: cut short
            raise ToolError(clip(exc.message, ERROR_CHARS),
                            hint=clip(exc.hint, ERROR_CHARS) if exc.hint else None) from exc

    async def _read_result(self, args: dict[str, Any], ctx: ToolContext) -> str:
        by_chars = "offset" in args or "limit" in args
        by_lines = "line_start" in args or "line_end" in args
        if by_chars and by_lines:
            raise ToolError("give offset/limit (characters) or line_start/line_end (lines), "
                            "not both")
        fragment = line_fragment(args["iri"])  # the lines to read unless an argument says
        lines = (args.get("line_start"), args.get("line_end")) if by_lines else fragment
        if lines is not None and not by_chars:
            start, end = lines
            if start is None:
                raise ToolError("line_end needs line_start")
            if start < 1:
                raise ToolError(f"line_start must be >= 1 (lines are numbered from 1), "
                                f"got {start}")
            if end is not None and end < start:
                raise ToolError(f"line_end {end} is before line_start {start}")
            return _line_page(await self._archived(args["iri"]), start, end)
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

    async def _note(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        text = str(args["text"]).strip()
        if not text:
            raise ToolError("note needs the finding as text")
        if len(text) > NOTE_CHARS:
            raise ToolError(f"a finding is at most {NOTE_CHARS} characters, this one has "
                            f"{len(text)}", hint="say it in one or two sentences")
        data: dict[str, Any] = {"text": text}
        if str(args.get("source") or "").strip():
            data["source"] = self._source(str(args["source"]))
        return ToolOutput(f"noted: {one_line(text, NOTED_CHARS)}", data)

    def _source(self, written: str) -> str:
        """A note's source made absolute (a relative IRI against the job's base, as
        read_result's), or a ToolError that says what a source may be."""
        source = written.strip().strip("<>")
        if not URI_SCHEME.match(source):
            source = self._resolve(source)
        if (len(source) > SOURCE_CHARS or not source.startswith(SOURCE_SCHEMES)
                or any(c.isspace() for c in source)):
            raise ToolError(f"source {shown_pattern(written)} is not an IRI",
                            hint=f"give the gliding:// IRI or the http(s):// URL the finding "
                                 f"comes from, at most {SOURCE_CHARS} characters, no spaces")
        if source.startswith("gliding://"):
            line_fragment(source)  # a gliding IRI's only fragment is a line range
        return source


def line_fragment(iri: str) -> tuple[int, int] | None:
    """The lines an IRI's fragment names (``#L12``: line 12; ``#L12-14``: lines 12 to 14), or
    None without a fragment. Raises ToolError for any other fragment."""
    _, hash_, fragment = iri.strip().strip("<>").partition("#")
    if not hash_:
        return None
    found = LINE_FRAGMENT.fullmatch(fragment)
    if found is None or int(found[2] or found[1]) < int(found[1]):
        raise ToolError(f"bad line fragment {shown_pattern('#' + fragment)}",
                        hint="an IRI names lines as #L12 or #L12-14 (first <= last)")
    return int(found[1]), int(found[2] or found[1])


def _line_page(text: str, start: int, end: int | None) -> str:
    """Lines ``start`` .. ``end`` of ``text`` (``LINE_PAGE`` lines when ``end`` is None, never
    past the last) with their line ends, as many whole ones as fit ``PAGE_CHARS``, and a
    notice where more follows. A first line longer than a page comes cut, with the character
    offset it goes on at."""
    lines = text.splitlines(keepends=True)
    if start > len(lines):
        raise ToolError(f"line_start={start} is past the end: the result has {len(lines)} "
                        f"line{'' if len(lines) == 1 else 's'}")
    last = min(len(lines), start + LINE_PAGE - 1 if end is None else end)
    page: list[str] = []
    used = 0
    for line in lines[start - 1: last]:
        if used + len(line) > PAGE_CHARS:
            break
        page.append(line)
        used += len(line)
    if not page:
        long = lines[start - 1]
        offset = sum(map(len, lines[: start - 1])) + PAGE_CHARS
        return (f"{long[:PAGE_CHARS]}\n[line {start} has {len(long)} characters, this is its "
                f"first {PAGE_CHARS}; next: offset={offset}]")
    shown = start + len(page) - 1
    more = (f"\n[lines {start}-{shown} of {len(lines)}; next: line_start={shown + 1}]"
            if shown < len(lines) else "")
    return "".join(page) + more


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
    "read_result", "Read an archived result by IRI: a page of characters, or of lines.",
    schema(["iri"], iri=prop("string", "IRI of the archived result"),
           offset=prop("integer", "first character, default 0"),
           limit=prop("integer", f"characters, default and at most {PAGE_CHARS}"),
           line_start=prop("integer", "first line, from 1"),
           line_end=prop("integer", "last line")),
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
NOTE = Tool(
    "note", "Record a finding and where it comes from.",
    schema(["text"], text=prop("string", "one or two sentences"),
           source=prop("string", "IRI or URL")),
    _unbound, timeout_s=CALL_TIMEOUT_S)

MEMORY_READS = frozenset({READ_RESULT.name, GREP_RESULT.name, RECALL.name, KG_SEARCH.name,
                          KNOWLEDGE_QUERY.name})
"""The tools whose output restates what memory holds: no facts are made of it and recall does
not index its lines (they would be copies of what is indexed already, each pointing at the copy
instead of the result it came from)."""
