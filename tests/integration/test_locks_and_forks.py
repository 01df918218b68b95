"""A job's locks are free the moment the job lets them go, even while a child this process
forked (a blackboard query runs in one) still lives: the child drops its copies at the fork."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gliding.daemon.jobs import JobLock, WorkspaceLock


def test_a_released_lock_is_free_while_a_forked_child_still_runs(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    workspace = WorkspaceLock(tmp_path / "data", tmp_path / "ws", "j1").acquire()
    job = JobLock(tmp_path / "job").acquire()
    pid = os.fork()
    if pid == 0:  # the child outlives both releases below
        time.sleep(3)
        os._exit(0)
    try:
        workspace.release()
        job.release()

        again = WorkspaceLock(tmp_path / "data", tmp_path / "ws", "j2").acquire()
        job_again = JobLock(tmp_path / "job").acquire()
        again.release()
        job_again.release()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
