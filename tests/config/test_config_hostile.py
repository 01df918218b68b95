"""Task and config files written to hurt: alias bombs, huge files, thousands of problems, huge
values and keys, workspaces no job may have, numbers past any sense. Each is refused quickly,
with a message that stays short whatever the file holds, naming the limit it broke."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.config.task_schema import MAX_TURNS
from gliding.config.workspace_rule import workspace_refusal
from gliding.config.yamlsource import (
    MAX_PROBLEMS,
    MAX_YAML_NODES,
    USER_FILE_MAX_BYTES,
    load_yaml_with_lines,
)
from gliding.errors import ConfigError, TaskFileError

SHORT = 1000  # characters: no message about one of these files needs more


def alias_bomb(levels: int = 6, width: int = 9) -> str:
    """``width ** levels`` strings (531441 by default) from a few hundred bytes of YAML."""
    text = "a0: &a0 [" + ", ".join(["x"] * width) + "]\n"
    for level in range(1, levels + 1):
        text += f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]\n"
    return text


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def refused(exc: pytest.ExceptionInfo[Exception], *expected: str) -> str:
    message = str(exc.value)
    assert len(message) < SHORT, message[:2000]
    for text in expected:
        assert text in message, message
    return message


# --- aliases, size, number of problems ---------------------------------------------------------


def test_an_alias_bomb_in_a_task_file_is_refused_before_it_expands(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert len(bomb) < 1024
    path = write(tmp_path / "task.yaml", f"goal: x\n{bomb}checks: *a6\n")

    with pytest.raises(TaskFileError) as exc:  # expanded, it would exhaust memory or time
        load_task(path)

    refused(exc, "task.yaml:7:", f"expands to more than {MAX_YAML_NODES} values")


def test_an_alias_bomb_in_a_config_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "config.yaml", f"{alias_bomb()}tools:\n  env_allow: *a6\n")

    with pytest.raises(ConfigError) as exc:
        load_settings(path, env={})

    refused(exc, "config.yaml:6:", "expands to more than")  # a5, the first past the limit


def test_a_few_aliases_are_still_fine() -> None:
    data, _ = load_yaml_with_lines("a: &x [1, 2]\nb: *x\nc: *x\n", "t.yaml", error=ConfigError)
    assert data == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


@pytest.mark.parametrize("kind", ["task", "config"])
def test_a_file_past_the_size_limit_is_refused_naming_the_limit(tmp_path: Path,
                                                                kind: str) -> None:
    path = write(tmp_path / f"{kind}.yaml", "goal: x\n# " + "x" * USER_FILE_MAX_BYTES + "\n")

    with pytest.raises(TaskFileError if kind == "task" else ConfigError) as exc:
        load_task(path) if kind == "task" else load_settings(path, env={})

    refused(exc, f"the {kind} file is too large ({path.stat().st_size} bytes)",
            f"may be at most 256 KiB ({USER_FILE_MAX_BYTES} bytes)")


def test_an_endless_config_file_is_refused_without_reading_it_all() -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(Path("/dev/zero"), env={})

    refused(exc, "/dev/zero: is a device, not a regular file: not a config file")


def test_thousands_of_unknown_keys_give_a_bounded_message(tmp_path: Path) -> None:
    keys = 5000
    path = write(tmp_path / "task.yaml", "goal: x\n" + "".join(f"k{i}: v\n" for i in range(keys)))

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    lines = str(exc.value).splitlines()
    assert len(lines) == MAX_PROBLEMS + 2  # the problems, "... and N more", the hint
    assert lines[0].endswith("task.yaml:2: k0: unknown field 'k0' "
                             "(fields: goal, workspace, model, pipeline, budgets, checks, "
                             "network, mcp_servers, tool_groups, venv, mounts, git_writes, hooks, "
                             "approvals)")
    assert lines[MAX_PROBLEMS] == f"... and {keys - MAX_PROBLEMS} more problems"


def test_thousands_of_bad_settings_give_a_bounded_message(tmp_path: Path) -> None:
    env = {"GLIDING_LLM__LOCAL__N_CTX": "1", "GLIDING_LLM__TIMEOUT_S": "-1"}
    path = write(tmp_path / "config.yaml",
                 "tools:\n  env_allow: [" + ", ".join(["[1]"] * 3000) + "]\n")

    with pytest.raises(ConfigError) as exc:
        load_settings(path, env=env)

    lines = str(exc.value).splitlines()
    assert len(lines) == MAX_PROBLEMS + 2
    assert lines[MAX_PROBLEMS] == f"... and {3000 - MAX_PROBLEMS} more problems"


@pytest.mark.parametrize(("text", "size"), [
    pytest.param("goal: x\npipeline: '{big}'\n", 100_000, id="huge_value"),
    pytest.param("goal: x\nchecks:\n  - ['{big}']\n", 100_000, id="huge_check"),
    pytest.param("goal: !!int '{big}'\n", 100_000, id="huge_bad_scalar"),
    # YAML keys stop at 1024 characters
    pytest.param("goal: x\n'{big}': 1\n", 1000, id="long_unknown_key"),
    pytest.param("goal: x\nbudgets:\n  turns: {{'{big}': 1}}\n", 1000, id="long_role"),
    pytest.param("goal: x\n'{big}': 1\n'{big}': 2\n", 1000, id="long_duplicate_key"),
])
def test_a_huge_value_or_key_is_clipped_in_the_message(tmp_path: Path, text: str,
                                                       size: int) -> None:
    path = write(tmp_path / "task.yaml", text.format(big="y" * size))

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    message = refused(exc, "task.yaml:")
    assert "yyy..." in message


def test_a_huge_environment_value_is_clipped_in_the_message() -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(None, env={"GLIDING_LOG_LEVEL": "z" * 100_000})

    refused(exc, "environment variable GLIDING_LOG_LEVEL='zzz", "...")


# --- workspaces no job may have ----------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home" / "user"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize(("workspace", "reason"), [
    ("/", "the root directory"),
    ("/etc", "a system directory (/etc)"),
    ("/usr/share/doc", "inside the system directory /usr"),
    ("/proc/self", "inside the system directory /proc"),
    ("/tmp", "a directory shared by everyone's files"),
    ("/home", "a directory shared by everyone's files"),
    ("'~'", "the home directory"),  # quoted: a bare ~ is YAML's null (the default)
    ("~/..", "a directory that holds the home directory"),
])
def test_a_dangerous_workspace_is_refused(tmp_path: Path, home: Path, workspace: str,
                                          reason: str) -> None:
    path = write(tmp_path / "task.yaml", f"goal: x\nworkspace: {workspace}\n")

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    refused(exc, "task.yaml:2: workspace: ", reason, "give the job a directory")
    assert str(exc.value).count("\n") == 1  # the message and its hint


def test_a_symlink_to_a_system_directory_is_refused(tmp_path: Path, home: Path) -> None:
    (tmp_path / "ws").symlink_to("/etc")
    path = write(tmp_path / "task.yaml", "goal: x\nworkspace: ws\n")

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    refused(exc, "workspace: 'ws' is /etc, a system directory (/etc)")


def test_a_symlink_to_the_home_directory_is_refused(tmp_path: Path, home: Path) -> None:
    (tmp_path / "ws").symlink_to(home)
    path = write(tmp_path / "task.yaml", "goal: x\nworkspace: ws\n")

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    refused(exc, f"is {home}, the home directory")


def test_a_directory_of_its_own_is_fine(tmp_path: Path, home: Path) -> None:
    inside_home = home / "projects" / "ws"
    for workspace in ("ws", str(inside_home), "/tmp/gliding-ws-test/x"):
        task = load_task(write(tmp_path / "task.yaml", f"goal: x\nworkspace: {workspace}\n"))
        assert task.workspace == (tmp_path / workspace).resolve()


def test_the_data_directory_is_no_workspace_but_may_lie_inside_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert workspace_refusal(data, home=Path("/nowhere"), data_dir=data) == (
        f"inside the data directory {data}, where the job archives are")
    assert workspace_refusal(data / "jobs" / "x", home=Path("/nowhere"), data_dir=data)
    assert workspace_refusal(tmp_path, home=Path("/nowhere"), data_dir=data) is None


# --- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("budgets", "expected"), [
    ("turns: 1000000000", f"budgets.turns: must be from 1 to {MAX_TURNS}"),
    ("turns: {DA: 1000000000}", "budgets.turns.DA: Input should be less than or equal to"),
    ("wall_time_s: 1.0e+300", "budgets.wall_time_s: Input should be less than or equal to"),
    ("wall_time_s: .inf", "budgets.wall_time_s: Input should be a finite number"),
    ("wall_time_s: .nan", "budgets.wall_time_s: Input should be a finite number"),
    ("prompt_tokens: 100000000000000000000", "budgets.prompt_tokens: "),
    ("cost_usd: {DA: .inf}", "budgets.cost_usd: DA: Input should be a finite number"),
])
def test_a_budget_past_any_sense_is_refused(tmp_path: Path, budgets: str, expected: str) -> None:
    path = write(tmp_path / "task.yaml", f"goal: x\nbudgets:\n  {budgets}\n")

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    refused(exc, expected)


@pytest.mark.parametrize("timeout", [".inf", ".nan", "1.0e+12", "-1"])
def test_a_check_timeout_past_any_sense_is_refused(tmp_path: Path, timeout: str) -> None:
    path = write(tmp_path / "task.yaml",
                 f"goal: x\nchecks:\n  - command: {{run: 'true', timeout_s: {timeout}}}\n")

    with pytest.raises(TaskFileError) as exc:
        load_task(path)

    refused(exc, "checks[0].command.timeout_s: ")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("tools.bash.timeout_s", ".inf", "Input should be a finite number, got inf"),
    ("tools.bash.timeout_s", ".nan", "Input should be a finite number, got nan"),
    ("tools.bash.timeout_s", "1.0e+9", "Input should be less than or equal to 86400"),
    ("tools.bash.max_output_bytes", "1.0e+12", "Input should be less than or equal to"),
    ("llm.timeout_s", ".inf", "Input should be a finite number"),
    ("llm.local.n_threads", "4096", "Input should be less than or equal to 512, got 4096"),
    ("llm.local.n_ctx", "1000000000", "Input should be less than or equal to"),
    ("llm.local.seed", "-5", "Input should be greater than or equal to 0"),
    ("context.window.high_water", ".nan", "Input should be a finite number"),
    ("context.summaries.w_recency", ".inf", "Input should be less than or equal to 1000"),
    ("scheduler.max_cycles", "1000000", "Input should be less than or equal to 100"),
    ("memory.recall.budget_tokens", "1.0e+15", "Input should be less than or equal to"),
])
def test_a_setting_past_any_sense_is_refused(tmp_path: Path, key: str, value: str,
                                             expected: str) -> None:
    *sections, leaf = key.split(".")
    text = "".join(f"{'  ' * i}{name}:\n" for i, name in enumerate(sections))
    path = write(tmp_path / "config.yaml", f"{text}{'  ' * len(sections)}{leaf}: {value}\n")

    with pytest.raises(ConfigError) as exc:
        load_settings(path, env={})

    refused(exc, f"config.yaml:{len(sections) + 1}: {key}: {expected}")


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_an_infinite_setting_from_the_environment_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="GLIDING_TOOLS__BASH__TIMEOUT_S.*finite number"):
        load_settings(None, env={"GLIDING_TOOLS__BASH__TIMEOUT_S": value})
