"""No crash path hangs: a job that crashes at any named point (``gliding.core.crashpoints``)
ends with its status recorded, four such jobs running side by side in one process, and
leaves no thread and no child process behind. Both kinds of crash: a bug (an
``Exception``, which the job records as its stop) and a "kill" (a ``BaseException`` nothing
handles, the stand-in for ``kill -9`` that once left ingestion's thread waiting forever on
an event loop that had stopped serving it)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.roles import role_names
from gliding.config.task import Task
from gliding.core.checks import CommandSucceeds
from gliding.core.crashpoints import (
    Injected,
    InjectedCrash,
    InjectedKill,
    armed,
    crash_point,
    every_point,
)
from gliding.daemon.compose import run_job
from gliding.daemon.jobs import list_jobs
from gliding.llm.scripted import FileScriptedLLM

POINTS = every_point(role_names())

REPLIES = """\
PA:
  - finish: {steps: [one, two]}
DA:
  - bash: {command: "echo one >> log.txt"}
  - bash: {command: "echo two >> log.txt"}
  - finish: {summary: two lines}
CA:
  - run_checks: {}
  - finish: {notes: ok}
AA:
  - finish: {decision: done, report: two lines}
"""
# hang protection only, not a speed claim: a job still running after this long is cancelled
# and reported as not ended (a healthy one ends in seconds, even on a loaded machine)
HANG_S = 90.0
# the statuses a job may end with; "running" (nothing recorded) is not among them
RECORDED = {"success", "failed", "escalated", "budget_exceeded", "error", "interrupted"}


def job_parts(tmp: Path) -> tuple[Task, Any, Path]:
    tmp.mkdir(parents=True)
    (tmp / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    task = Task(goal="Append one and two to log.txt", workspace=tmp / "ws", model=None,
                pipeline=("PA", "DA", "CA", "AA"), turns={}, prompt_tokens=None,
                cost_usd=None, wall_time_s=60,
                checks=(CommandSucceeds("test \"$(cat log.txt)\" = \"$(printf 'one\\ntwo')\""),),
                source=tmp / "task.yaml")
    settings = load_settings(overrides={"data_dir": str(tmp / "data"),
                                        "memory.vectors.enabled": False,
                                        "memory.coherence.lease_s": 1.0}, env={})
    return task, settings, tmp / "replies.yaml"


async def crashing_job(tmp: Path, point: str, kind: Injected,
                       ended: dict[str, str]) -> None:
    """Run one job armed to crash at ``point``; note what it ended with, once it has."""
    task, settings, replies = await anyio.to_thread.run_sync(job_parts, tmp)
    with armed({point: 1}, kind=kind) as hits, anyio.move_on_after(HANG_S):
        try:
            await run_job(task, settings, llm=FileScriptedLLM(replies))
        except Exception as exc:  # noqa: BLE001 - the job's error, once its stop was recorded
            assert "injected crash" in str(exc) or isinstance(exc, InjectedCrash), exc
            ended[point] = repr(exc)
        except BaseException as exc:  # noqa: B036 - the kill, maybe grouped; not cancellation
            if "injected kill" not in repr(exc):
                raise
            ended[point] = repr(exc)
        else:
            ended[point] = "no error"
        assert hits.get(point) == 1, f"{point} was never passed ({hits})"


def children() -> set[int]:
    """This process's child processes."""
    mine = str(os.getpid())
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == mine:
            out.add(int(entry.name))
    return out


def test_every_point_is_named_and_an_unknown_one_is_refused() -> None:
    assert len(POINTS) >= 10
    with pytest.raises(ValueError, match="unknown crash point"), armed({"nowhere": 1}):
        pass
    crash_point("ingest.write")  # not armed: nothing happens
    with armed({"ingest.write": 2}) as hits:
        crash_point("ingest.write")
        with pytest.raises(InjectedCrash, match="ingest.write"):
            crash_point("ingest.write")
    assert hits == {"ingest.write": 2}


@pytest.mark.heavy
@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind", [InjectedCrash, InjectedKill], ids=["crash", "kill"])
@pytest.mark.parametrize("batch", range(0, len(POINTS), 4), ids=lambda b: f"points{b}")
def test_a_job_crashing_at_any_point_ends_recorded_and_leaves_nothing_behind(
        tmp_path: Path, batch: int, kind: Injected) -> None:
    points = POINTS[batch:batch + 4]
    threads_before = set(threading.enumerate())  # the runners below are new threads too
    children_before = children()
    ended: dict[str, str] = {}

    # each job on an event loop of its own, as `gliding run` processes have, side by side
    runners = [threading.Thread(target=anyio.run, name=f"job-{point}",
                                args=(crashing_job, tmp_path / f"job{i}", point, kind, ended))
               for i, point in enumerate(points)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(HANG_S + 30)

    assert set(ended) == set(points), f"did not end: {set(points) - set(ended)}"
    for i, point in enumerate(points):
        jobs = list_jobs(tmp_path / f"job{i}" / "data")
        assert len(jobs) == 1 and jobs[0].status in RECORDED, (point, jobs)
        job, said = jobs[0], ended[point]
        if kind is InjectedKill:  # nothing handles it: found later as interrupted, no lock held
            assert f"injected kill at {point}" in said and job.status == "interrupted", said
        elif said != "no error":  # the job stopped on it and recorded why
            assert f"injected crash at {point}" in said, said
            assert f"injected crash at {point}" in job.stopped_by, (point, job)
        else:  # a role's crash fails the role; the job ends with that outcome recorded
            assert point.startswith("role.") and job.status == "error", (point, job)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        born = children() - children_before
        if not left and not born:
            break
        time.sleep(0.1)
    assert not left, f"threads left behind: {[t.name for t in left]}"
    assert not born, f"child processes left behind: {sorted(born)}"
