"""Kill a job with ``kill -9`` at random moments, resume it each time, and compare the end with an
uninterrupted run.

    .venv/bin/python scripts/bench_resume.py --kills 20 --out r.json [--steps 6] [--seed 0]

The job (written to a temporary directory, or ``--workdir``) runs PA → DA → CA → AA on a
scripted model (``--model scripted:replies.yaml``): DA's bash steps each append one line
``step-<k>`` to log.txt and then sleep a little, so kills land mid-job; a command check
requires every line exactly once. One uninterrupted run gives the reference outcome and the
run time T. Then jobs are started and killed at moments drawn uniformly from (0, T), resumed
with ``gliding resume JOB`` and killed again, until ``--kills`` kills were made (a job that
finishes starts the next one); the last resume of each job runs to its end.

Measured per job and in total, from the job's own files: the outcome (same as the reference?),
each step's line count in log.txt (>1: a tool re-executed; 0: a step lost), the ledger's model
calls per turn IRI (>1: a model turn paid again), the interrupted calls (bash cut off by a kill
and not re-run: the model is told instead). JSON on stdout and in ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gliding.bench.stats import emit

GLIDING = Path(sys.executable).parent / "gliding"
SLEEP_S = 0.15


def write_job(root: Path, steps: int) -> None:
    lines = " && ".join(f"grep -qx step-{k} log.txt" for k in range(1, steps + 1))
    (root / "task.yaml").write_text(
        f"goal: Append the lines step-1 .. step-{steps} to log.txt, one per step\n"
        "workspace: ws\npipeline: [PA, DA, CA, AA]\n"
        f"budgets:\n  turns: {{DA: {steps + 2}}}\n"
        "checks:\n"
        f"  - command: \"test $(wc -l < log.txt) -eq {steps} && {lines}\"\n", encoding="utf-8")
    da = "\n".join(f"  - bash: {{command: \"echo step-{k} >> log.txt && sleep {SLEEP_S}\"}}"
                   for k in range(1, steps + 1))
    (root / "replies.yaml").write_text(
        "PA:\n  - finish: {steps: [" + ", ".join(f'"append step-{k}"' for k in
                                                 range(1, steps + 1)) + "]}\n"
        f"DA:\n{da}\n  - finish: {{summary: appended every line}}\n"
        "CA:\n  - run_checks: {}\n  - finish: {notes: checked}\n"
        "AA:\n  - finish: {decision: done, report: every line is there once}\n",
        encoding="utf-8")


def gliding(root: Path, data: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([str(GLIDING), *args, "--data-dir", str(data), "-q", "--json"],
                            cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def fresh(root: Path, name: str, steps: int) -> tuple[Path, Path]:
    job_root = root / name
    job_root.mkdir()
    write_job(job_root, steps)
    return job_root, job_root / "data"


def job_id(data: Path) -> str | None:
    jobs = sorted((data / "jobs").glob("*")) if (data / "jobs").is_dir() else []
    return jobs[-1].name if jobs else None


def measure(job_root: Path, data: Path, steps: int) -> dict[str, Any]:
    log = job_root / "ws" / "log.txt"
    text = log.read_text() if log.exists() else ""
    counts = collections.Counter(text.split())
    job = job_id(data)
    db = sqlite3.connect(data / "jobs" / str(job) / "archive.sqlite3")
    try:
        turns = collections.Counter(r[0] for r in db.execute("SELECT turn_iri FROM calls"))
        contents = [bytes(c) for (c,) in db.execute(
            "SELECT content FROM entries WHERE kind = 'result'")]
        interrupted = sum(1 for c in contents if c.startswith(b"error: interrupted"))
        results = len(contents)
        status = json.loads(db.execute("SELECT value FROM job WHERE key = 'status'")
                            .fetchone()[0])
    finally:
        db.close()
    query = ("SELECT (COUNT(DISTINCT ?r) AS ?n) WHERE { GRAPH ?g { ?r a "
             "<https://gliding.dev/ns/v1#ToolResult> } }")
    out = subprocess.run([str(GLIDING), "memory", "query", query, "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=120, check=False).stdout
    on_board = int(json.loads(out.splitlines()[0])["n"]) if out.strip() else 0
    return {
        "job": job, "outcome": status, "archived_results": results,
        "results_on_board": on_board,
        "reexecuted_tools": sum(n - 1 for n in counts.values() if n > 1),
        "missing_steps": sum(1 for k in range(1, steps + 1) if counts[f"step-{k}"] == 0),
        "repaid_model_turns": sum(n - 1 for n in turns.values() if n > 1),
        "model_calls": sum(turns.values()), "interrupted_calls": interrupted,
    }


def run_to_end(root: Path, data: Path, args: list[str]) -> int:
    proc = gliding(root, data, *args)
    proc.communicate(timeout=300)
    return proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    root = opts.workdir or Path(tempfile.mkdtemp(prefix="gliding-resume-"))
    if root.is_dir() and any(root.iterdir()):
        parser.error(f"--workdir {root} is not empty: give a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    run_args = ["run", "task.yaml", "--model", "scripted:replies.yaml"]

    ref_root, ref_data = fresh(root, "reference", opts.steps)
    started = time.monotonic()
    run_to_end(ref_root, ref_data, run_args)
    period = time.monotonic() - started
    reference = measure(ref_root, ref_data, opts.steps)

    kills = resumes = 0
    jobs: list[dict[str, Any]] = []
    while kills < opts.kills:
        job_root, data = fresh(root, f"job{len(jobs) + 1}", opts.steps)
        job_kills = job_resumes = 0
        args = run_args
        while True:
            proc = gliding(job_root, data, *args)
            if args is run_args:  # a kill before the job exists would leave nothing to resume
                while job_id(data) is None and proc.poll() is None:
                    time.sleep(0.01)
            at = rng.uniform(0.0, period)
            try:
                proc.wait(timeout=at)
                finished = True
            except subprocess.TimeoutExpired:
                finished = False
            if finished or kills >= opts.kills:
                proc.communicate(timeout=300)
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            job_kills += 1
            job = job_id(data)
            if job is not None:
                args = ["resume", job]
                resumes += 1
                job_resumes += 1
        jobs.append({**measure(job_root, data, opts.steps), "kills": job_kills,
                     "resumes": job_resumes})

    result = {
        "kills": kills, "resumes": resumes, "jobs": len(jobs), "steps": opts.steps,
        "reference_outcome": reference["outcome"], "reference_wall_s": round(period, 3),
        "same_outcome": all(j["outcome"] == reference["outcome"] for j in jobs),
        "reexecuted_tools": sum(j["reexecuted_tools"] for j in jobs),
        "repaid_model_turns": sum(j["repaid_model_turns"] for j in jobs),
        "missing_steps": sum(j["missing_steps"] for j in jobs),
        "interrupted_calls": sum(j["interrupted_calls"] for j in jobs),
        "archived_results": sum(j["archived_results"] for j in jobs),
        "results_on_board": sum(j["results_on_board"] for j in jobs),
        "per_job": jobs, "seed": opts.seed, "workdir": str(root),
    }
    emit(result, opts.out)


if __name__ == "__main__":
    main()
