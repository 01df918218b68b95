"""``Archive.batch()``: the writes of a block are one SQLite transaction — invisible to other
connections until the block ends, all gone if it raises or the process dies inside it, durable
once it returns — and nested blocks join the outer one. Real SQLite files under tmp_path."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import gliding
from gliding.core.iri import record_iri
from gliding.errors import ArchiveError, NotFoundError
from gliding.memory.archive.records import CallRecord
from gliding.memory.archive.store import Archive, archive_path

JOB = "job1"
REPO_ROOT = Path(gliding.__file__).resolve().parents[1]


def iri(name: str) -> str:
    return str(record_iri(JOB, "note", name))


class Boom(Exception):
    """Raised by a test block to make its batch roll back."""


def stored(data_dir: Path) -> list[str]:
    """The IRIs another, read-only SQLite connection sees (what is committed), in order.

    (Not a second ``Archive.open``: opening prepares the schema in a write transaction, which
    waits for the batch's lock.)"""
    path = archive_path(data_dir, JOB)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        return [row[0] for row in conn.execute("SELECT iri FROM entries ORDER BY seq")]
    finally:
        conn.close()


def test_a_batch_is_invisible_to_others_until_it_ends_then_durable(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        with archive.batch() as same:
            assert same is archive
            for n in range(5):
                archive.put(iri(str(n)), f"content {n}", kind="note")
            archive.set_meta("status", "running")
            archive.record_call(CallRecord(job=JOB, role="DA", turn=1, model="m"))
            assert stored(tmp_path) == []  # another connection sees nothing yet
        assert stored(tmp_path) == [iri(str(n)) for n in range(5)]
    with Archive.open(tmp_path, JOB, create=False) as reopened:  # after close: still there
        assert [reopened.get(iri(str(n))).text() for n in range(5)] == [
            f"content {n}" for n in range(5)]
        assert reopened.get_meta("status") == "running"
        assert [c.role for c in reopened.calls()] == ["DA"]
        assert [item.kind for item in reopened.list()] == ["note"] * 5
        assert reopened.verify() == []


def test_reads_inside_a_batch_see_its_writes(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive, archive.batch():
        archive.put(iri("a"), b"\x00\xffbytes", kind="blob",
                    media_type="application/octet-stream", meta={"n": 1})
        archive.set_meta("goal", {"text": "ünïcode"})
        assert archive.get(iri("a")).content == b"\x00\xffbytes"
        assert archive.read(iri("a"), 1, 1) == b"\xff"
        assert [i.meta for i in archive.list("blob")] == [{"n": 1}]
        assert archive.get_meta("goal") == {"text": "ünïcode"}
        archive.put(iri("a"), b"\x00\xffbytes", kind="blob")  # the same bytes: a no-op
        assert len(archive.list()) == 1


def test_a_raising_block_leaves_nothing_and_the_archive_stays_usable(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        archive.put(iri("before"), "kept", kind="note")
        with pytest.raises(Boom), archive.batch():
            archive.put(iri("x"), "lost", kind="note")
            archive.set_meta("status", "lost")
            archive.record_call(CallRecord(job=JOB, role="DA", turn=1, model="m"))
            raise Boom
        assert [i.iri for i in archive.list()] == [iri("before")]
        with pytest.raises(NotFoundError):
            archive.get(iri("x"))
        assert archive.get_meta("status") is None and archive.calls() == []
        archive.put(iri("x"), "written later", kind="note")  # not batching any more
        assert stored(tmp_path) == [iri("before"), iri("x")]
        assert archive.get(iri("x")).text() == "written later"
    with Archive.open(tmp_path, JOB) as reopened:
        assert reopened.verify() == [] and len(reopened.list()) == 2


def test_a_keyboard_interrupt_rolls_back_too(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        with pytest.raises(KeyboardInterrupt), archive.batch():
            archive.put(iri("x"), "lost", kind="note")
            raise KeyboardInterrupt
        assert archive.list() == []


def test_nested_batches_join_the_outer_one(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        with archive.batch():
            archive.put(iri("outer"), "1", kind="note")
            with archive.batch() as inner:
                assert inner is archive
                archive.put(iri("inner"), "2", kind="note")
            assert stored(tmp_path) == []  # the inner block's end commits nothing
            archive.put(iri("after"), "3", kind="note")
        assert stored(tmp_path) == [iri("outer"), iri("inner"), iri("after")]


def test_a_raise_in_a_nested_batch_rolls_back_the_outer_one(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        with pytest.raises(Boom), archive.batch():
            archive.put(iri("outer"), "1", kind="note")
            with archive.batch():
                archive.put(iri("inner"), "2", kind="note")
                raise Boom
        assert archive.list() == [] and stored(tmp_path) == []


def test_a_refused_put_inside_a_batch_keeps_the_batch_if_caught(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        with archive.batch():
            archive.put(iri("a"), "first", kind="note")
            with pytest.raises(ArchiveError, match="different content"):
                archive.put(iri("a"), "second", kind="note")
            with pytest.raises(ArchiveError, match="belongs to job"):
                archive.put(str(record_iri("job2", "note", "x")), "x", kind="note")
            archive.put(iri("b"), "third", kind="note")
        assert [archive.get(i).text() for i in (iri("a"), iri("b"))] == ["first", "third"]
        assert stored(tmp_path) == [iri("a"), iri("b")]


def test_other_threads_writes_wait_for_the_block(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        done = threading.Event()

        def write() -> None:
            archive.put(iri("thread"), "from a worker", kind="note")
            done.set()

        with pytest.raises(Boom), archive.batch():
            archive.put(iri("batch"), "rolled back", kind="note")
            worker = threading.Thread(target=write)
            worker.start()
            assert not done.wait(0.2)  # it cannot write while the block holds the archive
            raise Boom
        worker.join(10)
        assert done.is_set()
        assert [i.iri for i in archive.list()] == [iri("thread")]  # not part of the batch


def test_a_batch_on_a_closed_archive_is_an_archive_error(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, JOB)
    archive.close()
    with pytest.raises(ArchiveError, match="closed"), archive.batch():
        pass


CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from gliding.core.iri import record_iri
    from gliding.memory.archive.store import Archive

    archive = Archive.open(Path(sys.argv[1]), "job1")
    archive.put(str(record_iri("job1", "note", "committed")), "kept", kind="note")
    with archive.batch():
        for n in range(50):
            archive.put(str(record_iri("job1", "note", f"b{n}")), "x" * 10_000, kind="note")
        print("inside", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.skipif(not hasattr(os, "kill") or sys.platform == "win32", reason="needs SIGKILL")
def test_a_process_killed_inside_a_batch_leaves_none_of_it(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                           text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert child.stdout.strip() == "inside", child.stderr
    assert child.returncode == -9
    with Archive.open(tmp_path, JOB) as archive:
        assert [i.iri for i in archive.list()] == [iri("committed")]
        assert archive.verify() == []
