"""Two jobs in one process share one Runtime (blackboard, knowledge index, token counter): both
ingest into the blackboard, both recall from long-term memory, and neither stalls the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.task import Task
from gliding.core.checks import FileContains
from gliding.daemon.compose import JobHandle, run_job
from gliding.daemon.runtime import Runtime
from gliding.testing import ScriptedLLM, call

DELAY_S = 0.15  # per model call, like a hosted model's latency: the jobs wait, not compute


def task(tmp: Path, name: str) -> Task:
    return Task(goal=f"Write {name}.txt holding the word {name}", workspace=tmp / name,
                model=None, pipeline=("DA", "CA"), turns={}, prompt_tokens=None,
                cost_usd=None, wall_time_s=60, checks=(FileContains(f"{name}.txt", name),),
                source=tmp / f"{name}.yaml")


def model(name: str) -> ScriptedLLM:
    return ScriptedLLM({
        "DA": [call("write_file", path=f"{name}.txt", content=name),
               call("recall", query="staging database port"),
               call("bash", command=f"cat {name}.txt"),
               call("finish", summary=f"wrote {name}.txt")],
        "CA": [call("run_checks"), call("finish", notes="ok")],
    }, delay_s=DELAY_S)


@pytest.mark.heavy
def test_two_jobs_in_one_runtime_both_ingest_and_recall_without_stalling(
        tmp_path: Path) -> None:
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data"),
                                        "memory.vectors.enabled": False}, env={})
    seeded = run_seed(tmp_path, settings)
    assert seeded.report is not None and seeded.report.outcome == "success"

    seen: list[tuple[str, str]] = []  # (job name, event), in the order the loop saw them

    async def main() -> tuple[list[JobHandle], list[ScriptedLLM]]:
        async with Runtime.open(settings) as runtime:
            handles: list[JobHandle] = []
            llms = [model("left"), model("right")]

            async def one(name: str, llm: ScriptedLLM) -> None:
                handles.append(await run_job(
                    task(tmp_path, name), settings, llm=llm, runtime=runtime,
                    on_event=lambda event: seen.append((name, event.event))))

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "left", llms[0])
                tg.start_soon(one, "right", llms[1])
            return handles, llms

    handles, llms = anyio.run(main)
    assert sorted(h.report.outcome for h in handles if h.report) == ["success", "success"]
    for handle in handles:
        assert handle.report is not None
        recall = next(t for t in handle.report.turns if t.summary.startswith("recall("))
        assert "Long-term memory" in recall.summary or "staging" in recall.summary, recall
    for llm in llms:  # each job's recall answered from long-term memory (the seed job's words)
        recall_reply = next(m for r in llm.requests for m in r.messages[-1:]
                            if m.role == "tool" and m.name == "recall")
        assert "Long-term memory" in recall_reply.content
        assert "5433" in recall_reply.content
    counts = tool_results_per_graph(settings)
    for handle in handles:
        assert handle.report is not None
        assert counts.get(f"gliding://job/{handle.report.job}", 0) == 4  # DA 3 + CA 1
    # side by side, not one after the other: each job started before the other finished, and
    # took turns while the other was between its first and last turn (neither waited it out)
    started = {name: seen.index((name, "job.started")) for name in ("left", "right")}
    finished = {name: seen.index((name, "job.finished")) for name in ("left", "right")}
    assert started["left"] < finished["right"] and started["right"] < finished["left"], seen
    turns = [name for name, event in seen if event == "turn"]
    for name in ("left", "right"):
        mine = [i for i, turn in enumerate(turns) if turn == name]
        assert any(turn != name for turn in turns[mine[0]:mine[-1]]), seen


def run_seed(tmp: Path, settings: Any) -> JobHandle:
    llm = ScriptedLLM({"DA": [call("write_file", path="notes.txt",
                                   content="the staging database port is 5433"),
                              call("finish", summary="noted the staging database port 5433")]})
    seed = Task(goal="Note the staging database port", workspace=tmp / "seed", model=None,
                pipeline=("DA",), turns={}, prompt_tokens=None, cost_usd=None, wall_time_s=60,
                checks=(), source=tmp / "seed.yaml")
    return anyio.run(lambda: run_job(seed, settings, llm=llm))


def tool_results_per_graph(settings: Any) -> dict[str, int]:
    from gliding.daemon.runtime import open_blackboard

    board = open_blackboard(settings)
    assert board is not None
    try:
        rows = board.query("SELECT ?g (COUNT(?r) AS ?n) WHERE { GRAPH ?g { ?r a "
                           "<https://gliding.dev/ns/v1#ToolResult> } } GROUP BY ?g",
                           timeout_s=10)
    finally:
        board.close()
    return {getattr(r["g"], "iri", str(r["g"])): int(getattr(r["n"], "value", r["n"]))
            for r in rows}
