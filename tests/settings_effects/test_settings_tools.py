"""tools.*: each key, set through GLIDING_* variables, changes what a tool called inside a job
returns (read back from the job's archive); the default is the control."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import Settings
from gliding.daemon.compose import run_job
from gliding.errors import TaskFileError
from gliding.testing import ScriptedLLM, call
from gliding.tools.shell import run_command
from tests.settings_effects.effects_support import run_one_tool, settings_from, write_task

DEFAULTS = Settings().tools


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workspace").mkdir()
    return tmp_path


# --- tools.read_page_lines --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "header", "more"),
    [
        ({}, "lines.txt lines 1-30 of 30\n", None),
        ({"GLIDING_TOOLS__READ_PAGE_LINES": "7"}, "lines.txt lines 1-7 of 30\n",
         "... 23 more lines; call read_file with offset=8"),
    ],
    ids=["default", "7"],
)
def test_read_page_lines_sets_the_page_read_file_returns(
    tmp: Path, env: dict[str, str], header: str, more: str | None
) -> None:
    (tmp / "workspace" / "lines.txt").write_text(
        "".join(f"line {i}\n" for i in range(1, 31)), encoding="utf-8")
    settings = settings_from(tmp, env)

    output = run_one_tool(tmp, settings, "read_file", path="lines.txt")

    assert output.startswith(header)
    shown = [line for line in output.splitlines() if line.startswith("line ")]
    if more is None:
        assert len(shown) == 30 <= DEFAULTS.read_page_lines
    else:
        assert shown == [f"line {i}" for i in range(1, 8)]
        assert output.endswith(more)


# --- tools.grep_max_matches -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "shown"),
    [({}, 20), ({"GLIDING_TOOLS__GREP_MAX_MATCHES": "3"}, 3)],
    ids=["default", "3"],
)
def test_grep_max_matches_caps_the_matches_grep_returns(
    tmp: Path, env: dict[str, str], shown: int
) -> None:
    (tmp / "workspace" / "m.txt").write_text(
        "".join(f"match {i}\nother\n" for i in range(20)), encoding="utf-8")
    settings = settings_from(tmp, env)

    output = run_one_tool(tmp, settings, "grep", pattern="^match")

    lines = output.splitlines()
    assert [line for line in lines if line.startswith("m.txt:")] == [
        f"m.txt:{2 * i + 1}:match {i}" for i in range(shown)]
    if shown < 20:
        assert lines[-1] == (
            f"... {20 - shown} more matches not shown; narrow the pattern, path or glob")
    else:
        assert DEFAULTS.grep_max_matches >= 20


# --- tools.env_allow --------------------------------------------------------------------------

PROBE = 'echo "probe=${GLIDE_PROBE:-unset} home=${HOME:-unset} token=${GLIDE_TOKEN:-unset}"'


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "probe=unset home=/tmp token=unset"),
        ({"GLIDING_TOOLS__ENV_ALLOW": "PATH,GLIDE_PROBE,GLIDE_TOKEN"},
         "probe=probe-value home=/tmp token=unset"),
        # unconfined, HOME is the user's when env_allow lists it; in the sandbox it is its /tmp
        ({"GLIDING_TOOLS__ENV_ALLOW": "PATH,GLIDE_PROBE", "GLIDING_TOOLS__SANDBOX": "off"},
         "probe=probe-value home=unset token=unset"),
        ({"GLIDING_TOOLS__ENV_ALLOW": "PATH,HOME,GLIDE_PROBE", "GLIDING_TOOLS__SANDBOX": "off"},
         "probe=probe-value home={home} token=unset"),
    ],
    ids=["default", "probe", "probe_without_home_unconfined", "probe_and_home_unconfined"],
)
def test_env_allow_is_the_list_of_variables_bash_sees(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    monkeypatch.setenv("GLIDE_PROBE", "probe-value")
    monkeypatch.setenv("GLIDE_TOKEN", "s3cret")  # looks like a secret: never passed on
    monkeypatch.setenv("HOME", str(tmp))
    settings = settings_from(tmp, env)

    output = run_one_tool(tmp, settings, "bash", command=PROBE)

    assert output.splitlines() == ["exit code 0", expected.format(home=tmp)]


# --- tools.allow_home_dot_workspaces ---------------------------------------------------------


@pytest.mark.parametrize("value", [None, "true"], ids=["default", "true"])
def test_allow_home_dot_workspaces_admits_a_workspace_in_a_home_dot_directory(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    home = tmp / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    env = {} if value is None else {"GLIDING_TOOLS__ALLOW_HOME_DOT_WORKSPACES": value}
    settings = settings_from(tmp, env)
    task = write_task(tmp, "goal: Write a.txt\npipeline: [DA]\nworkspace: ~/.config/app\n")
    llm = ScriptedLLM({"DA": [call("write_file", path="a.txt", content="hi"),
                              call("finish", summary="done")]})

    if value is None:
        with pytest.raises(TaskFileError, match="inside .*/home/.config, a dot-directory"):
            anyio.run(lambda: run_job(task, settings, llm=llm))
        assert not (home / ".config" / "app").exists() and not (tmp / "data").exists()
        assert DEFAULTS.allow_home_dot_workspaces is False
    else:
        handle = anyio.run(lambda: run_job(task, settings, llm=llm))
        assert handle.report is not None and handle.report.outcome == "success"
        assert (home / ".config" / "app" / "a.txt").read_text(encoding="utf-8") == "hi"


# --- tools.sandbox, tools.network, tools.limits.* ---------------------------------------------

HOST_VIEW = ("test -r /etc/shadow && echo shadow=readable || echo shadow=hidden; "
             "test -d /root && echo root=there || echo root=hidden")


@pytest.mark.parametrize(("value", "expected"),
                         [(None, "shadow=hidden\nroot=hidden"),
                          ("off", "shadow=readable\nroot=there")], ids=["default", "off"])
def test_sandbox_decides_whether_a_command_sees_the_host(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    # no toolchain from the home (a pyenv under /root would be mounted: test_toolchain.py)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    env = {} if value is None else {"GLIDING_TOOLS__SANDBOX": value}
    settings = settings_from(tmp, env)
    assert os.geteuid() == 0 and os.access("/etc/shadow", os.R_OK)  # the host has them

    output = run_one_tool(tmp, settings, "bash", command=HOST_VIEW)

    assert output == "exit code 0\n" + expected
    assert DEFAULTS.sandbox == "bwrap"


def _connect(port: int) -> str:
    return (f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), "
            "timeout=3); print(\"connected\")' 2>&1 | tail -1")


@pytest.mark.parametrize("value", [None, "true"], ids=["default", "true"])
def test_network_lets_a_sandboxed_command_connect(tmp: Path, value: str | None) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__NETWORK": value}
    settings = settings_from(tmp, env)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        output = run_one_tool(tmp, settings, "bash", command=_connect(port))

    if value is None:
        assert DEFAULTS.network is False
        assert "Connection refused" in output  # its own network namespace: no host loopback
    else:
        assert output.endswith("connected")


@pytest.mark.parametrize("value", [None, "1"], ids=["default", "1"])
def test_limits_cpu_s_kills_a_process_past_its_cpu_seconds(tmp: Path, value: str | None) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__LIMITS__CPU_S": value}
    settings = settings_from(tmp, env)
    spin = "timeout 3 python3 -c 'while True: pass'; echo status=$?"

    output = run_one_tool(tmp, settings, "bash", command=spin)

    if value is None:
        assert DEFAULTS.limits.cpu_s > 3
        assert output.endswith("status=124")  # timeout(1) stopped it first
    else:
        # the CPU limit killed it (SIGKILL, as soft and hard limit are one) well before 3 s
        assert output.endswith("status=137") and "Killed" in output


@pytest.mark.parametrize("value", [None, "200"], ids=["default", "200"])
def test_limits_memory_mb_bounds_what_a_process_may_allocate(
    tmp: Path, value: str | None
) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__LIMITS__MEMORY_MB": value}
    settings = settings_from(tmp, env)
    grab = ("python3 -c 'b = bytearray(400 * 1024 * 1024); print(\"allocated\")' 2>&1 "
            "| tail -1")

    output = run_one_tool(tmp, settings, "bash", command=grab)

    if value is None:
        assert DEFAULTS.limits.memory_mb > 400
        assert output.endswith("allocated")
    else:
        assert output.endswith("MemoryError")


@pytest.mark.parametrize("value", [None, "20"], ids=["default", "20"])
def test_limits_processes_bounds_how_many_a_command_runs_at_once(
    tmp: Path, value: str | None
) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__LIMITS__PROCESSES": value}
    settings = settings_from(tmp, env)
    many = ("python3 -c '\n"
            "import os, time\n"
            "n = 0\n"
            "for _ in range(40):\n"
            "    try:\n"
            "        pid = os.fork()\n"
            "    except OSError:\n"
            "        break\n"
            "    if pid == 0:\n"
            "        time.sleep(2); os._exit(0)\n"
            "    n += 1\n"
            "print(\"forked\", n)'")

    output = run_one_tool(tmp, settings, "bash", command=many)

    forked = int(output.splitlines()[-1].split()[-1])
    if value is None:
        assert DEFAULTS.limits.processes > 45
        assert forked == 40
    else:
        assert forked < 20  # the command's own processes count too: a fork past 20 fails


@pytest.mark.parametrize("value", [None, "1"], ids=["default", "1"])
def test_limits_file_size_mb_bounds_the_files_a_command_writes(
    tmp: Path, value: str | None
) -> None:
    env = {} if value is None else {"GLIDING_TOOLS__LIMITS__FILE_SIZE_MB": value}
    settings = settings_from(tmp, env)
    write = "head -c 3000000 /dev/zero > big.bin; echo status=$?; stat -c %s big.bin"

    output = run_one_tool(tmp, settings, "bash", command=write)

    size = int(output.splitlines()[-1])
    if value is None:
        assert DEFAULTS.limits.file_size_mb > 3
        assert size == 3_000_000
    else:
        assert size == 1024 * 1024
        assert "status=153" in output  # 128 + SIGXFSZ


# --- tools.bash.timeout_s ---------------------------------------------------------------------


def test_bash_timeout_s_kills_a_slow_command(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_TOOLS__BASH__TIMEOUT_S": "0.5"})
    assert DEFAULTS.bash.timeout_s > 5

    output = run_one_tool(tmp, settings, "bash", command="echo begun; sleep 5; echo finished")

    # killed by the 0.5 s timeout: "finished" (after the 5 s sleep) never came
    assert output.splitlines() == ["killed after 0.5s timeout", "begun"]


def test_bash_timeout_s_lets_a_command_that_is_fast_enough_finish(tmp: Path) -> None:
    settings = settings_from(tmp, {"GLIDING_TOOLS__BASH__TIMEOUT_S": "5"})

    output = run_one_tool(tmp, settings, "bash", command="sleep 0.7; echo finished")

    assert output.splitlines() == ["exit code 0", "finished"]


# --- tools.read_page_chars -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "kept"),
    [({}, 5000), ({"GLIDING_TOOLS__READ_PAGE_CHARS": "2048"}, 2048)],
    ids=["default", "2048"],
)
def test_read_page_chars_bounds_the_page_and_lines_are_whole_below_it(
        tmp: Path, env: dict[str, str], kept: int) -> None:
    (tmp / "workspace" / "wide.txt").write_text("w" * 5000 + "\n", encoding="utf-8")
    settings = settings_from(tmp, env)
    assert DEFAULTS.read_page_chars > 5000

    output = run_one_tool(tmp, settings, "read_file", path="wide.txt")

    lines = output.splitlines()
    assert lines[0] == "wide.txt lines 1-1 of 1"
    assert lines[1] == "w" * kept
    if kept < 5000:
        assert lines[2].startswith("[page size reached (tools.read_page_chars = 2048) in line 1:")
    else:
        assert lines[2:] == []


# --- tools.bash.max_output_bytes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "spilled"),
    [({}, False), ({"GLIDING_TOOLS__BASH__MAX_OUTPUT_BYTES": "300"}, True)],
    ids=["default", "300"],
)
def test_bash_max_output_bytes_is_what_stays_in_memory(tmp: Path, env: dict[str, str],
                                                        spilled: bool) -> None:
    settings = settings_from(tmp, env)
    assert DEFAULTS.bash.max_output_bytes > 5000
    command = "head -c 5000 /dev/zero | tr '\\0' a"

    result = anyio.run(lambda: run_command(command, tmp, settings.tools))

    assert result.spilled is spilled
    assert result.output == "a" * 5000  # kept whole either way


# --- tools.bash.archive_max_bytes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "kept"),
    [({}, 5000), ({"GLIDING_TOOLS__BASH__MAX_OUTPUT_BYTES": "1024",
                   "GLIDING_TOOLS__BASH__ARCHIVE_MAX_BYTES": "2048"}, 2048)],
    ids=["default", "2048"],
)
def test_bash_archive_max_bytes_bounds_the_kept_output(tmp: Path, env: dict[str, str],
                                                       kept: int) -> None:
    settings = settings_from(tmp, env)

    output = run_one_tool(tmp, settings, "bash", command="head -c 5000 /dev/zero | tr '\\0' a")

    lines = output.splitlines()
    assert lines[1] == "a" * kept
    if kept < 5000:
        assert lines[0] == "killed after more than 2048 bytes of output"
        assert "(tools.bash.archive_max_bytes)" in lines[2]
    else:
        assert lines[0] == "exit code 0" and lines[2:] == []
