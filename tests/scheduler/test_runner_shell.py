"""The runner shell over a real InProcessBus, with a fake crew, a fake journal and fake checks.

The crew is a task that subscribes to ``job/<job>/agent/+`` and answers each Assignment on
``job/<job>/result/<ROLE>``, as the real agent workers do; what it answers is scripted per test.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from structlog.testing import capture_logs

from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import (
    AgentDone,
    AnswerMsg,
    ArtifactMsg,
    Assignment,
    BusMessage,
    CheckOutcome,
    CheckReportMsg,
    DecisionMsg,
    JobEvent,
    PlanMsg,
    UsageWire,
)
from gliding.bus.port import Bus, Subscription
from gliding.config.roles import auto_roles
from gliding.scheduler import policy, supervisor
from gliding.scheduler.runner import JobRunner
from gliding.scheduler.supervisor import SupervisorState, Verify
from gliding.testing.clock import autojump
from gliding.testing.journal import MemoryJournal

JOB = "r1"
CHECK = "file hello.txt contains 'Hi'"
STANDARD = policy.PipelineChoice(auto_roles(policy.STANDARD), "standard", "default")
EMERGENCY = policy.PipelineChoice(auto_roles(policy.EMERGENCY), "emergency", "fix")
SIMPLE = policy.PipelineChoice(auto_roles(policy.SIMPLE), "simple", "short")

Reply = Callable[[Assignment], list[tuple[str, BusMessage]]]


def verdict(status: str) -> CheckOutcome:
    return CheckOutcome(check=CHECK, status=status, evidence=f"hello.txt: {status}",
                        remedy="Write the file hello.txt containing the text 'Hi'")


def good(a: Assignment, *, ca: str = "pass", turns: int = 1) -> AnswerMsg:
    """The answer a well-behaved agent of ``a.role`` gives."""
    keys: dict[str, Any] = {"job": a.job, "role": a.role, "cycle": a.cycle,
                            "attempt": a.attempt, "turns": turns,
                            "usage": UsageWire(prompt_tokens=10, completion_tokens=2)}
    if a.role == "PA":
        return PlanMsg(**keys, steps=["write hello.txt"])
    if a.role == "DA":
        return ArtifactMsg(**keys, summary="wrote it", written={"hello.txt": "urn:da"})
    if a.role == "CA":
        return CheckReportMsg(**keys, results=[verdict(ca)], passed=ca == "pass")
    return DecisionMsg(**keys, decision=a.options[0], report="AA took the first option")


def answer_all(a: Assignment) -> list[tuple[str, BusMessage]]:
    return [(topics.result(a.job, a.role), good(a))]


def answer_none(a: Assignment) -> list[tuple[str, BusMessage]]:
    return []


Tape = list[tuple[str, object]]  # what happened, in order: ("journal", state), ("publish", msg)


class FakeJournal(MemoryJournal):
    """Keeps every transition in memory, in order (and on ``tape``, when given one)."""

    def __init__(self, tape: Tape | None = None) -> None:
        super().__init__()
        self.tape = tape if tape is not None else []

    async def record(self, state: SupervisorState, cause: str) -> None:
        await super().record(state, cause)
        self.tape.append(("journal", state))


class FakeChecks:
    """The task's checks: every call reports ``status`` for the one check."""

    def __init__(self, status: str = "pass") -> None:
        self.status = status
        self.calls: list[Verify] = []

    async def __call__(self, command: Verify) -> CheckReportMsg:
        self.calls.append(command)
        return CheckReportMsg(job=JOB, role=supervisor.RUNNER, cycle=command.cycle,
                              attempt=command.attempt, results=[verdict(self.status)],
                              passed=self.status == "pass", verified_by="runner")


