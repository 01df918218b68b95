"""``run_command`` with real subprocesses: group kill, env filtering, output caps.

The tests that look at host pids or at files outside the workspace from inside the command
check the unconfined mode (``tools.sandbox: off``) and say so; tests/tools/test_sandbox.py
proves the same guarantees for the bubblewrap sandbox from the host side."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import BashSettings, ToolSettings
from gliding.errors import ToolError
from gliding.tools.base import ToolContext, ToolGroupManager, builtin_groups
from gliding.tools.shell import filtered_env, is_secret_name, run_command


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _settings(timeout_s: float = 10.0, cap: int = 32768, keep: int = 16 << 20,
              **kw: object) -> ToolSettings:
    return ToolSettings(bash=BashSettings(timeout_s=timeout_s, max_output_bytes=cap,
                                          archive_max_bytes=keep), **kw)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie waiting for a reaper no longer counts."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_all_dead(pids: list[int], within_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _pids(text: str) -> list[int]:
    return [int(line) for line in text.splitlines() if line.strip().isdigit()]


@pytest.mark.anyio
async def test_exit_code_and_merged_output(tmp_path: Path) -> None:
    result = await run_command("echo out; echo err >&2; exit 3", tmp_path, _settings())
    assert result.exit_code == 3
    assert result.render() == "exit code 3\nout\nerr"
    quiet = await run_command("true", tmp_path, _settings())
    assert quiet.render() == "exit code 0\n(no output)"


@pytest.mark.anyio
async def test_cwd_is_workspace_and_stdin_is_empty(tmp_path: Path) -> None:
    result = await run_command("pwd; cat; echo done", tmp_path, _settings(timeout_s=5))
    assert result.render() == f"exit code 0\n{os.path.realpath(tmp_path)}\ndone"


@pytest.mark.anyio
async def test_runaway_group_is_killed_with_children(tmp_path: Path) -> None:
    # unconfined, so the pids the command prints are host pids this test can watch
    command = (
        "sleep 1000 & echo $!\n"
        "bash -c 'sleep 1000 & echo $!; wait' &\n"
        "echo $!\n"
        "( sleep 1000 & echo $! )\n"  # double fork: the subshell exits, sleep is orphaned
        "sleep 1000\n"
    )
    result = await run_command(command, tmp_path, _settings(timeout_s=1, sandbox="off"))
    assert result.timed_out
    assert result.exit_code is None
    assert result.render().startswith("killed after 1s timeout\n")
    pids = _pids(result.output)
    assert len(pids) == 4, result.output
    assert _wait_all_dead(pids) == []


@pytest.mark.anyio
async def test_background_jobs_die_when_command_returns(tmp_path: Path) -> None:
    # unconfined: the printed pid is a host pid
    result = await run_command("sleep 1000 & echo $!", tmp_path,
                                _settings(timeout_s=20, sandbox="off"))
    # returned with the shell: waiting for the background job would end in the 20 s timeout
    assert result.exit_code == 0 and not result.timed_out
    pids = _pids(result.output)
    assert len(pids) == 1
    assert _wait_all_dead(pids) == []


@pytest.mark.anyio
async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    # unconfined: the pids written to the file are host pids
    command = "sleep 1000 & echo $! > pids; bash -c 'sleep 1000' & echo $! >> pids; wait"
    with anyio.move_on_after(1) as scope:
        await run_command(command, tmp_path, _settings(timeout_s=60, sandbox="off"))
    assert scope.cancelled_caught
    pids = _pids((tmp_path / "pids").read_text())
    assert len(pids) == 2
    assert _wait_all_dead(pids) == []


@pytest.mark.anyio
async def test_secrets_are_not_inherited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak-1")
    monkeypatch.setenv("MY_SECRET_TOKEN", "leak-2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-3")
    monkeypatch.setenv("GITHUB_TOKEN", "leak-4")
    monkeypatch.setenv("HARMLESS_VAR", "fine")
    monkeypatch.setenv("NOT_ALLOWED", "unlisted")
    settings = _settings(
        env_allow=("PATH", "HOME", "HARMLESS_VAR", "OPENAI_API_KEY", "MY_SECRET_TOKEN")
    )
    result = await run_command("env", tmp_path, settings)
    assert result.exit_code == 0
    for leak in ("sk-leak-1", "leak-2", "leak-3", "leak-4", "OPENAI", "SECRET", "unlisted"):
        assert leak not in result.output
    names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert "PATH" in names
    assert "HARMLESS_VAR" in names


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("anthropic_api_key", True),
        ("SSH_KEY", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PATH", False),
        ("HOME", False),
        ("KEYBOARD_LAYOUT", False),
        ("LANG", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_filtered_env_defaults_path() -> None:
    assert filtered_env(("HOME", "X_TOKEN"), {"HOME": "/h", "X_TOKEN": "t", "Y": "y"}) == {
        "HOME": "/h",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }


@pytest.mark.anyio
async def test_output_past_the_memory_cap_is_kept_whole_on_disk(tmp_path: Path) -> None:
    command = "for i in $(seq 1 5000); do echo line-$i; done"
    result = await run_command(command, tmp_path, _settings(cap=1000))
    assert result.exit_code == 0 and result.spilled
    assert result.output.splitlines() == [f"line-{i}" for i in range(1, 5001)]
    assert result.cut_bytes == 0
    assert "cap" not in result.render()


@pytest.mark.anyio
async def test_output_past_the_archive_cap_is_killed_and_counted(tmp_path: Path) -> None:
    result = await run_command("yes | head -c 50000", tmp_path, _settings(cap=1000, keep=20000))
    assert len(result.output) == 20000
    assert result.flooded and result.exit_code is None
    assert result.cut_bytes == 50000 - 20000 or result.cut_bytes > 0  # killed mid-stream
    assert "(tools.bash.archive_max_bytes)" in result.render()


@pytest.mark.anyio
async def test_flooding_output_is_killed_in_bounded_time(tmp_path: Path) -> None:
    result = await run_command("yes", tmp_path, _settings(timeout_s=30, cap=1024, keep=102400))
    assert result.flooded and not result.timed_out  # the output cap ended it, not the timeout
    assert len(result.output) == 102400
    assert result.cut_bytes > 0
    text = result.render()
    assert text.startswith("killed after more than 102400 bytes of output\ny\ny\n")
    assert f"{result.cut_bytes} more bytes not kept]" in text


@pytest.mark.anyio
async def test_huge_output_within_timeout_is_bounded(tmp_path: Path) -> None:
    result = await run_command(
        "yes | head -c 50000000", tmp_path, _settings(timeout_s=2, cap=4096, keep=1 << 20)
    )
    assert result.timed_out or result.flooded
    assert len(result.output) <= 1 << 20


def test_memory_cap_above_the_archive_cap_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="must not exceed archive_max_bytes"):
        BashSettings(max_output_bytes=1 << 20, archive_max_bytes=1 << 10)


@pytest.mark.anyio
async def test_missing_workspace_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await run_command("true", tmp_path / "gone", _settings())


@pytest.mark.anyio
async def test_bash_tool_failure_is_ok_outcome(tmp_path: Path) -> None:
    toolset = ToolGroupManager(builtin_groups()).toolset(["exec"])
    ctx = ToolContext(tmp_path, _settings())
    outcome = await toolset.call("bash", {"command": "echo nope; exit 2"}, ctx)
    assert outcome.ok
    assert outcome.output == "exit code 2\nnope"


def test_a_command_marks_that_it_began_before_it_runs(tmp_path: Path) -> None:
    # unconfined, so the command can see the mark outside the workspace; sandboxed it cannot
    # (test_sandbox.py)
    mark = tmp_path / "began"
    ws = tmp_path / "ws"
    ws.mkdir()
    result = anyio.run(lambda: run_command('ls ../began; echo "$0" "$1"', ws,
                                           _settings(sandbox="off"), began=mark))
    assert mark.exists()
    assert result.ok and result.output.startswith("../began")  # there when the command ran
    assert "/bin/bash" in result.output  # the command sees bash's own $0, not ours


def test_stop_orphan_kills_the_group_of_the_command_it_marked(tmp_path: Path) -> None:
    import subprocess

    from gliding.tools.shell import stop_orphan

    mark = tmp_path / "began"
    proc = subprocess.Popen(["/bin/bash", "-c", 'echo $$ > "$1" && exec /bin/bash -c "$0"',
                             "sleep 30 & sleep 30", str(mark)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop_orphan(mark)
        assert proc.wait(timeout=10) == -9
        assert not stop_orphan(mark)  # gone: nothing to stop
    finally:
        proc.kill()
        proc.wait()


def test_stop_orphan_leaves_a_pid_that_is_not_the_marked_session_alone(tmp_path: Path) -> None:
    from gliding.tools.shell import stop_orphan

    mark = tmp_path / "began"
    mark.write_text(str(os.getpid()))  # this test process: not a session leader it marked
    assert not stop_orphan(mark)
    mark.write_text("not a pid")
    assert not stop_orphan(mark)
