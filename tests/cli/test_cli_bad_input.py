"""What ``gliding`` shows and keeps when something is off: a logged exception is a bounded plain
traceback without any frame's locals; an event of an unexpected shape (a forged one) is not
rendered and never stops the job; an error's text is one bounded line in the report; and the
files a run writes are its owner's alone (files 0600, directories 0700, an older data
directory tightened at start with one log line)."""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, redirect_stderr
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from gliding.bus import topics
from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.core.logs import configure_logging
from gliding.core.messages import Completion
from gliding.daemon import compose, render
from gliding.daemon.compose import run_job
from gliding.daemon.render import event_line, progress_line, report_dict, report_text
from gliding.errors import LLMError
from gliding.llm.port import LLMRequest
from gliding.testing import ScriptedLLM, call
from tests.cli.cli_support import invoke

pytestmark = pytest.mark.timeout(300)
SECRET_LOCAL = "LOCAL-SECRET-" + "q" * 40
TASK = "goal: Write hello.txt\npipeline: [DA]\nchecks:\n  - file_exists: hello.txt\n"
REPLIES = ("DA:\n  - write_file: {path: hello.txt, content: hi}\n"
           "  - finish: {summary: wrote hello.txt}\n")
EVENTS = ("job.started", "job.sandbox", "job.toolchain.refused", "job.workspace_changed",
          "role.started", "turn", "role.finished", "check.report", "llm.retry", "llm.fallback",
          "guard.tripped", "memory.withheld")


def _fail_deep(depth: int) -> None:
    secret = SECRET_LOCAL  # a local of every frame: none of them may reach the log
    if depth == 0:
        raise RuntimeError("deep\n" + "e" * 200_000 + secret[:0])
    _fail_deep(depth - 1)


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_logged_exception_is_bounded_plain_text(fmt: str) -> None:
    """The daemon's log took 8-86 s and ~11,000 lines for one bad request: every frame's
    locals, rendered on the event loop. Now: the innermost frames, plain, bounded."""
    err = io.StringIO()
    with redirect_stderr(err):
        configure_logging("info", fmt)
        log = structlog.get_logger("test")
        try:
            _fail_deep(200)
        except RuntimeError as exc:
            log.error("daemon.api.crashed", exc_info=exc)
        try:
            _fail_deep(3)
        except RuntimeError:
            log.exception("mcp.job.crashed")  # exc_info=True: the one being handled
    text = err.getvalue()
    assert SECRET_LOCAL not in text
    assert "locals" not in text  # rich's "╭── locals ──╮" boxes
    assert text.count("RuntimeError: deep") == 2, text[:3000]
    assert len(text) < 20_000 and len(text.splitlines()) < 100
    if fmt == "json":
        lines = [json.loads(line) for line in text.splitlines()]
        assert [line["event"] for line in lines] == ["daemon.api.crashed", "mcp.job.crashed"]
        assert all("Traceback" in line["exception"] for line in lines)


def test_events_of_an_unexpected_shape_are_not_rendered_and_logged_once() -> None:
    """A forged ``turn`` event with no data raised KeyError out of ``on_event``."""
    render._UNRENDERED.clear()
    odd: list[Any] = [{}, {"role": None}, {"role": "DA", "turn": 1, "job_cost_usd": "x"},
                      {"passed": False, "failed": 7, "next": None}, {"pipeline": 3}]
    with capture_logs() as logs:
        for name in EVENTS:
            for data in odd:
                line = progress_line(JobEvent(job="j1", event=name, data=data))
                assert line is None or (isinstance(line, str) and "\n" not in line)
            assert event_line({"job": "j1", "event": name, "data": "not a mapping"})
        huge = progress_line(JobEvent(job="j1", event="role.started", data={
            "role": "DA\x1b[2J" + "x" * 100_000, "cycle": 1, "attempt": 1}))
    assert huge is not None and len(huge) <= render.LINE_CHARS and "\x1b" not in huge
    unrendered = [e for e in logs if e["event"] == "cli.event.unrendered"]
    assert sorted(e["event_name"] for e in unrendered) == sorted(
        n for n in EVENTS if n not in ("job.workspace_changed", "job.sandbox"))  # these two
    # show any data: one uses none, the other a warning unless "confined" says otherwise


async def _forged_events(bus: Any, job: str) -> None:
    forged: list[dict[str, Any]] = [{}, {"role": 5}, {"pipeline": None, "kind": [],
                                                       "reason": {}}]
    for data in forged:
        for name in ("turn", "job.started", "check.report", "role.finished"):
            await bus.publish(topics.events(job), JobEvent(job=job, event=name, data=data))


class _Forging:
    """A model that, on its first call, publishes forged progress events on the job's bus
    (as anyone on an unauthenticated broker could), then answers from a script."""

    def __init__(self, script: ScriptedLLM, buses: list[Any], job: str) -> None:
        self.script, self.buses, self.job = script, buses, job

    @property
    def name(self) -> str:
        return self.script.name

    async def complete(self, request: LLMRequest) -> Completion:
        if len(self.script.requests) == 0:
            await _forged_events(self.buses[-1], self.job)
        return await self.script.complete(request)


