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

A tool result that a compaction takes out of the prompt leaves, in the room the budget has left
(the lists together at most half of it), a short list of its identifiers that the prompt does
not show — those the agent used have fact lines, so these are the ones it has not used yet —
under its IRI (``see``): agents come back to a name or a number
of a result read long before (a path, a config key, an order number), and the list is what
lets them type it, or read the result back. These lists leave first when the book is over its
budget, oldest first.

Pure: the caller says what the agent wrote, what the prompt shows, and gives the line index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from gliding.context.prefetch.lines import Line, LineIndex


@dataclass(frozen=True)
class FactLine:
    line: Line
    facts: frozenset[str]
    used: int  # the latest turn the agent used one of its facts
    tokens: int


SEEN_TOKENS = 90  # one result's list of identifiers, at most
SEEN_SHARE = 0.5  # of the budget, what the lists may take: the rest is room for used facts


@dataclass(frozen=True)
class SeenIds:
    """A result's identifiers the prompt lacked when a compaction took the result out."""

    iri: str
    ids: tuple[str, ...]
    tokens: int


@dataclass
class FactBook:
    budget_tokens: int
    count: Callable[[str], int]
    used: dict[str, int] = field(default_factory=dict)  # fact -> latest turn the agent used it
    lines: list[FactLine] = field(default_factory=list)  # in the prompt, oldest first
    seen: list[SeenIds] = field(default_factory=list)  # in the prompt, oldest first

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
        # keyed by the text too: the pieces of one long line share its number
        candidates: dict[tuple[str, int, str], Line] = {}
        for ident in sorted(wanted):
            for line in index.postings.get(ident, ()):
                source = index.sources.get(line.iri)
                if source is not None and source.kind == "result":
                    candidates[(line.iri, line.number, line.text)] = line
        added = []
        while wanted and candidates:
            key, line = max(candidates.items(),
                            key=lambda kv: (len(kv[1].ids & wanted), -len(kv[1].text),
                                            kv[0][0], -kv[0][1], kv[0][2]))
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

    def see(self, iri: str, ids: Sequence[str], hidden: Collection[str],
            label: Callable[[str], str]) -> SeenIds | None:
        """The identifiers of the result ``iri`` that leaves the prompt, in their order, less
        those ``hidden`` (the prompt shows them): as many as the room left under the budget
        holds, at most ``SEEN_TOKENS``, the lists together at most ``SEEN_SHARE`` of the
        budget. None when none fit."""
        listed = sum(x.tokens for x in self.seen)
        room = min(SEEN_TOKENS, self.budget_tokens - self.tokens,
                   int(self.budget_tokens * SEEN_SHARE) - listed)
        used = self.count(f"<{label(iri)}>") + 2
        picked: dict[str, None] = {}
        for ident in ids:
            if ident in hidden or ident in picked:
                continue
            cost = self.count(ident)
            if used + cost > room:
                continue
            picked[ident] = None
            used += cost
        chosen = list(picked)
        tokens = self.count(self._seen_line(iri, chosen, label)) + 1
        while chosen and tokens > room:  # the estimate was short: the last ones go
            chosen.pop()
            tokens = self.count(self._seen_line(iri, chosen, label)) + 1
        if not chosen:
            return None
        entry = SeenIds(iri, tuple(chosen), tokens)
        self.seen.append(entry)
        return entry

    @staticmethod
    def _seen_line(iri: str, ids: Sequence[str], label: Callable[[str], str]) -> str:
        return f"<{label(iri)}> " + " ".join(ids)

    @property
    def tokens(self) -> int:
        return sum(x.tokens for x in self.lines) + sum(x.tokens for x in self.seen)

    def evict(self) -> list[FactLine]:
        """Until the book fits its budget: the lists of unused results out, oldest first, then
        the least recently used fact lines."""
        while self.seen and self.tokens > self.budget_tokens:
            self.seen.pop(0)
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

    def render_seen(self, entries: Iterable[SeenIds], relative: Callable[[str], str]) -> str:
        chosen = list(entries)
        if not chosen:
            return ""
        out = ["[Identifiers in earlier results not used yet (<IRI> ids; read_result(IRI) has "
               "the text):]"]
        out += [self._seen_line(x.iri, x.ids, relative) for x in chosen]
        return "\n".join(out)
