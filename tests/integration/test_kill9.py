"""``kill -9`` of a running job leaves its archive readable, with no corrupt entry."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gliding.memory.archive.store import Archive, archive_path

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GLIDING = str(Path(sys.executable).parent / "gliding")


def _entries(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("after_entries", [1, 4])
@pytest.mark.timeout(300)  # waits up to 120 s for the local-model job to archive entries
def test_kill_9_mid_job_leaves_a_readable_archive(tmp_path: Path, after_entries: int) -> None:
    shutil.copy(ROOT / "examples" / "hello" / "task.yaml", tmp_path / "task.yaml")
    data = tmp_path / "data"
    proc = subprocess.Popen([GLIDING, "run", str(tmp_path / "task.yaml"), "--data-dir",
                             str(data), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        db: Path | None = None
        while time.monotonic() < deadline and proc.poll() is None:
            jobs = list((data / "jobs").glob("*")) if (data / "jobs").exists() else []
            if jobs:
                db = archive_path(data, jobs[0].name)
                if _entries(db) >= after_entries:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the job ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert db is not None
    job = db.parent.name
    with Archive.open(data, job, create=False) as archive:
        assert archive.verify() == []
        items = archive.list()
        assert len(items) >= after_entries
        for item in items:
            assert archive.get(item.iri).content is not None
        first = items[0].iri
    out = subprocess.run([GLIDING, "memory", "show", first, "--data-dir", str(data)],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with Archive.open(data, job, create=False) as archive:
        assert out.stdout == archive.get(first).content
