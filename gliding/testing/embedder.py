"""A fake embedder for tests of recall: deterministic, instant, no model."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from gliding.memory.recall.lexical import tokenize


class HashEmbedder:
    """Bag-of-words vectors by the hashing trick over the lexical index's terms: texts that
    share terms are similar. Stands in for ``memory.vectors.Embedder`` (``dim``, ``encode``)
    and records every batch it is asked to embed (``calls``, ``embedded``)."""

    dim = 64
    precision = "fp32"
    model_path = "hash-embedder"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for term in tokenize(text):
                out[row, int(hashlib.md5(term.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    @property
    def embedded(self) -> list[str]:
        """Every text embedded so far, in order."""
        return [text for call in self.calls for text in call]
