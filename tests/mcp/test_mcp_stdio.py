"""MCP servers over stdio as tool groups, against the reference servers (node): listing,
calls, tool errors, timeouts, the result cap, a server killed mid-job, the process gone after
aclose, servers that cannot start, and the environment a server gets."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from gliding.config.settings import MCPServerSettings, MCPSettings, ToolSettings
from gliding.tools.base import ToolContext, ToolGroupManager
from gliding.tools.mcp.client import mcp_groups
from tests.mcp.mcp_support import alive, everything, filesystem, group, read_pid

pytestmark = pytest.mark.heavy  # each test starts node servers


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, ToolSettings())


def test_the_server_tools_are_the_group_tools_under_prefixed_names(tmp_path: Path) -> None:
    g = group(everything())

    async def main() -> None:
        await g.open()
        try:
            assert g.name == "mcp_everything" and g.unavailable is None
            by_name = {t.name: t for t in g.tools}
            assert {"everything__echo", "everything__get-sum",
                    "everything__trigger-long-running-operation"} <= set(by_name)
            echo = by_name["everything__echo"]
            assert echo.description == "Echoes back the input string (MCP: everything)"
            assert echo.parameters == {
                "type": "object", "required": ["message"],
                "properties": {"message": {"type": "string", "description": "Message to echo"}}}
            assert echo.idempotent  # its annotations say read-only
            assert not by_name["everything__toggle-simulated-logging"].idempotent  # they do not
        finally:
            await g.aclose()

    anyio.run(main)


def test_echo_and_get_sum_answer_through_the_toolset(tmp_path: Path) -> None:
    manager = ToolGroupManager([group(everything())])

    async def main() -> None:
        await manager.open()
        try:
            tools = manager.toolset(["mcp_everything"])
            echo = await tools.call("everything__echo", {"message": "hi"}, _ctx(tmp_path))
            add = await tools.call("everything__get-sum", {"a": 2, "b": 3}, _ctx(tmp_path))
            image = await tools.call("everything__get-tiny-image", {}, _ctx(tmp_path))
        finally:
            await manager.aclose()
        assert echo.ok and echo.output == "Echo: hi"
        assert echo.data == {"mcp": {"server": "everything", "tool": "echo", "cut": False,
                                     "content": ["text"]}}
        assert add.ok and add.output == "The sum of 2 and 3 is 5."
        assert image.ok and "[image image/png, " in image.output

    anyio.run(main)


def test_the_filesystem_server_reads_a_file_in_its_root_and_refuses_others(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("line one\nline two\n", encoding="utf-8")
    manager = ToolGroupManager([group(filesystem("{workspace}"), "fs", workspace=root)])

    async def main() -> tuple[str, str, bool]:
        await manager.open()
        try:
            tools = manager.toolset(["mcp_fs"])
            read = await tools.call("fs__read_text_file",
                                    {"path": str(root / "notes.txt")}, _ctx(root))
            outside = await tools.call("fs__read_text_file", {"path": "/etc/hostname"},
                                       _ctx(root))
            return read.output, outside.output, read.ok and not outside.ok
        finally:
            await manager.aclose()

    read, outside, oks = anyio.run(main)
    assert oks and read == "line one\nline two\n"
    assert outside.startswith("error: read_text_file (server fs): Access denied")


def test_the_server_starts_in_the_workspace_unless_cwd_says_otherwise(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    default = group(filesystem("."), "fs", workspace=tmp_path)
    elsewhere = group(filesystem(".", cwd="sub"), "fs2", workspace=tmp_path)

    async def allowed(g: object) -> str:
        await g.open()  # type: ignore[attr-defined]
        try:
            return (await g.call("list_allowed_directories", {})).text  # type: ignore[attr-defined]
        finally:
            await g.aclose()  # type: ignore[attr-defined]

    assert str(tmp_path.resolve()) in anyio.run(allowed, default)
    assert str((tmp_path / "sub").resolve()) in anyio.run(allowed, elsewhere)


def test_an_is_error_result_is_a_tool_error_the_model_reads(tmp_path: Path) -> None:
    g = group(everything())

    async def main() -> str:
        await g.open()
        try:
            return (await ToolGroupManager([g]).toolset(["mcp_everything"]).call(
                "everything__get-annotated-message", {"messageType": "nonsense"},
                _ctx(tmp_path))).output
        finally:
            await g.aclose()

    output = anyio.run(main)
    assert output.startswith("error: get-annotated-message (server everything): ")
    assert "messageType" in output


def test_a_call_past_its_timeout_fails_and_the_server_still_answers(tmp_path: Path) -> None:
    g = group(everything(), timeout_s=1)

    async def main() -> tuple[str, str]:
        await g.open()
        try:
            tools = ToolGroupManager([g]).toolset(["mcp_everything"])
            slow = await tools.call("everything__trigger-long-running-operation",
                                    {"duration": 10, "steps": 2}, _ctx(tmp_path))
            after = await tools.call("everything__echo", {"message": "still here"},
                                     _ctx(tmp_path))
            return slow.output, after.output
        finally:
            await g.aclose()

    slow, after = anyio.run(main)
    # the 1 s timeout ended it; the 10 s operation, run to its end, would have succeeded
    assert slow.startswith("error: trigger-long-running-operation timed out after 1s")
    assert "raise mcp.timeout_s" in slow
    assert after == "Echo: still here"


def test_a_server_timeout_overrides_the_global_one(tmp_path: Path) -> None:
    g = group(everything(timeout_s=1), timeout_s=600)
    assert g.timeout_s == 1


def test_a_result_over_the_cap_is_cut_with_a_notice(tmp_path: Path) -> None:
    g = group(everything(), max_result_bytes=1024)

    async def main() -> tuple[str, dict[str, object]]:
        await g.open()
        try:
            out = await ToolGroupManager([g]).toolset(["mcp_everything"]).call(
                "everything__echo", {"message": "é" * 3000}, _ctx(tmp_path))
            return out.output, out.data
        finally:
            await g.aclose()

    output, data = anyio.run(main)
    kept, notice = output.split("\n[cut: ")
    assert kept.startswith("Echo: éé") and len(kept.encode()) <= 1024
    assert notice == ("the result was 6006 bytes; only the first 1024 were kept "
                      "(mcp.max_result_bytes)]")
    assert data["mcp"]["cut"] is True  # type: ignore[index]


def test_a_server_killed_mid_call_is_a_tool_error_and_later_calls_say_so(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    g = group(everything(pidfile))

    async def main() -> tuple[str, str, float]:
        await g.open()
        try:
            tools = ToolGroupManager([g]).toolset(["mcp_everything"])
            pid = read_pid(pidfile)

            async def kill() -> None:
                await anyio.sleep(0.5)
                os.kill(pid, signal.SIGKILL)

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill)
                during = await tools.call("everything__trigger-long-running-operation",
                                          {"duration": 10, "steps": 2}, _ctx(tmp_path))
            later = await tools.call("everything__echo", {"message": "x"}, _ctx(tmp_path))
            return during.output, later.output
        finally:
            await g.aclose()

    during, later = anyio.run(main)
    assert during.startswith("error: server everything exited: its connection closed")
    assert later == during  # known dead: not tried again, the same reason
    assert "do not call this server's tools again" in later
    assert not alive(read_pid(pidfile))


def test_the_server_process_is_gone_after_aclose(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    g = group(everything(pidfile))

    async def main() -> tuple[bool, bool, str]:
        await g.open()
        pid = read_pid(pidfile)
        running = alive(pid)
        await g.aclose()
        await g.aclose()  # twice is harmless
        after = await ToolGroupManager([g]).toolset(["mcp_everything"]).call(
            "everything__echo", {"message": "x"}, _ctx(tmp_path))
        return running, alive(pid), after.output

    running, still, after = anyio.run(main)
    assert running and not still
    assert after == "error: server everything is not running"


def test_a_cancelled_call_is_cancelled_at_the_server_too(tmp_path: Path) -> None:
    g = group(everything())

    async def main() -> tuple[bool, str]:
        await g.open()
        try:
            with anyio.move_on_after(0.5) as scope:
                await g.call("trigger-long-running-operation", {"duration": 10, "steps": 2})
            return scope.cancelled_caught, (await g.call("echo", {"message": "next"})).text
        finally:
            await g.aclose()

    # the call gave way to the cancellation (one that waited the 10 s out would have returned
    # its result, and nothing would have been caught), and the session answers the next one
    cancelled, after = anyio.run(main)
    assert cancelled and after == "Echo: next"


def test_servers_that_cannot_start_leave_their_groups_unavailable_not_the_job(
        tmp_path: Path) -> None:
    settings = MCPSettings(startup_timeout_s=1, servers={
        "missing": MCPServerSettings(command="no-such-program-gliding"),
        "broken": MCPServerSettings(command="node", args=(str(tmp_path / "nothing.js"),)),
        "silent": MCPServerSettings(command="sleep", args=("60",)),
        "everything": everything(),
    })
    groups = mcp_groups(settings, env_allow=("PATH",))
    manager = ToolGroupManager(groups)

    async def main() -> list[str]:
        with capture_logs() as logs:
            await manager.open()  # raises nothing
        try:
            assert manager.toolset(["mcp_missing", "mcp_broken", "mcp_silent"]).tools == ()
            assert manager.toolset(["mcp_everything"]).tools
        finally:
            await manager.aclose()
        return [e["reason"] for e in logs if e["event"] == "mcp.server.unavailable"]

    reasons = anyio.run(main)
    assert reasons == [g.unavailable for g in groups[:3]]
    assert reasons[0] == ("server missing did not start: cannot run "
                          "'no-such-program-gliding': No such file or directory")
    assert reasons[1].startswith("server broken did not start: ")
    assert "its stderr ended: Error: Cannot find module" in reasons[1]
    assert reasons[2] == ("server silent did not start: no answer within 1s "
                          "(mcp.startup_timeout_s)")
    assert groups[3].unavailable is None


def test_the_server_sees_only_the_allow_list_and_what_its_config_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("GLIDING_LLM__MODEL", "gpt-secret")
    monkeypatch.setenv("PASSED_TOKEN", "passed")
    monkeypatch.setenv("LANG", "C.UTF-8")
    server = everything(env={"FROM_CONFIG": "{workspace}/data"}, pass_env=("PASSED_TOKEN",))
    g = group(server, workspace=tmp_path, env_allow=("PATH", "LANG"))

    async def main() -> dict[str, str]:
        await g.open()
        try:
            return dict(json.loads((await g.call("get-env", {})).text))
        finally:
            await g.aclose()

    seen = anyio.run(main)
    assert seen["FROM_CONFIG"] == f"{tmp_path}/data"
    assert seen["PASSED_TOKEN"] == "passed" and seen["LANG"] == "C.UTF-8"
    # the SDK adds HOME, LOGNAME, PATH, SHELL, TERM and USER of ours when present
    sdk = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
    assert set(seen) <= {"FROM_CONFIG", "PASSED_TOKEN", "LANG"} | sdk
    assert "sk-secret" not in json.dumps(seen) and "gpt-secret" not in json.dumps(seen)


def test_closing_the_group_under_a_call_ends_the_call_with_a_tool_error(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    g = group(everything(pidfile))

    async def main() -> str:
        await g.open()
        tools = ToolGroupManager([g]).toolset(["mcp_everything"])
        outputs: list[str] = []

        async def slow() -> None:
            outcome = await tools.call("everything__trigger-long-running-operation",
                                       {"duration": 20, "steps": 2}, _ctx(tmp_path))
            outputs.append(outcome.output)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await anyio.sleep(0.5)
            await g.aclose()
        return outputs[0]

    # ended by the close, not by the 20 s operation (that would have succeeded)
    output = anyio.run(main)
    assert output == ("error: trigger-long-running-operation: server everything was stopped "
                      "while it ran (the job is closing its tools)")
    assert not alive(read_pid(pidfile))
