"""Two jobs at once in one process against one job alone: the wall-time ratio of the pair.

    .venv/bin/python scripts/bench_concurrent.py --runs 3 --latency 0.3 --out c.json

Both jobs share one ``Runtime`` (the blackboard, the knowledge index with the real embedding
model, the token counter), as jobs of a daemon will. Each job is DA → CA on a scripted model
whose every reply waits ``--latency`` seconds (a hosted model's latency): DA writes a file,
recalls from long-term memory (what a seed job recorded), runs a command and finishes; CA runs
the checks. A warm-up job loads the embedder first, so every measured job finds it loaded.
Per run: one job alone, then two started together. Reported: medians of the single and pair
wall times and of their ratio (1.0: the pair took no longer than one job; 2.0: they ran one
after the other), and whether both jobs of every pair ingested their tool results into the
blackboard and got long-term memory back from recall.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gliding.bench.stats import emit  # noqa: E402  (after HF_HUB_OFFLINE)
from gliding.config.loader import load_settings  # noqa: E402
from gliding.config.task import Task  # noqa: E402
from gliding.core.checks import FileContains  # noqa: E402
from gliding.core.logs import configure_logging  # noqa: E402
from gliding.daemon.compose import run_job  # noqa: E402
from gliding.daemon.runtime import Runtime  # noqa: E402
from gliding.testing import ScriptedLLM, call  # noqa: E402


def task(root: Path, name: str) -> Task:
    return Task(goal=f"Write {name}.txt holding the word {name}", workspace=root / name,
                model=None, pipeline=("DA", "CA"), turns={}, prompt_tokens=None,
                cost_usd=None, wall_time_s=300, checks=(FileContains(f"{name}.txt", name),),
                source=root / f"{name}.yaml")


def model(name: str, latency: float) -> ScriptedLLM:
    return ScriptedLLM({
        "DA": [call("write_file", path=f"{name}.txt", content=name),
               call("recall", query="which port does the staging database use"),
               call("bash", command=f"wc -c {name}.txt"),
               call("finish", summary=f"wrote {name}.txt")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
    }, delay_s=latency)


def recalled(llm: ScriptedLLM) -> bool:
    return any(m.role == "tool" and m.name == "recall" and "Long-term memory" in m.content
               for r in llm.requests for m in r.messages[-1:])


async def one(root: Path, settings: Any, runtime: Runtime, name: str,
              latency: float) -> dict[str, Any]:
    llm = model(name, latency)
    handle = await run_job(task(root, name), settings, llm=llm, runtime=runtime)
    assert handle.report is not None
    job = handle.report.job
    rows = await anyio.to_thread.run_sync(lambda: runtime.board.query(  # type: ignore[union-attr]
        "SELECT (COUNT(?r) AS ?n) WHERE { GRAPH <gliding://job/" + job + "> { ?r a "
        "<https://gliding.dev/ns/v1#ToolResult> } }", timeout_s=10))
    return {"outcome": handle.report.outcome, "recalled": recalled(llm),
            "results_on_board": int(getattr(rows[0]["n"], "value", rows[0]["n"]))}


async def bench(root: Path, runs: int, latency: float) -> dict[str, Any]:
    settings = load_settings(overrides={"data_dir": str(root / "data")}, env={})
    seed = ScriptedLLM({"DA": [call("write_file", path="notes.txt",
                                    content="the staging database listens on port 5433"),
                               call("finish", summary="staging database port is 5433")]})
    seed_task = Task(goal="Note the staging database port", workspace=root / "seed",
                     model=None, pipeline=("DA",), turns={}, prompt_tokens=None,
                     cost_usd=None, wall_time_s=300, checks=(), source=root / "seed.yaml")
    await run_job(seed_task, settings, llm=seed)
    singles, pairs, jobs = [], [], []
    async with Runtime.open(settings) as runtime:
        await one(root, settings, runtime, "warmup", 0.0)  # loads the embedder once
        for i in range(runs):
            started = time.monotonic()
            jobs.append(await one(root, settings, runtime, f"single{i}", latency))
            singles.append(time.monotonic() - started)
            pair: list[dict[str, Any]] = []

            async def side(name: str, pair: list[dict[str, Any]] = pair) -> None:
                pair.append(await one(root, settings, runtime, name, latency))

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(side, f"left{i}")
                tg.start_soon(side, f"right{i}")
            pairs.append(time.monotonic() - started)
            jobs += pair
    ratios = [p / s for p, s in zip(pairs, singles, strict=True)]
    return {
        "runs": runs, "latency_s": latency,
        "single_s": round(statistics.median(singles), 3),
        "pair_s": round(statistics.median(pairs), 3),
        "ratio": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "all_success": all(j["outcome"] == "success" for j in jobs),
        "all_ingested": all(j["results_on_board"] == 4 for j in jobs),
        "all_recalled": all(j["recalled"] for j in jobs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    configure_logging("warning", "console")
    root = opts.workdir or Path(tempfile.mkdtemp(prefix="gliding-concurrent-"))
    root.mkdir(parents=True, exist_ok=True)
    result = anyio.run(bench, root, opts.runs, opts.latency)
    emit(result, opts.out)


if __name__ == "__main__":
    main()
