"""Recall's use counts persist in the data directory: a daemon that starts again ranks with
the counts the one before it recorded (``recall_access.sqlite3``), and a damaged file is set
aside without failing anything."""

from __future__ import annotations

from pathlib import Path

from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.daemon.runtime import open_knowledge
from gliding.errors import ArchiveError
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.recall.access_log import ACCESS_FILE, AccessLog

COUNT = TokenCounter().count
GRAPH = "gliding://job/j1"


def settings_for(data: Path) -> Settings:
    return Settings(data_dir=data, memory={"vectors": {"enabled": False}})


def put_findings(board: OxigraphBlackboard) -> None:
    for n in range(5):
        board.put({"@id": f"{GRAPH}/turn/DA/{n + 1}", "@type": "Turn", "role": "DA",
                   "summary": f"the ledger balance of account acct_{n} is {1000 + n} euros",
                   "partOf": GRAPH}, graph=GRAPH)


def test_use_counts_survive_a_restart_of_the_daemons_memory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    board = OxigraphBlackboard.open(data / "blackboard")
    put_findings(board)
    first = open_knowledge(board, settings_for(data), COUNT)
    used = first.recall("ledger balance of acct_3", 60, now=1_000.0, touch=True)
    first.recall("ledger balance of acct_3", 60, now=2_000.0, touch=True)
    assert used.ids
    first.close()
    board.close()

    board = OxigraphBlackboard.open(data / "blackboard")  # the daemon starts again
    again = open_knowledge(board, settings_for(data), COUNT)

    restored = {i: (a.count, a.last) for i, a in again.index._access.items()}
    assert restored == {i: (2, 2_000.0) for i in used.ids}
    assert (data / ACCESS_FILE).exists()
    again.close()
    board.close()


def test_a_damaged_access_file_is_set_aside_and_started_afresh(tmp_path: Path) -> None:
    path = tmp_path / ACCESS_FILE
    path.write_bytes(b"not a database at all" * 100)

    log = AccessLog(path)
    log.record(["gliding://job/j/turn/DA/1"], 5.0)

    assert log.load() == {"gliding://job/j/turn/DA/1": (1, 5.0)}
    assert path.with_suffix(".sqlite3.bad").exists()
    log.close()


def test_a_directory_that_cannot_hold_the_log_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the data directory should be")

    try:
        AccessLog(blocker / ACCESS_FILE)
    except ArchiveError as exc:
        assert "cannot" in exc.message and str(blocker) in exc.message
    else:
        raise AssertionError("no error")
