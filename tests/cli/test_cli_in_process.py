"""``invoke`` (the CLI in this process) keeps stdout and stderr apart, and leaves no state
behind for the tests that follow: environment, cwd, ``--config``, structlog's configuration and
its loggers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog
from structlog.testing import capture_logs

from gliding.cli.common import state as _state
from tests.cli.cli_support import invoke

FAILING_TASK = "goal: Say hi\nmodel: local:/nonexistent/gliding-test-model.gguf\n"


def test_an_in_process_job_logs_to_stderr_and_leaves_no_state_behind(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(FAILING_TASK, encoding="utf-8")
    (tmp_path / "logging.yaml").write_text("log_level: info\nlog_format: json\n",
                                           encoding="utf-8")
    env_before, cwd_before = dict(os.environ), Path.cwd()
    logging_before = structlog.get_config()

    result = invoke(["--config", "logging.yaml", "run", "task.yaml", "--data-dir", "data", "-q"],
                    cwd=tmp_path, env={"GLIDING_SCHEDULER__MAX_CYCLES": "1"})

    assert result.code == 1, result  # the model file is missing: the job ends in error
    assert "Outcome: ERROR" in result.out
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert events[0] == "job.started" and events[-1] == "job.finished", events
    assert b"job.started" not in result.stdout
    assert dict(os.environ) == env_before
    assert Path.cwd() == cwd_before
    assert _state["config"] is None
    assert structlog.get_config() == logging_before


def test_module_loggers_are_not_left_bound_to_an_earlier_run(tmp_path: Path) -> None:
    from gliding.agents.loop import log  # it logs llm.call.failed in the run below

    (tmp_path / "task.yaml").write_text(FAILING_TASK, encoding="utf-8")
    invoke(["run", "task.yaml", "--data-dir", "data", "-q"], cwd=tmp_path,
           env={"GLIDING_LOG_LEVEL": "error"})

    with capture_logs() as logs:
        log.info("test.after_a_run", n=1)

    assert logs == [{"event": "test.after_a_run", "n": 1, "log_level": "info"}]
