"""Long-term memory as the agents' tools use it: ``KnowledgeAccess`` over a KnowledgeMemory.

``recall`` packs hybrid recall into ``memory.recall.budget_tokens``; ``search`` clips the hits
to the same budget and to the characters a kg_search answer may hold (the last one shortened
word by word); ``query`` predeclares ``gl:`` and runs a read-only query with a timeout, after
which the query no longer runs (the blackboard stops it). Queries are not held to the job's
graph: reading every job's graph is what shared memory is for.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from gliding.memory.board.blackboard import Value
from gliding.memory.board.vocabulary import NS
from gliding.memory.recall.knowledge import Hit, KnowledgeMemory
from gliding.tools.knowledge import MAX_CHARS, MAX_K, hit_line

KG_SEARCH_K = 8  # nodes a kg_search answers with unless the model asks for another number
KNOWLEDGE_QUERY_TIMEOUT_S = 10.0
# the hits' lines leave room for the count the tool would add if it had to cut them
_HIT_CHARS = MAX_CHARS - len(f"\n\n[{MAX_K} more hits]")
_GL_PREFIX_RE = re.compile(r"PREFIX\s+gl:", re.IGNORECASE)


class MemoryAccess:
    """The tools' view of ``knowledge``; every method raises GlidingError when it fails."""

    def __init__(self, knowledge: KnowledgeMemory, count: Callable[[str], int],
                 budget_tokens: int, *,
                 query_timeout_s: float = KNOWLEDGE_QUERY_TIMEOUT_S) -> None:
        self.knowledge, self.count, self.budget = knowledge, count, budget_tokens
        self.query_timeout_s = query_timeout_s

    def recall(self, query: str) -> str:
        return self.knowledge.recall(query, self.budget, touch=True).text

    def search(self, query: str, k: int | None = None) -> list[Hit]:
        kept: list[Hit] = []
        for hit in self.knowledge.search(query, k=k or KG_SEARCH_K):
            lines = [hit_line(h) for h in kept]

            def fits(text: str, hit: Hit = hit, lines: list[str] = lines) -> bool:
                joined = "\n".join([*lines, hit_line(dataclasses.replace(hit, text=text))])
                return len(joined) <= _HIT_CHARS and self.count(joined) <= self.budget

            text = clip_words(hit.text, fits)
            if text:
                kept.append(dataclasses.replace(hit, text=text))
            if text != hit.text:
                break  # the budget is spent
        return kept

    def query(self, sparql: str) -> list[dict[str, Value]]:
        if "gl:" in sparql and not _GL_PREFIX_RE.search(sparql):
            sparql = f"PREFIX gl: <{NS}>\n{sparql}"
        return self.knowledge.query(sparql, timeout_s=self.query_timeout_s)


def clip_words(text: str, fits: Callable[[str], bool]) -> str:
    """``text`` if it ``fits``, else the most of its first words (and "…") that do, or ""."""
    if fits(text):
        return text
    words = text.split()
    low, high = 0, len(words) - 1
    while low < high:  # the most words whose clipped text fits
        mid = (low + high + 1) // 2
        if fits(" ".join(words[:mid]) + "…"):
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low]) + "…" if low else ""
