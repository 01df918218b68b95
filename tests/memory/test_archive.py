"""The L0 archive on real SQLite: exact round-trips, append-only writes, ledger, corruption."""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding.core.iri import parse_iri, record_iri, result_iri, turn_iri
from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.records import ArchivedItem, CallRecord
from gliding.memory.archive.schema import SCHEMA_VERSION
from gliding.memory.archive.store import Archive, archive_path, open_for_iri

JOB = "job-1"


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    with Archive.open(tmp_path, JOB) as archive:
        yield archive


def tamper(archive: Archive, sql: str, params: tuple[object, ...]) -> None:
    """Change the archive file behind Gliding's back, as another program would."""
    conn = sqlite3.connect(archive.path)
    with conn:
        conn.execute(sql, params)
    conn.close()


# -- layout and opening ---------------------------------------------------------------------------


def test_lives_at_jobs_job_archive_sqlite3_in_wal_mode(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        archive.put(result_iri(JOB, "c1"), "x", kind="result")
        assert archive.path == tmp_path / "jobs" / JOB / "archive.sqlite3"
        assert archive_path(tmp_path, JOB) == archive.path
    conn = sqlite3.connect(tmp_path / "jobs" / JOB / "archive.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert {"entries", "calls", "job"} <= tables


def test_open_without_create_names_the_job_and_data_dir(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as info:
        Archive.open(tmp_path, "ghost", create=False)
    text = str(info.value)
    assert "ghost" in text and str(tmp_path) in text and "hint:" in text
    assert not (tmp_path / "jobs").exists()  # looking did not create anything


def test_bad_job_id_raises_iri_error(tmp_path: Path) -> None:
    for job in ("../escape", "", "a/b"):
        with pytest.raises(IRIError):
            Archive.open(tmp_path, job)
    assert not (tmp_path / "jobs").exists()


def test_a_file_that_is_not_sqlite_raises_archive_error(tmp_path: Path) -> None:
    path = archive_path(tmp_path, JOB)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(ArchiveError, match="not a usable Gliding archive"):
        Archive.open(tmp_path, JOB, create=False)


def test_an_archive_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    Archive.open(tmp_path, JOB).close()
    conn = sqlite3.connect(archive_path(tmp_path, JOB))
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ArchiveError, match="schema version 99") as info:
        Archive.open(tmp_path, JOB, create=False)
    assert (f"archive {archive_path(tmp_path, JOB)} has schema version 99; this Gliding reads "
            f"{SCHEMA_VERSION}") in str(info.value)
    assert "upgrade Gliding" in str(info.value)


def test_entries_survive_reopening(tmp_path: Path) -> None:
    iri = turn_iri(JOB, "DA", 1)
    with Archive.open(tmp_path, JOB) as archive:
        archive.put(iri, "thought and reply", kind="turn", meta={"tokens": 12})
    with Archive.open(tmp_path, JOB, create=False) as archive:
        item = archive.get(iri)
    assert item.content == b"thought and reply"
    assert item.meta == {"tokens": 12}


def test_open_for_iri_opens_the_job_of_the_iri(tmp_path: Path) -> None:
    iri = result_iri(JOB, "call-9")
    with Archive.open(tmp_path, JOB) as archive:
        archive.put(iri, b"\x00\x01", kind="result")
    archive, parsed = open_for_iri(tmp_path, str(iri))
    with archive:
        assert parsed == iri
        assert archive.job == JOB
        assert archive.read(str(iri)) == b"\x00\x01"


def test_open_for_iri_of_an_unknown_job_names_the_iri(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as info:
        open_for_iri(tmp_path, "gliding://job/nope/result/c1")
    assert "gliding://job/nope/result/c1" in str(info.value)
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize(
    "bad", ["", "http://x/y", "gliding://jobs/j/result/c", "gliding://job/j/Result/c",
            "gliding://job/j/result", "gliding://job/../result/c"]
)
def test_bad_iri_raises_iri_error(tmp_path: Path, archive: Archive, bad: str) -> None:
    with pytest.raises(IRIError):
        open_for_iri(tmp_path, bad)
    with pytest.raises(IRIError):
        archive.get(bad)
    with pytest.raises(IRIError):
        archive.put(bad, "x", kind="result")


# -- put / get / read -----------------------------------------------------------------------------


def test_text_round_trips_as_utf8(archive: Archive) -> None:
    text = "Grüße, 世界 — 🚀\nline two\r\n\ttab\x00nul"
    iri = turn_iri(JOB, "PA", 1)
    stored = archive.put(iri, text, kind="turn")
    item = archive.get(iri)
    assert item.content == text.encode("utf-8")
    assert item.text() == text
    assert item.size == len(text.encode("utf-8"))
    assert item.media_type == "text/plain; charset=utf-8"
    assert stored == item


def test_arbitrary_bytes_and_text_round_trip_exactly(tmp_path: Path) -> None:
    counter = itertools.count()
    with Archive.open(tmp_path, JOB) as archive:

        @settings(max_examples=150, deadline=None)
        @given(st.binary(max_size=5000) | st.text(max_size=2000))
        def check(content: bytes | str) -> None:
            iri = result_iri(JOB, f"c{next(counter)}")
            archive.put(iri, content, kind="result", media_type="application/octet-stream")
            expected = content.encode("utf-8") if isinstance(content, str) else content
            assert archive.get(iri).content == expected
            assert archive.read(iri) == expected

        check()
        assert archive.verify() == []


def test_read_returns_the_requested_byte_range(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    iri = result_iri(JOB, "big")
    with Archive.open(tmp_path, JOB) as archive:
        archive.put(iri, data, kind="result")

        @given(st.integers(0, 1100), st.none() | st.integers(0, 1100))
        def check(offset: int, limit: int | None) -> None:
            end = None if limit is None else offset + limit
            assert archive.read(iri, offset, limit) == data[offset:end]

        check()


def test_read_refuses_negative_ranges(archive: Archive) -> None:
    iri = result_iri(JOB, "c1")
    archive.put(iri, "abc", kind="result")
    with pytest.raises(ArchiveError, match="byte range"):
        archive.read(iri, -1)
    with pytest.raises(ArchiveError, match="byte range"):
        archive.read(iri, 0, -5)


def test_put_returns_what_get_returns(tmp_path: Path) -> None:
    clock = FakeClock()
    with Archive.open(tmp_path, JOB, now=clock.now) as archive:
        iri = record_iri(JOB, "plan", "cycle-1")
        stored = archive.put(
            iri, b"{}", kind="plan", media_type="application/json", meta={"cycle": 1, "ok": True}
        )
        got = archive.get(iri)
    assert stored == got
    assert got == ArchivedItem(
        iri="gliding://job/job-1/plan/cycle-1",
        kind="plan",
        sha256="44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        size=2,
        created_at=1_700_000_001.0,
        media_type="application/json",
        meta={"cycle": 1, "ok": True},
        content=b"{}",
    )


def test_the_same_content_again_is_a_no_op(tmp_path: Path) -> None:
    clock = FakeClock()
    with Archive.open(tmp_path, JOB, now=clock.now) as archive:
        iri = result_iri(JOB, "c1")
        first = archive.put(iri, "same", kind="result", meta={"n": 1})
        again = archive.put(iri, b"same", kind="other", meta={"n": 2})
        assert again == first  # the stored entry, not the new kind/meta/time
        assert len(archive.list()) == 1


def test_different_content_is_never_written_over(archive: Archive) -> None:
    iri = result_iri(JOB, "c1")
    archive.put(iri, "original", kind="result")
    with pytest.raises(ArchiveError, match="never overwritten"):
        archive.put(iri, "replacement", kind="result")
    assert archive.get(iri).content == b"original"
    assert archive.verify() == []


def test_an_iri_of_another_job_is_refused(archive: Archive) -> None:
    with pytest.raises(ArchiveError, match="belongs to job 'other'"):
        archive.put(result_iri("other", "c1"), "x", kind="result")
    with pytest.raises(ArchiveError, match="belongs to job 'other'"):
        archive.get("gliding://job/other/result/c1")
    with pytest.raises(ArchiveError, match="names the job itself"):
        archive.put(f"gliding://job/{JOB}", "x", kind="job")
    assert archive.list() == []


def test_content_and_meta_must_be_encodable(archive: Archive) -> None:
    iri = result_iri(JOB, "c1")
    with pytest.raises(ArchiveError, match="UTF-8"):
        archive.put(iri, "lone surrogate \ud800", kind="result")
    with pytest.raises(ArchiveError, match="not JSON"):
        archive.put(iri, "x", kind="result", meta={"when": object()})
    with pytest.raises(ArchiveError, match="no kind"):
        archive.put(iri, "x", kind="")
    assert archive.list() == []


def test_missing_iri_raises_not_found(archive: Archive) -> None:
    with pytest.raises(NotFoundError, match="not in the archive"):
        archive.get(result_iri(JOB, "never"))
    with pytest.raises(NotFoundError):
        archive.read(str(result_iri(JOB, "never")))


def test_iri_text_and_iri_value_address_the_same_entry(archive: Archive) -> None:
    archive.put("gliding://job/job-1/artifact/src%2Fmain.py", "print()", kind="artifact")
    parsed = parse_iri("gliding://job/job-1/artifact/src%2Fmain.py")
    assert archive.get(parsed).content == b"print()"


def test_list_is_in_archiving_order_without_content(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB, now=FakeClock().now) as archive:
        archive.put(turn_iri(JOB, "DA", 1), "t1", kind="turn")
        archive.put(result_iri(JOB, "c1"), "r1", kind="result")
        archive.put(turn_iri(JOB, "DA", 2), "t2", kind="turn")
        everything = archive.list()
        turns = archive.list("turn")
    assert [i.iri for i in everything] == [
        "gliding://job/job-1/turn/DA/1",
        "gliding://job/job-1/result/c1",
        "gliding://job/job-1/turn/DA/2",
    ]
    assert [i.iri for i in turns] == [everything[0].iri, everything[2].iri]
    assert all(i.content is None for i in everything)
    assert [i.created_at for i in everything] == sorted(i.created_at for i in everything)
    with pytest.raises(ArchiveError, match="without its content"):
        everything[0].text()


def test_threads_share_one_archive(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with Archive.open(tmp_path, JOB) as archive:

        def work(t: int) -> None:
            try:
                for i in range(40):
                    iri = result_iri(JOB, f"t{t}-{i}")
                    archive.put(iri, f"thread {t} item {i}" * (i + 1), kind="result")
                    assert archive.get(iri).content == f"thread {t} item {i}".encode() * (i + 1)
                    archive.record_call(CallRecord(job=JOB, role=f"R{t}", turn=i, model="m"))
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised in the test thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(archive.list()) == 8 * 40
        assert len(archive.calls()) == 8 * 40
        assert archive.verify() == []


def test_a_closed_archive_refuses_work(tmp_path: Path) -> None:
    archive = Archive.open(tmp_path, JOB)
    archive.close()
    archive.close()  # twice is harmless
    with pytest.raises(ArchiveError, match="closed"):
        archive.put(result_iri(JOB, "c1"), "x", kind="result")
    with pytest.raises(ArchiveError, match="closed"):
        archive.list()
    with pytest.raises(ArchiveError, match="closed"):
        archive.verify()


# -- corruption ------------------------------------------------------------------------------------


def test_changed_content_is_detected_by_get_read_and_verify(archive: Archive) -> None:
    bad = result_iri(JOB, "c1")
    good = result_iri(JOB, "c2")
    archive.put(bad, b"the original bytes", kind="result")
    archive.put(good, b"untouched", kind="result")
    tamper(archive, "UPDATE entries SET content = ? WHERE iri = ?",
           (b"the 0riginal bytes", str(bad)))

    with pytest.raises(ArchiveError, match="corrupt entry"):
        archive.get(bad)
    with pytest.raises(ArchiveError, match="corrupt entry"):
        archive.read(bad, 0, 3)
    assert archive.get(good).content == b"untouched"
    problems = archive.verify()
    assert len(problems) == 1
    assert str(bad) in problems[0] and "sha256" in problems[0]


def test_changed_hash_size_or_type_is_detected(archive: Archive) -> None:
    for n in range(3):
        archive.put(result_iri(JOB, f"c{n}"), b"payload", kind="result")
    tamper(archive, "UPDATE entries SET sha256 = ? WHERE iri = ?",
           ("0" * 64, str(result_iri(JOB, "c0"))))
    tamper(archive, "UPDATE entries SET size = 3 WHERE iri = ?", (str(result_iri(JOB, "c1")),))
    tamper(archive, "UPDATE entries SET content = 'text now' WHERE iri = ?",
           (str(result_iri(JOB, "c2")),))
    for n in range(3):
        with pytest.raises(ArchiveError, match="corrupt entry"):
            archive.get(result_iri(JOB, f"c{n}"))
    problems = archive.verify()
    assert len(problems) == 3
    assert all("corrupt entry" in p for p in problems)


def test_a_healthy_archive_verifies_clean(archive: Archive) -> None:
    assert archive.verify() == []
    archive.put(result_iri(JOB, "c1"), b"", kind="result")
    archive.put(turn_iri(JOB, "AA", 1), "final report", kind="turn")
    assert archive.verify() == []


def test_damaged_pages_are_reported_by_verify(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        for n in range(50):
            archive.put(result_iri(JOB, f"c{n}"), bytes([n]) * 3000, kind="result")
    path = archive_path(tmp_path, JOB)
    raw = bytearray(path.read_bytes())
    page = 4096
    assert len(raw) > 10 * page  # closing checkpointed the WAL into the main file
    for offset in range(5 * page, 8 * page):
        raw[offset] = 0xFF
    path.write_bytes(bytes(raw))
    with Archive.open(tmp_path, JOB, create=False) as archive:
        problems = archive.verify()
    assert problems != []


# -- LLM ledger and job metadata -------------------------------------------------------------------


def test_call_ledger_round_trips(tmp_path: Path) -> None:
    clock = FakeClock()
    records = [
        CallRecord(job=JOB, role="PA", turn=1, model="gpt-x", prompt_tokens=1200,
                   completion_tokens=300, cached_tokens=1024, latency_s=1.25, cost_usd=0.0042,
                   turn_iri=str(turn_iri(JOB, "PA", 1))),
        CallRecord(job=JOB, role="DA", turn=1, model="smollm2", created_at=5.5),
    ]
    with Archive.open(tmp_path, JOB, now=clock.now) as archive:
        recorded = [archive.record_call(r) for r in records]
    with Archive.open(tmp_path, JOB, create=False) as archive:
        ledger = archive.calls()
    assert ledger == recorded
    assert [r.id for r in ledger] == [1, 2]
    assert ledger[0].created_at == 1_700_000_001.0  # filled in by the clock
    assert ledger[1].created_at == 5.5  # kept as given
    assert ledger[0] == CallRecord(**{**records[0].__dict__, "id": 1,
                                      "created_at": 1_700_000_001.0})


def test_call_of_another_job_is_refused(archive: Archive) -> None:
    with pytest.raises(ArchiveError, match="job 'other'"):
        archive.record_call(CallRecord(job="other", role="DA", turn=1, model="m"))
    assert archive.calls() == []


def test_job_metadata_holds_json_values(tmp_path: Path) -> None:
    with Archive.open(tmp_path, JOB) as archive:
        assert archive.get_meta("status") is None
        assert archive.get_meta("status", "unknown") == "unknown"
        archive.set_meta("status", "running")
        archive.set_meta("goal", {"text": "ship it", "checks": ["a", "b"]})
        archive.set_meta("started", 1700000000.5)
        archive.set_meta("status", "done")
        with pytest.raises(ArchiveError, match="not JSON"):
            archive.set_meta("bad", {1, 2})
    with Archive.open(tmp_path, JOB, create=False) as archive:
        assert archive.get_meta("status") == "done"
        assert archive.get_meta("goal") == {"text": "ship it", "checks": ["a", "b"]}
        assert archive.get_meta("started") == 1700000000.5
        assert archive.get_meta("bad") is None
