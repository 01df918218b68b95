"""Running a task's success checks, with evidence a correcting agent can act on.

file_exists and file_contains read the workspace (confined like every tool); command checks run
in the bash sandbox (filtered env, own process group, timeout = the check's ``timeout_s``).
A check that cannot be run (a path outside the workspace, an unreadable file) fails with the
reason as its evidence; it never raises.

``ChecksGroup`` is the "check" tool group: it owns the task's checks and offers ``run_checks``,
whose archived result keeps the verdicts as data (``checks``, read by ``outcomes_in``) so
CA's report is the run it made, not a second one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from gliding.bus.messages import CheckOutcome
from gliding.config.settings import ToolSettings
from gliding.core.checks import Check, CheckResult, CommandSucceeds, FileContains, FileExists
from gliding.errors import ToolError
from gliding.tools.base import Tool, ToolContext, ToolGroup, ToolOutput, schema
from gliding.tools.sandbox import Sandbox
from gliding.tools.shell import run_command
from gliding.tools.workspace import display_path, resolve_in_workspace, workspace_root

MAX_LISTED = 20
FILE_START_CHARS = 200
MAX_CONTAINS_BYTES = 20 * 1024 * 1024
OUTPUT_TAIL_CHARS = 500


async def run_checks_on(
    checks: Sequence[Check], workspace: Path, settings: ToolSettings, *,
    sandbox: Sandbox | None = None,
) -> list[CheckResult]:
    """One CheckResult per check, in order; checks run one after another, commands in
    ``sandbox`` (by default the one ``settings`` ask for)."""
    results: list[CheckResult] = []
    for check in checks:
        if isinstance(check, FileExists):
            results.append(await anyio.to_thread.run_sync(_file_exists, check, workspace))
        elif isinstance(check, FileContains):
            results.append(await anyio.to_thread.run_sync(_file_contains, check, workspace))
        elif isinstance(check, CommandSucceeds):
            results.append(await _command(check, workspace, settings, sandbox))
        else:
            results.append(CheckResult(check, False, f"unknown check {check!r}"))
    return results


def _file_exists(check: FileExists, workspace: Path) -> CheckResult:
    try:
        real = resolve_in_workspace(workspace, check.path)
    except ToolError as exc:
        return CheckResult(check, False, f"path refused: {exc.message}")
    shown = display_path(check.path)
    if real.is_dir():
        return CheckResult(check, True, f"{shown} exists (directory)")
    if real.exists():
        return CheckResult(check, True, f"{shown} exists ({real.stat().st_size} bytes)")
    return CheckResult(check, False, f"{shown} does not exist; {_nearby(workspace, real)}")


def _nearby(workspace: Path, missing: Path) -> str:
    """What the nearest existing directory above ``missing`` holds, e.g. 'workspace has: a, b'."""
    root = workspace_root(workspace)
    here = str(missing.parent)
    while here != root and not os.path.isdir(here) and len(here) > len(root):
        here = os.path.dirname(here)
    label = "workspace" if here == root else os.path.relpath(here, root) + "/"
    try:
        names = sorted(
            n + "/" if os.path.isdir(os.path.join(here, n)) else n for n in os.listdir(here)
        )
    except OSError:
        return f"{label} cannot be listed"
    if not names:
        return f"{label} is empty"
    more = f", ... ({len(names) - MAX_LISTED} more)" if len(names) > MAX_LISTED else ""
    return f"{label} has: {', '.join(names[:MAX_LISTED])}{more}"


def _file_contains(check: FileContains, workspace: Path) -> CheckResult:
    expected = f"expected text {check.text!r}"
    try:
        real = resolve_in_workspace(workspace, check.path)
    except ToolError as exc:
        return CheckResult(check, False, f"path refused: {exc.message}; {expected}", check.text)
    shown = display_path(check.path)
    if not real.is_file():
        what = "is a directory" if real.is_dir() else "does not exist"
        return CheckResult(
            check, False, f"{shown} {what}; {_nearby(workspace, real)}; {expected}", check.text
        )
    try:
        with open(real, "rb") as handle:
            text = handle.read(MAX_CONTAINS_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        return CheckResult(check, False, f"cannot read {shown}: {exc}; {expected}", check.text)
    at = text.find(check.text)
    if at >= 0:
        line = text.count("\n", 0, at) + 1
        return CheckResult(check, True, f"found {check.text!r} at line {line}", check.text)
    start = repr(text[:FILE_START_CHARS]) if text else "(file is empty)"
    evidence = f"{expected}; file starts: {start}"
    folded = text.lower().find(check.text.lower())
    if check.text and folded >= 0:
        line = text.count("\n", 0, folded) + 1
        found = text[folded : folded + len(check.text)]
        evidence += f"; found with different case at line {line}: {found!r}"
    return CheckResult(check, False, evidence, check.text)


async def _command(check: CommandSucceeds, workspace: Path, settings: ToolSettings,
                   sandbox: Sandbox | None) -> CheckResult:
    try:
        result = await run_command(check.command, workspace, settings, timeout_s=check.timeout_s,
                                   sandbox=sandbox)
    except ToolError as exc:
        return CheckResult(check, False, f"could not run: {exc.message}", "exit code 0")
    tail = result.tail.rstrip("\n")[-OUTPUT_TAIL_CHARS:]
    shown = f"output tail: {tail!r}" if tail else "no output"
    evidence = f"{result.status_line()}; {shown}"
    return CheckResult(check, result.ok, evidence, "exit code 0")


def format_report(results: Sequence[CheckResult]) -> str:
    """One line per check, ``PASS <check> — evidence: ...``, then a count."""
    lines = [
        f"{r.status.upper()} {r.check.describe()} — evidence: {r.evidence}" for r in results
    ]
    passed = sum(r.passed for r in results)
    lines.append(f"{passed}/{len(results)} checks pass")
    return "\n".join(lines)


def outcome_of(result: CheckResult) -> CheckOutcome:
    """The wire form of one verdict, with what would make it pass."""
    return CheckOutcome(check=result.check.describe(), status="pass" if result.passed else "fail",
                        evidence=result.evidence, expected=result.expected,
                        remedy=result.check.remedy(), path=getattr(result.check, "path", None))


def outcomes_in(data: dict[str, Any]) -> list[CheckOutcome] | None:
    """The verdicts a run_checks result kept (None when ``data`` has none)."""
    raw = data.get("checks")
    if not isinstance(raw, list):
        return None
    return [CheckOutcome.model_validate(item) for item in raw]


class ChecksGroup(ToolGroup):
    """The "check" group: ``run_checks`` over the task's success checks."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)
        super().__init__("check", [Tool(
            "run_checks", "Run the task's success checks; reports PASS/FAIL with evidence.",
            schema(), self._run_checks)], "run the task's success checks")

    async def run(self, ctx: ToolContext) -> list[CheckOutcome]:
        results = await run_checks_on(self.checks, ctx.workspace, ctx.settings,
                                      sandbox=ctx.sandbox)
        return [outcome_of(r) for r in results]

    async def _run_checks(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        if not self.checks:
            return ToolOutput("this task defines no checks", {"checks": []})
        results = await run_checks_on(self.checks, ctx.workspace, ctx.settings,
                                      sandbox=ctx.sandbox)
        return ToolOutput(format_report(results),
                          {"checks": [outcome_of(r).model_dump() for r in results]})
