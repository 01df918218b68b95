"""Jobs through ``gliding run`` on litellm against a provider that fails a share of its calls:
do they all finish, does any tool run twice, and what do the faults cost in wall time?

    .venv/bin/python scripts/bench_provider_faults.py --jobs 20 --fault-rate 0.3 --out r.json \
        [--runs 3] [--parallel 4] [--latency 0.05] [--seed 0] [--mode inproc|cli] [--workdir D]

Each job (its own directory and data directory) runs ``task.yaml`` on ``openai/fake-model``
through litellm, with ``llm.api_base`` at a fake provider of its own
(``gliding.testing.fake_provider``, 127.0.0.1, ``--latency`` seconds a reply). ``--mode cli``
runs the real console script, ``gliding run task.yaml --model openai/fake-model``, one process
a job (each pays litellm's import, seconds on a busy machine); ``--mode inproc`` (the default)
runs ``compose.run_job``, what ``gliding run`` calls, for every job in this process, so the wall
times measure the jobs rather than process start-up. PA plans, DA runs
``STEPS`` bash steps that each append one line ``step-<k>`` to log.txt then finishes, CA runs
the checks (every line exactly once), AA decides: 8 model calls. The faulted batch fails
``--fault-rate`` of the calls with the whole mix (429 with and without Retry-After, 500, 529
overloaded, a dropped connection, a reply slower than ``llm.timeout_s``), from a seed per job;
the baseline batch has no faults. Each run is a baseline batch then a faulted one (the same
jobs); the medians are over ``--runs`` runs. One more batch runs every job with its primary
model down (``openai/primary`` answered 503 every time) and ``llm.fallbacks:
[openai/fallback-model]``.

Measured: jobs succeeded (exit 0, ``Outcome: SUCCESS``) and interrupted; tools re-executed
(lines in log.txt beyond one per step: a bash step run twice) and lost; faults the providers
injected, per kind; retries per fault as the progress lines report them; fallbacks taken; the
median job wall time, the batch's wall time, and what the faults added to both; for the
fallback batch, which model the ledger says answered. Retry waits are shrunk by the settings
below (reported in the JSON). JSON on stdout and in ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio

from gliding.bench.stats import emit
from gliding.core.logs import configure_logging
from gliding.memory.archive.store import Archive
from gliding.testing.fake_provider import FakeProvider, FaultPlan

GLIDING = Path(sys.executable).parent / "gliding"
STEPS = 3
JOB_TIMEOUT_S = 600
SETTINGS = {  # environment of every job: retries and timeouts shrunk for the benchmark
    "GLIDING_LLM__TIMEOUT_S": "1.0",
    "GLIDING_LLM__RETRY__MAX_ATTEMPTS": "8",
    "GLIDING_LLM__RETRY__INITIAL_S": "0.05",
    "GLIDING_LLM__RETRY__MAX_S": "0.2",
    "GLIDING_LLM__RETRY__MAX_TOTAL_S": "60",
    "GLIDING_LLM__RETRY__COOLDOWN_S": "60",  # the default: a down primary is skipped after
    "GLIDING_MEMORY__VECTORS__ENABLED": "false",  # no embedding model load per process
}
SLOW_S = 2.0  # a "slow" fault holds the connection this long: past llm.timeout_s
RETRY = re.compile(r"\] model (\S+): (.+?), retry (\d+)/(\d+) in ([\d.]+)s")
FALLBACK = re.compile(r"\] model (\S+): (.+?), retries spent → falling back to (\S+)")


def write_job(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    lines = " && ".join(f"test $(grep -cx step-{k} log.txt) -eq 1" for k in range(1, STEPS + 1))
    (root / "task.yaml").write_text(
        f"goal: Append the lines step-1 .. step-{STEPS} to log.txt, one per step\n"
        "workspace: ws\npipeline: [PA, DA, CA, AA]\n"
        f"budgets:\n  turns: {{DA: {STEPS + 2}}}\n"
        f"checks:\n  - command: \"test $(wc -l < log.txt) -eq {STEPS} && {lines}\"\n",
        encoding="utf-8")
    da = "\n".join(f"  - bash: {{command: \"echo step-{k} >> log.txt\"}}"
                   for k in range(1, STEPS + 1))
    (root / "replies.yaml").write_text(
        "PA:\n  - finish: {steps: [append the lines]}\n"
        f"DA:\n{da}\n  - finish: {{summary: appended every line}}\n"
        "CA:\n  - run_checks: {}\n  - finish: {notes: checked}\n"
        "AA:\n  - finish: {decision: done, report: every line is there once}\n",
        encoding="utf-8")


def run_one(root: Path, fp: FakeProvider, model: str, extra: dict[str, str]) -> dict[str, Any]:
    env = {**os.environ, **SETTINGS, **extra, "GLIDING_LLM__API_BASE": fp.url,
           "OPENAI_API_KEY": "dummy", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}
    env = {k: v for k, v in env.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    started = time.monotonic()
    proc = subprocess.run([str(GLIDING), "run", "task.yaml", "--model", model,
                           "--data-dir", "data"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=JOB_TIMEOUT_S, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    outcome = next((line.split()[1].rstrip(":").lower() for line in proc.stdout.splitlines()
                    if line.startswith("Outcome:")), "none")
    retries = collections.Counter(m.group(2) for m in RETRY.finditer(proc.stderr))
    fallbacks = len(FALLBACK.findall(proc.stderr))
    return {"code": proc.returncode, "outcome": outcome, "wall_s": wall, **_job_files(root),
            "retries": dict(retries), "fallbacks": fallbacks, "injected": dict(fp.counts),
            "stderr_tail": proc.stderr[-600:] if proc.returncode else ""}


async def run_one_inproc(root: Path, fp: FakeProvider, model: str,
                         extra: dict[str, str]) -> dict[str, Any]:
    """The job through ``run_job`` (what ``gliding run`` calls) in this process."""
    from gliding.config.loader import load_settings
    from gliding.config.task import load_task
    from gliding.daemon.compose import run_job
    from gliding.errors import GlidingError, ProviderUnavailable

    settings = load_settings(env={**SETTINGS, **extra, "GLIDING_LLM__API_BASE": fp.url},
                             overrides={"data_dir": str(root / "data")})
    retries: collections.Counter[str] = collections.Counter()
    fallbacks = 0

    def on_event(event: Any) -> None:
        nonlocal fallbacks
        if event.event == "llm.retry":
            retries[event.data["fault"]] += 1
        elif event.event == "llm.fallback":
            fallbacks += 1

    started = time.monotonic()
    code, outcome, error = 1, "none", ""
    try:
        handle = await run_job(load_task(root / "task.yaml"), settings, model=model,
                               on_event=on_event)
        assert handle.report is not None
        outcome = handle.report.outcome
        code = 0 if outcome == "success" else 1
    except ProviderUnavailable as exc:
        outcome, error = "interrupted", exc.message
    except GlidingError as exc:
        outcome, error = "error", exc.message
    wall = time.monotonic() - started
    return {"code": code, "outcome": outcome, "wall_s": wall, **_job_files(root),
            "retries": dict(retries), "fallbacks": fallbacks, "injected": dict(fp.counts),
            "stderr_tail": error[-600:]}


def _job_files(root: Path) -> dict[str, Any]:
    log = root / "ws" / "log.txt"
    lines = log.read_text().splitlines() if log.exists() else []
    answered: collections.Counter[str] = collections.Counter()
    for job_dir in (root / "data" / "jobs").glob("*"):
        with Archive.open(root / "data", job_dir.name, create=False) as archive:
            answered.update(c.model for c in archive.calls())
    return {"executions": len(lines), "distinct": len(set(lines)),
            "answered_by": dict(answered)}


def batch(workdir: Path, name: str, jobs: int, plan: Any, *, parallel: int, latency: float,
          mode: str, model: str = "openai/fake-model", extra: dict[str, str] | None = None
          ) -> dict[str, Any]:
    """``jobs`` jobs, ``parallel`` at once, each against its own fake provider; ``plan(i)``
    is job i's FaultPlan (or None)."""
    roots = [workdir / name / f"job{i:02d}" for i in range(jobs)]
    for root in roots:
        write_job(root)
    providers = [FakeProvider(root / "replies.yaml", faults=plan(i), latency_s=latency).start()
                 for i, root in enumerate(roots)]
    started = time.monotonic()
    try:
        if mode == "cli":
            with ThreadPoolExecutor(parallel) as pool:
                results = list(pool.map(lambda i: run_one(roots[i], providers[i], model,
                                                          extra or {}), range(jobs)))
        else:
            results = anyio.run(_inproc, roots, providers, parallel, model, extra or {})
    finally:
        for fp in providers:
            fp.stop()
    wall = time.monotonic() - started
    injected: collections.Counter[str] = collections.Counter()
    retries: collections.Counter[str] = collections.Counter()
    answered: collections.Counter[str] = collections.Counter()
    for r in results:
        injected.update({k: v for k, v in r["injected"].items() if k != "ok"})
        retries.update(r["retries"])
        answered.update(r["answered_by"])
    failures = [r for r in results if not (r["code"] == 0 and r["outcome"] == "success")]
    return {
        "jobs": jobs,
        "succeeded": jobs - len(failures),
        "interrupted": sum(r["outcome"] == "interrupted" for r in results),
        "tool_executions": sum(r["executions"] for r in results),
        "distinct_tool_calls": sum(r["distinct"] for r in results),
        "tools_reexecuted": sum(r["executions"] - r["distinct"] for r in results),
        "tools_lost": sum(STEPS - r["distinct"] for r in results),
        "model_calls_answered": sum(sum(r["answered_by"].values()) for r in results),
        "faults_injected": dict(sorted(injected.items())),
        "retries_by_fault": dict(sorted(retries.items())),
        "fallbacks": sum(r["fallbacks"] for r in results),
        "answered_by": dict(answered),
        "job_wall_s_median": round(statistics.median(r["wall_s"] for r in results), 3),
        "batch_wall_s": round(wall, 3),
        "failures": [{k: r[k] for k in ("code", "outcome", "stderr_tail")}
                     for r in failures][:3],
    }


