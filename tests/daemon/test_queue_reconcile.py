"""The daemon's queue set right from the jobs' archives (``gliding/daemon/reconcile.py``): a
damaged queue file is moved aside and the queue rebuilt at the next start, with one warning
that says what was rebuilt and what is lost; a job that ends on a full disk is shown and
recorded as ``interrupted`` ("no space left on the device") even when neither its archive nor
the queue can be written, and a start after such a stop takes the ending from the archive
instead of running the job again."""

from __future__ import annotations

import errno
import os
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from gliding.daemon import queue as q
from gliding.daemon import service as service_module
from gliding.daemon.jobs import CANCELLED_BY, SUSPENDED_BY
from gliding.daemon.queue import JobQueue, QueueDamaged
from gliding.daemon.reconcile import ended_in_archive, open_queue
from gliding.errors import ArchiveError, NotFoundError
from gliding.memory.archive.store import Archive
from tests.daemon.daemon_support import (
    TASK,
    TIMEOUT_S,
    events_of,
    replies,
    serving,
    wait_event,
    wait_for,
    write_replies,
)

pytestmark = pytest.mark.timeout(300)
DISK_FULL = "no space left on the device"


def meta(tmp: Path, job: str, key: str) -> Any:
    with Archive.open(tmp / "data", job, create=False) as archive:
        return archive.get_meta(key)


def queued(service: service_module.JobService, job: str) -> q.QueuedJob:
    """What the queue file itself says of ``job``."""
    entry = service.queue.get(job)
    assert entry is not None
    return entry


async def idle(service: service_module.JobService, job: str) -> None:
    """Until ``job`` no longer runs in ``service``."""
    with anyio.fail_after(TIMEOUT_S):
        while job in service.running_jobs() or (await service.get(job)).state == q.QUEUED:
            await anyio.sleep(0.02)


# -- a damaged queue ------------------------------------------------------------------------------

def three_jobs(tmp: Path) -> tuple[str, str, str]:
    """A daemon (one job at a time) that finished one job, was stopped while it ran a second,
    with a third still queued: their ids."""
    fast = write_replies(tmp, "fast.yaml", replies())
    slow = write_replies(tmp, "slow.yaml", replies(steps=3, sleep_s=0.4))

    async def main() -> tuple[str, str, str]:
        async with serving(tmp, max_jobs=1) as service:
            done = (await service.submit(TASK.format(workspace="a"), model=fast)).job
            await wait_for(service, done, q.FINISHED)
            running = (await service.submit(TASK.format(workspace="b"), model=slow)).job
            queued = (await service.submit(TASK.format(workspace="c"), model=fast)).job
            await wait_event(service, running, "turn")
            return done, running, queued  # the context's end stops the daemon mid-job

    return anyio.run(main)


@pytest.mark.heavy  # two daemon starts and a resumed job with sleeping steps: seconds
def test_low_damaged_queue_is_rebuilt(tmp_path: Path) -> None:
    done, running, queued = three_jobs(tmp_path)
    path = tmp_path / "data" / q.QUEUE_FILE
    garbage = os.urandom(4096) + path.read_bytes()[4096:]  # its header and first page
    path.write_bytes(garbage)
    with pytest.raises(QueueDamaged, match="file is not a database"):
        JobQueue.open(tmp_path / "data")

    async def restart() -> dict[str, Any]:
        with capture_logs() as logs:
            async with serving(tmp_path, max_jobs=1) as service:
                finished = await service.get(done)
                assert (finished.state, finished.outcome) == (q.FINISHED, "success")
                resumed = await wait_for(service, running, q.FINISHED)
                assert (resumed["outcome"], resumed["runs"]) == ("success", 2)
                with pytest.raises(NotFoundError):
                    await service.get(queued)  # queued, never started: no archive, lost
                assert (await service.jobs())[0] == 2
        [warning] = [e for e in logs if e["event"] == "daemon.queue.rebuilt"]
        return dict(warning)

    warning = anyio.run(restart)
    assert warning["log_level"] == "warning"
    assert (warning["rebuilt"], warning["resumed"], warning["lost"]) == (2, 1, 1)
    assert warning["lost_jobs"] == [queued]
    assert warning["entries_found"] == "unreadable"
    assert "file is not a database" in warning["why"]
    assert warning["at"].endswith("Z") and queued in str(warning["lost_jobs"])
    assert "lost (submit them again)" in warning["summary"]
    [damaged] = path.parent.glob("queue.sqlite3.damaged-*")
    assert damaged == Path(warning["damaged_file"])
    assert damaged.read_bytes() == garbage  # moved aside as it was, never deleted
    lines = (tmp_path / "b" / "trace.txt").read_text().split()
    assert lines == ["step-1", "step-2", "step-3"]  # resumed, no step run twice
    queue = JobQueue.open(tmp_path / "data")  # the rebuilt queue is a sound one
    assert sorted(e.job for e in queue.newest(10)) == sorted([running, done])
    queue.close()


