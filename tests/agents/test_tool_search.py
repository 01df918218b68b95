"""tool_search: a role loads a group its role file allows on demand, and only that."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from gliding.agents.loop import AgentEnv, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.core.messages import Completion
from gliding.llm.port import LLMRequest
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.tools.base import ToolContext
from gliding.tools.groups import job_groups


def env(tmp: Path, llm: ScriptedLLM, on_demand: tuple[str, ...]) -> AgentEnv:
    spec = dataclasses.replace(load_role("DA"), tool_groups=("read",),
                               tool_groups_on_demand=on_demand, finish_min_calls=0)
    settings = Settings()
    groups = job_groups(reader=None)
    return AgentEnv(
        job="j1", role=spec, llm=llm, toolset=groups.toolset(spec.tool_groups),
        tool_ctx=ToolContext(tmp, settings.tools),
        archive=LocalArchive(Archive.open(tmp / "data", "j1"), tmp / "data"),
        budget=BudgetTracker(Limits(), started_at=0.0), bus=InProcessBus(), now=lambda: 0.0,
        max_turns=6, context=settings.context, counter=TokenCounter(),
        on_demand={name: groups.toolset([name]) for name in on_demand})


def test_a_role_loads_an_allowed_group_and_then_uses_it(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("bash", command="echo hi"), call("tool_search"),
                       call("tool_search", group="exec"), call("bash", command="echo hi"),
                       call("finish", summary="done")])
    e = env(tmp_path, llm, ("exec",))
    result = anyio.run(run_agent, e, "Goal: say hi")
    outputs = [t.output for t in result.tools]
    assert "not available to this role" in outputs[0]  # not loaded yet
    assert "tool_search(group='exec')" in outputs[0]  # and how to load it
    assert outputs[1] == "groups you may load: exec: bash"
    assert outputs[2].splitlines()[0] == "loaded exec: bash"
    assert outputs[3].startswith("exit code 0") and "hi" in outputs[3]
    assert "already made" not in outputs[3]  # the refused call before the load was not made
    offered = [[t.name for t in r.tools] for r in llm.requests]
    assert "tool_search" in offered[0] and "bash" not in offered[0]
    assert all(names == offered[0] for names in offered)  # the tool list never changes
    # a grammar-constrained model may call the loaded tool by its name once it is loaded
    assert "bash" in [t.name for t in llm.requests[3].callable_tools or ()]
    assert "bash" not in [t.name for t in llm.requests[0].callable_tools or ()]
    e.archive.archive.close()  # type: ignore[attr-defined]


def test_a_group_the_role_file_does_not_allow_cannot_be_loaded(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("tool_search", group="write"), call("finish", summary="x")])
    e = env(tmp_path, llm, ("exec",))
    result = anyio.run(run_agent, e, "Goal: write")
    assert result.tools[0].output.startswith("error: no group 'write' to load")
    e.archive.archive.close()  # type: ignore[attr-defined]


def test_without_on_demand_groups_no_tool_search_is_offered(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("finish", summary="x")])
    e = env(tmp_path, llm, ())
    anyio.run(run_agent, e, "Goal: nothing")
    assert "tool_search" not in [t.name for t in llm.requests[0].tools]
    e.archive.archive.close()  # type: ignore[attr-defined]


def wire(request: LLMRequest) -> tuple[str, str]:
    """The tool list and the system prompt as a provider gets them, serialised."""
    tools = json.dumps([t.to_openai() for t in request.tools], ensure_ascii=False)
    return tools, json.dumps(request.messages[0].to_openai(), ensure_ascii=False)


def test_a_loaded_group_comes_as_a_result_and_its_tools_through_call_tool(
        tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    llm = ScriptedLLM([call("tool_search", group="exec"),
                       call("call_tool", name="bash", arguments={"command": "cat a.txt"},
                            summary="read a.txt with cat"),
                       call("read_file", path="a.txt"),
                       call("finish", summary="done")])
    e = env(tmp_path, llm, ("exec",))
    result = anyio.run(run_agent, e, "Goal: show a.txt")

    assert result.status == "finished"
    loaded, ran, read = result.tools
    lines = loaded.output.splitlines()
    assert lines[0] == "loaded exec: bash" and "call_tool(name, arguments)" in lines[1]
    assert json.loads(lines[2])["name"] == "bash"
    assert json.loads(lines[2])["parameters"]["required"] == ["command"]
    # the call runs, is recorded and is described as the tool it called
    assert ran.name == "bash" and ran.arguments == {"command": "cat a.txt"}
    assert ran.ok and "hello" in ran.output
    assert result.summaries[1].summary.startswith('bash(command="cat a.txt") → exit code 0')
    meta = e.archive.archive.get(ran.iri).meta  # type: ignore[attr-defined]
    assert meta["tool"] == "bash" and meta["arguments"] == {"command": "cat a.txt"}
    # every request carried the same bytes of tools and system prompt
    assert len({wire(r) for r in llm.requests}) == 1
    names = [t.name for t in llm.requests[0].tools]
    assert names == ["read_file", "list_dir", "glob", "grep", "tool_search", "call_tool",
                     "finish"]
    # the schemas arrived as a tool result the prompt keeps whole (never routed to L0 only)
    assert llm.requests[1].messages[-1].content == loaded.output
    e.archive.archive.close()  # type: ignore[attr-defined]


def test_call_tool_with_a_name_it_cannot_call_is_a_clear_error(tmp_path: Path) -> None:
    llm = ScriptedLLM([call("call_tool", name="bash", arguments={"command": "echo"}),
                       call("call_tool", name="no_such_tool", arguments={}),
                       call("call_tool", name="finish", arguments={"summary": "x"}),
                       call("tool_search", group="exec"),
                       call("call_tool", name="bash", arguments={"cmd": "echo"}),
                       call("call_tool", name="bash", arguments="not an object"),
                       call("finish", summary="gave up")])
    e = env(tmp_path, llm, ("exec",))
    result = anyio.run(run_agent, e, "Goal: try")
    out = [t.output for t in result.tools]
    assert out[0] == ("error: call_tool: bash is in group 'exec', which is not loaded: call "
                      "tool_search(group='exec') first")
    assert out[1].startswith("error: call_tool: no loaded tool named 'no_such_tool'; the "
                             "tools you may call: read_file, list_dir, glob, grep")
    assert out[2] == "error: call finish directly, not through call_tool"
    assert out[4].startswith("error: bash: unknown argument 'cmd'")  # checked by its schema
    assert "bash takes: command (string, required)" in out[4]
    assert out[5].startswith("error: call_tool: the arguments of bash must be a JSON object")
    assert not any(t.ok for i, t in enumerate(result.tools) if i != 3)
    e.archive.archive.close()  # type: ignore[attr-defined]


def board(run: str) -> Callable[[], Awaitable[str]]:
    """A board whose news differ from one run of the job to the next."""
    asked = itertools.count(1)

    async def update() -> str:
        return f"{run} run, news {next(asked)}"
    return update


def test_a_resumed_session_rebuilds_the_same_request_after_a_load(tmp_path: Path) -> None:
    """Killed after it loaded a group and used it, the session replays from L0 and its first
    live call is byte for byte the call the killed session made: the load is replayed, and the
    system prompt and the board's news are the ones the killed session archived, though the
    board says more by the time it resumes."""
    script = [call("tool_search", group="exec"), call("call_tool", name="bash",
                                                      arguments={"command": "echo hi"}),
              call("read_file", path="nothing.txt"), call("finish", summary="done")]

    class Dies(ScriptedLLM):
        async def complete(self, request: LLMRequest) -> Completion:
            if len(self.requests) == 2:  # asked for turn 3: the process dies
                self.requests.append(request)
                raise KeyboardInterrupt
            return await super().complete(request)

    first = Dies(list(script))
    e = dataclasses.replace(env(tmp_path, first, ("exec",)), extra_system="Board: step 1 todo",
                            board_update=board("first"))
    with pytest.raises(KeyboardInterrupt):
        anyio.run(run_agent, e, "Goal: say hi")
    e.archive.archive.close()  # type: ignore[attr-defined]

    second = ScriptedLLM(list(script[2:]))
    e = dataclasses.replace(env(tmp_path, second, ("exec",)),
                            extra_system="Board: step 1 done, step 2 todo",
                            board_update=board("second"))
    result = anyio.run(run_agent, e, "Goal: say hi")
    assert result.status == "finished" and result.replayed_turns == 2
    killed, resumed = first.requests[2], second.requests[0]
    assert resumed.meta["turn"] == killed.meta["turn"] == 3
    assert wire(resumed) == wire(killed)
    assert "Board: step 1 todo" in resumed.messages[0].content
    assert [m.content for m in resumed.messages if m.content.startswith("first run")] == [
        "first run, news 1", "first run, news 2"]
    assert [m.to_openai() for m in resumed.messages] == [m.to_openai() for m in killed.messages]
    assert resumed.meta["cache_breakpoints"] == killed.meta["cache_breakpoints"]
    assert [t.name for t in resumed.callable_tools or ()] == [
        t.name for t in killed.callable_tools or ()]  # the load was replayed too
    e.archive.archive.close()  # type: ignore[attr-defined]


def test_the_local_models_grammar_allows_what_is_callable_its_prompt_what_is_declared(
        tmp_path: Path) -> None:
    from gliding.llm.local import _chosen_tools, action_schema, to_chat

    llm = ScriptedLLM([call("tool_search", group="exec"), call("bash", command="echo hi"),
                       call("finish", summary="done")])
    e = dataclasses.replace(env(tmp_path, llm, ("exec",)),
                            role=dataclasses.replace(load_role("DA"), tool_groups=("read",),
                                                     tool_groups_on_demand=("exec",)))
    result = anyio.run(run_agent, e, "Goal: say hi")
    assert result.status == "finished" and result.tools[1].ok  # bash called by its own name
    first, second, _third = llm.requests
    grammar = [[t.name for t in _chosen_tools(r)] for r in (first, second)]
    assert "finish" not in grammar[0] and "bash" not in grammar[0]  # DA: a tool call first
    assert "call_tool" in grammar[1] and "bash" in grammar[1] and "finish" in grammar[1]
    options = action_schema(_chosen_tools(second))["anyOf"]
    assert {o["properties"]["tool"]["const"] for o in options} == set(grammar[1])
    # the system prompt lists the declared tools, the same on every turn
    assert to_chat(first.messages, first.tools)[0] == to_chat(second.messages, second.tools)[0]
    e.archive.archive.close()  # type: ignore[attr-defined]
