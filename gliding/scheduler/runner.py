"""The async shell around the pure supervisor: publish its commands, correlate the answers.

For each command of ``supervisor.step`` the runner publishes an Assignment on
``job/<job>/agent/<ROLE>``, runs the task's checks through the injected ``verify``, publishes a
progress event on ``job/<job>/events``, or logs an ignored message; then it waits for the next
answer on ``job/<job>/result/+`` and feeds it back. Every transition is journaled through the
``Journal`` port before its commands are carried out, so a killed job resumes from the last
journaled state (``resume``), re-issuing what that state waits for. The event loop's clock
decides the wall time (virtual in tests: ``gliding.testing.clock``); when it runs out the machine
gets ``TimeUp`` and keeps everything it had accepted.

The runner knows no agent, tool or store: agents are workers on the bus, started by the
composition root, and the journal and the checks are ports it is handed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

import anyio
import structlog

from gliding.bus import topics
from gliding.bus.messages import Assignment, BusMessage, CheckReportMsg, JobEvent
from gliding.bus.port import Bus, Subscription
from gliding.core import events
from gliding.errors import ProviderUnavailable
from gliding.scheduler import supervisor
from gliding.scheduler.supervisor import (
    Command,
    Emit,
    Finished,
    Ignored,
    Input,
    SupervisorState,
    TimeUp,
    Verify,
)

log = structlog.get_logger("gliding.scheduler")

RECONNECT_CHECK_S = 2.0  # how often a waiting runner looks whether the bus reconnected


class Journal(Protocol):
    """Where the runner writes each transition (the job's L0 archive, in production)."""

    async def record(self, state: SupervisorState, cause: str) -> None:
        """Persist ``state`` durably before its commands run.

        Raises:
            GlidingError: the journal cannot be written (the job stops: it could not resume).
        """
        ...


class NoJournal:
    """A journal that keeps nothing (a job that need not resume, e.g. in a unit test)."""

    async def record(self, state: SupervisorState, cause: str) -> None:
        return None


Verifier = Callable[[Verify], Awaitable[CheckReportMsg]]


@dataclass
class JobRunner:
    """Drives one job's supervisor to its outcome over ``bus``."""

    bus: Bus
    verify: Verifier
    journal: Journal
    wall_time_s: float | None = None
    # called when the wall time runs out, and when a job ends with plan steps still at work
    stop_agents: Callable[[], None] | None = None
    state: SupervisorState | None = None  # the latest state, kept through a cancellation
    _sent_on: int = 0  # the bus's reconnect count when the awaited assignments went out

    async def run(self, state: SupervisorState, commands: list[Command]) -> SupervisorState:
        """Carry out ``commands`` and every answer's consequences until the job finishes."""
        self.state = state
        wall = self.wall_time_s
        async with self.bus.subscribe(topics.results(state.job), max_buffer=100) as answers, \
                AsyncExitStack() as stack:
            await self.journal.record(state, "start")
            with anyio.move_on_after(wall if wall is not None else float("inf")) as deadline:
                async with anyio.create_task_group() as tg:
                    if wall is not None:  # read on, all the time: a full buffer would block
                        news = await stack.enter_async_context(self.bus.subscribe(
                            topics.events(state.job), max_buffer=1000))
                        tg.start_soon(_stop_the_clock, news, deadline)
                    state = await self._drive(state, commands, answers)
                    tg.cancel_scope.cancel()
            state = self.state  # what was accepted before the deadline, if it cut _drive off
            if deadline.cancelled_caught and state.outcome is None:
                if self.stop_agents is not None:
                    self.stop_agents()
                state, commands = supervisor.step(
                    state, TimeUp(reason=f"wall time budget of {wall:g}s spent"))
                await self.journal.record(state, "time_up")
                state = await self._drive(state, commands, None)
        return state

    async def resume(self, state: SupervisorState) -> SupervisorState:
        """Continue a journaled job: carry out again everything its last state waits for (all
        the step assignments outstanding, in the exploratory pipeline)."""
        again = supervisor.pending(state)
        log.info("job.resumed", job=state.job, cycle=state.cycle,
                 waiting=[type(c).__name__ for c in again])
        if state.outcome is not None:  # killed after its last transition: say it finished
            await self._carry_out(state, Emit.of(events.JobFinished(outcome=state.outcome)))
            return state
        return await self.run(state, [*again])

    async def _drive(self, state: SupervisorState, commands: list[Command],
                     answers: Subscription | None) -> SupervisorState:
        todo = list(commands)
        while True:
            while todo:
                command = todo.pop(0)
                more = await self._carry_out(state, command)
                if more is not None:
                    state, new = more
                    self.state = state
                    await self.journal.record(state, "verify")
                    todo.extend(new)
            if state.outcome is not None or answers is None:
                return state
            message = await self._next_answer(state, answers)
            if not isinstance(message, Input):
                log.warning("supervisor.message.ignored", job=state.job,
                            reason=f"{type(message).__name__} is not an answer")
                continue
            before = state
            state, todo = supervisor.step(state, message)
            self.state = state
            if todo and isinstance(todo[0], supervisor.Interrupted):
                raise ProviderUnavailable(todo[0].reason)  # not journaled: resume asks again
            if not (todo and isinstance(todo[0], Ignored)):
                await self.journal.record(state, f"{message.type}:{getattr(message, 'role', '')}")
            if before.running and any(isinstance(c, Verify | Finished) for c in todo) and (
                    self.stop_agents is not None):
                self.stop_agents()  # steps still at work (one failed): nothing more is wanted

    async def _next_answer(self, state: SupervisorState,
                           answers: Subscription) -> BusMessage:
        """The next answer. Meanwhile, whenever the bus has reconnected since the assignments
        awaited were published (a network bus may lose what was in flight), publish them
        again: a duplicate is harmless (agents and the dispatcher drop one they hold; the
        supervisor takes one answer per assignment)."""
        while True:
            with anyio.move_on_after(RECONNECT_CHECK_S):
                _topic, message = await answers.receive()
                return message
            if self.bus.reconnects != self._sent_on:
                self._sent_on = self.bus.reconnects
                again = [c for c in supervisor.pending(state) if isinstance(c, Assignment)]
                log.warning("job.assignments.republished", job=state.job, count=len(again),
                            reason="the bus reconnected")
                for command in again:
                    await self.bus.publish(topics.agent(command.job, command.role), command)

    async def _carry_out(self, state: SupervisorState, command: Command
                         ) -> tuple[SupervisorState, list[Command]] | None:
        """Do one command; a Verify gives the state after its report and what follows."""
        if isinstance(command, Assignment):
            self._sent_on = self.bus.reconnects
            await self.bus.publish(topics.agent(command.job, command.role), command)
        elif isinstance(command, Verify):
            report = (await self.verify(command)).model_copy(update={
                "job": state.job, "role": supervisor.RUNNER, "cycle": command.cycle,
                "attempt": command.attempt})  # the verifier's report answers this Verify
            return supervisor.step(state, report)
        elif isinstance(command, Emit):
            log.info(command.event, job=state.job, **command.data)
            await self.bus.publish(topics.events(state.job),
                                   JobEvent(job=state.job, event=command.event,
                                            data=dict(command.data)))
        elif isinstance(command, Ignored):
            log.warning("supervisor.message.ignored", job=state.job, reason=command.reason)
        else:
            assert isinstance(command, Finished)
        return None


async def _stop_the_clock(news: Subscription, deadline: anyio.CancelScope) -> None:
    """While a tool call of the job waits for a person's approval (between its
    ``approval.requested`` and ``approval.answered`` events), the wall time budget does not
    run: its deadline is held off, and moved on by the wait once no call waits."""
    waiting: set[str] = set()
    left = 0.0  # of the budget, when the first wait began
    while True:
        _topic, message = await news.receive()
        if not isinstance(message, JobEvent):
            continue
        ident = message.data.get("approval") if isinstance(message.data, dict) else None
        if not isinstance(ident, str):
            continue
        if message.event == events.ApprovalRequested.name and ident not in waiting:
            if not waiting:
                left = max(0.0, deadline.deadline - anyio.current_time())
                deadline.deadline = float("inf")
            waiting.add(ident)
        elif message.event == events.ApprovalAnswered.name and ident in waiting:
            waiting.discard(ident)
            if not waiting:
                deadline.deadline = anyio.current_time() + left
