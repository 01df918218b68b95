"""tool_search: a role loads a group its role file allows on demand, and only that."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio

from gliding.agents.loop import AgentEnv, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.memory.archive import Archive
from gliding.memory.archive_port import LocalArchive
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
    assert outputs[1] == "groups you may load: exec: bash"
    assert outputs[2] == "loaded exec: bash"
    assert outputs[3].startswith("exit code 0") and "hi" in outputs[3]
    offered = [[t.name for t in r.tools] for r in llm.requests]
    assert "tool_search" in offered[0] and "bash" not in offered[0]
    assert "bash" in offered[3]
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
