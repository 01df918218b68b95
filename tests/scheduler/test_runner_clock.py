"""The runner's wall-time budget on virtual time: ten minutes pass at once, no real sleep."""

from __future__ import annotations

import anyio

from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import CheckOutcome, CheckReportMsg
from gliding.scheduler import policy, supervisor
from gliding.scheduler.runner import JobRunner, NoJournal
from gliding.scheduler.supervisor import SupervisorState, Verify
from gliding.testing.clock import LoopClock, autojump


async def a_job_whose_agent_never_answers() -> tuple[SupervisorState, float, list[str]]:
    bus = InProcessBus()
    choice = policy.PipelineChoice(("DA", "CA"), "explicit", "test")
    state, commands = supervisor.start("j1", "goal", choice, ["file a exists"],
                                       max_corrections=1, max_cycles=1)
    stopped: list[str] = []

    async def verify(v: Verify) -> CheckReportMsg:
        return CheckReportMsg(job="j1", role=supervisor.RUNNER, cycle=v.cycle,
                              attempt=v.attempt, passed=False, verified_by="runner",
                              results=[CheckOutcome(check="file a exists", status="fail",
                                                    evidence="a does not exist")])

    clock = LoopClock()
    runner = JobRunner(bus, verify, NoJournal(), wall_time_s=600.0,
                       stop_agents=lambda: stopped.append("agents"))
    async with bus.subscribe(topics.agent("j1", "DA")) as inbox:  # DA hears, never answers
        started = clock.monotonic()
        final = await runner.run(state, commands)
        assert (await inbox.receive()).message.type == "assignment"
    return final, clock.monotonic() - started, stopped


def test_the_wall_time_budget_ends_the_job_on_virtual_time() -> None:
    # ten virtual minutes: on real time they would run into pytest's timeout (120 s)
    final, virtual, stopped = autojump(a_job_whose_agent_never_answers)
    assert virtual >= 600.0
    assert final.outcome == "budget_exceeded"
    assert final.stop_reason == "wall time budget of 600s spent"
    assert final.verified_by == "runner" and [r.status for r in final.results] == ["fail"]
    assert stopped == ["agents"]


def test_loop_clock_follows_the_event_loop() -> None:
    async def elapsed() -> float:
        clock = LoopClock()
        start = clock.monotonic()
        await anyio.sleep(3600)
        return clock.monotonic() - start

    assert autojump(elapsed) >= 3600
