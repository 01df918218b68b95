"""Load on ``gliding daemon``: many jobs submitted at once through its HTTP API.

    .venv/bin/python scripts/bench_daemon_load.py --jobs 100 --runs 3 --out r.json
        [--max-jobs 4] [--workdir DIR]

Each run starts a daemon in a subprocess on its own temporary data directory (``--port 0``:
the port is read from ``daemon.json``), submits ``--jobs`` jobs at once (one ``POST /v1/jobs``
each, all in flight together), waits until every job has ended and stops the daemon with
SIGTERM. A job is a DA-only task on the scripted model (``scripted:replies.yaml``) that writes
one file (``write_file``) and finishes, each in its own workspace; the command sandbox is the
default (bubblewrap), the embedding model is off (``memory.vectors.enabled: false``: the
jobs recall nothing).

Measured per run, then the median over runs:

    succeeded                     jobs whose outcome is success (the target: all)
    jobs_per_s                    jobs / (last job's end − first submission)
    submit_ms_p50 / _p99          how long a POST /v1/jobs took (validation and queueing)
    submit_to_first_turn_ms_p50 / _p99
                                  the job's first ``turn`` event (its first agent turn done:
                                  the model answered and the turn was archived) minus the
                                  moment its POST was sent; it includes the wait in the queue
                                  behind the jobs ahead (at most ``--max-jobs`` run at once)
    daemon_rss_mb_peak            the daemon process's peak resident memory (VmHWM), MiB

JSON on stdout and in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gliding.bench.stats import emit, percentile

GLIDING = Path(sys.executable).parent / "gliding"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "GLIDING_MEMORY__VECTORS__ENABLED": "false"}
REPLIES = """\
DA:
  - write_file: {path: out.txt, content: "done\\n"}
  - finish: {summary: wrote out.txt}
"""
TASK = """\
goal: Write out.txt
workspace: ws{n}
pipeline: [DA]
checks:
  - file_exists: out.txt
"""
ENDED = ("finished", "cancelled", "interrupted")


def start_daemon(root: Path, data: Path, log: Path, *extra: str,
                 env: dict[str, str] | None = None
                 ) -> tuple[subprocess.Popen[bytes], dict[str, Any], str]:
    """``gliding daemon`` on ``data``; its process, daemon.json and token once it listens."""
    info_file = data / "daemon.json"
    if info_file.exists():
        info_file.unlink()  # a stale one a killed daemon left
    with log.open("ab") as out:
        proc = subprocess.Popen([str(GLIDING), "daemon", "--data-dir", str(data), "--port",
                                 "0", *extra], cwd=root, env=env or ENV, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError):
            time.sleep(0.02)
            continue
        if info.get("pid") == proc.pid:
            return proc, info, (data / "daemon.token").read_text().strip()
    raise SystemExit(f"the daemon did not start: {log.read_text()[-2000:]}")


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory (VmHWM) of a live process, MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def one_run(root: Path, jobs: int, max_jobs: int) -> dict[str, Any]:
    data = root / "data"
    (root / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    proc, info, token = start_daemon(root, data, root / "daemon.log", "--max-jobs",
                                     str(max_jobs))
    peak = 0.0
    try:
        limits = httpx.Limits(max_connections=jobs + 10)
        async with httpx.AsyncClient(base_url=info["url"], trust_env=False, limits=limits,
                                     headers={"Authorization": f"Bearer {token}"},
                                     timeout=httpx.Timeout(300.0)) as client:
            model = f"scripted:{root / 'replies.yaml'}"

            async def submit(n: int) -> tuple[str, float, float]:
                sent = time.time()
                answer = await client.post("/v1/jobs", json={
                    "task": TASK.format(n=n), "name": "task.yaml", "model": model,
                    "base_dir": str(root)})
                answer.raise_for_status()
                return str(answer.json()["job"]), sent, time.time()

            first = time.time()
            submitted = await asyncio.gather(*(submit(n) for n in range(jobs)))
            states: dict[str, dict[str, Any]] = {}
            while True:
                peak = max(peak, peak_rss_mb(proc.pid))
                listed = (await client.get("/v1/jobs", params={"limit": 1000})).json()
                states = {j["job"]: j for j in listed["jobs"]}
                if all(states.get(job, {}).get("state") in ENDED for job, _s, _a in submitted):
                    break
                await asyncio.sleep(0.2)
            peak = max(peak, peak_rss_mb(proc.pid))
            first_turn = []
            for job, sent, _answered in submitted:
                text = (await client.get(f"/v1/jobs/{job}/events",
                                         params={"follow": "false"})).text
                for line in text.splitlines():
                    if line.startswith("data:"):
                        record = json.loads(line[5:])
                        if record["event"] == "turn":
                            first_turn.append((record["at"] - sent) * 1000)
                            break
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    last = max(float(s["finished"] or 0) for s in states.values())
    succeeded = sum(1 for s in states.values() if s["outcome"] == "success")
    submit_ms = [(answered - sent) * 1000 for _j, sent, answered in submitted]
    return {
        "jobs": jobs, "succeeded": succeeded, "wall_s": round(last - first, 3),
        "jobs_per_s": round(jobs / (last - first), 3),
        "submit_ms_p50": round(percentile(submit_ms, 50), 1),
        "submit_ms_p99": round(percentile(submit_ms, 99), 1),
        "submit_to_first_turn_ms_p50": round(percentile(first_turn, 50), 1),
        "submit_to_first_turn_ms_p99": round(percentile(first_turn, 99), 1),
        "first_turns_seen": len(first_turn),
        "daemon_rss_mb_peak": round(peak, 1), "daemon_exit_code": code,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-jobs", type=int, default=4, help="daemon.max_jobs")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the runs' directories go (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    base = opts.workdir or Path(tempfile.mkdtemp(prefix="gliding-daemon-load-"))
    base.mkdir(parents=True, exist_ok=True)
    runs = []
    for k in range(opts.runs):
        root = base / f"run{k + 1}"
        root.mkdir()
        runs.append(asyncio.run(one_run(root, opts.jobs, opts.max_jobs)))
        print(json.dumps(runs[-1]), file=sys.stderr)
    keys = [k for k in runs[0] if isinstance(runs[0][k], int | float) and k != "jobs"]
    result: dict[str, Any] = {"jobs": opts.jobs, "runs": opts.runs, "max_jobs": opts.max_jobs}
    result |= {k: statistics.median(r[k] for r in runs) for k in keys}
    result["first_turn_event"] = "turn (the first agent turn done and archived)"
    result["per_run"] = runs
    result["workdir"] = str(base)
    emit(result, opts.out)


if __name__ == "__main__":
    main()
