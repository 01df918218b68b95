"""Tool argument checking, ToolGroupManager and Toolset: a tool call never crashes the loop."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from gliding.config.settings import ToolSettings
from gliding.errors import ToolError
from gliding.tools.base import (
    Tool,
    ToolContext,
    ToolGroup,
    ToolGroupManager,
    ToolOutcome,
    ToolOutput,
    Toolset,
    builtin_groups,
    prop,
    schema,
)
from gliding.tools.groups import GROUP_NAMES, job_groups


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return repr(sorted(args.items()))


async def _refuse(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("nope", hint="try again")


async def _crash(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ZeroDivisionError("division by zero")


ECHO = Tool(
    "echo",
    "Echo the arguments.",
    schema(
        ["text"],
        text=prop("string", "t"),
        n=prop("integer", "n"),
        flag=prop("boolean", "f"),
        items=prop("array", "i"),
        obj=prop("object", "o"),
    ),
    _echo,
)
REFUSE = Tool("refuse", "Always refuses.", schema(), _refuse)
CRASH = Tool("crash", "Always crashes.", schema(), _crash)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, ToolSettings())


class NoKnowledge:
    """A KnowledgeAccess that knows nothing."""

    def recall(self, query: str) -> str:
        return ""

    def search(self, query: str, k: int | None = None) -> list[Any]:
        return []

    def query(self, sparql: str) -> list[dict[str, Any]]:
        return []


def test_builtin_groups() -> None:
    groups = builtin_groups()
    assert {g: [t.name for t in tools] for g, tools in groups.items()} == {
        "read": ["read_file", "list_dir", "glob", "grep"],
        "write": ["write_file", "edit_file"],
        "exec": ["bash"],
    }
    manager = job_groups(knowledge=NoKnowledge())
    assert manager.group_names == GROUP_NAMES
    names = {}
    for name in manager.group_names:
        group = manager.group(name)
        assert group is not None and group.name == name and group.description
        names[name] = [t.name for t in group.tools]
    assert names == {
        "read": ["read_file", "list_dir", "glob", "grep"],
        "write": ["write_file", "edit_file"],
        "exec": ["bash"],
        "check": ["run_checks"],
        "memory": ["read_result", "grep_result", "recall", "note"],
        "knowledge": ["kg_search", "knowledge_query"],
        "web": ["web_fetch"],  # web_search only with a search service (test_tools_web.py)
    }
    for name in manager.group_names:
        for tool in manager.group(name).tools:  # type: ignore[union-attr]
            spec = tool.spec().to_openai()["function"]
            assert spec["parameters"]["type"] == "object"
            assert "required" in spec["parameters"]
            assert 0 < len(spec["description"]) <= 80, tool.name
            assert tool.idempotent == (tool.name not in ("bash", "edit_file")), tool.name


def test_without_long_term_memory_the_knowledge_group_is_left_out() -> None:
    manager = job_groups()
    assert "knowledge" not in manager.group_names and manager.unavailable == {"knowledge"}
    toolset = manager.toolset(["read", "knowledge", "memory"])
    assert toolset.names == ("read_file", "list_dir", "glob", "grep", "read_result",
                             "grep_result", "recall", "note")


def test_unknown_group_lists_known_groups() -> None:
    manager = job_groups(knowledge=NoKnowledge())
    expected = ("unknown tool group 'admin'; known groups: check, exec, knowledge, memory, read, "
                "web, write")
    with pytest.raises(ToolError, match=expected):
        manager.toolset(["read", "admin"])
    with pytest.raises(ToolError, match="known groups: check, exec, memory, read, web, write\n"):
        job_groups().toolset(["knowledge", "admin"])  # unavailable is not unknown


def test_toolset_specs_only_hold_the_roles_tools() -> None:
    toolset = ToolGroupManager(builtin_groups()).toolset(["read"], extra_tools=[ECHO])
    assert toolset.names == ("read_file", "list_dir", "glob", "grep", "echo")
    assert [s.name for s in toolset.specs()] == list(toolset.names)


def test_same_tool_in_two_groups_is_listed_once_but_name_clash_refused() -> None:
    manager = ToolGroupManager({"a": [ECHO], "b": [ECHO]})
    assert manager.toolset(["a", "b"]).names == ("echo",)
    clash = Tool("echo", "Another echo.", schema(), _refuse)
    with pytest.raises(ToolError, match="two different tools are named 'echo'"):
        manager.toolset(["a"], extra_tools=[clash])


@pytest.mark.anyio
async def test_tool_outside_role_is_refused_with_available_list(ctx: ToolContext) -> None:
    toolset = ToolGroupManager(builtin_groups()).toolset(["read"])
    outcome = await toolset.call("bash", {"command": "rm -rf /"}, ctx)
    assert outcome == ToolOutcome(
        False,
        "error: tool 'bash' is not available to this role; "
        "available: read_file, list_dir, glob, grep",
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "echo: missing required argument 'text'"),
        ({"text": None}, "echo: missing required argument 'text'"),
        ({"text": "x", "bogus": 1}, "echo: unknown argument 'bogus'"),
        ({"text": 5}, "echo: argument 'text' must be a string, got int 5"),
        ({"text": "x", "n": "5"}, "echo: argument 'n' must be an integer, got str '5'"),
        ({"text": "x", "n": True}, "echo: argument 'n' must be an integer"),
        ({"text": "x", "n": 1.5}, "echo: argument 'n' must be an integer"),
        ({"text": "x", "flag": "yes"}, "echo: argument 'flag' must be a boolean"),
        ({"text": "x", "items": "a"}, "echo: argument 'items' must be an array"),
        ({"text": "x", "obj": []}, "echo: argument 'obj' must be an object"),
        (["text"], "echo: arguments must be a JSON object"),
    ],
)
@pytest.mark.anyio
async def test_bad_arguments_name_the_argument(
    ctx: ToolContext, arguments: Any, message: str
) -> None:
    with pytest.raises(ToolError, match=message.replace("(", r"\(")):
        ECHO.check_arguments(arguments)
    outcome = await ToolGroupManager({"g": [ECHO]}).toolset(["g"]).call("echo", arguments, ctx)
    assert not outcome.ok
    assert outcome.output.startswith(f"error: {message}")
    assert "echo takes: text (string, required), n (integer)" in outcome.output


@pytest.mark.anyio
async def test_good_arguments_reach_the_tool(ctx: ToolContext) -> None:
    toolset = ToolGroupManager({"g": [ECHO]}).toolset(["g"])
    arguments = {"text": "hi", "n": 3.0, "flag": False, "items": [1], "obj": {}}
    outcome = await toolset.call("echo", arguments, ctx)
    assert outcome == ToolOutcome(
        True, "[('flag', False), ('items', [1]), ('n', 3), ('obj', {}), ('text', 'hi')]"
    )
    dropped = await toolset.call("echo", {"text": "hi", "n": None}, ctx)
    assert dropped == ToolOutcome(True, "[('text', 'hi')]")


@pytest.mark.anyio
async def test_tool_errors_and_crashes_become_outcomes(ctx: ToolContext) -> None:
    toolset = ToolGroupManager({"g": [REFUSE, CRASH]}).toolset(["g"])
    refused = await toolset.call("refuse", {}, ctx)
    assert refused == ToolOutcome(False, "error: nope\n  hint: try again")
    crashed = await toolset.call("crash", {}, ctx)
    assert crashed == ToolOutcome(
        False, "error: crash failed: ZeroDivisionError: division by zero"
    )


@pytest.mark.anyio
async def test_a_tools_data_comes_back_with_its_outcome(ctx: ToolContext) -> None:
    async def counted(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("2 things", {"count": 2})

    toolset = ToolGroupManager({"g": [Tool("count", "Count.", schema(), counted), ECHO]}
                               ).toolset(["g"])
    assert await toolset.call("count", {}, ctx) == ToolOutcome(True, "2 things", {"count": 2})
    plain = await toolset.call("echo", {"text": "x"}, ctx)
    assert plain == ToolOutcome(True, "[('text', 'x')]") and plain.data == {}


@pytest.mark.anyio
async def test_a_tool_gets_the_tighter_deadline_and_its_own_timeouts_are_failures(
    ctx: ToolContext,
) -> None:
    seen: list[float | None] = []

    async def look(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(ctx.deadline)
        return "looked"

    async def socket_timeout(args: dict[str, Any], ctx: ToolContext) -> str:
        raise TimeoutError("connect timed out")  # not the call's deadline

    toolset = Toolset((Tool("look", "Look.", schema(), look, timeout_s=5),
                       Tool("net", "Net.", schema(), socket_timeout, timeout_s=5)))
    before = time.monotonic()
    await toolset.call("look", {}, ctx)  # no wall budget: its own 5 s
    await toolset.call("look", {}, dataclasses.replace(ctx, deadline=before + 1))
    await toolset.call("look", {}, dataclasses.replace(ctx, deadline=before + 100))
    assert seen[0] is not None and before + 5 <= seen[0] <= time.monotonic() + 5
    assert seen[1] == before + 1
    assert seen[2] is not None and seen[2] <= time.monotonic() + 5
    assert await toolset.call("net", {}, ctx) == ToolOutcome(
        False, "error: net failed: TimeoutError: connect timed out")


class Tracked(ToolGroup):
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        super().__init__(name, [])
        self.log, self.fail = log, fail

    async def open(self) -> None:
        if self.fail:
            raise ToolError(f"{self.name} cannot open")
        self.log.append(f"open {self.name}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


@pytest.mark.anyio
async def test_groups_open_in_order_close_in_reverse_and_a_failed_open_closes_the_rest() -> None:
    log: list[str] = []
    manager = ToolGroupManager([Tracked("a", log), Tracked("b", log)])
    await manager.open()
    await manager.aclose()
    assert log == ["open a", "open b", "close b", "close a"]
    log.clear()
    failing = ToolGroupManager([Tracked("a", log), Tracked("b", log), Tracked("c", log, True)])
    with pytest.raises(ToolError, match="c cannot open"):
        await failing.open()
    assert log == ["open a", "open b", "close b", "close a"]
    with pytest.raises(ToolError, match="two tool groups are named 'a'"):
        ToolGroupManager([Tracked("a", log), Tracked("a", log)])


@pytest.mark.anyio
async def test_groups_and_managers_are_async_context_managers() -> None:
    log: list[str] = []
    async with Tracked("solo", log) as group:
        assert group.name == "solo" and log == ["open solo"]
    assert log == ["open solo", "close solo"]
    log.clear()
    with pytest.raises(RuntimeError, match="the job failed"):
        async with ToolGroupManager([Tracked("a", log), Tracked("b", log)]) as manager:
            assert manager.group_names == ("a", "b")
            raise RuntimeError("the job failed")
    assert log == ["open a", "open b", "close b", "close a"]  # closed however the block ends
    log.clear()
    with pytest.raises(ToolError, match="c cannot open"):
        async with ToolGroupManager([Tracked("a", log), Tracked("c", log, True)]):
            raise AssertionError("the block does not run when a group cannot open")
    assert log == ["open a", "close a"]
