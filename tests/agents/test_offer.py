"""agents/offer.py as pure functions: the declared tool list, the summary argument, and how a
call maps onto the tool that runs."""

from __future__ import annotations

import json

from gliding.agents.offer import declare, own_summaries, resolve, take_summary
from gliding.core.messages import ToolCall, ToolSpec
from gliding.tools.base import Toolset, builtin_groups

READ = Toolset(tuple(builtin_groups()["read"]))
EXEC = Toolset(tuple(builtin_groups()["exec"]))
FINISH = ToolSpec("finish", "done", {"type": "object", "required": ["summary"],
                                     "properties": {"summary": {"type": "string"}}})


def test_the_declared_list_is_the_groups_then_the_meta_tools_then_finish() -> None:
    offer = declare(READ.specs(), FINISH, on_demand=("web",), summaries=True)
    assert [t.name for t in offer.tools] == ["read_file", "list_dir", "glob", "grep",
                                             "tool_search", "call_tool", "finish"]
    assert "finish" not in offer.summarised and "call_tool" in offer.summarised
    again = declare(READ.specs(), FINISH, on_demand=("web",), summaries=True)
    assert json.dumps([t.to_openai() for t in again.tools]) == json.dumps(
        [t.to_openai() for t in offer.tools])
    now = offer.callable_now(may_finish=False, loaded=EXEC.specs())
    assert [t.name for t in now][-2:] == ["call_tool", "bash"]
    assert "summary" in now[-1].parameters["properties"]
    assert [t.name for t in declare((), FINISH, on_demand=(), summaries=False).tools] == [
        "finish"]


def test_tool_search_names_the_groups_it_may_load() -> None:
    offer = declare(READ.specs(), FINISH, on_demand=("web", "mcp_filesystem"), summaries=False)

    search = next(t for t in offer.tools if t.name == "tool_search")
    assert search.description.endswith("Groups: web, mcp_filesystem.")


def test_call_tool_arguments_may_come_flat_or_as_json_text() -> None:
    tools = Toolset((*READ.tools, *EXEC.tools))
    flat = resolve(ToolCall("c", "call_tool", {"name": "bash", "command": "ls"}), tools, {})
    text = resolve(ToolCall("c", "call_tool", {"name": "bash", "arguments": '{"command": "ls"}'}),
                   tools, {})
    for r in (flat, text):
        assert r.problem is None and r.call == ToolCall("c", "bash", {"command": "ls"})
    assert resolve(ToolCall("c", "call_tool", {}), tools, {}).problem == (
        "call_tool needs the name of a loaded tool; loaded: read_file, list_dir, glob, grep, "
        "bash")
    direct = resolve(ToolCall("c", "bash", {"command": "ls"}), READ, {"exec": EXEC})
    assert direct.problem is not None and "tool_search(group='exec')" in direct.problem


def test_the_summary_comes_out_of_call_tools_arguments_too() -> None:
    own = own_summaries([*READ.specs(), *EXEC.specs(), FINISH])
    assert own == {"finish"}
    call, line = take_summary(ToolCall("c", "call_tool", {
        "name": "bash", "arguments": {"command": "ls", "summary": "listed"}}), own)
    assert call.arguments == {"name": "bash", "arguments": {"command": "ls"}}
    assert line == "listed"
    kept, line = take_summary(ToolCall("c", "finish", {"summary": "done"}), own)
    assert kept.arguments == {"summary": "done"} and line == "done"
