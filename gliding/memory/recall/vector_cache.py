"""A persistent cache of embeddings, so a new process does not embed again what an earlier one
did: ``<data_dir>/vectors.sqlite3``, one row per (model, text hash).

``CachedEmbedder`` wraps an ``Embedder``: ``encode(texts)`` looks every text up by the SHA-256
of its UTF-8 bytes under the model's key (its path and precision, since bf16, int8 and fp32
vectors differ), embeds only the ones it lacks — in one batch — and stores them.
``encode_query`` embeds without the cache (queries are not memory). The cache is an
optimisation: if it cannot be opened, read or written, the embedder is used directly and one
``vectors.cache.unavailable`` line is logged; a row whose size does not match the model's
dimension is ignored (embedded again).

Measured on 100,000 triples of ``scripts/bench_blackboard.py`` data: a job's first recall over
the 14,018 items of earlier jobs took 13.8 s to embed them, 0.5 s with them cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from gliding.memory.recall.vectors import Embedder, normalise

log = structlog.get_logger("gliding.memory")

CACHE_FILE = "vectors.sqlite3"
_SCHEMA = """CREATE TABLE IF NOT EXISTS vectors (
  model TEXT NOT NULL, sha256 TEXT NOT NULL, vector BLOB NOT NULL,
  PRIMARY KEY (model, sha256)) WITHOUT ROWID"""
_CHUNK = 500  # ids per SELECT ... IN (...)


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class CachedEmbedder:
    """An ``Embedder`` whose item vectors persist in a SQLite file (see the module docstring)."""

    def __init__(self, embedder: Embedder, path: Path) -> None:
        self.embedder = embedder
        self.dim = embedder.dim
        self.precision = embedder.precision
        self.model = f"{embedder.model_path}#{embedder.precision}"
        self.path = path
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
            conn.commit()
            self._conn = conn
        except (sqlite3.Error, OSError) as exc:
            self._give_up(exc)

    def __getattr__(self, name: str) -> Any:  # batch_size, quantized, ... of the embedder
        return getattr(self.embedder, name)

    def encode_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text; cached rows are read, the rest embedded."""
        if not texts or self._conn is None:
            return self.embedder.encode(texts)
        keys = [text_key(t) for t in texts]
        found = self._read(set(keys))
        missing = [n for n, key in enumerate(keys) if key not in found]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if missing:
            fresh = self.embedder.encode([texts[n] for n in missing])
            for row, n in enumerate(missing):
                out[n] = fresh[row]
            self._write({keys[n]: fresh[row] for row, n in enumerate(missing)})
        for n, key in enumerate(keys):
            if key in found:
                out[n] = found[key]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        return normalise(out)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _read(self, keys: set[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        ordered = sorted(keys)
        try:
            with self._lock:
                if self._conn is None:
                    return out
                for start in range(0, len(ordered), _CHUNK):
                    chunk = ordered[start:start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    for key, blob in self._conn.execute(
                            f"SELECT sha256, vector FROM vectors WHERE model = ? "
                            f"AND sha256 IN ({marks})", (self.model, *chunk)):
                        vector = np.frombuffer(blob, dtype=np.float32)
                        if vector.shape == (self.dim,):
                            out[key] = vector
        except sqlite3.Error as exc:
            self._give_up(exc)
        return out

    def _write(self, vectors: dict[str, np.ndarray]) -> None:
        try:
            with self._lock:
                if self._conn is None:
                    return
                self._conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, sha256, vector) VALUES (?, ?, ?)",
                    [(self.model, key, np.asarray(v, dtype=np.float32).tobytes())
                     for key, v in vectors.items()])
                self._conn.commit()
        except sqlite3.Error as exc:
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        log.warning("vectors.cache.unavailable", path=str(self.path),
                    error=f"{type(exc).__name__}: {exc}", using="the embedder directly")
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
