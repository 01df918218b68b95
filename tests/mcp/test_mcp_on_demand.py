"""MCP servers on demand: a role given a server carries ``tool_search`` and ``call_tool``, not
the server's tools; a live job finds a server-filesystem tool through ``tool_search``, calls it
through ``call_tool``, and every request body of a session carries the same ``tools`` bytes.

The live job runs on the hosted backend (litellm) against the fake provider on 127.0.0.1, which
keeps the exact bytes of every body; its replies and task are the ones ``gliding bench tools``
runs (``gliding/bench/tool_catalog.py``), so the bench measures what this test checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from gliding.bench.tool_catalog import (
    LOADED,
    NOTE,
    NOTE_TEXT,
    READ,
    ROLES,
    Recording,
    read_back,
    replies,
    task_text,
    tools_bytes,
)
from gliding.config.settings import MCPServerSettings, MCPSettings, Settings
from gliding.config.task import load_task_text
from gliding.daemon.compose import run_job
from gliding.llm.hosted import HostedLLM
from gliding.testing import ScriptedLLM, call
from gliding.testing.fake_provider import FakeProvider
from tests.mcp.mcp_support import everything, filesystem

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]  # node servers, whole jobs


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("model", ["openai/fake-model", "anthropic/claude-3-5-haiku-latest"])
def test_a_live_job_finds_and_calls_a_filesystem_tool_on_demand_with_the_same_tools_bytes(
        tmp_path: Path, model: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / NOTE).write_text(NOTE_TEXT, encoding="utf-8")
    servers = {"everything": everything(roles=ROLES), "filesystem": filesystem(str(ws),
                                                                                roles=ROLES)}
    settings = Settings(data_dir=tmp_path / "data", mcp=MCPSettings(servers=servers))
    task = load_task_text(task_text(ws, full=False), "task.yaml", tmp_path)

    with FakeProvider(replies(ws / NOTE, on_demand=True)) as fp:
        # whole replies: litellm writes a streamed Anthropic body with other JSON separators
        # (", ", ": ") than the compact ones the bench counts
        llm = Recording(HostedLLM(model, timeout_s=30, api_base=fp.url, api_key="dummy",
                                  stream=False))
        handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    assert fp.counts == {"ok": 7}  # PA 1, DA 3 (load, call, finish), CA 2, AA 1
    assert read_back(settings.data_dir, handle.report.job) == NOTE_TEXT

    provider = "openai" if model.startswith("openai/") else "anthropic"
    for role in ROLES:
        sent = [r.body for r in fp.requests if r.role == role]
        arrays = {json.dumps(json.loads(raw)["tools"], ensure_ascii=False,
                             separators=(",", ":")).encode() for raw in sent}
        assert len(arrays) == 1, role  # one tools array on every call of the session
        (array,) = arrays
        assert array in sent[0]  # ... byte for byte as the body carried it
        # the bench counts exactly these bytes
        first = next(r for r in llm.requests if r.meta["role"] == role)
        assert tools_bytes(first, provider).encode() == array
    first_da = next(json.loads(r.body) for r in fp.requests if r.role == "DA")
    names = [_name(t) for t in first_da["tools"]]
    assert "tool_search" in names and "call_tool" in names
    assert not [n for n in names if "__" in n]  # no server's tool is carried
    search = next(t for t in first_da["tools"] if _name(t) == "tool_search")
    assert LOADED in json.dumps(search)  # its description names the group: no listing call

    da = [r for r in llm.requests if r.meta["role"] == "DA"]
    loaded, called = (r.messages[-1].content for r in da[1:])
    assert loaded.startswith(f"loaded {LOADED}: ") and f'"name": "{READ}"' in loaded
    assert called == NOTE_TEXT


def _name(tool: dict[str, object]) -> str:
    function = tool.get("function")
    return str(function["name"] if isinstance(function, dict) else tool["name"])


def test_a_task_naming_a_server_group_makes_its_role_carry_it_without_tool_search(
        tmp_path: Path) -> None:
    """The task's ``tool_groups`` say otherwise for a host's server: DA carries its tools and,
    with nothing left to load, is offered no tool_search."""
    settings = Settings(data_dir=tmp_path / "data",
                        mcp=MCPSettings(servers={"everything": everything()}))
    (tmp_path / "task.yaml").write_text(json.dumps({
        "goal": "Add 2 and 3", "pipeline": ["DA"], "tool_groups": {"DA": ["mcp_everything"]},
    }), encoding="utf-8")
    task = load_task_text((tmp_path / "task.yaml").read_text("utf-8"), "task.yaml", tmp_path)
    llm = ScriptedLLM({"DA": [call("everything__get-sum", a=2, b=3),
                              call("finish", summary="5")]})

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    names = [t.name for t in llm.requests[0].tools]
    assert "everything__get-sum" in names and "tool_search" not in names


def test_a_server_on_demand_is_loadable_not_carried(tmp_path: Path) -> None:
    """By default (no ``on_demand`` in the config) a server's role loads it: calling its tool
    by name first is refused with how to load it."""
    settings = Settings(data_dir=tmp_path / "data",
                        mcp=MCPSettings(servers={"everything": everything()}))
    (tmp_path / "task.yaml").write_text("goal: Add 2 and 3\npipeline: [DA]\n", encoding="utf-8")
    task = load_task_text((tmp_path / "task.yaml").read_text("utf-8"), "task.yaml", tmp_path)
    llm = ScriptedLLM({"DA": [call("everything__get-sum", a=2, b=3),
                              call("tool_search", group="mcp_everything"),
                              call("call_tool", name="everything__get-sum",
                                   arguments={"a": 2, "b": 3}),
                              call("finish", summary="5")]})

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    names = [t.name for t in llm.requests[0].tools]
    assert "tool_search" in names and "everything__get-sum" not in names
    refused, _, added = (r.messages[-1].content for r in llm.requests[1:])
    assert "call tool_search(group='mcp_everything') first" in refused
    assert added == "The sum of 2 and 3 is 5."


def test_a_server_that_did_not_start_is_not_offered_on_demand(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", mcp=MCPSettings(servers={
        "gone": MCPServerSettings(command=str(tmp_path / "no-such-server"))}))
    (tmp_path / "task.yaml").write_text("goal: Look around\npipeline: [DA]\n", encoding="utf-8")
    task = load_task_text((tmp_path / "task.yaml").read_text("utf-8"), "task.yaml", tmp_path)
    llm = ScriptedLLM({"DA": [call("list_dir"), call("finish", summary="looked")]})

    handle = anyio.run(lambda: run_job(task, settings, llm=llm))

    assert handle.report is not None and handle.report.outcome == "success", handle.report
    assert "tool_search" not in [t.name for t in llm.requests[0].tools]  # nothing to load
