"""data_dir, log_level and log_format: where archives land and what the CLI logs on stderr.

The logging tests run the real ``gliding run`` on a job that fails at its first model call
without touching a network or loading a model (``model: local:<missing file>``), so every log
line of a whole job (started, model call failed, finished) shows up within half a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from tests.cli.cli_support import CLIResult, run_cli, tree
from tests.settings_effects.effects_support import run_team, settings_from, write_task

SIMPLE_TASK = "goal: Write hello.txt\npipeline: [DA]\n"
FAILING_TASK = "goal: Say hi\nmodel: local:/nonexistent/gliding-test-model.gguf\n"


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- data_dir ---------------------------------------------------------------------------------


def _archive_files(root: Path) -> list[Path]:
    return sorted(root.rglob("archive.sqlite3"))


@pytest.mark.parametrize(
    ("how", "where"),
    [
        ("env_relative", "rel/archives"),
        ("env_absolute", "abs/archives"),
        ("config_relative_to_the_file", "conf/store"),
        ("override", "over"),
    ],
)
def test_data_dir_is_where_the_archive_lands(tmp: Path, how: str, where: str) -> None:
    env: dict[str, str] = {}
    config = None
    overrides: dict[str, str] = {}
    if how == "env_relative":
        env["GLIDING_DATA_DIR"] = "rel/archives"
    elif how == "env_absolute":
        env["GLIDING_DATA_DIR"] = str(tmp / "abs" / "archives")
    elif how == "config_relative_to_the_file":
        config = tmp / "conf" / "config.yaml"
        config.parent.mkdir()
        config.write_text("data_dir: store\n", encoding="utf-8")
    else:
        overrides["data_dir"] = "over"
    settings = settings_from(tmp, env, config=config, **overrides)
    task = write_task(tmp, SIMPLE_TASK)

    job = run_team(task, settings)

    expected = tmp / where / "jobs" / job.handle.report.job / "archive.sqlite3"
    assert settings.data_dir == (tmp / where).resolve()
    assert job.handle.archive == expected
    assert _archive_files(tmp) == [expected]  # there, and nowhere else


def test_data_dir_default_is_dot_gliding_in_the_cwd(tmp: Path) -> None:
    assert Settings().data_dir == Path(".gliding")
    settings = load_settings(env={})
    task = write_task(tmp, SIMPLE_TASK)

    job = run_team(task, settings)

    assert _archive_files(tmp) == [tmp / ".gliding" / "jobs" / job.handle.report.job /
                                   "archive.sqlite3"]


@pytest.mark.heavy
def test_data_dir_from_the_cli_environment(tmp: Path) -> None:
    (tmp / "task.yaml").write_text(FAILING_TASK, encoding="utf-8")

    result = run_cli(["run", "task.yaml", "-q"], cwd=tmp,
                     env={"GLIDING_DATA_DIR": "from-env"})

    assert result.code == 1, result  # the model file is missing: the job ends in error
    (archive,) = _archive_files(tmp)
    assert archive.parents[2] == tmp / "from-env"
    assert f"Archive: {archive}" in result.out


# --- log_level and log_format -----------------------------------------------------------------


def _run_failing_job(tmp: Path, env: dict[str, str] | None = None,
                     config: str | None = None) -> CLIResult:
    (tmp / "task.yaml").write_text(FAILING_TASK, encoding="utf-8")
    args = ["run", "task.yaml", "--data-dir", "data", "-q"]
    if config is not None:
        (tmp / "logging.yaml").write_text(config, encoding="utf-8")
        args = ["--config", "logging.yaml", *args]
    result = run_cli(args, cwd=tmp, env=env)
    assert result.code == 1, result
    assert "Outcome: ERROR" in result.out
    assert "local model file not found: /nonexistent/gliding-test-model.gguf" in result.out
    return result


def _json_lines(stderr: str) -> list[dict[str, object]]:
    """Every stderr line, parsed as JSON; fails on a line that is not a JSON object."""
    records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert all(isinstance(r, dict) for r in records)
    return records


@pytest.mark.heavy
def test_log_level_info_and_format_json_give_json_lines_of_the_whole_job(tmp: Path) -> None:
    result = _run_failing_job(tmp, {"GLIDING_LOG_LEVEL": "info", "GLIDING_LOG_FORMAT": "json"})

    records = _json_lines(result.stderr)
    events = [r["event"] for r in records]
    assert events[0] == "job.started" and events[-1] == "job.finished", events
    assert {"role.started", "llm.call.failed", "agent.stopped", "role.finished"} <= set(events)
    assert {r["level"] for r in records} == {"info", "warning"}
    failed = next(r for r in records if r["event"] == "llm.call.failed")
    assert failed["level"] == "warning" and failed["role"] == "DA"
    assert "gliding-test-model.gguf" in str(failed["error"])
    assert all("timestamp" in r and "job" in r for r in records)


@pytest.mark.heavy
def test_log_level_warning_drops_info_lines(tmp: Path) -> None:
    result = _run_failing_job(tmp, {"GLIDING_LOG_LEVEL": "warning", "GLIDING_LOG_FORMAT": "json"})

    records = _json_lines(result.stderr)
    assert [(r["event"], r["level"]) for r in records] == [("llm.call.failed", "warning")]


@pytest.mark.heavy
def test_log_level_error_drops_warnings_too(tmp: Path) -> None:
    result = _run_failing_job(tmp, {"GLIDING_LOG_LEVEL": "error", "GLIDING_LOG_FORMAT": "json"})

    assert result.stderr == ""


@pytest.mark.heavy
def test_log_level_debug_keeps_info_lines(tmp: Path) -> None:
    result = _run_failing_job(tmp, {"GLIDING_LOG_LEVEL": "debug", "GLIDING_LOG_FORMAT": "json"})

    assert "job.started" in [r["event"] for r in _json_lines(result.stderr)]


@pytest.mark.heavy
def test_log_format_console_from_the_config_file_is_for_people(tmp: Path) -> None:
    result = _run_failing_job(tmp, config="log_level: info\nlog_format: console\n")

    lines = result.stderr.splitlines()
    assert any("job.started" in line and "[info" in line for line in lines), result.stderr
    assert any("llm.call.failed" in line and "[warning" in line for line in lines)
    for line in lines:
        with pytest.raises(ValueError):
            json.loads(line)


@pytest.mark.heavy
def test_log_format_json_from_the_config_file(tmp: Path) -> None:
    result = _run_failing_job(tmp, config="log_level: info\nlog_format: json\n")

    assert "job.finished" in [r["event"] for r in _json_lines(result.stderr)]


@pytest.mark.heavy
def test_environment_beats_the_config_file_for_logging(tmp: Path) -> None:
    result = _run_failing_job(tmp, {"GLIDING_LOG_FORMAT": "json"},
                              config="log_level: info\nlog_format: console\n")

    assert "job.started" in [r["event"] for r in _json_lines(result.stderr)]


@pytest.mark.heavy
def test_default_logging_shows_only_the_warning_for_people(tmp: Path) -> None:
    defaults = Settings()
    assert (defaults.log_level, defaults.log_format) == ("warning", "console")

    result = _run_failing_job(tmp)

    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "llm.call.failed" in lines[0] and "[warning" in lines[0]
    assert not lines[0].startswith("{")
    assert "data" in tree(tmp)
