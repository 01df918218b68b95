"""MCP tools inside agents and jobs: a role given an MCP group calls a server tool; its result is
archived in L0 and routed like any tool's (a long one reaches the prompt as summary + IRI).

The job tests go through ``run_job``: the composition root builds the job's MCP groups from
``settings.mcp`` and the task file's ``mcp_servers`` (docs/mcp.md).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import anyio
import pytest

from gliding.agents.loop import AgentEnv, run_agent
from gliding.agents.roles import load_role
from gliding.bus.inproc import InProcessBus
from gliding.config.settings import MCPSettings, Settings, ToolchainSettings, ToolSettings
from gliding.config.task import load_task
from gliding.context.tokens import TokenCounter
from gliding.core.budget import BudgetTracker, Limits
from gliding.daemon.compose import run_job
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.tools.base import ToolContext
from gliding.tools.groups import job_groups
from tests.mcp.mcp_support import MODULES, alive, everything, group, read_pid

pytestmark = pytest.mark.heavy  # node servers, and a whole job


def test_a_role_given_the_mcp_group_calls_its_tool_and_the_loop_archives_and_routes_it(
        tmp_path: Path) -> None:
    # routing from the first result on: the session is far too short to leave whole_below
    settings = Settings(context={"window": {"whole_below": 0.0}})
    mcp = group(everything())
    spec = load_role("DA")
    spec = dataclasses.replace(spec, tool_groups=(*spec.tool_groups, mcp.name))
    long = "x" * 6000  # past context.tool_result_iri.threshold: archived, summarised
    llm = ScriptedLLM([call("everything__echo", message=long),
                       call("everything__get-sum", a=2, b=3),
                       call("finish", summary="echoed and added")])
    archive = LocalArchive(Archive.open(tmp_path / "data", "job1"), tmp_path / "data")
    tools = job_groups(reader=archive, iri_base="gliding://job/job1/", mcp=[mcp],
                       asked=["mcp_undeclared"])
    assert "mcp_undeclared" in tools.unavailable  # a role naming it goes without it
    counter = TokenCounter(settings.context.tokenizer)
    counter.count("warm")  # the encoding loads here, not on the event loop (the runner's way)

    async def main() -> object:
        await tools.open()
        try:
            env = AgentEnv(
                job="job1", role=spec, llm=llm,
                toolset=tools.toolset([*spec.tool_groups, "mcp_undeclared"]),
                tool_ctx=ToolContext(tmp_path, settings.tools), archive=archive,
                budget=BudgetTracker(Limits(turns={}), started_at=0.0), bus=InProcessBus(),
                now=lambda: 0.0, max_turns=4, context=settings.context,
                counter=counter)
            return await run_agent(env, "Goal: echo, then add 2 and 3")
        finally:
            await tools.aclose()

    result = anyio.run(main)
    assert result.status == "finished"  # type: ignore[attr-defined]
    echo, add = result.tools  # type: ignore[attr-defined]
    assert echo.ok and add.ok and add.output == "The sum of 2 and 3 is 5."
    assert echo.data["mcp"]["tool"] == "echo"
    assert archive.archive.get(echo.iri).content.decode() == f"Echo: {long}"  # whole, in L0
    routed = llm.requests[1].messages[-1]
    assert routed.role == "tool" and echo.iri in routed.content
    assert len(routed.content) < len(long)  # the prompt got the summary, not the 6 KB
    schema_names = [t.name for t in llm.requests[0].tools]
    assert "everything__echo" in schema_names and "read_file" in schema_names
    archive.archive.close()


def test_a_scripted_job_calls_an_mcp_tool_and_succeeds(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    settings = Settings(data_dir=tmp_path / "data", mcp=MCPSettings(
        servers={"everything": everything(pidfile, roles=("DA",), on_demand=False)}))
    (tmp_path / "task.yaml").write_text("goal: Add 2 and 3 with the MCP server\n"
                                        "pipeline: [DA]\n", encoding="utf-8")
    task = load_task(tmp_path / "task.yaml")
    llm = ScriptedLLM({"DA": [call("everything__get-sum", a=2, b=3),
                              call("finish", summary="2 + 3 = 5")]})

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    assert "everything__get-sum" in [t.name for t in llm.requests[0].tools]
    with Archive.open(settings.data_dir, handle.report.job, create=False) as archive:
        (result,) = archive.list(kind="result")
        assert archive.get(result.iri).text() == "The sum of 2 and 3 is 5."
    assert not alive(read_pid(pidfile))  # the server did not outlive the job


def test_a_task_file_declares_its_own_server_and_its_job_uses_it(tmp_path: Path) -> None:
    """The server runs in the job's command sandbox (docs/mcp.md): from the local install,
    which the host's tools.toolchain.mounts lends it read-only, never from a download."""
    server = everything()
    (tmp_path / "task.yaml").write_text(json.dumps({
        "goal": "Echo a word with the task's own MCP server", "pipeline": ["DA"],
        "mcp_servers": {"mine": {"command": server.command, "args": list(server.args),
                                 "env": {"WHERE": "{workspace}"}, "on_demand": False}},
    }), encoding="utf-8")  # JSON is YAML
    task = load_task(tmp_path / "task.yaml")
    llm = ScriptedLLM({"DA": [call("mine__echo", message="hello"),
                              call("finish", summary="echoed")]})

    settings = Settings(data_dir=tmp_path / "data", tools=ToolSettings(
        toolchain=ToolchainSettings(mounts=(str(MODULES.parent),))))

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    with Archive.open(tmp_path / "data", handle.report.job, create=False) as archive:
        (result,) = archive.list(kind="result")
        assert archive.get(result.iri).text() == "Echo: hello"
        record = archive.get_meta("task_record")  # a resumed job starts the same server
    assert record["mcp_servers"]["mine"]["env"] == {"WHERE": "{workspace}"}
