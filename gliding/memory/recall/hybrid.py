"""Hybrid recall over long-term memory items, packed into a token budget.

A ``MemoryItem`` is one remembered utterance or record: id, text, session index, session date,
speaker, position in its session. ``HybridRecall`` indexes items twice — BM25
(``lexical.py``) and, when an embedder is available, exact cosine vectors (``vectors.py``) —
and answers ``recall(query, budget)`` with the best items rendered as compact lines
``[D3:7] Melanie (8 May 2023): text`` whose joined text never exceeds ``budget`` tokens.

How an item is scored for a query (every step is a pure function below, so it can be tested
and measured on its own):

1. **Fusion** of the lexical and vector score vectors: each is normalised to [0, 1] (BM25 by
   its maximum; cosine from the query's median similarity to its maximum) and the two are
   added with weights (``fuse_scores``). Reciprocal rank fusion (``rrf``) is kept for
   comparison; normalised scores measured better on LoCoMo (see ``gliding/bench/memory.py``).
2. **Entities / graph**: with a ``related`` hook (``KnowledgeMemory.related``: one SPARQL
   query over the blackboard's ``gl:mentions`` edges) the items that share a rare entity or
   person (mentioned by at most ``rare_df`` items) with the best few hits rise — expansion —
   and an item both matched by words or meaning and related in the graph rises most —
   confirmation. Without the hook, the rare terms of the best hits' capitalised names are
   searched again with BM25 (the same idea without a graph).
3. **Time**: a question about time ("when", "how long", a year, a month) favours items that
   carry time expressions or whose session date matches a month/year named in the question.
4. **Speaker**: a question naming a speaker favours that speaker's items a little.
5. **Importance and access** (``adjust_for_use``): ``score × (1 + w_i·(importance − ½)) +
   w_a·log(1 + accesses)·½^(age / half_life)``. Importance defaults to a text estimate (share
   of rare, content-bearing terms; greetings and thanks score low); accesses are recorded only
   by an explicit ``touch(ids, now)``, and their boost halves every ``access_half_life_s``.
6. **Structure** (``spread_to_neighbours``): each item passes a share of its score to the
   turns right before and after it in the same session (a question and its answer, a statement
   and its follow-up), so the context carries whole exchanges.

Measured on LoCoMo dev (3 conversations, 494 questions, evidence recall at 2,048 tokens, with
neighbour span 1): all steps 0.907; reciprocal rank fusion instead of scores 0.873 (k=60) /
0.900 (k=10); no neighbours 0.854; no time step 0.903; no speaker step 0.904; no entity step
0.909 (it helps at 1,024: 0.848 vs 0.842); no vectors 0.860. Span 2 (the default) gave 0.920.

Packing (``pack``) is greedy: best score first, skipping an item that no longer fits and trying
the next, checking the joined text with the real counter so the budget is a hard bound. The
packed lines are then put back in conversation order. ``grouped`` (``pack_grouped``, what
``KnowledgeMemory`` uses) writes each session's date once as a header over its lines instead of
on every line: more lines fit a budget (LoCoMo dev at 1,024 / 2,048 tokens: 0.872 / 0.924
instead of 0.862 / 0.918, all methods packed the same way).

Tried and dropped (LoCoMo dev, 2,048 tokens): embedding each turn with its neighbour turns
(0.905–0.917), pseudo-relevance feedback on the query vector or terms (±0.003), a boost for
the sessions the best hits are in (−0.001 to −0.011), other weights
for vectors, speakers, importance, time (within ±0.005). Later, against 0.924: a bonus for each
signal's own top 5/10/20 items (0.927/0.922/0.925), max-fusion plus a share of the weaker signal
(0.918–0.924), each sentence of a longer turn embedded and scored by its best sentence
(0.921–0.927, ~2.7× the embeddings), labels written relative to their session header (0.926,
two or three more lines in the budget), lighter neighbours (span 1: 0.914; weight 0.25: 0.921).
The turns missed in categories 1 (multi-hop) and 3 (inference) rank past 100 by words and by
meaning alike: questions like "What activities has Melanie done with her family?" share no word
and little meaning with "I'm off to go swimming with the kids".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gliding.memory.recall.lexical import BM25Index
from gliding.memory.recall.packing import (
    Count,
    MemoryItem,
    Packed,
    format_line,
    group_header,
    pack,
    pack_grouped,
)
from gliding.memory.recall.vectors import Embedder, ExactVectorIndex, VectorIndex

Related = Callable[[Sequence[str], str], Mapping[str, float]]
"""(best hit ids, query) -> {related item id: weight}: graph expansion, e.g. shared entities."""
VECTOR_CANDIDATES = 256  # hits asked of a vector backend that cannot score every item

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
TIME_QUESTION = re.compile(
    r"\b(when|how long|what (?:year|month|day|date|time)|which (?:year|month|day)|since|"
    r"before|after|ago|during)\b", re.IGNORECASE)
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last|next|ago|recently|week(?:end)?s?|months?|years?|"
    r"days?|monday|tuesday|wednesday|thursday|friday|saturday|sunday|" + "|".join(MONTHS) +
    r"|(?:19|20)\d\d|since|earlier|later|soon)\b", re.IGNORECASE)
YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b", re.IGNORECASE)
ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-zA-Z]+(?:\s[A-Z][a-zA-Z]+)*)")
SMALL_TALK = re.compile(
    r"^\W*(thanks?|thank you|bye|see you|take care|hey|hi|hello|wow|cool|great|awesome|"
    r"nice|sounds|glad|same|you too|no problem|sure)\b", re.IGNORECASE)


@dataclass(frozen=True)
class RecallSettings:
    """Weights of the scoring steps in the module docstring (all ≥ 0; 0 turns a step off)."""

    fusion: str = "scores"  # "scores" (normalised, weighted sum) or "rrf"
    lexical_weight: float = 1.0
    vector_weight: float = 1.0
    rrf_k: int = 60
    entity_weight: float = 0.3
    entity_hits: int = 5
    rare_df: int = 3
    time_weight: float = 0.25
    speaker_weight: float = 0.1
    importance_weight: float = 0.3
    access_weight: float = 0.05
    access_half_life_s: float = 7 * 24 * 3600.0
    neighbour_weight: float = 0.5
    neighbour_span: int = 2


@dataclass
class _Access:
    count: int = 0
    last: float = 0.0


# --- pure parts -------------------------------------------------------------------------------


def normalise_lexical(scores: np.ndarray) -> np.ndarray:
    """BM25 scores scaled by their maximum into [0, 1] (all zero stays zero)."""
    top = float(scores.max()) if len(scores) else 0.0
    return scores / top if top > 0 else np.zeros_like(scores)


def normalise_cosine(scores: np.ndarray) -> np.ndarray:
    """Cosines mapped so the median item is 0 and the best is 1, clipped to [0, 1]."""
    if len(scores) == 0:
        return scores
    low, high = float(np.median(scores)), float(scores.max())
    if high <= low:
        return np.zeros_like(scores)
    wide = scores.astype(np.float64)  # a denormal float32 spread would overflow the division
    return np.clip((wide - low) / (high - low), 0.0, 1.0).astype(scores.dtype)


def fuse_scores(lexical: np.ndarray | None, vector: np.ndarray | None,
                lexical_weight: float = 1.0, vector_weight: float = 1.0) -> np.ndarray:
    """Weighted sum of the normalised lexical and vector scores (either may be missing)."""
    parts = []
    if lexical is not None:
        parts.append(lexical_weight * normalise_lexical(lexical))
    if vector is not None:
        parts.append(vector_weight * normalise_cosine(vector))
    if not parts:
        raise ValueError("nothing to fuse")
    return np.sum(parts, axis=0).astype(np.float32)


def rrf(rankings: Sequence[Sequence[str]], k: int = 60,
        weights: Sequence[float] | None = None) -> dict[str, float]:
    """Reciprocal rank fusion: Σ weight / (k + rank), rank counted from 1 in each ranking."""
    fused: dict[str, float] = {}
    for n, ranking in enumerate(rankings):
        weight = weights[n] if weights is not None else 1.0
        for rank, item_id in enumerate(ranking, 1):
            fused[item_id] = fused.get(item_id, 0.0) + weight / (k + rank)
    return fused


def spread_to_neighbours(scores: np.ndarray, sessions: np.ndarray, weight: float,
                         span: int = 1) -> np.ndarray:
    """Each item also gets ``weight / distance`` of its neighbours' scores (same session only,
    items in conversation order), so hits pull in the turns around them."""
    out = scores.astype(np.float32).copy()
    for distance in range(1, span + 1):
        share = weight / distance
        before = np.zeros_like(out)
        after = np.zeros_like(out)
        before[distance:] = scores[:-distance]
        after[:-distance] = scores[distance:]
        same_before = np.zeros(len(out), dtype=bool)
        same_after = np.zeros(len(out), dtype=bool)
        same_before[distance:] = sessions[distance:] == sessions[:-distance]
        same_after[:-distance] = sessions[:-distance] == sessions[distance:]
        out += share * np.where(same_before, before, 0.0) + share * np.where(same_after, after,
                                                                               0.0)
    return out


def adjust_for_use(score: float, importance: float, accesses: int, age_s: float,
                   settings: RecallSettings) -> float:
    """Importance scales the score around ½; accesses add a log boost that halves per half-life."""
    scaled = score * (1.0 + settings.importance_weight * (importance - 0.5))
    if accesses <= 0:
        return scaled
    decay = 0.5 ** (max(age_s, 0.0) / settings.access_half_life_s)
    return scaled + settings.access_weight * math.log1p(accesses) * decay


def is_time_question(query: str) -> bool:
    return bool(TIME_QUESTION.search(query))


def carries_time(text: str) -> bool:
    return bool(TIME_WORDS.search(text))


def estimate_importance(text: str, terms: Sequence[str], idf: Callable[[str], float],
                        max_idf: float) -> float:
    """0..1: mean rarity of the content terms, damped for short small talk."""
    if not terms:
        return 0.0
    rarity = sum(min(idf(t) / max_idf, 1.0) for t in set(terms)) / max(len(set(terms)), 1)
    size = min(len(set(terms)) / 8.0, 1.0)
    value = 0.5 * rarity + 0.5 * size
    return value * (0.5 if SMALL_TALK.match(text) else 1.0)


# --- the index --------------------------------------------------------------------------------


@dataclass
class HybridRecall:
    """Items indexed for lexical and vector recall; see the module docstring for the scoring.

    ``embedder`` None means lexical recall only (the vector method is then unavailable).
    ``count`` is the token counter for budgets (use ``TokenCounter().count``).
    """

    count: Count
    embedder: Embedder | None = None
    settings: RecallSettings = field(default_factory=RecallSettings)
    items: list[MemoryItem] = field(default_factory=list)
    vector_index: VectorIndex | None = None
    related: Related | None = None
    grouped: bool = False  # pack_rows writes a session's date once (pack_grouped); set it
    # when the index is made: lines are formatted for it as items are added

    def __post_init__(self) -> None:
        self.lexical = BM25Index()
        self.vectors: VectorIndex = (self.vector_index if self.vector_index is not None else
                                     ExactVectorIndex(self.embedder.dim if self.embedder
                                                      else None))
        self._row: dict[str, int] = {}
        self._lines: list[str] = []  # dated, or with the date left to a group header
        self._sessions = np.zeros(0, dtype=np.int64)
        self._timed = np.zeros(0, dtype=bool)
        self._importance: np.ndarray | None = None
        self._access: dict[str, _Access] = {}
        self._speakers: dict[str, np.ndarray] = {}
        self._entity_cache: dict[int, set[str]] = {}
        pending, self.items = self.items, []
        if pending:
            self.add(pending)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def has_vectors(self) -> bool:
        return self.embedder is not None

    # ingest

    def add(self, items: Sequence[MemoryItem], vectors: np.ndarray | None = None) -> None:
        """Index ``items``: one batch of embeddings, or ``vectors`` computed beforehand (one
        row per item, from ``embedder.encode([index_text(item), ...])``).

        Raises ValueError for a known or repeated id or a wrong number of vectors; the index is
        then unchanged. A vector backend's VectorStoreError also leaves it unchanged.
        """
        ids = [item.id for item in items]
        if len(set(ids)) != len(ids) or any(i in self._row for i in ids):
            known = next(i for n, i in enumerate(ids) if i in self._row or i in ids[:n])
            raise ValueError(f"memory item {known!r} is already indexed")
        texts = [self.index_text(item) for item in items]
        if self.embedder is not None:
            self._add_vectors(ids, texts, vectors)
        self.lexical.add(ids, texts)
        for item in items:
            self._row[item.id] = len(self.items)
            self.items.append(item)
            self._lines.append(format_line(item, dated=not self.grouped))
        self._sessions = np.concatenate(
            [self._sessions, np.asarray([item.session for item in items], dtype=np.int64)])
        self._timed = np.concatenate(
            [self._timed, np.asarray([carries_time(item.text) for item in items], dtype=bool)])
        self._importance = None
        self._speakers = {}

    def _add_vectors(self, ids: list[str], texts: list[str], vectors: np.ndarray | None, *,
                     embedder: Embedder | None = None, index: VectorIndex | None = None) -> None:
        """Embed and store what the vector index lacks (a shared server may hold some)."""
        embedder = embedder if embedder is not None else self.embedder
        index = index if index is not None else self.vectors  # (an empty index is falsy)
        assert embedder is not None
        if vectors is not None and len(vectors) != len(ids):
            raise ValueError(f"{len(vectors)} vectors for {len(ids)} items")
        shared = not isinstance(index, ExactVectorIndex)
        wanted = set(index.missing(ids)) if shared else None
        keep = [n for n, i in enumerate(ids) if wanted is None or i in wanted]
        if not keep:
            return
        if vectors is None:
            vectors = embedder.encode([texts[n] for n in keep])
        else:
            vectors = vectors[keep]
        index.add([ids[n] for n in keep], vectors)

    def attach_embedder(self, embedder: Embedder,
                        vector_index: VectorIndex | None = None) -> None:
        """Start recalling by meaning: embed every item indexed so far (one batch), into
        ``vector_index`` if given (e.g. a Qdrant server's), else the exact index. All or
        nothing: if embedding or storing raises, the index stays lexical and unchanged."""
        if self.embedder is not None:
            return
        shared = vector_index if vector_index is not None else self.vector_index
        target = shared if shared is not None else ExactVectorIndex(embedder.dim)
        if self.items:
            self._add_vectors([i.id for i in self.items],
                              [self.index_text(i) for i in self.items], None,
                              embedder=embedder, index=target)
        self.embedder, self.vector_index, self.vectors = embedder, shared, target

    @staticmethod
    def index_text(item: MemoryItem) -> str:
        head = item.speaker or item.source
        return f"{head}: {item.text}" if head else item.text

    def restore_access(self, stats: Mapping[str, tuple[int, float]]) -> int:
        """Take up recorded ``(count, last)`` of items (``access_log``); unknown ids are left
        out. Returns how many were taken up."""
        taken = 0
        for item_id, (count, last) in stats.items():
            if item_id in self._row and count > 0:
                self._access[item_id] = _Access(count, last)
                taken += 1
        return taken

    def touch(self, ids: Iterable[str], now: float) -> None:
        """Record that ``ids`` were used at ``now`` (seconds); unknown ids are ignored."""
        for item_id in ids:
            if item_id in self._row:
                access = self._access.setdefault(item_id, _Access())
                access.count += 1
                access.last = now

    # single signals, for callers and the benchmark's baselines

    def lexical_scores(self, query: str) -> np.ndarray:
        return self.lexical.scores(query)

    def vector_scores(self, query: str) -> np.ndarray | None:
        if self.embedder is None or not self.items:
            return None
        encode_query = getattr(self.embedder, "encode_query", self.embedder.encode)
        query_vector = encode_query([query])[0]  # a cache of item vectors is not for queries
        if isinstance(self.vectors, ExactVectorIndex):
            return self.vectors.scores(query_vector)
        # another backend (a Qdrant server): its best hits among this index's items, the rest
        # at the lowest of those. The collection should hold this blackboard's items only (one
        # collection per blackboard): items of others crowd the hits out.
        hits = self.vectors.search(query_vector, len(self.items) + VECTOR_CANDIDATES)
        own = [(self._row[item_id], score) for item_id, score in hits if item_id in self._row]
        out = np.full(len(self.items), min((s for _, s in own), default=0.0), dtype=np.float32)
        for row, score in own:
            out[row] = score
        return out

    def importance(self) -> np.ndarray:
        if self._importance is None:
            max_idf = self.lexical.idf("\x00never-a-term")
            values = []
            for item in self.items:
                if item.importance is not None:
                    values.append(item.importance)
                else:
                    terms = self.lexical.terms(item.text)
                    values.append(estimate_importance(item.text, terms, self.lexical.idf,
                                                      max_idf))
            self._importance = np.asarray(values, dtype=np.float32)
        return self._importance

    # hybrid scoring

    def scores(self, query: str, *, now: float | None = None) -> np.ndarray:
        """The hybrid score of every item (conversation order) for ``query``."""
        s = self.settings
        n = len(self.items)
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        lexical = self.lexical_scores(query)
        vector = self.vector_scores(query)
        if s.fusion == "rrf":
            rankings = [[self.items[i].id for i in np.argsort(-lexical, kind="stable")
                         if lexical[i] > 0]]
            weights = [s.lexical_weight]
            if vector is not None:
                rankings.append([self.items[i].id for i in np.argsort(-vector, kind="stable")])
                weights.append(s.vector_weight)
            fused_map = rrf(rankings, s.rrf_k, weights)
            fused = np.asarray([fused_map.get(item.id, 0.0) for item in self.items], np.float32)
            fused = fused / max(float(fused.max()), 1e-9)
        else:
            fused = fuse_scores(lexical, vector, s.lexical_weight, s.vector_weight)
        fused = fused / max(float(fused.max()), 1e-9)
        total = fused.copy()
        if s.entity_weight > 0:
            entities = (self._graph_scores(fused, query) if self.related is not None
                        else self._entity_scores(fused, query))
            total += s.entity_weight * entities
        if s.time_weight > 0 and is_time_question(query):
            total += s.time_weight * self._time_scores(query) * (fused > 0)
        if s.speaker_weight > 0:
            total += s.speaker_weight * self._speaker_scores(query) * (fused > 0)
        total = self._use_adjusted(total, now)
        if s.neighbour_weight > 0:
            total = spread_to_neighbours(total, self._sessions, s.neighbour_weight,
                                         s.neighbour_span)
        return total

    def _entity_scores(self, fused: np.ndarray, query: str) -> np.ndarray:
        """BM25 over the rare names (capitalised, not sentence-initial, document frequency
        ≤ ``rare_df``) that the best hits mention and the query does not."""
        s = self.settings
        hits = np.argsort(-fused, kind="stable")[: s.entity_hits]
        query_terms = set(self.lexical.terms(query))
        rare: list[str] = []
        for i in hits:
            if fused[i] <= 0:
                continue
            for term in self._entities(i):
                if term not in query_terms and 1 < self.lexical.doc_freq(term) <= s.rare_df:
                    rare.append(term)
        if not rare:
            return np.zeros(len(self.items), dtype=np.float32)
        return normalise_lexical(self.lexical.scores(rare))

    def _graph_scores(self, fused: np.ndarray, query: str) -> np.ndarray:
        """The items the graph relates to the best hits (``related``), scaled into [0, 1]."""
        assert self.related is not None
        hits = [self.items[i].id for i in np.argsort(-fused, kind="stable")[
            : self.settings.entity_hits] if fused[i] > 0]
        out = np.zeros(len(self.items), dtype=np.float32)
        if not hits:
            return out
        for item_id, weight in self.related(hits, query).items():
            row = self._row.get(item_id)
            if row is not None:
                out[row] = weight
        return normalise_lexical(out)

    def _entities(self, row: int) -> set[str]:
        found = self._entity_cache.get(row)
        if found is None:
            found = set()
            for match in ENTITY.finditer(self.items[row].text):
                found.update(self.lexical.terms(match.group(1)))
            self._entity_cache[row] = found
        return found

    def _time_scores(self, query: str) -> np.ndarray:
        out = self._timed.astype(np.float32)
        years = {int(y) for y in YEAR.findall(query)}
        months = {MONTHS.index(m.lower()) + 1 for m in MONTH.findall(query)}
        if years or months:
            for i, item in enumerate(self.items):
                if item.date is None:
                    continue
                if (not years or item.date.year in years) and (
                        not months or item.date.month in months):
                    out[i] += 1.0
        return out

    def _speaker_scores(self, query: str) -> np.ndarray:
        lowered = query.lower()
        out = np.zeros(len(self.items), dtype=np.float32)
        for name in {item.speaker for item in self.items if item.speaker}:
            if re.search(rf"\b{re.escape(name.lower())}\b", lowered):
                mask = self._speakers.get(name)
                if mask is None:
                    mask = np.asarray([item.speaker == name for item in self.items], bool)
                    self._speakers[name] = mask
                out += mask
        return out

    def _use_adjusted(self, total: np.ndarray, now: float | None) -> np.ndarray:
        s = self.settings
        out = total * (1.0 + s.importance_weight * (self.importance() - 0.5))
        if self._access and s.access_weight > 0:
            for item_id, access in self._access.items():
                i = self._row[item_id]
                age = (now - access.last) if now is not None else 0.0
                out[i] = adjust_for_use(float(total[i]), float(self.importance()[i]),
                                        access.count, age, s)
        return out.astype(np.float32)

    # ranking and packing

    def rank(self, scores: np.ndarray) -> list[int]:
        """Item rows by descending score (ties: newer first), positive scores only."""
        order = np.lexsort((-np.arange(len(scores)), -scores))
        return [int(i) for i in order if scores[i] > 0]

    def recency(self) -> list[int]:
        """Item rows newest first (session, then position)."""
        return sorted(range(len(self.items)),
                      key=lambda i: (self.items[i].session, self.items[i].position), reverse=True)

    def candidate(self, row: int) -> tuple[str, str, tuple[int, int], str]:
        """Item ``row`` as ``pack_grouped`` takes it: (id, line, (session, position),
        header)."""
        item = self.items[row]
        return item.id, self._lines[row], (item.session, item.position), group_header(item)

    def pack_rows(self, rows: Sequence[int], budget: int) -> Packed:
        """Pack item rows (best first) into ``budget`` tokens, emitted in conversation order."""
        if self.grouped:
            return pack_grouped(((self.items[i].id, self._lines[i],
                                  (self.items[i].session, self.items[i].position),
                                  group_header(self.items[i])) for i in rows), budget,
                                self.count)
        order = {self.items[i].id: (self.items[i].session, self.items[i].position)
                 for i in rows}
        ranks = {item_id: n for n, (item_id, _) in
                 enumerate(sorted(order.items(), key=lambda pair: pair[1]))}
        return pack(((self.items[i].id, self._lines[i]) for i in rows), budget, self.count,
                    order=ranks)

    def recall(self, query: str, budget: int, *, now: float | None = None) -> Packed:
        """The hybrid context for ``query`` within ``budget`` tokens."""
        return self.pack_rows(self.rank(self.scores(query, now=now)), budget)
