"""hooks.*: the host's hooks run at their points of a real (scripted) job, in the sandbox; a
before_tool hook that exits 2 refuses the call and the agent reads why; a task's hooks run only
where hooks.allow_task says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gliding.testing import call
from tests.settings_effects.effects_support import run_scripted, settings_from, write_task

LOG = "hooks.log"
# each hook appends what it got to hooks.log: "<point> <tool or status or outcome>"
NOTE = ("python3 -c 'import json,sys; d=json.load(sys.stdin); "
        "print(d[\"hook\"], d.get(\"tool\") or d.get(\"status\") or d.get(\"outcome\"))' "
        f">> {LOG}")
REFUSE_RM = ("if grep -q 'rm -rf'; then echo 'no removing: ask a person' >&2; exit 2; fi")


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


def script() -> dict[str, list]:
    return {"DA": [call("bash", command="echo kept > kept.txt"),
                   call("bash", command="rm -rf kept.txt"),
                   call("finish", summary="tried")]}


def test_run_hooks_run_at_their_points_and_a_before_tool_hook_refuses_a_call(tmp: Path) -> None:
    hooks = [{"at": "before_tool", "tools": ["bash"], "command": REFUSE_RM},
             {"at": "after_tool", "command": NOTE},
             {"at": "role_end", "command": NOTE},
             {"at": "job_end", "command": NOTE}]
    settings = settings_from(tmp, {"GLIDING_HOOKS__RUN": json.dumps(hooks)})
    task = write_task(tmp, "goal: Keep kept.txt\npipeline: [DA]\n")
    job = run_scripted(task, settings, script())
    assert job.handle.report.outcome == "success", job.handle.report
    workspace = tmp / "workspace"
    assert (workspace / "kept.txt").read_text() == "kept\n"  # the rm never ran
    # the agent read why on its next turn, as the tool's error
    last = job.llm.requests[-1].messages[-1].content
    assert "refused by a hook: no removing: ask a person" in last
    refused = [e for e in job.events if e.event == "hook.refused"]
    assert [(e.data["tool"], e.data["reason"]) for e in refused] == [
        ("bash", "no removing: ask a person")]
    # after_tool ran for the call that ran, not the refused one (finish is no tool call)
    assert (workspace / LOG).read_text().splitlines() == [
        "after_tool bash", "role_end finished", "job_end success"]


def test_run_default_has_no_hooks_and_the_call_runs(tmp: Path) -> None:
    settings = settings_from(tmp)
    task = write_task(tmp, "goal: Keep kept.txt\npipeline: [DA]\n")
    job = run_scripted(task, settings, script())
    assert not (tmp / "workspace" / "kept.txt").exists()  # removed: nothing stood in the way
    assert not [e for e in job.events if e.event.startswith("hook.")]


TASK_WITH_HOOKS = f"""goal: Keep kept.txt
pipeline: [DA]
hooks:
  - at: before_tool
    tools: [bash]
    command: "{REFUSE_RM}"
"""


def test_allow_task_true_runs_a_task_files_hooks(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_HOOKS__ALLOW_TASK": "true"})
    job = run_scripted(write_task(tmp, TASK_WITH_HOOKS), settings, script())
    assert (tmp / "workspace" / "kept.txt").exists()
    assert [e.event for e in job.events if e.event.startswith("hook.")] == ["hook.refused"]


def test_allow_task_default_false_logs_a_task_files_hooks_and_runs_none(tmp: Path) -> None:
    settings = settings_from(tmp)
    with capture_logs() as logs:
        job = run_scripted(write_task(tmp, TASK_WITH_HOOKS), settings, script())
    assert not (tmp / "workspace" / "kept.txt").exists()
    assert not [e for e in job.events if e.event.startswith("hook.")]
    assert any(e["event"] == "hooks.task.refused" for e in logs)


def test_run_compaction_hooks_run_around_each_compaction(tmp: Path) -> None:
    """A small window compacts the DA's prompt as it works: each compaction has its
    before_compaction hook (the session's count so far) and its after_compaction hook."""
    mark = ("python3 -c 'import json,sys; d=json.load(sys.stdin); "
            "print(d[\"hook\"], d[\"compactions\"], d.get(\"prompt_tokens\", \"-\") != 0)' "
            f">> {LOG}")
    hooks = [{"at": "before_compaction", "command": mark},
             {"at": "after_compaction", "command": mark}]
    settings = settings_from(tmp, {"GLIDING_HOOKS__RUN": json.dumps(hooks),
                                   "GLIDING_CONTEXT__WINDOW__MAX_MESSAGES": "4",
                                   "GLIDING_CONTEXT__WINDOW__WHOLE_BELOW": "0"})
    task = write_task(tmp, "goal: Count to six\npipeline: [DA]\n")
    calls = [call("bash", command=f"echo {n} >> count.txt") for n in range(1, 7)]
    job = run_scripted(task, settings, {"DA": [*calls, call("finish", summary="counted")]})
    assert job.handle.report.outcome == "success", job.handle.report
    lines = (tmp / "workspace" / LOG).read_text().splitlines()
    assert lines and len(lines) % 2 == 0
    for n, (before, after) in enumerate(zip(lines[::2], lines[1::2], strict=True)):
        assert before == f"before_compaction {n} True" and after == f"after_compaction {n + 1} True"


def test_run_a_resumed_job_runs_no_hook_again_for_the_calls_it_replays(tmp: Path) -> None:
    """The job dies after DA's call ran (and its hooks), as DA's session ends; resumed, DA
    replays the call from the archive: its hooks do not run again, and the session's end
    runs role_end once."""
    import anyio

    from gliding.core.crashpoints import InjectedKill, armed
    from gliding.daemon.compose import resume_job, run_job
    from gliding.testing import ScriptedLLM

    settings = settings_from(tmp, {"GLIDING_HOOKS__RUN": json.dumps(
        [{"at": "before_tool", "command": NOTE.replace("print(d[", "print(\"B\", d[")},
         {"at": "after_tool", "command": NOTE}, {"at": "role_end", "command": NOTE}])})
    task = write_task(tmp, "goal: Keep kept.txt\npipeline: [DA]\n")
    replies = {"DA": [call("bash", command="echo kept >> kept.txt"),
                      call("finish", summary="kept")]}

    async def crash() -> str:
        with armed({"role.end:DA": 1}, kind=InjectedKill):
            try:
                await run_job(task, settings, llm=ScriptedLLM(replies))
            except BaseException as exc:  # noqa: B036, BLE001 - the stand-in for kill -9
                assert "injected kill" in repr(exc), exc
        [job] = [p.name for p in (tmp / "data" / "jobs").iterdir()]
        return job

    job = anyio.run(crash)
    handle = anyio.run(lambda: resume_job(job, settings, llm=ScriptedLLM(replies)))
    assert handle.report is not None and handle.report.outcome == "success"
    assert (tmp / "workspace" / "kept.txt").read_text() == "kept\n"  # ran once
    assert (tmp / "workspace" / LOG).read_text().splitlines() == [
        "B before_tool bash", "after_tool bash", "role_end finished"]
