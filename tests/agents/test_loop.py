"""The agent step loop: its transition table, finish validation, and role loading."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from gliding.agents.loop import TERMINAL, TRANSITIONS, AgentEnv, State, run_agent, transition
from gliding.agents.roles import load_role, load_roles
from gliding.bus.inproc import InProcessBus
from gliding.config.roles import home_dir, role_names
from gliding.config.settings import PrefetchSettings, Settings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.messages import Completion, Message
from gliding.errors import ArchiveError, ConfigError
from gliding.llm.port import LLM, LLMRequest
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.testing.archive import InMemoryArchive
from gliding.tools.base import ToolContext
from gliding.tools.groups import job_groups


def test_every_non_terminal_state_can_reach_a_terminal_one() -> None:
    for state in State:
        seen, frontier = {state}, [state]
        while frontier:
            current = frontier.pop()
            for (src, _event), dst in TRANSITIONS.items():
                if src is current and dst not in seen:
                    seen.add(dst)
                    frontier.append(dst)
        assert seen & TERMINAL, state


def test_terminal_states_have_no_way_out() -> None:
    assert not [key for key in TRANSITIONS if key[0] in TERMINAL]


def test_an_event_the_table_does_not_allow_is_an_error() -> None:
    with pytest.raises(ValueError, match="no transition"):
        transition(State.ACT, "text")


def test_roles_load_with_constitution_rules_numbered() -> None:
    roles = load_roles()
    assert tuple(roles) == role_names() == ("PA", "DA", "CA", "AA")
    prompt = roles["CA"].system_prompt()
    assert "U1. " in prompt and "CA1. " in prompt
    assert roles["CA"].finish_requires == ("run_checks",)
    assert "write" not in roles["CA"].tool_groups


def test_a_malformed_role_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "DA.yaml").write_text("name: DA\nprompt: hi\n")
    with pytest.raises(ConfigError, match="DA.yaml"):
        load_role("DA", tmp_path)


def _env(tmp_path: Path, llm: ScriptedLLM, role: str = "AA") -> AgentEnv:
    spec = load_role(role)
    settings = Settings()
    archive = LocalArchive(Archive.open(tmp_path / "data", "job1"), tmp_path / "data")
    return AgentEnv(
        job="job1", role=spec, llm=llm,
        toolset=job_groups(reader=archive, iri_base="gliding://job/job1/").toolset(
            spec.tool_groups),
        tool_ctx=ToolContext(tmp_path, settings.tools), archive=archive,
        budget=BudgetTracker(Limits(turns={}), started_at=0.0), bus=InProcessBus(),
        now=lambda: 0.0, max_turns=3, context=settings.context,
        counter=TokenCounter(settings.context.tokenizer),
    )


def test_a_finish_missing_a_required_field_goes_back_to_the_model(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("finish", decision="done"),
                       call("finish", decision="maybe", report="r"),
                       call("finish", decision="done", report="all good")])
    env = _env(tmp_path, llm)
    result = anyio.run(run_agent, env, "Check report: all pass")
    assert result.status == "finished" and result.turns == 3
    assert result.finish == {"decision": "done", "report": "all good"}
    second = llm.requests[1].messages[-1]
    assert second.role == "tool" and "finish needs: report" in second.content
    third = llm.requests[2].messages[-1]
    assert "must be one of done, another_cycle, escalate" in third.content
    env.archive.archive.close()


def test_every_turn_is_archived_and_summarised(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("write_file", path="a.txt", content="x"),
                       call("finish", summary="wrote a.txt")])
    env = _env(tmp_path, llm, "DA")
    result = anyio.run(run_agent, env, "Goal: write a.txt")
    assert [s.turn for s in result.summaries] == [1, 2]
    assert result.summaries[0].summary.startswith('write_file(path="a.txt"')
    assert result.tools[0].iri == "gliding://job/job1/result/DA-1-0"
    assert env.archive.archive.get(result.tools[0].iri).content == b"wrote 1 bytes to a.txt"
    assert {i.iri for i in env.archive.archive.list(kind="turn")} == {
        "gliding://job/job1/turn/DA/1", "gliding://job/job1/turn/DA/2"}
    env.archive.archive.close()


def test_da_may_call_finish_only_after_it_did_something(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("list_dir", path="."), call("finish", summary="looked")])
    env = _env(tmp_path, llm, "DA")
    anyio.run(run_agent, env, "Goal: look")
    first, second = llm.requests
    # declared from the first turn (the tool list never changes), callable only once allowed
    assert [t.name for t in first.tools] == [t.name for t in second.tools]
    assert "finish" in [t.name for t in first.tools]
    assert "finish" not in [t.name for t in first.callable_tools or ()]
    assert "finish" in [t.name for t in second.callable_tools or ()]
    env.archive.archive.close()


def test_the_system_prompt_states_the_threshold_the_router_uses(tmp_path: Path) -> None:
    from gliding.config.settings import ContextSettings, ToolResultIRISettings

    llm = ScriptedLLM([call("list_dir", path="."), call("finish", summary="ok")])
    env = _env(tmp_path, llm, "DA")
    env.context = ContextSettings(tool_result_iri=ToolResultIRISettings(threshold=777,
                                                                        preview_size=333))
    (tmp_path / "big.txt").write_text("x\n" * 2000)
    anyio.run(run_agent, env, "Goal: look")
    system = llm.requests[0].messages[0].content
    assert "over 777 bytes" in system and "at most 333 bytes" in system
    assert "read_result(iri, offset, limit)" in system and "grep_result(iri, pattern)" in system
    env.archive.archive.close()


def test_finish_called_before_it_is_offered_is_refused(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("finish", summary="did nothing"), call("list_dir", path="."),
                       call("finish", summary="looked")])
    env = _env(tmp_path, llm, "DA")  # DA may finish after one successful tool call
    result = anyio.run(run_agent, env, "Goal: look")
    assert result.status == "finished" and result.finish == {"summary": "looked"}
    refused = llm.requests[1].messages[-1]
    assert refused.role == "tool"
    assert refused.content == ("error: finish is not available yet: make 1 successful tool "
                               "call(s) first")
    env.archive.archive.close()  # type: ignore[attr-defined]


def test_an_unknown_tool_group_in_a_role_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "roles").mkdir()
    text = (home_dir() / "roles" / "CA.yaml").read_text()
    (tmp_path / "roles" / "CA.yaml").write_text(text.replace("[check,", "[chekc,"))
    with pytest.raises(ConfigError, match=r"CA.yaml: tool_groups: unknown tool group 'chekc'"):
        load_role("CA", tmp_path)


def test_bash_output_past_the_memory_cap_is_archived_whole_and_routed(tmp_path: Path) -> None:
    """Nothing dropped: 200 KB of output (over max_output_bytes) is the archived result, byte
    for byte, and the next prompt carries its summary and IRI, not a cut copy."""
    llm = ScriptedLLM([call("bash", command="seq 1 40000"), call("finish", summary="counted")])
    env = _env(tmp_path, llm, "DA")
    assert env.tool_ctx.settings.bash.max_output_bytes < 200_000
    result = anyio.run(run_agent, env, "Goal: count")
    iri = result.tools[0].iri
    archived = env.archive.archive.get(iri).content.decode()
    assert archived.splitlines()[1:] == [str(i) for i in range(1, 40001)]
    seen = llm.requests[1].messages[-1]
    assert seen.role == "tool" and iri in seen.content and "40000" in seen.content
    assert len(seen.content.encode()) <= env.context.tool_result_iri.preview_size
    env.archive.archive.close()



# --- prefetch: the engine's predicted sources are warmed while the model thinks ----------------

COUNT_THEN_GREP = [call("bash", command="seq 1 40000"),  # a routed result: out of the prompt
                   call("grep_result", iri="result/DA-1-0", pattern="12345"),
                   call("finish", summary="found it")]


class Thinking:
    """A ScriptedLLM that lets other tasks run mid-call and says whether a call is under way."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm, self.thinking = llm, False

    @property
    def name(self) -> str:
        return self.llm.name

    async def complete(self, request: LLMRequest) -> Completion:
        self.thinking = True
        try:
            await anyio.lowlevel.checkpoint()
            return await self.llm.complete(request)
        finally:
            self.thinking = False


