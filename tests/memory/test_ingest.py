"""Ingestion: a job's plan, checks, decision and artifacts become blackboard nodes in the job's
named graph, and every revision is archived in L0 as JSON-LD."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import blackboard_path, run_job
from gliding.memory.archive import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.vocabulary import from_jsonld
from gliding.testing import ScriptedLLM, call

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
        assert types == ["Artifact", "CheckReport", "Decision", "Job", "Plan", "Step", "Step"]
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


def test_memory_search_finds_nodes_by_their_words(tmp_path: Path) -> None:
    job = run(tmp_path)
    out = subprocess.run([GLIDING, "memory", "search", "verify it", "--data-dir",
                          str(tmp_path / "data"), "-k", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "Step" in first and f"gliding://job/{job}/plan/1/step/2" in first


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
