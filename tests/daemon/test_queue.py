"""The daemon's persisted state: the job queue (its transitions, its order, and what survives
``kill -9``, committed or not), the token file, daemon.json and the one-daemon lock."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.daemon import queue as q
from gliding.daemon.jobs import DaemonBusy, DaemonLock
from gliding.daemon.queue import JobQueue, JobStateError
from gliding.daemon.reconcile import open_queue
from gliding.errors import ArchiveError, NotFoundError


def add(queue: JobQueue, job: str, now: float = 1.0) -> q.QueuedJob:
    return queue.add(job, name="task.yaml", task="goal: x\n", base_dir="/tmp",
                     workspace=f"/tmp/{job}", goal="x", model=None, now=now)


def test_a_job_is_queued_then_runs_then_finishes(tmp_path: Path) -> None:
    queue = JobQueue.open(tmp_path)
    entry = add(queue, "20260101-000000-aaaaaa")
    assert (entry.state, entry.runs, entry.started) == ("queued", 0, None)
    running = queue.move(entry.job, q.RUNNING, now=2.0)
    assert (running.state, running.runs, running.started) == ("running", 1, 2.0)
    done = queue.move(entry.job, q.FINISHED, now=3.0, outcome="success")
    assert (done.state, done.outcome, done.finished) == ("finished", "success", 3.0)
    with pytest.raises(JobStateError, match="is finished"):
        queue.move(entry.job, q.QUEUED)
    with pytest.raises(NotFoundError):
        queue.move("20260101-000000-bbbbbb", q.RUNNING)
    with pytest.raises(JobStateError, match="taken"):
        add(queue, entry.job)
    queue.close()


def test_newest_first_and_the_ones_to_resume_start_first(tmp_path: Path) -> None:
    queue = JobQueue.open(tmp_path)
    jobs = [add(queue, f"20260101-00000{i}-aaaaaa", now=i).job for i in range(4)]
    assert [e.job for e in queue.newest(10)] == jobs[::-1]
    assert [e.job for e in queue.newest(2, 1)] == [jobs[2], jobs[1]]
    assert queue.count() == 4
    queue.move(jobs[2], q.RUNNING, now=5.0)
    queue.move(jobs[2], q.QUEUED)  # the daemon died while it ran: queued again
    assert [e.job for e in queue.pending()] == [jobs[2], jobs[0], jobs[1], jobs[3]]
    queue.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(q.STATES), max_size=12))
def test_only_the_transitions_of_the_table_happen(tmp_path_factory: pytest.TempPathFactory,
                                                  moves: list[str]) -> None:
    queue = JobQueue.open(tmp_path_factory.mktemp("q"))
    state = add(queue, "20260101-000000-aaaaaa").state
    for to in moves:
        if to in q.TRANSITIONS[state]:
            state = queue.move("20260101-000000-aaaaaa", to, now=1.0).state
            assert state == to
        else:
            with pytest.raises(JobStateError):
                queue.move("20260101-000000-aaaaaa", to, now=1.0)
        assert queue.get("20260101-000000-aaaaaa").state == state  # type: ignore[union-attr]
    queue.close()


CRASH = """\
import os, signal, sqlite3, sys
from gliding.daemon.queue import JobQueue, RUNNING
queue = JobQueue.open(__import__("pathlib").Path(sys.argv[1]))
queue.add("20260101-000000-aaaaaa", name="t", task="goal: x", base_dir="/", workspace="/w",
          goal="x", model=None, now=1.0)
