#!/usr/bin/env python3
"""Token-economy benchmark on real agent trajectories (same as `gliding bench context`).

    python scripts/bench_context.py TRAJECTORIES.jsonl --out result.json [--png plot.png]

Replays every record through four context strategies (naive, obs_mask, compact_recent,
gliding) and writes JSON with total/peak prompt tokens, cached cost, fact recall,
recoverability and assembly latency per strategy, in total and per trajectory.
"""

from __future__ import annotations

import sys

from gliding.cli.app import app

if __name__ == "__main__":
    sys.exit(app(["bench", "context", *sys.argv[1:]]))
