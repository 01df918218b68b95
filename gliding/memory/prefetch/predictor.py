"""The prefetch predictor: before a model call, which earlier lines will the next step need?

Inputs are only what happened before the call: the focus (the assignment or plan step), the
newest action and result, and what the prompt already shows. A line of an earlier source
(archived result or compacted turn) is a candidate when it holds an identifier the prompt does
not show; it scores by the identifiers it shares with the newest messages and the focus, each
weighted by rarity (inverse source frequency), times a prior for its source learned from the
agent's own access sequence: a source whose identifiers the agent used recently, or often, or
that tends to follow the sources it just used, is worth more. The best lines are taken, at most
``lines_per_source`` per source and ``max_sources`` sources, within ``budget_tokens``.

Pure apart from its own state; the caller feeds it sources and actions and renders the result.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from gliding.memory.prefetch.lines import Line, LineIndex

MAX_POSTINGS = 400  # an identifier in more lines than this is too common to point anywhere


@dataclass(frozen=True)
class Warm:
    """Lines of one source the predictor expects the next step to need."""

    iri: str
    score: float
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class PrefetchParams:
    budget_tokens: int = 400
    max_sources: int = 6
    lines_per_source: int = 3
    min_share: float = 0.5  # a source scoring below this share of the best one is not warmed


class Predictor:
    """Ranks earlier lines for the next step; learns the agent's access sequence."""

    def __init__(self, index: LineIndex, params: PrefetchParams) -> None:
        self.index = index
        self.params = params
        self.access: Counter[str] = Counter()  # uses of each source's identifiers
        self.last_access: dict[str, int] = {}
        self.follows: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._previous: list[str] = []
        self._step = 0

    def observe_action(self, ids: Collection[str]) -> list[str]:
        """Learn from one action: the sources whose rare identifiers it used were accessed."""
        self._step += 1
        hit: dict[str, float] = {}
        n = max(1, len(self.index))
        for ident in ids:
            lines = self.index.postings.get(ident)
            if not lines or len(lines) > MAX_POSTINGS:
                continue
            weight = math.log(1 + n / max(1, self.index.df[ident]))
            for iri in {x.iri for x in lines}:
                hit[iri] = hit.get(iri, 0.0) + weight
        used = sorted(hit, key=lambda iri: (-hit[iri], iri))[:3]
        for iri in used:
            self.access[iri] += 1
            self.last_access[iri] = self._step
            for before in self._previous:
                if before != iri:
                    self.follows[before][iri] += 1
        if used:
            self._previous = used
        return used

    def _prior(self, iri: str) -> float:
        prior = 1.0 + 0.3 * math.log1p(self.access[iri])
        last = self.last_access.get(iri)
        if last is not None:
            prior += 0.5 / (1 + self._step - last)
        followed = sum(self.follows[b][iri] for b in self._previous)
        if followed:
            prior += 0.3 * math.log1p(followed)
        return prior

    def predict(self, query: Mapping[str, float], *, visible: Collection[str],
                exclude: Collection[str], count: Callable[[str], int]) -> list[Warm]:
        """The sources and lines to warm. ``query`` weighs identifiers of the newest messages
        and the focus; ``visible`` are identifiers the prompt shows; ``exclude`` are sources
        the prompt holds in full.

        Sources rank by the rarity-weighted identifiers they share with ``query`` times their
        learned prior; at most ``max_sources`` are taken, and only those within half of the
        best score. From each, the lines that show what the prompt lacks, best first."""
        n = max(1, len(self.index))
        source_score: dict[str, float] = {}
        for ident, weight in query.items():
            postings = self.index.postings.get(ident)
            if not postings or len(postings) > MAX_POSTINGS:
                continue
            idf = math.log(1 + n / max(1, self.index.df[ident]))
            for iri in {x.iri for x in postings}:
                if iri not in exclude:
                    source_score[iri] = source_score.get(iri, 0.0) + weight * idf
        if not source_score:
            return []
        ranked = sorted(((score * self._prior(iri), iri) for iri, score in source_score.items()),
                        key=lambda x: (-x[0], x[1]))
        best = ranked[0][0]
        p = self.params
        chosen = [(score, iri) for score, iri in ranked[: p.max_sources]
                  if score >= p.min_share * best]
        out = []
        used = 0
        for score, iri in chosen:
            source = self.index.sources[iri]
            lines = []
            options = sorted(
                (x for x in source.lines if any(i not in visible for i in x.ids)),
                key=lambda x: (-sum(query.get(i, 0.0) for i in x.ids), x.number))
            for line in options[: p.lines_per_source]:
                cost = count(line.text) + 4
                if used + cost > p.budget_tokens:
                    break
                lines.append(line)
                used += cost
            out.append(Warm(iri, score, tuple(sorted(lines, key=lambda x: x.number))))
        return out