class Watched(InMemoryArchive):
    """Records whether the model was mid-call when each warm began."""

    def __init__(self, llm: Thinking) -> None:
        super().__init__("j1")
        self.llm = llm
        self.during: list[bool] = []

    async def warm(self, iris: Sequence[str]) -> int:
        self.during.append(self.llm.thinking)
        return await super().warm(iris)


class Failing(InMemoryArchive):
    """An archive whose every warm fails."""

    def __init__(self, error: Exception) -> None:
        super().__init__("j1")
        self.error = error
        self.tried = 0

    async def warm(self, iris: Sequence[str]) -> int:
        self.tried += 1
        raise self.error


def _fake_env(tmp_path: Path, llm: LLM, archive: InMemoryArchive,
              prefetch: bool = True) -> AgentEnv:
    spec = load_role("DA")
    settings = Settings()
    return AgentEnv(
        job="j1", role=spec, llm=llm,
        toolset=job_groups(reader=archive, iri_base="gliding://job/j1/").toolset(
            spec.tool_groups),
        tool_ctx=ToolContext(tmp_path, settings.tools), archive=archive,
        budget=BudgetTracker(Limits(), started_at=0.0), bus=InProcessBus(),
        now=lambda: 0.0, max_turns=5, counter=TokenCounter(),
        context=settings.context.model_copy(update={
            "prefetch": PrefetchSettings(enabled=prefetch)}),
    )