def queue_with(tmp: Path, jobs: int) -> Path:
    """A queue file of ``jobs`` queued entries (big rows: several pages); its path."""
    queue = JobQueue.open(tmp)
    for i in range(jobs):
        queue.add(f"20260101-0000{i:02d}-aaaaaa", name="t.yaml", task="x" * 3000,
                  base_dir="/", workspace=f"/w{i}", goal="g", model=None, now=1.0)
    queue.close()
    return tmp / q.QUEUE_FILE


@pytest.mark.parametrize(("damage", "says", "found"), [
    (lambda b: b[: len(b) // 2], "malformed", "unreadable"),  # cut short
    (lambda b: b[:100], "malformed", "unreadable"),
    (lambda b: b"", "empty", "unreadable"),
    (lambda b: b"not a database" * 100, "not a database", "unreadable"),
    (lambda b: b[:8192] + os.urandom(4096) + b[12288:], "", 12),  # a page garbled
])
def test_a_damaged_queue_file_is_moved_aside_and_the_lost_jobs_named(
        tmp_path: Path, damage: Any, says: str, found: Any) -> None:
    path = queue_with(tmp_path, 12)
    path.write_bytes(damage(path.read_bytes()))

    queue, rebuilt = open_queue(tmp_path, 1_800_000_000.0)

    assert rebuilt is not None and says in rebuilt.why
    fields = rebuilt.fields()
    assert fields["entries_found"] == found
    assert (fields["rebuilt"], fields["ended_without_archive"]) == (0, 0)
    if found != "unreadable":  # what could be read names the jobs lost
        assert fields["lost"] == 12 and len(fields["lost_jobs"]) == 12
    assert rebuilt.damaged.name == "queue.sqlite3.damaged-20270115-080000"
    assert queue.count() == 0 and path.stat().st_size > 0
    queue.close()
    _, again = open_queue(tmp_path, 1_800_000_001.0)  # the new queue is sound
    assert again is None


def test_a_queue_that_cannot_be_opened_for_another_reason_is_not_moved(tmp_path: Path) -> None:
    (tmp_path / q.QUEUE_FILE).mkdir(parents=True)  # not a file SQLite can open: not damaged

    with pytest.raises(ArchiveError, match="cannot open the job queue") as exc:
        open_queue(tmp_path, 1.0)

    assert not isinstance(exc.value, QueueDamaged)
    assert (tmp_path / q.QUEUE_FILE).is_dir()
    assert not list((tmp_path / "daemon").glob("*.damaged-*"))


# -- a full disk ----------------------------------------------------------------------------------

class Disk:
    """A disk that fills up once: after ``puts`` archive puts every archive write fails with
    ENOSPC (``archive``: its metadata too), and (``queue``) every queue change as SQLite's
    "database or disk is full", until ``full`` is set back to False."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, puts: int, *, archive: bool,
                 queue: bool) -> None:
        self.full = False
        count = [0]
        put, set_meta, move = Archive.put, Archive.set_meta, JobQueue.move

        def full_put(archive_: Archive, *args: Any, **kwargs: Any) -> Any:
            if count[0] <= puts:
                count[0] += 1
                self.full = count[0] > puts
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            return put(archive_, *args, **kwargs)

        def full_set_meta(archive_: Archive, *args: Any, **kwargs: Any) -> Any:
            if self.full and archive:
                raise OSError(errno.ENOSPC, "No space left on device")
            return set_meta(archive_, *args, **kwargs)

        def full_move(queue_: JobQueue, *args: Any, **kwargs: Any) -> Any:
            if self.full and queue:
                raise ArchiveError("the job queue cannot move the job: database or disk is "
                                   "full") from sqlite3.OperationalError("database or disk is full")
            return move(queue_, *args, **kwargs)

        monkeypatch.setattr(Archive, "put", full_put)
        monkeypatch.setattr(Archive, "set_meta", full_set_meta)
        monkeypatch.setattr(JobQueue, "move", full_move)


def test_low_full_disk_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the archive nor the queue can be written when the job stops: the daemon still
    says ``interrupted`` with the reason, writes both once there is room, and the job can be
    resumed."""
    monkeypatch.setattr(service_module, "QUEUE_RETRY_S", 0.05)
    model = write_replies(tmp_path, "r.yaml", replies(steps=3))
    disk = Disk(monkeypatch, 2, archive=True, queue=True)

    async def main() -> None:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await idle(service, job)
            assert disk.full
            status = await service.status(job)
            assert (status["state"], status["error"]) == (q.INTERRUPTED, DISK_FULL)
            assert status["finished"] is not None
            [listed] = (await service.jobs())[1]
            assert (listed.state, listed.error) == (q.INTERRUPTED, DISK_FULL)
            assert queued(service, job).state == q.RUNNING  # the queue took nothing
            assert meta(tmp_path, job, "status") == "running"  # nor did the archive
            stopped = await events_of(service, job)  # its stream ends
            assert stopped[-1]["event"] == "job.stopped"
            assert stopped[-1]["data"]["error"] == DISK_FULL
            with pytest.raises(ArchiveError, match="disk is full"):
                await service.resume(job)

            disk.full = False  # room again: both are written, with the reason
            with anyio.fail_after(TIMEOUT_S):
                while queued(service, job).state != q.INTERRUPTED or meta(
                        tmp_path, job, "status") != "interrupted":
                    await anyio.sleep(0.02)
            assert queued(service, job).error == DISK_FULL
            assert meta(tmp_path, job, "stopped_by") == DISK_FULL

            await service.resume(job)  # and it goes on where it stopped
            events = await events_of(service, job)
            assert events[-1]["data"] == {"outcome": "success"}

    anyio.run(main)


def test_low_full_disk_status_taken_from_the_archive_at_the_next_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive recorded the stop, the queue could not until the daemon stopped: the next
    start marks the job ``interrupted`` with the reason instead of running it again."""
    model = write_replies(tmp_path, "r.yaml", replies(steps=3))

    async def first() -> str:
        with monkeypatch.context() as patch:
            Disk(patch, 2, archive=False, queue=True)
            async with serving(tmp_path) as service:
                job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
                await idle(service, job)
                assert (await service.get(job)).state == q.INTERRUPTED
                assert queued(service, job).state == q.RUNNING
            return job

    job = anyio.run(first)
    assert meta(tmp_path, job, "stopped_by") == DISK_FULL

    async def second() -> None:
        with capture_logs() as logs:
            async with serving(tmp_path) as service:
                entry = queued(service, job)
                assert (entry.state, entry.error, entry.runs) == (q.INTERRUPTED, DISK_FULL, 1)
                await anyio.sleep(0.3)
                assert service.running_jobs() == []  # not run again on its own
        assert [e["job"] for e in logs if e["event"] == "daemon.job.reconciled"] == [job]

    anyio.run(second)


def test_which_running_entries_take_their_ending_from_the_archive(tmp_path: Path) -> None:
    """Neither file took the stop (the archive says ``running``, as after ``kill -9``): the
    next start resumes the job. A stop an earlier run recorded (the archive counts fewer
    resumes than the queue's runs less one) is not taken for the last run's either."""
    queue = JobQueue.open(tmp_path)
    job = "20260101-000000-aaaaaa"
    queue.add(job, name="t.yaml", task="goal: x\n", base_dir="/", workspace="/w", goal="x",
              model=None, now=1.0)
    entry = queue.move(job, q.RUNNING, now=2.0)
    queue.close()

    def archive_says(**values: Any) -> Any:
        with Archive.open(tmp_path, job) as archive:
            for key, value in values.items():
                archive.set_meta(key, value)
        return ended_in_archive(tmp_path, entry)

    assert ended_in_archive(tmp_path, entry) is None  # no archive yet
    assert archive_says(status="running") is None
    assert archive_says(status="interrupted", stopped_by=SUSPENDED_BY) is None
    assert archive_says(stopped_by=DISK_FULL) == (q.INTERRUPTED, None, DISK_FULL)
    assert archive_says(stopped_by=CANCELLED_BY) == (q.CANCELLED, None, "cancelled while it ran")
    assert archive_says(status="success") == (q.FINISHED, "success", None)
    entry = replace(entry, runs=3)  # two runs since the archive's last resume
    assert archive_says(status="interrupted", stopped_by=DISK_FULL, resumes=0) is None
    assert archive_says(resumes=2) == (q.INTERRUPTED, None, DISK_FULL)
