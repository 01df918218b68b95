"""``gliding memory show IRI``: the archived bytes on stdout, exactly (no decoding, no newline
added, no line-ending translation), and ``--meta`` as JSON whose sha256 is that of the bytes.

The app runs in process (``invoke``); one test runs the console script, so the bytes are proven
on a real stdout too."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gliding.core.iri import record_iri, result_iri
from gliding.memory.archive.store import Archive
from tests.cli.cli_support import invoke, run_cli, tree

JOB = "job-2026.cli_test"

CONTENTS: dict[str, bytes] = {
    "unicode_text": "Grüße, 世界! ✓ — naïve café 🐍\nzweite Zeile\n".encode(),
    "crlf_and_nul": b"line one\r\nline two\r\n\x00\x00tail\r",
    "invalid_utf8": b"\xff\xfe\x80abc\xc3\x28\xed\xa0\x80\xf8\x88\x80\x80\x80",
    "every_byte": bytes(range(256)) * 4,
    "no_trailing_newline": b"no newline at the end",
    "empty": b"",
    "random_64k": os.urandom(64 * 1024),
}


@pytest.fixture
def archived(tmp_path: Path) -> dict[str, tuple[str, bytes]]:
    """Each CONTENTS entry archived under its own IRI; name -> (IRI, bytes)."""
    out: dict[str, tuple[str, bytes]] = {}
    with Archive.open(tmp_path / "data", JOB) as archive:
        for name, data in CONTENTS.items():
            iri = str(result_iri(JOB, name))
            archive.put(iri, data, kind="result", media_type="application/octet-stream",
                        meta={"name": name, "note": "ünïcode meta"})
            out[name] = (iri, data)
        # an artifact whose path has a directory, a space and non-ASCII: percent-encoded in the IRI
        iri = str(record_iri(JOB, "artifact", "sub dir/ñandú.txt"))
        data = "ñandú\r\n".encode()
        archive.put(iri, data, kind="artifact", meta={"path": "sub dir/ñandú.txt"})
        out["artifact_path"] = (iri, data)
    return out


@pytest.mark.parametrize("name", [*CONTENTS, "artifact_path"])
def test_memory_show_prints_the_stored_bytes_exactly(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]], name: str
) -> None:
    iri, data = archived[name]
    before = tree(tmp_path)

    result = invoke(["memory", "show", iri, "--data-dir", "data"], cwd=tmp_path)

    assert result.code == 0, result
    assert result.stdout == data
    assert result.stderr == ""
    assert tree(tmp_path) - before <= {  # reading may leave SQLite's WAL files, nothing else
        f"data/jobs/{JOB}/archive.sqlite3-wal", f"data/jobs/{JOB}/archive.sqlite3-shm"}


@pytest.mark.parametrize("name", ["crlf_and_nul", "every_byte"])
def test_memory_show_prints_the_stored_bytes_exactly_from_the_console_script(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]], name: str
) -> None:
    iri, data = archived[name]

    result = run_cli(["memory", "show", iri, "--data-dir", "data"], cwd=tmp_path)

    assert result.code == 0, result
    assert result.stdout == data
    assert result.stderr == ""


def test_memory_show_reads_an_absolute_data_dir_from_anywhere(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    iri, data = archived["invalid_utf8"]

    result = invoke(["memory", "show", iri, "--data-dir", str(tmp_path / "data")],
                    cwd=elsewhere)

    assert result.code == 0, result
    assert result.stdout == data
    assert tree(elsewhere) == set()


@pytest.mark.parametrize("name", ["unicode_text", "invalid_utf8", "empty", "artifact_path"])
def test_memory_show_meta_prints_json_with_the_sha256(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]], name: str
) -> None:
    iri, data = archived[name]

    result = invoke(["memory", "show", iri, "--data-dir", "data", "--meta"], cwd=tmp_path)

    assert result.code == 0, result
    meta = json.loads(result.out)
    assert meta["iri"] == iri
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["size"] == len(data)
    assert meta["kind"] == ("artifact" if name == "artifact_path" else "result")
    assert isinstance(meta["created_at"], float)
    if name == "artifact_path":
        assert meta["meta"] == {"path": "sub dir/ñandú.txt"}
        assert meta["media_type"] == "text/plain; charset=utf-8"
    else:
        assert meta["meta"] == {"name": name, "note": "ünïcode meta"}
        assert meta["media_type"] == "application/octet-stream"


def test_memory_show_meta_matches_the_archive_api(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]]
) -> None:
    iri, _ = archived["crlf_and_nul"]
    with Archive.open(tmp_path / "data", JOB, create=False) as archive:
        item = archive.get(iri)

    result = invoke(["memory", "show", iri, "--data-dir", "data", "--meta"], cwd=tmp_path)

    meta = json.loads(result.out)
    assert (meta["sha256"], meta["size"], meta["created_at"]) == (
        item.sha256, item.size, item.created_at)


def test_memory_show_finds_the_data_dir_through_the_environment(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]]
) -> None:
    iri, data = archived["every_byte"]

    result = invoke(["memory", "show", iri], cwd=tmp_path,
                    env={"GLIDING_DATA_DIR": str(tmp_path / "data")})

    assert result.code == 0, result
    assert result.stdout == data


def test_memory_show_prints_the_lines_an_iri_fragment_names(
    tmp_path: Path, archived: dict[str, tuple[str, bytes]]
) -> None:
    """Recall shows a line's provenance as ``<result>#L12``: pasted into ``memory show`` it
    prints those lines, numbered as read_result numbers them, with their own line ends."""
    iri, _ = archived["crlf_and_nul"]
    shown = invoke(["memory", "show", f"{iri}#L2-3", "--data-dir", "data"], cwd=tmp_path)
    assert shown.code == 0, shown
    assert shown.stdout == b"line two\r\n\x00\x00tail\r"
    one = invoke(["memory", "show", f"{iri}#L1", "--data-dir", "data"], cwd=tmp_path)
    assert one.stdout == b"line one\r\n"
    past = invoke(["memory", "show", f"{iri}#L9", "--data-dir", "data"], cwd=tmp_path)
    assert past.code != 0 and "has 3 lines, not 9" in past.stderr and past.stdout == b""
    bad = invoke(["memory", "show", f"{iri}#top", "--data-dir", "data"], cwd=tmp_path)
    assert bad.code != 0 and "bad line fragment" in bad.stderr
