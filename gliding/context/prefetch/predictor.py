"""The prefetch predictor: before a model call, which earlier sources will the next step need?

Inputs are only what happened before the call: the agent's earlier actions, the focus (the
assignment or plan step), the newest action and result, and what the prompt already shows. Two
kinds of evidence rank an earlier source (an archived result or a compacted turn):

- its *access history*: after each action, the sources that hold an identifier the action used
  (one a tool result showed, not one the task gave) were accessed. Each access adds 1 to the
  source's score and every score decays by ``decay`` per action, so a source the agent keeps
  coming back to, recently and often, ranks high (the LRFU policy of page caches). Agents work
  in runs of steps on the same files and names, so what the last steps used is the best guide
  to what the next one will use;
- its *content*: the identifiers it shares with the newest messages and the focus, each
  weighted by rarity (inverse source frequency), as a share of the best such source times
  ``content_weight``. It lets a source no action has used yet come in.

Only a source holding an identifier the prompt does not show can give the next step something
it lacks, so the ranking (``rank``) holds those alone: results first (an identifier an action
needs and the prompt lacks was shown first by a tool result, so a result holds it), then
turns; within each by score, then newest first (recency decides between sources no evidence
points at). Sources of the ranking scoring at least ``min_score`` are warmed, best first, at
most ``max_sources``: the caller loads them into the agent's cache. From each, the lines that
show what the prompt lacks, at most ``lines_per_source``, within ``budget_tokens``, make the
working-set block.

Pure apart from its own state; the caller feeds it sources and actions and renders the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from gliding.context.prefetch.lines import Line, LineIndex

MAX_POSTINGS = 400  # an identifier in more lines than this is too common to point anywhere
FORGET = 0.01  # an access score below this is dropped


@dataclass(frozen=True)
class Warm:
    """One source the predictor expects the next step to need, and the lines it quotes."""

    iri: str
    score: float
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class PrefetchParams:
    budget_tokens: int = 400
    max_sources: int = 6
    lines_per_source: int = 3
    decay: float = 0.6  # what an access is worth one action later
    min_score: float = 0.5  # a source scoring below this is not warmed
    content_weight: float = 0.5  # what the best content match is worth next to one access


class Predictor:
    """Ranks earlier sources for the next step; learns from the agent's access sequence."""

    def __init__(self, index: LineIndex, params: PrefetchParams) -> None:
        self.index = index
        self.params = params
        self.access: dict[str, float] = {}  # decayed access count of each source
        # the last ``predict``'s ``rank``, before ``min_score`` and ``max_sources`` cut it to
        # what is warmed (``gliding bench prefetch`` measures it)
        self.ranking: list[tuple[str, float]] = []

    def observe_action(self, ids: Collection[str]) -> list[str]:
        """Learn from one action: every source holding an identifier the action used, that a
        tool result showed, was accessed. Returns the accessed sources, oldest first."""
        decay = self.params.decay
        self.access = {iri: v * decay for iri, v in self.access.items() if v * decay >= FORGET}
        used: set[str] = set()
        for ident in set(ids):
            lines = self.index.postings.get(ident)
            if not lines:
                continue
            holders = {x.iri for x in lines}
            if any(self.index.sources[iri].kind == "result" for iri in holders):
                used |= holders
        for iri in used:
            self.access[iri] = self.access.get(iri, 0.0) + 1.0
        return [iri for iri in self.index.sources if iri in used]

    def _content(self, query: Mapping[str, float], exclude: Collection[str]) -> dict[str, float]:
        """Each source's share of the best rarity-weighted match with ``query``, in [0, 1]."""
        n = max(1, len(self.index))
        score: dict[str, float] = {}
        for ident, weight in query.items():
            postings = self.index.postings.get(ident)
            if not postings or len(postings) > MAX_POSTINGS:
                continue
            idf = math.log(1 + n / max(1, self.index.df[ident]))
            for iri in {x.iri for x in postings}:
                if iri not in exclude:
                    score[iri] = score.get(iri, 0.0) + weight * idf
        best = max(score.values(), default=0.0)
        return {iri: v / best for iri, v in score.items()} if best > 0 else {}

    def rank(self, query: Mapping[str, float], *, visible: Collection[str],
             exclude: Collection[str]) -> list[tuple[str, float]]:
        """Every source that holds an identifier not in ``visible`` and is not in ``exclude``,
        with its score, best first: results, then turns; by score, then newest first."""
        content = self._content(query, exclude)
        weight = self.params.content_weight
        scored = []
        for iri, source in self.index.sources.items():
            if iri in exclude or source.ids.issubset(visible):
                continue
            score = self.access.get(iri, 0.0) + weight * content.get(iri, 0.0)
            scored.append((source.kind != "result", -score, -source.turn, iri))
        scored.sort()
        return [(iri, -negative) for _kind, negative, _turn, iri in scored]

    def predict(self, query: Mapping[str, float], *, visible: Collection[str],
                exclude: Collection[str], count: Callable[[str], int]) -> list[Warm]:
        """The sources to warm and the lines to quote from them. ``query`` weighs identifiers
        of the newest messages and the focus; ``visible`` are identifiers the prompt shows;
        ``exclude`` are sources the prompt holds in full."""
        p = self.params
        self.ranking = self.rank(query, visible=visible, exclude=exclude)
        score = dict(self.ranking)
        ranked = [iri for iri, v in self.ranking if v > 0 and v >= p.min_score][: p.max_sources]
        out = []
        used = 0
        for iri in ranked:
            lines: list[Line] = []
            if used >= p.budget_tokens:  # the block is full (or there is none): warm only
                out.append(Warm(iri, round(score[iri], 4), ()))
                continue
            options = sorted(
                (x for x in self.index.sources[iri].lines if any(i not in visible for i in x.ids)),
                key=lambda x: (-sum(query.get(i, 0.0) for i in x.ids), x.number))
            for line in options[: p.lines_per_source]:
                cost = count(line.text) + 4
                if used + cost > p.budget_tokens:
                    break
                lines.append(line)
                used += cost
            out.append(Warm(iri, round(score[iri], 4),
                            tuple(sorted(lines, key=lambda x: x.number))))
        return out
