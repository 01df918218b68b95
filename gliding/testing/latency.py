"""A model whose every call takes the same simulated time, and the scripted crew of an
exploratory job whose plan steps each write one file.

    llm = LatencyLLM(step_team(4), latency_s=0.5)

``LatencyLLM`` wraps any model (``LLM`` port): each call sleeps ``latency_s`` on the event
loop's clock (virtual under ``gliding.testing.clock``), then asks the inner model. It counts
the calls in flight and the most there ever were, which shows whether sessions overlapped.

``step_team(n)`` replies like this: PA plans ``n`` independent steps ``s1`` .. ``sn`` (step
objects without dependencies); the DA of step ``sK`` (its session ``DA.<cycle>.sK``, read from
the request's ``meta["session"]``) writes ``sK.txt`` containing ``step sK`` — or, with
``tool="bash"``, appends that line to ``sK.txt``, so a command run twice shows — and finishes
once it has seen the result (``work_turns`` > 1: it looks around first and reads the file back
after); CA calls run_checks, then finishes (odd turns, even turns); AA
says done. A role's replies
depend only on the request, so they are the same on a resumed job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import anyio

from gliding.config.task import Task
from gliding.core.checks import FileContains
from gliding.core.messages import Completion, Message
from gliding.llm.port import LLM, LLMRequest
from gliding.testing.scripted import ScriptedLLM, call

BOARD_UPDATE = "Blackboard update"  # how the loop's between-turn board news begins
_ROUNDS = 64  # replies queued per role: more than any test job asks for


class LatencyLLM:
    """``inner``, with every call taking ``latency_s`` first."""

    def __init__(self, inner: LLM, latency_s: float) -> None:
        self.inner = inner
        self.latency_s = latency_s
        self.calls = 0
        self.in_flight = 0
        self.peak = 0  # the most calls in flight at once

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.sleep(self.latency_s)
            return await self.inner.complete(request)
        finally:
            self.in_flight -= 1


def step_task(root: Path, name: str, steps: int) -> Task:
    """The exploratory task ``step_team(steps)`` plays: write ``s1.txt`` .. ``s<steps>.txt``
    in the workspace ``root / name``, each checked for its step's text."""
    return Task(goal=f"Write the files s1.txt .. s{steps}.txt, each with its step's text",
                workspace=root / name, model=None, pipeline="exploratory", turns={},
                prompt_tokens=None, cost_usd=None, wall_time_s=600,
                checks=tuple(FileContains(f"s{k}.txt", f"step s{k}")
                             for k in range(1, steps + 1)),
                source=root / f"{name}.yaml")


def step_team(n: int, *, tool: Literal["write_file", "bash"] = "write_file",
              work_turns: int | tuple[int, ...] = 1) -> ScriptedLLM:
    """The scripted crew of an exploratory job of ``n`` independent steps (see the module).

    ``work_turns`` is how many tool calls a step's DA makes before it finishes (one number for
    every step, or one per step): 1 writes the file; 2 writes it, then reads it back
    (``bash: cat``); more look around first (``bash: ls``, ``work_turns - 2`` times), then
    write and read back.
    """
    per_step = work_turns if isinstance(work_turns, tuple) else (work_turns,) * n
    if len(per_step) != n or not all(1 <= w <= 5 for w in per_step):
        raise ValueError("work_turns must be 1 to 5 (DA may take 6 turns, finish included), "
                         "one number or one per step")
    steps = [{"id": f"s{k}", "text": f"Write s{k}.txt containing the text: step s{k}"}
             for k in range(1, n + 1)]

    def da(request: LLMRequest) -> Message:
        session = str(request.meta.get("session", ""))
        step = session.rsplit(".", 1)[-1] if session.count(".") == 2 else "s1"
        users = [i for i, m in enumerate(request.messages) if m.role == "user"
                 and not (m.content or "").startswith(BOARD_UPDATE)]  # updates are not tasks
        since = users[-1] if users else 0  # the role file's examples come before the task
        done = sum(1 for m in request.messages[since:] if m.role == "tool")
        work = per_step[int(step[1:]) - 1] if step[1:].isdigit() and int(step[1:]) <= n else 1
        if done >= work:
            return call("finish", summary=f"wrote {step}.txt")
        looks = max(0, work - 2)
        if done < looks:
            return call("bash", command="ls")
        if done == looks:
            if tool == "bash":
                return call("bash", command=f"echo 'step {step}' >> {step}.txt")
            return call("write_file", path=f"{step}.txt", content=f"step {step}")
        return call("bash", command=f"cat {step}.txt")

    def ca(request: LLMRequest) -> Message:  # each check run takes CA two turns
        odd = int(request.meta.get("turn", 1)) % 2 == 1
        return call("run_checks") if odd else call("finish", notes="checked")

    return ScriptedLLM({
        "PA": [call("finish", steps=steps)] * _ROUNDS,
        "DA": [da] * _ROUNDS,
        "CA": [ca] * _ROUNDS,
        "AA": [call("finish", decision="done", report=f"the {n} files are written")] * _ROUNDS,
    }, name="scripted:step-team")
