"""Shared memory across jobs: a second job's DA finds, through kg_search, knowledge_query and
recall, what an earlier job in the same data directory recorded on the blackboard — and a
refused query is an error DA reads, not the end of the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from gliding.config.loader import load_settings
from gliding.config.task import Task
from gliding.core.checks import FileContains
from gliding.daemon.compose import JobHandle, run_job
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.tools.readback import KNOWLEDGE_LABEL

FIRST_GOAL = "Record that the staging database listens on port 5433 in notes.txt"


def task(tmp: Path, goal: str, **changes: Any) -> Task:
    values: dict[str, Any] = {
        "goal": goal, "workspace": tmp / "ws", "model": None, "pipeline": ("DA",),
        "turns": {"DA": 8}, "prompt_tokens": None, "cost_usd": None, "wall_time_s": None,
        "checks": (), "source": tmp / "task.yaml",
    }
    values.update(changes)
    return Task(**values)


def run(tmp: Path, job_task: Task, llm: ScriptedLLM) -> JobHandle:
    settings = load_settings(overrides={"data_dir": str(tmp / "data"),
                                        "memory.vectors.enabled": False}, env={})
    return anyio.run(lambda: run_job(job_task, settings, llm=llm))


def results(tmp: Path, handle: JobHandle) -> list[tuple[str, bool, str]]:
    """Each archived tool result of the job, in order: (tool, ok, text)."""
    with Archive.open(tmp / "data", handle.report.job, create=False) as archive:
        return [(str(item.meta["tool"]), bool(item.meta["ok"]), archive.get(item.iri).text())
                for item in archive.list(kind="result")]


def test_a_later_job_reads_what_an_earlier_job_recorded(tmp_path: Path) -> None:
    first = run(tmp_path, task(tmp_path, FIRST_GOAL,
                               checks=(FileContains("notes.txt", "port 5433"),)),
                ScriptedLLM({"DA": [
                    call("write_file", path="notes.txt", content="staging database: port 5433"),
                    call("finish", summary="recorded the staging database port")]}))
    assert first.report.outcome == "success", first.report
    first_job = f"gliding://job/{first.report.job}"

    second = run(tmp_path, task(tmp_path, "Which port does the staging database use?"),
                 ScriptedLLM({"DA": [
                     call("kg_search", query="staging database port"),
                     call("knowledge_query", sparql=(  # gl: is predeclared for the model
                         "SELECT ?job ?goal WHERE { GRAPH ?g { ?job a gl:Job ; gl:name ?goal } }"
                         " ORDER BY ?goal")),
                     call("recall", query="staging database port 5433"),
                     call("knowledge_query",
                          sparql=f'INSERT DATA {{ GRAPH <{first_job}> {{ <{first_job}> '
                                 '<https://gliding.dev/ns/v1#name> "forged" }} }}'),
                     call("finish", summary="the staging database listens on port 5433")]}))

    assert second.report.outcome == "success", second.report
    assert second.report.job != first.report.job
    (tools, oks, texts) = zip(*results(tmp_path, second), strict=True)
    assert tools == ("kg_search", "knowledge_query", "recall", "knowledge_query")
    assert oks == (True, True, True, False)
    search, rows, recalled, refused = texts
    assert f"Job {first_job}: {FIRST_GOAL}" in search.splitlines()
    assert f'job={first_job} goal="{FIRST_GOAL}"' in rows.splitlines()
    assert recalled.startswith(KNOWLEDGE_LABEL)
    assert FIRST_GOAL in recalled and "port 5433" in recalled
    assert refused.startswith("error: refused: INSERT is not allowed")


def test_read_result_reads_an_earlier_jobs_result_that_recall_pointed_at(tmp_path: Path) -> None:
    first = run(tmp_path, task(tmp_path, FIRST_GOAL), ScriptedLLM({"DA": [
        call("write_file", path="notes.txt", content="staging database: port 5433"),
        call("finish", summary="recorded the staging database port")]}))
    with Archive.open(tmp_path / "data", first.report.job, create=False) as archive:
        written = next(item for item in archive.list(kind="result")
                       if item.meta["tool"] == "write_file")
        original = archive.get(written.iri).text()

    second = run(tmp_path, task(tmp_path, "What did the earlier job write?"),
                 ScriptedLLM({"DA": [
                     call("recall", query="write_file notes.txt staging"),
                     call("read_result", iri=written.iri),
                     call("read_result", iri=f"gliding://job/{first.report.job}/result/none"),
                     call("finish", summary="read it back")]}))

    (tools, oks, texts) = zip(*results(tmp_path, second), strict=True)
    assert tools == ("recall", "read_result", "read_result")
    assert written.iri in texts[0]  # recall shows the full IRI of another job's result
    assert oks[1] and texts[1] == original  # and it reads back exactly, from that job's archive
    assert not oks[2] and texts[2].startswith("error:")


def pa_system_prompt(llm: ScriptedLLM) -> str:
    request = next(r for r in llm.requests if r.meta.get("role") == "PA")
    return str(request.messages[0].content)


def test_pa_is_briefed_on_what_earlier_jobs_recorded_about_its_goal(tmp_path: Path) -> None:
    run(tmp_path, task(tmp_path, FIRST_GOAL), ScriptedLLM({"DA": [
        call("write_file", path="notes.txt", content="staging database: port 5433"),
        call("finish", summary="recorded the staging database port")]}))

    def planned(goal: str) -> str:
        llm = ScriptedLLM({"PA": [call("finish", steps=["look it up"])],
                           "DA": [call("list_dir", path="."), call("finish", summary="done")]})
        run(tmp_path, task(tmp_path, goal, pipeline=("PA", "DA")), llm)
        return pa_system_prompt(llm)

    related = planned("Check which port the staging database listens on")
    assert "Earlier jobs (long-term memory):" in related
    assert FIRST_GOAL in related
    unrelated = planned("Draw a picture of a lighthouse")  # shares no two words with it
    assert "Earlier jobs (long-term memory):" not in unrelated


def test_read_result_of_a_blackboard_node_gives_its_latest_revision(tmp_path: Path) -> None:
    first = run(tmp_path, task(tmp_path, FIRST_GOAL, pipeline=("PA", "DA")), ScriptedLLM({
        "PA": [call("finish", steps=["write the port to notes.txt"])],
        "DA": [call("write_file", path="notes.txt", content="port 5433"),
               call("finish", summary="done")]}))
    step = f"gliding://job/{first.report.job}/plan/1/step/1"
    second = run(tmp_path, task(tmp_path, "Which step wrote the port?"), ScriptedLLM({"DA": [
        call("read_result", iri=step), call("finish", summary="read it")]}))
    ((tool, ok, text),) = results(tmp_path, second)
    assert tool == "read_result" and ok, text
    assert '"@type":"Step"' in text and "write the port to notes.txt" in text
