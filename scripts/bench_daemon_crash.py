"""``kill -9`` of ``gliding daemon`` at random moments while it runs many jobs; restarted each
time, it must finish every job, lose none and run no archived tool step again.

    .venv/bin/python scripts/bench_daemon_crash.py --jobs 20 --kills 20 --out r.json
        [--steps 6] [--sleep 1.0] [--max-jobs 4] [--seed 0] [--workdir DIR]

``--jobs`` jobs are submitted at once through the HTTP API to a daemon on a temporary data
directory (``--port 0``). Job *i* is DA only, on the scripted model, in its own workspace: its
``--steps`` bash steps each append one marker line ``j<i>-s<k> <time>`` to ``trace.txt``
(``<time>``: ``date +%s.%N`` when the command ran) and sleep ``--sleep`` seconds, so kills land
mid-job. The daemon is killed (SIGKILL) after an uptime drawn from a seeded random
distribution (uniform between 0.3 s and 2.5 s after it listens; every kill is followed by a
restart) until ``--kills`` kills were made; then the last daemon runs the jobs to their end
and is stopped with SIGTERM.

Counted at the end, from the daemon's queue, each job's ``trace.txt`` and its L0 archive:

    finished           jobs whose queue state is ``finished`` (any outcome); succeeded: success
    lost               jobs submitted (201) that the queue no longer has, or that did not
                       finish before the deadline
    reexecuted_tools   marker lines that repeat a step whose tool result was archived before
                       the repeat ran: for step k of job i with marker lines at times
                       t1 < t2 < ... and an archived result (``kind = 'result'`` whose
                       command holds the marker) created at r, each line j >= 2 with r < tj
                       counts once. The target is 0: a step whose result is archived is
                       replayed from L0, never run again.
    rerun_unarchived   the other repeats (line j >= 2 with no result archived before it): a
                       kill between running a command and archiving its result may
                       legitimately run it again (for bash it should not: a begun call is
                       reported as interrupted instead of re-run)
    interrupted_steps  results that say the call was interrupted (cut off by a kill, not run
                       again); missing_markers: steps with no line at all (cut off before the
                       command wrote it)
    running_at_kill    the jobs the queue had running at each kill; kills_mid_job: the kills
                       with at least one (the defaults make the run outlast the kills)

With ``--workers N`` the jobs' agents run on N ``gliding worker`` processes
(``daemon.agents: workers``, a mosquitto the script starts, ``daemon.lease_s`` 2 s, the workers
sharing the daemon's data directory); ``--kill worker`` then kills a random worker at each
moment instead of the daemon (and starts it again): its assignment must be finished by another
worker, with the same counts.

JSON on stdout and in ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_daemon_load import ENV, GLIDING, start_daemon  # noqa: E402  (the sibling script)

from gliding.bench.stats import emit  # noqa: E402

UPTIME_S = (0.3, 2.5)
ENDED = ("finished", "cancelled", "interrupted")
TASK = """\
goal: Append the markers of job {i} to trace.txt
workspace: ws{i}
pipeline: [DA]
budgets:
  turns: {{DA: {turns}}}
checks:
  - file_exists: trace.txt
