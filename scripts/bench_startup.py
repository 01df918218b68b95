#!/usr/bin/env python3
"""Startup benchmark: the median wall time of ``gliding --help`` over N runs (target < 0.5 s).

    python scripts/bench_startup.py [--runs 10] [--gliding PATH] [--out result.json]

Prints JSON: {"command", "runs", "median_s", "min_s", "max_s", "samples_s", "target_s", "met"}.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--gliding", default=None, help="the gliding executable to time")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    exe = args.gliding or shutil.which("gliding") or str(Path(sys.executable).parent / "gliding")
    command = [exe, "--help"]
    subprocess.run(command, capture_output=True, check=True)  # warm the OS file cache
    samples = []
    for _ in range(args.runs):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        samples.append(time.perf_counter() - started)
    median = statistics.median(samples)
    result = {
        "command": " ".join(command),
        "runs": args.runs,
        "median_s": round(median, 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "samples_s": [round(s, 4) for s in samples],
        "target_s": TARGET_S,
        "met": median < TARGET_S,
    }
    from gliding.bench.stats import emit

    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