queue.move("20260101-000000-aaaaaa", RUNNING, now=2.0)   # committed
db = sqlite3.connect(queue.path, isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("UPDATE jobs SET state = 'finished', outcome = 'success'")
db.execute("INSERT INTO jobs (job, name, task, base_dir, workspace, goal, state, submitted) "
           "VALUES ('20260101-000000-bbbbbb', 't', 'x', '/', '/w', 'x', 'queued', 3.0)")
os.kill(os.getpid(), signal.SIGKILL)                      # before COMMIT
"""


def test_kill9_keeps_what_was_committed_and_nothing_else(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path)], timeout=60)
    assert done.returncode == -9
    queue = JobQueue.open(tmp_path)
    found = queue.in_state(*q.STATES)
    assert [(e.job, e.state, e.runs) for e in found] == [("20260101-000000-aaaaaa", "running", 1)]
    queue.close()


def test_a_file_that_is_no_queue_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "queue.sqlite3").write_bytes(b"not a database" * 100)
    with pytest.raises(ArchiveError, match="damaged or not a queue"):
        JobQueue.open(tmp_path)


def user_version(path: Path, set_to: int | None = None) -> int:
    db = sqlite3.connect(path)
    try:
        if set_to is not None:
            db.execute(f"PRAGMA user_version = {set_to}")
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_queue_from_before_versions_is_read_as_it_is_and_stamped(tmp_path: Path) -> None:
    queue = JobQueue.open(tmp_path)
    add(queue, "20260101-000000-aaaaaa")
    queue.close()
    path = tmp_path / q.QUEUE_FILE
    assert user_version(path, set_to=0) == 0  # as every queue was before the version was kept

    queue = JobQueue.open(tmp_path)
    assert [e.job for e in queue.pending()] == ["20260101-000000-aaaaaa"]
    queue.close()
    assert user_version(path) == q.QUEUE_VERSION


def test_a_queue_of_a_newer_version_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    queue = JobQueue.open(tmp_path)
    add(queue, "20260101-000000-aaaaaa")
    queue.close()
    path = tmp_path / q.QUEUE_FILE
    newer = q.QUEUE_VERSION + 1
    user_version(path, set_to=newer)

    for opening in (lambda: JobQueue.open(tmp_path), lambda: open_queue(tmp_path, 1.0)):
        with pytest.raises(ArchiveError) as refused:
            opening()
        assert not isinstance(refused.value, q.QueueDamaged)  # so it is not rebuilt
        assert (f"the job queue {path} has version {newer}; this Gliding reads queue versions "
                f"up to {q.QUEUE_VERSION}") in str(refused.value)
    assert user_version(path) == newer
    assert sorted(p.name for p in path.parent.iterdir()) == ["queue.sqlite3"]


def test_the_token_is_made_once_private_and_kept(tmp_path: Path) -> None:
    token = q.ensure_token(tmp_path / "data")
    path = q.token_path(tmp_path / "data")
    assert len(token) >= 40 and path.stat().st_mode & 0o777 == 0o600
    assert q.ensure_token(tmp_path / "data") == token == q.read_token(tmp_path / "data")
    path.chmod(0o644)
    with pytest.raises(ArchiveError, match="may be read by others"):
        q.ensure_token(tmp_path / "data")
    with pytest.raises(ArchiveError, match="cannot read"):
        q.read_token(tmp_path / "elsewhere")


def test_daemon_json_is_whole_and_only_its_writer_removes_it(tmp_path: Path) -> None:
    assert q.read_info(tmp_path) is None
    q.write_info(tmp_path, {"pid": 1234, "url": "http://127.0.0.1:1"})
    assert q.read_info(tmp_path) == {"pid": 1234, "url": "http://127.0.0.1:1"}
    q.remove_info(tmp_path, os.getpid())  # not ours: kept
    assert json.loads((tmp_path / "daemon.json").read_text())["pid"] == 1234
    q.remove_info(tmp_path, 1234)
    assert q.read_info(tmp_path) is None
    (tmp_path / "daemon.json").write_text("{half")
    assert q.read_info(tmp_path) is None


def test_one_daemon_a_data_dir(tmp_path: Path) -> None:
    first = DaemonLock(tmp_path).acquire()
    assert DaemonLock(tmp_path).held_elsewhere()
    with pytest.raises(DaemonBusy, match=f"pid {os.getpid()}"):
        DaemonLock(tmp_path).acquire()
    first.release()
    assert not DaemonLock(tmp_path).held_elsewhere()
    DaemonLock(tmp_path).acquire().release()
