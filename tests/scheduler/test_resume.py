"""Durable jobs in process: a job that dies mid-run resumes from its journal; archived model
turns are replayed (not asked again), archived tool results are not run again, an interrupted
shell call is not repeated, and the blackboard catches up from L0."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.task import Task
from gliding.core.checks import CommandSucceeds
from gliding.core.iri import record_iri
from gliding.core.messages import Completion
from gliding.daemon.compose import JobHandle, resume_job, run_job
from gliding.daemon.jobs import list_jobs
from gliding.daemon.runtime import open_blackboard
from gliding.llm.port import LLMRequest
from gliding.llm.scripted import FileScriptedLLM
from gliding.memory.archive.store import Archive

REPLIES = """\
PA:
  - finish: {steps: [one, two, three]}
DA:
  - bash: {command: "echo one >> log.txt"}
  - bash: {command: "echo two >> log.txt"}
  - bash: {command: "echo three >> log.txt"}
  - finish: {summary: three lines}
CA:
  - run_checks: {}
  - finish: {notes: ok}
AA:
  - finish: {decision: done, report: three lines}
"""


class Crash(BaseException):
    """Stands in for kill -9: nothing below the model call gets to clean up after it."""


class Dying:
    """The replies file's model, dying on its ``die_at``-th call (0: never)."""

    def __init__(self, path: Path, die_at: int = 0) -> None:
        self.inner = FileScriptedLLM(path)
        self.die_at = die_at
        self.asked: list[tuple[str, int]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.asked.append((request.meta["role"], request.meta["turn"]))
        if len(self.asked) == self.die_at:
            raise Crash
        return await self.inner.complete(request)


def setup(tmp: Path) -> tuple[Task, Any, Path]:
    (tmp / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    task = Task(goal="Append one, two and three to log.txt", workspace=tmp / "ws", model=None,
                pipeline=("PA", "DA", "CA", "AA"), turns={}, prompt_tokens=None,
                cost_usd=None, wall_time_s=60,
                checks=(CommandSucceeds("test \"$(cat log.txt)\" = \"$(printf 'one\\ntwo\\n"
                                        "three')\""),), source=tmp / "task.yaml")
    settings = load_settings(overrides={"data_dir": str(tmp / "data"),
                                        "memory.vectors.enabled": False}, env={})
    return task, settings, tmp / "replies.yaml"


def crash(task: Task, settings: Any, llm: Dying) -> str:
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - Crash may come grouped
        anyio.run(lambda: run_job(task, settings, llm=llm))
    assert "Crash" in repr(caught.value)
    (job,) = [j.job for j in list_jobs(settings.data_dir)]
    return job


def resume(job: str, settings: Any, llm: Dying) -> JobHandle:
    return anyio.run(lambda: resume_job(job, settings, llm=llm))


def test_a_job_killed_mid_role_resumes_without_asking_or_running_anything_twice(
        tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    first = Dying(replies, die_at=4)  # PA 1, DA 1, DA 2 answered; dies asked for DA turn 3
    job = crash(task, settings, first)
    assert (tmp_path / "ws" / "log.txt").read_text() == "one\ntwo\n"
    assert [j.status for j in list_jobs(settings.data_dir)] == ["interrupted"]

    second = Dying(replies)
    handle = resume(job, settings, second)

    assert handle.report is not None and handle.report.outcome == "success"
    assert (tmp_path / "ws" / "log.txt").read_text() == "one\ntwo\nthree\n"
    # PA's turn and DA's first two were replayed from L0: the model saw only what was new
    assert second.asked == [("DA", 3), ("DA", 4), ("CA", 1), ("CA", 2), ("AA", 1)]
    with Archive.open(settings.data_dir, job, create=False) as archive:
        ledger = [c.turn_iri for c in archive.calls()]
        assert len(ledger) == len(set(ledger)) == 8  # every turn paid once
        assert archive.get_meta("status") == "success"
        assert archive.get_meta("resumes") == 1
    assert [j.status for j in list_jobs(settings.data_dir)] == ["success"]
    assert handle.report.resumed == 1 and not handle.report.workspace_changed


def interrupt_da_turn_2(settings: Any, job: str, *, began: bool) -> None:
    """As if the process died after DA asked for `echo two` and its intent was written, before
    (``began=False``) or after (``began=True``) bash marked that the command began."""
    with Archive.open(settings.data_dir, job, create=False) as archive:
        archive.put(record_iri(job, "intent", "DA-2-0"), '{"command": "echo two >> log.txt"}',
                    kind="intent")
        turn_one = archive.get(f"gliding://job/{job}/turn/DA/1").content
        archive.put(f"gliding://job/{job}/turn/DA/2", (turn_one or b"").replace(
            b"echo one", b"echo two"), kind="turn", media_type="application/json",
            meta={"role": "DA", "turn": 2})
        if began:
            (archive.path.parent / "began").mkdir(exist_ok=True)
            (archive.path.parent / "began" / "DA-2-0").touch()


def test_an_interrupted_shell_call_is_not_run_again_and_the_model_is_told(
        tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    job = crash(task, settings, Dying(replies, die_at=3))  # dies asked for DA turn 2
    interrupt_da_turn_2(settings, job, began=True)
    second = Dying(replies)
    handle = resume(job, settings, second)

    assert handle.report is not None
    assert (tmp_path / "ws" / "log.txt").read_text() == "one\nthree\n"  # two never ran twice
    assert handle.report.outcome != "success"  # and the check says what is missing
    assert [c.status for c in handle.report.checks] == ["fail"]
    with Archive.open(settings.data_dir, job, create=False) as archive:
        told = archive.get(f"gliding://job/{job}/result/DA-2-0").text()
    assert told.startswith("error: interrupted")
    assert ("DA", 2) not in second.asked


def test_a_shell_call_cut_off_before_it_began_runs_on_resume(tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    job = crash(task, settings, Dying(replies, die_at=3))
    interrupt_da_turn_2(settings, job, began=False)

    handle = resume(job, settings, Dying(replies))

    assert handle.report is not None and handle.report.outcome == "success"
    assert (tmp_path / "ws" / "log.txt").read_text() == "one\ntwo\nthree\n"  # two ran once


def test_the_blackboard_catches_up_from_l0_on_resume(tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    job = crash(task, settings, Dying(replies, die_at=4))
    board = open_blackboard(settings)
    assert board is not None
    board.close()
    resume(job, settings, Dying(replies))
    with Archive.open(settings.data_dir, job, create=False) as archive:
        results = {e.iri for e in archive.list(kind="result")}
    board = open_blackboard(settings)
    assert board is not None
    try:
        rows = board.query(f"SELECT ?r WHERE {{ GRAPH <gliding://job/{job}> {{ ?r a "
                           "<https://gliding.dev/ns/v1#ToolResult> } }", timeout_s=10)
    finally:
        board.close()
    assert {r["r"].iri for r in rows} == results  # type: ignore[union-attr]


def test_resuming_a_finished_job_says_so(tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    done = anyio.run(lambda: run_job(task, settings, llm=Dying(replies)))
    assert done.report is not None and done.report.outcome == "success"

    again = resume(done.report.job, settings, Dying(replies))

    assert again.report is None and again.finished_before == "success"


def test_a_workspace_changed_behind_the_jobs_back_is_reported(tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    job = crash(task, settings, Dying(replies, die_at=4))
    (tmp_path / "ws" / "log.txt").write_text("someone else\n")

    handle = resume(job, settings, Dying(replies))

    assert handle.report is not None and handle.report.workspace_changed
    assert handle.report.outcome != "success"  # the resumed job trusts nothing it did not do
    assert [c.status for c in handle.report.checks] == ["fail"]


def test_a_job_killed_after_its_last_transition_resumes_to_its_outcome_at_once(
        tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    done = anyio.run(lambda: run_job(task, settings, llm=Dying(replies)))
    assert done.report is not None
    with Archive.open(settings.data_dir, done.report.job, create=False) as archive:
        archive.set_meta("status", "running")  # as if killed before the status was written

    model = Dying(replies)
    again = resume(done.report.job, settings, model)

    # no wait for events that will never come: such a wait would end in the task's 60 s
    # wall-time budget (budget_exceeded), not in the outcome it had
    assert again.report is not None and again.report.outcome == "success"
    assert model.asked == []  # nothing was redone


def test_a_data_dir_inside_the_workspace_is_not_a_change_behind_the_jobs_back(
        tmp_path: Path) -> None:
    task, settings, replies = setup(tmp_path)
    task = dataclasses.replace(task, workspace=tmp_path)  # workspace "." holds the data dir
    job = crash(task, settings, Dying(replies, die_at=4))
    handle = resume(job, settings, Dying(replies))
    assert handle.report is not None and handle.report.outcome == "success"
    assert not handle.report.workspace_changed


class Broken:
    """A model backend with a bug: it raises something that is not a GlidingError."""

    name = "broken"

    async def complete(self, request: LLMRequest) -> Completion:
        raise RuntimeError("a bug in the backend")


def test_a_crashing_agent_ends_the_job_as_an_error_not_a_traceback(tmp_path: Path) -> None:
    task, settings, _ = setup(tmp_path)
    handle = anyio.run(lambda: run_job(task, settings, llm=Broken()))
    assert handle.report is not None and handle.report.outcome == "error"
    assert "RuntimeError: a bug in the backend" in (handle.report.stopped or "")
    assert [j.status for j in list_jobs(settings.data_dir)] == ["error"]
