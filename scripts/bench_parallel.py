"""The exploratory pipeline's parallel DAs against the same job done one step at a time.

    .venv/bin/python scripts/bench_parallel.py --steps 4 --latency-s 0.5 --runs 3 --out r.json

A scripted exploratory job (``gliding.testing.latency.step_team``) goes through the real
composition root (``gliding.daemon.compose.run_job``, one shared ``Runtime``): PA plans
``--steps`` independent steps, each step's DA session makes ``--work-turns`` tool calls (1:
write its file; more: look around, write, read it back) and finishes, CA runs the
checks (one per file) and finishes, AA is done. Every model call takes ``--latency-s`` seconds
(``LatencyLLM``), like a hosted model. Each run does the job twice, in alternating order: with
``scheduler.max_parallel`` = ``--parallel`` (default 4) and with ``max_parallel`` = 1 — the
same pipeline, plan and sessions, the steps one after the other — so only the parallelism
differs.

Reported (medians over the runs): the wall time of each job and their ratio, and the same for
the DA phase alone (first step DA started to last step DA finished, from the job's events);
the model calls, and the floor the job ratio cannot go below with this script,
``(fixed + per_step * ceil(steps / parallel)) / (fixed + per_step * steps)`` where ``fixed``
is the calls of PA, CA and AA and ``per_step`` one DA session's (Amdahl's law: PA, CA and AA
do not run in parallel). ``target`` is the wall-time ratio asked for (0.4) and ``met`` says
whether the job ratio reached it, ``da_met`` whether the DA phase did.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gliding.bench.stats import emit  # noqa: E402  (after HF_HUB_OFFLINE)
from gliding.bus.messages import JobEvent  # noqa: E402
from gliding.config.loader import load_settings  # noqa: E402
from gliding.core.logs import configure_logging  # noqa: E402
from gliding.daemon.compose import run_job  # noqa: E402
from gliding.daemon.runtime import Runtime  # noqa: E402
from gliding.testing.latency import LatencyLLM, step_task, step_team  # noqa: E402

TARGET = 0.4


def da_phase(events: list[tuple[float, JobEvent]]) -> float:
    """Seconds from the first step DA's start to the last one's end."""
    times = [t for t, e in events if e.event in ("role.started", "role.finished")
             and e.data.get("role") == "DA" and e.data.get("step")]
    return max(times) - min(times) if times else 0.0


async def one(root: Path, settings: Any, runtime: Runtime, name: str, steps: int,
              latency: float, work: int) -> dict[str, Any]:
    llm = LatencyLLM(step_team(steps, work_turns=work), latency_s=latency)
    events: list[tuple[float, JobEvent]] = []
    started = time.monotonic()
    handle = await run_job(step_task(root, name, steps), settings, llm=llm, runtime=runtime,
                           on_event=lambda e: events.append((time.monotonic(), e)))
    wall = time.monotonic() - started
    report = handle.report
    assert report is not None
    calls = {r.role: r.turns for r in report.roles}
    files = all((root / name / f"s{k}.txt").is_file() for k in range(1, steps + 1))
    return {"wall_s": wall, "da_s": da_phase(events), "outcome": report.outcome,
            "files": files, "calls": calls, "peak": llm.peak}


async def bench(root: Path, steps: int, latency: float, runs: int,
                parallel: int, work: int) -> dict[str, Any]:
    (root / "data").mkdir(parents=True, exist_ok=True)
    base = {"data_dir": str(root / "data"), "memory.vectors.enabled": False}
    wide = load_settings(overrides={**base, "scheduler.max_parallel": parallel}, env={})
    narrow = load_settings(overrides={**base, "scheduler.max_parallel": 1}, env={})
    par: list[dict[str, Any]] = []
    seq: list[dict[str, Any]] = []
    async with Runtime.open(wide) as runtime:
        await one(root, narrow, runtime, "warmup", steps, 0.0, work)  # opens what a job opens once
        for i in range(runs):
            order = [("p", wide), ("s", narrow)] if i % 2 == 0 else [("s", narrow),
                                                                     ("p", wide)]
            for kind, settings in order:
                result = await one(root, settings, runtime, f"{kind}{i}", steps, latency, work)
                (par if kind == "p" else seq).append(result)

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    ratios = [p["wall_s"] / s["wall_s"] for p, s in zip(par, seq, strict=True)]
    da_ratios = [p["da_s"] / s["da_s"] for p, s in zip(par, seq, strict=True) if s["da_s"]]
    calls = par[0]["calls"]
    fixed = sum(n for role, n in calls.items() if role != "DA")
    per_step = calls.get("DA", 0) / steps
    floor = ((fixed + per_step * math.ceil(steps / parallel)) / (fixed + per_step * steps)
             if fixed + per_step else 1.0)
    ratio = round(statistics.median(ratios), 3)
    da_ratio = round(statistics.median(da_ratios), 3) if da_ratios else None
    return {
        "steps": steps, "work_turns": work, "latency_s": latency, "runs": runs,
        "max_parallel": parallel,
        "sequential": "the same exploratory job with scheduler.max_parallel = 1",
        "parallel_s": median(par, "wall_s"), "sequential_s": median(seq, "wall_s"),
        "ratio": ratio, "ratios": [round(r, 3) for r in ratios],
        "da_parallel_s": median(par, "da_s"), "da_sequential_s": median(seq, "da_s"),
        "da_ratio": da_ratio,
        "model_calls": calls, "ratio_floor": round(floor, 3),
        "peak_calls_in_flight": {"parallel": max(r["peak"] for r in par),
                                 "sequential": max(r["peak"] for r in seq)},
        "target": TARGET, "met": ratio <= TARGET,
        "da_met": da_ratio is not None and da_ratio <= TARGET,
        "all_success": all(r["outcome"] == "success" and r["files"] for r in par + seq),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--latency-s", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=4, help="scheduler.max_parallel")
    parser.add_argument("--work-turns", type=int, default=1,
                        help="tool calls of a step's DA before it finishes (1-5)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    configure_logging("warning", "console")
    root = opts.workdir or Path(tempfile.mkdtemp(prefix="gliding-parallel-"))
    root.mkdir(parents=True, exist_ok=True)
    result = anyio.run(bench, root, opts.steps, opts.latency_s, opts.runs, opts.parallel,
                       opts.work_turns)
    emit(result, opts.out)


if __name__ == "__main__":
    main()