async def _inproc(roots: list[Path], providers: list[FakeProvider], parallel: int, model: str,
                  extra: dict[str, str]) -> list[dict[str, Any]]:
    limiter = anyio.CapacityLimiter(parallel)
    results: list[dict[str, Any]] = [{} for _ in roots]

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await run_one_inproc(roots[i], providers[i], model, extra)

    async with anyio.create_task_group() as tg:
        for i in range(len(roots)):
            tg.start_soon(one, i)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--mode", choices=("inproc", "cli"), default="inproc")
    args = parser.parse_args()
    configure_logging("error", "console")  # inproc: the jobs' retries are counted, not logged
    os.environ.setdefault("OPENAI_API_KEY", "dummy")  # inproc: litellm reads it here
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        os.environ.pop(name, None)  # the fake providers are on loopback
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-provider-faults-"))

    if args.mode == "inproc":  # litellm's import and the first job's set-up are not measured
        batch(workdir, "warm-up", 1, lambda i: None, parallel=1, latency=args.latency,
              mode=args.mode)
    runs = []
    for run in range(args.runs):
        base = batch(workdir, f"run{run}-baseline", args.jobs, lambda i: None,
                     parallel=args.parallel, latency=args.latency, mode=args.mode)
        faulted = batch(workdir, f"run{run}-faults", args.jobs,
                        lambda i, run=run: FaultPlan(rate=args.fault_rate,
                                                     seed=args.seed * 100_000 + run * 1000 + i,
                                                     slow_s=SLOW_S),
                        parallel=args.parallel, latency=args.latency, mode=args.mode)
        runs.append({"baseline": base, "faults": faulted,
                     "faults_injected_total": sum(faulted["faults_injected"].values()),
                     "added_job_wall_s": round(faulted["job_wall_s_median"]
                                               - base["job_wall_s_median"], 3),
                     "added_batch_wall_s": round(faulted["batch_wall_s"]
                                                 - base["batch_wall_s"], 3)})
        print(f"run {run + 1}/{args.runs}: {faulted['succeeded']}/{args.jobs} succeeded, "
              f"{faulted['tools_reexecuted']} re-executed, faults {faulted['faults_injected']}",
              file=sys.stderr)
    down = batch(workdir, "primary-down", args.jobs,
                 lambda i: FaultPlan(down_models=("primary",)), parallel=args.parallel,
                 latency=args.latency, mode=args.mode, model="openai/primary",
                 extra={"GLIDING_LLM__FALLBACKS": "openai/fallback-model"})

    def median(key: str, part: str = "faults") -> float:
        return round(statistics.median(r[part][key] if part else r[key] for r in runs), 3)

    emit({
        "benchmark": "provider_faults",
        "jobs": args.jobs, "fault_rate": args.fault_rate, "repeats": args.runs, "mode": args.mode,
        "parallel": args.parallel, "latency_s": args.latency, "steps_per_job": STEPS,
        "model_calls_per_job": STEPS + 5, "settings": SETTINGS, "slow_fault_s": SLOW_S,
        "fault_mix": "429, 429 with Retry-After 1 s, 500, 529, dropped connection, slow reply",
        "median": {
            "succeeded": median("succeeded"), "interrupted": median("interrupted"),
            "tools_reexecuted": median("tools_reexecuted"),
            "tools_lost": median("tools_lost"),
            "faults_injected": median("faults_injected_total", ""),
            "baseline_job_wall_s": median("job_wall_s_median", "baseline"),
            "faults_job_wall_s": median("job_wall_s_median"),
            "added_job_wall_s": median("added_job_wall_s", ""),
            "baseline_batch_wall_s": median("batch_wall_s", "baseline"),
            "faults_batch_wall_s": median("batch_wall_s"),
            "added_batch_wall_s": median("added_batch_wall_s", ""),
        },
        "runs": runs,
        "primary_down": down,
        "workdir": str(workdir),
    }, args.out)


if __name__ == "__main__":
    main()
