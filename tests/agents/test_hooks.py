"""Hooks on their own: what a hook gets on stdin, how its exit decides, what failing does (and
fail_closed), which tools it runs for, and that a task's hooks stay in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from gliding.agents.hooks import Hooks
from gliding.config.settings import HookSettings, Settings
from gliding.config.task import load_task, task_from_record, task_record
from gliding.core import events
from gliding.errors import TaskFileError


def hooks(tmp: Path, *specs: dict, sandbox: str = "bwrap") -> tuple[Hooks, list[events.Event]]:
    seen: list[events.Event] = []

    async def publish(event: events.Event) -> None:
        seen.append(event)

    tools = Settings().tools.model_copy(update={"sandbox": sandbox})
    made = Hooks("j1", tuple(HookSettings.model_validate(s) for s in specs), tmp, tools, None,
                 publish)
    return made, seen


def before(made: Hooks, tool: str = "bash", **arguments: object) -> str | None:
    return anyio.run(lambda: made.before_tool(role="DA", session="DA.1.s2", turn=3, tool=tool,
                                              arguments=arguments))


def test_a_before_tool_hook_reads_the_call_and_refuses_it_with_exit_2(tmp_path: Path) -> None:
    made, seen = hooks(tmp_path, {"at": "before_tool", "command":
                                  "cat > got.json; echo 'not today' >&2; echo ignored; exit 2"})
    assert before(made, command="make deploy") == "not today"
    got = json.loads((tmp_path / "got.json").read_text())
    assert got == {"hook": "before_tool", "job": "j1", "role": "DA", "session": "DA.1.s2",
                   "turn": 3, "tool": "bash", "arguments": {"command": "make deploy"}}
    assert [type(e) for e in seen] == [events.HookRefused]
    assert seen[0].hook == "before_tool hook 1"  # never its command (it may hold a secret)


@pytest.mark.parametrize(("command", "error"), [
    ("echo broken >&2; exit 1", "exit code 1: broken"),
    ("sleep 5", "killed after 0.5s timeout"),
    ("exec /nonexistent-hook", "exit code 127"),
])
def test_a_failing_hook_is_an_event_and_lets_the_call_through_unless_it_fails_closed(
        tmp_path: Path, command: str, error: str) -> None:
    made, seen = hooks(tmp_path, {"at": "before_tool", "command": command, "timeout_s": 0.5})
    assert before(made) is None
    assert len(seen) == 1 and isinstance(seen[0], events.HookFailed)
    assert seen[0].error.startswith(error) and seen[0].point == "before_tool"
    closed, _ = hooks(tmp_path, {"at": "before_tool", "command": command, "timeout_s": 0.5,
                                 "fail_closed": True})
    refusal = before(closed)
    assert refusal is not None and error in refusal


def test_tools_patterns_choose_the_calls_a_hook_runs_for(tmp_path: Path) -> None:
    made, _ = hooks(tmp_path, {"at": "before_tool", "tools": ["web_*", "bash"],
                               "command": "echo no >&2; exit 2"})
    assert before(made, "web_fetch") == "no" and before(made, "bash") == "no"
    assert before(made, "read_file") is None


def test_after_tool_gets_the_output_cut_and_notify_points_cannot_refuse(tmp_path: Path) -> None:
    made, seen = hooks(tmp_path, {"at": "after_tool", "command": "cat > after.json; exit 2"},
                       {"at": "job_end", "command": "cat > end.json"})
    anyio.run(lambda: made.after_tool(role="DA", session="DA", turn=1, tool="bash",
                                      arguments={}, ok=True, output="x" * 20_005))
    anyio.run(lambda: made.job_end("success"))
    after = json.loads((tmp_path / "after.json").read_text())
    assert len(after["output"]) == 20_000 and after["output_cut"] == 5 and after["ok"] is True
    assert json.loads((tmp_path / "end.json").read_text())["outcome"] == "success"
    assert seen == []  # exit 2 means nothing after a call


def test_a_hook_runs_in_the_sandbox_unless_the_host_says_otherwise(tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    made, _ = hooks(tmp_path, {"at": "job_end", "command": f"echo x > {outside}"})
    anyio.run(lambda: made.job_end("success"))
    assert not outside.exists()  # only the workspace is writable in the sandbox
    free, _ = hooks(tmp_path, {"at": "job_end", "command": f"echo x > {outside}",
                               "sandbox": False})
    anyio.run(lambda: free.job_end("success"))
    assert outside.read_text() == "x\n"
    outside.unlink()


def test_a_task_file_may_not_run_a_hook_outside_the_sandbox(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    for no in ("false", "0", "no", "'off'"):  # whatever YAML and pydantic read as false
        path.write_text(f"goal: g\nhooks:\n  - at: job_end\n    command: 'true'\n"
                        f"    sandbox: {no}\n")
        with pytest.raises(TaskFileError, match="only the host's config"):
            load_task(path)
    path.write_text("goal: g\nhooks:\n  - at: job_end\n    command: 'true'\n")
    record = task_record(load_task(path))
    record["hooks"][0]["sandbox"] = False  # a forged record from the bus
    assert task_from_record(record).hooks[0].sandbox is True


def test_a_task_hook_with_on_instead_of_at_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("goal: g\nhooks:\n  - on: job_end\n    command: 'true'\n")
    with pytest.raises(TaskFileError, match="at: required field is missing"):
        load_task(path)


def test_a_hook_bash_cannot_parse_is_a_config_error_not_a_refusal_at_every_call() -> None:
    with pytest.raises(ValueError, match="bash cannot parse it"):
        HookSettings.model_validate({"at": "before_tool", "command": "echo unbalanced )"})


def test_arguments_a_model_wrote_oddly_reach_the_hook_and_crash_nothing(tmp_path: Path) -> None:
    made, _ = hooks(tmp_path, {"at": "before_tool", "name": "audit",
                               "command": "cat > got.json"})
    assert before(made, command="echo \ud800 ✓ \x1b[2J") is None
    got = json.loads((tmp_path / "got.json").read_text())
    assert got["arguments"]["command"] == "echo \ud800 ✓ \x1b[2J"
