"""tools.toolchain.*: each key, set through GLIDING_* variables, changes what a sandboxed command
of a job finds (read back from the job's archive); the default is the control."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gliding.config.settings import Settings
from gliding.errors import TaskFileError
from gliding.testing import call
from gliding.tools.sandbox import bwrap_problem
from tests.settings_effects.effects_support import (
    run_one_tool,
    run_scripted,
    settings_from,
    write_task,
)

DEFAULTS = Settings().tools.toolchain


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared/note.txt").write_text("a note from the host\n")
    tools = tmp_path / "tools/bin"
    tools.mkdir(parents=True)
    (tools / "hello-tool").write_text('#!/bin/sh\necho "hello from the caller PATH"\n')
    (tools / "hello-tool").chmod(0o755 | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")  # what `gliding run` was called with
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    return tmp_path


@pytest.mark.parametrize(("value", "expected"), [
    (None, "exit code 0\nhello from the caller PATH"),
    ("false", "exit code 127\n/bin/bash: line 1: hello-tool: command not found")],
    ids=["default", "false"])
def test_toolchain_auto_mounts_what_the_callers_path_resolves_to(
        tmp: Path, value: str | None, expected: str) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__TOOLCHAIN__AUTO": value}
    output = run_one_tool(tmp, settings_from(tmp, env), "bash", command="hello-tool")
    assert output == expected
    assert DEFAULTS.auto is True


@pytest.mark.parametrize("value", [None, "shared"], ids=["default", "shared"])
def test_toolchain_mounts_are_read_only_paths_every_command_sees(
        tmp: Path, value: str | None) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__TOOLCHAIN__MOUNTS": str(tmp / value)}
    command = f"cat {tmp}/shared/note.txt; touch {tmp}/shared/x 2>/dev/null || echo read-only"
    output = run_one_tool(tmp, settings_from(tmp, env), "bash", command=command)
    if value is None:
        assert DEFAULTS.mounts == ()
        assert "No such file or directory" in output
    else:
        assert output.splitlines()[1:] == ["a note from the host", "read-only"]
    assert not (tmp / "shared/x").exists()


@pytest.mark.parametrize("value", [None, "shared"], ids=["default", "shared"])
def test_toolchain_allow_admits_a_tasks_mounts(tmp: Path, value: str | None) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__TOOLCHAIN__ALLOW": f"{tmp}/{value}"}
    task = write_task(tmp, "goal: Read the note\npipeline: [DA]\nmounts: [shared]\n")
    script = {"DA": [call("bash", command=f"cat {tmp}/shared/note.txt"),
                     call("finish", summary="read")]}
    if value is None:
        assert DEFAULTS.allow == ()
        with pytest.raises(TaskFileError, match=r"mounts\[0\]: .* is not allowed on this host"):
            run_scripted(task, settings_from(tmp, env), script)
        assert not (tmp / "data/jobs").exists() or not any((tmp / "data/jobs").iterdir())
    else:
        job = run_scripted(task, settings_from(tmp, env), script)
        assert job.results()[0] == "exit code 0\na note from the host"


@pytest.mark.skipif(bwrap_problem() is not None, reason="bubblewrap cannot run here")
def test_a_workspace_venv_a_past_job_planted_a_pth_in_never_runs_on_the_host(
        tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolchain is resolved on the host when a job starts: a venv inside the workspace
    (activated by the caller) is read as text, never run there; its base, outside, is what is
    asked and mounted, and the job's commands still run python from the venv."""
    venv = tmp / "workspace/.venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, timeout=120)
    monkeypatch.setenv("PATH", f"{venv}/bin:/usr/bin:/bin")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    marker = tmp / "ran-on-the-host"
    lib = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    plant = (f"echo \"import os; open('{marker}', 'a').write('pth ran')\" > .venv/{lib}/zz.pth"
             f" && rm .venv/bin/python3 && printf '#!/bin/sh\\necho ran >> {marker}\\n' "
             "> .venv/bin/python3 && chmod +x .venv/bin/python3 && echo planted")
    task = write_task(tmp, "goal: Run python\npipeline: [DA]\n")
    first = run_scripted(task, settings_from(tmp), {
        "DA": [call("bash", command=plant), call("finish", summary="planted")]})
    assert first.results()[0] == "exit code 0\nplanted"

    second = run_scripted(task, settings_from(tmp), {
        "DA": [call("bash", command="python -c 'import sys; print(sys.prefix)' 2>/dev/null"),
               call("finish", summary="ran")]})

    assert not marker.exists()  # neither at the job's start on the host nor in the sandbox
    assert second.results()[0] == f"exit code 0\n{os.path.realpath(venv)}"
