"""Ingestion: a job's plan, checks, decision, artifacts, turns and tool results (with the files,
symbols and errors they mention) become blackboard nodes in the job's named graph, and every
revision is archived in L0 as JSON-LD."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from structlog.testing import capture_logs

from gliding.agents.loop import ToolRecord
from gliding.bus.messages import CheckOutcome
from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.core.checks import CheckResult, CommandSucceeds, FileContains
from gliding.daemon.compose import run_job
from gliding.daemon.runtime import blackboard_path
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import NS, VocabularyError, check_iri, from_jsonld
from gliding.memory.ingest.ingestor import Ingestor
from gliding.testing import ScriptedLLM, call
from gliding.testing.blocking import Blocking
from gliding.tools.checks import outcome_of

GLIDING = str(Path(sys.executable).parent / "gliding")
TASK = """goal: Create hello.txt containing Hello
pipeline: [PA, DA, CA, AA]
checks:
  - file_contains: {path: hello.txt, text: Hello}
"""


def team() -> ScriptedLLM:
    return ScriptedLLM({
        "PA": [call("finish", steps=["write hello.txt", "verify it"])],
        "DA": [call("write_file", path="hello.txt", content="Hello"),
               call("finish", summary="wrote it")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
        "AA": [call("finish", decision="done", report="hello.txt verified")],
    })


def run(tmp: Path) -> str:
    (tmp / "task.yaml").write_text(TASK)
    settings = load_settings(overrides={"data_dir": str(tmp / "data")}, env={})
    handle = anyio.run(lambda: run_job(load_task(tmp / "task.yaml"), settings, llm=team()))
    assert handle.report.outcome == "success"
    return handle.report.job


def test_a_job_leaves_its_nodes_in_its_named_graph(tmp_path: Path) -> None:
    job = run(tmp_path)
    board = OxigraphBlackboard.open(blackboard_path(tmp_path / "data"))
    try:
        rows = board.query(
            "SELECT ?s ?t WHERE { GRAPH <gliding://job/" + job + "> { ?s a ?t } }", timeout_s=5)
        types = sorted(r["t"].iri.rsplit("#", 1)[1] for r in rows)
        assert types == ["Artifact", "CheckReport", "Decision", "File", "Job", "Plan", "Step",
                         "Step", *["ToolResult"] * 2, *["Turn"] * 6]
        step2 = board.get(f"gliding://job/{job}/plan/1/step/2", graph=f"gliding://job/{job}")
        assert step2 is not None and step2["dependsOn"] == [f"gliding://job/{job}/plan/1/step/1"]
        job_node = board.get(f"gliding://job/{job}", graph=f"gliding://job/{job}")
        assert job_node is not None and job_node["status"] == "success"
    finally:
        board.close()


def test_every_revision_is_archived(tmp_path: Path) -> None:
    job = run(tmp_path)
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        revisions = [i.iri for i in archive.list(kind="node") if "/node/job/" in i.iri]
        assert revisions == [f"gliding://job/{job}/node/job/-/1",
                             f"gliding://job/{job}/node/job/-/2"]
        first = from_jsonld(archive.get(revisions[0]).content or b"")
        assert "status" not in first and first["name"].startswith("Create hello.txt")


@pytest.mark.heavy
def test_memory_query_cli_reads_the_blackboard(tmp_path: Path) -> None:
    job = run(tmp_path)
    out = subprocess.run([GLIDING, "memory", "query",
                          "SELECT ?status WHERE { GRAPH ?g { ?d a "
                          "<https://gliding.dev/ns/v1#Decision> ; "
                          "<https://gliding.dev/ns/v1#status> ?status } }",
                          "--data-dir", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [json.loads(x) for x in out.stdout.splitlines()] == [{"status": "done"}]
    assert job


def test_memory_query_refuses_updates(tmp_path: Path) -> None:
    run(tmp_path)
    out = subprocess.run([GLIDING, "memory", "query", "DROP ALL", "--data-dir",
                          str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "error:" in out.stderr


def test_a_held_blackboard_degrades_to_no_l2_without_failing_the_job(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    holder = OxigraphBlackboard.open(blackboard_path(tmp_path / "data"))
    try:
        run(tmp_path)  # the store is locked by this process: the job runs without L2
    finally:
        holder.close()


def test_a_corrupt_blackboard_degrades_to_no_l2_with_one_warning(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    board = blackboard_path(tmp_path / "data")
    OxigraphBlackboard.open(board).close()
    (board / "CURRENT").write_text("garbage")  # what one write_file into it once did

    with capture_logs() as logs:
        run(tmp_path)  # a success, without L2
        run(tmp_path)  # and so is every later job of the data directory

    warnings = [e for e in logs if e["event"] == "blackboard.unavailable"]
    assert len(warnings) == 2 and "is damaged: Corruption" in warnings[0]["error"]
    assert (board / "CURRENT").read_text() == "garbage"  # left as found, for the user to see


def test_memory_search_finds_nodes_by_their_words(tmp_path: Path) -> None:
    job = run(tmp_path)
    out = subprocess.run([GLIDING, "memory", "search", "verify it", "--data-dir",
                          str(tmp_path / "data"), "-k", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "Step" in first and f"gliding://job/{job}/plan/1/step/2" in first


@pytest.mark.heavy
def test_memory_graph_draws_a_neighbourhood(tmp_path: Path) -> None:
    job = run(tmp_path)
    png = tmp_path / "g.png"
    out = subprocess.run([GLIDING, "memory", "graph", f"gliding://job/{job}", "--png", str(png),
                          "--data-dir", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run([GLIDING, "memory", "graph", "not an iri", "--png", str(png),
                          "--data-dir", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2


# ---- turns, tool results and their entities, without a job run ------------------------------

J = "gliding://job/j"


def direct(board: OxigraphBlackboard, archive: Archive) -> Any:
    """An ingestor of job ``j`` on the pass-through writer (coherence off), each call run to its
    end here, so the test's board queries run on no event loop."""
    writer = DirectWriter(JobNodeStore(board, archive, "j"))
    return Blocking(Ingestor(board, archive, "j", writer))


