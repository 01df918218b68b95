"""Hooks: commands a host (and, where it allows, a task) runs at lifecycle points of a job.

Points: ``before_tool`` (before a tool call runs; it may refuse the call), ``after_tool``
(after its result is archived), ``before_compaction`` and ``after_compaction`` (a session's
prompt is about to compact, and did: old turns leave it for their L1 lines), ``role_end`` (a
role's session ended), ``job_end`` (the job has its outcome). Each hook is a bash command, run
in the workspace, that gets one JSON document on stdin::

    {"hook": "before_tool", "job": "...", "role": "DA", "session": "DA", "turn": 3,
     "tool": "bash", "arguments": {"command": "rm -rf build"}}

``after_tool`` adds ``ok`` and ``output`` (at most ``OUTPUT_CHARS`` characters, and
``output_cut``: how many more there were); the compaction points have ``role``, ``session``,
``turn`` and ``compactions`` (the session's so far; ``after_compaction`` also
``prompt_tokens``, the prompt's size after it); ``role_end`` has ``role``, ``session``, ``status``
and ``turns``; ``job_end`` has ``outcome``. A hook's message is what it writes on stderr (its
stdout is discarded). Exit 0: go on. Exit 2 from a ``before_tool`` hook refuses the call:
the tool does not run and the agent gets ``refused by a hook: <its stderr>`` as the tool's
error (the ``hook.refused`` event says so too). Any other exit, a timeout, or a hook that
cannot start is logged with a ``hook.failed`` event and the job goes on; with
``fail_closed: true`` a ``before_tool`` hook that fails refuses the call as well.

Hooks run in the job's command sandbox (the workspace read-write, the system read-only, no
network unless the task grants it) unless the host's config says ``sandbox: false`` for one;
a task's hooks run only on a host whose ``hooks.allow_task`` is true, and always in the
sandbox. A replayed call (a resumed job reading a result back from the archive) runs no hook:
they ran when the call did. Hooks are a convenience for policy and notification; the sandbox
is the security boundary.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from gliding.config.settings import HookSettings, Settings, ToolSettings
from gliding.config.task import Task
from gliding.core import events
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.tools.sandbox import Sandbox
from gliding.tools.shell import CommandResult, run_command

log = structlog.get_logger("gliding.hooks")

REFUSE = 2  # the exit code by which a before_tool hook refuses the call
OUTPUT_CHARS = 20_000  # of a tool's output, in an after_tool hook's document
REASON_CHARS = 1_000  # of a hook's stderr, as the agent and the events see it

Publish = Callable[[events.Event], Awaitable[None]]


@dataclass(frozen=True)
class Hooks:
    """The hooks of one job where its agents run, and how to run them."""

    job: str
    hooks: tuple[HookSettings, ...]
    workspace: Path
    tools: ToolSettings
    sandbox: Sandbox | None  # the job's command sandbox (None: the one tools settings ask for)
    publish: Publish | None = None  # where hook.refused / hook.failed events go

    @classmethod
    def of(cls, job: str, task: Task, settings: Settings, sandbox: Sandbox | None,
           publish: Publish | None = None) -> Hooks | None:
        """The host's hooks and, where ``hooks.allow_task`` is true, the task's (sandboxed
        whatever they say); None when there are none. A task's hooks on a host that does not
        allow them are logged once, not run."""
        hooks = list(settings.hooks.run)
        if task.hooks and settings.hooks.allow_task:
            hooks += [h if h.sandbox else h.model_copy(update={"sandbox": True})
                      for h in task.hooks]
        elif task.hooks:
            log.warning("hooks.task.refused", job=job, hooks=len(task.hooks),
                        hint="set hooks.allow_task: true in this host's config to run them")
        if not hooks:
            return None
        return cls(job, tuple(hooks), task.workspace, settings.tools, sandbox, publish)

    async def before_tool(self, *, role: str, session: str, turn: int, tool: str,
                          arguments: Mapping[str, Any]) -> str | None:
        """Run the ``before_tool`` hooks for ``tool``, in order; the reason the first that
        refuses gives (None: every one let the call through)."""
        doc = {"hook": "before_tool", "job": self.job, "role": role, "session": session,
               "turn": turn, "tool": tool, "arguments": dict(arguments)}
        for hook in self._for("before_tool", tool):
            result, error = await self._run(hook, doc)
            if result is not None and result.exit_code == REFUSE:
                reason = _message(result) or "no reason given"
                await self._event(events.HookRefused(hook=self.name(hook), tool=tool,
                                                     session=session, turn=turn,
                                                     reason=reason))
                return reason
            if error is not None:
                await self._failed(hook, "before_tool", error, tool)
                if hook.fail_closed:
                    return f"a hook failed and fails closed: {error}"
        return None

    async def after_tool(self, *, role: str, session: str, turn: int, tool: str,
                         arguments: Mapping[str, Any], ok: bool, output: str) -> None:
        doc = {"hook": "after_tool", "job": self.job, "role": role, "session": session,
               "turn": turn, "tool": tool, "arguments": dict(arguments), "ok": ok,
               "output": output[:OUTPUT_CHARS],
               "output_cut": max(0, len(output) - OUTPUT_CHARS)}
        await self._notify("after_tool", doc, tool)

    async def role_end(self, *, role: str, session: str, status: str, turns: int) -> None:
        await self._notify("role_end", {"hook": "role_end", "job": self.job, "role": role,
                                        "session": session, "status": status,
                                        "turns": turns})

    async def compaction(self, point: str, *, role: str, session: str, turn: int,
                         compactions: int, prompt_tokens: int | None = None) -> None:
        """``before_compaction`` (the session's prompt is about to compact) or
        ``after_compaction`` (it did; ``prompt_tokens`` is the prompt's size now)."""
        doc: dict[str, Any] = {"hook": point, "job": self.job, "role": role,
                               "session": session, "turn": turn, "compactions": compactions}
        if prompt_tokens is not None:
            doc["prompt_tokens"] = prompt_tokens
        await self._notify(point, doc)

    async def job_end(self, outcome: str | None) -> None:
        await self._notify("job_end", {"hook": "job_end", "job": self.job,
                                       "outcome": outcome})

    async def _notify(self, point: str, doc: dict[str, Any], tool: str | None = None) -> None:
        """Run the hooks of a point that cannot refuse anything; failures are events."""
        for hook in self._for(point, tool):
            _result, error = await self._run(hook, doc)
            if error is not None:
                await self._failed(hook, point, error, tool)

    def _for(self, point: str, tool: str | None) -> list[HookSettings]:
        return [h for h in self.hooks if h.at == point and (
            tool is None or not h.tools or any(fnmatch.fnmatchcase(tool, p) for p in h.tools))]

    async def _run(self, hook: HookSettings, doc: dict[str, Any]
                   ) -> tuple[CommandResult | None, str | None]:
        """Run one hook: its result, and what went wrong (None: it exited 0, or 2)."""
        box = self.sandbox if self.sandbox is not None else Sandbox.of(self.tools)
        if not hook.sandbox:
            box = dataclasses.replace(box, mode="off")
        # only stderr comes back: stdout goes to /dev/null, stderr to where stdout was
        wrapped = f"( {hook.command}\n) 2>&1 >/dev/null"
        # ASCII: a model's arguments may hold a lone surrogate, which UTF-8 cannot encode
        payload = json.dumps(doc, ensure_ascii=True, default=str).encode("ascii")
        try:
            result = await run_command(wrapped, self.workspace, self.tools,
                                       timeout_s=hook.timeout_s, sandbox=box, stdin=payload)
        except GlidingError as exc:
            return None, f"could not start: {exc.message}"
        if result.exit_code in (0, REFUSE):
            return result, None
        said = _message(result)
        return result, result.status_line() + (f": {said}" if said else "")

    def name(self, hook: HookSettings) -> str:
        """How events and logs name a hook: its ``name``, else its point and place among the
        job's hooks (never its command, which may hold a webhook's secret)."""
        return hook.name or f"{hook.at} hook {self.hooks.index(hook) + 1}"

    async def _failed(self, hook: HookSettings, point: str, error: str,
                      tool: str | None) -> None:
        log.info("hook.failed", job=self.job, hook=self.name(hook), point=point, tool=tool,
                    error=error)
        await self._event(events.HookFailed(hook=self.name(hook), point=point, error=error,
                                            tool=tool))

    async def _event(self, event: events.Event) -> None:
        if self.publish is not None:
            try:
                await self.publish(event)
            except GlidingError as exc:  # the news is lost, the hook's verdict stands
                log.warning("hook.event.unsent", job=self.job, error=exc.message)


def _message(result: CommandResult) -> str:
    """What a hook said on stderr, one line."""
    return one_line(result.output, REASON_CHARS)
