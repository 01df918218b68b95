"""Helpers for the settings-effect tests: Settings through the real loader, task files, and
scripted jobs whose model plays every role cooperatively.

Settings are always loaded with ``load_settings`` from an explicit ``env`` mapping (the
``GLIDING_*`` layer) and/or a config file or overrides, from a cwd inside tmp, so the loader
path is exercised and neither the developer's environment nor the repository's config.yaml can
leak in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import Task, load_task
from gliding.core.messages import Message
from gliding.daemon.compose import JobHandle, run_job
from gliding.llm.port import LLMRequest
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call

Reply = Message | Callable[[LLMRequest], Message]


def settings_from(cwd: Path, env: Mapping[str, str] | None = None, *,
                  config: Path | None = None, **overrides: Any) -> Settings:
    """Settings loaded from ``config`` < ``env`` < ``overrides`` (dotted keys with '__' for '.').

    Unless the test sets data_dir itself, archives go to ``<cwd>/data``.
    """
    dotted = {key.replace("__", "."): value for key, value in overrides.items()}
    has_data_dir = "GLIDING_DATA_DIR" in (env or {}) or "data_dir" in dotted or config
    if not has_data_dir:
        dotted["data_dir"] = str(cwd / "data")
    return load_settings(config, env=dict(env or {}), overrides=dotted)


def write_task(directory: Path, text: str) -> Task:
    path = directory / "task.yaml"
    path.write_text(text, encoding="utf-8")
    return load_task(path)


def team(*, path: str = "hello.txt", content: str = "Hello, World!",
         decision: str | None = None) -> Callable[[LLMRequest], Message]:
    """One reply function for every role: PA plans, DA writes ``content`` to ``path`` then
    finishes, CA runs the checks then finishes, AA picks ``decision`` when it is offered (else
    the first option it is offered)."""

    def reply(request: LLMRequest) -> Message:
        role = request.meta["role"]
        # what the model may call now: finish only once the role may finish
        now = request.callable_tools if request.callable_tools is not None else request.tools
        tools = {t.name: t for t in now}
        if role == "PA":
            return call("finish", steps=[f"Write {path}"])
        if role == "DA":
            if "finish" in tools:
                return call("finish", summary=f"wrote {path}")
            return call("write_file", path=path, content=content)
        if role == "CA":
            return call("finish", notes="checked") if "finish" in tools else call("run_checks")
        options = tools["finish"].parameters["properties"]["decision"]["enum"]
        chosen = decision if decision in options else options[0]
        return call("finish", decision=chosen, report=f"AA chose {chosen}")

    return reply


@dataclass
class Job:
    handle: JobHandle
    llm: ScriptedLLM
    events: list[JobEvent] = field(default_factory=list)

    def started(self, role: str) -> int:
        """How many times ``role`` was given an assignment."""
        return sum(1 for e in self.events
                   if e.event == "role.started" and e.data["role"] == role)

    def roles_called(self) -> list[str]:
        """The roles that asked the model, in order, each once."""
        return list(dict.fromkeys(str(r.meta["role"]) for r in self.llm.requests))

    def results(self) -> list[str]:
        """Every archived tool result, as text, in order."""
        with Archive.open(self.handle.archive.parents[2], self.handle.report.job,
                          create=False) as archive:
            return [archive.get(item.iri).text() for item in archive.list(kind="result")]


def run_scripted(task: Task, settings: Settings,
                 script: Sequence[Reply] | Mapping[str, Sequence[Reply]]) -> Job:
    llm = ScriptedLLM(script)
    events: list[JobEvent] = []
    handle = anyio.run(lambda: run_job(task, settings, llm=llm, on_event=events.append))
    return Job(handle, llm, events)


def run_team(task: Task, settings: Settings, **kwargs: Any) -> Job:
    """``task`` played by ``team(**kwargs)`` for as many calls as the job makes (at most 200)."""
    return run_scripted(task, settings, [team(**kwargs)] * 200)


def run_one_tool(tmp: Path, settings: Settings, tool: str, **arguments: Any) -> str:
    """A DA-only job whose DA makes one call of ``tool`` in ``tmp/workspace`` and finishes;
    the tool's output as the job archived it."""
    task = write_task(tmp, "goal: Look around the workspace\npipeline: [DA]\n")
    job = run_scripted(task, settings, {"DA": [call(tool, **arguments),
                                               call("finish", summary="looked")]})
    assert job.handle.report.outcome == "success", job.handle.report
    (output,) = job.results()
    return output
