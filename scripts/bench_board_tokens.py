"""Tokens an agent is shown of the blackboard between turns: changed lines only (coherence) vs
the whole view re-sent every turn.

    .venv/bin/python scripts/bench_board_tokens.py --steps 4 --work-turns 1,2,3,5 --runs 3 \
        --out r.json [--latency-s 0.2]

A scripted exploratory job (``gliding.testing.latency.step_team``) runs through the real
composition root (``daemon.compose.run_job``) with ``memory.coherence`` on and
``scheduler.max_parallel`` = ``--steps``: PA plans ``--steps`` independent steps, the step DAs
work at once, step *k*'s DA making the *k*-th of ``--work-turns`` tool calls, so they finish one
after another and the ones still working see the others' artifacts appear on the board; CA runs
the checks; AA is done. Every model call takes ``--latency-s`` (``LatencyLLM``), so sessions
overlap as with a hosted model.

Before every turn after a session's first, the agent loop asks its view for what changed
(``daemon/board.BoardViews.updates``); the job's report counts, over all those moments, the
tokens sent (new or changed lines) and what re-sending the whole view would have cost
(``views.ViewStats``). Reported: medians over ``--runs`` of both, their ratio and the saving.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gliding.bench.stats import emit  # noqa: E402  (after HF_HUB_OFFLINE)
from gliding.config.loader import load_settings  # noqa: E402
from gliding.core.logs import configure_logging  # noqa: E402
from gliding.daemon.compose import run_job  # noqa: E402
from gliding.daemon.runtime import Runtime  # noqa: E402
from gliding.errors import UsageError  # noqa: E402
from gliding.testing.latency import LatencyLLM, step_task, step_team  # noqa: E402


def parse_turns(text: str, steps: int) -> tuple[int, ...]:
    """``1,2,3`` -> (1, 2, 3), one per step, each 1 to 5.

    Raises:
        UsageError: not that.
    """
    try:
        turns = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--work-turns {text!r} is not a comma-separated list of numbers",
                         hint="e.g. --work-turns 1,2,3,5") from None
    if len(turns) != steps or not all(1 <= t <= 5 for t in turns):
        raise UsageError(f"--work-turns needs {steps} numbers from 1 to 5, got {text!r}",
                         hint="one per step: --steps 4 --work-turns 1,2,3,5")
    return turns


async def _runs(root: Path, steps: int, turns: tuple[int, ...], latency: float, runs: int,
                progress: Callable[[str], None]) -> list[dict[str, Any]]:
    (root / "data").mkdir(parents=True, exist_ok=True)
    settings = load_settings(overrides={
        "data_dir": str(root / "data"), "memory.vectors.enabled": False,
        "scheduler.max_parallel": steps, "memory.coherence.enabled": True}, env={})
    out = []
    async with Runtime.open(settings) as runtime:
        for i in range(runs):
            llm = LatencyLLM(step_team(steps, work_turns=turns), latency_s=latency)
            started = time.monotonic()
            handle = await run_job(step_task(root, f"job{i}", steps), settings, llm=llm,
                                   runtime=runtime)
            report = handle.report
            assert report is not None
            stats = dict(report.board_updates)
            stats.update(outcome=report.outcome, wall_s=round(time.monotonic() - started, 3),
                         calls=llm.calls, peak_calls_in_flight=llm.peak)
            out.append(stats)
            progress(f"run {i + 1}/{runs}: {stats.get('updates', 0)} updates, sent "
                     f"{stats.get('sent_tokens', 0)} of {stats.get('full_tokens', 0)} tokens")
    return out


def run_board_tokens(*, steps: int, work_turns: str, latency_s: float, runs: int,
                     progress: Callable[[str], None] = lambda _line: None) -> dict[str, Any]:
    """The benchmark (see the module docstring); JSON-ready.

    Raises:
        UsageError: bad arguments.
    """
    if steps < 2 or runs < 1 or latency_s < 0:
        raise UsageError("--steps must be at least 2, --runs at least 1, --latency-s >= 0")
    turns = parse_turns(work_turns, steps)
    with tempfile.TemporaryDirectory(prefix="gliding-board-tokens-") as tmp:
        rows = anyio.run(_runs, Path(tmp), steps, turns, latency_s, runs, progress)

    def median(key: str) -> float:
        return statistics.median(float(r.get(key, 0)) for r in rows)

    sent, full = median("sent_tokens"), median("full_tokens")
    return {
        "steps": steps, "work_turns": list(turns), "latency_s": latency_s, "runs": runs,
        "scenario": "exploratory job, step DAs in parallel, later steps see earlier artifacts",
        "updates": median("updates"),
        "sent_tokens": sent,
        "full_view_tokens": full,
        "ratio": round(sent / full, 4) if full else None,
        "saving": round(1 - sent / full, 4) if full else None,
        "outcomes": [r["outcome"] for r in rows],
        "per_run": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work-turns", default="1,2,3,5",
                        help="tool calls of each step's DA before it finishes (1-5 each)")
    parser.add_argument("--latency-s", type=float, default=0.2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    configure_logging("warning", "console")
    try:
        result = run_board_tokens(steps=opts.steps, work_turns=opts.work_turns,
                                  latency_s=opts.latency_s, runs=opts.runs,
                                  progress=lambda line: print(line, file=sys.stderr))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    emit(result, opts.out)


if __name__ == "__main__":
    main()
