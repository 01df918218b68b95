"""Small statistics and output helpers the benchmarks share."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path


def ratio(part: float, whole: float) -> float:
    """``part / whole`` to 4 places; 0 when ``whole`` is 0."""
    return round(part / whole, 4) if whole else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default); 0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def emit(result: object, out: Path | None, *, indent: int | None = 2) -> None:
    """Print a benchmark's JSON result and, with ``out``, write it there too."""
    text = json.dumps(result, indent=indent)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    print(text)
