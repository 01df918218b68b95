"""``gliding`` on bad input: one ``error:`` line (plus hint), the right exit code, no
traceback, and nothing written: no data dir, no workspace, no archive.

Exit codes (gliding/cli/common.py): 2 for a bad task file, config or IRI; 3 for a job or item the
archive does not hold. Most cases run the app in process (``invoke``); the ``console_script``
tests run the installed script, so that exit codes 2 and 3, a click usage error and ``--help``
are proven for a real process too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gliding import __version__
from tests.cli.cli_support import CLIResult, invoke, run_cli, tree
from tests.config.malformed_cases import MALFORMED_TASKS

VALID_TASK = "goal: Create hello.txt\n"


def assert_usage_error(result: CLIResult, *expected: str) -> None:
    assert result.code == 2, result
    assert result.stderr.startswith("error: "), result
    assert "Traceback" not in result.stderr, result
    assert result.stdout == b"", result
    for text in expected:
        assert text in result.stderr, result


def run_in(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> CLIResult:
    return invoke(list(args), cwd=tmp_path, env=env)


# --- task files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [pytest.param(text, expected, id=case) for case, text, expected in MALFORMED_TASKS],
)
def test_malformed_task_file_is_exit_2_and_writes_nothing(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    # The table's messages name the file as "task.yaml": pass it relative, from its directory.
    (tmp_path / "task.yaml").write_text(yaml_text, encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "data", "-q")

    assert_usage_error(result, expected)
    assert tree(tmp_path) == {"task.yaml"}  # no data dir, no workspace, no archive


@pytest.mark.parametrize("cli", [invoke, run_cli], ids=["in_process", "console_script"])
def test_missing_task_file_is_exit_2(tmp_path: Path, cli: Callable[..., CLIResult]) -> None:
    result = cli(["run", "nope.yaml", "--data-dir", "data"], cwd=tmp_path)

    assert_usage_error(result, "nope.yaml: task file not found")
    assert tree(tmp_path) == set()


def test_task_path_that_is_a_directory_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()

    result = run_in(tmp_path, "run", "tasks", "--data-dir", "data")

    assert_usage_error(result, "tasks: is a directory, not a task file")
    assert tree(tmp_path) == {"tasks"}


def test_task_file_that_is_not_utf8_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_bytes(b"goal: caf\xe9\n")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "data")

    assert_usage_error(result, "task.yaml:1: the task file is not UTF-8 text")
    assert tree(tmp_path) == {"task.yaml"}


def test_scripted_model_on_the_command_line_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--model", "scripted", "--data-dir", "data")

    assert_usage_error(result, "the scripted model needs its replies file", "hint: ")
    assert tree(tmp_path) == {"task.yaml"}


@pytest.mark.parametrize(("replies", "expected"), [
    ("DA: [{write_file: {path: a}}, {finish: [1, 2]}]\n",
     "replies.yaml:1: DA reply 2: the arguments of 'finish' must be a mapping"),
    ("PA:\n  - finish: {steps: [a]}\nXX:\n  - text: hi\n", "replies.yaml:3: unknown role 'XX'"),
    ("DA:\n  - {a: 1, b: 2}\n", "replies.yaml:2: DA reply 1: a reply is one mapping"),
    ("- just a list\n", "replies.yaml:1: not a replies file: a replies file maps roles"),
    ("DA: [\n", "replies.yaml"),
    ("DA:\n  - write_file: {path: a, content: 2024-01-01}\n",
     "replies.yaml:2: DA reply 1: the arguments of 'write_file' hold a date"),
    ("DA:\n  - write_file: {path: a, content: .nan}\n",
     "replies.yaml:2: DA reply 1: the arguments of 'write_file' hold nan"),
    ("DA:\n  - write_file: {3: y}\n",
     "replies.yaml:2: DA reply 1: the arguments of 'write_file' have a key that is not text"),
    ("latency_s: -1\nDA:\n  - finish: {summary: x}\n", "replies.yaml:1: latency_s must be"),
])
def test_a_bad_replies_file_is_exit_2_naming_its_line(tmp_path: Path, replies: str,
                                                      expected: str) -> None:
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(replies, encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--model", "scripted:replies.yaml",
                    "--data-dir", "data")

    assert_usage_error(result, expected)
    assert tree(tmp_path) == {"task.yaml", "replies.yaml"}


def test_workspace_below_a_file_is_exit_2_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(
        "goal: x\nworkspace: task.yaml/sub\nmodel: local:/nonexistent/m.gguf\n", encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "data", "-q")

    assert "Traceback" not in result.stderr
    assert_usage_error(result, "workspace")
    assert tree(tmp_path) == {"task.yaml"}


def test_unusable_data_dir_leaves_no_workspace_behind(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(
        "goal: x\nmodel: local:/nonexistent/m.gguf\n", encoding="utf-8")
    (tmp_path / "a-file").write_text("not a directory", encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "a-file", "-q")

    assert result.code != 0, result
    assert "cannot use the data dir" in result.stderr, result
    assert "check that the data dir is writable" in result.stderr, result
    assert "Traceback" not in result.stderr
    assert tree(tmp_path) == {"task.yaml", "a-file"}


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_text", "expected"),
    [
        pytest.param("llm:\n  modle: local\n", ["bad.yaml:2", "llm.modle", "unknown key 'modle'"],
                     id="unknown_key"),
        pytest.param("llm:\n  local:\n    n_ctx: 10\n", ["bad.yaml:3", "llm.local.n_ctx"],
                     id="value_out_of_range"),
        pytest.param("scheduler:\n  max_cycles: often\n",
                     ["bad.yaml:2", "scheduler.max_cycles"], id="wrong_type"),
        pytest.param("log_level: loud\n", ["bad.yaml:1", "log_level"], id="bad_choice"),
        pytest.param("tools: [read]\n", ["bad.yaml:1", "tools"], id="section_not_a_mapping"),
        pytest.param("llm:\n  model: local\n   timeout_s: 3\n", ["bad.yaml:3", "invalid YAML"],
                     id="yaml_syntax"),
        pytest.param("- llm\n", ["bad.yaml:1", "mapping"], id="top_level_list"),
    ],
)
def test_malformed_config_file_is_exit_2_naming_the_key(
    tmp_path: Path, config_text: str, expected: list[str]
) -> None:
    (tmp_path / "bad.yaml").write_text(config_text, encoding="utf-8")
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")

    result = run_in(tmp_path, "--config", "bad.yaml", "run", "task.yaml", "--data-dir", "data")

    assert_usage_error(result, *expected)
    assert tree(tmp_path) == {"bad.yaml", "task.yaml"}


def test_malformed_config_file_fails_config_show_too(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("tools:\n  grep_max_matches: 0\n", encoding="utf-8")

    result = run_in(tmp_path, "--config", "bad.yaml", "config", "show")

    assert_usage_error(result, "bad.yaml:2", "tools.grep_max_matches")


def test_config_file_named_by_flag_but_missing_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")

    result = run_in(tmp_path, "--config", "missing.yaml", "run", "task.yaml", "--data-dir", "d")

    assert_usage_error(result, "missing.yaml: config file not found")
    assert tree(tmp_path) == {"task.yaml"}


def test_malformed_config_yaml_in_the_cwd_is_found_and_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("scheduler:\n  max_cycles: 0\n", encoding="utf-8")
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "data")

    assert_usage_error(result, "config.yaml:2", "scheduler.max_cycles")
    assert tree(tmp_path) == {"config.yaml", "task.yaml"}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        pytest.param("GLIDING_LLM__MODLE", "x", ["GLIDING_LLM__MODLE", "llm.modle"],
                     id="unknown_key"),
        pytest.param("GLIDING_COLOUR", "red", ["GLIDING_COLOUR", "colour"],
                     id="unknown_top_level_key"),
        pytest.param("GLIDING_SCHEDULER__MAX_CYCLES", "0",
                     ["GLIDING_SCHEDULER__MAX_CYCLES", "scheduler.max_cycles"], id="bad_value"),
        pytest.param("GLIDING_LLM", "x", ["GLIDING_LLM", "llm is a section"], id="a_section"),
    ],
)
def test_bad_gliding_environment_variable_is_exit_2_naming_it(
    tmp_path: Path, name: str, value: str, expected: list[str]
) -> None:
    (tmp_path / "task.yaml").write_text(VALID_TASK, encoding="utf-8")

    result = run_in(tmp_path, "run", "task.yaml", "--data-dir", "data", env={name: value})

    assert_usage_error(result, *expected)
    assert tree(tmp_path) == {"task.yaml"}


def test_gliding_config_naming_a_missing_file_is_exit_2(tmp_path: Path) -> None:
    result = run_in(tmp_path, "config", "show", env={"GLIDING_CONFIG": "gone.yaml"})

    assert_usage_error(result, "gone.yaml: config file not found", "GLIDING_CONFIG")


# --- memory show ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iri", "expected"),
    [
        ("not-an-iri", "not a Gliding IRI: 'not-an-iri'"),
        ("http://job/x/result/y", "not a Gliding IRI"),
        ("gliding://jobs/x/result/y", "not a Gliding IRI"),
        ("gliding://job/../result/y", "bad job id '..'"),
        ("gliding://job/x/Result/y", "bad kind 'Result'"),
        ("gliding://job/x/result", "names a kind but no item"),
        ("gliding://job/x/result/a b", "bad segment 'a b'"),
    ],
)
def test_memory_show_with_a_malformed_iri_is_exit_2(
    tmp_path: Path, iri: str, expected: str
) -> None:
    result = run_in(tmp_path, "memory", "show", iri, "--data-dir", "data")

    assert_usage_error(result, expected)
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("cli", [invoke, run_cli], ids=["in_process", "console_script"])
def test_memory_show_of_an_unknown_job_is_exit_3_with_a_hint(
    tmp_path: Path, cli: Callable[..., CLIResult]
) -> None:
    result = cli(["memory", "show", "gliding://job/nojob-1/result/DA-1-0", "--data-dir", "data"],
                 cwd=tmp_path)

    assert result.code == 3, result
    assert result.stdout == b"", result
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: "), result
    assert "'nojob-1' has no archive" in result.stderr, result
    assert "hint: " in result.stderr and "--data-dir" in result.stderr, result
    assert tree(tmp_path) == set()  # looking does not create the data dir


def test_memory_show_of_an_unknown_item_in_a_known_job_is_exit_3(tmp_path: Path) -> None:
    from gliding.memory.archive.store import Archive

    with Archive.open(tmp_path / "data", "job-1") as archive:
        archive.put("gliding://job/job-1/result/a", b"x", kind="result")

    result = run_in(tmp_path, "memory", "show", "gliding://job/job-1/result/b",
                    "--data-dir", "data")

    assert result.code == 3, result
    assert "gliding://job/job-1/result/b is not in the archive" in result.stderr, result
    assert "hint: " in result.stderr
    assert "Traceback" not in result.stderr


# --- version and help -------------------------------------------------------------------------


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    result = run_in(tmp_path, "--version")

    assert result.code == 0, result
    assert result.out == f"gliding {__version__}\n"


def test_help_lists_the_commands_from_the_console_script(tmp_path: Path) -> None:
    result = run_cli(["--help"], cwd=tmp_path)

    assert result.code == 0, result
    for command in ("run", "config", "memory", "--version", "--config"):
        assert command in result.out, result
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("group", ["memory", "config"])
def test_help_of_each_group_lists_show(tmp_path: Path, group: str) -> None:
    result = run_in(tmp_path, group, "--help")

    assert result.code == 0, result
    assert "show" in result.out, result


@pytest.mark.parametrize("cli", [invoke, run_cli], ids=["in_process", "console_script"])
def test_unknown_command_is_a_usage_error_without_traceback(
    tmp_path: Path, cli: Callable[..., CLIResult]
) -> None:
    result = cli(["frobnicate"], cwd=tmp_path)

    assert result.code == 2, result
    assert "Traceback" not in result.stderr
    assert "frobnicate" in result.stderr


@pytest.mark.parametrize("args", [["--transport", "bogus"], ["--transport", "http",
                                                             "--port", "99999"]])
def test_gliding_mcp_refuses_bad_options_with_exit_2(tmp_path: Path, args: list[str]) -> None:
    """``gliding mcp`` becomes the MCP server's own process, which refuses a bad transport or
    port as one error line with exit 2."""
    result = run_cli(["mcp", *args, "--data-dir", str(tmp_path / "data")], cwd=tmp_path)
    assert result.code == 2, result
    assert ("unknown transport 'bogus'" if "bogus" in args
            else "port 99999 is out of range") in result.stderr
    assert "Traceback" not in result.stderr
