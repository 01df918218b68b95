"""Prompt caches that hit: within a session the bytes of the tool list and the system prompt
never change (the hello job, scripted), and a job killed mid-role and resumed sends, on its
first live call, exactly the request the killed job sent for that turn."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.core.messages import Completion
from gliding.daemon.compose import resume_job, run_job
from gliding.daemon.jobs import list_jobs
from gliding.llm.hosted import tools_with_cache_control, with_cache_control
from gliding.llm.port import LLMRequest
from gliding.llm.scripted import FileScriptedLLM
from tests.scheduler.test_resume import REPLIES as RESUME_REPLIES
from tests.scheduler.test_resume import Crash

HELLO = Path(__file__).resolve().parents[2] / "examples" / "hello" / "task.yaml"
# more than one turn per role (within the task's turn caps), and finish tried before it is
# allowed: the turns where the old tool list changed
HELLO_REPLIES = """\
PA:
  - list_dir: {path: .}
  - finish: {steps: ["Write hello.txt"]}
DA:
  - finish: {summary: too early}
  - write_file: {path: hello.txt, content: "Hello, World!"}
  - read_file: {path: hello.txt}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: all pass}
AA:
  - finish: {decision: done, report: hello.txt holds the greeting}
"""
class Recording:
    """The replies file's model, keeping every request; dies on its ``die_at``-th call."""

    def __init__(self, path: Path, die_at: int = 0) -> None:
        self.inner = FileScriptedLLM(path)
        self.die_at = die_at
        self.requests: list[LLMRequest] = []

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.requests.append(request)
        if len(self.requests) == self.die_at:
            raise Crash
        return await self.inner.complete(request)


def body(request: LLMRequest, model: str = "anthropic/claude-sonnet-4-5") -> dict[str, Any]:
    """What the hosted backend hands litellm for ``request``: tools, then messages."""
    return {
        "tools": tools_with_cache_control([t.to_openai() for t in request.tools],
                                          bool(request.meta.get("cache_tools")), model),
        "messages": with_cache_control([m.to_openai() for m in request.messages],
                                       request.meta.get("cache_breakpoints") or (), model,
                                       limit=4 - bool(request.meta.get("cache_tools"))),
    }


def stable_part(request: LLMRequest) -> tuple[str, str]:
    return (json.dumps([t.to_openai() for t in request.tools], ensure_ascii=False),
            json.dumps(request.messages[0].to_openai(), ensure_ascii=False))


def test_every_session_of_the_hello_job_sends_the_same_tools_and_system_bytes(
        tmp_path: Path) -> None:
    shutil.copy(HELLO, tmp_path / "task.yaml")
    (tmp_path / "replies.yaml").write_text(HELLO_REPLIES, encoding="utf-8")
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data"),
                                        "memory.vectors.enabled": False}, env={})
    llm = Recording(tmp_path / "replies.yaml")
    task = load_task(tmp_path / "task.yaml")

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success"
    by_session: dict[str, list[LLMRequest]] = defaultdict(list)
    for r in llm.requests:
        by_session[r.meta["session"]].append(r)
    assert {s: len(rs) for s, rs in by_session.items()} == {"PA": 2, "DA": 4, "CA": 2, "AA": 1}
    pairs = 0
    for requests in by_session.values():
        for before, after in zip(requests, requests[1:], strict=False):
            pairs += 1
            assert stable_part(after) == stable_part(before)
            # and the messages only grew by appending
            assert after.messages[:len(before.messages)] == before.messages
    assert pairs == 5
    # finish was declared from the first turn and refused there
    refused = [m.content for m in by_session["DA"][1].messages if m.role == "tool"]
    assert refused[-1].startswith("error: finish is not available yet")
    for r in llm.requests:
        sent = body(r)
        marked = [m for m in sent["messages"]
                  if isinstance(m["content"], list) and "cache_control" in m["content"][-1]]
        assert "cache_control" in sent["tools"][-1]
        assert len(marked) + 1 <= 4
        assert marked[0]["role"] == "system"


# killed asking for DA's turn 3 (PA 1, DA 1, DA 2 answered), or CA's turn 2, whose system
# prompt carries the board's briefing (and the board holds more by the time the job resumes)
@pytest.mark.parametrize(("die_at", "turn"), [(4, ("DA", 3)), (7, ("CA", 2))],
                         ids=["DA-3", "CA-2"])
def test_a_resumed_job_sends_the_request_the_killed_job_sent(
        tmp_path: Path, die_at: int, turn: tuple[str, int]) -> None:
    (tmp_path / "replies.yaml").write_text(RESUME_REPLIES, encoding="utf-8")
    (tmp_path / "task.yaml").write_text(
        "goal: Append one, two and three to log.txt\nworkspace: ws\n"
        "pipeline: [PA, DA, CA, AA]\nbudgets: {wall_time_s: 60}\n"
        "checks:\n  - command: \"test $(wc -l < log.txt) = 3\"\n", encoding="utf-8")
    settings = load_settings(overrides={"data_dir": str(tmp_path / "data"),
                                        "memory.vectors.enabled": False}, env={})
    task = load_task(tmp_path / "task.yaml")
    first = Recording(tmp_path / "replies.yaml", die_at=die_at)
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - Crash may come grouped
        anyio.run(lambda: run_job(task, settings, llm=first))
    assert "Crash" in repr(caught.value)
    (job,) = [j.job for j in list_jobs(settings.data_dir)]

    second = Recording(tmp_path / "replies.yaml")
    handle = anyio.run(lambda: resume_job(job, settings, llm=second))

    assert handle.report is not None and handle.report.outcome == "success"
    killed, live = first.requests[-1], second.requests[0]
    assert (killed.meta["session"], killed.meta["turn"]) == (live.meta["session"],
                                                             live.meta["turn"]) == turn
    assert json.dumps(body(live)) == json.dumps(body(killed))
    assert live.meta == killed.meta
