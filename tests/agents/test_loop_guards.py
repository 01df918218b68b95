"""The agent loop's guards: the same call too often in a row (``loop_detected``) and compaction
that cannot keep up (``compaction_stalled``) stop the session, with a ``guard.tripped`` event;
a resumed session replays into the same decision; repeated reads of results the prompt no
longer holds whole are counted."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.agents.guards import LAST_REPEAT, call_key, in_a_row, warning
from gliding.agents.loop import AgentEnv, AgentResult, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import BusMessage, JobEvent
from gliding.config.settings import ContextSettings, Settings, WindowSettings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call, text
from gliding.tools.base import ToolContext
from gliding.tools.groups import job_groups

GOAL = "Goal: look at the workspace"


class RecordingBus(InProcessBus):
    """An in-process bus that keeps every job event published on it."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[JobEvent] = []

    async def publish(self, topic: str, message: BusMessage) -> None:
        if isinstance(message, JobEvent):
            self.events.append(message)
        await super().publish(topic, message)


def run(tmp_path: Path, replies: list, *, loop_limit: int = 3,
        context: ContextSettings | None = None, max_turns: int = 8) -> tuple[AgentResult,
                                                                              AgentEnv]:
    """DA's session on ``replies`` over the job's archive in ``tmp_path`` (a second run on the
    same path replays what the first archived)."""
    spec = load_role("DA")
    settings = Settings()
    archive = LocalArchive(Archive.open(tmp_path / "data", "job1"), tmp_path / "data")
    env = AgentEnv(
        job="job1", role=spec, llm=ScriptedLLM(replies),
        toolset=job_groups(reader=archive, iri_base="gliding://job/job1/").toolset(
            spec.tool_groups),
        tool_ctx=ToolContext(tmp_path / "ws", settings.tools), archive=archive,
        budget=BudgetTracker(Limits(turns={}), started_at=0.0), bus=RecordingBus(),
        now=lambda: 0.0, max_turns=max_turns, context=context or settings.context,
        counter=TokenCounter(settings.context.tokenizer), loop_limit=loop_limit)
    try:
        return anyio.run(run_agent, env, GOAL), env
    finally:
        archive.archive.close()