def test_forged_progress_events_do_not_stop_the_job(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's progress callback (``gliding run``) gets the forged events and the job goes
    on to its outcome."""
    from gliding.cli.common import progress as _progress

    buses: list[Any] = []
    opened = compose.open_bus

    @asynccontextmanager
    async def recording(settings: Any) -> AsyncIterator[Any]:
        async with opened(settings) as bus:
            buses.append(bus)
            yield bus

    monkeypatch.setattr(compose, "open_bus", recording)
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data"),
                                                "memory.vectors.enabled": False})
    llm = _Forging(ScriptedLLM([call("write_file", path="hello.txt", content="hi"),
                                call("finish", summary="wrote hello.txt")]), buses, "forged-1")
    seen: list[JobEvent] = []
    show = _progress(False)

    def on_event(event: JobEvent) -> None:
        seen.append(event)
        show(event)

    err = io.StringIO()
    with redirect_stderr(err):
        handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings,
                                           llm=llm, on_event=on_event, job_id="forged-1"))
    assert handle.report is not None and handle.report.outcome == "success"
    assert sum(1 for e in seen if e.event == "turn" and not e.data) == 1  # the forged one


class _Failing:
    """A model whose every call fails with 800 KB of someone else's traceback."""

    name = "failing"

    async def complete(self, request: LLMRequest) -> Completion:
        raise LLMError("litellm.APIError: upstream said no\nTraceback (most recent call last):\n"
                       + "  File \"x.py\", line 1, in f\n" * 30_000)


def test_low_error_text_clipped(tmp_path: Path) -> None:
    """806 KB of a provider's traceback ended up in a report's ``why`` line; now every record
    of the error (report, its JSON, the printed outcome) keeps its first line, bounded."""
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data"),
                                                "memory.vectors.enabled": False})
    handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings,
                                       llm=_Failing()))
    report = handle.report
    assert report is not None and report.outcome == "error"
    data = report_dict(report, archive=str(handle.archive), model="failing")
    for text in (data["why"], data["stopped"], data["report"]):
        assert "\n" not in text and len(text) <= 600, text[:1000]
        assert "upstream said no" in text
    assert data["why"].startswith("stopped by an error: ")
    assert len(report_text(data)) < 20_000


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        if not path.is_symlink():
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_low_private_files(tmp_path: Path) -> None:
    """Queue, events, archives were 0644 and the data directory 0755: readable by every user
    of the host. A run is under umask 077, and tightens what an older one left, saying so
    once."""
    data = tmp_path / "data"
    (data / "jobs" / "old").mkdir(parents=True)
    (data / "jobs" / "old" / "archive.sqlite3").write_text("x")
    (data / "jobs" / "old").chmod(0o755)
    (data / "jobs" / "old" / "archive.sqlite3").chmod(0o644)
    data.chmod(0o755)
    (data / "elsewhere").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").write_text("not ours")
    (tmp_path / "outside").chmod(0o644)
    (tmp_path / "task.yaml").write_text(TASK, encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    before = os.umask(0o022)
    try:
        info = {"GLIDING_LOG_LEVEL": "info"}
        first = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml", "--data-dir",
                        "data"], cwd=tmp_path, env=info)
        assert os.umask(0o022) == 0o022  # the caller's umask is back
        again = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml",
                        "--data-dir", "data"], cwd=tmp_path, env=info)
    finally:
        os.umask(before)
    assert first.code == 0 and again.code == 0, (first, again)
    assert first.stderr.count("data_dir.tightened") == 1, first.stderr
    assert "entries=4" in first.stderr  # data, jobs, jobs/old, its archive
    assert "data_dir.tightened" not in again.stderr
    modes = _modes(data)
    assert len(modes) > 10  # two jobs' archives, events, the blackboard
    assert {path: mode for path, mode in modes.items() if mode & 0o077} == {}
    assert all(mode & 0o700 == 0o700 for path, mode in modes.items()
               if (data / path).is_dir())
    assert stat.S_IMODE((tmp_path / "outside").stat().st_mode) == 0o644  # not followed


def test_a_commands_files_in_the_workspace_have_the_usual_modes(tmp_path: Path) -> None:
    """Gliding's own files are private (umask 077); what an agent's command makes in the
    workspace is the user's, under umask 022 (a 0600 file would surprise whoever uses it)."""
    (tmp_path / "task.yaml").write_text(
        "goal: Make made.txt\nworkspace: ws\npipeline: [DA]\nchecks:\n  - file_exists: made.txt\n",
        encoding="utf-8")
    (tmp_path / "replies.yaml").write_text(
        "DA:\n  - bash: {command: \"echo hi > made.txt && mkdir sub\"}\n"
        "  - finish: {summary: made}\n", encoding="utf-8")
    result = invoke(["run", "task.yaml", "--model", "scripted:replies.yaml", "--data-dir",
                     "data"], cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "ws" / "made.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "ws" / "sub").stat().st_mode) == 0o755
    archive = next((tmp_path / "data" / "jobs").glob("*/archive.sqlite3"))
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
