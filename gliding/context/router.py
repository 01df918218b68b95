"""The result router: a tool result over the threshold leaves the prompt for L0 and is replaced by
a structure-aware summary plus its IRI, within ``preview_size`` bytes.

Pure functions: ``route_result`` takes the output, the numbers from ``context:`` settings and
the job's current *focus* (terms and identifiers of the task, the latest user turn and the
latest assistant turn: the call that asked for this result) and returns the text the prompt
gets. Summaries by kind:

- search / grep output: match counts per file, then the first matches;
- file reads: path, line count, outline (definitions, headings) with line numbers, head;
- shell: exit code, error lines, head and tail;
- JSON: shape, then one line per record (of the first 2,000: an object's scalar fields as
  ``key=value``, nested objects as dotted keys, identifier-like keys first), so ids and
  numbers in the middle of a result stay with the record they belong to;
- anything else: head and tail.

Before the structure's own lines come the lines (or JSON records) that share the most
identifiers and words with the focus, with their line numbers: what the next step most likely
reads. Every summary ends with the identifiers of the output that it has not shown yet (paths,
dotted and snake_case names, numbers of 3+ digits), those the focus names first, as many as
fit: those are what a later step tends to need verbatim.

A tool call's arguments are routed too (``route_call``): past a cap, the call the prompt keeps
has a short stub instead of them, pointing at their archived text, so one reply with a huge
argument is not re-sent in every later prompt.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gliding.core.identifiers import identifiers
from gliding.core.messages import ToolCall
from gliding.core.records import json_records, parse_json_output
from gliding.core.text import clip

LINE_CHARS = 160  # one line of a summary
_GREP_LINE = re.compile(r"^(?P<path>[^\s:][^:]{0,300}?):(?P<line>\d+)[:-]")
_NUMBERED = re.compile(r"^\s*(\d+)[:|\t ]")
_DEFINITION = re.compile(
    r"^\s*(?:\d+[:|\t ]\s*)?(?:(?:export\s+|pub(?:\([^)]*\))?\s+|async\s+|static\s+|public\s+|"
    r"private\s+|protected\s+)*(?:def|class|fun|func|function|fn|struct|enum|trait|impl|"
    r"interface|type|actor|primitive|module|package|var|let|const|new|be)\s+[A-Za-z_]"
    r"|#{1,6}\s+\S)"
)
_ERROR = re.compile(r"(Traceback|Error\b|error[:\[]|Exception|FAIL|FAILED|panic|fatal|"
                    r"assert|Warning:|not found|No such file|denied|undefined|cannot)",
                    re.IGNORECASE)
_EXIT = re.compile(r"(?:exit(?:ed)? (?:code|status)[: ]*|return code[: ]*)(-?\d+)", re.I)
_FILE_HEADER = re.compile(r"^\[File: (?P<path>[^\]]+?) \((?P<lines>\d+) lines total\)\]")

# tool names that say what kind of output to expect: generic verbs and Gliding's own tools only
# (a name no tool of ours has, from one agent system or another, must not decide a summary: the
# output's shape does)
SEARCH_TOOLS = frozenset({"grep", "search", "find", "glob", "rg", "grep_result", "kg_search",
                          "recall"})
READ_TOOLS = frozenset({"read_file", "read", "open", "cat", "view", "read_result"})
SHELL_TOOLS = frozenset({"bash", "python", "shell", "execute", "run", "cmd", "pytest", "make"})


@dataclass(frozen=True)
class RoutedResult:
    text: str  # what the prompt gets
    archived: bool  # True when ``text`` is a summary pointing at the archived original
    kind: str


def route_result(output: str, *, iri: str, tool: str | None, threshold: int,
                 preview_size: int, focus: Collection[str] = ()) -> RoutedResult:
    """The output itself when it is at most ``threshold`` bytes, else summary + IRI.
    ``focus``: lower-cased words and identifiers of what the job is doing now."""
    size = len(output.encode("utf-8"))
    if size <= threshold:
        return RoutedResult(output, False, "verbatim")
    parsed = parse_json_output(output)
    kind = "json" if parsed is not None else _kind(output, tool)
    lines = output.splitlines()
    header = (f"[{kind} result archived as {iri}: {size} bytes, {len(lines)} lines. "
              f"Read it with read_result(iri, offset, limit) or grep_result(iri, pattern).]")
    if len(header.encode()) + 40 > preview_size:
        header = f"[archived as {iri}: {size} bytes; read_result(iri)]"
    wanted = frozenset(focus)
    if parsed is not None:
        head, data = parsed
        body = _json(data, wanted)
        if head:  # the tool's own first line (``orders.json lines 1-1 of 1``) leads
            body.insert(0, clip(head, LINE_CHARS))
    else:
        body = _SUMMARISERS[kind](output, lines)
        near, room = [], int(preview_size * FOCUS_SHARE)
        for line in _focus_lines(lines, wanted):
            room -= len(line.encode()) + 1
            if room < 0:
                break
            near.append(line)
        if near:  # first: the lines the next step most likely reads
            body[0:0] = ["on the focus:", *near]
    text = _fit(header, body, output, preview_size, wanted)
    return RoutedResult(_cut_bytes(text, preview_size), True, kind)


def arguments_size(call: ToolCall) -> int:
    """Bytes of the call's arguments as JSON (UTF-8)."""
    return len(call.arguments_json().encode("utf-8", errors="surrogatepass"))