def test_the_sources_the_engine_predicted_are_warmed_while_the_model_thinks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warmed: list[tuple[str, ...]] = []

    class Spy(ContextEngine):
        """The context engine, keeping what each prompt warmed."""

        def prompt(self, focus: str = "") -> list[Message]:
            messages = super().prompt(focus)
            warmed.append(tuple(w.iri for w in self.warmed))
            return messages

    monkeypatch.setattr("gliding.agents.loop.ContextEngine", Spy)
    llm = Thinking(ScriptedLLM(COUNT_THEN_GREP))
    archive = Watched(llm)
    result = anyio.run(run_agent, _fake_env(tmp_path, llm, archive), "Goal: find 12345")
    assert result.status == "finished"
    predicted = [iris for iris in warmed if iris]
    assert "gliding://job/j1/result/DA-1-0" in {i for iris in predicted for i in iris}
    assert archive.warms == predicted  # every prediction, as the engine made it
    assert archive.cached == {"gliding://job/j1/result/DA-1-0"}
    assert archive.during == [True] * len(predicted)  # each began during its model call


def test_prefetch_off_warms_nothing(tmp_path: Path) -> None:
    archive = InMemoryArchive("j1")
    env = _fake_env(tmp_path, ScriptedLLM(COUNT_THEN_GREP), archive, prefetch=False)
    assert anyio.run(run_agent, env, "Goal: find 12345").status == "finished"
    assert archive.warms == []


@pytest.mark.parametrize("error", [ArchiveError("the archive is closed"),
                                   OSError("disk gone")], ids=["archive", "os"])
def test_a_warm_that_fails_does_not_fail_the_turn(tmp_path: Path, error: Exception) -> None:
    archive = Failing(error)
    llm = ScriptedLLM(COUNT_THEN_GREP)
    result = anyio.run(run_agent, _fake_env(tmp_path, llm, archive), "Goal: find 12345")
    assert archive.tried >= 1
    assert result.status == "finished" and result.error is None
    assert len(llm.requests) == 3 and result.tools[1].ok


def test_a_model_failure_while_warming_fails_the_turn_as_before(tmp_path: Path) -> None:
    archive = InMemoryArchive("j1")
    llm = ScriptedLLM(COUNT_THEN_GREP[:1])  # the second call finds the script empty
    result = anyio.run(run_agent, _fake_env(tmp_path, llm, archive), "Goal: find 12345")
    assert archive.warms  # the second call was made while warming
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("model call failed")


def test_what_the_team_recorded_between_turns_is_shown_before_the_next(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("list_dir", path="."), call("list_dir", path="."),
                       call("finish", summary="looked")])
    news = iter(["Blackboard update: Artifact <a.txt> written by a teammate", ""])
    asked: list[int] = []

    async def update() -> str:
        asked.append(len(llm.requests))
        return next(news)

    env = dataclasses.replace(_env(tmp_path, llm, "DA"), board_update=update)
    result = anyio.run(run_agent, env, "Goal: look")
    assert result.turns == 3 and asked == [1, 2], "asked before every turn after the first"
    shown = [m for m in llm.requests[1].messages if m.role == "user" and "teammate" in m.content]
    assert len(shown) == 1 and llm.requests[1].messages[-1] is shown[0]
    assert sum("teammate" in m.content for m in llm.requests[2].messages) == 1, "once, not again"
    env.archive.archive.close()


# --- tool-call arguments are bounded: a huge one is refused, archived and stubbed --------------

def test_a_huge_tool_argument_is_refused_archived_and_never_resent(tmp_path: Path) -> None:
    """One reply with a 3 MB argument (issue 20: 60 MB took 3.4 GB and was re-sent in every
    later prompt): the call does not run, the model is told why, the argument is archived
    whole under an IRI, and every later prompt carries a stub of it, not the text."""
    big = "x" * 3_000_000
    llm = ScriptedLLM([call("write_file", path="big.txt", content=big),
                       call("list_dir", path="."),
                       call("finish", summary="done " + big),  # finish too
                       call("finish", summary="done")])
    env = _env(tmp_path, llm, "DA")
    env.max_turns = 6
    result = anyio.run(run_agent, env, "Goal: write big.txt")
    assert result.status == "finished" and result.finish == {"summary": "done"}
    assert not (tmp_path / "big.txt").exists()
    refused = result.tools[0]
    iri = "gliding://job/job1/arguments/DA-1"
    assert not refused.ok and iri in refused.output and "was not run" in refused.output
    assert refused.arguments["arguments_archived"] == iri  # the record holds the stub too
    archived = env.archive.archive.get(iri)  # type: ignore[attr-defined]
    assert archived.kind == "arguments" and len(archived.content) > 3_000_000
    assert json.loads(archived.content)["content"] == big
    cap = ContextEngine(env.context, env.counter, []).argument_cap
    for request in llm.requests[1:]:  # every prompt after the reply stays small
        assert sum(len(m.content) + sum(len(c.arguments_json()) for c in m.tool_calls)
                   for m in request.messages) < 100_000
    stub = llm.requests[1].messages[-2].tool_calls[0]
    assert stub.arguments["arguments_archived"] == iri and stub.arguments["bytes"] > cap
    finish_refused = llm.requests[3].messages[-1]
    assert finish_refused.role == "tool" and "arguments/DA-3" in finish_refused.content
    env.archive.archive.close()  # type: ignore[attr-defined]