def ingestor(tmp: Path) -> tuple[Any, OxigraphBlackboard, Archive]:
    board = OxigraphBlackboard.in_memory()
    archive = Archive.open(tmp, "j")
    return direct(board, archive), board, archive


def record(n: int, name: str, arguments: dict[str, Any], output: str,
           ok: bool = True) -> ToolRecord:
    return ToolRecord(name, arguments, ok, output, f"{J}/result/DA-{n}-0")


PYTEST_OUT = """exit code 1
tests/test_calc.py F                                                     [100%]
E       assert 2 == 3
tests/test_calc.py:5: AssertionError
FAILED tests/test_calc.py::test_add - assert 2 == 3 (see #12, abc1234)
"""


def test_turns_and_tool_results_become_linked_nodes(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    with archive:
        ing.turn("DA", 1, f"{J}/turn/DA/1", "bash(command=\"pytest\")\n→ exit code 1")
        ing.tool_result(record(1, "bash", {"command": "pytest -q"}, PYTEST_OUT),
                        f"{J}/turn/DA/1")
        turn = board.get(f"{J}/turn/DA/1", graph=J)
        assert turn == {"@id": f"{J}/turn/DA/1", "@type": "Turn", "partOf": J, "role": "DA",
                        "summary": "bash(command=\"pytest\") → exit code 1"}
        result = board.get(f"{J}/result/DA-1-0", graph=J)
        assert result is not None
        assert result["name"] == "bash" and result["status"] == "ok"
        assert result["derivedFrom"] == [f"{J}/turn/DA/1"] and result["partOf"] == J
        assert result["summary"].startswith("bash ok: exit code 1; E assert 2 == 3")
        assert result["summary"].endswith("ids abc1234, #12")
        file_iri = f"{J}/file/tests%2Ftest_calc.py"
        symbol_iri = f"{J}/symbol/tests%2Ftest_calc.py#test_add"
        rows = board.query(f"""PREFIX gl: <{NS}>
            SELECT ?m ?type WHERE {{ <{J}/result/DA-1-0> gl:mentions ?m . ?m a ?type }}""",
                           graph=J)
        kinds = sorted((r["type"].iri.rsplit("#", 1)[1], r["m"].iri) for r in rows)
        assert [k for k, _ in kinds] == ["Error", "Error", "Error", "File", "Symbol"]
        assert (("File", file_iri) in kinds) and (("Symbol", symbol_iri) in kinds)
        assert board.get(symbol_iri, graph=J) == {
            "@id": symbol_iri, "@type": "Symbol", "name": "test_add",
            "path": "tests/test_calc.py", "partOf": file_iri}
        errors = [board.get(iri, graph=J) for kind, iri in kinds if kind == "Error"]
        assert {"tests/test_calc.py:5: AssertionError"} <= {e["text"] for e in errors if e}


def test_every_revision_is_kept_and_an_unchanged_node_writes_nothing(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    with archive:
        for summary in ("first", "first", "second"):
            ing.turn("DA", 1, f"{J}/turn/DA/1", summary)
        read = record(2, "read_file", {"path": "src/a.py"},
                      "src/a.py lines 1-2 of 2\nimport os\ndef go():\n")
        grep = record(3, "grep", {"pattern": "go"}, "src/a.py:2:def go():")
        ing.tool_result(read, f"{J}/turn/DA/2")
        ing.tool_result(read, f"{J}/turn/DA/2")
        ing.tool_result(grep, f"{J}/turn/DA/3")
        nodes = [i.iri for i in archive.list(kind="node")]
        assert [i for i in nodes if "/node/turn/" in i] == [f"{J}/node/turn/DA%2F1/1",
                                                             f"{J}/node/turn/DA%2F1/2"]
        first = from_jsonld(archive.get(f"{J}/node/turn/DA%2F1/1").content or b"")
        assert first["summary"] == "first"
        assert [i for i in nodes if "/node/file/" in i] == [f"{J}/node/file/src%252Fa.py/1"]
        assert [i for i in nodes if "/node/result/" in i] == [
            f"{J}/node/result/DA-2-0/1", f"{J}/node/result/DA-3-0/1"]
        files = board.query(f"PREFIX gl: <{NS}> SELECT ?f WHERE {{ ?f a gl:File }}", graph=J)
        assert [r["f"].iri for r in files] == [f"{J}/file/src%2Fa.py"]
        symbol = board.get(f"{J}/symbol/src%2Fa.py#go", graph=J)
        assert symbol is not None and symbol["line"] == 2
        ing.tool_result(record(4, "bash", {}, "FAILED src/a.py::go - boom"), None)  # no line
        again = board.get(f"{J}/result/DA-4-0", graph=J)
        assert again is not None and f"{J}/symbol/src%2Fa.py#go" in again["mentions"]
        assert board.get(f"{J}/symbol/src%2Fa.py#go", graph=J) == symbol  # the line is kept


def test_hostile_paths_get_valid_iris_and_read_back_exactly(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    path = 'we "ird" <dir>/{ü ñ}|^`\\x/../a%20b#c?.py'
    with archive:
        ing.tool_result(record(1, "read_file", {"path": path, "other": "../../etc/passwd"},
                               "x"), None)
        ing.tool_result(record(2, "read_file", {"path": "../../etc/passwd"}, "error: no", False),
                        None)
        files = board.query(f"PREFIX gl: <{NS}> SELECT ?f ?p WHERE {{ ?f gl:path ?p }}",
                            graph=J)
        assert [r["p"] for r in files] == []  # the backslash makes it no workspace path
        clean = 'we "ird" <dir>/{ü ñ}|^`/a%20b#c?.py'
        hostile = 'we "ird" <dir>/{ü ñ}|^`/sub/../a%20b#c?.py'
        ing.tool_result(record(3, "write_file", {"path": hostile, "content": "def f():\n"},
                               "wrote"), None)
        files = board.query(f"PREFIX gl: <{NS}> SELECT ?f ?p WHERE {{ ?f a gl:File ; "
                            "gl:path ?p }", graph=J)
        assert [r["p"] for r in files] == [clean]
        iri = files[0]["f"].iri
        assert check_iri(iri) == iri and iri == f"{J}/file/{quote(clean, safe='')}"
        symbols = board.query(f"PREFIX gl: <{NS}> SELECT ?s WHERE {{ ?s a gl:Symbol }}",
                              graph=J)
        assert [check_iri(r["s"].iri) for r in symbols] == [
            f"{J}/symbol/{quote(clean, safe='')}#f"]
        errors = board.query(f"PREFIX gl: <{NS}> SELECT ?t WHERE {{ ?e a gl:Error ; gl:text ?t }}",
                             graph=J)
        assert [r["t"] for r in errors] == ["error: no"]


def test_one_bad_entity_does_not_lose_the_others(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    path = "😀" * 300  # a valid File IRI, but a Symbol IRI in it is over 4096 characters
    with archive:
        ing.tool_result(record(1, "read_file", {"path": path},
                               f"{path} lines 1-1 of 1\ndef a{'名' * 99}():\n"), None)
        result = board.get(f"{J}/result/DA-1-0", graph=J)
        assert result is not None and result["mentions"] == [f"{J}/file/{quote(path, safe='')}"]
        assert board.get(result["mentions"][0], graph=J) is not None
        with pytest.raises(VocabularyError):
            ing.turn("DA", 1, "gliding://job/other/turn/DA/1", "not this job's turn")


def test_check_verdicts_become_reports_about_what_they_check(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    verdicts = [
        outcome_of(CheckResult(FileContains("src/a b.py", "def go"), False,
                               "expected text 'def go'; file starts: ''", "def go")),
        outcome_of(CheckResult(CommandSucceeds("pytest -q"), True, "exit code 0; no output",
                               "exit code 0")),
        CheckOutcome(check="a verdict from elsewhere", status="fail", evidence="x" * 900),
    ]
    with archive:
        iris = ing.check_report(2, 1, verdicts)
        assert iris == [f"{J}/check/2.1/{i}" for i in (1, 2, 3)]
        first, second, third = (board.get(iri, graph=J) for iri in iris)
        assert first == {"@id": iris[0], "@type": "CheckReport", "status": "fail",
                         "about": [f"{J}/artifact/src%2Fa%20b.py"],
                         "text": "file src/a b.py contains 'def go'",
                         "summary": "expected text 'def go'; file starts: ''", "partOf": J}
        assert second is not None and second["status"] == "pass" and second["about"] == [J]
        assert second["text"] == "command `pytest -q` exits 0"
        assert third is not None and third["summary"] == "x" * 500 and third["about"] == [J]


def test_restore_takes_up_an_earlier_runs_revisions(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    with archive:
        ing.job_node("goal")
        ing.turn("DA", 1, f"{J}/turn/DA/1", "first")
        ing.turn("DA", 1, f"{J}/turn/DA/1", "second")
        again = direct(board, archive)  # a resumed job's ingestor
        assert again.restore() == 2
        again.turn("DA", 1, f"{J}/turn/DA/1", "second")  # unchanged: nothing new archived
        again.turn("DA", 1, f"{J}/turn/DA/1", "third")  # changed: the next revision
        turns = [i.iri for i in archive.list(kind="node") if "/node/turn/" in i.iri]
        assert turns == [f"{J}/node/turn/DA%2F1/{n}" for n in (1, 2, 3)]


def test_restore_keeps_entities_merging_across_a_resume(tmp_path: Path) -> None:
    ing, board, archive = ingestor(tmp_path)
    crash = ('Traceback (most recent call last):\n  File "src/app.py", line 12, in main\n'
             '    run()\nValueError: bad\n')
    with archive:
        ing.tool_result(ToolRecord("bash", {"command": "python src/app.py"}, False, crash,
                                   f"{J}/result/DA-1-0"))
        again = direct(board, archive)  # the resumed job's ingestor
        again.restore()
        again.tool_result(ToolRecord("read_file", {"path": "src/app.py"}, True,
                                     "def main():\n    pass\n", f"{J}/result/DA-2-0"))
        symbol = board.get(f"{J}/symbol/src%2Fapp.py#main", graph=J)
    assert symbol is not None and symbol["line"] == 12  # the first sighting's line is kept
