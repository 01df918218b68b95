"""L1 summary chains: per agent session, one short summary per turn with the IRI of the full
turn in L0, kept within a token budget.

When the chain is over budget the entry with the lowest score goes first:

    score = β·relevance + (1 − β)·(w_r·recency + w_c·cheapness)

- relevance ∈ [0, 1]: overlap of the entry's words and identifiers with the current focus
  (the goal and the newest messages); the most relevant entries are never the first to go;
- recency ∈ [0, 1]: 1 for the newest turn, falling linearly to 0 for the oldest;
- cheapness ∈ [0, 1]: 1 − tokens/largest, so of two equally useful entries the one that costs
  more tokens leaves first (a token-cost term, oriented so that a higher score always means
  "keep").

Evicted entries stay as weak references: their IRIs are listed, so nothing becomes unreachable.
Scoring and eviction are pure functions; ``SummaryChain`` holds the state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_WORD = re.compile(r"[A-Za-z0-9_./-]{3,}")


@dataclass(frozen=True)
class ChainEntry:
    turn: int  # position in the session, increasing
    role: str  # "assistant", "tool:<name>", "user"
    summary: str  # one line
    iri: str
    tokens: int


@dataclass(frozen=True)
class Weights:
    beta: float = 0.5
    w_recency: float = 0.7
    w_cost: float = 0.3


STOP_WORDS = frozenset((
    "the", "and", "for", "with", "that", "this", "from", "are", "was", "were", "have", "has",
    "had", "not", "but", "you", "your", "our", "its", "into", "then", "than", "them", "they",
    "their", "there", "here", "what", "when", "where", "which", "while", "who", "why", "how",
    "all", "any", "can", "will", "would", "should", "could", "just", "also", "only", "more",
    "most", "some", "such", "very", "been", "being", "does", "did", "done", "let", "lets", "now",
    "use", "used", "using", "file", "files", "line", "lines", "result", "results", "read_result",
    "grep_result", "archived", "bytes",
))


def terms(text: str) -> frozenset[str]:
    """The content words of ``text``: lower-cased, 3+ characters, stop words left out."""
    words = (w.lower().strip("./-") for w in _WORD.findall(text))
    return frozenset(w for w in words if len(w) >= 3 and w not in STOP_WORDS)


def relevance(entry_terms: frozenset[str], focus_terms: frozenset[str]) -> float:
    """Share of the entry's terms that the focus mentions (0 when either is empty)."""
    if not entry_terms or not focus_terms:
        return 0.0
    return len(entry_terms & focus_terms) / len(entry_terms)


def scores(entries: Sequence[ChainEntry], focus: str, weights: Weights) -> list[float]:
    """One score per entry; higher means more worth keeping."""
    if not entries:
        return []
    focus_terms = terms(focus)
    first, last = entries[0].turn, entries[-1].turn
    span = max(1, last - first)
    largest = max(e.tokens for e in entries) or 1
    out = []
    for e in entries:
        rel = relevance(terms(e.summary), focus_terms)
        recency = (e.turn - first) / span
        cheap = 1.0 - e.tokens / largest
        out.append(weights.beta * rel
                   + (1 - weights.beta) * (weights.w_recency * recency + weights.w_cost * cheap))
    return out


def choose_evictions(entries: Sequence[ChainEntry], focus: str, weights: Weights,
                     budget_tokens: int) -> list[int]:
    """Indices to evict, lowest score first, until the rest fits ``budget_tokens``."""
    total = sum(e.tokens for e in entries)
    if total <= budget_tokens:
        return []
    score = scores(entries, focus, weights)
    ranked = sorted(range(len(entries)), key=lambda i: (score[i], entries[i].turn))
    out = []
    for i in ranked:
        if total <= budget_tokens:
            break
        out.append(i)
        total -= entries[i].tokens
    return sorted(out)


@dataclass
class SummaryChain:
    """The L1 chain of one agent session."""

    budget_tokens: int
    weights: Weights
    count: Callable[[str], int]
    entries: list[ChainEntry] = field(default_factory=list)
    weak: list[str] = field(default_factory=list)  # IRIs of evicted entries, oldest first

    def add(self, turn: int, role: str, summary: str, iri: str) -> ChainEntry:
        line = " ".join(summary.split())
        rendered = _render(turn, role, line, relative(iri, base_of(iri)))
        entry = ChainEntry(turn, role, line, iri, self.count(rendered) + 1)
        self.entries.append(entry)
        return entry

    def evict(self, focus: str) -> list[ChainEntry]:
        gone = choose_evictions(self.entries, focus, self.weights, self.budget_tokens)
        evicted = [self.entries[i] for i in gone]
        keep = set(range(len(self.entries))) - set(gone)
        self.entries = [e for i, e in enumerate(self.entries) if i in keep]
        self.weak.extend(e.iri for e in evicted)
        return evicted

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.entries)

    def render(self, entries: Sequence[ChainEntry] | None = None, *, weak: bool = True) -> str:
        """A structured history block: one line per turn (all kept ones by default), then a
        note on the weak references. IRIs are written relative to the block's base."""
        chosen = list(self.entries if entries is None else entries)
        base = base_of(chosen[0].iri) if chosen else ""
        lines = [f"[Earlier turns, summarised. <x> means {base}x; read_result(IRI) gives the "
                 "full text.]"]
        lines += [_render(e.turn, e.role, e.summary, relative(e.iri, base)) for e in chosen]
        if weak and self.weak:
            lines.append(f"[{len(self.weak)} older turns dropped from this list; "
                         "recall(query) finds them.]")
        return "\n".join(lines)


def _render(turn: int, role: str, summary: str, iri: str) -> str:
    return f"#{turn} {role}: {summary} <{iri}>"


def base_of(iri: str) -> str:
    """``gliding://job/<job>/`` of an IRI (the part every line of one session shares)."""
    parts = iri.split("/")
    return "/".join(parts[:4]) + "/" if len(parts) > 4 and iri.startswith("gliding://") else ""


def relative(iri: str, base: str) -> str:
    return iri[len(base):] if base and iri.startswith(base) else iri