def guard_events(env: AgentEnv) -> list[dict]:
    assert isinstance(env.bus, RecordingBus)
    return [e.data for e in env.bus.events if e.event == "guard.tripped"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("a note\n", encoding="utf-8")
    return tmp_path


# --- loop_detected ------------------------------------------------------------------------------


def test_the_same_call_three_times_in_a_row_stops_the_session_unrun(ws: Path) -> None:
    same = [call("read_file", path="notes.txt") for _ in range(3)]

    result, env = run(ws, [*same, call("finish", summary="never asked")])

    assert result.status == "loop_detected" and result.turns == 3
    assert len(result.tools) == 2  # the third call was not run
    assert result.error is not None and "read_file" in result.error
    assert "3 times in a row" in result.error
    assert guard_events(env) == [{"role": "DA", "session": "DA", "turn": 3,
                                  "reason": "loop_detected", "detail": result.error}]
    assert env.llm.remaining("*") == 1  # type: ignore[attr-defined]
    # the model was told: the second result says the next identical call stops the job
    first, second = (t.output for t in result.tools)
    assert LAST_REPEAT not in first
    assert "You already made this exact call" in second and second.endswith(LAST_REPEAT)
    assert "not run" in result.summaries[-1].summary


def test_arguments_are_compared_as_canonical_json() -> None:
    assert call_key("grep", {"pattern": "x", "path": "."}) == call_key(
        "grep", {"path": ".", "pattern": "x"})
    assert call_key("grep", {"path": "."}) != call_key("glob", {"path": "."})
    calls = [("read_file", {"path": p}) for p in ("a", "b", "b")]
    assert in_a_row(calls, call_key("read_file", {"path": "b"})) == 2
    assert in_a_row(calls, call_key("read_file", {"path": "a"})) == 0


def test_the_warning_comes_once_before_the_call_that_would_stop_the_job() -> None:
    assert [warning(row, 4) for row in (1, 2, 3)] == ["", "", LAST_REPEAT]
    assert [warning(row, 3) for row in (1, 2)] == ["", LAST_REPEAT]
    assert warning(1, 2) == warning(5, 0) == ""  # never for a first call, nor without a limit


def test_another_call_breaks_the_row_and_a_text_reply_does_not(ws: Path) -> None:
    read = call("read_file", path="notes.txt")
    broken = [read, read, call("list_dir", path="."), read, read,
              call("finish", summary="looked")]

    result, env = run(ws, broken)

    assert result.status == "finished" and len(result.tools) == 5
    assert guard_events(env) == []

    chatty = [call("read_file", path="notes.txt"), text("hmm"), call("read_file", path="notes.txt"),
              text("let me look again"), call("read_file", path="notes.txt")]
    result, _env = run(ws / "other", chatty)
    assert result.status == "loop_detected" and len(result.tools) == 2


@pytest.mark.parametrize(("limit", "status", "ran"), [(0, "finished", 4), (2, "loop_detected", 1),
                                                      (5, "finished", 4)])
def test_loop_limit_is_the_length_of_the_row_and_zero_is_no_limit(
        ws: Path, limit: int, status: str, ran: int) -> None:
    replies = [call("list_dir", path=".") for _ in range(4)] + [call("finish", summary="ok")]

    result, _env = run(ws, replies, loop_limit=limit)

    assert (result.status, len(result.tools)) == (status, ran)


def test_a_resumed_session_trips_where_the_killed_one_would_have_never_on_replay(
        ws: Path) -> None:
    same = call("read_file", path="notes.txt")
    # the first run is cut off after two identical calls: its model has nothing more to say
    first, _env = run(ws, [same, same])
    assert first.status == "failed" and len(first.tools) == 2

    # resumed: the two archived turns replay without a model call and without tripping the
    # guard; the first live call, the same again, completes the row
    resumed, env = run(ws, [same, call("finish", summary="never asked")])

    assert resumed.status == "loop_detected" and resumed.turns == 3
    assert resumed.replayed_turns == 2
    assert len(env.llm.requests) == 1  # type: ignore[attr-defined]
    assert [e["turn"] for e in guard_events(env)] == [3]

    # and a session that had tripped trips again at the same turn, from the archive alone
    again, env = run(ws, [])
    assert (again.status, again.turns, again.replayed_turns) == ("loop_detected", 3, 3)
    assert again.error == resumed.error and len(again.tools) == 2


# --- post-compaction re-reads -----------------------------------------------------------------


def test_a_repeated_read_of_a_result_the_prompt_lacks_whole_is_a_reread(ws: Path) -> None:
    (ws / "ws" / "big.txt").write_text("".join(f"line {i} " + "x" * 100 + "\n"
                                               for i in range(100)), encoding="utf-8")
    replies = [call("read_file", path="big.txt"), call("read_file", path="big.txt"),  # routed
               call("read_file", path="notes.txt"), call("read_file", path="notes.txt"),
               call("finish", summary="read")]

    window = Settings().context.window.model_copy(update={"whole_below": 0.0})  # saving at once
    result, _env = run(ws, replies,
                       context=Settings().context.model_copy(update={"window": window}))

    assert result.status == "finished"
    assert result.rereads == 1  # big.txt's first result was a preview; notes.txt's is whole


# --- compaction_stalled -----------------------------------------------------------------------


def test_compaction_that_cannot_keep_up_stops_the_session_before_the_next_call(
        ws: Path) -> None:
    # a batch far smaller than what each turn adds: every call compacts, and what is left (the
    # prefix and the newest messages) is over the window's high-water mark every time
    tiny = Settings().context.model_copy(update={"window": WindowSettings(
        target_tokens=200, max_tokens=6_000, keep_recent=2, whole_below=0.0)})
    writes = [call("write_file", path=f"f{i}.txt", content=f"part {i} " * 1500)
              for i in range(8)]

    result, env = run(ws, writes, context=tiny, max_turns=10)

    assert result.status == "compaction_stalled"
    assert result.error is not None and result.error.startswith("compaction stalled")
    (event,) = guard_events(env)
    assert event["reason"] == "compaction_stalled" and event["turn"] == result.turns
    # stopped before asking the model: the stopping turn sent nothing
    assert len(env.llm.requests) == result.turns - 1  # type: ignore[attr-defined]
    assert result.compactions >= 3


def test_the_default_window_does_not_stall_on_an_ordinary_session(ws: Path) -> None:
    # long calls every turn: the default window compacts every few calls, and that is no stall
    writes = [call("write_file", path=f"f{i}.txt", content=f"part {i} " * 1200)
              for i in range(12)] + [call("finish", summary="wrote")]

    result, env = run(ws, writes, max_turns=14)

    assert result.status == "finished" and guard_events(env) == []
    assert result.compactions >= 3
