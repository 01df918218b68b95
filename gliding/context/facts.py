"""Kept facts: identifiers the job has used, kept in the prompt with the line that says what
they are and the IRI of their full source, for as long as the job may use them again.

An identifier becomes a fact when the agent writes it (in a thought, a command, a tool call's
arguments) after a tool result showed it: most identifiers an agent uses it has used before
(on the dev trajectories, 70%). When the messages that show a fact leave the prompt at a
compaction, the fact's line comes into the history block instead — the tool result's own line
(``826: old_model_state = self.from_state.models[…]``) under the call that produced it, with
the result's IRI. One line often carries several facts; lines are picked greedily by how many
missing facts they cover. The book has a token budget; when it is over, the facts the agent
used least recently leave first (their lines stay in L0).

Pure: the caller says what the agent wrote, what the prompt shows, and gives the line index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from gliding.context.prefetch.lines import Line, LineIndex


@dataclass(frozen=True)
class FactLine:
    line: Line
    facts: frozenset[str]
    used: int  # the latest turn the agent used one of its facts
    tokens: int


@dataclass
class FactBook:
    budget_tokens: int
    count: Callable[[str], int]
    used: dict[str, int] = field(default_factory=dict)  # fact -> latest turn the agent used it
    lines: list[FactLine] = field(default_factory=list)  # in the prompt, oldest first

    def observe_use(self, ids: Iterable[str], turn: int, given: Collection[str]) -> None:
        """The agent wrote ``ids`` at ``turn``; those the task did not give (``given``) are
        facts once a tool result shows them, before or after."""
        for ident in ids:
            if ident not in given:
                self.used[ident] = turn

    def shown(self) -> set[str]:
        out: set[str] = set()
        for fact_line in self.lines:
            out |= fact_line.line.ids
        return out

    def missing(self, visible: Collection[str], index: LineIndex) -> set[str]:
        """Facts (written by the agent, shown by a tool result) the prompt does not show."""
        shown = self.shown()
        out = set()
        for ident in self.used:
            if ident in visible or ident in shown:
                continue
            if any(x.iri in index.sources and index.sources[x.iri].kind == "result"
                   for x in index.postings.get(ident, ())):
                out.add(ident)
        return out

    def add_lines(self, missing: Collection[str], index: LineIndex,
                  label: Callable[[str], str]) -> list[FactLine]:
        """Lines of tool results that cover ``missing``, most covering first."""
        wanted = set(missing)
        candidates: dict[tuple[str, int], Line] = {}
        for ident in wanted:
            for line in index.postings.get(ident, ()):
                source = index.sources.get(line.iri)
                if source is not None and source.kind == "result":
                    candidates[(line.iri, line.number)] = line
        added = []
        while wanted and candidates:
            key, line = max(candidates.items(),
                            key=lambda kv: (len(kv[1].ids & wanted), -len(kv[1].text),
                                            kv[0][0], -kv[0][1]))
            covered = line.ids & wanted
            if not covered:
                break
            del candidates[key]
            wanted -= covered
            text = f"<{label(line.iri)}> {line.number}: {line.text}"
            fact_line = FactLine(line, frozenset(covered), max(self.used[x] for x in covered),
                                 self.count(text) + 1)
            self.lines.append(fact_line)
            added.append(fact_line)
        return added

    @property
    def tokens(self) -> int:
        return sum(x.tokens for x in self.lines)

    def evict(self) -> list[FactLine]:
        """Least recently used lines out until the book fits its budget."""
        if self.tokens <= self.budget_tokens:
            return []
        order = sorted(range(len(self.lines)),
                       key=lambda i: (max(self.used.get(x, 0) for x in self.lines[i].facts), i))
        total = self.tokens
        gone = set()
        for i in order:
            if total <= self.budget_tokens:
                break
            gone.add(i)
            total -= self.lines[i].tokens
        out = [x for i, x in enumerate(self.lines) if i in gone]
        self.lines = [x for i, x in enumerate(self.lines) if i not in gone]
        for fact_line in out:  # not missing again until the agent uses them again
            for fact in fact_line.facts:
                if self.used.get(fact, 0) <= fact_line.used:
                    self.used.pop(fact, None)
        return out

    def render(self, lines: Iterable[FactLine], relative: Callable[[str], str]) -> str:
        chosen = list(lines)
        if not chosen:
            return ""
        out = ["[Facts this job has used, each with a line of the result it came from "
               "(<IRI> line: text):]"]
        out += [f"<{relative(x.line.iri)}> {x.line.number}: {x.line.text}" for x in chosen]
        return "\n".join(out)