def route_call(call: ToolCall, *, iri: str, cap: int) -> tuple[ToolCall, int | None]:
    """``(call, None)`` when its arguments' JSON is at most ``cap`` bytes; else the call with
    its arguments replaced by a stub that names ``iri`` (where their full text is archived)
    and their size, and that size."""
    size = arguments_size(call)
    if size <= cap:
        return call, None
    stub = {"arguments_archived": iri, "bytes": size,
            "note": f"over the {cap} bytes a call may have: not run; read_result(iri) has them"}
    return ToolCall(call.id, call.name, stub), size


def classify(output: str, tool: str | None) -> str:
    """The kind of summary ``output`` gets: json, search, file, shell or text."""
    return "json" if parse_json_output(output) is not None else _kind(output, tool)


def _kind(output: str, tool: str | None) -> str:
    """The kind of an output that is not JSON."""
    name = (tool or "").lower()
    stripped = output.lstrip()
    lines = output.splitlines()[:200]
    if name in SEARCH_TOOLS or _share(lines, _GREP_LINE) > 0.5:
        return "search"
    if name in READ_TOOLS or _FILE_HEADER.match(stripped) or _share(lines, _NUMBERED) > 0.6:
        return "file"
    if name in SHELL_TOOLS or _EXIT.search(output[:300]):
        return "shell"
    return "text"


# ---- summarisers: (output, lines) -> list of lines, most important first ---------------------
def _search(output: str, lines: list[str]) -> list[str]:
    per_file: Counter[str] = Counter()
    matches = []
    for line in lines:
        m = _GREP_LINE.match(line)
        if m:
            per_file[m.group("path")] += 1
            matches.append(line)
    if not per_file:
        return _text(output, lines)
    out = [f"{len(matches)} matches in {len(per_file)} files: " +
           ", ".join(f"{p} ({n})" for p, n in per_file.items())]
    out += [clip(x, LINE_CHARS) for x in matches]
    return out


def _file(output: str, lines: list[str]) -> list[str]:
    out = []
    header = _FILE_HEADER.match(output.lstrip())
    if header:
        out.append(f"file {header['path']}, {header['lines']} lines")
    outline = [clip(x.strip(), LINE_CHARS) for x in lines if _DEFINITION.match(x)]
    if outline:
        out.append(f"outline ({len(outline)} definitions):")
        out += outline
    out.append("head:")
    out += [clip(x, LINE_CHARS) for x in lines[:8]]
    return out


def _shell(output: str, lines: list[str]) -> list[str]:
    out = []
    code = _EXIT.search(output)
    if code:
        out.append(f"exit code {code.group(1)}")
    tail = lines[-4:]  # the end first: where a traceback's raising frame and error are
    out.append("tail:")
    out += [f"{len(lines) - len(tail) + i + 1}: {clip(x, 120)}" for i, x in enumerate(tail)]
    errors = [i for i, x in enumerate(lines[: len(lines) - len(tail)]) if _ERROR.search(x)]
    if errors:
        out.append(f"{len(errors)} more error lines:")
        out += [f"{i + 1}: {clip(lines[i], 120)}" for i in errors[:20]]
    out.append("head:")
    out += [clip(x, 120) for x in lines[:6]]
    return out


def _json(data: Any, focus: frozenset[str]) -> list[str]:
    """Shape, then records: those that share the most with ``focus`` first, then the rest in
    document order."""
    rows = list(json_records(data, "", 0))
    ranked = sorted(range(len(rows)), key=lambda i: (-_focus_score(rows[i], focus), i))
    return [clip("shape: " + _shape(data, 0), LINE_CHARS),
            *(clip(rows[i], LINE_CHARS) for i in ranked)]


_TERM = re.compile(r"[A-Za-z0-9_./-]{3,}")
MAX_FOCUS_LINES = 12
FOCUS_SHARE = 0.2  # of a summary's budget, what the lines on the focus may take
FOCUS_SCAN_LINES = 20_000  # lines of an output searched for the focus
FOCUS_SCAN_CHARS = 400_000  # ... and characters (also where the ids list looks)


def _focus_score(line: str, focus: frozenset[str]) -> int:
    """Identifiers of the focus in ``line`` count 3, its other words 1 (each once)."""
    if not focus:
        return 0
    raw = {w.strip("./-") for w in _TERM.findall(line)}
    hits = (raw | {w.lower() for w in raw}) & focus
    return sum(3 if any(c in x for c in "/_.") or x.isdigit() else 1 for x in hits)