class TapedBus:
    """A real InProcessBus that also notes each publish on a tape shared with the journal."""

    def __init__(self, tape: Tape) -> None:
        self.bus, self.tape = InProcessBus(), tape

    async def publish(self, topic: str, message: BusMessage) -> None:
        self.tape.append(("publish", message))
        await self.bus.publish(topic, message)

    def subscribe(self, pattern: str, *, max_buffer: int = 100, unverified: bool = False
                  ) -> AbstractAsyncContextManager[Subscription]:
        return self.bus.subscribe(pattern, max_buffer=max_buffer)

    async def aclose(self) -> None:
        await self.bus.aclose()

    @property
    def reconnects(self) -> int:
        return self.bus.reconnects


async def crew(bus: Bus, reply: Reply, seen: list[Assignment], *,
               task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Every role's agent at once: take assignments, publish what ``reply`` says."""
    async with bus.subscribe(topics.agent(JOB, "+")) as assignments:
        task_status.started()
        async for topic, a in assignments:
            assert isinstance(a, Assignment) and topic == topics.agent(JOB, a.role)
            seen.append(a)
            for t, m in reply(a):
                await bus.publish(t, m)


async def with_crew(bus: Bus, reply: Reply, seen: list[Assignment],
                    job: Callable[[], Awaitable[SupervisorState]],
                    limit_s: float = 2) -> SupervisorState:
    with anyio.fail_after(limit_s):  # virtual seconds under autojump
        async with anyio.create_task_group() as tg:
            await tg.start(crew, bus, reply, seen)
            final = await job()
            tg.cancel_scope.cancel()
    return final


def begin(choice: policy.PipelineChoice = STANDARD, checks: tuple[str, ...] = (CHECK,)
          ) -> tuple[SupervisorState, list[supervisor.Command]]:
    return supervisor.start(JOB, "Say hi", choice, checks, max_corrections=2, max_cycles=2)


def ignored_reasons(logs: list[MutableMapping[str, Any]]) -> list[str]:
    return [e["reason"] for e in logs if e["event"] == "supervisor.message.ignored"
            and e["log_level"] == "warning"]


# ---- tests ----------------------------------------------------------------------------------
def test_standard_job_runs_over_the_bus_and_journals_each_state_before_acting() -> None:
    tape: Tape = []
    journal, seen = FakeJournal(tape), list[Assignment]()

    async def main() -> tuple[SupervisorState, list[JobEvent]]:
        bus = TapedBus(tape)
        runner = JobRunner(bus, FakeChecks(), journal)
        state, commands = begin()
        async with bus.subscribe(topics.events(JOB)) as events:
            final = await with_crew(bus, answer_all, seen, lambda: runner.run(state, commands))
            published: list[JobEvent] = []
            with anyio.fail_after(1):
                while not published or published[-1].event != "job.finished":
                    _topic, event = await events.receive()
                    assert isinstance(event, JobEvent)
                    published.append(event)
        return final, published

    final, events = anyio.run(main)
    assert final.outcome == "success" and final.accepted == 4
    assert [a.role for a in seen] == ["PA", "DA", "CA", "AA"]
    assert journal.causes == ["start", "plan:PA", "artifact:DA", "check_report:CA",
                              "decision:AA"]
    published = [m for what, m in tape if what == "publish" and isinstance(m, Assignment)]
    assert published == seen
    for i, (what, m) in enumerate(tape):  # each assignment was journaled before it went out
        if what == "publish" and isinstance(m, Assignment):
            last = next(s for w, s in reversed(tape[:i]) if w == "journal")
            assert isinstance(last, SupervisorState) and last.waiting == m
    assert journal.entries[-1][0] == final
    for state, _ in journal.entries:
        assert SupervisorState.model_validate_json(state.model_dump_json()) == state
    assert [e.event for e in events] == ["job.started", "check.report", "job.finished"]
    assert events[-1] == JobEvent(job=JOB, event="job.finished", data={"outcome": "success"})


def test_late_and_foreign_answers_before_the_real_one_are_ignored_and_logged() -> None:
    journal, seen = FakeJournal(), list[Assignment]()
    first_da: list[BusMessage] = []

    def reply(a: Assignment) -> list[tuple[str, BusMessage]]:
        topic = topics.result(JOB, a.role)
        if a.role == "DA" and a.attempt == 0:
            first_da.append(good(a, turns=2))
            return [(topic, first_da[0])]
        if a.role == "CA" and a.attempt == 0:
            return [(topic, good(a, ca="fail"))]
        if a.role == "DA":  # the correction: noise first, then the real answer
            foreign = ArtifactMsg(job="other", role="DA", cycle=a.cycle, attempt=a.attempt,
                                  summary="not yours", written={"evil.txt": "urn:x"}, turns=50)
            late = first_da[0].model_copy(update={"written": {"late.txt": "urn:late"}})
            done = AgentDone(job=JOB, role="DA", status="finished", turns=2, summary="bye")
            return [(topic, foreign), (topic, late), (topic, done), (topic, good(a, turns=3))]
        return answer_all(a)

    async def main() -> SupervisorState:
        bus = InProcessBus()
        state, commands = begin(EMERGENCY)
        runner = JobRunner(bus, FakeChecks(), journal)
        return await with_crew(bus, reply, seen, lambda: runner.run(state, commands))

    with capture_logs() as logs:
        final = anyio.run(main)
    assert final.outcome == "success"
    assert [(a.role, a.attempt) for a in seen] == [("DA", 0), ("CA", 0), ("DA", 1), ("CA", 1),
                                                   ("AA", 1)]
    assert final.accepted == 5 and final.corrections == 1
    assert final.written == {"hello.txt": "urn:da"}  # neither evil.txt nor late.txt
    assert final.totals["DA"].turns == 2 + 3
    reasons = ignored_reasons(logs)
    assert len(reasons) == 3, reasons
    assert "for job other" in reasons[0] and "awaiting DA cycle 1 attempt 1" in reasons[1]
    assert "cycle 1, attempt 0" in reasons[1] and "AgentDone is not an answer" in reasons[2]
    assert len(journal.entries) == 1 + 5  # nothing is journaled for an ignored message


def test_pipeline_without_ca_runs_the_checks_itself() -> None:
    journal, seen, checks = FakeJournal(), list[Assignment](), FakeChecks("fail")

    async def main() -> SupervisorState:
        bus = InProcessBus()
        state, commands = begin(SIMPLE)
        runner = JobRunner(bus, checks, journal)
        return await with_crew(bus, answer_all, seen, lambda: runner.run(state, commands))

    final = anyio.run(main)
    assert final.outcome == "failed" and final.verified_by == "runner"
    assert checks.calls == [Verify(cycle=1, attempt=0)]
    assert journal.causes == ["start", "artifact:DA", "verify"]


def test_resume_reissues_the_pending_assignment() -> None:
    state, commands = begin()
    for _ in range(2):  # PA and DA answered before the job was killed
        [a] = [c for c in commands if isinstance(c, Assignment)]
        state, commands = supervisor.step(state, good(a, turns=2))
    journaled = SupervisorState.model_validate_json(state.model_dump_json())
    assert journaled.waiting is not None and journaled.waiting.role == "CA"
    journal, seen = FakeJournal(), list[Assignment]()

    async def main() -> SupervisorState:
        bus = InProcessBus()
        runner = JobRunner(bus, FakeChecks(), journal)
        return await with_crew(bus, answer_all, seen, lambda: runner.resume(journaled))

    final = anyio.run(main)
    assert seen[0] == journaled.waiting  # the same assignment, turn_base included
    assert [a.role for a in seen] == ["CA", "AA"]
    assert final.outcome == "success" and final.accepted == 4
    assert journal.entries[0] == (journaled, "start")


def test_resume_of_a_job_waiting_for_its_checks_runs_them() -> None:
    state, commands = begin(SIMPLE)
    [da] = commands[1:]
    assert isinstance(da, Assignment)
    state, _ = supervisor.step(state, ArtifactMsg(job=JOB, role="DA", cycle=1, attempt=0,
                                                  summary="x", status="budget"))
    assert state.verifying is not None
    checks, seen = FakeChecks(), list[Assignment]()

    async def main() -> SupervisorState:
        bus = InProcessBus()
        runner = JobRunner(bus, checks, FakeJournal())
        return await with_crew(bus, answer_all, seen, lambda: runner.resume(state))

    final = anyio.run(main)
    assert checks.calls == [state.verifying] and seen == []
    assert final.outcome == "budget_exceeded" and final.results[0].passed


def test_wall_time_running_out_verifies_and_ends_in_budget_exceeded() -> None:
    journal, seen, checks = FakeJournal(), list[Assignment](), FakeChecks()
    stopped: list[bool] = []

    async def main() -> SupervisorState:
        bus = InProcessBus()
        state, commands = begin()
        runner = JobRunner(bus, checks, journal, wall_time_s=600,
                           stop_agents=lambda: stopped.append(True))
        return await with_crew(bus, answer_none, seen, lambda: runner.run(state, commands),
                               limit_s=3600)

    final = autojump(main)  # ten virtual minutes
    assert final.outcome == "budget_exceeded"
    assert final.stop_reason == "wall time budget of 600s spent"
    assert [a.role for a in seen] == ["PA"]
    assert checks.calls == [Verify(cycle=1, attempt=0)] and final.verified_by == "runner"
    assert stopped == [True]
    assert journal.causes == ["start", "time_up", "verify"]
    assert journal.entries[-1][0] == final


def test_wall_time_running_out_keeps_what_the_job_already_did() -> None:
    journal, seen = FakeJournal(), list[Assignment]()

    def reply(a: Assignment) -> list[tuple[str, BusMessage]]:
        return answer_all(a) if a.role in ("PA", "DA") else []  # CA never answers

    async def main() -> SupervisorState:
        bus = InProcessBus()
        state, commands = begin()
        runner = JobRunner(bus, FakeChecks(), journal, wall_time_s=600)
        return await with_crew(bus, reply, seen, lambda: runner.run(state, commands),
                               limit_s=3600)

    final = autojump(main)
    assert [a.role for a in seen] == ["PA", "DA", "CA"]
    assert final.outcome == "budget_exceeded"
    before_time_up = journal.entries[journal.causes.index("time_up") - 1][0]
    assert before_time_up.accepted == 2
    assert final.plan == ("write hello.txt",)
    assert final.written == {"hello.txt": "urn:da"}
    assert set(final.totals) == {"PA", "DA"}
    assert final.accepted == 3  # PA, DA and the runner's own check report


class LossyBus(TapedBus):
    """Loses the first DA assignment, as a broker restart may, and reports the reconnection."""

    def __init__(self, tape: Tape) -> None:
        super().__init__(tape)
        self.lost = 0

    async def publish(self, topic: str, message: BusMessage) -> None:
        if isinstance(message, Assignment) and message.role == "DA" and not self.lost:
            self.lost += 1  # gone with the old connection
            return
        await super().publish(topic, message)

    @property
    def reconnects(self) -> int:
        return self.lost


def test_assignments_are_published_again_after_the_bus_reconnected() -> None:
    tape: Tape = []
    seen = list[Assignment]()

    async def main() -> SupervisorState:
        bus = LossyBus(tape)
        runner = JobRunner(bus, FakeChecks(), FakeJournal(tape))
        state, commands = begin()
        return await with_crew(bus, answer_all, seen, lambda: runner.run(state, commands),
                               limit_s=30)

    final = autojump(main)
    assert final.outcome == "success"
    assert [a.role for a in seen] == ["PA", "DA", "CA", "AA"]  # DA's, once it was sent again
