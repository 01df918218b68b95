"""The exploratory pipeline through the composition root: PA plans four independent steps, four
DA sessions work on them at once, CA checks the four files, AA is done; the blackboard says
which session did which step; a job killed with steps outstanding resumes without asking the
model, or running a command, twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.task import Task
from gliding.core.checks import FileContains
from gliding.core.messages import Completion
from gliding.daemon.compose import resume_job, run_job
from gliding.daemon.jobs import list_jobs
from gliding.daemon.runtime import blackboard_path
from gliding.llm.port import LLM, LLMRequest
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.ingest.ingestor import Ingestor
from gliding.testing.blocking import Blocking
from gliding.testing.latency import LatencyLLM, step_team

STEPS = 4
GOAL = ("Write the four files: " + " ".join(f"{k}) s{k}.txt containing step s{k}"
                                           for k in range(1, STEPS + 1)))


def make_task(tmp: Path) -> Task:
    return Task(goal=GOAL, workspace=tmp / "ws", model=None, pipeline="auto", turns={},
                prompt_tokens=None, cost_usd=None, wall_time_s=120,
                checks=tuple(FileContains(f"s{k}.txt", f"step s{k}")
                             for k in range(1, STEPS + 1)),
                source=tmp / "task.yaml")


def make_settings(tmp: Path) -> Any:
    return load_settings(overrides={"data_dir": str(tmp / "data"),
                                    "memory.vectors.enabled": False}, env={})


def most_at_once(events: list[JobEvent]) -> int:
    """The most DA step sessions between their role.started and role.finished at once."""
    running, most = 0, 0
    for e in events:
        if e.data.get("role") == "DA" and e.data.get("step"):
            running += {"role.started": 1, "role.finished": -1}.get(e.event, 0)
            most = max(most, running)
    return most


def test_four_steps_run_at_once_and_the_board_says_who_did_each(tmp_path: Path) -> None:
    events: list[JobEvent] = []
    llm = LatencyLLM(step_team(STEPS), latency_s=0.3)
    settings = make_settings(tmp_path)
    handle = anyio.run(lambda: run_job(make_task(tmp_path), settings, llm=llm,
                                       on_event=events.append))
    report = handle.report
    assert report is not None and report.outcome == "success", report
    assert report.pipeline.kind == "exploratory"  # pipeline: auto read the four parts
    for k in range(1, STEPS + 1):
        assert (tmp_path / "ws" / f"s{k}.txt").read_text() == f"step s{k}"
    assert most_at_once(events) == STEPS and llm.peak == STEPS
    assert [(r.role, r.turns) for r in report.roles] == [("PA", 1), ("DA", 2 * STEPS),
                                                         ("CA", 2), ("AA", 1)]
    assert report.checks_verified_by == "CA" and len(report.plan) == STEPS
    assert {line.iri.rsplit("/", 2)[1] for line in report.turns if line.role == "DA"} == {
        f"DA.1.s{k}" for k in range(1, STEPS + 1)}

    job = report.job
    board = OxigraphBlackboard.open(blackboard_path(settings.data_dir))
    try:
        step = board.get(f"gliding://job/{job}/plan/1/step/s3", graph=f"gliding://job/{job}")
        assert step is not None and step["status"] == "done"
        assert step["doneBy"] == [f"gliding://job/{job}/turn/DA.1.s3/1",
                                  f"gliding://job/{job}/turn/DA.1.s3/2"]
        assert "dependsOn" not in step
        turn = board.get(f"gliding://job/{job}/turn/DA.1.s3/1", graph=f"gliding://job/{job}")
        assert turn is not None and turn["role"] == "DA"
    finally:
        board.close()


def test_the_ingestor_records_dependencies_and_the_session_of_a_step(tmp_path: Path) -> None:
    from gliding.bus.messages import PlanStep

    board = OxigraphBlackboard.open(tmp_path / "board")
    try:
        with Archive.open(tmp_path / "data", "j1") as archive:
            ing = Blocking(Ingestor(board, archive, "j1",
                                    DirectWriter(JobNodeStore(board, archive, "j1"))))
            ing.plan(2, [PlanStep(id="a", text="A"), PlanStep(id="b", text="B",
                                                              depends_on=["a"])], None)
            base = "gliding://job/j1"
            ing.turn("DA", 1, f"{base}/turn/DA.2.b/1", 'write_file(path="b") → wrote 1 bytes')
            doing = board.get(f"{base}/plan/2/step/b", graph=base)
            assert doing is not None and doing["status"] == "doing"
            assert doing["dependsOn"] == [f"{base}/plan/2/step/a"]
            ing.turn("DA.2.b", 2, f"{base}/turn/DA.2.b/2", 'finish(summary="b") → finished')
            done = board.get(f"{base}/plan/2/step/b", graph=base)
            assert done is not None and done["status"] == "done"
            assert done["doneBy"] == [f"{base}/turn/DA.2.b/1", f"{base}/turn/DA.2.b/2"]
            untouched = board.get(f"{base}/plan/2/step/a", graph=base)
            assert untouched is not None and untouched["status"] == "todo"

            # a resumed job picks the steps up
            again = Blocking(Ingestor(board, archive, "j1",
                                      DirectWriter(JobNodeStore(board, archive, "j1"))))
            again.restore()
            again.turn("DA", 1, f"{base}/turn/DA.2.a/1", "finish(summary=\"a\") → finished")
            a = board.get(f"{base}/plan/2/step/a", graph=base)
            assert a is not None and a["status"] == "done" and a["text"] == "A"
    finally:
        board.close()


class Crash(BaseException):
    """Stands in for kill -9: nothing below the model call gets to clean up after it."""


class Dying:
    """``inner``, dying on its ``die_at``-th call (0: never); remembers what it was asked."""

    def __init__(self, inner: LLM, die_at: int = 0) -> None:
        self.inner, self.die_at = inner, die_at
        self.asked: list[tuple[str, int]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.asked.append((str(request.meta["session"]), int(request.meta["turn"])))
        if len(self.asked) == self.die_at:
            raise Crash
        return await self.inner.complete(request)


@pytest.mark.heavy
def test_a_job_killed_with_steps_outstanding_resumes_each_without_repeats(
        tmp_path: Path) -> None:
    task, settings = make_task(tmp_path), make_settings(tmp_path)
    # PA 1, the four DAs' first turns 2-5 (each runs bash), their second turns 6-9: the
    # ninth dies, when every bash command has run and no DA has finished
    first = Dying(LatencyLLM(step_team(STEPS, tool="bash"), latency_s=0.2), die_at=9)
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - Crash may come grouped
        anyio.run(lambda: run_job(task, settings, llm=first))
    assert "Crash" in repr(caught.value)
    (job,) = [j.job for j in list_jobs(settings.data_dir)]
    with Archive.open(settings.data_dir, job, create=False) as archive:
        assert len(archive.list(kind="result")) == STEPS

    second = Dying(LatencyLLM(step_team(STEPS, tool="bash"), latency_s=0.2))
    handle = anyio.run(lambda: resume_job(job, settings, llm=second))

    assert handle.report is not None and handle.report.outcome == "success"
    for k in range(1, STEPS + 1):  # each command ran once
        assert (tmp_path / "ws" / f"s{k}.txt").read_text() == f"step s{k}\n"
    # PA's turn and each DA's first were replayed from L0: only what was new was asked
    assert sorted(second.asked) == sorted(
        [(f"DA.1.s{k}", 2) for k in range(1, STEPS + 1)] + [("CA", 1), ("CA", 2), ("AA", 1)])
    with Archive.open(settings.data_dir, job, create=False) as archive:
        ledger = [c.turn_iri for c in archive.calls()]
        assert len(ledger) == len(set(ledger)) == 1 + 2 * STEPS + 3  # every turn paid once
