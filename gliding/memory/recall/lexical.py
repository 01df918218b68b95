"""The lexical index: Okapi BM25 over short texts, in pure Python and numpy, no third party.

Tokenisation lower-cases, splits on anything that is not a letter or a digit (an apostrophe
inside a word is kept, then a possessive ``'s`` dropped), removes English stop words, and folds
the commonest suffixes (plural ``-s``/``-es``/``-ies``, ``-ing``, ``-ed``, a final ``-e``) with a
deliberately small stemmer: "paintings", "painting" and "painted" all become ``paint``. Queries and
documents go through the same function, so any fold is consistent on both sides.

Ingest appends postings to Python lists (thousands of documents a second); the first search
after an ingest freezes them into numpy arrays. A search scores every posting of the query's
terms with one vectorised BM25 formula and returns the top ``k`` by ``argpartition``.
``scores(query)`` returns the dense score vector (one float per document, in insertion order)
for callers that fuse it with other signals.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
don't down during each few for from further had hadn't has hasn't have haven't having he he'd
he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
or other ought our ours ourselves out over own same shan't she she'd she'll she's should
shouldn't so some such than that that's the their theirs them themselves then there there's
these they they'd they'll they're they've this those through to too under until up very was
wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your yours
yourself yourselves just also really yeah oh hey hi okay ok got get gets s t ll re ve d m
""".split())  # noqa: SIM905 -- a word list reads better as prose than as 190 quoted strings


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A small suffix folder: enough to match plurals and verb forms, never a full Porter."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith(("ies", "ied")) and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running -> run, stopped -> stop
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]  # hike, hiked, hiking -> hik
    return word


def tokenize(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """Lower-cased, stop-word-free, lightly stemmed terms of ``text``, in order."""
    terms = []
    for word in WORD.findall(text.lower().replace("\u2019", "'")):
        if word.endswith("'s"):
            word = word[:-2]
        if word in stop_words or not word:
            continue
        terms.append(stem(word))
    return terms


class BM25Index:
    """Okapi BM25 (``k1``, ``b``) over documents added with string ids; ids must be unique."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75,
                 stop_words: frozenset[str] = STOP_WORDS) -> None:
        self.k1 = k1
        self.b = b
        self.stop_words = stop_words
        self.ids: list[str] = []
        self._position: dict[str, int] = {}
        self._lengths: list[int] = []
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._frozen: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        self._norm: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index ``texts`` under ``ids``. Raises ValueError for a length mismatch or a known id."""
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        for doc_id, text in zip(ids, texts, strict=True):
            if doc_id in self._position:
                raise ValueError(f"document {doc_id!r} is already indexed")
            index = len(self.ids)
            self._position[doc_id] = index
            self.ids.append(doc_id)
            terms = Counter(tokenize(text, self.stop_words))
            self._lengths.append(sum(terms.values()))
            for term, tf in terms.items():
                docs, tfs = self._postings.setdefault(term, ([], []))
                docs.append(index)
                tfs.append(tf)
        self._frozen = None

    def terms(self, text: str) -> list[str]:
        return tokenize(text, self.stop_words)

    def doc_freq(self, term: str) -> int:
        """How many documents hold the (already tokenised) ``term``."""
        posting = self._postings.get(term)
        return len(posting[0]) if posting else 0

    def idf(self, term: str) -> float:
        n, df = len(self.ids), self.doc_freq(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _freeze(self) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray]:
        if self._frozen is None or self._norm is None:
            self._frozen = {
                term: (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
                for term, (docs, tfs) in self._postings.items()
            }
            lengths = np.asarray(self._lengths, dtype=np.float32)
            average = float(lengths.mean()) if len(lengths) else 1.0
            self._norm = self.k1 * (1.0 - self.b + self.b * lengths / max(average, 1e-9))
        return self._frozen, self._norm

    def scores(self, query: str | Iterable[str]) -> np.ndarray:
        """BM25 score of every document (insertion order) for a query text or a list of terms."""
        frozen, norm = self._freeze()
        out = np.zeros(len(self.ids), dtype=np.float32)
        terms = self.terms(query) if isinstance(query, str) else list(query)
        for term, weight in Counter(terms).items():
            posting = frozen.get(term)
            if posting is None:
                continue
            docs, tfs = posting
            out[docs] += weight * self.idf(term) * tfs * (self.k1 + 1.0) / (tfs + norm[docs])
        return out

    def search(self, query: str | Iterable[str], k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` best (id, score) pairs, best first; documents scoring 0 are left out."""
        scores = self.scores(query)
        return top_k(self.ids, scores, k)


def top_k(ids: Sequence[str], scores: np.ndarray, k: int, *,
          positive: bool = True) -> list[tuple[str, float]]:
    """The ``k`` highest scores as (id, score), best first, ties by insertion order; with
    ``positive`` (the default) scores of 0 or less are left out."""
    if k <= 0 or len(scores) == 0:
        return []
    k = min(k, len(scores))
    if k < len(scores):
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= threshold)  # every tie at the boundary
    else:
        candidates = np.arange(len(scores))
    order = sorted(candidates.tolist(), key=lambda i: (-float(scores[i]), i))[:k]
    return [(ids[i], float(scores[i])) for i in order if not positive or scores[i] > 0]
