"""Parallel DA sessions: the worker serves several step assignments of one job at once, each in
its own session whose turn and result IRIs are its own (and the same when replayed), with the
job's one budget shared."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from gliding.agents.roles import load_roles
from gliding.agents.worker import AgentWorker, JobAgents, session_of
from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import AnswerMsg, ArtifactMsg, Assignment
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.clock import SystemClock
from gliding.core.iri import parse_iri, parse_step_session, step_session, turn_iri
from gliding.errors import IRIError
from gliding.llm.port import LLM
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing.latency import LatencyLLM, step_team
from gliding.tools.checks import ChecksGroup
from gliding.tools.groups import job_groups

JOB = "job1"


def kit(tmp: Path, llm: LLM, archive: Archive, limits: Limits | None = None) -> JobAgents:
    settings = Settings()
    port = LocalArchive(archive, tmp / "data")
    checks = ChecksGroup(())
    (tmp / "ws").mkdir(exist_ok=True)
    return JobAgents(job=JOB, workspace=tmp / "ws", llm=llm, roles=load_roles(),
                     tools=job_groups(checks=checks, reader=port, iri_base=f"gliding://job/{JOB}/"),
                     checks=checks, archive=port,
                     budget=BudgetTracker(limits or Limits(), started_at=0.0),
                     bus=InProcessBus(), clock=SystemClock(), settings=settings,
                     counter=TokenCounter(settings.context.tokenizer))


def step(k: int, cycle: int = 1) -> Assignment:
    return Assignment(job=JOB, role="DA", cycle=cycle, attempt=0, goal="write the files",
                      instructions=f"Your step: write s{k}.txt", step=f"s{k}")


async def serve(agents: JobAgents, assignments: Sequence[Assignment], *,
                concurrency: int) -> list[AnswerMsg]:
    """Publish ``assignments`` to a worker and collect one answer per distinct one."""
    want = len({(a.step, a.cycle, a.attempt) for a in assignments})
    answers: list[AnswerMsg] = []
    worker = AgentWorker(agents, ["DA"], concurrency=concurrency)
    async with agents.bus.subscribe(topics.results(JOB)) as inbox, \
            anyio.create_task_group() as tg:
        await tg.start(worker.serve)
        for a in assignments:
            await agents.bus.publish(topics.agent(JOB, a.role), a)
        with anyio.fail_after(30):
            while len(answers) < want:
                _topic, m = await inbox.receive()
                answers.append(m)  # type: ignore[arg-type]
        with anyio.move_on_after(0.3):  # a duplicate's answer would come now
            while True:
                answers.append((await inbox.receive())[1])  # type: ignore[arg-type]
        tg.cancel_scope.cancel()
    return answers


def test_step_sessions_run_at_once_with_iris_of_their_own(tmp_path: Path) -> None:
    llm = LatencyLLM(step_team(3), latency_s=0.2)
    with Archive.open(tmp_path / "data", JOB) as archive:
        agents = kit(tmp_path, llm, archive)
        answers = anyio.run(lambda: serve(agents, [step(1), step(2), step(3)], concurrency=3))
        assert llm.peak == 3  # all three sessions had a model call in flight together
        assert sorted(a.step or "" for a in answers) == ["s1", "s2", "s3"]
        assert all(isinstance(a, ArtifactMsg) and a.status == "finished" for a in answers)
        by_step = {a.step: a for a in answers if isinstance(a, ArtifactMsg)}
        assert by_step["s2"].written == {"s2.txt": f"gliding://job/{JOB}/result/DA.1.s2-1-0"}
        assert [line.iri for line in by_step["s2"].lines] == [
            f"gliding://job/{JOB}/turn/DA.1.s2/1", f"gliding://job/{JOB}/turn/DA.1.s2/2"]
        turns = sorted(i.iri for i in archive.list(kind="turn"))
        assert turns == sorted(f"gliding://job/{JOB}/turn/DA.1.s{k}/{n}"
                               for k in (1, 2, 3) for n in (1, 2))
        assert {i.meta["role"] for i in archive.list(kind="turn")} == {
            "DA.1.s1", "DA.1.s2", "DA.1.s3"}  # what catch-up rebuilds a result's turn from
        assert {c.role for c in archive.calls()} == {"DA"}  # spending stays the role's
        assert agents.budget.by_role["DA"].prompt_tokens > 0
        assert (tmp_path / "ws" / "s3.txt").read_text() == "step s3"

        again = LatencyLLM(step_team(3), latency_s=0.2)  # a resumed job: replayed, not asked
        agents = kit(tmp_path, again, archive)
        replayed = anyio.run(lambda: serve(agents, [step(1), step(2), step(3)], concurrency=3))
        assert again.calls == 0
        assert sorted((a.step, a.lines[-1].iri) for a in replayed) == sorted(
            (a.step, a.lines[-1].iri) for a in answers)


def test_a_worker_of_concurrency_one_serves_them_one_at_a_time(tmp_path: Path) -> None:
    llm = LatencyLLM(step_team(2), latency_s=0.05)
    with Archive.open(tmp_path / "data", JOB) as archive:
        answers = anyio.run(lambda: serve(kit(tmp_path, llm, archive), [step(1), step(2)],
                                          concurrency=1))
    assert llm.peak == 1 and len(answers) == 2


def test_an_assignment_delivered_twice_while_it_runs_is_answered_once(tmp_path: Path) -> None:
    llm = LatencyLLM(step_team(1), latency_s=0.1)
    with Archive.open(tmp_path / "data", JOB) as archive:
        answers = anyio.run(lambda: serve(kit(tmp_path, llm, archive), [step(1), step(1)],
                                          concurrency=2))
    assert [a.step for a in answers] == ["s1"] and llm.calls == 2


def test_concurrent_sessions_overspend_a_budget_by_one_call_each_at_most(
        tmp_path: Path) -> None:
    llm = LatencyLLM(step_team(3), latency_s=0.1)
    with Archive.open(tmp_path / "data", JOB) as archive:
        agents = kit(tmp_path, llm, archive, Limits(prompt_tokens=1))
        answers = anyio.run(lambda: serve(agents, [step(1), step(2), step(3)], concurrency=3))
    assert llm.calls == 3  # each session's first call was in flight before any was charged
    assert all(a.status == "budget" for a in answers)


def test_step_session_names() -> None:
    name = step_session("DA", 2, "s-1_b")
    assert name == "DA.2.s-1_b" and parse_step_session(name) == ("DA", 2, "s-1_b")
    assert parse_step_session("DA") is None
    iri = str(turn_iri("j", name, 3))
    assert iri == "gliding://job/j/turn/DA.2.s-1_b/3" and parse_iri(iri).parts == (name, "3")
    with pytest.raises(IRIError):
        step_session("DA", 1, "a/b")
    assert session_of(Assignment(job="j", role="DA", cycle=1, attempt=0, goal="g",
                                 instructions="i")) == "DA"
