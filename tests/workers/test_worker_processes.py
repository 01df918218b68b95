"""Real processes: `gliding worker`s that reach a job only through mosquitto (L0 over the broker,
the blackboard through an `oxigraph serve` endpoint), a worker killed with -9 in the middle of
its assignment (another one finishes it, no archived step runs again), and the daemon handing
its jobs' agents to a worker (`gliding submit --wait`)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding.testing.servers import Mosquitto, mosquitto, oxigraph_serve

GLIDING = Path(sys.executable).parent / "gliding"
STEPS = 4
TASK = f"""\
goal: Append step-1 .. step-{STEPS} to log.txt
workspace: ws
pipeline: [PA, DA, CA, AA]
checks:
  - command: "test $(sort -u log.txt | wc -l) -eq {STEPS}"
"""
REPLIES = (
    "PA:\n  - finish: {steps: [append]}\nDA:\n"
    "  - knowledge_query: {sparql: \"SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }\"}\n"
    + "".join(f'  - bash: {{command: "echo step-{k} >> log.txt && sleep 0.6"}}\n'
              for k in range(1, STEPS + 1))
    + "  - finish: {summary: done}\nCA:\n  - run_checks: {}\n  - finish: {notes: ok}\n"
    "AA:\n  - finish: {decision: done, report: ok}\n")


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mosquitto, str]]:
    location = tmp_path_factory.mktemp("oxigraph")
    with mosquitto() as broker, oxigraph_serve(location) as endpoint:
        yield broker, endpoint


def env_for(broker: Mosquitto, endpoint: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "GLIDING_BUS__URL": broker.url,
            "GLIDING_DAEMON__AGENTS": "workers", "GLIDING_DAEMON__HEARTBEAT_S": "0.3",
            "GLIDING_DAEMON__LEASE_S": "2", "GLIDING_MEMORY__BLACKBOARD__URL": endpoint,
            "GLIDING_MEMORY__VECTORS__ENABLED": "false"}


def start_worker(tmp: Path, env: dict[str, str], name: str) -> tuple[subprocess.Popen[str], Path]:
    """Enrol ``name`` (its key from the root key of ``data``, as an operator does on the
    daemon's host) and start it with that key only."""
    key = tmp / f"{name}.bus.key"
    if not key.exists():
        subprocess.run([str(GLIDING), "worker", "init", name, "--out", str(key), "--data-dir",
                        "data"], cwd=tmp, env=env, check=True, capture_output=True, timeout=60)
    log = tmp / f"{name}.log"
    with log.open("w") as sink:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([str(GLIDING), "worker", "--remote", "--data-dir", name,
                                 "--roles", "PA,DA,CA,AA"], cwd=tmp,
                                env={**env, "GLIDING_BUS__KEY_FILE": str(key)}, text=True,
                                stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "serving PA,DA,CA,AA" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc, log


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sleeping() -> bool:
    """Whether a command of the interrupt test (``sleep 60 && echo late``) still runs."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"echo late >> log.txt" in f.read():
                    return True
        except OSError:
            continue
    return False


def archived_results(tmp: Path) -> int:
    dbs = list((tmp / "data" / "jobs").glob("*/archive.sqlite3"))
    if not dbs:
        return 0
    db = sqlite3.connect(dbs[0])
    try:
        return int(db.execute("SELECT COUNT(*) FROM entries WHERE kind = 'result' AND "
                              "iri LIKE '%/result/DA%'").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        db.close()


@pytest.mark.heavy
@pytest.mark.timeout(240)
def test_a_worker_killed_mid_assignment_is_replaced(tmp_path: Path,
                                                    services: tuple[Mosquitto, str]) -> None:
    broker, endpoint = services
    env = env_for(broker, endpoint)
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    first, first_log = start_worker(tmp_path, env, "w1")
    second = None
    try:
        job = subprocess.Popen([str(GLIDING), "run", "task.yaml", "--model",
                                "scripted:replies.yaml", "--data-dir", "data", "--json"],
                               cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while archived_results(tmp_path) < 3:  # knowledge_query and two steps are archived
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, first_log.read_text()
            time.sleep(0.02)
        # killed at once, mid-assignment: a second worker started first could take seconds
        # to come up on a loaded machine, while the first finished its assignment meanwhile
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        done_before = archived_results(tmp_path) - 1  # bash steps archived before the kill
        second, second_log = start_worker(tmp_path, env, "w2")
        out, err = job.communicate(timeout=150)
    finally:
        stop(first)
        if second is not None:
            stop(second)
    assert job.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["outcome"] == "success"
    lines = (tmp_path / "ws" / "log.txt").read_text().split()
    assert sorted(set(lines)) == [f"step-{k}" for k in range(1, STEPS + 1)]
    for k in range(1, done_before + 1):  # archived before the kill: never run again
        assert lines.count(f"step-{k}") == 1, lines
    assert len(lines) <= STEPS + 1  # at most the step in flight at the kill ran twice
    # the second worker's agent replayed what the first archived and took the job on
    assert "work.lapsed" in err
    # the progress says which worker ran what: the job's grant and the worker's own start
    assert re.search(r"^\[DA\] granted to worker \S*w1\S* \(cycle 1", err, re.MULTILINE), err
    assert re.search(r"^\[DA\] started \(cycle 1, attempt \d+\) on worker \S*w2", err,
                     re.MULTILINE), err
    assert not (tmp_path / "w1" / "jobs").exists() and not (tmp_path / "w2" / "jobs").exists()
    with sqlite3.connect(next((tmp_path / "data" / "jobs").glob("*/archive.sqlite3"))) as db:
        turns = [r[0] for r in db.execute("SELECT iri FROM entries WHERE kind = 'turn'")]
        calls = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        query = db.execute("SELECT content FROM entries WHERE iri LIKE '%/result/DA-1-0'"
                           ).fetchone()
    assert len(turns) == len(set(turns)) == calls  # each turn archived and paid once
    assert query is not None and b"n" in bytes(query[0])  # the board answered through the endpoint


@pytest.mark.heavy
@pytest.mark.timeout(240)
def test_the_daemon_hands_its_jobs_agents_to_a_worker(tmp_path: Path,
                                                      services: tuple[Mosquitto, str]) -> None:
    broker, endpoint = services
    env = env_for(broker, endpoint)
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    worker, worker_log = start_worker(tmp_path, env, "w1")
    daemon = subprocess.Popen([str(GLIDING), "daemon", "--data-dir", "data", "--port", "0"],
                              cwd=tmp_path, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / "daemon.json").exists():
            assert daemon.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        submitted = subprocess.run([str(GLIDING), "submit", "task.yaml", "--model",
                                    f"scripted:{tmp_path / 'replies.yaml'}", "--wait",
                                    "--data-dir", "data"], cwd=tmp_path, env=env, text=True,
                                   capture_output=True, timeout=180)
    finally:
        stop(daemon)
        stop(worker)
    assert submitted.returncode == 0, submitted.stderr[-3000:] + worker_log.read_text()[-3000:]
    lines = (tmp_path / "ws" / "log.txt").read_text().split()
    assert lines == [f"step-{k}" for k in range(1, STEPS + 1)]


@pytest.mark.heavy
@pytest.mark.timeout(240)
def test_an_interrupt_stops_a_worker_s_call_and_a_steer_runs_the_job_on(
        tmp_path: Path, services: tuple[Mosquitto, str]) -> None:
    broker, endpoint = services
    env = env_for(broker, endpoint)
    (tmp_path / "task.yaml").write_text(TASK.replace(f"-eq {STEPS}", "-ge 1"))
    (tmp_path / "replies.yaml").write_text(
        "PA:\n  - finish: {steps: [append]}\nDA:\n"
        '  - bash: {command: "echo step-1 >> log.txt && sleep 60 && echo late >> log.txt"}\n'
        '  - bash: {command: "echo step-2 >> log.txt"}\n  - finish: {summary: done}\n'
        "CA:\n  - run_checks: {}\n  - finish: {notes: ok}\n"
        "AA:\n  - finish: {decision: done, report: ok}\n")
    worker, worker_log = start_worker(tmp_path, env, "w1")
    daemon = subprocess.Popen([str(GLIDING), "daemon", "--data-dir", "data", "--port", "0"],
                              cwd=tmp_path, env=env, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)

    def gliding(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GLIDING), *args, "--data-dir", "data"], cwd=tmp_path,
                              env=env, text=True, capture_output=True, timeout=60)

    def state(job: str) -> str:
        return gliding("status", job).stdout.split("state:")[1].split()[0]

    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / "daemon.json").exists():
            assert daemon.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        sent = gliding("submit", "task.yaml", "--model", f"scripted:{tmp_path / 'replies.yaml'}")
        job = sent.stdout.split()[0]
        log = tmp_path / "ws" / "log.txt"
        deadline = time.monotonic() + 120
        while not log.exists():
            assert time.monotonic() < deadline, worker_log.read_text()[-3000:]
            time.sleep(0.05)
        asked = time.monotonic()
        assert gliding("interrupt", job).returncode == 0
        while state(job) != "paused":
            assert time.monotonic() - asked < 50, gliding("logs", job).stdout
            time.sleep(0.1)
        while sleeping():  # the worker stopped the call: its command is gone
            assert time.monotonic() - asked < 50, worker_log.read_text()[-3000:]
            time.sleep(0.1)
        steered = gliding("steer", job, "The sleep was cut off: go on")
        assert steered.returncode == 0, steered.stderr
        deadline = time.monotonic() + 120
        while state(job) != "finished":
            assert time.monotonic() < deadline, gliding("logs", job).stdout
            time.sleep(0.2)
        status, logs = gliding("status", job).stdout, gliding("logs", job).stdout
    finally:
        stop(daemon)
        stop(worker)
    assert "finished (success)" in status, logs
    assert log.read_text().split() == ["step-1", "step-2"]  # the sleep's tail never ran
    assert "paused: paused by an interrupt request" in logs
    assert "steered: The sleep was cut off: go on" in logs
    assert re.search(r"\[DA\] started \(cycle 1, attempt 0\) on worker w1", logs), logs
