"""A line index of an agent session's sources (tool results and turns): which lines of which
source hold which identifiers, and in how many sources each identifier occurs.

Memory is bounded: a source keeps at most ``max_lines`` of its lines that hold an identifier,
and the index keeps at most ``max_sources`` sources, dropping the oldest. A line longer than
``line_chars`` (a one-line JSON result, a minified file) is kept as pieces of at most that
many characters, cut between words, each under the line's number and holding the identifiers
it shows: what a line claims to hold is what a prompt quoting it shows. The full text of every
source stays in L0 under its IRI.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass

from gliding.core.identifiers import identifiers
from gliding.core.text import MARKUP_TAG


@dataclass(frozen=True)
class Line:
    iri: str
    number: int  # 1-based line number in the source
    text: str
    ids: frozenset[str]


@dataclass
class Source:
    iri: str
    turn: int
    kind: str  # "result" or "turn"
    lines: list[Line]
    ids: frozenset[str]


class LineIndex:
    """Sources by IRI, and for every identifier the lines that hold it."""

    def __init__(self, *, max_lines: int = 400, line_chars: int = 160,
                 max_sources: int = 2000) -> None:
        self.max_lines = max_lines
        self.line_chars = line_chars
        self.max_sources = max_sources
        self.sources: OrderedDict[str, Source] = OrderedDict()
        self.postings: dict[str, list[Line]] = {}
        self.df: Counter[str] = Counter()  # sources that hold each identifier

    def add(self, iri: str, text: str, *, turn: int, kind: str) -> Source:
        if iri in self.sources:
            return self.sources[iri]
        lines = []
        for n, raw in enumerate(text.splitlines(), 1):
            shown = " ".join(MARKUP_TAG.sub("", raw[:4000]).split())
            for piece in _pieces(shown, self.line_chars):
                found = identifiers(piece)
                if found:
                    lines.append(Line(iri, n, piece, frozenset(found)))
            if len(lines) >= self.max_lines:
                del lines[self.max_lines:]
                break
        ids = frozenset().union(*(x.ids for x in lines)) if lines else frozenset()
        source = Source(iri, turn, kind, lines, ids)
        self.sources[iri] = source
        self.df.update(ids)
        for line in lines:
            for ident in line.ids:
                self.postings.setdefault(ident, []).append(line)
        while len(self.sources) > self.max_sources:
            self._drop(next(iter(self.sources)))
        return source

    def _drop(self, iri: str) -> None:
        source = self.sources.pop(iri)
        for ident in source.ids:
            self.df[ident] -= 1
            kept = [x for x in self.postings.get(ident, ()) if x.iri != iri]
            if kept:
                self.postings[ident] = kept
            else:
                self.postings.pop(ident, None)
                del self.df[ident]

    def __len__(self) -> int:
        return len(self.sources)


def _pieces(text: str, width: int) -> list[str]:
    """``text`` (single-spaced) in pieces of at most ``width`` characters, cut between words;
    a word longer than ``width`` is clipped."""
    if len(text) <= width:
        return [text] if text else []
    out: list[str] = []
    current = ""
    for word in text.split(" "):
        if len(word) > width:
            word = word[: width - 1] + "…"
        if current and len(current) + 1 + len(word) > width:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        out.append(current)
    return out