def _focus_lines(lines: list[str], focus: frozenset[str]) -> list[str]:
    """The lines (``number: text``) that share the most with ``focus`` (a score of at least 3:
    one identifier, or three words) and show an identifier it does not name yet, best first,
    at most ``MAX_FOCUS_LINES``."""
    if not focus:
        return []
    scored = []
    budget = FOCUS_SCAN_CHARS
    for n, line in enumerate(lines[:FOCUS_SCAN_LINES], 1):
        # a long line (a minified file, one-line JSON) is scored piece by piece
        pieces = [line] if len(line) <= LINE_CHARS else _pieces(line[:budget], LINE_CHARS)
        budget -= len(line)
        for k, piece in enumerate(pieces):
            score = _focus_score(piece, focus)
            if score >= 3 and any(x not in focus for x in identifiers(piece)):
                shown = piece.strip() if len(pieces) == 1 else f"…{piece.strip()}…"
                scored.append((-score, n, k, shown))
        if budget <= 0:
            break
    scored.sort()
    return [f"{n}: {clip(text, LINE_CHARS)}" for _s, n, _k, text in scored[:MAX_FOCUS_LINES]]


def _pieces(line: str, width: int) -> list[str]:
    """``line`` in pieces of about ``width`` characters, cut at spaces where it has them."""
    out, start = [], 0
    while start < len(line):
        end = min(len(line), start + width)
        if end < len(line):
            cut = line.rfind(" ", start + width // 2, end)
            end = cut if cut > start else end
        out.append(line[start:end])
        start = end
    return out


def _text(output: str, lines: list[str]) -> list[str]:
    return ["head:", *[clip(x, LINE_CHARS) for x in lines[:10]], "tail:",
            *[clip(x, LINE_CHARS) for x in lines[-8:]]]


_SUMMARISERS = {"search": _search, "file": _file, "shell": _shell, "text": _text}


def _shape(data: Any, depth: int) -> str:
    if isinstance(data, dict):
        if depth >= 3:
            return f"{{…{len(data)} keys}}"
        inner = ", ".join(f"{' '.join(str(k).split())}: {_shape(v, depth + 1)}"
                          for k, v in list(data.items())[:12])
        more = f", …{len(data) - 12} more" if len(data) > 12 else ""
        return "{" + inner + more + "}"
    if isinstance(data, list):
        if not data:
            return "[]"
        return f"[{len(data)} × {_shape(data[0], depth + 1)}]"
    if isinstance(data, str):
        return json.dumps(data[:40])
    return json.dumps(data)


def _fit(header: str, body: list[str], output: str, budget: int,
         focus: frozenset[str] = frozenset()) -> str:
    """Header, then body lines within ``BODY_SHARE`` of the budget, then the identifiers the
    body does not show (those in ``focus`` first, then names, paths, numbers), then more body
    lines."""
    parts = [header]
    used = len(header.encode()) + 1
    body_budget = used + int((budget - used) * BODY_SHARE)
    rest = []
    for i, line in enumerate(body):  # a line that does not fit waits; shorter ones may fit
        if i == 0 and used + len(line.encode()) + 1 > body_budget:
            line = clip(line, max(40, body_budget - used - 4))  # the key line, cut to fit
        cost = len(line.encode()) + 1
        if used + cost <= body_budget:
            parts.append(line)
            used += cost
        else:
            rest.append(line)
    shown = "\n".join(parts)
    unseen = sorted((i for i in identifiers(output[:FOCUS_SCAN_CHARS]) if i not in shown),
                    key=lambda i: (i not in focus, _id_rank(i)))
    if unseen and used + 6 < budget:
        picked = []
        used += 5  # "ids: "
        for ident in unseen:
            cost = len(ident.encode()) + 1
            if used + cost > budget:
                break
            picked.append(ident)
            used += cost
        if picked:
            parts.append("ids: " + " ".join(picked))
        else:
            used -= 5
    for line in rest:
        cost = len(line.encode()) + 1
        if used + cost > budget:
            break
        parts.insert(len(parts) - (1 if parts[-1].startswith("ids: ") else 0), line)
        used += cost
    return "\n".join(parts)


BODY_SHARE = 0.6  # of a summary's budget, what structure may take before identifiers


def _id_rank(ident: str) -> int:
    """Names (snake_case, dotted) first, then paths, then bare numbers; stable otherwise."""
    if ident.isdigit():
        return 2
    return 1 if "/" in ident else 0


def _cut_bytes(text: str, budget: int) -> str:
    """At most ``budget`` bytes of UTF-8, cut at a character boundary."""
    data = text.encode("utf-8")
    return text if len(data) <= budget else data[:budget].decode("utf-8", errors="ignore")


def _share(lines: list[str], pattern: re.Pattern[str]) -> float:
    useful = [x for x in lines if x.strip()]
    return sum(1 for x in useful if pattern.match(x)) / len(useful) if useful else 0.0


