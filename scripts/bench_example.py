#!/usr/bin/env python3
"""How often an example succeeds: run a task file N times with different seeds and report.

    python scripts/bench_example.py examples/hello-upper/task.yaml --runs 10 \
        [--temperature 0.7] [--out result.json]

Each run gets a fresh copy of the task's directory (so earlier runs leave nothing behind) and
``GLIDING_LLM__LOCAL__SEED=<i>``. Prints JSON with the success rate, outcomes, corrections,
wall times and prompt tokens per run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    exe = str(Path(sys.executable).parent / "gliding")
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            task = Path(tmp) / "task" / args.task.name
            shutil.copytree(args.task.parent, task.parent,
                            ignore=shutil.ignore_patterns("workspace"))
            env = dict(os.environ, GLIDING_LLM__LOCAL__SEED=str(i))
            if args.temperature is not None:
                env["GLIDING_LLM__LOCAL__TEMPERATURE"] = str(args.temperature)
            cmd = [exe, "run", str(task), "--json", "--quiet", "--data-dir", f"{tmp}/data"]
            if args.model:
                cmd += ["--model", args.model]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            try:
                report = json.loads(done.stdout)
            except json.JSONDecodeError:
                runs.append({"seed": i, "outcome": "crash", "stderr": done.stderr[-500:]})
                continue
            runs.append({"seed": i, "outcome": report["outcome"],
                         "corrections": report["corrections"], "cycles": report["cycles"],
                         "wall_s": report["wall_s"],
                         "prompt_tokens": report["total"]["prompt_tokens"]})
        print(f"run {i + 1}/{args.runs}: {runs[-1]['outcome']}", file=sys.stderr)
    successes = sum(r["outcome"] == "success" for r in runs)
    walls = [r["wall_s"] for r in runs if "wall_s" in r]
    result = {
        "task": str(args.task),
        "runs": len(runs),
        "temperature": args.temperature,
        "success_rate": successes / len(runs) if runs else 0.0,
        "median_wall_s": statistics.median(walls) if walls else None,
        "per_run": runs,
    }
    from gliding.bench.stats import emit

    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
