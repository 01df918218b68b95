#!/usr/bin/env python3
"""Memory recall benchmark on LoCoMo-format conversations.

    python scripts/bench_memory.py LOCOMO.json --conversations 0-2 \
        --budgets 512,1024,2048,4096 --out result.json

Ingests each conversation's turns (one memory session per LoCoMo session), then retrieves a
context for every question under every token budget with four methods (recency, bm25,
vector, gliding) and reports evidence recall per method, budget and category, the gliding
method's retrieval latency (p50/p99) and the ingest rate with embeddings, as JSON. See
gliding/bench/memory.py for the exact rules.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    from typing import get_args

    from gliding.bench.memory import parse_range, run_memory_bench
    from gliding.errors import UsageError
    from gliding.memory.recall.vectors import Precision

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo", type=Path, help="LoCoMo-format JSON (a list of samples)")
    parser.add_argument("--conversations", default="0-2", help="indexes and ranges, e.g. 0-2,5")
    parser.add_argument("--budgets", default="512,1024,2048,4096",
                        help="token budgets (cl100k_base), comma-separated")
    parser.add_argument("--no-vectors", action="store_true", help="skip the embedding model")
    parser.add_argument("--precision", default="auto", choices=get_args(Precision),
                        help="embedding model precision (auto: bf16 where the CPU has it, "
                             "else int8)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    try:
        result = run_memory_bench(args.locomo, parse_range(args.conversations),
                                  parse_range(args.budgets), embedder=not args.no_vectors,
                                  precision=args.precision)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from gliding.bench.stats import emit

    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
