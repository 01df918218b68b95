#!/usr/bin/env python3
"""Vector index backends measured side by side, to choose the embedded default by measurement.

    python scripts/bench_vectors.py [--sizes 1000,10000,50000] [--dim 384] [--queries 200]
        [--backends exact,qdrant-local] [--qdrant-max-size 50000] [--vectors FILE.npy]
        [--seed 0] [--out result.json]

For each size ``n`` and each backend: an empty index is built, ``n`` vectors are added in batches
of 256 (``ingest_per_s`` = vectors / seconds, the index's own normalising included), then
``--queries`` searches for k=10 are timed one by one after a few warm-up calls
(``search_ms_p50`` / ``search_ms_p99``), and ``recall_at_10`` is the mean share of the exact
brute-force top 10 (numpy, float64) that the backend returned.

Backends: ``exact`` (ExactVectorIndex, numpy), ``qdrant-local`` (QdrantVectorIndex in
qdrant-client's local mode, in memory), and ``hnswlib`` when that package happens to be
installed (an approximate HNSW graph, M=16, ef_construction=200, ef=50; not a dependency).
Qdrant local mode does per-point Python work on ingest, so sizes above ``--qdrant-max-size``
are skipped for it and listed under ``skipped``.

Data: seeded random normal vectors, L2-normalised float32 (``--seed``), queries drawn the same
way; or ``--vectors FILE.npy`` (an n × dim array, e.g. real embeddings): its last ``--queries``
rows are the queries and the rows before them the corpus. Prints JSON (and writes ``--out``):

    {"config": {...}, "results": [{"backend", "size", "dim", "ingest_s", "ingest_per_s",
     "search_ms_p50", "search_ms_p99", "recall_at_10"}, ...], "skipped": [...]}
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gliding.bench.stats import percentile
from gliding.memory.recall.vectors import ExactVectorIndex, VectorIndex, normalise

K = 10
BATCH = 256
WARMUP = 5
BACKENDS = ("exact", "qdrant-local", "hnswlib")


class HnswIndex:
    """hnswlib behind the VectorIndex port, for comparison only (cosine space)."""

    def __init__(self, dim: int, capacity: int) -> None:
        import hnswlib

        self.index = hnswlib.Index(space="cosine", dim=dim)
        self.index.init_index(max_elements=max(capacity, 1), ef_construction=200, M=16)
        self.index.set_ef(50)
        self.ids: list[str] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        labels = np.arange(len(self.ids), len(self.ids) + len(ids))
        self.index.add_items(normalise(vectors), labels)
        self.ids.extend(ids)

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        k = min(k, len(self.ids))
        if k <= 0:
            return []
        labels, distances = self.index.knn_query(normalise(query_vector), k=k)
        return [(self.ids[int(i)], 1.0 - float(d))
                for i, d in zip(labels[0], distances[0], strict=True)]

    def close(self) -> None:
        pass


def make_factory(backend: str, dim: int, size: int) -> Callable[[], Any]:
    if backend == "exact":
        return lambda: ExactVectorIndex(dim)
    if backend == "qdrant-local":
        from gliding.memory.backends.qdrant_vectors import QdrantVectorIndex

        return lambda: QdrantVectorIndex.local(None, collection="bench", dim=dim)
    if backend == "hnswlib":
        return lambda: HnswIndex(dim, size)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def load_data(args: argparse.Namespace, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(corpus of ``size`` unit rows, ``args.queries`` unit query rows), float32."""
    if args.vectors is not None:
        rows = np.load(args.vectors).astype(np.float32)
        if rows.ndim != 2 or rows.shape[0] < size + args.queries:
            raise SystemExit(f"{args.vectors}: need an array of at least {size + args.queries} "
                             f"rows, got shape {rows.shape}")
        return normalise(rows[:size]), normalise(rows[-args.queries:])
    rng = np.random.default_rng(args.seed)
    corpus = normalise(rng.normal(size=(size, args.dim)).astype(np.float32))
    queries = normalise(rng.normal(size=(args.queries, args.dim)).astype(np.float32))
    return corpus, queries


def exact_top_k(corpus: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    k = min(k, corpus.shape[0])
    best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return [set(row.tolist()) for row in best]


def measure(index: VectorIndex, corpus: np.ndarray, queries: np.ndarray,
            truth: list[set[int]]) -> dict[str, float]:
    ids = [str(i) for i in range(corpus.shape[0])]
    started = time.perf_counter()
    for start in range(0, len(ids), BATCH):
        index.add(ids[start:start + BATCH], corpus[start:start + BATCH])
    ingest_s = time.perf_counter() - started
    assert len(index) == len(ids), "the index lost vectors"
    for query in queries[:WARMUP]:
        index.search(query, K)
    latencies, hits = [], 0
    for query, expected in zip(queries, truth, strict=True):
        started = time.perf_counter()
        found = index.search(query, K)
        latencies.append((time.perf_counter() - started) * 1000)
        hits += len({int(doc_id) for doc_id, _ in found} & expected)
    return {
        "ingest_s": round(ingest_s, 3),
        "ingest_per_s": round(len(ids) / ingest_s),
        "search_ms_p50": round(percentile(latencies, 50), 3),
        "search_ms_p99": round(percentile(latencies, 99), 3),
        "recall_at_10": round(hits / (len(truth) * min(K, len(ids))), 4),
    }


def run(args: argparse.Namespace, sizes: list[int], backends: list[str]) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for size in sizes:
        corpus, queries = load_data(args, size)
        truth = exact_top_k(corpus, queries, K)
        for backend in backends:
            if backend == "qdrant-local" and size > args.qdrant_max_size:
                skipped.append({"backend": backend, "size": size,
                                "why": f"size above --qdrant-max-size {args.qdrant_max_size}"})
                continue
            index = make_factory(backend, corpus.shape[1], size)()
            try:
                numbers = measure(index, corpus, queries, truth)
            finally:
                index.close()
            row = {"backend": backend, "size": size, "dim": int(corpus.shape[1]), **numbers}
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "config": {"sizes": sizes, "dim": int(corpus.shape[1]), "queries": args.queries,
                   "k": K, "batch": BATCH, "seed": args.seed, "backends": backends,
                   "qdrant_max_size": args.qdrant_max_size,
                   "data": str(args.vectors) if args.vectors else "random normal, normalised"},
        "results": results,
        "skipped": skipped,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="comma-separated index sizes")
    parser.add_argument("--dim", type=int, default=384, help="dimension of random vectors")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per run")
    parser.add_argument("--backends", default=None,
                        help="comma-separated: exact, qdrant-local, hnswlib "
                             "(default: exact,qdrant-local, and hnswlib when installed)")
    parser.add_argument("--qdrant-max-size", type=int, default=50_000,
                        help="skip qdrant-local above this many vectors (its ingest is slow)")
    parser.add_argument("--vectors", type=Path, default=None,
                        help="an .npy array of real vectors instead of random ones")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    try:
        sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.queries < 1 or args.dim < 1:
        parser.error("--sizes, --queries and --dim must be positive")
    if args.backends is None:
        backends = ["exact", "qdrant-local"]
        if importlib.util.find_spec("hnswlib") is not None:
            backends.append("hnswlib")
    else:
        backends = [name.strip() for name in args.backends.split(",") if name.strip()]
        unknown = sorted(set(backends) - set(BACKENDS))
        if unknown:
            parser.error(f"unknown backends {unknown}; known: {', '.join(BACKENDS)}")
    result = run(args, sizes, backends)
    from gliding.bench.stats import emit

    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
