"""VectorIndex on Qdrant through qdrant-client: a shared server (``url:``) or its local mode.

``QdrantVectorIndex.connect(url, ...)`` talks to a Qdrant server over HTTP, for several processes
or hosts sharing one index; ``QdrantVectorIndex.local(path, ...)`` runs qdrant-client's local
mode (in-process, ``None`` = in memory, else on disk under ``path``), which stands in for a
server in tests and the benchmark. Each index owns one collection of cosine distance; it is
created when missing, and an existing collection of another dimension is refused.

String ids become Qdrant point ids by ``uuid5(POINT_NAMESPACE, id)``; the original id travels in
the payload (``{"id": ...}``) and is what ``search`` returns. ``add`` checks the ids it is given
against the collection (``retrieve``) before it upserts, so a stored id is a ValueError, as for
``ExactVectorIndex``; the check and the upsert are two requests, so two *writers* adding the
same id at the same moment can both pass it (the second upsert then replaces the first vector).
Writers of one id must take turns; the ids of memory items are unique per job anyway.

``open_qdrant_index`` is what the composition root calls: it returns ``None`` and logs
``vectors.qdrant.unavailable`` when qdrant-client is not installed (it comes with the ``qdrant``
extra; the warning says so) or the server cannot be reached, so the caller keeps the embedded
``ExactVectorIndex`` instead of crashing.

qdrant-client (and grpc, which it pulls in) is imported only inside functions here, so importing
Gliding, and ``gliding --help``, stays fast.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import structlog

from gliding.memory.recall.vectors import VectorIndex, VectorStoreError, normalise

log = structlog.get_logger("gliding.memory")

POINT_NAMESPACE = uuid.UUID("6f1d8a3c-9b2e-5c47-8e0a-7d3b41c2f905")
DEFAULT_TIMEOUT_S = 10.0
UPSERT_CHUNK = 1024  # points per upsert request: ~4 MB of JSON at 384 dimensions
ID_KEY = "id"
QDRANT_INSTALL = "pip install 'gliding[qdrant]'"  # the extra that brings qdrant-client

T = TypeVar("T")


def point_id(doc_id: str) -> str:
    """The Qdrant point id (a UUID string) that stands for ``doc_id``."""
    return str(uuid.uuid5(POINT_NAMESPACE, doc_id))


def _store_errors() -> tuple[type[BaseException], ...]:
    """The exceptions qdrant-client and its transports raise, to translate into VectorStoreError.

    ValueError and RuntimeError are what local mode raises (a missing collection, a storage
    folder held by another client); every ValueError of our own is raised before a call.
    """
    import httpx
    from qdrant_client.http.exceptions import ApiException

    errors: list[type[BaseException]] = [ApiException, httpx.HTTPError, OSError, RuntimeError,
                                         ValueError, KeyError]
    try:
        import grpc

        errors.append(grpc.RpcError)
    except ImportError:  # grpc is optional for the REST transport
        pass
    return tuple(errors)


class QdrantVectorIndex:
    """A VectorIndex on one Qdrant collection; build it with ``connect`` or ``local``."""

    def __init__(self, client: Any, *, collection: str, dim: int, where: str) -> None:
        """Wrap an open ``QdrantClient``; creates ``collection`` when missing.

        Raises:
            ValueError: ``dim`` is not positive, or the collection exists with another dimension
                or distance.
            VectorStoreError: the store could not be reached or the collection created.
        """
        if dim <= 0:
            raise ValueError(f"dimension must be positive, not {dim}")
        self.client = client
        self.collection = collection
        self.dim = dim
        self.where = where
        self._errors = _store_errors()
        self._closed = False
        try:
            self._ensure_collection()
        except BaseException:
            self.close()
            raise

    # constructors

    @classmethod
    def connect(cls, url: str, *, collection: str, dim: int, api_key: str | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> QdrantVectorIndex:
        """The collection ``collection`` on the Qdrant server at ``url`` (REST, e.g. port 6333).

        Raises:
            ImportError: qdrant-client is not installed.
            ValueError: the collection exists with another dimension.
            VectorStoreError: the server cannot be reached, or refused the request.
        """
        from qdrant_client import QdrantClient

        client = QdrantClient(url=url, api_key=api_key, timeout=max(1, math.ceil(timeout_s)),
                              check_compatibility=False)
        return cls(client, collection=collection, dim=dim, where=f"the Qdrant server at {url}")

    @classmethod
    def local(cls, path: str | None, *, collection: str, dim: int) -> QdrantVectorIndex:
        """The collection in qdrant-client's local mode: on disk under ``path``, or in memory.

        One client at a time may open a ``path`` (it is locked while open).

        Raises:
            ImportError: qdrant-client is not installed.
            ValueError: the collection exists with another dimension.
            VectorStoreError: the folder is held by another client or cannot be read.
        """
        from qdrant_client import QdrantClient

        where = "Qdrant local mode in memory" if path is None else f"Qdrant local mode at {path}"
        try:
            client = QdrantClient(location=":memory:") if path is None else QdrantClient(path=path)
        except _store_errors() as exc:
            raise VectorStoreError(
                f"could not open {where}: {type(exc).__name__}: {exc}",
                hint="check that no other process or client has this folder open, and that it "
                     "is readable and writable; a shared index needs a Qdrant server (url:)",
            ) from exc
        return cls(client, collection=collection, dim=dim, where=where)

    # the port

    def __len__(self) -> int:
        result = self._call("count the points", lambda: self.client.count(
            self.collection, exact=True))
        return int(result.count)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (one row per id, normalised) under ``ids``; all or, on a
        ValueError, nothing. A VectorStoreError part-way through a large add can leave the
        first chunks stored."""
        from qdrant_client import models

        rows = normalise(vectors)
        ids = list(ids)
        if len(ids) != rows.shape[0]:
            raise ValueError(f"{len(ids)} ids for {rows.shape[0]} vectors")
        if rows.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {rows.shape[1]}, index holds {self.dim}")
        if not ids:
            return
        seen: set[str] = set()
        for doc_id in ids:
            if doc_id in seen:
                raise ValueError(f"vector {doc_id!r} is already stored")
            seen.add(doc_id)
        points = [point_id(doc_id) for doc_id in ids]
        stored = self._call("look up ids", lambda: self.client.retrieve(
            self.collection, ids=points, with_payload=True, with_vectors=False))
        if stored:
            first = (stored[0].payload or {}).get(ID_KEY, stored[0].id)
            raise ValueError(f"vector {first!r} is already stored")
        for start in range(0, len(ids), UPSERT_CHUNK):
            end = start + UPSERT_CHUNK
            batch = models.Batch(ids=points[start:end], vectors=rows[start:end].tolist(),
                                 payloads=[{ID_KEY: doc_id} for doc_id in ids[start:end]])
            self._call("store vectors", partial(self.client.upsert, self.collection,
                                                points=batch, wait=True))

    def missing(self, ids: Sequence[str]) -> list[str]:
        """The ids of ``ids`` that hold no vector yet, in order (so a shared server's vectors
        are reused instead of embedded again)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        stored = self._call("look up ids", lambda: self.client.retrieve(
            self.collection, ids=[point_id(i) for i in ids], with_payload=True,
            with_vectors=False))
        known = {str((point.payload or {}).get(ID_KEY)) for point in stored}
        return [i for i in ids if i not in known]

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` most similar (id, cosine) pairs, best first."""
        query = normalise(query_vector)[0]
        if query.shape[0] != self.dim:
            raise ValueError(f"query of dimension {query.shape[0]}, index holds {self.dim}")
        if k <= 0:
            return []
        result = self._call("search", lambda: self.client.query_points(
            self.collection, query=query.tolist(), limit=k, with_payload=True,
            with_vectors=False))
        return [(str((point.payload or {})[ID_KEY]), float(point.score))
                for point in result.points]

    def close(self) -> None:
        """Close the client (idempotent); an on-disk local folder is unlocked."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.close()
        except self._errors as exc:  # closing a client whose server went away
            log.debug("vectors.qdrant.close_failed", error=f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> QdrantVectorIndex:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # internals

    def _ensure_collection(self) -> None:
        from qdrant_client import models

        exists = self._call("check the collection", lambda: self.client.collection_exists(
            self.collection))
        if not exists:
            params = models.VectorParams(size=self.dim, distance=models.Distance.COSINE)
            self._call("create the collection", lambda: self.client.create_collection(
                self.collection, vectors_config=params))
            return
        info = self._call("read the collection", lambda: self.client.get_collection(
            self.collection))
        params = info.config.params.vectors
        if not isinstance(params, models.VectorParams):
            raise ValueError(f"collection {self.collection!r} in {self.where} has named vectors "
                             f"({sorted(params or {})}); Gliding needs one unnamed vector")
        if params.size != self.dim:
            raise ValueError(f"collection {self.collection!r} in {self.where} holds vectors of "
                             f"dimension {params.size}, not {self.dim}; use another collection "
                             "name for another embedding model")
        if params.distance != models.Distance.COSINE:
            raise ValueError(f"collection {self.collection!r} in {self.where} uses "
                             f"{params.distance} distance, not cosine")

    def _call(self, what: str, call: Callable[[], T]) -> T:
        if self._closed:
            raise VectorStoreError(f"the vector index on {self.where} is closed",
                                   hint="open a new index; close() ends this one")
        try:
            return call()
        except self._errors as exc:
            raise VectorStoreError(
                f"could not {what} in collection {self.collection!r} on {self.where}: "
                f"{type(exc).__name__}: {exc}",
                hint="check that the Qdrant server is running and reachable at the configured "
                     "url (and the api key), or remove url: to use the embedded index",
            ) from exc


def open_qdrant_index(url: str | None, *, collection: str, dim: int, path: str | None = None,
                      api_key: str | None = None) -> VectorIndex | None:
    """A Qdrant index, or ``None`` (with a logged warning) when one cannot be had.

    ``url`` given: the server there; ``url`` None: local mode on disk under ``path`` (in memory
    when ``path`` is None too). ``None`` comes back, after one ``vectors.qdrant.unavailable``
    warning, when qdrant-client is not importable or the store cannot be reached or opened; the
    caller then uses ``ExactVectorIndex``.

    Raises:
        ValueError: the collection exists with another dimension (a configuration to fix, not
            an outage to ride out: falling back would hide the stored vectors).
    """
    try:
        if url is not None:
            return QdrantVectorIndex.connect(url, collection=collection, dim=dim,
                                             api_key=api_key)
        return QdrantVectorIndex.local(path, collection=collection, dim=dim)
    except (ImportError, VectorStoreError) as exc:
        hint = {"hint": QDRANT_INSTALL} if isinstance(exc, ImportError) else {}
        log.warning("vectors.qdrant.unavailable", error=f"{type(exc).__name__}: {exc}",
                    url=url, path=path, collection=collection, using="exact numpy index",
                    **hint)
        return None