"""


def replies(i: int, steps: int, sleep_s: float) -> str:
    calls = "".join(
        f'  - bash: {{command: "echo j{i}-s{k} $(date +%s.%N) >> trace.txt && sleep {sleep_s}"}}\n'
        for k in range(1, steps + 1))
    return f"DA:\n{calls}  - finish: {{summary: appended every marker}}\n"


def running_now(data: Path) -> int:
    """How many jobs the queue has running (read-only, beside the daemon)."""
    db = sqlite3.connect(f"file:{data / 'daemon' / 'queue.sqlite3'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'running'")
                   .fetchone()[0])
    except sqlite3.Error:
        return -1
    finally:
        db.close()


def results_of(data: Path, job: str) -> tuple[dict[str, float], int]:
    """The archived results of ``job`` by marker (``j<i>-s<k>``) with their creation time, and
    how many say the call was interrupted."""
    path = data / "jobs" / job / "archive.sqlite3"
    if not path.is_file():
        return {}, 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT created_at, meta, content FROM entries "
                          "WHERE kind = 'result'").fetchall()
    finally:
        db.close()
    out: dict[str, float] = {}
    interrupted = 0
    for created, meta, content in rows:
        command = str((json.loads(meta).get("arguments") or {}).get("command", ""))
        if bytes(content).startswith(b"error: interrupted"):
            interrupted += 1
        if command.startswith("echo "):
            out[command.split()[1]] = float(created)
    return out, interrupted


def measure(root: Path, data: Path, i: int, job: str, steps: int) -> dict[str, Any]:
    trace = root / f"ws{i}" / "trace.txt"
    lines: dict[str, list[float]] = collections.defaultdict(list)
    if trace.exists():
        for line in trace.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                lines[parts[0]].append(float(parts[1]))
    archived, interrupted = results_of(data, job)
    reexecuted = unarchived = missing = 0
    for k in range(1, steps + 1):
        marker = f"j{i}-s{k}"
        times = sorted(lines.get(marker, []))
        if not times:
            missing += 1
        result_at = archived.get(marker)
        for t in times[1:]:
            if result_at is not None and result_at < t:
                reexecuted += 1
            else:
                unarchived += 1
    return {"job": job, "reexecuted_tools": reexecuted, "rerun_unarchived": unarchived,
            "missing_markers": missing, "interrupted_steps": interrupted,
            "marker_lines": sum(len(v) for v in lines.values())}


def start_worker(root: Path, data: Path, env: dict[str, str],
                 n: int) -> subprocess.Popen[bytes]:
    """``gliding worker`` number ``n`` on the daemon's data directory, once it serves."""
    log = root / f"worker{n}.log"
    before = log.stat().st_size if log.exists() else 0  # the log of earlier lives stays
    with log.open("ab") as out:
        proc = subprocess.Popen([str(GLIDING), "worker", "--data-dir", str(data),
                                 "--concurrency", "4"], cwd=root, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while b": serving " not in log.read_bytes()[before:]:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker {n} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--sleep", type=float, default=1.0,
                        help="seconds each step sleeps: long enough that every kill lands "
                             "while jobs run (each restart costs a daemon start)")
    parser.add_argument("--max-jobs", type=int, default=4, help="daemon.max_jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=900.0,
                        help="seconds the jobs may take after the last kill")
    parser.add_argument("--workers", type=int, default=0,
                        help="run the agents on this many `gliding worker`s (MQTT)")
    parser.add_argument("--kill", choices=("daemon", "worker"), default="daemon")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    if opts.kill == "worker" and opts.workers < 2:
        parser.error("--kill worker needs --workers 2 or more (one must take the work over)")
    rng = random.Random(opts.seed)
    root = opts.workdir or Path(tempfile.mkdtemp(prefix="gliding-daemon-crash-"))
    if root.is_dir() and any(root.iterdir()):
        parser.error(f"--workdir {root} is not empty: give a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    data, log = root / "data", root / "daemon.log"
    for i in range(opts.jobs):
        (root / f"r{i}.yaml").write_text(replies(i, opts.steps, opts.sleep), encoding="utf-8")
    extra = ("--max-jobs", str(opts.max_jobs))
    env = dict(ENV)
    stack = contextlib.ExitStack()
    workers: list[subprocess.Popen[bytes]] = []
    if opts.workers:
        from gliding.testing.servers import mosquitto

        broker = stack.enter_context(mosquitto())
        env.update({"GLIDING_BUS__URL": broker.url, "GLIDING_DAEMON__AGENTS": "workers",
                    "GLIDING_DAEMON__HEARTBEAT_S": "0.5", "GLIDING_DAEMON__LEASE_S": "2"})
        data.mkdir(parents=True, exist_ok=True)
        workers = [start_worker(root, data, env, n) for n in range(opts.workers)]

    started = time.monotonic()
    proc, info, token = start_daemon(root, data, log, *extra, env=env)
    headers = {"Authorization": f"Bearer {token}"}
    jobs: dict[int, str] = {}
    with httpx.Client(base_url=info["url"], trust_env=False, headers=headers,
                      timeout=120.0) as client:
        for i in range(opts.jobs):
            answer = client.post("/v1/jobs", json={
                "task": TASK.format(i=i, turns=opts.steps + 2), "name": f"t{i}.yaml",
                "model": f"scripted:{root / f'r{i}.yaml'}", "base_dir": str(root)})
            answer.raise_for_status()
            jobs[i] = answer.json()["job"]
    kills, kill_at, running_at_kill = 0, [], []
    while kills < opts.kills:
        uptime = rng.uniform(*UPTIME_S)
        time.sleep(uptime)
        running_at_kill.append(running_now(data))
        if opts.kill == "worker":
            n = rng.randrange(len(workers))
            workers[n].send_signal(signal.SIGKILL)
            workers[n].wait(timeout=60)
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        kills += 1
        kill_at.append(round(time.monotonic() - started, 3))
        if opts.kill == "worker":
            workers[n] = start_worker(root, data, env, n)
        else:
            proc, info, token = start_daemon(root, data, log, *extra, env=env)
    after_kills = time.monotonic()
    states: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=info["url"], trust_env=False, headers=headers,
                      timeout=120.0) as client:
        while time.monotonic() - after_kills < opts.deadline:
            listed = client.get("/v1/jobs", params={"limit": 1000}).json()
            states = {j["job"]: j for j in listed["jobs"]}
            if all(states.get(job, {}).get("state") in ENDED for job in jobs.values()):
                break
            time.sleep(0.2)
    wall = time.monotonic() - started
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    stack.close()

    per_job = []
    for i, job in jobs.items():
        entry = states.get(job)
        per_job.append({"i": i, "state": entry and entry["state"],
                        "outcome": entry and entry["outcome"], "runs": entry and entry["runs"],
                        **measure(root, data, i, job, opts.steps)})
    finished = sum(1 for j in per_job if j["state"] == "finished")
    total = {k: sum(j[k] for j in per_job) for k in ("reexecuted_tools", "rerun_unarchived",
                                                      "interrupted_steps", "missing_markers")}
    result = {
        "jobs": opts.jobs, "finished": finished,
        "succeeded": sum(1 for j in per_job if j["outcome"] == "success"),
        "lost": sum(1 for j in per_job if j["state"] != "finished"),
        **total, "kills": kills, "restarts": kills,
        "runs": sum(int(j["runs"] or 0) for j in per_job),
        "steps": opts.steps, "wall_s": round(wall, 3), "daemon_exit_code": code,
        "kills_mid_job": sum(1 for n in running_at_kill if n > 0),
        "killed": opts.kill, "workers": opts.workers, "kill_at_s": kill_at,
        "running_at_kill": running_at_kill, "seed": opts.seed,
        "per_job": per_job, "workdir": str(root),
    }
    emit(result, opts.out)


if __name__ == "__main__":
    main()
